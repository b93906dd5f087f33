#!/usr/bin/env python3
"""The allocator's pair times of two builds of alloc_bench, side by side.

    cargo build --release --example alloc_bench      # in each tree, then copy the binaries
    scripts/compare-alloc-speed.py BEFORE AFTER [--runs N] [-- ARGS...]

Runs the two binaries alternately, N times each (default 6; ARGS default `--quick --json`),
and prints, for each pair time, the median of each build, the median of the per-round ratios
AFTER / BEFORE (each round runs both builds back to back, so load drifts cancel), and the same
ratio for each build's figure over its own `system_pair_ns` of the same run.
"""
import json
import statistics
import subprocess
import sys

TIMES = [
    "cached_pair_ns",
    "cached_pair_ns_empty_device",
    "cached_pair_ns_fixed_segments",
    "cached_pair_ns_recording",
    "cached_pair_ns_2threads",
    "system_pair_ns",
]


def run(binary, args):
    out = subprocess.run([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, check=True).stdout
    figures = {}
    for line in out.splitlines():
        if line.startswith("{"):
            m = json.loads(line)
            figures[m["metric"]] = m["value"]
    return figures


def main():
    argv = sys.argv[1:]
    args = ["--quick", "--json"]
    if "--" in argv:
        i = argv.index("--")
        argv, args = argv[:i], argv[i + 1:]
    runs = 6
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    before, after = argv
    rounds = []
    for r in range(runs):
        # Alternate which build goes first.
        order = [(0, before), (1, after)] if r % 2 == 0 else [(1, after), (0, before)]
        pair = [None, None]
        for k, binary in order:
            pair[k] = run(binary, args)
        rounds.append(pair)
        print(f"round {r + 1}: cached_pair_ns {pair[0].get('cached_pair_ns'):.1f} -> "
              f"{pair[1].get('cached_pair_ns'):.1f}", file=sys.stderr, flush=True)
    print(f"{runs} rounds, builds alternating ({' '.join(args)})")
    print(f"{'figure':32} {'before':>9} {'after':>9} {'after/before':>13} {'(over system)':>14}")
    for name in TIMES:
        if not all(name in p[0] and name in p[1] for p in rounds):
            continue
        b = statistics.median(p[0][name] for p in rounds)
        a = statistics.median(p[1][name] for p in rounds)
        ratio = statistics.median(p[1][name] / p[0][name] for p in rounds)
        norm = statistics.median((p[1][name] / p[1]["system_pair_ns"])
                                 / (p[0][name] / p[0]["system_pair_ns"]) for p in rounds)
        print(f"{name:32} {b:9.2f} {a:9.2f} {ratio:13.3f} {norm:14.3f}")


if __name__ == "__main__":
    main()
