"""Text in, text out: a SentencePiece tokenizer trained on a small text, the text encoded into
shards (which carry the tokenizer), a small model trained on them (its checkpoints carry the
tokenizer too), and `octet sample` turning a text prompt into text, with --tokenizer only to
override and --ids for token ids."""
import json
import math
import os
import random
import shutil
import string
import subprocess

import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big", "red", "house",
         "and", "then", "slept", "under", "tree", "with", "one", "small", "bird"]
MODEL = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}
STEPS = 60


def octet(*args, check=True):
    proc = subprocess.run([OCTET, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=600)
    if check:
        assert proc.returncode == 0, f"octet {' '.join(args)}: {proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("text")
    rng = random.Random(1)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))) for _ in range(600)]
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n\n".join(docs) + "\n")
    proc = octet("tokenize", "--train", "--input", str(corpus), "--vocab-size", "128",
                 "--model-prefix", str(tmp / "tok" / "tok"), check=False)
    if proc.returncode == 2 and "without SentencePiece" in proc.stderr:
        pytest.skip("this octet was built without SentencePiece")
    assert proc.returncode == 0, proc.stderr
    shards = tmp / "shards"
    octet("tokenize", "--model", str(tmp / "tok" / "tok.model"), "--input", str(corpus),
          "--output", str(shards), "--val-tokens", "2000")
    config = tmp / "model.json"
    config.write_text(json.dumps(MODEL))
    out, metrics = tmp / "run", tmp / "metrics.jsonl"
    octet("train", "--model", str(config), "--data", str(shards), "--steps", str(STEPS),
          "--batch", "4", "--lr", "1e-2", "--warmup", "5", "--eval-every", "30",
          "--eval-batches", "2", "--out", str(out), "--metrics", str(metrics), "--quiet")
    return {"tmp": tmp, "tokenizer": tmp / "tok" / "tok.model", "shards": shards, "out": out,
            "config": config, "metrics": metrics}


def test_the_shards_and_the_checkpoint_carry_the_tokenizer(run):
    original = run["tokenizer"].read_bytes()
    assert (run["shards"] / "tokenizer.model").read_bytes() == original
    step = run["out"] / f"step_{STEPS:08d}"
    assert (step / "tokenizer.model").read_bytes() == original


def assert_corpus_text(text, prompt):
    assert text.startswith(prompt), text
    assert len(text) > len(prompt) + 3, text  # it generated something
    allowed = set(string.ascii_lowercase) | {" ", "\n"}
    assert set(text) <= allowed, text  # decoded pieces, not ids or unknown marks


def test_sample_turns_a_text_prompt_into_text(run):
    # Sampled at temperature 1 (seeded): greedy decoding of a 60-step model mostly repeats the
    # most frequent token, the end of a document, which decodes to nothing.
    proc = octet("sample", "--checkpoint", str(run["out"]), "--prompt", "the cat",
                 "--tokens", "12", "--seed", "3")
    assert_corpus_text(proc.stdout.rstrip("\n"), "the cat")


def test_ids_keeps_token_ids_in_and_out(run):
    proc = octet("sample", "--checkpoint", str(run["out"]), "--ids", "--prompt", "2,5,9",
                 "--tokens", "4", "--temperature", "0")
    ids = [int(t) for t in proc.stdout.strip().split(",")]
    assert ids[:3] == [2, 5, 9] and len(ids) == 7
    assert all(0 <= t < MODEL["vocab_size"] for t in ids)


def test_tokenizer_overrides_and_stands_in_for_a_missing_one(run):
    # A step directory copied without its tokenizer: a text prompt is then read as ids and
    # refused, naming --tokenizer; with --tokenizer it is text again.
    bare = run["tmp"] / "bare"
    shutil.copytree(run["out"] / f"step_{STEPS:08d}", bare)
    (bare / "tokenizer.model").unlink()
    proc = octet("sample", "--checkpoint", str(bare), "--prompt", "the cat", check=False)
    assert proc.returncode == 2
    assert "--prompt: 'the cat' is not a token id" in proc.stderr, proc.stderr
    assert "--tokenizer" in proc.stderr
    proc = octet("sample", "--checkpoint", str(bare), "--tokenizer", str(run["tokenizer"]),
                 "--prompt", "the dog", "--tokens", "12", "--seed", "3")
    assert_corpus_text(proc.stdout.rstrip("\n"), "the dog")


def eval_rows(stdout):
    """{precision: (loss, perplexity)} from octet eval's table."""
    rows = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] in ("fp32", "bf16", "fp8"):
            rows[parts[0]] = (float(parts[1]), float(parts[2]))
    return rows


def test_eval_agrees_with_the_trainers_validation_loss(run):
    with open(run["metrics"]) as f:
        reported = [json.loads(l) for l in f if "val_loss" in l]
    final = [r for r in reported if r["step"] == STEPS][0]["val_loss"]
    # The trainer evaluated --eval-batches 2 of --batch 4 in bf16 (the run's precision, which
    # eval defaults to); eval runs the same forward on the same batches. Both sum the same
    # f32 token losses in the same order; 1e-4 is the bound, printed to 1e-6.
    proc = octet("eval", "--checkpoint", str(run["out"]), "--data", str(run["shards"]),
                 "--batch", "4", "--batches", "2")
    rows = eval_rows(proc.stdout)
    assert list(rows) == ["bf16"], proc.stdout
    assert f"{run['out']}/step_{STEPS:08d} on" in proc.stdout  # the run's latest, via latest
    loss, ppl = rows["bf16"]
    assert abs(loss - final) <= 1e-4, (loss, final)
    assert ppl == pytest.approx(math.exp(loss), rel=1e-4)  # printed to 5 significant digits


def test_eval_reports_each_precision_asked_for(run):
    proc = octet("eval", "--checkpoint", str(run["out"] / f"step_{STEPS:08d}"), "--data",
                 str(run["shards"]), "--batch", "4", "--precision", "fp32,bf16,fp8")
    rows = eval_rows(proc.stdout)
    assert list(rows) == ["fp32", "bf16", "fp8"], proc.stdout
    # One set of weights: bf16 and fp8 rounding move a loss near 3 nats by far less than 0.1.
    for name, (loss, _) in rows.items():
        assert abs(loss - rows["fp32"][0]) < 0.1, (name, rows)
    # By default every full batch of the split: 2000-odd val tokens, 4 x 32 per batch.
    assert "batch(es) of 4 x 32 tokens" in proc.stdout, proc.stdout


def test_eval_without_a_val_split_names_the_data(run, tmp_path):
    proc = octet("eval", "--checkpoint", str(run["out"]), "--data", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert "val" in proc.stderr and str(tmp_path) in proc.stderr, proc.stderr


def test_the_run_directory_holds_what_from_pretrained_loads(run):
    # transformers is not in the test environment: the test checks what
    # LlamaForCausalLM/LlamaTokenizer.from_pretrained(run_dir) read, links into the newest step.
    from safetensors.numpy import load_file
    out = run["out"]
    step = f"step_{STEPS:08d}"
    assert (out / "latest").read_text().strip() == step
    for name in ("config.json", "model.safetensors", "tokenizer.model"):
        link = out / name
        assert link.is_symlink(), name
        assert os.readlink(link) == os.path.join(step, name)  # relative: the run can move
        assert link.read_bytes() == (out / step / name).read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors["model.embed_tokens.weight"].shape == (MODEL["vocab_size"],
                                                          MODEL["hidden_size"])
    assert "lm_head.weight" in tensors
    # octet itself reads the run directory the same way.
    proc = octet("sample", "--checkpoint", str(out), "--ids", "--prompt", "1", "--tokens", "2")
    assert len(proc.stdout.split(",")) == 3


def test_the_links_follow_the_newest_checkpoint(run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(run["out"], out, symlinks=True)
    octet("train", "--model", str(run["config"]), "--data", str(run["shards"]), "--steps",
          str(STEPS + 2), "--batch", "4", "--lr", "1e-2", "--warmup", "5", "--eval-batches", "1",
          "--out", str(out), "--resume", "--quiet")
    newest = f"step_{STEPS + 2:08d}"
    for name in ("config.json", "model.safetensors", "tokenizer.model"):
        assert os.readlink(out / name) == os.path.join(newest, name)
