import re,subprocess,sys
cats=[('gemm-amx',r'amx_tile_and_store|amx_tiles'),('gemm-prologue',r'widen_bf16_avx512|widen_a_tile|pack_panel|transpose16|transpose_tile64|transpose32_words|run_block_gemm|fp8_block_gemm|bf16_amx_gemm|widen_bf16_blocks|widen_bf16_e8m0|widen_pair|mx_on_amx'),
('gemm-onednn',r'JIT|libdnnl'),('quantize',r'scaled_row|columns_avx512|band_avx512|mx_row|encode_run|amax_avx512|transposed_avx512|encode_avx512|mx_encode|rows_avx512|quantize'),
('attention',r'attn::'),('omp',r'libgomp'),('kernel',r'\[k\]'),('adamw',r'adamw'),]
def load(f):
    out=subprocess.run(['perf','report','-i',f,'--no-children','--sort','dso,symbol','--stdio'],capture_output=True,text=True).stdout
    tot=None; d={}
    for l in out.splitlines():
        m=re.search(r'Event count \(approx.\): (\d+)',l)
        if m: tot=int(m[1])/1e6
        m=re.match(r'\s*([\d.]+)%\s+(.*)',l)
        if m: d[m[2]]=float(m[1])
    res={}
    for k,v in d.items():
        c='other'
        for name,rx in cats:
            if re.search(rx,k): c=name;break
        res[c]=res.get(c,0)+v*tot/100
    return res,tot
runs=sys.argv[1:]
R=[load(f) for f in runs]
names=[c for c,_ in cats]+['other']
print('%-14s'%'category'+''.join('%12s'%f.split('-')[-1].replace('.data','').replace('fp8recipe','')[-11:] for f in runs))
for c in names: print('%-14s'%c+''.join('%12.0f'%r[0].get(c,0) for r in R))
print('%-14s'%'total'+''.join('%12.0f'%r[1] for r in R))
