"""`octet bench step` on the CPU: its JSON document, its FLOP count against an independent
Python count, the config it hands to the Hugging Face side, and the reference scripts
(bench/hf_step.py, bench/step_compare.py) skipping cleanly where torch is missing."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def load_hf_step():
    """bench/hf_step.py as a module (it imports torch only inside run())."""
    spec = importlib.util.spec_from_file_location("hf_step", os.path.join(BENCH, "hf_step.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def octet(*args, check=True):
    proc = subprocess.run([OCTET, "bench", "step", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def tiny_json():
    proc = octet("--device", "cpu", "--model", "tiny", "--steps", "2", "--warmup", "1", "--json")
    return json.loads(proc.stdout)  # stdout holds the JSON document and nothing else


def test_tiny_cpu_json_has_a_bf16_and_an_fp8_run_with_positive_throughput(tiny_json):
    doc = tiny_json
    assert doc["bench"] == "step" and doc["device"] == "cpu"
    assert doc["warmup"] == 1 and doc["steps"] == 2
    assert doc["peak_tflops"] is None  # no MFU on the CPU unless --peak-tflops is given
    runs = {(r["precision"], r["recipe"]): r for r in doc["runs"]}
    assert set(runs) == {("bf16", None), ("fp8", "tensor-current")}
    for r in runs.values():
        assert r["error"] is None
        assert r["batch"] == 8 and r["seq"] == 64 and r["tokens_per_step"] == 512
        assert r["parameters"] == 125248
        assert r["step_seconds"] > 0 and r["tokens_per_s"] > 0 and r["model_tflops"] > 0
        assert r["tokens_per_s"] == pytest.approx(512 / r["step_seconds"], rel=1e-12)
        assert r["mfu"] is None
        # Parameters alone: 125248 x (f32 master + grads + 2 AdamW moments) bytes.
        assert r["peak_bytes"] >= 125248 * 16
        assert 0 < r["loss"] < 10  # about ln 256 = 5.55 at the initialisation
        assert r["speedup_vs_bf16"] > 0 and r["peak_bytes_vs_bf16"] > 0
    assert runs[("bf16", None)]["speedup_vs_bf16"] == 1.0
    fp8, bf16 = runs[("fp8", "tensor-current")], runs[("bf16", None)]
    assert fp8["speedup_vs_bf16"] == pytest.approx(bf16["step_seconds"] / fp8["step_seconds"])


def test_no_guard_leaves_out_the_guards_bf16_twin(tiny_json):
    # fp8 runs build the convergence guard's bf16 twin, a second whole model, unless
    # --no-guard: the twin alone holds at least the parameters' f32 master weights and f32
    # gradients, 8 bytes per parameter (and its working weights and activations besides).
    doc = json.loads(octet("--device", "cpu", "--model", "tiny", "--precision", "fp8",
                           "--steps", "1", "--warmup", "0", "--no-guard", "--json").stdout)
    assert tiny_json["guard"] is True and doc["guard"] is False
    with_twin = next(r for r in tiny_json["runs"] if r["precision"] == "fp8")["peak_bytes"]
    without = doc["runs"][0]["peak_bytes"]
    assert with_twin - without >= 125248 * 8


def test_interleave_times_a_cells_runs_together_and_reports_the_same_runs(tiny_json):
    """--interleave steps bf16 and each recipe in turn: the same runs and losses as one after
    the other (the same training steps), medians of the steps, the cell's peak for every run and
    no memory ratio."""
    proc = octet("--device", "cpu", "--model", "tiny", "--steps", "3", "--warmup", "1",
                 "--recipe", "tensor-current,row", "--interleave", "--json")
    doc = json.loads(proc.stdout)
    assert doc["interleave"] is True and tiny_json["interleave"] is False
    runs = {(r["precision"], r["recipe"]): r for r in doc["runs"]}
    assert set(runs) == {("bf16", None), ("fp8", "tensor-current"), ("fp8", "row")}
    one_by_one = octet("--device", "cpu", "--model", "tiny", "--steps", "3", "--warmup", "1",
                       "--recipe", "tensor-current,row", "--json")
    alone = {(r["precision"], r["recipe"]): r for r in json.loads(one_by_one.stdout)["runs"]}
    peaks = {r["peak_bytes"] for r in runs.values()}
    assert len(peaks) == 1  # the cell's: all three trainers at once
    for key, r in runs.items():
        assert r["error"] is None and r["step_seconds"] > 0
        assert r["loss"] == alone[key]["loss"]  # the same four steps of the same runs
        assert r["peak_bytes"] > alone[key]["peak_bytes"]
        assert r["peak_bytes_vs_bf16"] is None
        assert r["speedup_vs_bf16"] == pytest.approx(
            runs[("bf16", None)]["step_seconds"] / r["step_seconds"])
    assert "interleaved" in proc.stderr


def test_tiny_model_flops_match_a_hand_count(tiny_json):
    # Matmul weights: 2 layers x (q 64x64 + k 32x64 + v 32x64 + o 64x64 + 3 x 64x176)
    # + LM head 256x64 = 108544; causal attention 6 x layers 2 x S 64 x d 64 = 49152 per token.
    per_token = 6 * (2 * (4096 + 2048 + 2048 + 4096 + 3 * 11264) + 16384) + 6 * 2 * 64 * 64
    assert per_token == 700416
    for r in tiny_json["runs"]:
        assert r["model_flops_per_step"] == per_token * 512
        assert r["model_tflops"] == pytest.approx(per_token * 512 / r["step_seconds"] * 1e-12)


def test_hf_side_counts_the_same_flops_for_a_gqa_config_with_layers_overridden(tmp_path):
    cfg = {"vocab_size": 101, "hidden_size": 96, "intermediate_size": 160,
           "num_hidden_layers": 3, "num_attention_heads": 6, "num_key_value_heads": 2,
           "max_position_embeddings": 24}
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(cfg))
    doc = json.loads(octet("--model", str(path), "--layers", "1", "--batch", "3", "--seq", "20",
                           "--precision", "bf16", "--steps", "1", "--warmup", "0",
                           "--json").stdout)
    (run,) = doc["runs"]
    assert run["num_hidden_layers"] == 1 and run["error"] is None
    hf_step = load_hf_step()
    expected = hf_step.flops_per_token(dict(cfg, num_hidden_layers=1), 20) * 3 * 20
    assert run["model_flops_per_step"] == expected


def test_named_configs_of_the_hf_side_match_octets():
    hf_step = load_hf_step()
    for name, fields in hf_step.NAMED_CONFIGS.items():
        cfg = json.loads(octet("--model", name, "--print-hf-config").stdout)
        for key, value in dict(hf_step.COMMON, **fields).items():
            assert cfg[key] == value, (name, key)


def test_print_hf_config_applies_layers_and_the_longest_sequence():
    cfg = json.loads(octet("--model", "7b", "--layers", "8", "--seq", "1024,8192",
                           "--print-hf-config").stdout)
    assert cfg["num_hidden_layers"] == 8 and cfg["max_position_embeddings"] == 8192
    assert cfg["hidden_size"] == 4096 and cfg["architectures"] == ["LlamaForCausalLM"]


def test_sweep_prints_the_speedup_table():
    proc = octet("--device", "cpu", "--sweep", "--hidden", "128", "--layers", "1", "--seq",
                 "16,32", "--batch", "1", "--steps", "1", "--warmup", "0")
    out = proc.stdout
    assert "fp8 tensor-current speedup over bf16" in out
    table = out[out.index("speedup over bf16"):]
    assert "1x16" in table and "1x32" in table
    (line,) = [l for l in table.splitlines() if l.strip().startswith("128 |")]
    cells = line.split("|")[1].split()
    assert len(cells) == 2 and all(c.endswith("x") and float(c[:-1]) > 0 for c in cells)


def test_bad_flags_fail_with_the_op_name():
    proc = octet("--model", "tiny", "--recipe", "tensor-curent", check=False)
    assert proc.returncode == 2 and "[recipe] unknown scaling mode 'tensor-curent'" in proc.stderr
    proc = octet("--sweep", "--hidden", "100", check=False)
    assert proc.returncode == 2 and "[bench step]" in proc.stderr


def test_cuda_without_a_gpu_is_a_clear_error():
    version = subprocess.run([os.path.join(BUILD, "octet"), "--version"], stdout=subprocess.PIPE,
                             text=True, check=True).stdout
    if " 0 GPU(s)" not in version:
        pytest.skip("a GPU is visible: the cuda instance runs for real")
    proc = octet("--device", "cuda", "--model", "tiny", check=False)
    assert proc.returncode == 2 and "[bench step] --device cuda needs" in proc.stderr


def test_hf_step_runs_or_skips_cleanly():
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "hf_step.py"), "--model", "tiny",
                           "--device", "cpu", "--batch", "2", "--seq", "16", "--warmup", "0",
                           "--steps", "1", "--json"], stdout=subprocess.PIPE, text=True,
                          timeout=600)
    assert proc.returncode == 0
    record = json.loads(proc.stdout)
    if record["skipped"]:
        assert "torch" in record["skipped"] or "transformers" in record["skipped"]
    else:
        assert record["tokens_per_s"] > 0 and record["attn_implementation"] == "sdpa"
        hf_step = load_hf_step()
        tiny = dict(hf_step.COMMON, **hf_step.NAMED_CONFIGS["tiny"])
        assert record["model_flops_per_step"] == hf_step.flops_per_token(tiny, 16) * 2 * 16


def test_step_compare_puts_ours_and_hf_in_one_record():
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "step_compare.py"), "--octet",
                           OCTET, "--python", sys.executable, "--device", "cpu", "--model",
                           "tiny", "--batch", "2", "--seq", "32", "--warmup", "0", "--steps",
                           "1", "--json"], stdout=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    (result,) = doc["results"]
    assert result["batch"] == 2 and result["seq"] == 32
    assert result["octet_bf16"]["tokens_per_s"] > 0
    assert [r["recipe"] for r in result["octet_fp8"]] == ["tensor-current"]
    # On the CPU the CPU targets are checked: fp8's step time against bf16's.
    assert any(c["check"].startswith("fp8 tensor-current step") for c in result["checks"])
    assert doc["load_before"].startswith("load average")
    hf = result["hf_bf16"]
    assert hf.get("skipped") or hf["tokens_per_s"] > 0


def test_step_compare_keeps_the_fastest_of_its_reps_and_their_range():
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "step_compare.py"), "--octet",
                           OCTET, "--python", sys.executable, "--device", "cpu", "--model",
                           "tiny", "--batch", "2", "--seq", "32", "--warmup", "0", "--steps",
                           "1", "--reps", "3", "--json"], stdout=subprocess.PIPE, text=True,
                          timeout=600)
    assert proc.returncode == 0
    doc = json.loads(proc.stdout)
    assert doc["reps"] == 3
    (result,) = doc["results"]
    for r in [result["octet_bf16"], *result["octet_fp8"]]:
        times = r["step_ms_all"]
        assert len(times) == 3 and all(t > 0 for t in times)
        # The row is the fastest call's (times are rounded to the microsecond).
        assert abs(r["step_seconds"] * 1e3 - min(times)) < 1e-3
    hf = result["hf_bf16"]
    assert hf.get("skipped") or len(hf["step_ms_all"]) == 3


@pytest.mark.parametrize("interleave", [[], ["--interleave"]])
def test_cpu_fp8_recipes_tabulates_every_recipe_for_each_binary(interleave):
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "cpu_fp8_recipes.py"), "--octet",
                           f"a={OCTET}", "--octet", f"b={OCTET}", "--model", "tiny", "--batch",
                           "2", "--seq", "32", "--threads", "1", "--reps", "1", "--warmup", "0",
                           "--steps", "1", *interleave], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| 1 |")]
    # Two tables: the medians, then the fastest calls.
    assert [r.split("|")[2].strip() for r in rows] == ["a", "b", "a", "b"]
    for r in rows:
        cells = [c.strip() for c in r.strip("|").split("|")]
        assert len(cells) == 3 + 5  # threads, binary, bf16 ms, five recipes
        assert all(c.endswith("x)") and float(c.split("(")[1][:-2]) > 0 for c in cells[3:])
