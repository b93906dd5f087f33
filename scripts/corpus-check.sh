#!/usr/bin/env bash
# Corpus check: `cargo vramguard check` on third-party crates from crates.io, every function
# with a body annotated with #[vramguard::inference]:
#
#   candle-nn 0.11.1         compiles, and its own tests give the same results annotated as plain
#   dfdx 0.13.0              compiles (cargo check)
#   moshi 0.6.4              compiles (cargo check)
#   rten 0.27.0              compiles (cargo check): its own tensor and view types
#   linfa-clustering 0.8.1   compiles (cargo check), with the `ndarray` feature
#   burn-core 0.22.1         compiles (cargo check), with the `burn` feature (burn 0.22)
#   smartcore 0.7.0          compiles (cargo check): generic numeric code over its own arrays
#
# candle-nn and moshi with the facade's matching feature (`candle`) and without. The crates of
# the wider corpus (issue #19) are checked, not tested, in CI: their own test suites would add
# more than CI's time allows (smartcore's alone took 586 s here); CORPUS_WIDE_TESTS=1 runs them
# too, annotated against plain, except rten's, whose tests include data files its crates.io
# package does not ship (`rten-onnx/test-data/...`), so they do not build anywhere. Prints one
# line per crate and mode, e.g.
#
#   corpus candle-nn 0.11.1 (feature candle): 412/412 compile, tests 96 passed 0 failed
#
# then the failures of any run below 100%, and the time of each step. Exits non-zero unless
# every crate reaches 100% (and the tests agree); CORPUS_ALLOW_FAIL=1 prints the same and exits
# 0. Full reports: target/corpus/reports/. All runs share one target directory
# (target/corpus/target) so dependencies build once. Needs crates.io (or a warm cargo cache
# with CORPUS_OFFLINE=1).
#
# `scripts/corpus-check.sh --lint` runs `cargo vramguard lint` on the same crates instead (no
# build; scripts/lint-corpus.sh, which prints the findings and their classification).
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == --lint ]]; then exec scripts/lint-corpus.sh; fi
export CARGO_TERM_COLOR=never
unset CARGO_TARGET_DIR
# No debug info for the corpus builds: a third of the compile and link time, nothing lost.
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0

CORPUS="target/corpus"
REPORTS="$CORPUS/reports"
mkdir -p "$REPORTS"
START=$SECONDS
failed=0
timings=()
lines=()

step() { # step NAME START: records how long a step took
    timings+=("$(printf '%-44s %4ds' "$1" $((SECONDS - $2)))")
}

# CORPUS_TOOL: a cargo-vramguard binary already built (CI passes the one `cargo test` built; the
# tool only drives cargo, so its profile does not matter), else a release build of it.
if [[ -n "${CORPUS_TOOL:-}" ]]; then
    TOOL=$CORPUS_TOOL
    if [[ ! -x "$TOOL" ]]; then
        echo "corpus: FATAL: CORPUS_TOOL=$TOOL is not an executable file" >&2
        exit 1
    fi
else
    t=$SECONDS
    if ! cargo build --release -q -p cargo-vramguard; then
        echo "corpus: FATAL: cargo-vramguard does not build" >&2
        exit 1
    fi
    step "build cargo-vramguard (release)" "$t"
    TOOL="target/release/cargo-vramguard"
fi
OFFLINE=()
if [[ "${CORPUS_OFFLINE:-0}" == 1 ]]; then OFFLINE=(--offline); fi

# Tests of candle-nn that take minutes on 2 cores (unoptimised), skipped by name: a timing
# printout over [1, 8192, 2048]-sized tensors, not a check.
SKIP_TESTS=(bf16_lfm_op_timings)

# run NAME VERSION FEATURE(or "") [--test]
run() {
    local name=$1 version=$2 feature=$3
    shift 3
    local mode args=() report
    if [[ -n "$feature" ]]; then
        mode="feature $feature"
        args+=(--features "$feature")
    else
        mode="no feature"
    fi
    report="$REPORTS/$name-$version-${feature:-plain}.txt"
    local t=$SECONDS
    "$TOOL" vramguard check "$name@$version" "${args[@]}" "$@" "${OFFLINE[@]}" \
        --work-dir "$CORPUS/work" --target-dir "$CORPUS/target" --max-rounds 12 \
        > "$report" 2> "$report.log"
    local rc=$?
    step "$name $version ($mode)$([[ " $* " == *" --test "* ]] && echo ', with tests')" "$t"
    local line
    if [[ $rc -eq 2 ]]; then
        line="corpus $name $version ($mode): ERROR $(tail -n 3 "$report.log" | tr '\n' ' ')"
    else
        # First report line: "NAME VERSION (#[inference]...): M/N functions compile".
        local counts tests
        counts=$(head -n 1 "$report" | sed -n 's/.*: \([0-9]*\/[0-9]*\) functions compile$/\1/p')
        line="corpus $name $version ($mode): ${counts:-?} compile"
        tests=$(grep -m 1 '^tests: ' "$report")
        if [[ -n "$tests" ]]; then
            local passed failed_tests differ
            passed=$(sed -n 's/^tests: \([0-9]*\) passed.*/\1/p' <<< "$tests")
            failed_tests=$(sed -n 's/^tests: [0-9]* passed, \([0-9]*\) failed.*/\1/p' <<< "$tests")
            line+=", tests $passed passed $failed_tests failed"
            differ=$(sed -n 's/.*; \([0-9]*\) differ$/\1/p' <<< "$tests")
            if [[ -n "$differ" ]]; then line+=", $differ differ from plain"; fi
        fi
    fi
    echo "$line"
    lines+=("$line")
    if [[ $rc -ne 0 ]]; then
        failed=1
        sed -n '2,$p' "$report" | sed 's/^/    /'
    fi
}

run candle-nn 0.11.1 candle --test "${SKIP_TESTS[@]/#/--skip-test=}"
run candle-nn 0.11.1 ""
run dfdx 0.13.0 ""
run moshi 0.6.4 candle
run moshi 0.6.4 ""
wide_tests=()
if [[ "${CORPUS_WIDE_TESTS:-0}" == 1 ]]; then wide_tests=(--test); fi
run rten 0.27.0 ""
run linfa-clustering 0.8.1 ndarray "${wide_tests[@]}"
run burn-core 0.22.1 burn "${wide_tests[@]}"
run smartcore 0.7.0 "" "${wide_tests[@]}"

echo
echo "corpus summary:"
printf '  %s\n' "${lines[@]}"
echo "corpus timings:"
printf '  %s\n' "${timings[@]}"
echo "corpus total: $((SECONDS - START))s"
if [[ $failed -ne 0 ]]; then
    if [[ "${CORPUS_ALLOW_FAIL:-0}" == 1 ]]; then
        echo "corpus: some crates are below 100% (CORPUS_ALLOW_FAIL=1: not failing)"
        exit 0
    fi
    echo "corpus: FAILED: some crates are below 100% (reports in $REPORTS)" >&2
    exit 1
fi
echo "corpus: every crate compiles with every function annotated"
