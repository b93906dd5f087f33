#!/usr/bin/env bash
# GPU check in two steps, for a lent GPU machine that has no network and little time:
#
#   scripts/gpu-check.sh prepare   # HERE (with cargo): builds the CUDA test binaries and the
#                                  # example/benchmark programs in release mode, copies just the
#                                  # executables (debug info stripped) into target/gpu-carry/,
#                                  # prints its size and the path to carry
#   scripts/gpu-check.sh run       # ON THE GPU MACHINE (no cargo needed): runs what `prepare`
#                                  # built; logs, JSON figures and summary.txt go to $OUT
#                                  # (target/gpu-check when $OUT is unset)
#
# With the device tool: run `prepare` here, then
#   run(command="scripts/gpu-check.sh run", carry=["target/gpu-carry"], timeout_s=...)
#
# `run` runs every CUDA test binary (each integration test whose name contains "cuda", from any
# helper: cuda_alloc, cuda_fault, alloc_cuda, cuda_ops, ...), the runtime's unit tests whose
# name contains "cuda", and the programs that take `--device cuda` (alloc_bench, fragmentation,
# and the others when built), each with a time limit. When the CUDA driver is present the tests
# run with VRAMGUARD_REQUIRE_GPU=1, so a test that would skip fails instead; without a driver
# every test reports its skip, the programs print their one line, and the script exits 0 after
# writing its summary. Every step runs even if an earlier one failed; the exit status is 1 if
# any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

CARRY="target/gpu-carry"
# Programs run with `--device cuda` (and `--json` for the *_bench ones): those of this list whose
# source mentions `--device cuda` are carried by `prepare` (the others would only repeat their
# host runs).
PROGRAMS=(alloc_bench fragmentation tensor_bench inference_bench gan_bench bert_inference inplace)
# Time limits (seconds) per test binary and per program on the GPU machine.
TEST_LIMIT=${GPU_CHECK_TEST_LIMIT:-240}
PROGRAM_LIMIT=${GPU_CHECK_PROGRAM_LIMIT:-120}

prepare() {
    command -v cargo >/dev/null || { echo "gpu-check prepare: cargo not found" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "gpu-check prepare: python3 not found" >&2; exit 1; }
    rm -rf "$CARRY"
    mkdir -p "$CARRY/tests" "$CARRY/programs"
    local msgs
    msgs="$(mktemp)"
    echo "== cargo test --release --no-run (runtime and facade)"
    cargo test --release --no-run -p vramguard-runtime -p vramguard --message-format=json \
        > "$msgs" || { echo "gpu-check prepare: building the tests failed" >&2; exit 1; }
    echo "== cargo build --release --examples"
    cargo build --release --examples --message-format=json >> "$msgs" \
        || { echo "gpu-check prepare: building the examples failed" >&2; exit 1; }
    local gpu_programs=() p
    for p in "${PROGRAMS[@]}"; do
        if grep -q -- '--device cuda' "examples/$p.rs" 2>/dev/null; then
            gpu_programs+=("$p")
        fi
    done
    # Test binaries whose name contains "cuda", the runtime's unit-test binary, and the
    # programs, by target name.
    python3 - "$msgs" "$CARRY" "${gpu_programs[@]}" <<'EOF'
import json, shutil, sys
msgs, carry, programs = sys.argv[1], sys.argv[2], set(sys.argv[3:])
for line in open(msgs):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    if m.get("reason") != "compiler-artifact" or not exe:
        continue
    t = m["target"]
    kinds, name = t["kind"], t["name"]
    if m.get("profile", {}).get("test") and "test" in kinds and "cuda" in name:
        shutil.copy(exe, f"{carry}/tests/{name}")
    elif m.get("profile", {}).get("test") and "lib" in kinds and name == "vramguard_runtime":
        shutil.copy(exe, f"{carry}/tests/lib-vramguard_runtime")
    elif "example" in kinds and name in programs:
        shutil.copy(exe, f"{carry}/programs/{name}")
EOF
    rm -f "$msgs"
    # The tensor kernels as PTX, so that the GPU machine needs no NVRTC (the CUDA backend loads
    # `VRAMGUARD_KERNELS_PTX` when NVRTC is missing).
    echo "== scripts/kernels-check.sh (NVRTC from PyPI; writes the kernels' PTX)"
    scripts/kernels-check.sh || { echo "gpu-check prepare: the kernel check failed" >&2; exit 1; }
    cp target/kernels-ptx/vramguard_kernels.ptx "$CARRY/" \
        || { echo "gpu-check prepare: no PTX from kernels-check.sh" >&2; exit 1; }
    if command -v strip >/dev/null; then
        strip --strip-debug "$CARRY"/tests/* "$CARRY"/programs/* 2>/dev/null
    fi
    echo
    echo "carried executables:"
    ls -l "$CARRY/tests" "$CARRY/programs" | sed 's/^/  /'
    local bytes
    bytes=$(du -sb "$CARRY" | cut -f1)
    echo "total: $bytes bytes ($((bytes / 1048576)) MiB; the device tool carries at most 64 MiB)"
    if [ "$bytes" -gt $((60 * 1048576)) ]; then
        echo "gpu-check prepare: $CARRY is over 60 MiB: too large to carry" >&2
        exit 1
    fi
    echo "carry: [\"$CARRY\"]   command: scripts/gpu-check.sh run"
}

run() {
    local out="${OUT:-target/gpu-check}"
    mkdir -p "$out"
    local logs
    logs="$(mktemp -d)"
    local summary="$out/summary.txt"
    export VRAMGUARD_GPU_FIGURES="$out/figures.jsonl"
    : > "$summary"
    : > "$VRAMGUARD_GPU_FIGURES"
    unset VRAMGUARD_ALLOC_CONF
    if [ -f "$CARRY/vramguard_kernels.ptx" ]; then
        VRAMGUARD_KERNELS_PTX="$(pwd)/$CARRY/vramguard_kernels.ptx"
        export VRAMGUARD_KERNELS_PTX
    fi
    [ -d "$CARRY/tests" ] || { echo "gpu-check run: $CARRY missing: run 'scripts/gpu-check.sh prepare' first and carry it" | tee -a "$summary"; exit 1; }

    {
        echo "gpu-check run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
        echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    } >> "$summary"
    local gpu=0
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L > "$logs/nvidia-smi.txt" 2>&1; then
        gpu=1
        nvidia-smi >> "$logs/nvidia-smi.txt" 2>&1
        echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)" >> "$summary"
    elif ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
        gpu=1
        echo "gpu: libcuda present, nvidia-smi unavailable" >> "$summary"
    else
        echo "gpu: none (no nvidia-smi, no libcuda): every CUDA test must report its skip" >> "$summary"
    fi
    if [ "$gpu" = 1 ]; then
        export VRAMGUARD_REQUIRE_GPU=1
    else
        unset VRAMGUARD_REQUIRE_GPU
    fi

    local status=0
    # step NAME LIMIT COMMAND...: runs COMMAND with a time limit, logs it, records the outcome.
    step() {
        local name="$1" limit="$2"
        shift 2
        local log="$logs/$name.log" start=$SECONDS rc
        echo "== $name: $*"
        timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
        rc=$?
        local secs=$((SECONDS - start))
        local skips
        skips=$(grep -c "skipp" "$log")
        if [ $rc -eq 0 ]; then
            echo "ok    $name (${secs}s, $skips skip lines)" | tee -a "$summary"
        else
            [ $rc -eq 124 ] && rc="timeout after ${limit}s"
            echo "FAIL  $name ($rc, ${secs}s)" | tee -a "$summary"
            tail -n 40 "$log"
            status=1
        fi
        grep -h "skipp" "$log" | sed "s/^/      $name: /" | head -n 20 | tee -a "$summary" > /dev/null
    }

    local ran=0 t
    for t in "$CARRY"/tests/*; do
        local name
        name="$(basename "$t")"
        if [ "$name" = lib-vramguard_runtime ]; then
            step "unit-cuda" "$TEST_LIMIT" "$t" cuda --nocapture --test-threads=1
        else
            step "test-$name" "$TEST_LIMIT" "$t" --nocapture --test-threads=1
            ran=$((ran + 1))
        fi
    done
    if [ "$ran" -eq 0 ]; then
        echo "FAIL  no CUDA test binaries in $CARRY/tests" | tee -a "$summary"
        status=1
    fi
    # With a GPU, the default settings must pick expandable segments and their pages must read
    # back what was written: make sure that test really ran and passed.
    if [ "$gpu" = 1 ]; then
        local auto="auto_on_a_gpu_picks_expandable_segments_and_its_pages_read_back_what_was_written"
        if grep -q "^test $auto \.\.\. ok" "$logs/test-alloc_cuda.log" 2>/dev/null; then
            echo "ok    default-expandable-segments-on-gpu" | tee -a "$summary"
        else
            echo "FAIL  default-expandable-segments-on-gpu: $auto did not pass" | tee -a "$summary"
            status=1
        fi
    fi

    # Without a GPU the programs' GPU paths cannot run: their outcome is recorded, but only
    # the tests decide the exit status.
    local tests_status=$status p
    for p in "${PROGRAMS[@]}"; do
        local exe="$CARRY/programs/$p"
        if [ ! -x "$exe" ]; then
            echo "--    $p: not carried (its source does not mention --device cuda)" >> "$summary"
            continue
        fi
        if [[ "$p" == *_bench ]]; then
            step "program-$p" "$PROGRAM_LIMIT" bash -c "set -o pipefail; '$exe' --device cuda --json | tee '$out/$p.cuda.jsonl'"
        else
            step "program-$p" "$PROGRAM_LIMIT" "$exe" --device cuda
        fi
    done

    if [ "$gpu" = 0 ] && [ "$status" != "$tests_status" ]; then
        echo "note: no GPU, so the failures of programs above do not fail this run" | tee -a "$summary"
        status=$tests_status
    fi
    tar -czf "$out/gpu-check-logs.tar.gz" -C "$logs" .
    rm -rf "$logs"
    echo
    echo "gpu-check summary ($out):"
    cat "$summary"
    exit $status
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    *)
        echo "usage: scripts/gpu-check.sh prepare   # here: build and collect the binaries in $CARRY" >&2
        echo "       scripts/gpu-check.sh run       # on the GPU machine: run them; output in \$OUT" >&2
        exit 2
        ;;
esac
