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
# 3. runs the observer's unit tests, memory/tests/cuda_observer.rs and
#    tests/cuda_observer_scope.rs (#[batch_scope] over the observer) on the fake, one test at a
#    time, with VRAMGUARD_REQUIRE_GPU=1 (a test that would skip fails), and prints the lines
#    the tests assert:
#      observer: allocations A = frees A, peak P bytes exact
#      scope escape E bytes/iter exact
#      OOM text printed before the library's error
#      max_batch exact in R <= 4 runs
# 4. runs `cargo vramguard measure --device cuda` (human, then --json) on the fixture
#    cargo-vramguard/tests/fixtures/cuda_model (an MLP on cuda:0 whose forward carries
#    #[vramguard::inference]) on the fake, with NVRTC (scripts/nvrtc-from-pypi.sh) and the
#    kernels' host build: measure attaches the GPU observer through the driver's
#    CUDA_INJECTION64_PATH hook. Asserts the outputs identical, the annotated GPU peak below
#    the plain one, each build's observed peak equal to the peak_reserved_bytes its vramguard
#    allocator printed (see the section for why exactly),
#    and the census at the annotated peak summing to it under the program's own tags;
#    prints `measure --device cuda: plain P1 B, annotated P2 B, ratio R, stdout identical`
#    (one test);
# 5. ends with one line: `observer check: tests T passed, F failed, S skip lines`.
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
cargo clippy -q -p vramguard-alloc -p vramguard-memory -p vramguard-tensor -p vramguard -p vramguard-fake-cuda --features vramguard/cupti \
    --lib --tests --examples -- -D warnings || fail "clippy with the cupti feature failed"

say "== docs with the cupti feature (broken intra-doc links and rustdoc warnings denied)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D warnings" \
    cargo doc -q -p vramguard-alloc -p vramguard-memory -p vramguard-tensor -p vramguard --no-deps --features vramguard/cupti \
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
run "observer unit tests" cargo test -q -p vramguard-memory --features cupti --lib observer
run "fake CUPTI" cargo test -q -p vramguard-fake-cuda --lib cupti
run "fake CUPTI calls" cargo test -q -p vramguard-fake-cuda --test driver -- observer_support::
run "cuda_observer" cargo test -q -p vramguard-memory --features cupti --test cuda_observer \
    -- --test-threads=1 --nocapture
run "cuda_observer_scope" cargo test -q -p vramguard --features cupti --test cuda_observer_scope \
    -- --test-threads=1 --nocapture
say "   tests took $((SECONDS - started)) s"

say "== cargo vramguard measure --device cuda on cargo-vramguard/tests/fixtures/cuda_model"
# The observer sees every driver allocation of the program; on the fake these are the
# vramguard allocator's segments (cuMemAlloc_v2 and cuMemCreate, counted from success to free)
# and, before the first segment, the two granules of the backend's virtual-memory self-test
# (created and released in CudaBackend::new, 4 MiB, below any peak here); the fake cuBLAS takes
# no device memory for its handle. So each observed peak is exactly the allocator's
# peak_reserved_bytes. (On a GPU, NVIDIA's cuBLAS workspace and the CUDA runtime's allocations
# come on top.)
started=$SECONDS
measure_ok=0
NVRTC_LIB=$(scripts/nvrtc-from-pypi.sh 2> "$OUT/nvrtc.txt") || true
fixture="cargo-vramguard/tests/fixtures/cuda_model"
bin="vramguard-fixture-cuda-model"
work="$PWD/$OUT/measure"
measure_env=(env -u VRAMGUARD_ALLOC_CONF -u CUDA_INJECTION64_PATH
    LD_LIBRARY_PATH="$PWD/$LIB:$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    FAKE_CUDA_HOST_KERNELS="$PWD/$OUT/libkernels_host.so" FAKE_CUDA_MEMORY=8GiB)
if [[ -z "$NVRTC_LIB" ]]; then
    say "   FAIL: no NVRTC (see $OUT/nvrtc.txt)"
elif ! cat tensor/kernels/common.cuh tensor/kernels/*.cu > "$OUT/kernels.cpp" \
    || ! g++ -std=c++17 -O2 -fPIC -shared -ffp-contract=off -Wall -Werror \
        -include tensor/kernels/host_shim.h -x c++ "$OUT/kernels.cpp" -o "$OUT/libkernels_host.so"; then
    say "   FAIL: compiling the kernels' host build failed"
elif ! cargo build -q -p cargo-vramguard; then
    say "   FAIL: building cargo-vramguard failed"
elif ! "${measure_env[@]}" target/debug/cargo-vramguard vramguard measure --device cuda \
        --bin "$bin" --work-dir "$work" "$fixture" > "$OUT/measure.txt" 2> "$OUT/measure.err"; then
    say "   FAIL: measure --device cuda (human) failed:"
    tail -n 12 "$OUT/measure.err" | sed 's/^/    /'
elif ! "${measure_env[@]}" target/debug/cargo-vramguard vramguard measure --device cuda \
        --bin "$bin" --work-dir "$work" --json "$fixture" > "$OUT/measure.json" 2>> "$OUT/measure.err"; then
    say "   FAIL: measure --device cuda --json failed:"
    tail -n 12 "$OUT/measure.err" | sed 's/^/    /'
else
    sed 's/^/  /' "$OUT/measure.txt"
    # Each build's own figure: its allocator's peak_reserved_bytes, on stderr, from the
    # executables measure left in its work directory (run without the observer).
    builds=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["work_dir"])' "$OUT/measure.json")
    for which in plain annotated; do
        "${measure_env[@]}" "$builds/bin-$bin-$which" > "$OUT/measure-$which.out" 2> "$OUT/measure-$which.err"
    done
    if python3 - "$OUT" > "$OUT/measure-asserted.txt" <<'PY'
import json, re, sys
out = sys.argv[1]
report = json.load(open(f"{out}/measure.json"))
def reserved(which):
    text = open(f"{out}/measure-{which}.err").read()
    found = re.findall(r"^peak_reserved_bytes (\d+)$", text, re.M)
    assert found, f"the {which} build printed no peak_reserved_bytes:\n{text}"
    return int(found[-1])
plain, annotated = report["plain_peak_bytes"], report["annotated_peak_bytes"]
assert report["device"] == "cuda", report["device"]
assert report["stdout_identical"] is True, "stdout differs between the builds"
assert 0 < annotated < plain, f"annotated {annotated} B is not below plain {plain} B"
for which, observed in (("plain", plain), ("annotated", annotated)):
    own = reserved(which)
    assert observed == own, f"{which}: observed peak {observed} B != its allocator's peak_reserved_bytes {own} B"
for key in ("peak_ratio", "time_ratio"):
    assert isinstance(report[key], float), key
assert report["largest_at_peak"], "no census at the annotated peak"
assert sum(g["bytes"] for g in report["largest_at_peak"]) == report["census_peak_bytes"] == annotated
# The program's own tags reach the injected observer (another copy of vramguard).
labels = {g["label"] for g in report["largest_at_peak"]}
assert {"weights", "forward"} <= labels, f"the census's labels: {sorted(labels)}"
print(f"measure --device cuda: plain {plain} B, annotated {annotated} B, ratio {report['peak_ratio']:.3f}, stdout identical")
print("measure --device cuda: each observed peak = its build's peak_reserved_bytes; the census sums to the annotated peak, by the program's tags")
PY
    then
        measure_ok=1
    else
        say "   FAIL: the measurement is not what the fixture makes (above)"
    fi
fi
if [[ $measure_ok -eq 1 ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
say "   measure took $((SECONDS - started)) s"

say "== what the tests asserted"
grep -h -o -E "observer: allocations [0-9]+ = frees [0-9]+, peak [0-9]+ bytes exact|scope escape [0-9]+ bytes/iter exact|OOM text printed before the library's error|max_batch exact in [0-9]+ <= 4 runs.*|^measure --device cuda: .*" \
    "$OUT"/*.txt | sed 's/^/  /'

say "observer check: tests $passed passed, $failed failed, $skips skip lines"
[[ $failed -eq 0 && $skips -eq 0 && $passed -gt 0 ]]
