"""scripts/probe_fp8_accumulator.py: the FP8 tensor cores' accumulator, through
torch._scaled_mm (cuBLASLt): how many bits of a small addend survive next to a large one
(256 + 256 * 2^-j), with and without fast accumulation, for K up to 256; and the largest
|error| / sum |a||b| of random e4m3 GEMMs against float64 for K up to 16384. Needs a GPU and
torch; docs/perf/gpu-h100.md and docs/numerics.md have one run's answer.

  python3 scripts/probe_fp8_accumulator.py
"""
import torch
dev = "cuda"
one = torch.ones((), device=dev)
for fast in (False, True):
    for K in (16, 32, 64, 128, 256):
        res = []
        for j in range(8, 26):
            a = torch.zeros(16, K, device=dev); b = torch.zeros(16, K, device=dev)
            a[0, 0] = 16.0; b[0, 0] = 16.0   # 256, then 256 * 2^-j last (e4m3 reaches 2^-9)
            a[0, K - 1] = 2.0 ** -((j - 8) // 2); b[0, K - 1] = 2.0 ** -((j - 8) - (j - 8) // 2)
            out = torch._scaled_mm(a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(),
                                   scale_a=one, scale_b=one, out_dtype=torch.float32,
                                   use_fast_accum=fast)[0, 0].item()
            res.append(f"{j}:{'kept' if out == 256.0 * (1 + 2.0 ** -j) else ('lost' if out == 256.0 else out)}")
        print(f"fast={fast} K={K} 1 + 2^-j (j: result) " + " ".join(res))
    # random data: relative error against float64, against the gamma_K(2^-24) and K*2^-13 bounds
    g = torch.Generator(device=dev).manual_seed(1)
    for K in (64, 256, 1024, 4096, 16384):
        a = torch.randn(256, K, device=dev, generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(256, K, device=dev, generator=g).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=fast).double()
        ref = a.double() @ b.double().t()
        absref = a.double().abs() @ b.double().abs().t()
        r = ((out - ref).abs() / absref).max().item()
        print(f"fast={fast} K={K}: max |err| / sum|a||b| = {r:.3e}  (2^-13 = {2**-13:.3e}, K*2^-24 = {K*2**-24:.3e})")
