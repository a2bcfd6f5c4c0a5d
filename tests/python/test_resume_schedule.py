"""Resuming with a larger --steps keeps the run's learning-rate schedule (the cosine planned
for the first --steps, then its final lr), and --extend-schedule re-plans the cosine over the
new --steps; both say so when they start. Checked on the lr each step records in --metrics."""
import json
import math
import os
import subprocess

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.join(BUILD, "octet")
LR, MIN_RATIO = 1e-2, 0.1
COMMON = ["--warmup", "0", "--lr", str(LR), "--min-lr-ratio", str(MIN_RATIO), "--batch", "1",
          "--eval-batches", "1", "--train-tokens", "4096", "--val-tokens", "1024"]


def octet(*args):
    proc = subprocess.run([OCTET, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def cosine(step, planned):
    progress = min(1.0, step / planned)
    lo = LR * MIN_RATIO
    return lo + 0.5 * (LR - lo) * (1 + math.cos(math.pi * progress))


def lrs(path):
    with open(path) as f:
        return {r["step"]: r["lr"] for r in map(json.loads, f)}


def resumed_run(tmp_path, *extra):
    out, metrics = str(tmp_path / "run"), str(tmp_path / "m.jsonl")
    octet("train", *COMMON, "--steps", "4", "--out", out, "--quiet")
    stdout = octet("train", *COMMON, "--steps", "8", "--out", out, "--resume", "--metrics",
                   metrics, *extra)
    return stdout, lrs(metrics)


# The recorded lr is the f32 the optimizer used: relative error up to 2^-24.
REL = 2.0 ** -23


def test_resume_with_more_steps_keeps_the_schedule(tmp_path):
    stdout, lr = resumed_run(tmp_path)
    assert sorted(lr) == [5, 6, 7, 8]
    for step, value in lr.items():  # the 4-step cosine ended at lr x min_lr_ratio
        assert math.isclose(value, LR * MIN_RATIO, rel_tol=REL), (step, value)
    assert "keeping the run's cosine over 4 steps (--steps is 8)" in stdout, stdout
    assert "--extend-schedule re-plans it over 8 steps" in stdout, stdout
    state = json.load(open(tmp_path / "run" / "step_00000008" / "trainer_state.json"))
    assert state["schedule_steps"] == 4  # a further resume keeps it too


def test_extend_schedule_replans_the_cosine_over_the_new_steps(tmp_path):
    stdout, lr = resumed_run(tmp_path, "--extend-schedule")
    for step, value in lr.items():
        assert math.isclose(value, cosine(step, 8), rel_tol=REL), (step, value, cosine(step, 8))
    assert lr[5] > 2 * LR * MIN_RATIO  # the jump the user asked for
    assert "--extend-schedule re-plans the cosine from 4 to 8 steps" in stdout, stdout
    state = json.load(open(tmp_path / "run" / "step_00000008" / "trainer_state.json"))
    assert state["schedule_steps"] == 8
