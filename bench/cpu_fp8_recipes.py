#!/usr/bin/env python3
"""bench/cpu_fp8_recipes.py: the CPU step under every FP8 recipe beside bf16, for one or more
octet binaries (say main's and a branch's), interleaved in one run so that all of them see the
same machine load: per repetition, per thread count, each binary runs `octet bench step
--precision bf16,fp8 --recipe <all>` once. Prints a markdown table of the median step time and
the median of the per-run fp8 / bf16 step-time ratios (bf16 and fp8 timed in the same call),
then one of the fastest call's step time and the ratio of the fastest fp8 to the fastest bf16.

  python bench/cpu_fp8_recipes.py --octet main=/path/octet --octet new=build-cpu/octet \\
      --model bench/cpu_w256.json --batch 8 --seq 256 --threads 1 2 --reps 3 [--interleave]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

RECIPES = ["tensor-current", "tensor-delayed", "row", "block", "mx"]


def run(octet, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = [octet, "bench", "step", "--device", "cpu", "--model", args.model, "--batch",
           str(args.batch), "--seq", str(args.seq), "--precision", "bf16,fp8", "--recipe",
           ",".join(RECIPES), "--warmup", str(args.warmup), "--steps", str(args.steps), "--json"]
    if args.interleave:
        cmd.append("--interleave")
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    times = {}
    for r in json.loads(out)["runs"]:
        if r.get("error"):
            sys.exit(f"{octet}: {r['error']}")
        times[r["recipe"] or "bf16"] = r["step_seconds"]
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--octet", action="append", required=True, help="LABEL=PATH, repeatable")
    p.add_argument("--model", default="bench/cpu_w256.json")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--interleave", action="store_true",
                   help="octet bench step --interleave: bf16 and the recipes stepped in turn "
                        "within each call, a step's time the median of its steps (the binaries "
                        "need the flag)")
    args = p.parse_args()
    binaries = [tuple(o.split("=", 1)) for o in args.octet]
    # samples[(label, threads, name)] = [step seconds per rep]; ratios likewise (fp8 / bf16)
    samples, ratios = {}, {}
    for rep in range(args.reps):
        for threads in args.threads:
            for label, path in binaries:
                t = run(path, args, threads)
                for name, sec in t.items():
                    samples.setdefault((label, threads, name), []).append(sec)
                    ratios.setdefault((label, threads, name), []).append(sec / t["bf16"])
                print(f"rep {rep + 1}/{args.reps} threads {threads} {label}: " +
                      " ".join(f"{n} {s * 1e3:.0f} ms" for n, s in t.items()), file=sys.stderr)
    print(f"\n{args.model} batch {args.batch} x seq {args.seq}, {args.reps} reps x "
          f"({args.warmup} warm-up + {args.steps} timed steps); median step ms, "
          "median fp8/bf16 step-time ratio of the same call\n")
    table(args, binaries, samples, lambda xs: statistics.median(xs) * 1e3, "{:.0f}",
          lambda key: statistics.median(ratios[key]))
    # Interference from other tenants only ever adds time: the fastest call of each is the
    # estimate least moved by it (a machine whose 2-thread ratios move by 0.1 between calls).
    print(f"\nThe fastest of the {args.reps} calls: its step ms, and fp8 / bf16 of the fastest "
          "calls\n")
    table(args, binaries, samples, lambda xs: min(xs) * 1e3, "{:.1f}",
          lambda key: min(samples[key]) / min(samples[key[:2] + ("bf16",)]))


def table(args, binaries, samples, ms_of, ms_format, ratio_of):
    """One markdown table: per thread count and binary, bf16's ms, then each recipe's ms and
    ratio; ms_of reduces a list of step seconds, ratio_of takes a (label, threads, name) key."""
    print("| threads | binary | bf16 ms | " + " | ".join(RECIPES) + " |")
    print("| ---: | --- | ---: | " + " | ".join("---:" for _ in RECIPES) + " |")
    for threads in args.threads:
        for label, _ in binaries:
            bf16 = ms_format.format(ms_of(samples[(label, threads, "bf16")]))
            cells = [ms_format.format(ms_of(samples[(label, threads, name)])) +
                     f" ({ratio_of((label, threads, name)):.2f}x)" for name in RECIPES]
            print(f"| {threads} | {label} | {bf16} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
