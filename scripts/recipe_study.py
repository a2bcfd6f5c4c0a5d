#!/usr/bin/env python3
"""scripts/recipe_study.py: the paired-seed FP8 recipe study (docs/numerics.md, issue 17).

For each seed, trains the same model on the same data from the same seed under bf16, fp32
(the noise reference) and fp8 with each recipe, and prints the paired gap of each run,
    gap = final val loss / bf16's final val loss (same seed) - 1,
per seed, with the mean and the spread (sample standard deviation) over seeds. `octet
compare` answers "how fast to a target"; this answers "how far from bf16", which only a
paired comparison can (a second seed of bf16 alone moves by more than the recipes do).

  scripts/recipe_study.py --octet build/octet --data synthetic --model tiny --steps 300 \
      --seeds 1,2,3 --out build/study/synthetic

Each run's metrics go to OUT/seed<S>/<run>.jsonl (the last record carries the FP8 health of
every layer); OUT/study.json holds every number. Runs go one at a time unless --jobs N.
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time

RECIPES = ["tensor-current", "tensor-current:e4m3", "tensor-delayed", "row", "block", "mx"]


def finished(args, path):
    """The last record of a run that completed (--steps steps, validated), else None."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    if lines and lines[-1].get("step") == args.steps and "val_loss" in lines[-1]:
        return lines[-1]
    return None


def run_one(args, seed, precision, recipe, path):
    last = None if args.fresh else finished(args, path)
    if last is not None:
        return last, 0.0  # done by an earlier call
    cmd = [args.octet, "train", "--model", args.model, "--data", args.data,
           "--precision", precision, "--seed", str(seed), "--steps", str(args.steps),
           "--batch", str(args.batch), "--lr", str(args.lr), "--warmup", str(args.warmup),
           "--eval-every", "0", "--eval-batches", str(args.eval_batches),
           "--log-every", str(args.steps), "--metrics", path, "--quiet"]
    if args.seq_len:
        cmd += ["--seq-len", str(args.seq_len)]
    if precision == "fp8":
        cmd += ["--fp8-recipe", recipe, "--guard", "off"]
    cmd += args.extra
    if os.path.exists(path):
        os.remove(path)
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        last = [json.loads(x) for x in f if x.strip()][-1]
    return last, time.time() - t0


def worst_health(record):
    """The largest saturated and flushed shares over layers, per operand (x, w, dy)."""
    out = {}
    for layer, ops in (record.get("fp8") or {}).items():
        for op, s in ops.items():
            for key in ("saturated", "flushed"):
                v = s.get(key)
                if v is None:
                    continue
                k = f"{op}.{key}"
                if v > out.get(k, (-1, ""))[0]:
                    out[k] = (v, layer)
    return out


def mean_sd(xs):
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, sd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--octet", default="build/octet")
    p.add_argument("--data", default="synthetic")
    p.add_argument("--model", default="tiny")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--eval-batches", type=int, default=16)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--recipes", default=",".join(RECIPES),
                   help="fp8 recipes, comma-separated (recipe grammar of --fp8-recipe)")
    p.add_argument("--no-fp32", action="store_true", help="leave out the fp32 noise reference")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--order", choices=["seeds", "runs"], default="seeds",
                   help="seeds: every run of seed 1 first, then seed 2, ...; runs: each run "
                        "over all seeds before the next (a study cut short keeps whole runs)")
    p.add_argument("--out", required=True)
    p.add_argument("--fresh", action="store_true", help="rerun runs whose metrics exist")
    p.add_argument("--report", action="store_true",
                   help="run nothing: report the runs finished on every seed (a study still "
                        "running or cut short)")
    p.add_argument("extra", nargs="*", help="more `octet train` flags, after --")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = [("bf16", "bf16", None)]
    if not args.no_fp32:
        runs.append(("fp32", "fp32", None))
    runs += [(r, "fp8", r) for r in args.recipes.split(",") if r]

    jobs = []
    for s in seeds:
        os.makedirs(f"{args.out}/seed{s}", exist_ok=True)
    pairs = ([(s, r) for s in seeds for r in runs] if args.order == "seeds" else
             [(s, r) for r in runs for s in seeds])
    for s, (name, prec, recipe) in pairs:
        jobs.append((s, name, prec, recipe, f"{args.out}/seed{s}/{name.replace(':', '_')}.jsonl"))
    results = {}
    t0 = time.time()
    if args.report:
        for s, name, prec, recipe, path in jobs:
            last = finished(args, path)
            if last is not None:
                results[(s, name)] = last
        missing = [r for r in runs if any((s, r[0]) not in results for s in seeds)]
        if missing:
            print("not finished on every seed, left out: " + ", ".join(r[0] for r in missing),
                  file=sys.stderr)
        runs = [r for r in runs if r not in missing]
        if not runs or runs[0][0] != "bf16":
            sys.exit("recipe_study: bf16 has not finished on every seed yet")
        jobs = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_one, args, s, prec, recipe, path): (s, name)
                   for s, name, prec, recipe, path in jobs}
        for fut in concurrent.futures.as_completed(futures):
            s, name = futures[fut]
            last, secs = fut.result()
            results[(s, name)] = last
            print(f"  seed {s} {name:<24} val {last['val_loss']:.4f}  ({secs:.0f} s)",
                  file=sys.stderr, flush=True)

    study = {"config": {k: v for k, v in vars(args).items() if k != "fresh"},
             "wall_s": time.time() - t0, "runs": {}}
    bf16 = {s: results[(s, "bf16")]["val_loss"] for s in seeds}
    for name, prec, recipe in runs:
        gaps = [results[(s, name)]["val_loss"] / bf16[s] - 1 for s in seeds]
        m, sd = mean_sd(gaps)
        study["runs"][name] = {
            "precision": prec, "recipe": recipe,
            "val_loss": {s: results[(s, name)]["val_loss"] for s in seeds},
            "gap": dict(zip(seeds, gaps)), "gap_mean": m, "gap_sd": sd, "gap_max": max(gaps),
            "health": {s: worst_health(results[(s, name)]) for s in seeds},
        }
        if "fp32" in bf16_and_fp32(runs):
            # The same pairing against fp32: where bf16 itself moves away from fp32 (a
            # larger model), a recipe's gap to bf16 mixes its own error with bf16's.
            fp32 = [results[(s, "fp32")]["val_loss"] for s in seeds]
            to_fp32 = [results[(s, name)]["val_loss"] / f - 1 for s, f in zip(seeds, fp32)]
            m32, sd32 = mean_sd(to_fp32)
            study["runs"][name].update({"gap_fp32": dict(zip(seeds, to_fp32)),
                                        "gap_fp32_mean": m32, "gap_fp32_sd": sd32})
    print_table(study, seeds, "bf16", bf16, args)
    if "fp32" in bf16_and_fp32(runs):
        fp32 = {s: results[(s, "fp32")]["val_loss"] for s in seeds}
        print_table(study, seeds, "fp32", fp32, args)
    print("fp8 health at the last step (largest share over layers, mean over seeds):")
    for name, prec, recipe in runs:
        if prec != "fp8":
            continue
        h = study["runs"][name]["health"]
        keys = sorted({k for s in seeds for k in h[s]})
        cells = []
        for k in keys:
            vals = [h[s][k][0] for s in seeds if k in h[s]]
            cells.append(f"{k} {100 * sum(vals) / len(vals):.3g}%")
        print(f"  {name:<26}" + ", ".join(cells))
    with open(f"{args.out}/study.json", "w") as f:
        json.dump(study, f, indent=1, default=str)
    with open(f"{args.out}/study.md", "w") as f:
        f.write(markdown(study, seeds, bf16))
        if "fp32" in bf16_and_fp32(runs):
            fp32 = {s: results[(s, "fp32")]["val_loss"] for s in seeds}
            f.write("\n" + markdown(study, seeds, fp32, "fp32"))


def bf16_and_fp32(runs):
    return {name for name, _, _ in runs if name in ("bf16", "fp32")}


def gap_rows(study, seeds, ref):
    """Each run but `ref`: its name, its gaps to `ref` per seed, mean, sd, se = sd / sqrt(seeds)."""
    key = "gap" if ref == "bf16" else "gap_" + ref
    for name, r in study["runs"].items():
        if name == ref:
            continue
        gaps = [r[key][s] for s in seeds]
        m, sd = mean_sd(gaps)
        yield name, gaps, m, sd, sd / math.sqrt(len(gaps))


def print_table(study, seeds, ref, ref_loss, args):
    """The paired gap of every run to `ref` (bf16 or fp32) on stdout."""
    head = "".join(f"{'seed ' + str(s):>10}" for s in seeds)
    print(f"paired gap to {ref} (final val loss / {ref}'s - 1), {args.model} on {args.data}, "
          f"{args.steps} steps")
    print(f"{'run':<28}{head}{'mean':>10}{'sd':>9}{'se':>9}{'max':>9}")
    print(f"{ref + ' (val loss)':<28}" + "".join(f"{ref_loss[s]:>10.4f}" for s in seeds))
    for name, gaps, m, sd, se in gap_rows(study, seeds, ref):
        print(f"{name:<28}" + "".join(f"{100 * g:>9.2f}%" for g in gaps) +
              f"{100 * m:>9.2f}%{100 * sd:>8.2f}%{100 * se:>8.2f}%{100 * max(gaps):>8.2f}%")


def markdown(study, seeds, ref_loss, ref="bf16"):
    """The gap table to `ref` as Markdown (docs/numerics.md)."""
    cols = "".join(f" seed {s} |" for s in seeds)
    out = [f"| run |{cols} mean | sd | se | max |", "| --- |" + " ---: |" * (len(seeds) + 4)]
    out.append(f"| {ref} (val loss) |" + "".join(f" {ref_loss[s]:.4f} |" for s in seeds) +
               " | | | |")
    for name, gaps, m, sd, se in gap_rows(study, seeds, ref):
        out.append(f"| {name} |" + "".join(f" {100 * g:+.2f}% |" for g in gaps) +
                   f" {100 * m:+.2f}% | {100 * sd:.2f}% | {100 * se:.2f}% | {100 * max(gaps):+.2f}% |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
