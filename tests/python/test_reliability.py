"""The reliability guarantees of `octet train` (docs/reliability.md), each held by a test:
kill -9 at seeded random moments (some inside the checkpoint write) and --resume continues
from the checkpoint `latest` names; a full disk fails naming the file and leaves the previous
checkpoint loadable; SIGINT and SIGTERM save and exit 0, and a second SIGINT during that save
exits at once without damaging the previous checkpoint; resuming reproduces an uninterrupted
run bit for bit under every precision and recipe, with gradient accumulation, mid-epoch and
on token shards. The slow disk and the full disk come from test-only hooks at the write call
(src/io/fault_injection.h) where no tmpfs can be mounted."""
import json
import os
import random
import re
import signal
import struct
import subprocess
import time

import pytest

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.abspath(os.path.join(BUILD, "octet"))

# A tiny run: 2 sequences of 16 tokens, 2 micro-batches per step, a 10-sequence epoch (so an
# epoch ends mid-step 3 and step 3's checkpoint is mid-epoch).
SMALL = ["--model", "tiny", "--batch", "2", "--seq-len", "16", "--grad-accum", "2",
         "--train-tokens", "161", "--val-tokens", "200", "--eval-batches", "1",
         "--eval-every", "0", "--warmup", "2"]


def env_with(**faults):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in faults.items()})
    return env


def train(*args, env=None, timeout=300):
    return subprocess.run([OCTET, "train", *SMALL, *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, env=env)


def latest_step(out):
    with open(os.path.join(out, "latest")) as f:
        name = f.read().strip()
    assert re.fullmatch(r"step_\d{8}", name), name
    assert os.path.isdir(os.path.join(out, name)), name
    return int(name[5:])


def complete_steps(out):
    return sorted(int(n[5:]) for n in os.listdir(out) if re.fullmatch(r"step_\d{8}", n))


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def start(*args, env=None):
    return subprocess.Popen([OCTET, "train", *SMALL, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def wait_for_step_line(proc, deadline=120):
    t0 = time.time()
    for line in proc.stdout:
        if re.match(r"step +\d+/", line):
            return line
        assert time.time() - t0 < deadline, "no progress line"
    raise AssertionError("the run ended before its first step: " + proc.stderr.read())


@pytest.mark.parametrize("trial", range(6))
def test_kill_9_at_a_random_moment_then_resume_continues_from_latest(tmp_path, trial):
    rng = random.Random(1000 + trial)
    out = str(tmp_path / "run")
    # Odd trials write slowly (20 ms per write, ~6 writes per checkpoint) so that the kill
    # often lands inside a checkpoint; even trials at full speed.
    env = env_with(OCTET_TEST_WRITE_DELAY_MS=20) if trial % 2 else None
    proc = start("--steps", "400", "--checkpoint-every", "2", "--out", out, "--quiet",
                 "--keep-last", "2", env=env)
    # The seeded moment counts from the first checkpoint (machines differ in speed).
    t0 = time.time()
    while not os.path.exists(os.path.join(out, "latest")):
        assert proc.poll() is None and time.time() - t0 < 120, "no first checkpoint"
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 2.0))
    proc.kill()
    proc.wait()
    step = latest_step(out)
    # `latest` is replaced after the step folder is renamed: it names the newest complete
    # checkpoint, or the one before when the kill fell between the two.
    newest = complete_steps(out)[-1]
    assert newest - 2 <= step <= newest, (step, complete_steps(out))
    temps = [n for n in os.listdir(out) if ".tmp-" in n]
    m = str(tmp_path / "resume.jsonl")
    proc = train("--steps", str(step + 2), "--out", out, "--resume", "--quiet", "--metrics", m,
                 "--keep-last", "2")
    assert proc.returncode == 0, proc.stderr
    assert [r["step"] for r in metrics(m)][-2:] == [step + 1, step + 2]
    assert latest_step(out) == step + 2
    # What the killed run left half-written is gone once the next run starts.
    for name in temps:
        assert not os.path.exists(os.path.join(out, name)), name


def can_mount_tmpfs(path, size):
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path],
                          stderr=subprocess.DEVNULL).returncode == 0


@pytest.mark.parametrize("how", ["tmpfs", "write_hook"])
def test_a_full_disk_names_the_file_and_keeps_the_previous_checkpoint(tmp_path, how):
    out = str(tmp_path / "run")
    os.makedirs(out)
    # tiny's checkpoint is ~1.5 MB (weights 0.5 MB, AdamW moments 1 MB): a 2 MiB tmpfs holds
    # the first and runs out inside the second. Without a tmpfs, writes fail past 100 kB.
    mounted = how == "tmpfs" and can_mount_tmpfs(out, "2m")
    if how == "tmpfs" and not mounted:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount permission)")
    faults = {} if mounted else {"OCTET_TEST_ENOSPC_AFTER_BYTES": 100000}
    try:
        proc = train("--steps", "2", "--out", out, "--quiet")
        assert proc.returncode == 0, proc.stderr
        proc = train("--steps", "6", "--out", out, "--resume", "--quiet", "--checkpoint-every", "2",
                     env=env_with(**faults))
        assert proc.returncode == 2, proc.stderr
        assert "No space left on device" in proc.stderr, proc.stderr
        assert re.search(r"step_00000004\.tmp-\d+/\w+\.safetensors", proc.stderr), proc.stderr
        assert latest_step(out) == 2
        assert not [n for n in os.listdir(out) if ".tmp-" in n]  # the failed write is cleaned up
        # The previous checkpoint still loads.
        proc = subprocess.run([OCTET, "sample", "--checkpoint", out, "--tokens", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        if not mounted:
            proc = train("--steps", "4", "--out", out, "--resume", "--quiet")
            assert proc.returncode == 0, proc.stderr
            assert latest_step(out) == 4
    finally:
        if mounted:
            subprocess.run(["umount", out])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_sigint_and_sigterm_save_and_exit_0(tmp_path, sig):
    out = str(tmp_path / "run")
    proc = start("--steps", "100000", "--out", out, "--log-every", "1")
    wait_for_step_line(proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    stopped = re.search(r"stopped at step (\d+); checkpoint written", stdout)
    assert stopped, stdout
    assert latest_step(out) == int(stopped.group(1))
    proc = train("--steps", str(int(stopped.group(1)) + 1), "--out", out, "--resume", "--quiet")
    assert proc.returncode == 0, proc.stderr


def test_a_second_sigint_during_the_save_exits_at_once_and_keeps_the_previous_checkpoint(
        tmp_path):
    out = str(tmp_path / "run")
    proc = train("--steps", "2", "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    with open(os.path.join(out, "step_00000002", "model.safetensors"), "rb") as f:
        before = f.read()
    # 400 ms per write: the stop's checkpoint takes seconds, and the second SIGINT lands in it.
    proc = start("--steps", "100000", "--out", out, "--resume", "--log-every", "1",
                 env=env_with(OCTET_TEST_WRITE_DELAY_MS=400))
    wait_for_step_line(proc)
    proc.send_signal(signal.SIGINT)
    t0 = time.time()
    while not [n for n in os.listdir(out) if ".tmp-" in n]:
        assert time.time() - t0 < 60 and proc.poll() is None, "the save never started"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    t1 = time.time()
    _, stderr = proc.communicate(timeout=60)
    assert time.time() - t1 < 2.0  # at once: not after the ~2.4 s the save would take
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "second signal: exiting now" in stderr
    assert latest_step(out) == 2
    with open(os.path.join(out, "step_00000002", "model.safetensors"), "rb") as f:
        assert f.read() == before
    proc = train("--steps", "3", "--out", out, "--resume", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def write_shards(folder, vocab=64, seed=5):
    os.makedirs(folder)
    rng = random.Random(seed)
    for name, n in [("train_0.bin", 90), ("train_1.bin", 75), ("val_0.bin", 120)]:
        tokens = [rng.randrange(vocab) for _ in range(n)]
        header = b"OCTETTOK" + struct.pack("<IIQI", 1, 2, n, vocab) + bytes(36)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(header + struct.pack(f"<{n}H", *tokens))


CASES = [("fp32", None), ("bf16", None), ("fp8", "tensor-current"),
         ("fp8", "tensor-delayed:history=4"), ("fp8", "row"), ("fp8", "block"), ("fp8", "mx"),
         ("fp8", "shards")]


@pytest.mark.parametrize("precision,recipe", CASES, ids=[f"{p}-{r}" for p, r in CASES])
def test_resume_is_bitwise_under_every_precision_and_recipe(tmp_path, precision, recipe):
    args = ["--precision", precision, "--steps", "7", "--quiet", "--keep-last", "0"]
    if recipe == "shards":
        shards = str(tmp_path / "shards")
        write_shards(shards)
        args += ["--data", shards]  # 2 shards of 5 and 4 sequences: epochs end mid-step
    elif recipe:
        args += ["--fp8-recipe", recipe]
    straight, resumed = str(tmp_path / "straight"), str(tmp_path / "resumed")
    proc = train(*args, "--out", straight, "--checkpoint-every", "3",
                 "--metrics", str(tmp_path / "straight.jsonl"))
    assert proc.returncode == 0, proc.stderr
    # A run that stopped after step 3 (mid-epoch): only step 3's checkpoint exists.
    os.makedirs(resumed)
    os.rename(os.path.join(straight, "step_00000003"), os.path.join(resumed, "step_00000003"))
    with open(os.path.join(resumed, "latest"), "w") as f:
        f.write("step_00000003\n")
    proc = train(*args, "--out", resumed, "--resume", "--metrics", str(tmp_path / "resumed.jsonl"))
    assert proc.returncode == 0, proc.stderr
    a = metrics(str(tmp_path / "straight.jsonl"))[3:]
    b = metrics(str(tmp_path / "resumed.jsonl"))
    assert [r["step"] for r in b] == [4, 5, 6, 7]
    for x, y in zip(a, b):
        assert (x["loss"], x["grad_norm"], x["lr"]) == (y["loss"], y["grad_norm"], y["lr"]), x["step"]
    for name in ["model.safetensors", "trainer_state.safetensors"]:
        with open(os.path.join(straight, "step_00000007", name), "rb") as f, \
                open(os.path.join(resumed, "step_00000007", name), "rb") as g:
            assert f.read() == g.read(), name
    # trainer_state.json: equal but for the training wall time it records.
    states = []
    for run in (straight, resumed):
        with open(os.path.join(run, "step_00000007", "trainer_state.json")) as f:
            state = json.load(f)
        assert state.pop("wall_s") >= 0
        states.append(state)
    assert states[0] == states[1]
