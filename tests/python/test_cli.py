"""The `octet` command line: every command and subcommand answers --help (exit 0, its usage),
an unknown flag or command fails (exit 2) naming its nearest match, and a bad value fails
(exit 2) naming the flag. Nothing here trains or times anything: every case fails or stops
before a command runs."""
import json
import os
import subprocess

import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")

# Every command that runs something, and the groups that hold them.
COMMANDS = [("train",), ("sample",), ("tokenize",), ("eval",), ("compare",), ("report",),
            ("bench", "gemm"), ("bench", "step"), ("bench", "attention"), ("bench", "quantize")]
GROUPS = [(), ("bench",)]


def octet(*args):
    return subprocess.run([OCTET, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120)


@pytest.mark.parametrize("command", COMMANDS + GROUPS, ids=lambda c: " ".join(c) or "octet")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_exits_0_with_the_usage_of_that_command(command, flag):
    proc = octet(*command, flag)
    assert proc.returncode == 0, proc.stderr
    assert f"Usage: {' '.join(('octet',) + command)} [OPTIONS]" in proc.stdout, proc.stdout
    assert proc.stderr == ""


def test_every_command_lists_its_flags_in_its_help():
    # One flag of each, from the declarations the parser uses.
    expected = {("train",): "--fp8-recipe", ("sample",): "--checkpoint",
                ("tokenize",): "--vocab-size", ("eval",): "--batches", ("compare",): "--target-loss",
                ("report",): "--output", ("bench", "gemm"): "--sizes",
                ("bench", "step"): "--print-hf-config", ("bench", "attention"): "--shapes",
                ("bench", "quantize"): "--counts"}
    for command, flag in expected.items():
        assert flag in octet(*command, "--help").stdout, command
    assert "What the numbers mean" in octet("bench", "step", "--help").stdout


# A near miss of a real flag of each command, and the flag it must suggest.
NEAR_MISSES = {("train",): ("--stepz", "--steps"), ("sample",): ("--tokenz", "--tokens"),
               ("tokenize",): ("--imput", "--input"), ("eval",): ("--precison", "--precision"),
               ("compare",): ("--target-los", "--target-loss"),
               ("report",): ("--outptu", "--output"), ("bench", "gemm"): ("--size", "--sizes"),
               ("bench", "step"): ("--step", "--steps"),
               ("bench", "attention"): ("--shape", "--shapes"),
               ("bench", "quantize"): ("--count", "--counts")}


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_an_unknown_flag_names_its_nearest_match(command):
    typo, meant = NEAR_MISSES[command]
    proc = octet(*command, typo, "1")
    assert proc.returncode == 2, proc.stderr
    assert f"unknown flag '{typo}'; did you mean '{meant}'?" in proc.stderr, proc.stderr
    assert f"octet {' '.join(command)} --help" in proc.stderr


def test_an_unknown_flag_far_from_any_names_no_match():
    proc = octet("train", "--completely-different")
    assert proc.returncode == 2
    assert "unknown flag '--completely-different'" in proc.stderr
    assert "did you mean" not in proc.stderr


def test_an_unknown_flag_given_with_equals_is_named_without_its_value():
    proc = octet("train", "--stepz=5")
    assert proc.returncode == 2
    assert "unknown flag '--stepz'; did you mean '--steps'?" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,meant", [(("trian",), "train"), (("bench", "gemn"), "gemm"),
                                        (("bench", "stpe"), "step")])
def test_an_unknown_command_names_its_nearest_match(args, meant):
    proc = octet(*args)
    assert proc.returncode == 2
    assert f"unknown command '{args[-1]}'; did you mean '{meant}'?" in proc.stderr, proc.stderr


def test_an_unexpected_argument_is_an_error():
    proc = octet("train", "tiny")
    assert proc.returncode == 2
    assert "unexpected argument 'tiny'" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "corpus.txt"
    path.write_text("one document\n\nanother one\n")
    return str(path)


# Bad values, each with what its message must say besides the flag's name.
def bad_values(text_file, tmp_dir):
    return [
        (("train", "--steps", "abc"), "--steps", "expected a number >= 1, got 'abc'"),
        (("train", "--steps", "-1"), "--steps", "must be >= 1, got -1"),
        (("train", "--steps", "0"), "--steps", "must be >= 1, got 0"),
        (("train", "--lr", "0"), "--lr", "must be > 0, got 0"),
        (("train", "--lr", "-1e-3"), "--lr", "must be > 0, got -1e-3"),
        (("train", "--batch", "-2"), "--batch", "must be >= 1, got -2"),
        (("train", "--seq-len", "0"), "--seq-len", "must be >= 1, got 0"),
        (("train", "--seq-len", "-64"), "--seq-len", "must be >= 1, got -64"),
        # beta = 1 would divide by zero in AdamW's bias correction, 1 - beta^t.
        (("train", "--adam-beta2", "1"), "--adam-beta2", "must be >= 0 and < 1, got 1"),
        (("train", "--adam-beta1", "-0.1"), "--adam-beta1", "must be >= 0 and < 1, got -0.1"),
        (("train", "--adam-eps", "0"), "--adam-eps", "must be > 0, got 0"),
        # A flag's value left out: the next flag is not taken for it.
        (("train", "--steps", "--lr", "1e-2"), "--steps", "needs a number, but '--lr' follows it"),
        (("train", "--lr", "1e-2", "--steps"), "--steps", "needs a number, and none follows it"),
        (("train", "--out", "--steps", "3"), "--out", "needs a value, but '--steps' follows it"),
        # A recipe is only for fp8: silently ignoring it would train something else.
        (("train", "--fp8-recipe", "block"), "--fp8-recipe",
         "applies under --precision fp8, and this run is --precision bf16"),
        (("train", "--precision", "fp32", "--fp8-recipe", "row"), "--fp8-recipe",
         "this run is --precision fp32"),
        (("train", "--batch", "0"), "--batch", "must be >= 1, got 0"),
        (("train", "--lr", "fast"), "--lr", "got 'fast'"),
        (("train", "--steps", "1.5"), "--steps", "1.5"),
        (("train", "--precision", "fp16"), "--precision", "fp16"),
        (("train", "--fp8-recipe", "blok"), "--fp8-recipe", "unknown scaling mode 'blok'"),
        (("train", "--device", "gpu"), "--device", "unknown device 'gpu'"),
        (("train", "--min-lr-ratio", "2"), "--min-lr-ratio", "2"),
        (("sample", "--checkpoint", tmp_dir, "--tokens", "-3"), "--tokens", "got -3"),
        (("sample", "--checkpoint", tmp_dir, "--ids", "--prompt", "1,x"), "--prompt", "'x' is not a token id"),
        (("sample", "--checkpoint", os.path.join(tmp_dir, "none")), "--checkpoint", "none"),
        (("sample",), "--checkpoint", "required"),
        (("tokenize", "--input", text_file, "--vocab-size", "abc"), "--vocab-size", "got 'abc'"),
        (("tokenize", "--input", text_file, "--model-type", "wordpiece"), "--model-type",
         "wordpiece"),
        (("tokenize", "--input", text_file, "--split", "para"), "--split", "para"),
        (("tokenize", "--input", os.path.join(tmp_dir, "missing.txt")), "--input", "missing.txt"),
        (("eval", "--checkpoint", tmp_dir, "--data", tmp_dir, "--precision", "bf16,fp16"),
         "--precision", "fp16"),
        (("eval", "--checkpoint", tmp_dir, "--data", tmp_dir, "--batches", "-1"), "--batches",
         "got -1"),
        (("eval", "--checkpoint", tmp_dir), "--data", "required"),
        (("compare", "--target-loss", "abc"), "--target-loss", "got 'abc'"),
        (("compare", "--target-loss", "2", "--precisions", "bf16,fp4"), "--precisions", "fp4"),
        (("compare", "--target-loss", "2", "--max-steps", "0"), "--max-steps", "must be >= 1"),
        (("report", os.path.join(tmp_dir, "no_run")), "runs", "no_run"),
        (("report",), "runs", "required"),
        (("bench", "gemm", "--reps", "-1"), "--reps", "got -1"),
        (("bench", "gemm", "--impl", "blas"), "--impl", "blas"),
        (("bench", "gemm", "--sizes", "256,x"), "--sizes", "x"),
        (("bench", "step", "--steps", "0"), "--steps", "must be >= 1, got 0"),
        (("bench", "step", "--recipe", "tensor-current,rowz"), "--recipe", "rowz"),
        (("bench", "step", "--precision", "bf16,fp4"), "--precision", "fp4"),
        (("bench", "attention", "--reps", "abc"), "--reps", "got 'abc'"),
        (("bench", "attention", "--shapes", "8x2048"), "--shapes", "8x2048"),
        (("bench", "attention", "--dtype", "fp8"), "--dtype", "fp8"),
        (("bench", "quantize", "--fp8", "e4m4"), "--fp8", "e4m4"),
        (("bench", "quantize", "--shapes", "4096"), "--shapes", "4096"),
        (("bench", "quantize", "--input"), "--input", ""),  # no value at all
    ]


def test_a_bad_value_exits_2_naming_the_flag(text_file, tmp_path):
    failures = []
    for args, flag, says in bad_values(text_file, str(tmp_path)):
        proc = octet(*args)
        if proc.returncode != 2 or flag not in proc.stderr or says not in proc.stderr:
            failures.append(f"octet {' '.join(args)}: exit {proc.returncode}, "
                            f"stderr {proc.stderr!r}; expected exit 2 naming {flag} and {says!r}")
    assert not failures, "\n".join(failures)


def test_every_command_has_a_bad_value_case(text_file, tmp_path):
    covered = {tuple(a for a in args[:2] if not a.startswith("-"))
               for args, _, _ in bad_values(text_file, str(tmp_path))}
    assert set(COMMANDS) <= covered, set(COMMANDS) - covered


def test_no_command_prints_the_usage_and_exits_1():
    proc = octet()
    assert proc.returncode == 1
    assert "Usage: octet [OPTIONS] [SUBCOMMAND]" in proc.stdout
    for command in ("train", "sample", "tokenize", "eval", "bench"):
        assert f"\n  {command} " in proc.stdout, command


def test_a_group_without_its_command_names_them():
    proc = octet("bench")
    assert proc.returncode == 2
    assert "name a command: gemm, step, attention, quantize" in proc.stderr, proc.stderr


def test_version_exits_0():
    proc = octet("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("octet ")


def test_errors_of_a_command_that_ran_keep_their_op_and_exit_2():
    # Flags that parse, refused by the command itself.
    proc = octet("bench", "gemm", "--device", "cpu", "--suite", "te")
    assert proc.returncode == 2
    assert "[bench gemm] --max-size and --suite apply to --device cuda" in proc.stderr


def test_a_negative_number_is_a_value_not_a_missing_one():
    # "--lr -1" gives --lr the value -1 (refused as not > 0), not "--lr needs a number".
    proc = octet("train", "--lr", "-1")
    assert proc.returncode == 2
    assert "--lr: must be > 0, got -1" in proc.stderr, proc.stderr


def test_sample_from_a_directory_without_checkpoints_says_so_in_sampling_words(tmp_path):
    proc = octet("sample", "--checkpoint", str(tmp_path))
    assert proc.returncode == 2
    assert f"[sample] --checkpoint {tmp_path} holds no checkpoint to sample from" in proc.stderr
    assert "resume" not in proc.stderr, proc.stderr


def test_device_cuda_without_a_gpu_names_the_command_and_the_flag():
    if " 0 GPU(s) visible" not in octet("--version").stdout:
        pytest.skip("a GPU is visible: --device cuda would train")
    proc = octet("train", "--device", "cuda", "--steps", "1")
    assert proc.returncode == 2
    assert "[train] --device cuda: " in proc.stderr, proc.stderr
    assert "use --device cpu" in proc.stderr, proc.stderr


def test_recipe_with_fp8_is_accepted(tmp_path):
    # The guard refuses a recipe only without fp8: with it the command runs, and stops here at
    # the missing model file.
    missing = str(tmp_path / "none.json")
    proc = octet("train", "--precision", "fp8", "--fp8-recipe", "block", "--model", missing)
    assert proc.returncode == 2
    assert "--fp8-recipe" not in proc.stderr and "none.json" in proc.stderr, proc.stderr


def test_bench_gemm_labels_say_which_way_each_ratio_goes():
    proc = octet("bench", "gemm", "--device", "cpu", "--sizes", "32", "--reps", "1")
    assert proc.returncode == 0, proc.stderr
    header = next(l for l in proc.stdout.splitlines() if l.lstrip().startswith("n |"))
    assert "bf16 speed-up over oblas" in header and "fp8 time / bf16 time" in header, header
    assert "OpenBLAS sgemm time / bf16 time (above 1: bf16 is faster)" in proc.stdout
    assert "time / tensor" in proc.stdout  # the scaling-mode table's ratio, also a time ratio


def test_bench_gemm_layer_times_the_twelve_gemms_of_a_layer_under_each_recipe(tmp_path):
    out = tmp_path / "layer.jsonl"
    proc = octet("bench", "gemm", "--device", "cpu", "--layer", "tiny", "--tokens", "64",
                 "--reps", "1", "--recipe", "tensor-current,row", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # tiny: hidden 64, 4 heads, 2 KV heads (qkv 128), FFN 176 (gate and up 352); T = 64.
    shapes = {("qkv", "fwd"): (64, 128, 64), ("qkv", "dgrad"): (64, 64, 128),
              ("qkv", "wgrad"): (128, 64, 64), ("o", "fwd"): (64, 64, 64),
              ("gate_up", "fwd"): (64, 352, 64), ("gate_up", "wgrad"): (352, 64, 64),
              ("down", "fwd"): (64, 64, 176), ("down", "dgrad"): (64, 176, 64)}
    assert len(records) == 12 * 2, records
    for r in records:
        assert r["recipe"] in ("tensor-current", "row"), r
        assert r["bf16_seconds"] > 0 and r["fp8_seconds"] > 0, r
        want = shapes.get((r["linear"], r["gemm"]))
        if want:
            assert (r["m"], r["n"], r["k"]) == want, r
    assert "layer    all" in proc.stdout
    refused = octet("bench", "gemm", "--device", "cuda", "--layer", "tiny")
    assert refused.returncode == 2
    assert "[bench gemm] --layer applies to --device cpu" in refused.stderr, refused.stderr
