# The CPU time of a `perf record -e cpu-clock` profile of `octet bench step`, summed by piece
# (oneDNN JIT code = the GEMMs; the tiled attention by kind of work; the rest) and divided by
# the number of steps. python3 perf-groups.py PERF.DATA STEPS SAMPLE_HZ (steps: warm-up + timed)
import subprocess, sys, re, collections
path, steps, F = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
out = subprocess.run(["perf","report","-i",path,"--no-children","--sort","dso,symbol","-g","none","-F","sample,dso,symbol","--stdio","-q"],capture_output=True,text=True).stdout
g = collections.Counter()
for line in out.splitlines():
    m = re.match(r"\s*(\d+)\s+(\S.*?)\s+\[.\]\s+(.*)", line)
    if not m: continue
    n, dso, sym = int(m.group(1)), m.group(2), m.group(3)
    if 'JIT' in dso: k='gemm (oneDNN JIT)'
    elif 'accumulate' in sym or 'fused_task' in sym or 'dkv_task' in sym or 'dq_task' in sym: k='attn fp32 products'
    elif 'tile_scores' in sym: k='attn bf16 scores'
    elif 'Sleef' in sym: k='exp (SLEEF)'
    elif 'attn::' in sym: k='attn other'
    else: k='rest'
    g[k]+=n
tot=sum(g.values())
for k,v in g.most_common(): print(f"{k:22s} {v/F/steps*1e3:8.1f} CPU ms/step  {100*v/tot:5.1f}%")
print(f"{'total':22s} {tot/F/steps*1e3:8.1f}")
