// train/compare.cpp
#include "train/compare.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/clock.h"
#include "core/error.h"
#include "io/json.h"
#include "train/trainer.h"

namespace octet::train {
namespace {

using Clock = std::chrono::steady_clock;

TargetRun run_to_target(const CompareOptions& o, nn::Precision precision,
                        std::optional<double>& loss_floor) {
  TrainConfig c = o.base;
  c.precision = precision;
  // The run evaluates only at its last step by itself; compare evaluates every eval_every
  // steps from on_step, where it can time the evaluations and leave them out.
  c.eval_every = 0;
  c.quiet = true;
  // On a GPU the trainer reads numbers back every log_every steps: once per evaluation.
  c.log_every = o.eval_every;
  c.resume = false;
  if (!o.out_dir.empty()) {
    c.out_dir = o.out_dir + "/" + nn::precision_name(precision);
    c.metrics = c.out_dir + "/metrics.jsonl";
  } else {
    c.out_dir.clear();
    c.metrics.clear();
  }
  Trainer trainer(c);
  loss_floor = trainer.loss_floor();
  TargetRun run;
  run.precision = nn::precision_name(precision);
  const int64_t tokens_per_step = trainer.model().tokens() * c.grad_accum;

  clear_stop_request();
  const Clock::time_point t0 = Clock::now();
  trainer.on_step = [&](const StepRecord& r) {
    if (run.reached) return;
    const bool last = r.step == c.steps;
    if (r.step % o.eval_every != 0 && !last) return;
    double val = 0;
    if (r.val_loss) {
      // The trainer's own evaluation at the last step: its time is inside the step's; take
      // off what compare's evaluations took on average.
      val = *r.val_loss;
      if (!run.val_curve.empty())
        run.eval_s += run.eval_s / static_cast<double>(run.val_curve.size());
    } else {
      const Clock::time_point e0 = Clock::now();
      val = trainer.evaluate();
      run.eval_s += seconds_since(e0);
    }
    run.val_curve.emplace_back(r.step, val);
    run.steps = r.step;
    run.val_loss = val;
    run.train_s = seconds_since(t0) - run.eval_s;
    if (!o.quiet) {
      std::printf("  %-5s step %6lld  val %.4f  %7.1fs\n", run.precision.c_str(),
                  static_cast<long long>(r.step), val, run.train_s);
      std::fflush(stdout);
    }
    if (val <= o.target_loss) {
      run.reached = true;
      request_stop();
    }
  };
  trainer.run();
  clear_stop_request();
  run.tokens = run.steps * tokens_per_step;
  run.tokens_per_s = run.train_s > 0 ? static_cast<double>(run.tokens) / run.train_s : 0;
  return run;
}

Json or_null(bool present, double x) {
  return present ? json_finite_or_null(x) : Json(nullptr);
}

}  // namespace

CompareResult compare_precisions(const CompareOptions& o) {
  OCTET_CHECK(!o.precisions.empty(), "compare", "no precisions to compare (--precisions)");
  OCTET_CHECK(o.eval_every > 0, "compare", "--eval-every must be positive, got ", o.eval_every);
  OCTET_CHECK(o.target_loss > 0 && std::isfinite(o.target_loss), "compare",
              "--target-loss must be a positive loss in nats, got ", o.target_loss);
  OCTET_CHECK(o.base.steps > 0, "compare", "--max-steps must be positive");
  CompareResult result;
  result.model = o.base.model;
  result.target_loss = o.target_loss;
  for (const nn::Precision p : o.precisions) {
    if (!o.quiet) {
      std::printf("%s: training to val loss %.4f (at most %lld steps)\n", nn::precision_name(p),
                  o.target_loss, static_cast<long long>(o.base.steps));
    }
    result.runs.push_back(run_to_target(o, p, result.loss_floor));
    if (p == nn::Precision::bf16 && result.runs[result.baseline].precision != "bf16") {
      result.baseline = result.runs.size() - 1;
    }
  }
  return result;
}

Json compare_json(const CompareResult& result) {
  Json j = Json::object();
  j["model"] = result.model;
  j["target_loss"] = result.target_loss;
  j["loss_floor"] = result.loss_floor ? json_finite_or_null(*result.loss_floor) : Json(nullptr);
  const TargetRun& base = result.runs.at(result.baseline);
  j["baseline"] = base.precision;
  Json runs = Json::array();
  const TargetRun* fp8 = nullptr;
  for (const TargetRun& r : result.runs) {
    if (r.precision == "fp8") fp8 = &r;
    Json x = Json::object();
    x["precision"] = r.precision;
    x["reached"] = r.reached;
    x["steps"] = r.reached ? Json(r.steps) : Json(nullptr);
    x["tokens"] = r.reached ? Json(r.tokens) : Json(nullptr);
    x["wall_s"] = or_null(r.reached, r.train_s);
    x["steps_run"] = r.steps;
    x["tokens_run"] = r.tokens;
    x["wall_s_run"] = json_finite_or_null(r.train_s);
    x["eval_s"] = json_finite_or_null(r.eval_s);
    x["tokens_per_s"] = json_finite_or_null(r.tokens_per_s);
    x["val_loss"] = json_finite_or_null(r.val_loss);
    Json curve = Json::array();
    for (const auto& [step, loss] : r.val_curve) curve.push_back({step, json_finite_or_null(loss)});
    x["val_curve"] = std::move(curve);
    x["speedup_time_to_target"] =
        or_null(r.reached && base.reached && r.train_s > 0, base.train_s / r.train_s);
    x["speedup_tokens_per_s"] = or_null(base.tokens_per_s > 0, r.tokens_per_s / base.tokens_per_s);
    runs.push_back(std::move(x));
  }
  j["runs"] = std::move(runs);
  if (fp8 != nullptr && base.precision == "bf16") {
    j["fp8_speedup"] = {
        {"time_to_target",
         or_null(fp8->reached && base.reached && fp8->train_s > 0, base.train_s / fp8->train_s)},
        {"tokens_per_s", or_null(base.tokens_per_s > 0, fp8->tokens_per_s / base.tokens_per_s)}};
  }
  return j;
}

std::string compare_table(const CompareResult& result) {
  const TargetRun& base = result.runs.at(result.baseline);
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line, "time to val loss %.4f on %s", result.target_loss,
                result.model.c_str());
  out += line;
  if (result.loss_floor) {
    std::snprintf(line, sizeof line, " (the corpus' loss floor: %.4f)", *result.loss_floor);
    out += line;
  }
  out += "; training seconds, evaluations left out\n";
  std::snprintf(line, sizeof line, "%-9s %10s %12s %10s %12s %16s %14s\n", "precision", "steps",
                "tokens", "train s", "tokens/s", "speedup (time)", "speedup (tok/s)");
  out += line;
  for (const TargetRun& r : result.runs) {
    char steps[32], tokens[32], secs[32], t_speed[32], r_speed[32];
    if (r.reached) {
      std::snprintf(steps, sizeof steps, "%lld", static_cast<long long>(r.steps));
      std::snprintf(tokens, sizeof tokens, "%lld", static_cast<long long>(r.tokens));
      std::snprintf(secs, sizeof secs, "%.2f", r.train_s);
    } else {
      std::snprintf(steps, sizeof steps, "not reached");
      std::snprintf(tokens, sizeof tokens, "-");
      std::snprintf(secs, sizeof secs, "-");
    }
    if (&r == &base) {
      std::snprintf(t_speed, sizeof t_speed, "baseline");
      std::snprintf(r_speed, sizeof r_speed, "baseline");
    } else {
      if (r.reached && base.reached && r.train_s > 0) {
        std::snprintf(t_speed, sizeof t_speed, "%.2fx", base.train_s / r.train_s);
      } else {
        std::snprintf(t_speed, sizeof t_speed, "-");
      }
      std::snprintf(r_speed, sizeof r_speed, "%.2fx",
                    base.tokens_per_s > 0 ? r.tokens_per_s / base.tokens_per_s : 0.0);
    }
    std::snprintf(line, sizeof line, "%-9s %10s %12s %10s %12.0f %16s %14s\n", r.precision.c_str(),
                  steps, tokens, secs, r.tokens_per_s, t_speed, r_speed);
    out += line;
  }
  return out;
}

}  // namespace octet::train
