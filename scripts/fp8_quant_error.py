#!/usr/bin/env python3
"""scripts/fp8_quant_error.py: the relative quantization error ||q(x) - x|| / ||x|| and the share
flushed to zero of E4M3 and E5M2 under each scale grid (per tensor, per row, 1x128, 1x32 with
power-of-two scales), on a Gaussian tensor and a heavy-tailed one shaped like gradients
(docs/numerics.md). Emulated with ml_dtypes: `.venv/bin/python scripts/fp8_quant_error.py`."""
import numpy as np, ml_dtypes
rng=np.random.default_rng(0)
F={'e4m3':(ml_dtypes.float8_e4m3fn,448.0),'e5m2':(ml_dtypes.float8_e5m2,57344.0)}
def q(x,fmt,block,pow2=False):
    dt,mx=F[fmt]; r,c=x.shape
    if block=='tensor': a=np.abs(x).max(keepdims=True)*np.ones_like(x)
    elif block=='row': a=np.abs(x).max(1,keepdims=True)*np.ones_like(x)
    else:
        b=int(block); xb=x.reshape(r,c//b,b); a=np.repeat(np.abs(xb).max(2),b,1).reshape(r,c)
    s=mx/a
    if pow2: s=2.0**np.floor(np.log2(s))
    y=(x*s).astype(np.float32).astype(dt).astype(np.float32)/s
    return np.linalg.norm(y-x)/np.linalg.norm(x), np.mean((y==0)&(x!=0))
for name,x in [('gaussian',rng.standard_normal((2048,512)).astype(np.float32)),
               ('student-t3 (heavy tails, like dY)',rng.standard_t(3,(2048,512)).astype(np.float32)*1e-4)]:
    print(name)
    for blk,p in [('tensor',False),('row',False),('128',False),('32',True)]:
        out=[]
        for fmt in ('e4m3','e5m2'):
            e,f=q(x,fmt,blk,p); out.append(f'{fmt} {100*e:.2f}% (flushed {100*f:.3f}%)')
        print(f'  {blk if blk not in ("128","32") else "1x"+blk+(" pow2" if p else "")}: '+', '.join(out))
