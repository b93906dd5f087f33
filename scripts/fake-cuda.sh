#!/usr/bin/env bash
# Runs everything CUDA on the fake CUDA driver (the `fake-cuda` crate), without a GPU:
#
# 1. builds the fake (linked as libcuda.so and libcublas.so in target/fake-cuda/lib, the only
#    way it becomes the driver), the kernels' host builds (tensor/kernels/*.cu and the tests'
#    own kernels, tensor/tests/cuda/test_kernels.cu, with host_shim.h), NVRTC from PyPI
#    when missing (as kernels-check.sh), and the test binaries and examples in debug mode (what
#    `cargo test --workspace` built already);
# 2. runs every CUDA test binary (those `scripts/gpu-check.sh` carries to a GPU: every test
#    target whose name contains "cuda"), every other test whose source reaches the GPU
#    (`Device::cuda`, cudarc, `DriverPool`), and vramguard-memory's `driver_pool` unit tests, on the
#    fake, with VRAMGUARD_REQUIRE_GPU=1 (a test that would skip fails) and 48 GiB of device
#    memory (pages take host memory only once touched);
# 3. runs every GPU program (the examples whose source mentions `--device cuda`, the same list
#    gpu-check.sh carries) on the host and on the fake with the same arguments, and compares
#    their figures that are not times (scripts/fake_cuda_compare.py: exactly equal);
# 4. ends with one line:
#    fake cuda: tests T executed, S skipped, F failed; programs P, equal to host Q/P
#
# Exit status 0 only when F = 0, S = 0 and Q = P. Output: target/fake-cuda/ (log.txt, every
# step's output; results.txt, one line per test and program, in the format of gpu-check.sh's
# results.txt so the two compare line by line). FAKE_CUDA_EAGER=1 runs the fake's work eagerly
# (see the fake's documentation), which hides cross-stream reuse.
#
# Program arguments: the *_bench programs run with `--quick --json`; inference_bench and
# bert_inference with smaller sizes still (below), since the debug build's host backend takes
# minutes at their defaults; fragmentation and inplace as they are.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="target/fake-cuda"
LIB="$OUT/lib"
LOG="$OUT/log.txt"
RESULTS="$OUT/results.txt"
mkdir -p "$OUT"
: > "$LOG"
: > "$RESULTS"
say() { echo "$*" | tee -a "$LOG"; }
die() { say "fake-cuda: $*"; say "fake cuda: tests 0 executed, 0 skipped, 1 failed; programs 0, equal to host 0/0"; exit 1; }

declare -A PROGRAM_ARGS=(
    [inference_bench]="--quick --json --layers 1 --seq 32 --batch 2 --budget-mib 64 --reps 1"
    [bert_inference]="--layers 2 --seq 32 --batch 2 --budget-mib 96"
)

# ----- build -----
NVRTC_LIB=$(scripts/nvrtc-from-pypi.sh 2>> "$LOG") || die "installing NVRTC failed (see $LOG)"

say "== building the fake driver, the host kernels, the test binaries and the examples"
# The whole workspace, as `cargo test --workspace` builds it (in CI: already built, nothing to
# do; a narrower selection would resolve other features and rebuild).
msgs="$OUT/cargo-messages.json"
cargo test -q --workspace --no-run --message-format=json > "$msgs" 2>> "$LOG" \
    || die "building the workspace's tests and examples failed (see $LOG)"
fake_library=$(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line) if line.startswith("{") else {}
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "vramguard_fake_cuda":
        for f in m["filenames"]:
            if f.endswith(".so"):
                print(f)
' "$msgs" | head -n 1)
[[ -n "$fake_library" ]] || die "cargo built no libvramguard_fake_cuda.so"
mkdir -p "$LIB"
ln -sf "$fake_library" "$LIB/libcuda.so"
ln -sf "$fake_library" "$LIB/libcublas.so"
cat tensor/kernels/common.cuh tensor/kernels/*.cu > "$OUT/kernels.cpp"
for source in "$OUT/kernels.cpp" tensor/tests/cuda/test_kernels.cu; do
    name=$(basename "$source" | sed 's/\..*//')
    g++ -std=c++17 -O2 -fPIC -shared -ffp-contract=off -Wall -Werror \
        -include tensor/kernels/host_shim.h -x c++ "$source" -o "$OUT/lib${name}_host.so" \
        >> "$LOG" 2>&1 || die "compiling $source for the host failed (see $LOG)"
done

# What runs: the suite gpu-check.sh carries, plus the other tests that reach the GPU.
suite=$(scripts/gpu-check.sh suite) || die "listing the suite failed"
mapfile -t programs < <(sed -n 's/^program //p' <<<"$suite")
mapfile -t tests < <(sed -n -E 's/^(test|extra) //p' <<<"$suite")

executable() { # executable KIND NAME [PACKAGE]: the path cargo reported
    python3 - "$msgs" "$@" <<'EOF'
import json, sys
msgs, kind, name = sys.argv[1:4]
package = sys.argv[4] if len(sys.argv) > 4 else None
for line in open(msgs):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") == name \
            and kind in t.get("kind", []) and (package is None or m["package_id"].find(package) >= 0):
        print(m["executable"])
        break
EOF
}

# ----- the fake's environment -----
fake_env=(
    env
    LD_LIBRARY_PATH="$PWD/$LIB:$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    FAKE_CUDA_HOST_KERNELS="$PWD/$OUT/libkernels_host.so:$PWD/$OUT/libtest_kernels_host.so"
    FAKE_CUDA_MEMORY="${FAKE_CUDA_MEMORY:-48GiB}"
    VRAMGUARD_REQUIRE_GPU=1
)
unset VRAMGUARD_ALLOC_CONF

executed=0 skipped=0 failed=0
SKIP_PATTERN="skipped|skipping|nothing measured"

# run_tests LABEL EXE ARGS...: runs a test binary on the fake, counts its tests and skips.
run_tests() {
    local label=$1 exe=$2
    shift 2
    local out="$OUT/test-$label.txt" rc
    "${fake_env[@]}" "$exe" --test-threads=1 --nocapture "$@" > "$out" 2>&1
    rc=$?
    cat "$out" >> "$LOG"
    local passed failed_here skips
    passed=$(sed -n -E 's/^test result: [a-zA-Z]+\. ([0-9]+) passed.*/\1/p' "$out" | tail -1)
    failed_here=$(sed -n -E 's/^test result: .* ([0-9]+) failed.*/\1/p' "$out" | tail -1)
    skips=$(grep -c -i -E "$SKIP_PATTERN" "$out")
    passed=${passed:-0}
    failed_here=${failed_here:-0}
    if [[ $rc -ne 0 && $failed_here -eq 0 ]]; then
        failed_here=1 # crashed or failed outside a test
    fi
    executed=$((executed + passed + failed_here))
    skipped=$((skipped + skips))
    failed=$((failed + failed_here))
    # One line per test, as gpu-check.sh's results.txt.
    python3 scripts/fake_cuda_compare.py results "$label" "$out" >> "$RESULTS"
    local verdict=ok
    [[ $rc -ne 0 ]] && verdict="FAIL (exit $rc)"
    say "$(printf '%-22s %-16s %3d tests, %d skip lines' "test-$label" "$verdict" "$((passed + failed_here))" "$skips")"
    if [[ $skips -gt 0 ]]; then
        grep -i -E "$SKIP_PATTERN" "$out" | head -n 5 | sed 's/^/    /' | tee -a "$LOG"
    fi
    if [[ $rc -ne 0 ]]; then
        # Each failure: the panic and its message (assertions print two more lines), the fake's
        # complaints.
        grep -E -A3 "panicked at" "$out" | grep -v -E "^stack backtrace|^--$|^ +[0-9]+: " \
            | head -n 24 | sed 's/^/    /' | tee -a "$LOG"
        grep -E "^fake cuda: [a-zA-Z_0-9]+( faulted|: )" "$out" | sort -u | head -n 6 \
            | sed 's/^/    /' | tee -a "$LOG"
    fi
}

say "== the CUDA tests on the fake (FAKE_CUDA_MEMORY=${FAKE_CUDA_MEMORY:-48GiB}${FAKE_CUDA_EAGER:+, FAKE_CUDA_EAGER=$FAKE_CUDA_EAGER})"
started=$SECONDS
for t in "${tests[@]}"; do
    exe=$(executable test "$t")
    [[ -n "$exe" ]] || die "no executable for test $t"
    run_tests "$t" "$exe"
done
lib_exe=$(executable lib vramguard_memory vramguard-memory)
[[ -n "$lib_exe" ]] || die "no executable for vramguard-memory's unit tests"
run_tests "memory-lib-driver_pool" "$lib_exe" driver_pool
say "   tests took $((SECONDS - started)) s"

# ----- the programs, on the host and on the fake -----
say "== the GPU programs, on the host and on the fake, figures compared"
started=$SECONDS
equal=0
for p in "${programs[@]}"; do
    exe=$(executable example "$p")
    [[ -n "$exe" ]] || die "no executable for example $p"
    args=${PROGRAM_ARGS[$p]:-}
    if [[ -z "$args" && "$p" == *_bench ]]; then
        args="--quick --json"
    fi
    mode=text
    [[ "$args" == *--json* ]] && mode=json
    # shellcheck disable=SC2086 # the arguments are words
    timeout 300 "$exe" $args > "$OUT/program-$p-host.txt" 2> "$OUT/program-$p-host.err"
    host_rc=$?
    # shellcheck disable=SC2086
    timeout 300 "${fake_env[@]}" "$exe" $args --device cuda > "$OUT/program-$p-cuda.txt" 2> "$OUT/program-$p-cuda.err"
    cuda_rc=$?
    cat "$OUT/program-$p-host.txt" "$OUT/program-$p-cuda.txt" "$OUT/program-$p-cuda.err" >> "$LOG"
    skips=$(cat "$OUT/program-$p-cuda.txt" "$OUT/program-$p-cuda.err" | grep -c -i -E "$SKIP_PATTERN")
    skipped=$((skipped + skips))
    compared=$(python3 scripts/fake_cuda_compare.py "$mode" "$OUT/program-$p-host.txt" "$OUT/program-$p-cuda.txt")
    same=$?
    verdict="equal"
    if [[ $host_rc -ne 0 || $cuda_rc -ne 0 ]]; then
        verdict="FAIL (exit $host_rc on the host, $cuda_rc on the fake)"
    elif [[ $same -ne 0 ]]; then
        verdict="DIFFERENT"
    else
        equal=$((equal + 1))
    fi
    say "$(printf '%-22s %s (%s)' "program-$p" "$verdict" "${args:-no arguments}")"
    sed 's/^/  /' <<<"$compared" | tee -a "$LOG"
    if [[ $cuda_rc -ne 0 ]]; then
        grep -E "fake cuda|error|panicked" "$OUT/program-$p-cuda.err" | head -n 8 | sed 's/^/    /' | tee -a "$LOG"
    fi
    # As gpu-check.sh's results.txt: whether it ran on the (fake) GPU.
    if [[ $cuda_rc -eq 0 ]]; then
        echo "program $p ok" >> "$RESULTS"
    else
        echo "program $p FAIL" >> "$RESULTS"
    fi
done
say "   programs took $((SECONDS - started)) s"

say "results: $RESULTS (compare with a GPU run's: diff $RESULTS \$OUT/results.txt)"
say "fake cuda: tests $executed executed, $skipped skipped, $failed failed; programs ${#programs[@]}, equal to host $equal/${#programs[@]}"
[[ $failed -eq 0 && $skipped -eq 0 && $equal -eq ${#programs[@]} ]]
