#!/usr/bin/env python3
"""bench/gemm_compare.py: octet's CUDA GEMMs beside torch's, in one table.

Runs `octet bench gemm --device cuda --json` (or reads its output from --octet-json),
then bench/torch_gemm.py on the same shapes, and prints per shape the TFLOP/s of both and
octet / torch for bf16, FP8 on pre-quantized operands and FP8 with per-tensor current
scaling of both operands counted in. Without torch it prints octet's numbers alone.

usage: python3 bench/gemm_compare.py [--octet build/octet] [--octet-json FILE]
                                     [--suite square,llama,te] [--max-size N] [--reps N]
                                     [--json merged.json] [--workdir DIR]
Exit status: 0 done, 77 skipped (no GPU or a build without CUDA), 1 a benchmark failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_records import read_records

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def index(records):
    """(suite, shape) -> {mode: record} for GEMM records."""
    out = {}
    for r in records:
        if r.get("bench") == "gemm" and "m" in r and "suite" in r:
            out.setdefault((r["suite"], r["shape"]), {})[r["mode"]] = r
    return out


def octet_gpus(octet):
    """(CUDA built in, GPUs visible) from `octet --version`."""
    text = subprocess.run([octet, "--version"], capture_output=True, text=True, check=True).stdout
    built = "CUDA built in" in text
    try:
        gpus = int(text.split("CUDA built in,")[1].split("GPU")[0]) if built else 0
    except (IndexError, ValueError):
        gpus = 0
    return built, gpus


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--octet", default=os.path.join(HERE, "..", "build", "octet"))
    p.add_argument("--octet-json", help="octet bench gemm --json output already made (skips running octet)")
    p.add_argument("--suite", default="square,llama,te")
    p.add_argument("--max-size", type=int, default=16384)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", help="write the merged rows here (a JSON list)")
    p.add_argument("--workdir", help="where the intermediate JSON files go (default: a temporary directory)")
    args = p.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="octet-gemm-compare-")
    os.makedirs(workdir, exist_ok=True)
    octet_json = args.octet_json
    if not octet_json:
        if not os.path.exists(args.octet):
            print(f"gemm_compare: no octet binary at {args.octet}; build it or pass --octet", file=sys.stderr)
            return 1
        built, gpus = octet_gpus(args.octet)
        if not built or gpus == 0:
            print("gemm_compare: " + ("this octet was built without CUDA" if not built else "no GPU visible here")
                  + "; nothing to compare", file=sys.stderr)
            return SKIP
        octet_json = os.path.join(workdir, "octet_gemm.jsonl")
        cmd = [args.octet, "bench", "gemm", "--device", "cuda", "--suite", args.suite,
               "--max-size", str(args.max_size), "--reps", str(args.reps), "--json", octet_json]
        print("$ " + " ".join(cmd), flush=True)
        octet_rc = subprocess.run(cmd).returncode
        if not os.path.exists(octet_json):
            print(f"gemm_compare: octet bench gemm failed (exit {octet_rc}) and wrote no JSON", file=sys.stderr)
            return 1
    else:
        if not os.path.exists(octet_json):
            print(f"gemm_compare: no such file: {octet_json}", file=sys.stderr)
            return 1
        octet_rc = 0

    torch_json = os.path.join(workdir, "torch_gemm.jsonl")
    cmd = [sys.executable, os.path.join(HERE, "torch_gemm.py"), "--shapes-from", octet_json,
           "--reps", str(args.reps), "--json", torch_json]
    print("\n$ " + " ".join(cmd), flush=True)
    torch_rc = subprocess.run(cmd).returncode
    have_torch = torch_rc != SKIP and os.path.exists(torch_json)
    if not have_torch:
        print("\ngemm_compare: no torch reference here (see above); octet's numbers alone")

    octet = index(read_records(octet_json))
    torch = index(read_records(torch_json)) if have_torch else {}
    modes = [("none", "bf16"), ("prequantized", "fp8"), ("tensor-current", "fp8+quant cur")]
    print("\nTFLOP/s, octet | torch | octet/torch")
    header = f"{'suite':11} {'shape':24} {'M':>6} {'N':>6} {'K':>6}"
    for _, label in modes:
        header += f" | {label:>22}"
    print(header)
    print("-" * len(header))
    merged = []
    for (suite, shape), by_mode in octet.items():
        first = next(iter(by_mode.values()))
        line = f"{suite:11} {shape:24} {first['m']:6} {first['n']:6} {first['k']:6}"
        row = {"suite": suite, "shape": shape, "m": first["m"], "n": first["n"], "k": first["k"]}
        for mode, label in modes:
            o = by_mode.get(mode)
            t = torch.get((suite, shape), {}).get(mode)
            ours = o["tflops"] if o else None
            theirs = t["tflops"] if t else None
            ratio = ours / theirs if ours and theirs else None
            cell = (f"{ours:6.1f}" if ours else "     -") + " | " + (f"{theirs:6.1f}" if theirs else "     -") \
                + " | " + (f"{ratio:4.2f}" if ratio else "   -")
            line += f" | {cell:>22}"
            row[label] = {"octet_tflops": ours, "torch_tflops": theirs, "octet_over_torch": ratio}
        print(line)
        merged.append(row)
    for r in read_records(octet_json):
        if r.get("gemm") == "layer" and "bf16_tflops" in r:
            print(f"\noctet, Transformer Engine's H200 layer ({r['tokens']} tokens, hidden {r['hidden']}, "
                  f"FFN {r['ffn']}, fc1+fc2 forward and backward): bf16 {r['bf16_tflops']:.1f} TFLOP/s, "
                  f"FP8 tensor-current incl. quantization {r['fp8_tflops']:.1f} TFLOP/s, "
                  f"speedup {r['speedup_vs_bf16']:.2f}x")
            merged.append({k: r[k] for k in ("suite", "shape", "bf16_tflops", "fp8_tflops", "speedup_vs_bf16")})
    print("\nbf16: torch.matmul vs kernels::gemm; fp8: torch._scaled_mm (use_fast_accum=True everywhere) vs "
          "fp8::gemm (fast accumulation on fprop and squares only);\n+quant: eager-torch amax/scale/cast of both "
          "operands vs fp8::quantize (tensor-current).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(merged, f, indent=1)
    return 0 if octet_rc == 0 and torch_rc in (0, SKIP) else 1


if __name__ == "__main__":
    sys.exit(main())
