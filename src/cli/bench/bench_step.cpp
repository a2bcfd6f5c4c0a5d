// cli/bench/bench_step.cpp: `octet bench step`: whole training steps (Trainer::train_step: data,
// forward, backward, clipping, AdamW, weight sync, scaling update) timed in bf16 and in fp8
// under each recipe: tokens/s, step time, model TFLOP/s, MFU, peak device memory and the
// FP8/BF16 speedup, for one model or a sweep of hidden size x batch x sequence length.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench.h"
#include "bench_util.h"
#include "core/device.h"
#include "core/error.h"
#include "fp8/recipe.h"
#include "io/json.h"
#include "model/config.h"
#include "nn/precision.h"
#include "step_model.h"
#include "train/trainer.h"

namespace octet::bench {
namespace {

constexpr const char* kFooter = R"(What the numbers mean:
  step ms     wall time of one optimizer step: the mean over the timed steps, the device
              synchronised before the first and after the last (never inside the loop);
              with --interleave the median of the steps, each timed alone
  tokens/s    batch x seq / step time
  TFLOP/s     model FLOPs / step time, model FLOPs = 6 x (transformer matmul weights + LM head)
              x tokens + causal attention 6 x layers x seq x hidden x tokens, the same for
              bf16 and fp8 (src/cli/bench/step_model.h derives it); recomputation is not counted
  MFU         TFLOP/s / --peak-tflops, bf16 and fp8 alike (so fp8's MFU can exceed bf16's)
  peak GiB    the most device memory octet held as Buffers during the run, counted from
              before the Trainer is built: parameters, gradients, AdamW state, activations,
              FP8 copies and workspaces (not the CUDA context or cuBLASLt's own memory)
  speedup     the bf16 step time of the same model, batch and seq / this run's step time
  mem/bf16    this run's peak / that of bf16 (not with --interleave, whose peak is the cell's)
fp8 runs build the convergence guard's bf16 twin, as `octet train` does by default: a whole
second model (master weights, gradients, working weights, activations) that their peak counts;
--no-guard leaves it out (the bench never evaluates, so the twin checks nothing here).
Data: the built-in Markov corpus over the model's vocabulary (a few batches, reused).
)";

// One timed configuration. Runs of one `cell` share model, batch and seq.
struct Run {
  std::string label;  // the model: its name, config file stem or "h2048"
  model::LlamaConfig config;
  int64_t batch = 0, seq = 0;
  nn::Precision precision = nn::Precision::bf16;
  std::string recipe;  // fp8 runs only
  int cell = 0;
};

struct Result {
  std::string error;  // empty when the run succeeded
  double init_seconds = 0, step_seconds = 0, tokens_per_s = 0, tflops = 0;
  double loss = NAN;
  size_t peak_bytes = 0;
  int64_t parameters = 0;
  std::optional<double> speedup, memory_ratio;  // against the cell's bf16 run
};

struct Options {
  Device device;
  int64_t warmup = 3, steps = 10;
  std::optional<double> peak_tflops;
  bool json = false, sweep = false;
  bool guard = true;        // fp8 runs build the guard's bf16 twin (as octet train does by default)
  bool interleave = false;  // a cell's runs stepped in turn (time_interleaved)
};

// The flags as given; what is absent takes a default that depends on the others.
struct Flags {
  std::string device = "cpu";
  std::string model = "tiny";
  int64_t layers = 0;
  std::vector<long long> batch, seq, hidden;
  std::vector<std::string> precision = {"bf16", "fp8"}, recipe = {"tensor-current"};
  int64_t warmup = 3, steps = 10;
  double peak_tflops = 0.0;
  bool json = false, sweep = false, print_hf_config = false, no_guard = false, interleave = false;
  bool model_given = false, layers_given = false, peak_given = false;
};

// A temporary config.json that the Trainer reads (it takes a model name or a path).
class TempConfig {
 public:
  explicit TempConfig(const model::LlamaConfig& c) {
    static int counter = 0;
    path_ =
        (std::filesystem::temp_directory_path() / ("octet-bench-step-" + std::to_string(getpid()) +
                                                   "-" + std::to_string(counter++) + ".json"))
            .string();
    write_json_file(path_, model::llama_config_to_json(c));
  }
  ~TempConfig() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempConfig(const TempConfig&) = delete;
  TempConfig& operator=(const TempConfig&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The Trainer's configuration for the run, its model read from `config_path`.
train::TrainConfig train_config(const Run& run, const Options& o, const std::string& config_path) {
  train::TrainConfig tc;
  tc.model = config_path;
  tc.precision = run.precision;
  if (!run.recipe.empty()) tc.recipe = fp8::Recipe::parse(run.recipe);
  tc.device = device_name(o.device);
  tc.batch = run.batch;
  tc.seq_len = run.seq;
  tc.steps = o.warmup + o.steps;
  tc.lr = 1e-4;  // small and without warm-up: stable over a few steps; the cost is the same
  tc.warmup = 0;
  tc.eval_every = 0;
  tc.log_every = tc.steps;  // nothing to report per step: no host read-back inside the loop
  tc.quiet = true;
  tc.guard.enabled = o.guard;
  // The bench needs valid tokens, not a long corpus: four batches' worth (reused in a
  // shuffled order) and one validation sequence, which the Trainer's loaders require.
  tc.data.train_tokens = 4 * run.batch * run.seq + 1;
  tc.data.val_tokens = run.seq + 1;
  return tc;
}

// The rates of a run whose step took `step_seconds`.
void set_rates(const Run& run, Result& r, double step_seconds) {
  r.step_seconds = step_seconds;
  r.tokens_per_s = static_cast<double>(run.batch * run.seq) / r.step_seconds;
  r.tflops = step_model_flops(run.config, run.batch, run.seq) / r.step_seconds * 1e-12;
}

// Builds a Trainer for the run, steps it, and frees it (and all its device memory) before
// returning. The peak covers everything allocated from the Trainer's construction on.
Result time_run(const Run& run, const Options& o) {
  Result r;
  const TempConfig config_file(run.config);
  const train::TrainConfig tc = train_config(run, o, config_file.path());

  cuda_synchronize();
  reset_device_peak_bytes(o.device);
  const auto t_init = std::chrono::steady_clock::now();
  train::Trainer trainer(tc);
  cuda_synchronize();
  r.init_seconds = seconds_since(t_init);
  r.parameters = trainer.model().parameter_count();
  for (int64_t i = 0; i < o.warmup; ++i) trainer.train_step();
  cuda_synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  train::StepRecord last;
  for (int64_t i = 0; i < o.steps; ++i) last = trainer.train_step();
  cuda_synchronize();
  set_rates(run, r, seconds_since(t0) / static_cast<double>(o.steps));
  r.peak_bytes = device_peak_bytes(o.device);
  std::vector<train::StepRecord> last_step{last};
  trainer.read_back(last_step);  // after the timing: reading back waits for the device
  r.loss = last_step[0].loss;    // informational: the last timed step's loss
  return r;
}

// --interleave: the runs of one cell built at once and stepped in turn, one step of each per
// round, every step timed alone (the device synchronised around it), so that two runs' times
// compare steps taken a fraction of a second apart rather than one run after the other, on a
// machine whose speed drifts between phases of seconds (a shared 2-vCPU guest moved octet's own
// step by up to 50%). A run's step time is the median of its steps; the peak is the whole
// cell's, every run's Trainer held at once.
std::vector<Result> time_interleaved(const std::vector<const Run*>& cell, const Options& o) {
  std::vector<Result> results(cell.size());
  std::vector<std::unique_ptr<TempConfig>> files;
  std::vector<std::unique_ptr<train::Trainer>> trainers;
  cuda_synchronize();
  reset_device_peak_bytes(o.device);
  for (size_t i = 0; i < cell.size(); ++i) {
    files.push_back(std::make_unique<TempConfig>(cell[i]->config));
    const auto t_init = std::chrono::steady_clock::now();
    trainers.push_back(
        std::make_unique<train::Trainer>(train_config(*cell[i], o, files.back()->path())));
    cuda_synchronize();
    results[i].init_seconds = seconds_since(t_init);
    results[i].parameters = trainers.back()->model().parameter_count();
  }
  for (int64_t step = 0; step < o.warmup; ++step) {
    for (auto& t : trainers) t->train_step();
  }
  std::vector<std::vector<double>> seconds(cell.size());
  std::vector<train::StepRecord> last(cell.size());
  for (int64_t step = 0; step < o.steps; ++step) {
    for (size_t i = 0; i < cell.size(); ++i) {
      cuda_synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      last[i] = trainers[i]->train_step();
      cuda_synchronize();
      seconds[i].push_back(seconds_since(t0));
    }
  }
  const size_t peak = device_peak_bytes(o.device);
  for (size_t i = 0; i < cell.size(); ++i) {
    std::vector<double>& s = seconds[i];
    std::sort(s.begin(), s.end());
    const size_t n = s.size();
    set_rates(*cell[i], results[i], n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]));
    results[i].peak_bytes = peak;
    std::vector<train::StepRecord> one{last[i]};
    trainers[i]->read_back(one);
    results[i].loss = one[0].loss;
  }
  return results;
}

std::string run_name(const Run& run) {
  return run.recipe.empty() ? nn::precision_name(run.precision)
                            : std::string(nn::precision_name(run.precision)) + " " + run.recipe;
}

std::string fixed(double x, const char* format) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

void print_header() {
  std::printf("%-10s %6s %6s %5s %6s  %-22s %9s %11s %9s %6s %8s %7s %8s\n", "model", "layers",
              "hidden", "batch", "seq", "precision", "step ms", "tokens/s", "TFLOP/s", "MFU",
              "peak GiB", "speedup", "mem/bf16");
  std::printf("%s\n", std::string(128, '-').c_str());
}

void print_row(const Run& run, const Result& r, const Options& o) {
  std::printf("%-10s %6lld %6lld %5lld %6lld  %-22s ", run.label.c_str(),
              static_cast<long long>(run.config.num_hidden_layers),
              static_cast<long long>(run.config.hidden_size), static_cast<long long>(run.batch),
              static_cast<long long>(run.seq), run_name(run).c_str());
  if (!r.error.empty()) {
    std::printf("failed: %s\n", r.error.c_str());
  } else {
    const std::string mfu =
        o.peak_tflops ? fixed(100.0 * r.tflops / *o.peak_tflops, "%5.1f%%") : "-";
    std::printf("%9.2f %11.1f %9.4g %6s %8.2f %7s %8s\n", r.step_seconds * 1e3, r.tokens_per_s,
                r.tflops, mfu.c_str(), static_cast<double>(r.peak_bytes) / (1 << 30),
                r.speedup ? fixed(*r.speedup, "%.2fx").c_str() : "-",
                r.memory_ratio ? fixed(*r.memory_ratio, "%.2f").c_str() : "-");
  }
  std::fflush(stdout);
}

// The sweep's tables: one per non-bf16 precision/recipe, hidden size down, batch x seq across.
void print_sweep_tables(const std::vector<Run>& runs, const std::vector<Result>& results) {
  std::vector<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> columns;  // (seq, batch)
  std::vector<int64_t> hiddens;
  for (const Run& run : runs) {
    if (run.precision != nn::Precision::bf16 &&
        std::find(names.begin(), names.end(), run_name(run)) == names.end())
      names.push_back(run_name(run));
    if (std::find(columns.begin(), columns.end(), std::pair(run.seq, run.batch)) == columns.end())
      columns.emplace_back(run.seq, run.batch);
    if (std::find(hiddens.begin(), hiddens.end(), run.config.hidden_size) == hiddens.end())
      hiddens.push_back(run.config.hidden_size);
  }
  std::sort(columns.begin(), columns.end());
  for (const std::string& name : names) {
    std::printf("\n%s speedup over bf16 (bf16 step time / %s step time), %lld layers\n",
                name.c_str(), name.c_str(),
                static_cast<long long>(runs.front().config.num_hidden_layers));
    std::printf("%6s |", "hidden");
    for (const auto& [seq, batch] : columns)
      std::printf(" %10s", (std::to_string(batch) + "x" + std::to_string(seq)).c_str());
    std::printf("\n%s\n", std::string(8 + 11 * columns.size(), '-').c_str());
    for (int64_t hidden : hiddens) {
      std::printf("%6lld |", static_cast<long long>(hidden));
      for (const auto& [seq, batch] : columns) {
        std::string cell = "-";
        for (size_t i = 0; i < runs.size(); ++i) {
          const Run& run = runs[i];
          if (run.config.hidden_size == hidden && run.seq == seq && run.batch == batch &&
              run_name(run) == name && results[i].speedup)
            cell = fixed(*results[i].speedup, "%.2fx");
        }
        std::printf(" %10s", cell.c_str());
      }
      std::printf("\n");
    }
  }
  std::printf("columns: batch x seq; '-': a run failed (see above) or was not run\n");
}

Json run_json(const Run& run, const Result& r, const Options& o) {
  Json j = Json::object();
  j["model"] = run.label;
  j["hidden_size"] = run.config.hidden_size;
  j["num_hidden_layers"] = run.config.num_hidden_layers;
  j["intermediate_size"] = run.config.intermediate_size;
  j["num_attention_heads"] = run.config.num_attention_heads;
  j["num_key_value_heads"] = run.config.num_key_value_heads;
  j["vocab_size"] = run.config.vocab_size;
  j["batch"] = run.batch;
  j["seq"] = run.seq;
  j["precision"] = nn::precision_name(run.precision);
  j["recipe"] = run.recipe.empty() ? Json() : Json(run.recipe);
  j["tokens_per_step"] = run.batch * run.seq;
  j["model_flops_per_step"] = step_model_flops(run.config, run.batch, run.seq);
  j["error"] = r.error.empty() ? Json() : Json(r.error);
  const bool ok = r.error.empty();
  auto number = [&](double x) { return ok ? json_finite_or_null(x) : Json(); };
  j["parameters"] = ok ? Json(r.parameters) : Json();
  j["init_seconds"] = number(r.init_seconds);
  j["step_seconds"] = number(r.step_seconds);
  j["tokens_per_s"] = number(r.tokens_per_s);
  j["model_tflops"] = number(r.tflops);
  j["mfu"] = o.peak_tflops ? number(r.tflops / *o.peak_tflops) : Json();
  j["peak_bytes"] = ok ? Json(static_cast<int64_t>(r.peak_bytes)) : Json();
  j["loss"] = number(r.loss);
  j["speedup_vs_bf16"] = r.speedup ? Json(*r.speedup) : Json();
  j["peak_bytes_vs_bf16"] = r.memory_ratio ? Json(*r.memory_ratio) : Json();
  return j;
}

// The runs: for each model x seq x batch (one cell), bf16 first, then the other precisions
// as given, fp8 once per recipe.
std::vector<Run> make_runs(const Flags& args, const Options& o) {
  std::vector<nn::Precision> precisions;
  for (const std::string& p : args.precision) {
    const nn::Precision precision = nn::precision_from_name(p);
    if (std::find(precisions.begin(), precisions.end(), precision) == precisions.end())
      precisions.push_back(precision);
  }
  // bf16 first: the other runs of a cell are compared with it as they finish.
  std::stable_partition(precisions.begin(), precisions.end(),
                        [](nn::Precision p) { return p == nn::Precision::bf16; });
  const std::vector<std::string>& recipes = args.recipe;
  OCTET_CHECK(!precisions.empty() && !recipes.empty(), "bench step",
              "--precision and --recipe need at least one name");

  std::vector<std::pair<std::string, model::LlamaConfig>> models;
  std::vector<long long> seqs, batches;
  const auto or_default = [](const std::vector<long long>& given, std::vector<long long> fallback) {
    return given.empty() ? fallback : given;
  };
  if (o.sweep) {
    OCTET_CHECK(!args.model_given, "bench step", "--sweep builds its own models; use --hidden");
    const int64_t layers = args.layers_given ? args.layers : 2;
    for (long long hidden : or_default(args.hidden, {1024, 2048, 4096, 8192})) {
      OCTET_CHECK(hidden >= 128 && hidden % 128 == 0, "bench step",
                  "--hidden sizes must be multiples of 128 (heads of 128), got ", hidden);
      models.emplace_back("h" + std::to_string(hidden), sweep_config(hidden, layers, 1));
    }
    seqs = or_default(args.seq, {1024, 2048, 4096, 8192});
    batches = or_default(args.batch, {1, 4});
  } else {
    OCTET_CHECK(args.hidden.empty(), "bench step", "--hidden is for --sweep");
    model::LlamaConfig c = model::load_llama_config(args.model);
    if (args.layers_given) c.num_hidden_layers = args.layers;
    std::string label = std::filesystem::path(args.model).stem().string();
    if (args.layers_given) label += "/" + std::to_string(c.num_hidden_layers) + "L";
    models.emplace_back(label, c);
    seqs = or_default(args.seq, {c.max_position_embeddings});
    batches = or_default(args.batch, {8});
  }

  std::vector<Run> runs;
  int cell = 0;
  for (const auto& [label, base] : models) {
    for (long long seq : seqs) {
      for (long long batch : batches) {
        Run run{label,
                base,
                static_cast<int64_t>(batch),
                static_cast<int64_t>(seq),
                nn::Precision::bf16,
                "",
                cell++};
        // The bench picks the sequence length; RoPE works at any position.
        run.config.max_position_embeddings = seq;
        run.config.validate("bench step: " + label);
        for (nn::Precision p : precisions) {
          run.precision = p;
          if (p != nn::Precision::fp8) {
            run.recipe.clear();
            runs.push_back(run);
            continue;
          }
          for (const std::string& r : recipes) {
            run.recipe = r;
            runs.push_back(run);
          }
        }
      }
    }
  }
  return runs;
}

int run(const Flags& args) {
  Options o;
  o.device = device_from_name(args.device);
  o.warmup = args.warmup;
  o.steps = args.steps;
  o.json = args.json;
  o.sweep = args.sweep;
  o.guard = !args.no_guard;
  o.interleave = args.interleave;
  if (args.peak_given) {
    o.peak_tflops = args.peak_tflops;
    OCTET_CHECK(*o.peak_tflops > 0.0, "bench step", "--peak-tflops must be positive");
  } else if (o.device.is_cuda()) {
    o.peak_tflops = kHopperBf16DenseTflops;
  }
  const std::vector<Run> runs = make_runs(args, o);

  if (args.print_hf_config) {
    OCTET_CHECK(!o.sweep, "bench step", "--print-hf-config takes one model, not --sweep");
    model::LlamaConfig c = runs.front().config;
    for (const Run& r : runs)
      c.max_position_embeddings = std::max(c.max_position_embeddings, r.seq);
    std::printf("%s\n", json_dump(model::llama_config_to_json(c), 2).c_str());
    return 0;
  }
  OCTET_CHECK(!o.device.is_cuda() || cuda_available(), "bench step",
              "--device cuda needs a CUDA build (this one: ", cuda_compiled() ? "yes" : "no",
              ") and a visible GPU (", cuda_device_count(), " found)");

  std::FILE* log = o.json ? stderr : stdout;
  std::fprintf(log, "octet bench step: %s, %lld warm-up + %lld timed steps per run, ",
               device_name(o.device).c_str(), static_cast<long long>(o.warmup),
               static_cast<long long>(o.steps));
  if (o.peak_tflops)
    std::fprintf(log, "MFU against %.1f TFLOP/s\n", *o.peak_tflops);
  else
    std::fprintf(log, "no MFU (no --peak-tflops for the CPU)\n");
  if (!o.guard) std::fprintf(log, "fp8 runs without the convergence guard's bf16 twin\n");
  if (o.interleave) {
    std::fprintf(log,
                 "interleaved: each cell's runs stepped in turn; step ms is the median of a run's "
                 "steps, peak GiB the cell's\n");
  }
  std::fflush(log);
  if (!o.json) print_header();

  std::vector<Result> results(runs.size());
  bool failed = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& run = runs[i];
    if (o.interleave && (i == 0 || runs[i - 1].cell != run.cell)) {
      // The whole cell at once: its runs' results, printed as the loop reaches each.
      std::vector<const Run*> cell;
      for (size_t j = i; j < runs.size() && runs[j].cell == run.cell; ++j) cell.push_back(&runs[j]);
      if (o.json) {
        std::fprintf(stderr, "cell of %zu runs, interleaved: %s, batch %lld x seq %lld\n",
                     cell.size(), run.label.c_str(), static_cast<long long>(run.batch),
                     static_cast<long long>(run.seq));
      }
      try {
        const std::vector<Result> got = time_interleaved(cell, o);
        std::copy(got.begin(), got.end(), results.begin() + static_cast<std::ptrdiff_t>(i));
      } catch (const std::exception& e) {
        for (size_t j = 0; j < cell.size(); ++j) results[i + j].error = e.what();
        failed = true;
      }
    }
    if (o.json && !o.interleave) {
      std::fprintf(stderr, "run %zu/%zu: %s, %lld layers, batch %lld x seq %lld, %s\n", i + 1,
                   runs.size(), run.label.c_str(),
                   static_cast<long long>(run.config.num_hidden_layers),
                   static_cast<long long>(run.batch), static_cast<long long>(run.seq),
                   run_name(run).c_str());
    }
    Result& r = results[i];
    if (!o.interleave) {
      try {
        r = time_run(run, o);
      } catch (const std::exception& e) {  // octet::Error, or std::bad_alloc on the host
        r = Result{};
        r.error = e.what();
        failed = true;
      }
    }
    for (size_t j = 0; j < i; ++j) {  // the cell's bf16 run, which came first
      const Result& b = results[j];
      if (runs[j].cell == run.cell && runs[j].precision == nn::Precision::bf16 && b.error.empty() &&
          r.error.empty()) {
        r.speedup = b.step_seconds / r.step_seconds;
        if (b.peak_bytes > 0 && !o.interleave)
          r.memory_ratio = static_cast<double>(r.peak_bytes) / static_cast<double>(b.peak_bytes);
      }
    }
    if (run.precision == nn::Precision::bf16 && r.error.empty()) {
      r.speedup = 1.0;
      if (!o.interleave) r.memory_ratio = 1.0;
    }
    if (o.json && !r.error.empty()) std::fprintf(stderr, "  failed: %s\n", r.error.c_str());
    if (!o.json) print_row(run, r, o);
  }

  if (o.json) {
    Json doc = Json::object();
    doc["bench"] = "step";
    doc["device"] = device_name(o.device);
    doc["warmup"] = o.warmup;
    doc["steps"] = o.steps;
    doc["peak_tflops"] = o.peak_tflops ? Json(*o.peak_tflops) : Json();
    doc["guard"] = o.guard;
    doc["interleave"] = o.interleave;
    Json list = Json::array();
    for (size_t i = 0; i < runs.size(); ++i) list.push_back(run_json(runs[i], results[i], o));
    doc["runs"] = std::move(list);
    std::printf("%s\n", json_dump(doc, 2).c_str());
  } else if (o.sweep) {
    print_sweep_tables(runs, results);
  }
  return failed ? 1 : 0;
}

}  // namespace

void add_bench_step(cli::Commands& commands, CLI::App& bench) {
  auto f = std::make_shared<Flags>();
  CLI::App* b = commands.add(bench, "step",
                             "time whole training steps in bf16 and fp8: tokens/s, step time, "
                             "model TFLOP/s, MFU, peak memory, FP8/BF16 speedup",
                             [f] { return run(*f); });
  b->footer(std::string(kFooter) + "\nFP8 recipes:\n" + fp8::recipe_syntax("  "));
  b->add_option("--device", f->device, "cpu, cuda or cuda:N")
      ->check(cli::parses_with(device_from_name, "DEVICE"));
  CLI::Option* model =
      b->add_option("--model", f->model, "tiny, small, 1b, 7b or a config.json path");
  CLI::Option* layers =
      b->add_option("--layers", f->layers,
                    "override num_hidden_layers (the 7B-shaped runs use 8; sweep default 2)")
          ->check(cli::at_least(1));
  b->add_option("--batch", f->batch, "sequences per step, B[,B...] (default 8; sweep: 1,4)")
      ->delimiter(',')
      ->check(cli::at_least(1));
  b->add_option("--seq", f->seq,
                "tokens per sequence, S[,S...] (default: the model's max_position_embeddings; "
                "sweep: 1024,2048,4096,8192)")
      ->delimiter(',')
      ->check(cli::at_least(1));
  b->add_option("--precision", f->precision, "P[,P...] of fp32, bf16, fp8")
      ->delimiter(',')
      ->check(cli::parses_with(nn::precision_from_name, "PRECISION"));
  b->add_option("--recipe", f->recipe,
                "FP8 recipes of the fp8 runs, R[,R...], each MODE[:OPTION...] (see below); modes " +
                    fp8::scaling_mode_list(", "))
      ->delimiter(',')
      ->check(cli::parses_with(fp8::Recipe::parse, "RECIPE"));
  b->add_option("--warmup", f->warmup, "untimed steps per run")->check(cli::at_least(0));
  b->add_option("--steps", f->steps, "timed steps per run")->check(cli::at_least(1));
  CLI::Option* peak = b->add_option("--peak-tflops", f->peak_tflops,
                                    "the peak MFU is measured against (default on cuda: 989.4, "
                                    "the H100/H200 dense bf16 tensor-core peak; cpu: no MFU)")
                          ->check(cli::at_least(0));
  b->add_option("--hidden", f->hidden,
                "--sweep: hidden sizes, multiples of 128 (default 1024,2048,4096,8192)")
      ->delimiter(',')
      ->check(cli::at_least(1));
  b->add_flag("--json", f->json, "print one JSON document on stdout (progress goes to stderr)");
  b->add_flag("--no-guard", f->no_guard,
              "fp8 runs without the convergence guard's bf16 twin (a second whole model; "
              "octet train builds it unless --guard off)");
  b->add_flag("--interleave", f->interleave,
              "build each cell's runs (bf16 and the fp8 recipes of one model, batch and seq) at "
              "once and step them in turn, each step timed alone; step ms is then the median of "
              "a run's steps and peak GiB the cell's: for ratios on a machine whose speed drifts");
  b->add_flag("--sweep", f->sweep,
              "a model per --hidden size: FFN by LLaMA's rule, heads of 128, vocab 32000, "
              "--layers; prints the FP8/BF16 speedup table of hidden x batch x seq");
  b->add_flag("--print-hf-config", f->print_hf_config,
              "print the config.json of the model (with --layers, and max_position_embeddings = "
              "the largest --seq) and exit: what bench/hf_step.py and bench/step_compare.py read");
  b->parse_complete_callback([f, model, layers, peak] {
    f->model_given = model->count() > 0;
    f->layers_given = layers->count() > 0;
    f->peak_given = peak->count() > 0;
  });
}

}  // namespace octet::bench
