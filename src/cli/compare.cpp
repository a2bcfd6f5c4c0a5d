// cli/compare.cpp: `octet compare`: time to a target validation loss under each precision,
// from the same seed (train/compare.h): a table on stdout and the numbers as JSON.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/device.h"
#include "fp8/recipe.h"
#include "io/json.h"
#include "nn/precision.h"
#include "train/compare.h"

namespace octet::cli {
namespace {

struct CompareFlags {
  train::CompareOptions options;
  std::string json;  // default: OUT/compare.json, or stdout without --out
};

int compare(CompareFlags& f) {
  const train::CompareResult result = train::compare_precisions(f.options);
  std::fputs(train::compare_table(result).c_str(), stdout);
  const Json j = train::compare_json(result);
  std::string path = f.json;
  if (path.empty() && !f.options.out_dir.empty()) path = f.options.out_dir + "/compare.json";
  if (path.empty()) {
    std::printf("%s\n", json_dump(j, 2).c_str());
  } else {
    write_json_file(path, j);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

std::vector<nn::Precision> precision_list(const std::string& text) {
  std::vector<nn::Precision> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(nn::precision_from_name(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

}  // namespace

void add_compare_command(Commands& commands, CLI::App& octet) {
  auto f = std::make_shared<CompareFlags>();
  train::CompareOptions& o = f->options;
  o.base.steps = 1000;
  CLI::App* c = commands.add(
      octet, "compare",
      "time to a target validation loss under each precision (same seed, same data): steps, "
      "tokens and training seconds to the target, tokens/s, and the speedups over bf16",
      [f] { return compare(*f); });
  c->add_option("--target-loss", o.target_loss, "the validation loss to reach (nats per token)")
      ->required()
      ->check(at_least(0));
  add_parsed(*c, "--precisions", o.precisions, precision_list,
             "comma-separated precisions to compare: fp32, bf16, fp8")
      ->default_str("bf16,fp8");
  c->add_option("--max-steps", o.base.steps,
                "the step limit of each run (also the length of its LR schedule)")
      ->check(at_least(1));
  c->add_option("--eval-every", o.eval_every, "steps between validation losses")
      ->check(at_least(1));
  c->add_option("--eval-batches", o.base.eval_batches, "validation batches per evaluation")
      ->check(at_least(1));
  c->add_option("--out", o.out_dir,
                "directory of the runs (OUT/<precision>: run.json, metrics.jsonl, for octet "
                "report) and of compare.json");
  c->add_option("--json", f->json, "the JSON file (default: OUT/compare.json, else stdout)");
  c->add_option("--device", o.base.device, "cpu, cuda or cuda:N")
      ->check(parses_with(device_from_name, "DEVICE"));
  c->add_option("--model", o.base.model, "tiny, small, 1b, 7b or a config.json path");
  add_parsed(*c, "--recipe,--fp8-recipe", o.base.recipe, fp8::Recipe::parse,
             "FP8 recipe of the fp8 run (as octet train --fp8-recipe)")
      ->default_str(o.base.recipe.str());
  c->add_option("--data", o.base.data.source,
                "synthetic (the built-in Markov corpus) or a directory of token shards");
  c->add_option("--markov-vocab", o.base.data.markov_vocab,
                "synthetic: tokens the corpus uses (0: the model's vocab_size)")
      ->check(at_least(0));
  c->add_option("--train-tokens", o.base.data.train_tokens, "synthetic: training tokens")
      ->check(at_least(1));
  c->add_option("--val-tokens", o.base.data.val_tokens, "synthetic: validation tokens")
      ->check(at_least(1));
  c->add_option("--batch", o.base.batch, "sequences per micro-batch")->check(at_least(1));
  c->add_option("--seq-len", o.base.seq_len, "tokens per sequence (0: max_position_embeddings)")
      ->check(at_least(0));
  c->add_option("--grad-accum", o.base.grad_accum, "micro-batches per optimizer step")
      ->check(at_least(1));
  c->add_option("--lr", o.base.lr, "peak learning rate")->check(at_least(0));
  c->add_option("--warmup", o.base.warmup, "linear warm-up steps")->check(at_least(0));
  c->add_option("--seed", o.base.seed, "weights and data order (the same for every run)");
  c->add_flag("--quiet", o.quiet, "no progress lines");
}

}  // namespace octet::cli
