#!/usr/bin/env python3
"""bench/torch_gemm.py: the torch reference for `octet bench gemm --device cuda`.

Times torch.matmul (bf16 in, bf16 out, in nn::Linear's layouts) and torch._scaled_mm
(E4M3 x E4M3, per-tensor scales, fp32 accumulation, use_fast_accum=True), on operands
quantized beforehand and with a per-tensor current-scaling quantization of both operands
in eager torch counted in, on the shapes octet benchmarks, and prints TFLOP/s.

usage: python3 bench/torch_gemm.py [--shapes-from OCTET.jsonl] [--suite square,llama,te]
                                   [--sizes 1024,...] [--max-size N] [--reps N] [--json FILE]

--shapes-from takes the shapes from `octet bench gemm --device cuda --json` records, so
both measure the same list; otherwise the list is built here the way octet builds it.
Exit status: 0 done, 77 skipped (torch or a GPU missing; the reason on stderr), 1 failures.
"""

import argparse
import json
import statistics
import sys

from bench_records import read_records

SKIP = 77
E4M3_MAX = 448.0

LLAMA = [("llama2-7b", 4096, 11008), ("llama2-13b", 5120, 13824)]
TE_HIDDEN, TE_FFN, TE_TOKENS = 4096, 16384, 15872


def linear_shapes(suite, name, tokens, n_in, n_out):
    base = f"{name} T={tokens} "
    return [
        {"suite": suite, "shape": base + "fprop", "gemm": "fprop", "m": tokens, "n": n_out, "k": n_in},
        {"suite": suite, "shape": base + "dgrad", "gemm": "dgrad", "m": tokens, "n": n_in, "k": n_out},
        {"suite": suite, "shape": base + "wgrad", "gemm": "wgrad", "m": n_out, "n": n_in, "k": tokens},
    ]


def make_shapes(suites, sizes):
    """The list octet's src/cli/bench/bench_gemm_cuda.cpp builds, in the same order."""
    shapes = []
    if "square" in suites:
        shapes += [{"suite": "square", "shape": f"n={n}", "gemm": "square", "m": n, "n": n, "k": n} for n in sizes]
    if "llama" in suites:
        for model, hidden, ffn in LLAMA:
            for tokens in (4096, 16384):
                shapes += linear_shapes(model, "qkv", tokens, hidden, 3 * hidden)
                shapes += linear_shapes(model, "out", tokens, hidden, hidden)
                shapes += linear_shapes(model, "gate_up", tokens, hidden, 2 * ffn)
                shapes += linear_shapes(model, "down", tokens, ffn, hidden)
    if "te" in suites:
        shapes += linear_shapes("te-h200", "fc1", TE_TOKENS, TE_HIDDEN, TE_FFN)
        shapes += linear_shapes("te-h200", "fc2", TE_TOKENS, TE_FFN, TE_HIDDEN)
    return shapes


def shapes_from(path):
    """The distinct (suite, shape) GEMM records of an octet --json file, in file order."""
    seen, shapes = set(), []
    for r in read_records(path, "gemm"):
        if "m" not in r or "suite" not in r:
            continue
        key = (r["suite"], r["shape"])
        if key not in seen:
            seen.add(key)
            shapes.append({k: r[k] for k in ("suite", "shape", "gemm", "m", "n", "k")})
    return shapes


def median_seconds(torch, fn, reps):
    """Seconds per call: the median of `reps` batches of ~20 ms timed with CUDA events,
    after ~0.2 s of warm-up."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    calls = 0
    while True:
        fn()
        calls += 1
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > 200.0:
            break
    per_call_ms = start.elapsed_time(end) / calls
    batch = max(1, min(1000, int(20.0 / max(per_call_ms, 1e-6))))
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / batch)
    return statistics.median(times)


def quantize(torch, x):
    """Per-tensor current scaling in eager torch: scale = 448 / amax, E4M3, saturating."""
    amax = x.abs().amax().float()
    scale = torch.where(amax > 0, E4M3_MAX / amax, torch.ones_like(amax))
    q = (x.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.reciprocal()


def scaled_mm(torch, a, b_t, scale_a, scale_b, out_dtype):
    out = torch._scaled_mm(a, b_t, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype,
                           use_fast_accum=True)
    return out[0] if isinstance(out, tuple) else out  # torch < 2.4 also returned amax


def time_shape(torch, s, reps, fp8):
    m, n, k, kind = s["m"], s["n"], s["k"], s["gemm"]
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)

    def rand(rows, cols):
        return (torch.rand(rows, cols, device=dev, generator=gen) * 2 - 1).to(torch.bfloat16)

    # bf16 in nn::Linear's layouts: fprop A [M, K] B [N, K]; dgrad B = W [K, N];
    # wgrad A = dY [K, M], B = X [K, N].
    if kind in ("square", "fprop"):
        a, b = rand(m, k), rand(n, k)
        bf16 = lambda: torch.matmul(a, b.t())  # noqa: E731
    elif kind == "dgrad":
        a, b = rand(m, k), rand(k, n)
        bf16 = lambda: torch.matmul(a, b)  # noqa: E731
    else:
        a, b = rand(k, m), rand(k, n)
        bf16 = lambda: torch.matmul(a.t(), b)  # noqa: E731
    out = {"bf16": median_seconds(torch, bf16, reps)}
    del a, b
    if not fp8:
        return out
    # _scaled_mm wants A row-major [M, K] and B column-major [K, N]: Wᵀ of a row-major W [N, K].
    out_dtype = torch.float32 if kind == "wgrad" else torch.bfloat16
    a16, b16 = rand(m, k), rand(n, k)
    qa, sa = quantize(torch, a16)
    qb, sb = quantize(torch, b16)
    out["prequantized"] = median_seconds(torch, lambda: scaled_mm(torch, qa, qb.t(), sa, sb, out_dtype), reps)

    def with_quantize():
        qa2, sa2 = quantize(torch, a16)
        qb2, sb2 = quantize(torch, b16)
        return scaled_mm(torch, qa2, qb2.t(), sa2, sb2, out_dtype)

    out["tensor-current"] = median_seconds(torch, with_quantize, reps)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes-from", help="octet bench gemm --json output to take the shapes from")
    p.add_argument("--suite", default="square,llama,te")
    p.add_argument("--sizes", default="1024,2048,4096,8192,16384")
    p.add_argument("--max-size", type=int, default=16384)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", help="write one JSON record per measurement here")
    args = p.parse_args()

    try:
        import torch
    except ImportError as e:
        print(f"torch_gemm: torch is not importable here ({e}); skipping the torch reference",
              file=sys.stderr)
        return SKIP
    if not torch.cuda.is_available():
        print("torch_gemm: torch sees no CUDA GPU here; skipping the torch reference", file=sys.stderr)
        return SKIP
    fp8 = torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "_scaled_mm") \
        and hasattr(torch, "float8_e4m3fn")
    if not fp8:
        print("torch_gemm: no FP8 GEMM here (needs sm_89+ and torch._scaled_mm); timing bf16 only",
              file=sys.stderr)

    if args.shapes_from:
        shapes = shapes_from(args.shapes_from)
    else:
        sizes = [int(x) for x in args.sizes.split(",") if x and int(x) <= args.max_size]
        shapes = make_shapes(args.suite.split(","), sizes)
    device = torch.cuda.get_device_name()
    print(f"torch {torch.__version__} on {device}: torch.matmul bf16 and torch._scaled_mm E4M3 "
          f"(per-tensor scales, use_fast_accum=True); TFLOP/s, (x) = speedup over bf16")
    print(f"{'suite':11} {'shape':24} {'M':>6} {'N':>6} {'K':>6} | {'bf16':>8} | "
          f"{'fp8':>15} | {'fp8+quant cur':>15}")
    print("-" * 108)
    records, failures = [], 0
    for s in shapes:
        flops = 2.0 * s["m"] * s["n"] * s["k"]
        try:
            t = time_shape(torch, s, args.reps, fp8)
        except (RuntimeError, TypeError) as e:  # torch raises RuntimeError for CUDA/shape errors
            print(f"{s['suite']:11} {s['shape']:24} {s['m']:6} {s['n']:6} {s['k']:6} | error: {e}")
            failures += 1
            torch.cuda.empty_cache()
            continue
        cells = []
        for mode in ("prequantized", "tensor-current"):
            cells.append(f"{flops / t[mode] * 1e-12:7.1f} ({t['bf16'] / t[mode]:4.2f}x)" if mode in t else "-")
        print(f"{s['suite']:11} {s['shape']:24} {s['m']:6} {s['n']:6} {s['k']:6} | "
              f"{flops / t['bf16'] * 1e-12:8.1f} | {cells[0]:>15} | {cells[1]:>15}", flush=True)
        for mode, seconds in t.items():
            records.append({
                "bench": "gemm", "impl": "torch", "torch": torch.__version__, "device": device,
                **s, "dtype": "bf16" if mode == "bf16" else "fp8",
                "mode": "none" if mode == "bf16" else mode, "fast_accum": mode != "bf16",
                "seconds": seconds, "tflops": flops / seconds * 1e-12,
                "speedup_vs_bf16": t["bf16"] / seconds})
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
