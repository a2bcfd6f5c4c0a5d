"""tests/python/test_ml_dtypes.py: octet's FP8 conversions against ml_dtypes, bit for bit.

Every f16 and every bf16 bit pattern is converted to E4M3 and E5M2 (non-saturating,
ml_dtypes' behaviour) by octet's array kernel, once per CPU instruction-set variant,
and every FP8 code is decoded to f32; ml_dtypes must agree on every byte (NaN decodes
are compared as NaN with their sign, since payloads are not specified).
"""
import os
import pathlib
import subprocess

import ml_dtypes  # installed by scripts/setup.sh; a missing oracle is an error, not a skip
import numpy as np
import pytest

FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
WIDE = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
ISAS = ["baseline", "avx2", "avx512"]  # capped at what the CPU has (OCTET_CPU_ISA)


def find_tool(name: str) -> pathlib.Path:
    build = os.environ.get("OCTET_BUILD_DIR")
    assert build, "set OCTET_BUILD_DIR to the build folder (ctest does)"
    # tests/CMakeLists.txt builds each tests/tools/*.cpp in the tests/ subfolder.
    for path in (pathlib.Path(build) / "tests" / name, pathlib.Path(build) / name):
        if path.exists():
            return path
    raise AssertionError(f"{name} not found under {build}; build the project first")


@pytest.fixture(scope="module", params=ISAS)
def dump(request, tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp(f"conversions_{request.param}")
    tool = find_tool("dump_conversions")
    env = dict(os.environ, OCTET_CPU_ISA=request.param)
    subprocess.run([str(tool), str(out)], check=True, env=env)
    return out


@pytest.mark.parametrize("wide", sorted(WIDE))
@pytest.mark.parametrize("fp8", sorted(FP8))
def test_every_16bit_input_encodes_like_ml_dtypes(dump, wide, fp8):
    ours = np.fromfile(dump / f"{wide}_to_{fp8}.u8", dtype=np.uint8)
    assert ours.size == 65536
    inputs = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(WIDE[wide])
    with np.errstate(over="ignore", invalid="ignore"):
        theirs = inputs.astype(FP8[fp8]).view(np.uint8)
    bad = np.flatnonzero(ours != theirs)
    assert bad.size == 0, (
        f"{bad.size} of 65536 {wide} inputs differ; first: 0x{bad[0]:04x} "
        f"-> octet 0x{ours[bad[0]]:02x}, ml_dtypes 0x{theirs[bad[0]]:02x}"
    )


@pytest.mark.parametrize("fp8", sorted(FP8))
def test_every_code_decodes_like_ml_dtypes(dump, fp8):
    ours = np.fromfile(dump / f"{fp8}_to_f32.u32", dtype="<u4")
    assert ours.size == 256
    theirs = np.arange(256, dtype=np.uint8).view(FP8[fp8]).astype(np.float32)
    ours_f = ours.view(np.float32)
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours_f), nan)
    assert np.array_equal(np.signbit(ours_f[nan]), np.signbit(theirs[nan]))
    bad = np.flatnonzero((ours != theirs.view(np.uint32)) & ~nan)
    assert bad.size == 0, (
        f"codes {[hex(c) for c in bad[:8]]} decode to {ours_f[bad[:8]]}, "
        f"ml_dtypes: {theirs[bad[:8]]}"
    )
