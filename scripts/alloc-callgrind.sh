#!/usr/bin/env bash
# Instructions per cached alloc+free pair (default settings; and with the trace recording)
# against the system allocator's pair, counted by callgrind on the same 256 sizes as
# `alloc_bench`'s `cached_pair_ns`: `alloc_bench --count-pairs MODE` runs the warm-up outside
# and the counted rounds inside one function, and callgrind counts only inside it
# (`--toggle-collect`). Instruction counts do not swing with the machine's load as times do.
# What they miss: under valgrind `clock_gettime` is a system call, counted as glibc's wrapper
# (about 10 instructions) instead of the vDSO's clock read (23 ns on this VM), and an atomic
# counts one instruction however long it waits for its cache line: compare times too.
# Usage: scripts/alloc-callgrind.sh [ROUNDS]   (default 20 rounds = 5120 pairs per mode)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 2; }
cargo build --release --example alloc_bench -q
bin=target/release/examples/alloc_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A per_pair
for mode in system cached recording; do
    case $mode in
        system) fn='*counted_system_pairs*' ;;
        *) fn='*counted_cached_pairs*' ;;
    esac
    pairs=$(valgrind --tool=callgrind --callgrind-out-file="$out/$mode.out" \
        --toggle-collect="$fn" "$bin" --count-pairs "$mode" --rounds "$rounds" 2>/dev/null |
        awk '/^pairs /{print $2}')
    ir=$(awk '/^(summary|totals):/{print $2; exit}' "$out/$mode.out")
    per_pair[$mode]=$(awk -v ir="$ir" -v n="$pairs" 'BEGIN{printf "%.1f", ir / n}')
    echo "${mode}_pair_instructions ${per_pair[$mode]} ($ir instructions / $pairs pairs)"
done
awk -v c="${per_pair[cached]}" -v s="${per_pair[system]}" -v r="${per_pair[recording]}" \
    'BEGIN{printf "cached/system %.2f  recording/cached %.2f\n", c / s, r / c}'
