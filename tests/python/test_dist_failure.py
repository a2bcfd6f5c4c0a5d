"""Failures under `mpirun -np 2 octet train`: an error on one rank is printed with that rank
and ends every rank (MPI_Abort, non-zero exit); a rank killed with SIGKILL makes the others
exit non-zero within 60 s, with a message naming the dead rank. Needs Open MPI's mpirun
(scripts/setup.sh installs it) and an octet built with MPI."""
import os
import shutil
import signal
import subprocess
import time

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.abspath(os.path.join(BUILD, "octet"))
# Open MPI refuses to run as root without these (CI runs as root); one thread per rank.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1",
           # Under the sanitizers: LeakSanitizer reports Open MPI's own allocations at exit.
           ASAN_OPTIONS="detect_leaks=0")
TRAIN = ["train", "--model", "tiny", "--precision", "fp32", "--seq-len", "32", "--batch", "2",
         "--eval-every", "0", "--eval-batches", "1", "--markov-vocab", "64",
         "--train-tokens", "32768", "--val-tokens", "4096"]


def mpirun(*args):
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is missing: install openmpi-bin (scripts/setup.sh)"
    return [mpirun, "--oversubscribe", "-np", "2", OCTET, *args]


def test_an_error_on_rank_0_is_printed_with_its_rank_and_ends_both(tmp_path):
    # Only rank 0 writes into the run directory (run.json, metrics, checkpoints): a file where
    # the --out directory should be fails there, while rank 1 waits for it in a collective.
    blocker = tmp_path / "not_a_directory"
    blocker.write_text("")
    start = time.monotonic()
    proc = subprocess.run(mpirun(*TRAIN, "--steps", "2", "--out", str(blocker / "run")),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=ENV)
    assert proc.returncode != 0
    assert "rank 0 of 2: [" in proc.stderr and "not_a_directory/run" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 60


def rank_pids(root_pid, rank):
    """The pids below root_pid whose environment says OMPI_COMM_WORLD_RANK=rank."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == root_pid and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            found.append(int(entry))
    return found


def test_a_rank_killed_with_sigkill_ends_the_other_within_60_s_naming_it():
    proc = subprocess.Popen(mpirun(*TRAIN, "--steps", "1000000"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=ENV)
    try:
        # Wait until training runs (rank 0's progress lines), then kill rank 1.
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step") and "/1000000" in line and len(lines) > 4:
                break
        victims = rank_pids(proc.pid, 1)
        assert len(victims) == 1, "".join(lines)
        os.kill(victims[0], signal.SIGKILL)
        killed = time.monotonic()
        rest = proc.communicate(timeout=60)[0]
        elapsed = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert elapsed < 60
    # Open MPI's launcher names the rank that died.
    assert "rank 1" in rest and "signal 9" in rest, rest
    print(f"mpirun ended {elapsed:.2f} s after rank 1 was killed")


def test_progress_lines_and_metrics_come_from_rank_0_only(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    proc = subprocess.run(mpirun(*TRAIN, "--steps", "3", "--metrics", str(metrics)),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "data parallel over 2 ranks (mpi), --zero 1, global batch 4" in proc.stdout
    steps = [l for l in proc.stdout.splitlines() if l.startswith("step")]
    assert [s.split()[1] for s in steps] == ["1/3", "2/3", "3/3"], proc.stdout
    assert proc.stdout.count("final val_loss") == 1
    assert len(metrics.read_text().splitlines()) == 3
