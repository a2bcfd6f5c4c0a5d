#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention (causal, GQA) forward,
backward and both on the shapes of `octet bench attention`, in TFLOP/s of the same
causal FLOP count (forward 4 B S^2 Hq hd / 2, backward 2.5x that), and prints
octet's numbers beside torch's when given the JSON lines that
`octet bench attention --json FILE` writes.

    python3 bench/torch_attention.py [--ours FILE] [--shapes 8x2048x32x8x128,...]
                                     [--dtype bf16|f32] [--reps N] [--json FILE]

Without torch or without a CUDA GPU it says so and exits 0 (nothing to compare).
"""
import argparse
import json
import sys

from bench_records import read_records

# The defaults of `octet bench attention`: 16k tokens, Hq=32, Hkv=8 and 32, hd=128 and 64.
DEFAULT_SHAPES = "8x2048x32x8x128,8x2048x32x32x128,2x8192x32x8x128,2x8192x32x32x128," \
                 "8x2048x32x8x64,8x2048x32x32x64,2x8192x32x8x64,2x8192x32x32x64"


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        parts = item.strip().split("x")
        if len(parts) != 5 or not all(p.isdigit() and int(p) > 0 for p in parts):
            sys.exit(f"torch_attention.py: --shapes takes BxSxHqxHkvxhd items, got '{item}'")
        b, s, hq, hkv, hd = map(int, parts)
        if hq % hkv:
            sys.exit(f"torch_attention.py: Hq={hq} is not a multiple of Hkv={hkv} in '{item}'")
        shapes.append((b, s, hq, hkv, hd))
    return shapes


def forward_flops(shape):
    b, s, hq, _, hd = shape
    return 4.0 * b * s * s * hq * hd / 2.0


def median_seconds(torch, fn, reps):
    """Median of `reps` calls timed with CUDA events, after a warm-up of 3 calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def time_shape(torch, shape, dtype, reps):
    b, s, hq, hkv, hd = shape
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(b, hq, s, hd, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, hkv, s, hd, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, hkv, s, hd, device="cuda", dtype=dtype, requires_grad=True)

    def attend():
        try:
            return sdpa(q, k, v, is_causal=True, enable_gqa=True)
        except TypeError:  # torch < 2.5: no enable_gqa; share the kv heads by hand
            rep = hq // hkv
            return sdpa(q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)

    out = attend()
    grad = torch.randn_like(out)

    def backward():
        torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    def both():
        torch.autograd.grad(attend(), (q, k, v), grad)

    fwd = median_seconds(torch, attend, reps)  # with grad on: saves what backward needs, as ours
    bwd = median_seconds(torch, backward, reps)
    fwd_bwd = median_seconds(torch, both, reps)
    return fwd, bwd, fwd_bwd


def load_ours(path):
    ours = {}
    for r in read_records(path, "attention"):
        key = (r["batch"], r["seq_len"], r["n_heads"], r["n_kv_heads"], r["head_dim"])
        ours[key] = r
    return ours


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", help="JSON lines of `octet bench attention --json`")
    parser.add_argument("--shapes", default=None, help="BxSxHqxHkvxhd,... (default: ours' shapes, "
                        "or the octet defaults)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--json", help="also write one JSON record per shape")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        print("torch_attention.py: torch is not installed here; nothing to compare")
        return 0
    if not torch.cuda.is_available():
        print("torch_attention.py: torch sees no CUDA GPU here; nothing to compare")
        return 0

    ours = load_ours(args.ours) if args.ours else {}
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    elif ours:
        shapes = list(ours.keys())
    else:
        shapes = parse_shapes(DEFAULT_SHAPES)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    out = open(args.json, "w") if args.json else None

    print(f"torch {torch.__version__} scaled_dot_product_attention(is_causal=True, enable_gqa=True)"
          f" on {torch.cuda.get_device_name()}, {args.dtype}, median of {args.reps} calls")
    print("TFLOP/s of the causal FLOPs: forward 4 B S^2 Hq hd / 2, backward 2.5x forward;"
          " octet/torch = octet TFLOP/s / torch TFLOP/s\n")
    header = f"{'shape':<34} | {'':<4} | {'forward':>8} | {'backward':>8} | {'fwd+bwd':>8}"
    print(header)
    print("-" * len(header))
    for shape in shapes:
        f = forward_flops(shape)
        b = 2.5 * f
        try:
            fwd, bwd, both = time_shape(torch, shape, dtype, args.reps)
        except torch.cuda.OutOfMemoryError:
            print(f"{str(shape):<34} | out of GPU memory")
            torch.cuda.empty_cache()
            continue
        tf = (f / fwd * 1e-12, b / bwd * 1e-12, (f + b) / both * 1e-12)
        name = "B=%d S=%d Hq=%d Hkv=%d hd=%d" % shape
        print(f"{name:<34} | {'torch':<4} | {tf[0]:8.1f} | {tf[1]:8.1f} | {tf[2]:8.1f}")
        r = ours.get(shape)
        if r:
            o = (r["fwd_tflops"], r["bwd_tflops"], r["fwd_bwd_tflops"])
            print(f"{'':<34} | {'ours':<4} | {o[0]:8.1f} | {o[1]:8.1f} | {o[2]:8.1f}")
            print(f"{'':<34} | {'o/t':<4} | {o[0] / tf[0]:8.2f} | {o[1] / tf[1]:8.2f} | "
                  f"{o[2] / tf[2]:8.2f}")
        sys.stdout.flush()
        if out:
            out.write(json.dumps({
                "bench": "attention", "impl": "torch-sdpa", "torch": torch.__version__,
                "dtype": args.dtype, "batch": shape[0], "seq_len": shape[1], "n_heads": shape[2],
                "n_kv_heads": shape[3], "head_dim": shape[4], "fwd_seconds": fwd,
                "bwd_seconds": bwd, "fwd_bwd_seconds": both, "fwd_tflops": tf[0],
                "bwd_tflops": tf[1], "fwd_bwd_tflops": tf[2]}) + "\n")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
