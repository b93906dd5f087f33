#!/usr/bin/env python3
"""Compares a program's figures from a host run and a CUDA run (scripts/fake-cuda.sh).

    fake_cuda_compare.py json HOST.jsonl CUDA.jsonl   # the *_bench programs' --json lines
    fake_cuda_compare.py text HOST.txt CUDA.txt       # the examples' printed tables
    fake_cuda_compare.py results LABEL OUTPUT.txt     # `test LABEL NAME VERDICT` per test run

Figures that are not times must be equal, exactly: they are byte counts, counts, batch sizes
and ratios of byte counts, all from the allocator's exact statistics, so the same program on
the same sizes gives the same numbers on any device (and the float outputs the programs check,
losses and activations, they compare themselves: "bit-identical: yes", `losses_bit_identical`).
Times are left out: a metric in ns, ms or GFLOP/s, or whose name says it is a time or a ratio of
times (`time`, `_ns`, `_ms`, `over_cublas`). Metrics only one device reports (the GPU's
`cuda_*` rows) are listed, not compared.

Text outputs are compared line by line after the device's own words are put in common form
(`host` / `cuda:0`, a host capacity / a GPU allocator's memory limit of the same size, the
backend named in the header). Exit status 0 when equal; otherwise every difference is printed.

`results` turns a test binary's output (`--nocapture`, one thread) into one line per test, the
format of the results.txt that scripts/fake-cuda.sh and scripts/gpu-check.sh write, so that a
run on the fake and one on a GPU compare line by line (`diff`).
"""

import json
import re
import sys

TIME_UNITS = {"ns", "ms", "s", "GFLOP/s"}
TIME_WORDS = ("time", "_ns", "_ms", "over_cublas", "gflops")


def is_time(metric, unit):
    return unit in TIME_UNITS or any(w in metric for w in TIME_WORDS)


def load_json(path):
    metrics = {}
    for line in open(path, encoding="utf-8"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        m = json.loads(line)
        metrics[m["metric"]] = (m["value"], m["unit"])
    return metrics


def compare_json(host_path, cuda_path):
    host, cuda = load_json(host_path), load_json(cuda_path)
    if not host or not cuda:
        print(f"no figures: {len(host)} on the host, {len(cuda)} on CUDA")
        return False
    ok = True
    compared = 0
    times = []
    for name in sorted(set(host) & set(cuda)):
        (hv, hu), (cv, cu) = host[name], cuda[name]
        if is_time(name, hu):
            times.append(name)
            continue
        compared += 1
        if hu != cu or hv != cv:
            print(f"  differs: {name}: host {hv} {hu}, cuda {cv} {cu}")
            ok = False
    only = sorted(set(host) ^ set(cuda))
    print(
        f"  {compared} figures compared, {'all equal' if ok else 'NOT equal'}; "
        f"{len(times)} times left out; {len(only)} on one device only"
        + (f" ({', '.join(only)})" if only else "")
    )
    return ok


# (pattern, replacement) applied to both outputs.
NORMALISE = [
    (re.compile(r"^fake cuda:.*\n?", re.M), ""),
    (re.compile(r"Device: host, capacity (\S+ \S+)\."), r"Device: DEVICE, budget \1."),
    (re.compile(r"Device: cuda:\d+ with memory_limit (\S+ \S+)\."), r"Device: DEVICE, budget \1."),
    (re.compile(r"\bon (host|cuda:\d+):"), "on DEVICE:"),
    (re.compile(r"capacity [\d.]+ [KMGT]iB, limit ([\d.]+ [KMGT]iB)"), r"capacity \1"),
    (re.compile(r"host backend"), "BACKEND"),
    (re.compile(r"Cuda\(\d+\) through the CUDA backend, device bytes"), "BACKEND"),
]


def normalise(text):
    for pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    return text.splitlines()


def compare_text(host_path, cuda_path):
    host = normalise(open(host_path, encoding="utf-8").read())
    cuda = normalise(open(cuda_path, encoding="utf-8").read())
    if not host:
        print("  no output on the host")
        return False
    differences = 0
    for i in range(max(len(host), len(cuda))):
        h = host[i] if i < len(host) else "<none>"
        c = cuda[i] if i < len(cuda) else "<none>"
        if h != c:
            differences += 1
            if differences <= 10:
                print(f"  line {i + 1} differs:\n    host: {h}\n    cuda: {c}")
    print(f"  {len(host)} lines compared, {'all equal' if differences == 0 else f'{differences} differ'}")
    return differences == 0


def results(label, path):
    text = open(path, encoding="utf-8", errors="replace").read()
    # With --nocapture a test's own output comes between its name and its verdict, which ends
    # a line.
    for m in re.finditer(r"^test (\S+) \.\.\. ", text, re.M):
        verdict = re.compile(r"(ok|FAILED|ignored(?:, .*)?)$", re.M).search(text, m.end())
        word = verdict.group(1).split(",")[0] if verdict else "unknown"
        print(f"test {label} {m.group(1)} {word}")
    return True


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("json", "text", "results"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, a, b = sys.argv[1:]
    ok = {"json": compare_json, "text": compare_text, "results": results}[mode](a, b)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
