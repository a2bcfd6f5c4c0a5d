"""`mpirun -np 2 octet bench comm`: one row per collective of a data-parallel step (and the real
--fp8-comm weights path), with the bytes a ring algorithm sends per rank and a positive time;
refused outside mpirun."""
import os
import re
import shutil
import subprocess

BUILD = os.environ.get("OCTET_BUILD_DIR", "build")
OCTET = os.path.abspath(os.path.join(BUILD, "octet"))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMP_NUM_THREADS="1",
           # Under the sanitizers: LeakSanitizer reports Open MPI's own allocations at exit.
           ASAN_OPTIONS="detect_leaks=0")


def test_rows_of_bytes_and_bandwidth_for_tiny_at_two_ranks():
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is missing: install openmpi-bin (scripts/setup.sh)"
    proc = subprocess.run([mpirun, "--oversubscribe", "-np", "2", OCTET, "bench", "comm",
                           "--model", "tiny", "--reps", "3"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "125248 parameters, 2 ranks over mpi" in proc.stdout, proc.stdout
    rows = [l for l in proc.stdout.splitlines() if re.match(r"(all|reduce)-", l)]
    assert len(rows) == 10, proc.stdout
    # tiny's block linears: 2 layers of 64 x 16 x (2 x 4 + 2 x 2) + 3 x 64 x 176 weights.
    block = 2 * (64 * 16 * 12 + 3 * 64 * 176)
    for row in rows:
        buffer_mb, sent_mb, ms, gbs = map(float, row.split()[-4:])
        if "block linears" in row:
            # Their bf16 all-gather (2 bytes each; with or without the quantization that
            # follows it) or the real --fp8-comm weights path (one byte each, plus one f32
            # amax per weight): half of it received per rank.
            width = 2 if "bf16" in row else 1
            assert abs(buffer_mb - width * block / 1e6) < 0.06, row
            assert abs(sent_mb - buffer_mb * 0.5) < 0.06, row
            assert ms > 0 and gbs > 0, row
            continue
        if "fp8 grads" in row:
            # The f32 gradients reduce-scattered with the block linears' half sent as one
            # byte each: between 1/4 and all of the f32 reduce-scatter's half of 4 P bytes.
            assert abs(buffer_mb - 4 * 125248 / 1e6) < 0.06, row
            assert buffer_mb * 0.5 / 4 < sent_mb < buffer_mb * 0.5, row
            assert ms > 0 and gbs > 0, row
            continue
        # f32 buffers are 4 P bytes, bf16 2 P, fp8 P; a ring sends (N-1)/N of them per
        # all-gather or reduce-scatter (here half), twice that per all-reduce.
        width = 4 if "f32" in row else 2 if "bf16" in row else 1
        assert abs(buffer_mb - width * 125248 / 1e6) < 0.06, row
        assert abs(sent_mb - buffer_mb * (1.0 if "all-reduce" in row else 0.5)) < 0.06, row
        assert ms > 0 and gbs > 0, row


def test_one_process_is_refused():
    proc = subprocess.run([OCTET, "bench", "comm", "--model", "tiny"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode != 0
    assert "mpirun" in proc.stderr, proc.stderr


def test_memory_per_rank_by_zero_mode_for_tiny():
    mpirun = shutil.which("mpirun")
    assert mpirun, "mpirun is missing: install openmpi-bin (scripts/setup.sh)"
    proc = subprocess.run([mpirun, "--oversubscribe", "-np", "2", OCTET, "bench", "comm",
                           "--model", "tiny", "--reps", "1", "--memory", "--bucket-mb", "0.1"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120, env=ENV)
    assert proc.returncode == 0, proc.stderr
    rows = {int(l.split()[1]): list(map(float, l.split()[2:]))
            for l in proc.stdout.splitlines() if l.startswith("--zero")}
    assert sorted(rows) == [0, 1, 2], proc.stdout
    p = 125248  # tiny: shards of P / 2 at 2 ranks
    # master, moments (m and v), gradients in MB: ZeRO 0 holds all of P; ZeRO 1 and 2 the
    # master and moments of a shard; ZeRO 1's gradients are the buffer of all P and the
    # reduced shard, ZeRO 2's the shard and two slots of one layer (46080 parameters at 0.1
    # MiB) and the norm weights (5 x 64).
    want = {0: (4 * p, 8 * p, 4 * p), 1: (2 * p, 4 * p, 6 * p),
            2: (2 * p, 4 * p, 2 * p + 4 * (2 * 46080 + 320))}
    for zero, (master, moments, grads) in want.items():
        got = rows[zero]
        for g, w in zip(got, (master / 1e6, moments / 1e6, grads / 1e6)):
            assert abs(g - w) <= 0.006, (zero, got, proc.stdout)
    assert rows[2][2] < rows[1][2], proc.stdout
