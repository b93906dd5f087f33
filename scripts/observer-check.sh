#!/usr/bin/env bash
# The GPU observer (feature `cupti`, issue #39) on the fake CUDA driver and its fake CUPTI,
# without a GPU: the step beside scripts/fake-cuda.sh (whose suite is the default features').
#
# 1. lints the code the `cupti` feature compiles (clippy and rustdoc, warnings denied: the
#    workspace's own steps build without it);
# 2. builds the fake (target/debug/libvramguard_fake_cuda.so) and links it, in
#    target/observer-check/lib, as libcuda.so and libcupti.so: cudarc opens both by those names,
#    the dynamic loader recognises one file, so the fake driver calls the observer's CUPTI
#    callbacks itself, with CUPTI's structure layouts;
# 3. runs the observer's unit tests, runtime/tests/cuda_observer.rs and
#    tests/cuda_observer_scope.rs (#[batch_scope] over the observer) on the fake, one test at a
#    time, with VRAMGUARD_REQUIRE_GPU=1 (a test that would skip fails), and prints the lines
#    the tests assert:
#      observer: allocations A = frees A, peak P bytes exact
#      scope escape E bytes/iter exact
#      OOM text printed before the library's error
#      max_batch exact in R <= 4 runs
# 4. ends with one line: `observer check: tests T passed, F failed, S skip lines`.
#
# Exit status 0 only when every test passed and none skipped. Output: target/observer-check/.
#
# `scripts/observer-check.sh bench` instead runs examples/observer_bench.rs (release) on the
# fake and rewrites its section of BENCHMARKS.md (--write).
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == bench ]]; then
    cargo build -q --release -p vramguard-fake-cuda || exit 1
    cargo build -q --release --features cupti --example observer_bench || exit 1
    mkdir -p target/observer-check/release-lib
    for name in libcuda.so libcupti.so; do
        ln -sf "$PWD/target/release/libvramguard_fake_cuda.so" "target/observer-check/release-lib/$name"
    done
    exec env -u VRAMGUARD_ALLOC_CONF LD_LIBRARY_PATH="$PWD/target/observer-check/release-lib" \
        target/release/examples/observer_bench --write
fi

OUT="target/observer-check"
LIB="$OUT/lib"
mkdir -p "$LIB"
say() { echo "$*"; }
fail() { say "observer check: $*"; say "observer check: tests 0 passed, 1 failed, 0 skip lines"; exit 1; }

say "== clippy with the cupti feature (runtime, facade, fake)"
cargo clippy -q -p vramguard-runtime -p vramguard -p vramguard-fake-cuda --features vramguard/cupti \
    --lib --tests --examples -- -D warnings || fail "clippy with the cupti feature failed"

say "== docs with the cupti feature (broken intra-doc links and rustdoc warnings denied)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D warnings" \
    cargo doc -q -p vramguard-runtime -p vramguard --no-deps --features vramguard/cupti \
    || fail "the docs with the cupti feature have warnings"

say "== building the fake driver and its CUPTI"
cargo build -q -p vramguard-fake-cuda || fail "building the fake failed"
for name in libcuda.so libcupti.so; do
    ln -sf "$PWD/target/debug/libvramguard_fake_cuda.so" "$LIB/$name"
done

passed=0 failed=0 skips=0
# run LABEL COMMAND...: runs cargo test on the fake, counts its tests.
run() {
    local label=$1 out="$OUT/$1.txt" rc
    shift
    env -u VRAMGUARD_ALLOC_CONF LD_LIBRARY_PATH="$PWD/$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        VRAMGUARD_REQUIRE_GPU=1 FAKE_CUDA_MEMORY=48GiB "$@" > "$out" 2>&1
    rc=$?
    local p f s
    p=$(sed -n -E 's/^test result: [a-zA-Z]+\. ([0-9]+) passed.*/\1/p' "$out" | awk '{n += $1} END {print n + 0}')
    f=$(sed -n -E 's/^test result: .* ([0-9]+) failed.*/\1/p' "$out" | awk '{n += $1} END {print n + 0}')
    s=$(grep -c -i -E "skipped|skipping" "$out")
    if [[ $rc -ne 0 && $f -eq 0 ]]; then
        f=1 # a crash, or a build failure
    fi
    passed=$((passed + p)) failed=$((failed + f)) skips=$((skips + s))
    say "$(printf '%-28s %-6s %3d passed, %d failed, %d skip lines' "$label" \
        "$([[ $rc -eq 0 ]] && echo ok || echo FAIL)" "$p" "$f" "$s")"
    if [[ $rc -ne 0 || $s -gt 0 ]]; then
        grep -E "panicked|FAILED|skipped|error(\[|:)" "$out" | head -n 12 | sed 's/^/    /'
    fi
}

say "== the observer's tests on the fake"
started=$SECONDS
run "observer unit tests" cargo test -q -p vramguard-runtime --features cupti --lib observer
run "fake CUPTI" cargo test -q -p vramguard-fake-cuda --lib cupti
run "fake CUPTI calls" cargo test -q -p vramguard-fake-cuda --test driver -- observer_support::
run "cuda_observer" cargo test -q -p vramguard-runtime --features cupti --test cuda_observer \
    -- --test-threads=1 --nocapture
run "cuda_observer_scope" cargo test -q -p vramguard --features cupti --test cuda_observer_scope \
    -- --test-threads=1 --nocapture
say "   tests took $((SECONDS - started)) s"

say "== what the tests asserted"
grep -h -o -E "observer: allocations [0-9]+ = frees [0-9]+, peak [0-9]+ bytes exact|scope escape [0-9]+ bytes/iter exact|OOM text printed before the library's error|max_batch exact in [0-9]+ <= 4 runs.*" \
    "$OUT"/*.txt | sed 's/^/  /'

say "observer check: tests $passed passed, $failed failed, $skips skip lines"
[[ $failed -eq 0 && $skips -eq 0 && $passed -gt 0 ]]
