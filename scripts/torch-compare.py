#!/usr/bin/env python3
"""PyTorch beside vramguard on the same GPU, in the same run (scripts/gpu-check.sh runs it).

1. Allocation trace: replays the trace `alloc_bench --export-trace PATH` writes (the synthetic
   BERT-base inference trace alloc_bench replays itself: every allocation's size and every free,
   in order) through PyTorch's CUDA caching allocator (`torch.cuda.caching_allocator_alloc` /
   `caching_allocator_delete`), once with `expandable_segments:False` (PyTorch's default) and
   once with `expandable_segments:True`, each in a process of its own (the setting is read when
   the allocator starts). Prints peak reserved, peak allocated, their ratio, and ns per
   alloc+free pair (the replay loop's time over the number of pairs; the same loop with the
   allocator calls replaced by no-ops is measured in the same process and shown, since in
   Python it is most of the time), beside vramguard's figures for the same trace from
   `alloc_bench --device cuda --json` (`trace_*` rows).
2. Encoder: a BERT-shaped encoder of `inference_bench`'s configuration (hidden 768, 12 heads,
   FFN 3072, vocabulary 8192, same synthetic batch and mask, same ops in the same order) in
   PyTorch under `torch.no_grad()`; its activation peak (peak allocated during the forward pass
   above what was allocated before it: weights and inputs excluded, output included) beside
   `inference_bench --device cuda --json`'s `peak_bytes_inference` (`#[inference]`) and
   `peak_bytes_nograd`.

Usage:
  torch-compare.py --trace T.json [--vramguard alloc.jsonl] [--inference inf.jsonl]
                   [--layers 12 --seq 128 --batch 8] [--json OUT.jsonl]
  torch-compare.py --check-trace T.json      # parse and summarise only (no PyTorch needed)
  torch-compare.py --self-test               # the parser against good and bad traces

Without PyTorch, or without CUDA, the PyTorch part prints one `skipped: <why>` line and the
script exits 0; with VRAMGUARD_REQUIRE_GPU=1 (set by scripts/gpu-check.sh on a GPU machine)
that is exit 1. Needs only the Python standard library besides PyTorch.
"""

import argparse
import json
import os
import subprocess
import sys
import time

TRACE_FORMAT = "vramguard-alloc-trace"
TRACE_VERSION = 1


class TraceError(Exception):
    """A trace file that is not what alloc_bench --export-trace writes."""


def parse_trace(path):
    """Reads and checks a trace file. Returns a dict with the header fields and `events`.

    Encoding (see examples/common/alloc_trace.rs, `export_trace`): `events` is a list of integers; a
    positive value allocates that many bytes (the allocations are numbered 0, 1, ... in order),
    a negative value -(i + 1) frees allocation i, and 0 ends a step. Every allocation is freed
    before the end, and the header's `allocs` and `peak_live_bytes` must match the events.
    """
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: cannot read the trace: {e}") from e
    if not isinstance(trace, dict) or trace.get("format") != TRACE_FORMAT:
        raise TraceError(f"{path}: not a {TRACE_FORMAT} file")
    if trace.get("version") != TRACE_VERSION:
        raise TraceError(f"{path}: version {trace.get('version')}, this script reads {TRACE_VERSION}")
    events = trace.get("events")
    if not isinstance(events, list) or not all(isinstance(e, int) for e in events):
        raise TraceError(f"{path}: `events` must be a list of integers")
    live = {}
    allocs = steps = 0
    live_bytes = peak = 0
    for at, e in enumerate(events):
        if e > 0:
            live[allocs] = e
            allocs += 1
            live_bytes += e
            peak = max(peak, live_bytes)
        elif e < 0:
            i = -e - 1
            if i not in live:
                raise TraceError(f"{path}: event {at} frees allocation {i}, which is not live")
            live_bytes -= live.pop(i)
        else:
            steps += 1
    if live:
        raise TraceError(f"{path}: {len(live)} allocations are never freed")
    for key, seen in (("allocs", allocs), ("steps", steps), ("peak_live_bytes", peak)):
        if trace.get(key) != seen:
            raise TraceError(f"{path}: header says {key} = {trace.get(key)}, the events give {seen}")
    return trace


def self_test():
    """The parser against traces it must accept and refuse (run by the GPU check's dry run)."""
    import tempfile

    good = {"format": TRACE_FORMAT, "version": 1, "steps": 2, "allocs": 3,
            "peak_live_bytes": 500, "events": [100, 200, -1, 0, 300, -2, -3, 0]}
    bad = {
        "a wrong peak": dict(good, peak_live_bytes=600),
        "a wrong count": dict(good, allocs=4),
        "a double free": dict(good, events=[100, 200, -1, -1, 0, 300, -2, -3, 0]),
        "a leak": dict(good, events=[100, 200, -1, 0, 300, -3, 0]),
        "another format": dict(good, format="other"),
        "a float size": dict(good, events=[100.5, -1, 0]),
    }
    failures = []
    with tempfile.TemporaryDirectory() as d:
        def write(trace):
            path = os.path.join(d, "t.json")
            with open(path, "w") as f:
                json.dump(trace, f)
            return path

        try:
            parse_trace(write(good))
        except TraceError as e:
            failures.append(f"the good trace was refused: {e}")
        for what, trace in bad.items():
            try:
                parse_trace(write(trace))
                failures.append(f"a trace with {what} was accepted")
            except TraceError:
                pass
        with open(os.path.join(d, "f.jsonl"), "w") as f:
            f.write('skipped: no GPU\n{"bench":"alloc_cuda","metric":"trace_pair_ns","value":51.5,"unit":"ns"}\n')
        if read_figures(os.path.join(d, "f.jsonl")) != {"trace_pair_ns": 51.5}:
            failures.append("the figures file was misread")
    for f in failures:
        print(f"torch-compare self-test: FAIL: {f}")
    print(f"torch-compare self-test: {1 + len(bad) + 1 - len(failures)}/{len(bad) + 2} ok")
    sys.exit(1 if failures else 0)


def read_figures(path):
    """`{metric: value}` from a JSON-lines file of the benchmarks' `--json` output (other lines,
    such as a skip message, are ignored)."""
    figures = {}
    if not path or not os.path.exists(path):
        return figures
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "metric" in row and "value" in row:
                figures[row["metric"]] = row["value"]
    return figures


def mib(b):
    return f"{b / 2**20:.1f} MiB" if isinstance(b, (int, float)) else "—"


def ratio(a, b):
    return f"{a / b:.3f}" if isinstance(a, (int, float)) and b else "—"


def ns(v):
    return f"{v:.0f}" if isinstance(v, (int, float)) else "—"


def require_gpu():
    return os.environ.get("VRAMGUARD_REQUIRE_GPU") == "1"


def skip(why):
    """The PyTorch part cannot run here: one line, and exit 0 (1 when a GPU is required)."""
    print(f"torch-compare: skipped: {why}")
    sys.exit(1 if require_gpu() else 0)


def torch_or_skip():
    try:
        import torch  # noqa: F401 (imported for its side effect of being present)
    except ImportError as e:
        skip(f"PyTorch is not installed ({e})")
    import torch

    if not torch.cuda.is_available():
        skip(f"PyTorch {torch.__version__} sees no CUDA device")
    return torch


def replay_child(trace_path, expandable):
    """In a process of its own (the allocator setting is read once): the trace through PyTorch's
    caching allocator. Prints one JSON line."""
    torch = torch_or_skip()
    events = parse_trace(trace_path)["events"]
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    stream = torch.cuda.current_stream().cuda_stream
    device = torch.cuda.current_device()

    def run(alloc, delete):
        ptrs = []
        t = time.perf_counter_ns()
        for e in events:
            if e > 0:
                ptrs.append(alloc(e, device, stream))
            elif e < 0:
                delete(ptrs[-e - 1])
        return time.perf_counter_ns() - t

    # A first pass loads CUDA and the allocator; emptied, so the measured pass starts from an
    # empty cache as alloc_bench's replay does.
    run(alloc, delete)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    elapsed = run(alloc, delete)
    stats = torch.cuda.memory_stats()
    noop = run(lambda size, dev, s: 0, lambda p: None)
    pairs = sum(1 for e in events if e > 0)
    print(
        json.dumps(
            {
                "expandable_segments": expandable,
                "peak_reserved_bytes": stats["reserved_bytes.all.peak"],
                "peak_allocated_bytes": stats["allocated_bytes.all.peak"],
                "segment_allocs": stats.get("segment.all.allocated", 0),
                "pair_ns": elapsed / pairs,
                "loop_only_pair_ns": noop / pairs,
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(device),
            }
        )
    )


def replay_in_child(trace_path, expandable):
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = f"expandable_segments:{'True' if expandable else 'False'}"
    out = subprocess.run(
        [sys.executable, __file__, "--replay-child", trace_path, "--expandable", str(int(expandable))],
        env=env,
        capture_output=True,
        text=True,
    )
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"the replay child failed ({out.returncode}): {out.stdout}{out.stderr}")


def encoder_peak(torch, layers, seq, batch, hidden=768, heads=12, ffn=3072, vocab=8192):
    """inference_bench's encoder in PyTorch under no_grad: activation peak in bytes."""
    dev = "cuda"
    g = torch.Generator(device="cpu").manual_seed(0)

    def p(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dev)

    def linear(i, o):
        return (p(o, i), p(o))

    def ln():
        return (torch.ones(hidden, device=dev), torch.zeros(hidden, device=dev))

    word, pos, emb_ln = p(vocab, hidden), p(512, hidden), ln()
    blocks = [
        dict(q=linear(hidden, hidden), k=linear(hidden, hidden), v=linear(hidden, hidden),
             ao=linear(hidden, hidden), aln=ln(), i=linear(hidden, ffn), o=linear(ffn, hidden),
             oln=ln())
        for _ in range(layers)
    ]
    ids = torch.tensor(
        [(i * 2654435761) % vocab for i in range(batch * seq)], dtype=torch.long, device=dev
    ).reshape(batch, seq)
    mask = torch.tensor(
        [-10000.0 if (i // seq) % 2 == 1 and i % seq >= seq - seq // 4 else 0.0
         for i in range(batch * seq)], device=dev
    ).reshape(batch, 1, 1, seq)
    F = torch.nn.functional
    head = hidden // heads

    def split(x):
        return x.reshape(batch, seq, heads, head).transpose(1, 2).contiguous()

    def forward():
        x = F.embedding(ids, word) + pos[:seq]
        x = F.layer_norm(x, (hidden,), *emb_ln, eps=1e-12)
        for b in blocks:
            q, k, v = (split(F.linear(x, *b[n])) for n in ("q", "k", "v"))
            scores = q @ k.transpose(-1, -2) * (1.0 / head**0.5) + mask
            probs = scores.softmax(3)
            ctx = (probs @ v).transpose(1, 2).contiguous().reshape(batch, seq, hidden)
            a = F.layer_norm(F.linear(ctx, *b["ao"]) + x, (hidden,), *b["aln"], eps=1e-12)
            h = F.gelu(F.linear(a, *b["i"]))
            x = F.layer_norm(F.linear(h, *b["o"]) + a, (hidden,), *b["oln"], eps=1e-12)
        return x

    with torch.no_grad():
        forward()  # cuBLAS workspaces and kernels loaded outside the measurement
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = forward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
        del out
    return peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace")
    ap.add_argument("--check-trace")
    ap.add_argument("--vramguard", help="alloc_bench --device cuda --json output")
    ap.add_argument("--inference", help="inference_bench --device cuda --json output")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--json", help="append the figures as JSON lines to this file")
    ap.add_argument("--self-test", action="store_true", help="check the trace parser and exit")
    ap.add_argument("--replay-child", help=argparse.SUPPRESS)
    ap.add_argument("--expandable", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.self_test:
        self_test()
    if a.replay_child:
        replay_child(a.replay_child, bool(a.expandable))
        return
    if a.check_trace:
        try:
            t = parse_trace(a.check_trace)
        except TraceError as e:
            print(f"torch-compare: {e}", file=sys.stderr)
            sys.exit(1)
        print(
            f"trace ok: {t['steps']} steps, {t['allocs']} allocations, peak live "
            f"{t['peak_live_bytes']} bytes ({mib(t['peak_live_bytes'])})"
        )
        return
    if not a.trace:
        ap.error("--trace (or --check-trace) is required")
    try:
        trace = parse_trace(a.trace)
    except TraceError as e:
        print(f"torch-compare: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"trace: {trace['steps']} steps, {trace['allocs']} allocations, peak live {mib(trace['peak_live_bytes'])}")
    torch = torch_or_skip()
    ours = read_figures(a.vramguard)
    rows = []
    for expandable in (False, True):
        r = replay_in_child(a.trace, expandable)
        rows.append((f"PyTorch {r['torch']}, expandable_segments:{expandable}", r["peak_reserved_bytes"],
                     r["peak_allocated_bytes"], r["pair_ns"], r["loop_only_pair_ns"]))
    for name, suffix in (("vramguard, default (expandable, planned)", ""),
                         ("vramguard, iteration_planning:false", "_unplanned"),
                         ("vramguard, expandable_segments:false", "_fixed_segments")):
        rows.append((name, ours.get(f"trace_peak_reserved_bytes{suffix}"),
                     ours.get("trace_peak_allocated_bytes"), ours.get(f"trace_pair_ns{suffix}"), None))
    print(f"\nallocation trace on {torch.cuda.get_device_name()}:")
    print("| allocator | peak reserved | peak allocated | reserved / allocated | ns per alloc+free pair | of which Python loop |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    figures = []
    for name, res, alloc, pair, loop in rows:
        print(f"| {name} | {mib(res)} | {mib(alloc)} | {ratio(res, alloc)} | {ns(pair)} | {ns(loop)} |")
        figures.append({"allocator": name, "peak_reserved_bytes": res, "peak_allocated_bytes": alloc,
                        "pair_ns": pair, "loop_only_pair_ns": loop})

    ours_inf = read_figures(a.inference)
    peak = encoder_peak(torch, a.layers, a.seq, a.batch)
    print(f"\nBERT-shaped encoder, {a.layers} layers, batch {a.batch}, seq {a.seq}, activation peak:")
    print("| forward pass | activation peak |")
    print("| --- | ---: |")
    print(f"| PyTorch, torch.no_grad() | {mib(peak)} ({peak} bytes) |")
    for name, key in (("vramguard, #[inference]", "peak_bytes_inference"),
                      ("vramguard, no-grad guard only", "peak_bytes_nograd")):
        v = ours_inf.get(key)
        print(f"| {name} | {mib(v)}{f' ({int(v)} bytes)' if v is not None else ''} |")
    figures.append({"encoder": "pytorch_no_grad", "activation_peak_bytes": peak,
                    "layers": a.layers, "batch": a.batch, "seq": a.seq})
    if a.json:
        with open(a.json, "a") as f:
            for row in figures:
                f.write(json.dumps({"bench": "torch_compare", **row}) + "\n")


if __name__ == "__main__":
    main()
