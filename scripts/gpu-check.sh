#!/usr/bin/env bash
# GPU check: builds and runs every CUDA test and the GPU benchmarks in one go.
#
#   scripts/gpu-check.sh            # logs and results in target/gpu-check
#
# When $OUT is set, the results also go there as a few files (the GPU machine returns at most
# eight): summary.txt, one JSON-lines file per benchmark, and gpu-check-logs.tar.gz with every
# log.
#
# Needs an NVIDIA GPU and its driver (libcuda). Fails loudly without them: the CUDA tests run
# with VRAMGUARD_REQUIRE_GPU=1, so a test that would skip on a CPU-only machine fails here.
# Every step runs even if an earlier one failed; the script exits non-zero if any failed, and
# writes a one-line status per step to summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

RESULTS="target/gpu-check"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
SUMMARY="$RESULTS/summary.txt"
: > "$SUMMARY"
export CARGO_TERM_COLOR=never
export VRAMGUARD_REQUIRE_GPU=1
# Benchmarks must not pick up a stray allocator configuration.
unset VRAMGUARD_ALLOC_CONF

fail() {
    echo "gpu-check: FATAL: $*" | tee -a "$SUMMARY" >&2
    exit 1
}

# --- Is there a GPU at all? ---------------------------------------------------------------
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
    found=""
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/lib64 /usr/lib/wsl/lib; do
        if ls "$d"/libcuda.so* >/dev/null 2>&1; then found="$d"; fi
    done
    [ -n "$found" ] || fail "no CUDA driver library (libcuda.so) found: this script needs an NVIDIA GPU and driver"
fi
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi > "$RESULTS/nvidia-smi.txt" 2>&1 || fail "nvidia-smi failed: no usable GPU (see $RESULTS/nvidia-smi.txt)"
    nvidia-smi -L | grep -q GPU || fail "nvidia-smi lists no GPU"
else
    echo "gpu-check: nvidia-smi not found; relying on the tests to detect the GPU" | tee -a "$SUMMARY"
fi

status=0
step() {
    # step NAME COMMAND...: runs COMMAND, logs to $RESULTS/NAME.log, records the outcome.
    local name="$1"; shift
    echo "== $name: $*"
    local start=$SECONDS
    "$@" > "$RESULTS/$name.log" 2>&1
    local rc=$?
    local secs=$((SECONDS - start))
    if [ $rc -eq 0 ]; then
        echo "ok    $name (${secs}s)" | tee -a "$SUMMARY"
    else
        echo "FAIL  $name (rc $rc, ${secs}s): see $RESULTS/$name.log" | tee -a "$SUMMARY"
        tail -n 30 "$RESULTS/$name.log"
        status=1
    fi
}

# --- Build everything once ---------------------------------------------------------------
step build cargo build --release --workspace --all-targets

# --- CUDA tests: every integration test file with "cuda" in its name, in any package -------
shopt -s nullglob
ran_tests=0
for f in runtime/tests/*cuda*.rs tests/*cuda*.rs macros/tests/*cuda*.rs; do
    name="$(basename "$f" .rs)"
    case "$f" in
        runtime/*) pkg=vramguard-runtime ;;
        macros/*) pkg=vramguard-macros ;;
        *) pkg=vramguard ;;
    esac
    step "test-$name" cargo test --release -p "$pkg" --test "$name" -- --nocapture --test-threads=1
    ran_tests=$((ran_tests + 1))
done
[ "$ran_tests" -gt 0 ] || { echo "FAIL  no CUDA test files found" | tee -a "$SUMMARY"; status=1; }

# The default settings (`expandable_segments:auto`) must pick expandable segments on this GPU and
# its pages must read back what was written: make sure that test really ran and passed.
auto_test="auto_on_a_gpu_picks_expandable_segments_and_its_pages_read_back_what_was_written"
if grep -q "^test $auto_test \.\.\. ok" "$RESULTS/test-alloc_cuda.log" 2>/dev/null; then
    echo "ok    default-expandable-segments-on-gpu ($auto_test)" | tee -a "$SUMMARY"
else
    echo "FAIL  default-expandable-segments-on-gpu: $auto_test did not pass (see $RESULTS/test-alloc_cuda.log)" | tee -a "$SUMMARY"
    status=1
fi

# Unit tests that mention CUDA (filter by name), across the workspace.
step test-unit-cuda cargo test --release --workspace --lib -- cuda --nocapture

# --- GPU benchmarks: every *_bench example that accepts --device cuda ----------------------
for f in examples/*_bench.rs; do
    name="$(basename "$f" .rs)"
    if grep -q -- '--device cuda' "$f"; then
        # One run, JSON lines (DESIGN.md's format): one object per metric.
        step "bench-$name" bash -c "cargo run --release --example '$name' -- --device cuda --json | tee '$RESULTS/$name.cuda.jsonl'"
    fi
done

echo
echo "gpu-check summary ($RESULTS):"
cat "$SUMMARY"
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    cp "$SUMMARY" "$OUT/"
    cp "$RESULTS"/*.jsonl "$OUT/" 2>/dev/null
    tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
    echo "results copied to $OUT"
fi
exit $status
