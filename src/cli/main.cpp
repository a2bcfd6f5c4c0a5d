// cli/main.cpp: the `octet` command: dispatches to its subcommands.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/bench/bench.h"
#include "core/device.h"
#include "core/error.h"

namespace octet::cli {
int tokenize_main(const std::vector<std::string>& args);  // cli/tokenize.cpp
int train_main(const std::vector<std::string>& args);     // cli/train.cpp
int sample_main(const std::vector<std::string>& args);    // cli/train.cpp
}  // namespace octet::cli

namespace {

constexpr const char* kUsage = R"(octet: FP8 mixed-precision training for LLaMA-style models

usage: octet <command> [flags]

commands:
  train         train a LLaMA model
                  --device cpu|cuda|cuda:N               (default cpu)
                  --model tiny|small|1b|7b|config.json   (default tiny)
                  --precision fp32|bf16|fp8              (default bf16)
                  --fp8-recipe tensor-current|tensor-delayed|row|block|mx[:e4m3]
                  --data synthetic|DIR   the built-in Markov corpus or token shards
                  --markov-vocab N --markov-order K --markov-seed N   (synthetic corpus)
                  --batch N --seq-len N --grad-accum N --steps N --lr X --warmup N
                  --weight-decay X --grad-clip X --seed N
                  --eval-every N --eval-batches N --checkpoint-every N
                  --log-every N   progress/metrics read-back (default 1; cuda: 10, as a
                                  read waits for the GPU)
                  --train-tokens N --val-tokens N   (synthetic corpus sizes)
                  --out DIR --resume --metrics FILE.jsonl --quiet
  sample        generate tokens from a checkpoint
                  --checkpoint DIR --prompt 1,2,3 --tokens N --temperature X (0: greedy)

  bench gemm    time the GEMMs and FP8 conversions of one device
                  --device cpu|cuda   (default cpu)
                  --sizes 256,512,... square sizes (default 256..4096; cuda 1024..16384)
                  --json FILE         also write one JSON record per row
                  --threads N         CPU threads (default: all cores)
                  --reps N            timed calls (cpu) or batches (cuda) per cell (default 10 / 5)
                  --impl auto|onednn|reference   CPU GEMM engine (default auto)
  bench attention   time causal GQA attention forward, backward and both (TFLOP/s)
                  --device cuda|cpu   (default cuda)
                  --dtype bf16|f32    (default bf16)
                  --shapes BxSxHqxHkvxhd,...   (default 16k tokens: B=8 S=2048 and
                                      B=2 S=8192, Hq=32, Hkv=8 and 32, hd=128 and 64)
                  --reps N            timed calls per cell, at least (default 10)
                  --json FILE         also write one JSON record per shape
                                      (bench/torch_attention.py --ours FILE compares)

  bench step    time whole training steps in bf16 and fp8: tokens/s, step time, model
                TFLOP/s, MFU, peak memory, FP8/BF16 speedup (octet bench step --help)
                  --device cpu|cuda --model tiny|small|1b|7b|config.json --layers N
                  --batch B,... --seq S,... --precision bf16,fp8 --recipe R,...
                  --warmup W --steps N --json --sweep --print-hf-config
  bench quantize  bytes per second of every FP8 quantize variant vs a copy of the input
                  --device cpu|cuda   (default cpu)
                  --shapes RxC,...    (default 4096x4096..16384x16384 on cuda, smaller on cpu)
                  --input bf16|f32 --fp8 e4m3|e5m2   (default bf16 -> e4m3)
                  --counts            also count saturated and flushed values
                  --json FILE --reps N
                  --max-size N        cuda: leave out square sizes above N
                  --suite square,llama,te   cuda: squares, LLaMA-2 7B/13B linear layers
                                      (fprop, dgrad, wgrad at 4k and 16k tokens), Transformer
                                      Engine's H200 layer (default all three)

  tokenize --train   train a SentencePiece tokenizer on text files
                  --input a.txt,b.txt --model-prefix out/tok   (writes out/tok.model)
                  --vocab-size N      pieces (default 8000)
                  --model-type bpe|unigram   (default bpe)
                  --byte-fallback     unknown characters become byte pieces (vocab > 259)
                  --max-lines N       train on a sample of N lines (default: all)
  tokenize      encode text files into token shards, an eos after each document
                  --model tok.model --input a.txt,b.txt --output DIR   (DIR/train_000.bin, ...)
                  --shard-tokens N    tokens per shard (default 100000000)
                  --split blank|line|file   what a document is (default blank: blank-line separated)
                  --val-tokens N      the first documents, N tokens, go to DIR/val_000.bin, ...

  --help        this text
  --version     the version and what this build contains

Ctrl-C during `octet train` writes a checkpoint (with --out) and exits.
)";

int print_version() {
  std::printf("octet %s (CUDA %s, %d GPU(s) visible)\n", OCTET_VERSION,
              octet::cuda_compiled() ? "built in" : "not built", octet::cuda_device_count());
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? 1 : 0;
  }
  if (args[0] == "--version") return print_version();
  if (args[0] == "train")
    return octet::cli::train_main(std::vector<std::string>(args.begin() + 1, args.end()));
  if (args[0] == "sample")
    return octet::cli::sample_main(std::vector<std::string>(args.begin() + 1, args.end()));
  if (args[0] == "tokenize")
    return octet::cli::tokenize_main(std::vector<std::string>(args.begin() + 1, args.end()));
  if (args[0] == "bench") {
    OCTET_CHECK(args.size() >= 2, "bench",
                "name what to benchmark: octet bench gemm|step|attention|quantize");
    const std::vector<std::string> rest(args.begin() + 2, args.end());
    if (args[1] == "gemm") return octet::bench::bench_gemm_main(rest);
    if (args[1] == "step") return octet::bench::bench_step_main(rest);
    if (args[1] == "attention") return octet::bench::bench_attention_main(rest);
    if (args[1] == "quantize") return octet::bench::bench_quantize_main(rest);
    OCTET_FAIL("bench", "unknown benchmark '", args[1],
               "'; available: gemm, step, attention, quantize");
  }
  OCTET_FAIL("octet", "unknown command '", args[0], "'; run octet --help");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const octet::Error& e) {
    std::fprintf(stderr, "octet: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet: internal error: %s\n", e.what());
    return 3;
  }
}
