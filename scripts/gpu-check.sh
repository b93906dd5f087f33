#!/usr/bin/env bash
# GPU check in two steps, for a lent GPU machine that has no network and little time (15 min of
# device time in all, at most 10 min a command, at most 8 files back from $OUT):
#
#   scripts/gpu-check.sh prepare   # HERE (with cargo): builds the CUDA test binaries and the
#                                  # example/benchmark programs in release mode, copies just the
#                                  # executables (debug info stripped) into target/gpu-carry/,
#                                  # with the kernels' PTX and alloc_bench's allocation trace
#                                  # (for scripts/torch-compare.py); prints its size
#   scripts/gpu-check.sh run       # ON THE GPU MACHINE (no cargo needed): runs what `prepare`
#                                  # built, within a deadline; output in $OUT
#                                  # (target/gpu-check when $OUT is unset)
#   scripts/gpu-check.sh dry-run   # HERE (CI): first `plan`, then `run` on stub binaries
#                                  # without a GPU and with a 40 s budget; checks the deadline,
#                                  # the per-step limits, the files written and the verdicts
#   scripts/gpu-check.sh plan      # HERE: the plan `run` would have for what `prepare` carries
#                                  # from this tree; fails when it exceeds the deadline
#
# With the device tool: run `prepare` here, then
#   run(command="scripts/gpu-check.sh run", carry=["target/gpu-carry"], timeout_s=600)
#
# Time: `run` has an overall deadline (GPU_CHECK_DEADLINE, 540 s: 9 minutes) and a limit per
# step; the limits, plus the 3 s each step may take to be killed, add up under the deadline
# (the script prints the sum and refuses to start otherwise), and a step never gets more than
# what is left of the deadline. One function (`plan`) computes that sum, for `run` from what
# was carried and for `dry-run` from what `prepare` would carry on this tree (every test target
# whose name contains "cuda", every example whose source mentions `--device cuda`, read from
# `cargo metadata`): CI fails when a new test binary or program would push `run` over its
# deadline. Worst case with the defaults: setup 2 × (5 + 3) s (nvidia-smi, finding cuBLAS),
# T test binaries × (30 + 3) s, P programs × (25 + 3) s, torch-compare (45 + 3) s;
# `scripts/gpu-check.sh plan` prints the sum for the tree (06b803a carried six binaries, one
# compiled out by the `cuda` feature, and its limits, 40/28/5 s, made 571 s: over the deadline,
# and `run` refused to start).
#
# Output, written as it goes (a run cut short still returns what it did), 6 files:
#   summary.txt      one line per step (ok / FAIL / timeout / not run), the GPU, the GEMM path
#   results.txt      one line per test and program, as scripts/fake-cuda.sh writes for the fake
#                    (`diff target/fake-cuda/results.txt $OUT/results.txt` compares the two)
#   steps.log        every step's full output, appended in order
#   figures.jsonl    the CUDA tests' figures (VRAMGUARD_GPU_FIGURES)
#   bench.jsonl      the programs' --json figures
#   torch-compare.txt  PyTorch beside vramguard (scripts/torch-compare.py)
#
# `run` runs every CUDA test binary (each integration test whose name contains "cuda": cuda,
# cuda_fault), then the programs with `--device cuda` (and `--quick
# --json` for the *_bench ones), then scripts/torch-compare.py. On the GPU machine cuBLAS is
# PyTorch's wheel's copy (site-packages/nvidia/*/lib), linked under the name cudarc loads
# (libcublas.so) in a temporary folder put on LD_LIBRARY_PATH; NVRTC is not needed (the PTX is
# carried). When the CUDA driver is present the steps run with VRAMGUARD_REQUIRE_GPU=1: a test
# that would skip fails, matmul without cuBLAS fails instead of falling back, and any skip line
# in a step's output makes that step fail. Without a driver every step may report its skip and
# only the tests decide the exit status. Every step runs even if an earlier one failed; the exit
# status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."

CARRY="target/gpu-carry"

# The step limits (seconds), shared by `run` and the plan `dry-run` checks.
DEADLINE="${GPU_CHECK_DEADLINE:-540}"
SETUP_LIMIT="${GPU_CHECK_SETUP_LIMIT:-5}"
TEST_LIMIT="${GPU_CHECK_TEST_LIMIT:-30}"
PROGRAM_LIMIT="${GPU_CHECK_PROGRAM_LIMIT:-25}"
TORCH_LIMIT="${GPU_CHECK_TORCH_LIMIT:-45}"
KILL_AFTER="${GPU_CHECK_KILL_AFTER:-3}"

# plan TESTS PROGRAMS: the worst-case time of `run` with TESTS test binaries and PROGRAMS
# programs, in PLAN_SECONDS, and the line that shows the sum in PLAN_LINE.
plan() {
    local tests=$1 programs=$2
    PLAN_SECONDS=$((2 * (SETUP_LIMIT + KILL_AFTER) + tests * (TEST_LIMIT + KILL_AFTER) \
        + programs * (PROGRAM_LIMIT + KILL_AFTER) + TORCH_LIMIT + KILL_AFTER))
    PLAN_LINE="plan: setup 2 × ($SETUP_LIMIT + $KILL_AFTER) s + $tests tests × ($TEST_LIMIT + $KILL_AFTER) s + $programs programs × ($PROGRAM_LIMIT + $KILL_AFTER) s + torch-compare ($TORCH_LIMIT + $KILL_AFTER) s = $PLAN_SECONDS s worst case; deadline $DEADLINE s"
}

# suite: what `prepare` carries, from `cargo metadata` (no build): `test NAME` for every
# integration test of the runtime and the facade whose name contains "cuda", `program NAME` for
# every example whose source mentions `--device cuda` (the others would only repeat their host
# runs), each buildable with the default features; a test compiled out by the `cuda` feature
# (`#![cfg(not(feature = "cuda"))]`) is left out. A new test binary or program is in it by
# itself. `extra NAME` lines name the other tests whose source reaches the GPU (`Device::cuda`,
# cudarc, `DriverPool`): not carried (they are not GPU tests), run on the fake by
# scripts/fake-cuda.sh. `cupti-test NAME` and `cupti-program NAME` lines name the tests and
# programs of the GPU observer (they need the `cupti` feature, which `prepare` builds with):
# carried and run like the others; scripts/observer-check.sh runs them on the fake.
suite() {
    cargo metadata --no-deps --format-version 1 | python3 -c '
import json, os, re, sys
meta = json.load(sys.stdin)
default = {"cuda"}
observer = {"cuda", "cupti"}
reaches_gpu = re.compile(r"Device::cuda|cudarc|DriverPool")
for package in meta["packages"]:
    if package["name"] not in ("vramguard", "vramguard-alloc", "vramguard-memory", "vramguard-tensor"):
        continue
    for target in package["targets"]:
        required = set(target.get("required-features") or [])
        if not required <= observer:
            continue
        kind = "" if required <= default else "cupti-"
        main = open(target["src_path"]).read()
        source = main
        # A test binary of several files (tests/NAME/main.rs): its modules are sources too.
        if os.path.basename(target["src_path"]) == "main.rs" and "test" in target["kind"]:
            folder = os.path.dirname(target["src_path"])
            source = "\n".join(
                open(os.path.join(d, f)).read()
                for d, _, files in os.walk(folder) for f in sorted(files) if f.endswith(".rs"))
        if "test" in target["kind"]:
            if "#![cfg(not(feature = \"cuda\"))]" in main:
                continue
            if "cuda" in target["name"]:
                print(kind + "test", target["name"])
            elif reaches_gpu.search(source) and not kind:
                print("extra", target["name"])
        elif "example" in target["kind"] and "--device cuda" in source:
            print(kind + "program", target["name"])
' | sort
}

prepare() {
    command -v cargo >/dev/null || { echo "gpu-check prepare: cargo not found" >&2; exit 1; }
    command -v python3 >/dev/null || { echo "gpu-check prepare: python3 not found" >&2; exit 1; }
    rm -rf "$CARRY"
    mkdir -p "$CARRY/tests" "$CARRY/programs"
    local msgs
    msgs="$(mktemp)"
    # With the GPU observer (`cupti`): its test and benchmark are in the suite.
    local features="vramguard-memory/cupti,vramguard/cupti"
    echo "== cargo test --release --no-run (runtime and facade, features $features)"
    cargo test --release --no-run -p vramguard-alloc -p vramguard-memory -p vramguard-tensor -p vramguard --features "$features" \
        --message-format=json > "$msgs" || { echo "gpu-check prepare: building the tests failed" >&2; exit 1; }
    echo "== cargo build --release --examples (features $features)"
    cargo build --release --examples --features "$features" --message-format=json >> "$msgs" \
        || { echo "gpu-check prepare: building the examples failed" >&2; exit 1; }
    local listed gpu_tests gpu_programs
    listed=$(suite) || { echo "gpu-check prepare: cargo metadata failed" >&2; exit 1; }
    mapfile -t gpu_tests < <(sed -n -E 's/^(cupti-)?test //p' <<<"$listed")
    mapfile -t gpu_programs < <(sed -n -E 's/^(cupti-)?program //p' <<<"$listed")
    # The suite's test binaries and programs, by target name. (The runtime's unit tests are not
    # carried: none of them needs a GPU.)
    python3 - "$msgs" "$CARRY" "${gpu_tests[*]}" "${gpu_programs[@]}" <<'EOF'
import json, shutil, sys
msgs, carry, tests, programs = sys.argv[1], sys.argv[2], set(sys.argv[3].split()), set(sys.argv[4:])
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
    if m.get("profile", {}).get("test") and "test" in kinds and name in tests:
        shutil.copy(exe, f"{carry}/tests/{name}")
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
    # The allocation trace alloc_bench --quick replays, for scripts/torch-compare.py.
    echo "== alloc_bench --quick --export-trace (the trace PyTorch replays on the GPU machine)"
    "$CARRY/programs/alloc_bench" --quick --export-trace "$CARRY/alloc-trace.json" \
        || { echo "gpu-check prepare: exporting the allocation trace failed" >&2; exit 1; }
    python3 scripts/torch-compare.py --check-trace "$CARRY/alloc-trace.json" \
        || { echo "gpu-check prepare: the exported trace does not parse" >&2; exit 1; }
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
    local carry="${GPU_CHECK_CARRY:-$CARRY}"
    mkdir -p "$out"
    local summary="$out/summary.txt" steplog="$out/steps.log" bench="$out/bench.jsonl"
    local results="$out/results.txt"
    export VRAMGUARD_GPU_FIGURES="$out/figures.jsonl"
    : > "$results"
    : > "$summary"
    : > "$steplog"
    : > "$bench"
    : > "$VRAMGUARD_GPU_FIGURES"
    unset VRAMGUARD_ALLOC_CONF
    local deadline=$DEADLINE setup_limit=$SETUP_LIMIT test_limit=$TEST_LIMIT
    local program_limit=$PROGRAM_LIMIT kill_after=$KILL_AFTER
    local started=$SECONDS
    # Lines for the summary: on stdout too.
    say() { echo "$*" | tee -a "$summary"; }
    [ -d "$carry/tests" ] || { say "gpu-check run: $carry missing: run 'scripts/gpu-check.sh prepare' first and carry it"; exit 1; }
    if [ -f "$carry/vramguard_kernels.ptx" ]; then
        VRAMGUARD_KERNELS_PTX="$(cd "$carry" && pwd)/vramguard_kernels.ptx"
        export VRAMGUARD_KERNELS_PTX
    fi
    local tests=() programs=() t p
    for t in "$carry"/tests/*; do
        [ -x "$t" ] && tests+=("$t")
    done
    for p in "$carry"/programs/*; do
        [ -x "$p" ] && programs+=("$(basename "$p")")
    done
    say "gpu-check run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    say "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    plan "${#tests[@]}" "${#programs[@]}"
    say "$PLAN_LINE"
    if [ "$PLAN_SECONDS" -gt "$deadline" ]; then
        say "FAIL  plan: the step limits add up to $PLAN_SECONDS s, over the $deadline s deadline"
        exit 1
    fi

    local status=0 gpu=0
    # step NAME LIMIT COMMAND...: runs COMMAND with LIMIT (cut to what is left of the deadline),
    # appends its output to steps.log as it runs, records the outcome in summary.txt.
    step() {
        local name="$1" limit="$2"
        shift 2
        local left=$((deadline - (SECONDS - started) - kill_after))
        if [ "$left" -le 0 ]; then
            say "FAIL  $name: not run (the $deadline s deadline was reached)"
            status=1
            return
        fi
        [ "$limit" -gt "$left" ] && limit=$left
        local start=$SECONDS rc mark
        mark=$(wc -l < "$steplog")
        echo "== $name (limit ${limit}s): $*" | tee -a "$steplog"
        timeout --kill-after=$kill_after "$limit" "$@" >> "$steplog" 2>&1
        rc=$?
        local secs=$((SECONDS - start))
        # This step's lines of steps.log.
        local own
        own=$(tail -n +"$((mark + 2))" "$steplog")
        local skips
        skips=$(grep -c -i -E "skipped|skipping|nothing measured" <<< "$own")
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            say "FAIL  $name (timeout after ${limit}s)"
            status=1
        elif [ $rc -ne 0 ]; then
            say "FAIL  $name (exit $rc, ${secs}s)"
            status=1
        elif [ "$gpu" = 1 ] && [ "$skips" -gt 0 ]; then
            say "FAIL  $name (${secs}s): $skips skip lines on a GPU machine"
            status=1
        elif [ "$gpu" = 1 ] && [[ "$name" == test-* ]] && ! grep -q -E "^test result: ok\. [1-9]" <<< "$own"; then
            say "FAIL  $name (${secs}s): no test ran"
            status=1
        else
            say "ok    $name (${secs}s, $skips skip lines)"
        fi
        grep -i -E "skipped|skipping|nothing measured" <<< "$own" | sed "s/^/      $name: /" | head -n 10 \
            | tee -a "$summary" > /dev/null
        # One line per test (and per program), as scripts/fake-cuda.sh writes them for the fake:
        # the two results.txt compare line by line.
        if [[ "$name" == test-* ]] && command -v python3 > /dev/null; then
            python3 scripts/fake_cuda_compare.py results "${name#test-}" <(printf '%s\n' "$own") >> "$results"
        elif [[ "$name" == program-* ]]; then
            if [ $rc -eq 0 ]; then echo "program ${name#program-} ok"; else echo "program ${name#program-} FAIL"; fi >> "$results"
        fi
    }

    # ----- setup: the GPU, cuBLAS from PyTorch's wheels (two calls, each with the setup limit) -----
    local smi=""
    if [ "${GPU_CHECK_ASSUME_GPU:-}" = 1 ]; then
        gpu=1
        say "gpu: assumed (GPU_CHECK_ASSUME_GPU=1)"
    elif [ "${GPU_CHECK_ASSUME_GPU:-}" != 0 ] && command -v nvidia-smi >/dev/null 2>&1 \
        && smi=$(timeout -k "$kill_after" "$setup_limit" nvidia-smi \
            --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); then
        gpu=1
        say "gpu: $(head -n 1 <<< "$smi")"
    elif [ "${GPU_CHECK_ASSUME_GPU:-}" != 0 ] && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
        gpu=1
        say "gpu: libcuda present, nvidia-smi unavailable ($smi)"
    else
        say "gpu: no GPU (no nvidia-smi, no libcuda): every CUDA step may report its skip"
    fi
    if [ "$gpu" = 1 ]; then
        export VRAMGUARD_REQUIRE_GPU=1
    else
        unset VRAMGUARD_REQUIRE_GPU
    fi
    local libs cublas="${GPU_CHECK_CUBLAS:-}" cupti="" wheels=""
    libs="$(mktemp -d)"
    trap "rm -rf '$libs'" EXIT
    if command -v python3 >/dev/null; then
        # PyTorch's NVIDIA wheels: site-packages/nvidia/cu13/lib/libcublas.so.13 (cu130) or
        # site-packages/nvidia/cublas/lib/libcublas.so.12 (cu12x); CUPTI (the GPU observer's
        # library) in nvidia/cuda_cupti/lib (cu12x) or nvidia/cu13/lib. One line each.
        wheels=$(timeout -k "$kill_after" "$setup_limit" python3 -c '
import glob, os, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for name in ("libcublas.so*", "libcupti.so*"):
    found = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", name)))
    print(found[-1] if found else "")' 2>/dev/null)
        [ -z "$cublas" ] && cublas=$(sed -n 1p <<< "$wheels")
        cupti=$(sed -n 2p <<< "$wheels")
    fi
    if [ -n "$cublas" ] && [ -e "$cublas" ]; then
        # cudarc opens libcublas.so (or .so.12); the cu130 wheel has libcublas.so.13.
        ln -sf "$cublas" "$libs/libcublas.so"
        export LD_LIBRARY_PATH="$libs:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "cublas: $cublas (linked as libcublas.so)"
    else
        say "cublas: not found in Python's site-packages/nvidia (matmul falls back, which fails on a GPU)"
    fi
    if [ -n "$cupti" ] && [ -e "$cupti" ]; then
        # cudarc opens libcupti.so (or .so.12); the GPU observer's test and benchmark need it.
        ln -sf "$cupti" "$libs/libcupti.so"
        export LD_LIBRARY_PATH="$libs:$(dirname "$cupti")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        say "cupti: $cupti (linked as libcupti.so)"
    else
        say "cupti: not found in Python's site-packages/nvidia (the observer's steps report its absence)"
    fi

    # ----- the CUDA tests -----
    local ran=0
    for t in "${tests[@]}"; do
        [ -x "$t" ] || continue
        step "test-$(basename "$t")" "$test_limit" "$t" --nocapture --test-threads=1
        ran=$((ran + 1))
    done
    if [ "$ran" -eq 0 ]; then
        say "FAIL  no CUDA test binaries in $carry/tests"
        status=1
    fi
    # With a GPU, the default settings must pick expandable segments and their pages must read
    # back what was written: make sure that test really ran and passed.
    if [ "$gpu" = 1 ]; then
        local auto="auto_on_a_gpu_picks_expandable_segments_and_its_pages_read_back_what_was_written"
        if grep -q "^test $auto \.\.\. ok" "$steplog"; then
            say "ok    default-expandable-segments-on-gpu"
        else
            say "FAIL  default-expandable-segments-on-gpu: $auto did not pass"
            status=1
        fi
    fi

    # ----- the programs -----
    # Without a GPU the programs' GPU paths cannot run: their outcome is recorded, but only the
    # tests decide the exit status.
    local tests_status=$status
    for p in "${programs[@]}"; do
        local exe="$carry/programs/$p"
        if [[ "$p" == *_bench ]]; then
            step "program-$p" "$program_limit" bash -c "set -o pipefail; '$exe' --device cuda --quick --json | tee -a '$bench'"
        else
            # The examples take no --quick (fragmentation refuses it).
            step "program-$p" "$program_limit" "$exe" --device cuda
        fi
    done

    # ----- PyTorch beside vramguard -----
    # inference_bench --quick's configuration: 2 layers, seq 64, batch 2.
    local torch_out="$out/torch-compare.txt"
    if [ -f "$carry/alloc-trace.json" ] && command -v python3 >/dev/null; then
        step "torch-compare" "$TORCH_LIMIT" bash -c "set -o pipefail; python3 scripts/torch-compare.py --trace '$carry/alloc-trace.json' --vramguard '$bench' --inference '$bench' --layers 2 --seq 64 --batch 2 --json '$bench' | tee '$torch_out'"
    else
        say "FAIL  torch-compare: no $carry/alloc-trace.json or no python3"
        status=1
    fi
    if [ "$gpu" = 0 ] && [ "$status" != "$tests_status" ]; then
        say "note: no GPU, so the failures of programs above do not fail this run"
        status=$tests_status
    fi

    # ----- which GEMM path ran -----
    if grep -q -E "matmul uses vramguard's own \(slow\) GEMM kernel|cuBLAS \(libcublas" "$steplog"; then
        say "gemm: the fallback kernel (cuBLAS could not be loaded; see steps.log)"
    elif [ -n "$cublas" ] && grep -q "^test .*matmul.* \.\.\. ok" "$steplog"; then
        say "gemm: cuBLAS ($cublas): the matmul tests passed and nothing fell back"
    else
        say "gemm: not exercised (no matmul test passed on a GPU)"
    fi
    say "elapsed: $((SECONDS - started)) s of the $deadline s deadline"
    echo
    echo "gpu-check summary ($out):"
    cat "$summary"
    exit $status
}

# `run` on stub binaries, without a GPU, with a 40 s deadline: a test binary that passes, one
# that skips, one that hangs (cut at its limit), programs that print figures; then the same
# with a GPU assumed (the skip fails the run). Checks the verdicts, the deadline, and that at
# most 8 files come back.
# The plan `run` would have, with its limits, for what `prepare` would carry from this tree
# (`suite`). Exit status 1 when it exceeds the deadline.
plan_check() {
    local listed
    listed=$(suite) || { echo "gpu-check plan: cargo metadata failed" >&2; return 1; }
    plan "$(grep -c -E '^(cupti-)?test ' <<<"$listed")" "$(grep -c -E '^(cupti-)?program ' <<<"$listed")"
    echo "suite: $(sed -n -E 's/^(cupti-)?test //p' <<<"$listed" | tr '\n' ' ')(tests); $(sed -n -E 's/^(cupti-)?program //p' <<<"$listed" | tr '\n' ' ')(programs)"
    echo "$PLAN_LINE"
    if [ "$PLAN_SECONDS" -gt "$DEADLINE" ]; then
        echo "FAIL  plan: the step limits add up to $PLAN_SECONDS s, over the $DEADLINE s deadline: \
lower GPU_CHECK_*_LIMIT in scripts/gpu-check.sh or run fewer test binaries"
        return 1
    fi
    echo "ok    plan: $PLAN_SECONDS s of the $DEADLINE s deadline"
}

dry_run() {
    local dir fail=0
    # First the real plan: what `run` would do with what `prepare` carries from this tree.
    if plan_check; then
        echo "dry-run ok:   run's plan for this tree fits its deadline"
    else
        echo "dry-run FAIL: run's plan for this tree exceeds its deadline"
        fail=1
    fi
    dir="$(mktemp -d)"
    trap "rm -rf '$dir'" EXIT
    mkdir -p "$dir/carry/tests" "$dir/carry/programs"
    printf '#!/bin/sh\necho "test cuda_matmul_works ... ok"\necho "test result: ok. 1 passed"\n' > "$dir/carry/tests/cuda_ok"
    printf '#!/bin/sh\necho "cuda_x: skipped: no CUDA driver"\n' > "$dir/carry/tests/cuda_skips"
    printf '#!/bin/sh\necho "running 0 tests"\necho "test result: ok. 0 passed"\n' > "$dir/carry/tests/cuda_empty"
    printf '#!/bin/sh\nexec sleep 60\n' > "$dir/carry/tests/cuda_hangs"
    printf '#!/bin/sh\necho "{\\"bench\\":\\"alloc_cuda\\",\\"metric\\":\\"trace_pair_ns\\",\\"value\\":50,\\"unit\\":\\"ns\\"}"\n' > "$dir/carry/programs/alloc_bench"
    printf '#!/bin/sh\nexec sleep 60\n' > "$dir/carry/programs/inference_bench"
    printf '#!/bin/sh\necho "warning: vramguard: cuBLAS cannot be loaded; matmul uses vramguard'"'"'s own (slow) GEMM kernel" >&2\n' > "$dir/carry/programs/tensor_bench"
    : > "$dir/libcublas.so.13"
    chmod +x "$dir"/carry/tests/* "$dir"/carry/programs/*
    # The trace as `prepare` exports it, from the alloc_bench that `cargo test --workspace`
    # builds (or a release build), and the parser's own checks.
    local exporter
    exporter=$(ls -t target/debug/examples/alloc_bench target/release/examples/alloc_bench 2>/dev/null | head -n 1)
    if [ -z "$exporter" ]; then
        echo "dry-run FAIL: no alloc_bench built (cargo test --workspace builds it)"
        exit 1
    fi
    if ! timeout 60 "$exporter" --quick --export-trace "$dir/carry/alloc-trace.json" > /dev/null \
        || [ ! -s "$dir/carry/alloc-trace.json" ]; then
        echo "dry-run FAIL: $exporter wrote no trace (built before --export-trace? rebuild it)"
        exit 1
    fi
    python3 scripts/torch-compare.py --check-trace "$dir/carry/alloc-trace.json" || fail=1
    python3 scripts/torch-compare.py --self-test || fail=1
    check() {
        if grep -q -E "$2" "$1"; then
            echo "dry-run ok:   $3"
        else
            echo "dry-run FAIL: $3 (no /$2/ in $1)"
            fail=1
        fi
    }
    local limits=(GPU_CHECK_DEADLINE=40 GPU_CHECK_SETUP_LIMIT=1 GPU_CHECK_TEST_LIMIT=2
        GPU_CHECK_PROGRAM_LIMIT=2 GPU_CHECK_TORCH_LIMIT=5 GPU_CHECK_KILL_AFTER=1
        GPU_CHECK_CARRY="$dir/carry")
    local start=$SECONDS rc
    env "${limits[@]}" GPU_CHECK_ASSUME_GPU=0 OUT="$dir/out" "$0" run > "$dir/run.txt" 2>&1
    rc=$?
    local took=$((SECONDS - start))
    local s="$dir/out/summary.txt"
    check "$s" "^plan: .* = [0-9]+ s worst case; deadline 40 s" "the plan adds up the limits"
    check "$s" "^gpu: no GPU" "without a GPU the summary says so"
    check "$s" "^ok    test-cuda_ok" "a passing test binary is ok"
    check "$dir/out/results.txt" "^test cuda_ok cuda_matmul_works ok$" "results.txt has one line per test"
    check "$dir/out/results.txt" "^program alloc_bench ok$" "results.txt has one line per program"
    check "$s" "^ok    test-cuda_skips .*1 skip lines" "without a GPU a skip is allowed"
    check "$s" "^FAIL  test-cuda_hangs \(timeout after 2s\)" "a hanging binary is cut at its limit"
    check "$s" "^FAIL  program-inference_bench \(timeout" "a hanging program is cut at its limit"
    check "$s" "^(ok|FAIL) +torch-compare" "torch-compare ran"
    check "$dir/out/steps.log" "^trace: 100 steps, 12200 allocations" "torch-compare parsed the exported trace"
    check "$dir/out/steps.log" "torch-compare: skipped: |allocation trace on" "torch-compare ran PyTorch or said why not"
    check "$dir/out/bench.jsonl" "trace_pair_ns" "programs' figures land in bench.jsonl as they run"
    check "$s" "^gemm: the fallback kernel" "the summary says the GEMM fell back"
    check "$s" "^elapsed: " "the summary ends with the time taken"
    if [ "$rc" = 1 ]; then echo "dry-run ok:   exit 1 (a test binary timed out)"; else echo "dry-run FAIL: exit $rc, expected 1"; fail=1; fi
    if [ "$took" -le 42 ]; then echo "dry-run ok:   finished in ${took}s (deadline 40 s)"; else echo "dry-run FAIL: took ${took}s, deadline 40 s"; fail=1; fi
    local files
    files=$(find "$dir/out" -type f | wc -l)
    if [ "$files" -le 8 ]; then echo "dry-run ok:   $files files in \$OUT (at most 8)"; else echo "dry-run FAIL: $files files in \$OUT"; fail=1; fi

    # A GPU assumed: the skip fails; a deadline shorter than the plan refuses to start.
    rm -f "$dir/carry/tests/cuda_hangs" "$dir/carry/programs/inference_bench" "$dir/carry/programs/tensor_bench"
    env "${limits[@]}" GPU_CHECK_ASSUME_GPU=1 GPU_CHECK_CUBLAS="$dir/libcublas.so.13" OUT="$dir/out2" \
        "$0" run > "$dir/run2.txt" 2>&1
    rc=$?
    check "$dir/out2/summary.txt" "^FAIL  test-cuda_skips .*skip lines on a GPU machine" "with a GPU a skip is a failure"
    check "$dir/out2/summary.txt" "^FAIL  torch-compare" "with a GPU, torch-compare without PyTorch is a failure"
    check "$dir/out2/summary.txt" "^FAIL  test-cuda_empty .*no test ran" "with a GPU, a binary that ran no test is a failure"
    check "$dir/out2/summary.txt" "^ok    test-cuda_ok" "with a GPU, a binary whose tests ran and passed is ok"
    check "$dir/out2/summary.txt" "^gemm: cuBLAS .*libcublas.so.13" "the summary says cuBLAS ran"
    if [ "$rc" = 1 ]; then echo "dry-run ok:   exit 1 with a GPU assumed"; else echo "dry-run FAIL: exit $rc with a GPU assumed"; fail=1; fi
    env "${limits[@]}" GPU_CHECK_DEADLINE=5 OUT="$dir/out3" "$0" run > "$dir/run3.txt" 2>&1
    check "$dir/out3/summary.txt" "^FAIL  plan: the step limits add up to" "limits over the deadline refuse to start"
    if [ "$fail" != 0 ]; then
        echo "--- run output:"; cat "$dir/run.txt"
        exit 1
    fi
    echo "gpu-check dry run: ok"
}

case "${1:-}" in
    prepare) prepare ;;
    run) run ;;
    dry-run) dry_run ;;
    plan) plan_check ;;
    suite) suite ;;
    *)
        echo "usage: scripts/gpu-check.sh prepare   # here: build and collect the binaries in $CARRY" >&2
        echo "       scripts/gpu-check.sh run       # on the GPU machine: run them; output in \$OUT" >&2
        echo "       scripts/gpu-check.sh dry-run   # here: run on stubs, no GPU, 40 s budget" >&2
        echo "       scripts/gpu-check.sh plan      # here: run's plan for this tree, against its deadline" >&2
        exit 2
        ;;
esac
