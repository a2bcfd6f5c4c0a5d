#!/usr/bin/env python3
"""bench/hf_step.py: the Hugging Face reference beside `octet bench step`.

Builds transformers' LlamaForCausalLM from the same config (a config.json that
`octet bench step --print-hf-config` writes, or the same named sizes), randomly initialised
(no download), in bf16 with torch's fused attention (attn_implementation="sdpa"), and times
warm-up then timed training steps on random tokens at the same batch and sequence length:
forward with the loss, backward, gradient clipping at 1.0 and AdamW (fused where torch has
it), as octet's step does. Prints tokens/s, step time, model TFLOP/s and MFU (octet's FLOP
formula, src/cli/bench/step_model.h) and peak memory (torch.cuda.max_memory_allocated from before the
model is built).

Where torch, transformers or the GPU is missing it says so and exits 0 ("skipped" in --json).

  python bench/hf_step.py --config cfg.json --batch 8 --seq 2048 [--json]
  python bench/hf_step.py --model 7b --layers 8 --batch 4 --seq 4096
"""
import argparse
import json
import sys
import time

# The named sizes of src/model/config.cpp (llama_config_by_name); tests/python/
# test_bench_step.py checks that they match `octet bench step --print-hf-config`.
NAMED_CONFIGS = {
    "tiny": dict(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
    "small": dict(vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512),
    "1b": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
               num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048),
    "7b": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096),
}
COMMON = dict(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu",
              attention_bias=False, mlp_bias=False)
HOPPER_BF16_DENSE_TFLOPS = 989.4  # H100/H200 SXM, as octet bench step


def load_config(args):
    """The model config as a dict of LlamaConfig fields (no torch needed)."""
    if args.config:
        with open(args.config) as f:
            config = json.load(f)
        label = args.config
    else:
        if args.model not in NAMED_CONFIGS:
            raise SystemExit(f"hf_step: unknown --model {args.model!r}; expected one of "
                             f"{', '.join(NAMED_CONFIGS)} or --config config.json")
        config = dict(COMMON, **NAMED_CONFIGS[args.model])
        label = args.model
    if args.layers:
        config["num_hidden_layers"] = args.layers
        label += f"/{args.layers}L"
    return config, label


def flops_per_token(c, seq):
    """Model FLOPs per token of forward + backward, exactly as octet's step_flops_per_token
    (src/cli/bench/step_model.h derives it): 6 x matmul weights (block linears + LM head) plus the
    causal attention core 6 x layers x seq x heads x head_dim."""
    d, f, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    h, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = d // h
    per_layer = d * (h + 2 * kv) * hd + h * hd * d + 3 * d * f
    matmul = layers * per_layer + c["vocab_size"] * d
    return 6 * matmul + 6 * layers * seq * h * hd


def emit(args, record):
    if args.json:
        print(json.dumps(record, indent=2))
    elif record.get("skipped"):
        print(f"hf_step: skipped: {record['skipped']}")
    else:
        r = record
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "-"
        peak = f"{r['peak_bytes'] / 2**30:.2f} GiB" if r["peak_bytes"] is not None else "-"
        print(f"HF LlamaForCausalLM {r['model']} ({r['parameters']:,} parameters) on {r['gpu']}, "
              f"{r['weights']} weights, attention {r['attn_implementation']}, {r['optimizer']}")
        print(f"batch {r['batch']} x seq {r['seq']}: {r['step_seconds'] * 1e3:.2f} ms/step, "
              f"{r['tokens_per_s']:.1f} tokens/s, {r['model_tflops']:.4g} TFLOP/s, MFU {mfu}, "
              f"peak {peak}, loss {r['loss']:.4f}")


def skip(args, reason):
    emit(args, {"bench": "hf_step", "skipped": reason})
    return 0


def make_model(torch, transformers, config, dtype, device):
    fields = {k: v for k, v in config.items() if k not in ("model_type", "torch_dtype", "dtype")}
    hf_config = transformers.LlamaConfig(**fields)
    hf_config.use_cache = False  # training: no KV cache
    # Built directly on the device in its dtype (a 7B model initialised on the host in fp32
    # would take minutes); transformers' post_init applies LLaMA's N(0, 0.02) initialisation.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(hf_config,
                                                                  attn_implementation="sdpa")
    finally:
        torch.set_default_dtype(previous)
    return model.to(device=device, dtype=dtype)  # a no-op unless from_config overrode the dtype


def make_optimizer(torch, params, kind, lr):
    # octet's AdamW: betas (0.9, 0.95), eps 1e-8, weight decay 0.1.
    options = dict(lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    if kind == "fused":
        try:
            return torch.optim.AdamW(params, fused=True, **options), "AdamW fused"
        except (RuntimeError, TypeError, ValueError):  # torch or device without a fused AdamW
            kind = "foreach"
    if kind == "foreach":
        return torch.optim.AdamW(params, foreach=True, **options), "AdamW foreach"
    return torch.optim.AdamW(params, foreach=False, **options), "AdamW for-loop"


def run(args, config, label):
    import torch
    import transformers

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    amp = args.weights == "amp"
    dtype = torch.bfloat16 if args.weights == "bf16" else torch.float32
    seq = args.seq or config["max_position_embeddings"]
    config = dict(config, max_position_embeddings=max(seq, config["max_position_embeddings"]))
    torch.manual_seed(0)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    model = make_model(torch, transformers, config, dtype, device)
    attn = getattr(model.config, "_attn_implementation", None)
    model.train()
    params = list(model.parameters())
    optimizer, optimizer_name = make_optimizer(torch, params, args.optimizer, args.lr)
    step_model = torch.compile(model) if args.compile else model
    # Four batches of random tokens, reused: the step, not the data, is measured.
    tokens = torch.randint(0, config["vocab_size"], (4, args.batch, seq), device=device)

    def step(i):
        x = tokens[i % 4]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = step_model(input_ids=x, labels=x).loss  # HF shifts the labels itself
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for i in range(args.warmup):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    sync()
    step_seconds = (time.perf_counter() - t0) / args.steps
    peak_tflops = args.peak_tflops or (HOPPER_BF16_DENSE_TFLOPS if cuda else None)
    flops = flops_per_token(config, seq) * args.batch * seq
    tflops = flops / step_seconds * 1e-12
    return {
        "bench": "hf_step", "skipped": None, "model": label, "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "attn_implementation": attn, "compile": args.compile,
        "weights": {"amp": "fp32 + bf16 autocast", "bf16": "bf16", "fp32": "fp32"}[args.weights],
        "optimizer": optimizer_name,
        "hidden_size": config["hidden_size"], "num_hidden_layers": config["num_hidden_layers"],
        "vocab_size": config["vocab_size"], "batch": args.batch, "seq": seq,
        "warmup": args.warmup, "steps": args.steps,
        "parameters": sum(p.numel() for p in params), "tokens_per_step": args.batch * seq,
        "model_flops_per_step": flops, "step_seconds": step_seconds,
        "tokens_per_s": args.batch * seq / step_seconds, "model_tflops": tflops,
        "mfu": tflops / peak_tflops if peak_tflops else None,
        "peak_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "loss": float(loss.detach().float()),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="a config.json (octet bench step --print-hf-config writes it)")
    p.add_argument("--model", default="tiny", help="or a named size: " + ", ".join(NAMED_CONFIGS))
    p.add_argument("--layers", type=int, default=0, help="override num_hidden_layers")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=0, help="default: max_position_embeddings")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    p.add_argument("--weights", choices=["bf16", "amp", "fp32"], default="bf16",
                   help="bf16: bf16 parameters and AdamW on them (default); amp: fp32 "
                        "parameters with bf16 autocast (master weights, as octet's bf16); fp32: "
                        "fp32 throughout (what PyTorch users pick on CPUs without AVX-512, "
                        "where its bf16 matmul is slow)")
    p.add_argument("--optimizer", choices=["fused", "foreach", "for-loop"], default="fused")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help=f"MFU reference (default on cuda: {HOPPER_BF16_DENSE_TFLOPS})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    if args.batch < 1 or args.seq < 0 or args.warmup < 0 or args.steps < 1:
        p.error("--batch and --steps must be >= 1, --seq and --warmup >= 0")
    config, label = load_config(args)

    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name:
            return skip(args, f"{e.name} is not installed (pip install torch transformers)")
        return skip(args, f"torch or transformers cannot be imported: {e}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        return skip(args, "no CUDA GPU visible to torch (use --device cpu to run on the CPU)")
    try:
        record = run(args, config, label)
    except torch.cuda.OutOfMemoryError as e:
        print(f"hf_step: out of GPU memory at batch {args.batch} x seq {args.seq}: {e}",
              file=sys.stderr)
        return 1
    emit(args, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
