#!/usr/bin/env python3
"""Every figure of the benchmark programs that is not a time, before and after a change.

    scripts/compare-figures.py record FILE     run the programs, save their figures in FILE
    scripts/compare-figures.py compare FILE    run them again, compare with FILE; exit 1 on a
                                               difference

Options: --profile dev|release (default dev: byte counts and counts do not depend on the
profile, and times are not compared), --only a,b (a subset of the programs, by name).

The programs (each with `--quick --json`, the sizes of a smoke run, the same every time):
alloc_bench, inference_bench, gan_bench, candle_inference (feature `candle`) and
burn_inference (feature `burn-ndarray`). Each prints one JSON object per metric
(`{"bench","metric","value","unit"}`, DESIGN.md's format). A figure is a time, and is not
compared, when its unit is ns, ms or GFLOP/s or its name says so (`time_…`, `…_ns…`);
everything else — bytes, counts, batches, memory ratios, and the `target_met` of a figure
that is not a time — must be identical. A metric present on one side only is a difference.
"""
import argparse
import json
import subprocess
import sys

PROGRAMS = [
    ("alloc_bench", []),
    ("inference_bench", []),
    ("gan_bench", []),
    ("candle_inference", ["--features", "candle"]),
    ("burn_inference", ["--features", "burn-ndarray"]),
]
TIME_UNITS = {"ns", "ms", "GFLOP/s"}


def is_time(metric: dict) -> bool:
    name = metric["metric"]
    return (
        metric.get("unit") in TIME_UNITS
        or name.startswith("time")
        or "_time" in name
        or name.endswith("_ns")
        or "_ns_" in name
    )


def run(program: str, features: list, profile: str) -> dict:
    cmd = ["cargo", "run", "-q", "--profile", profile, *features, "--example", program,
           "--", "--quick", "--json"]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    # The programs' progress lines (stderr) are shown only when one fails.
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        sys.exit(f"{program} failed with exit status {out.returncode}")
    figures = {}
    for line in out.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        metric = json.loads(line)
        if is_time(metric):
            continue
        key = f"{metric['bench']}/{metric['metric']}"
        figures[key] = {"value": metric["value"], "unit": metric.get("unit")}
        if "target_met" in metric:
            figures[key]["target_met"] = metric["target_met"]
    if not figures:
        sys.exit(f"{program} printed no figure")
    return figures


def collect(profile: str, only) -> dict:
    figures = {}
    for program, features in PROGRAMS:
        if only and program not in only:
            continue
        figures[program] = run(program, features, profile)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["record", "compare"])
    parser.add_argument("file")
    parser.add_argument("--profile", default="dev", choices=["dev", "release"])
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = [p for p in args.only.split(",") if p]
    now = collect(args.profile, only)
    if args.mode == "record":
        with open(args.file, "w") as f:
            json.dump(now, f, indent=1, sort_keys=True)
            f.write("\n")
        count = sum(len(v) for v in now.values())
        print(f"recorded {count} figures of {len(now)} programs in {args.file}")
        return 0
    with open(args.file) as f:
        before = json.load(f)
    differences = 0
    compared = 0
    for program in now:
        old, new = before.get(program, {}), now[program]
        for key in sorted(set(old) | set(new)):
            a, b = old.get(key), new.get(key)
            compared += 1
            same = a == b
            differences += not same
            show = lambda v: "—" if v is None else f"{v['value']} {v['unit']}" + (
                "" if "target_met" not in v else f" (target met: {v['target_met']})")
            print(f"{'same' if same else 'DIFFERENT':9} {key:70} {show(a):>28} -> {show(b)}")
    skipped = [p for p in before if p not in now]
    print(f"{compared} figures compared, {differences} different"
          + (f"; not run: {', '.join(skipped)}" if skipped else ""))
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
