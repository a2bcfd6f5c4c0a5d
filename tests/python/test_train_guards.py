"""`octet train` and `octet tokenize` refusing runs that would not do what the user meant:
training over an earlier run's checkpoints without --resume or --overwrite, a --val-tokens that
leaves nothing to train on, and (a warning) a model vocabulary larger than the shards'
tokenizer. Each run here is a step or two of the tiny model on a few thousand tokens."""
import os
import random
import subprocess

import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
# One optimizer step of the tiny model on little data: under a second.
QUICK = ["--steps", "1", "--warmup", "0", "--batch", "1", "--eval-batches", "1", "--quiet",
         "--train-tokens", "4096", "--val-tokens", "1024"]


def octet(*args):
    return subprocess.run([OCTET, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)


def test_training_into_an_out_with_checkpoints_needs_resume_or_overwrite(tmp_path):
    out = str(tmp_path / "run")
    first = octet("train", *QUICK, "--out", out)
    assert first.returncode == 0, first.stderr
    assert open(os.path.join(out, "latest")).read().strip() == "step_00000001"

    again = octet("train", *QUICK, "--out", out)
    assert again.returncode == 2
    assert f"[train] --out {out} already holds checkpoints" in again.stderr, again.stderr
    assert "--resume" in again.stderr and "--overwrite" in again.stderr, again.stderr

    # --resume continues it (to step 2); --overwrite starts over (back to step 1 only).
    resumed = octet("train", *QUICK[2:], "--steps", "2", "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(d for d in os.listdir(out) if d.startswith("step_")) == [
        "step_00000001", "step_00000002"]
    keep = os.path.join(out, "notes.txt")  # not octet's: --overwrite leaves it
    with open(keep, "w") as f:
        f.write("mine")
    over = octet("train", *QUICK, "--out", out, "--overwrite")
    assert over.returncode == 0, over.stderr
    assert sorted(d for d in os.listdir(out) if d.startswith("step_")) == ["step_00000001"]
    assert open(os.path.join(out, "latest")).read().strip() == "step_00000001"
    assert os.path.exists(keep)


def test_an_out_without_checkpoints_is_fine(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "readme.txt").write_text("an existing folder with other files")
    proc = octet("train", *QUICK, "--out", str(out))
    assert proc.returncode == 0, proc.stderr


def test_resume_and_overwrite_together_are_refused(tmp_path):
    proc = octet("train", *QUICK, "--out", str(tmp_path), "--resume", "--overwrite")
    assert proc.returncode == 2
    assert "--resume" in proc.stderr and "--overwrite" in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A 128-piece SentencePiece model trained on a small generated text."""
    tmp = tmp_path_factory.mktemp("tok")
    rng = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "big", "red", "house",
             "and", "then", "slept", "under", "tree", "with", "one", "small", "bird"]
    text = "\n\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 15)))
                       for _ in range(400))
    corpus = tmp / "corpus.txt"
    corpus.write_text(text + "\n")
    proc = octet("tokenize", "--train", "--input", str(corpus), "--vocab-size", "128",
                 "--model-prefix", str(tmp / "tok"))
    if proc.returncode == 2 and "without SentencePiece" in proc.stderr:
        pytest.skip("this octet was built without SentencePiece")
    assert proc.returncode == 0, proc.stderr
    return str(tmp / "tok.model"), str(corpus)


def test_val_tokens_larger_than_the_text_names_the_flag(tokenizer, tmp_path):
    model, corpus = tokenizer
    proc = octet("tokenize", "--model", model, "--input", corpus, "--output", str(tmp_path),
                 "--val-tokens", "100000000")
    assert proc.returncode == 2
    assert "--val-tokens 100000000 is not below the inputs'" in proc.stderr, proc.stderr
    assert "lower --val-tokens" in proc.stderr, proc.stderr


def test_a_model_vocab_larger_than_the_tokenizer_warns_with_the_untrained_rows(tokenizer,
                                                                               tmp_path):
    model, corpus = tokenizer
    shards = str(tmp_path / "shards")
    proc = octet("tokenize", "--model", model, "--input", corpus, "--output", shards,
                 "--val-tokens", "2000")
    assert proc.returncode == 0, proc.stderr
    # The tiny model has 256 rows; the tokenizer 128 pieces.
    proc = octet("train", "--data", shards, "--steps", "1", "--batch", "1", "--eval-batches",
                 "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert ("warning: the model's vocab_size (256) is larger than the shards' tokenizer "
            "(128 pieces): 128 rows of the embedding and LM head are never trained"
            in proc.stderr), proc.stderr


def test_metrics_in_a_folder_that_does_not_exist_yet(tmp_path):
    # The README's `--out runs/tiny --metrics runs/tiny.jsonl` on a fresh clone: no runs/ yet.
    metrics = tmp_path / "runs" / "tiny.jsonl"
    proc = octet("train", *QUICK, "--out", str(tmp_path / "runs" / "tiny"), "--metrics",
                 str(metrics))
    assert proc.returncode == 0, proc.stderr
    assert metrics.read_text().count("\n") == 1  # one step, one record
