"""tests/python/test_safetensors.py: octet's safetensors files against the reference library.

octet -> Python: tests/tools/write_safetensors writes tensors of every dtype from formulas; the
`safetensors` library (its Rust parser validates layout and offsets) must read the same names,
dtypes, shapes, values and metadata. Python -> octet: safetensors.numpy.save_file writes a
file, tests/tools/read_safetensors reads it with octet and reports names, dtypes, shapes,
byte checksums and sums, which must match numpy's. A truncated file must be refused by octet.
"""
import json
import math
import os
import pathlib
import subprocess

import ml_dtypes  # installed by scripts/setup.sh; a missing oracle is an error, not a skip
import numpy as np
import pytest
import safetensors
import safetensors.numpy
from safetensors import safe_open

NUMPY_DTYPES = {
    "F32": np.dtype(np.float32),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F16": np.dtype(np.float16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
    "I32": np.dtype(np.int32),
    "U8": np.dtype(np.uint8),
}

# What tests/tools/write_safetensors.cpp writes, in its order k.
WRITTEN = [
    ("model.layers.0.mlp.up_proj.weight_scale_inv", "F8_E8M0", (3, 5, 7)),
    ("model.embed_tokens.weight", "BF16", (32, 24)),
    ("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", (24, 24)),
    ("model.layers.0.input_layernorm.weight", "F32", (24,)),
    ("model.layers.0.self_attn.k_proj.weight", "F8_E5M2", (8, 24)),
    ("model.layers.0.self_attn.v_proj.weight", "F16", (8, 24)),
    ("model.layers.0.self_attn.q_proj.input_scale", "F32", ()),
    ("model.layers.0.mlp.gate_proj.weight", "F16", (2, 1, 3, 5)),
    ("model.layers.0.mlp.down_proj.weight", "U8", (7,)),
    ("token_ids", "I32", (5, 3)),
    ("model.norm.weight", "BF16", (0,)),
    ("lm_head.weight", "F32", (3, 0)),
]


def find_tool(name: str) -> pathlib.Path:
    build = os.environ.get("OCTET_BUILD_DIR")
    assert build, "set OCTET_BUILD_DIR to the build folder (ctest does)"
    for path in (pathlib.Path(build) / "tests" / name, pathlib.Path(build) / name):
        if path.exists():
            return path
    raise AssertionError(f"{name} not found under {build}; build the project first")


def expected_tensor(k: int, st_dtype: str, shape: tuple) -> np.ndarray:
    """The formula of write_safetensors.cpp, recomputed in numpy."""
    n = math.prod(shape)
    i = np.arange(n, dtype=np.int64)
    if st_dtype == "F32":
        f = np.arange(n, dtype=np.float32)
        values = (f - np.float32(n // 2)) * np.float32(0.01) + np.float32(k)
    elif st_dtype in ("BF16", "F16"):
        values = ((((7 * i + k) % 61) - 30) / 8.0).astype(NUMPY_DTYPES[st_dtype])
    elif st_dtype == "I32":
        values = (100003 * i - 700000 + k).astype(np.int32)
    else:  # 8-bit formats: raw codes
        values = ((37 * i + 11 * k) % 256).astype(np.uint8).view(NUMPY_DTYPES[st_dtype])
    return values.reshape(shape)


@pytest.fixture(scope="module")
def octet_file(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("octet_written") / "model.safetensors"
    subprocess.run([str(find_tool("write_safetensors")), str(path)], check=True)
    return path


def test_reference_parser_reads_octet_file_exactly(octet_file):
    # deserialize() is the Rust reader: it rejects bad offsets, gaps and trailing bytes.
    tensors = dict(safetensors.deserialize(octet_file.read_bytes()))
    assert sorted(tensors) == sorted(name for name, _, _ in WRITTEN)
    for k, (name, st_dtype, shape) in enumerate(WRITTEN):
        entry = tensors[name]
        assert entry["dtype"] == st_dtype, name
        assert tuple(entry["shape"]) == shape, name
        ours = np.frombuffer(bytes(entry["data"]), dtype=NUMPY_DTYPES[st_dtype]).reshape(shape)
        theirs = expected_tensor(k, st_dtype, shape)
        # Bytes, so NaN codes of the 8-bit formats compare too.
        assert ours.tobytes() == theirs.tobytes(), f"{name}: {ours.ravel()[:8]} != {theirs.ravel()[:8]}"


def test_safe_open_reads_octet_file_with_numpy(octet_file):
    with safe_open(str(octet_file), framework="numpy") as f:
        assert f.metadata() == {"format": "pt", "producer": "octet"}
        assert sorted(f.keys()) == sorted(name for name, _, _ in WRITTEN)
        for k, (name, st_dtype, shape) in enumerate(WRITTEN):
            view = f.get_slice(name)
            assert view.get_dtype() == st_dtype, name
            assert tuple(view.get_shape()) == shape, name
            if st_dtype.startswith("F8_"):
                continue  # numpy has no FP8 types; covered through deserialize() above
            got = f.get_tensor(name)
            assert got.dtype == NUMPY_DTYPES[st_dtype], name
            np.testing.assert_array_equal(got, expected_tensor(k, st_dtype, shape), err_msg=name)


def test_octet_file_is_aligned_and_padded(octet_file):
    data = octet_file.read_bytes()
    n = int.from_bytes(data[:8], "little")
    raw = data[8 : 8 + n]
    assert n % 8 == 0 and raw.rstrip(b" ").endswith(b"}"), "header must be padded with spaces"
    header = json.loads(raw)
    assert list(header)[0] == "__metadata__"
    for name, info in header.items():
        if name == "__metadata__":
            continue
        size = NUMPY_DTYPES[info["dtype"]].itemsize
        assert info["data_offsets"][0] % size == 0, f"{name} is not aligned to {size} bytes"


def python_tensors() -> dict:
    rng = np.random.default_rng(1234)
    return {
        "model.embed_tokens.weight": rng.standard_normal((17, 8)).astype(ml_dtypes.bfloat16),
        "model.layers.0.self_attn.o_proj.weight": rng.standard_normal((8, 8)).astype(np.float32),
        "model.layers.0.post_attention_layernorm.weight": rng.standard_normal(8).astype(np.float16),
        "model.layers.1.self_attn.q_proj.weight": rng.standard_normal((5, 7, 3)).astype(
            ml_dtypes.float8_e4m3fn
        ),
        "model.layers.1.mlp.down_proj.grad": (rng.standard_normal((6, 4)) * 1000).astype(
            ml_dtypes.float8_e5m2
        ),
        "model.layers.1.mlp.down_proj.weight_scale": np.exp2(rng.integers(-10, 10, (2, 3))).astype(
            ml_dtypes.float8_e8m0fnu
        ),
        "token_ids": rng.integers(-(2**31), 2**31 - 1, (4, 9), dtype=np.int32),
        "bytes": rng.integers(0, 256, 11, dtype=np.uint8),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float16),
    }


def checksum(array: np.ndarray) -> int:
    b = np.frombuffer(array.tobytes(), dtype=np.uint8).astype(np.uint64)
    weights = np.arange(b.size, dtype=np.uint64) % np.uint64(65521) + np.uint64(1)
    return int(np.sum(b * weights, dtype=np.uint64))


def run_reader(path: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(find_tool("read_safetensors")), str(path)], capture_output=True, text=True
    )


def test_octet_reads_file_written_by_reference_library(tmp_path):
    tensors = python_tensors()
    path = tmp_path / "python.safetensors"
    safetensors.numpy.save_file(tensors, str(path), metadata={"format": "pt", "step": "7"})
    result = run_reader(path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["metadata"] == {"format": "pt", "step": "7"}
    ours = {t["name"]: t for t in report["tensors"]}
    assert sorted(ours) == sorted(tensors)
    names_by_dtype = {v: k for k, v in NUMPY_DTYPES.items()}
    for name, array in tensors.items():
        t = ours[name]
        assert t["dtype"] == names_by_dtype[array.dtype], name
        assert tuple(t["shape"]) == array.shape, name
        assert t["checksum"] == checksum(array), name
        values = array.astype(np.float64).ravel()
        exact = math.fsum(values)
        tolerance = 1e-12 * math.fsum(np.abs(values)) + 1e-300
        assert abs(t["sum"] - exact) <= tolerance, f"{name}: octet sums {t['sum']}, numpy {exact}"


def test_octet_refuses_truncated_file_from_reference_library(tmp_path):
    path = tmp_path / "cut.safetensors"
    safetensors.numpy.save_file(python_tensors(), str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    result = run_reader(path)
    assert result.returncode == 1
    assert f"[safetensors] {path}: tensor '" in result.stderr
    assert "extend beyond the data section" in result.stderr
