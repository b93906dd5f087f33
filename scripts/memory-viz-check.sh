#!/usr/bin/env bash
# Reads a vramguard snapshot (`memory::dump_snapshot`) with PyTorch's own renderer,
# torch/cuda/_memory_viz.py, taken from the torch wheel on PyPI (about 540 MB, downloaded once
# into target/torch-wheel; not run in CI). The module needs only Python's standard library, so
# it is loaded on its own, without importing torch.
#
#   scripts/memory-viz-check.sh [SNAPSHOT.pickle]
#
# Without an argument it writes the fragmentation example's naive loop (the one that runs out
# of memory). It runs segsum (the segment summary, which asserts that every byte of every
# segment is allocated or free), trace (the event list), memory and segments (the flamegraph
# inputs), and trace_plot / segment_plot (the memory_viz pages, which load their script from
# PyTorch's CDN when opened), and prints what each made of the file.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
wheels=${TORCH_WHEEL_DIR:-$root/target/torch-wheel}
mkdir -p "$wheels"
if ! ls "$wheels"/torch-*.whl >/dev/null 2>&1; then
    echo "downloading the torch wheel from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: --progress-bar off \
        -d "$wheels" torch >&2
fi
snapshot=${1:-$root/target/fragmentation.pickle}
if [[ $# -eq 0 ]]; then
    cargo run --quiet --release --example fragmentation -- --snapshot "$snapshot" >/dev/null || true
fi
out=$root/target/memory-viz-check
mkdir -p "$out"
python3 - "$wheels" "$snapshot" "$out" <<'PY'
import importlib.util, pathlib, pickle, sys, zipfile

wheels, snapshot, out = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
wheel = sorted(wheels.glob("torch-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    source = z.read("torch/cuda/_memory_viz.py")
(out / "_memory_viz.py").write_bytes(source)
spec = importlib.util.spec_from_file_location("_memory_viz", out / "_memory_viz.py")
viz = importlib.util.module_from_spec(spec)
spec.loader.exec_module(viz)
print(f"PyTorch renderer: torch/cuda/_memory_viz.py from {wheel.name}")

with open(snapshot, "rb") as f:
    data = pickle.load(f)

summary = viz.segsum(data)
print("\n== segsum ==\n" + summary.split("\nLegend:")[0])

events = viz.trace(data)
lines = events.splitlines()
print(f"== trace: {len(lines)} lines; first and last ==")
print("\n".join(lines[:6] + ["..."] + lines[-4:]))

for name in ("memory", "segments"):
    folded = getattr(viz, name)(data, format_flamegraph=lambda lines: lines)
    rows = folded.splitlines()
    print(f"== {name}: {len(rows)} flamegraph rows, e.g. ==\n" + "\n".join(rows[:3]))

for name in ("trace_plot", "segment_plot"):
    page = getattr(viz, name)(data)
    (out / f"{name}.html").write_text(page)
    print(f"== {name}: {len(page)} bytes of HTML -> {out / (name + '.html')}")
PY
