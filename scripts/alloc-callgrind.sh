#!/usr/bin/env bash
# Instructions and stores per cached alloc+free pair (default settings with the device's
# resident block; with the trace recording; on a device holding nothing else) against the
# system allocator's pair, counted by callgrind on the same 256 sizes as `alloc_bench`'s
# `cached_pair_ns`: `alloc_bench --count-pairs MODE` runs the warm-up outside and the counted
# rounds inside one function, and callgrind counts only inside it (`--toggle-collect`).
# Instruction counts do not swing with the machine's load as times do. Stores are counted
# because they bound the pair's time on this VM (about one per cycle, and every atomic waits
# for those before it to drain). What the counts miss: the time-stamp counter read and
# `clock_gettime` (under valgrind a system call, counted as glibc's wrapper), and an atomic
# counts one instruction however long it waits: compare times too.
# Usage: scripts/alloc-callgrind.sh [ROUNDS] [BINARY]   (default 20 rounds = 5120 pairs per
# mode; BINARY: an alloc_bench built elsewhere, e.g. from another commit, instead of this tree's)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 2; }
bin=${2:-}
if [[ -z "$bin" ]]; then
    cargo build --release --example alloc_bench -q
    bin=target/release/examples/alloc_bench
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
declare -A per_pair
for mode in system cached recording empty; do
    case $mode in
        system) fn='*counted_system_pairs*' ;;
        *) fn='*counted_cached_pairs*' ;;
    esac
    pairs=$(valgrind --tool=callgrind --cache-sim=yes --callgrind-out-file="$out/$mode.out" \
        --toggle-collect="$fn" "$bin" --count-pairs "$mode" --rounds "$rounds" 2>/dev/null |
        awk '/^pairs /{print $2}')
    # With the cache simulated the totals are Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
    read -r ir dw < <(awk '/^(summary|totals):/{print $2, $4; exit}' "$out/$mode.out")
    per_pair[$mode]=$(awk -v ir="$ir" -v n="$pairs" 'BEGIN{printf "%.1f", ir / n}')
    stores=$(awk -v dw="$dw" -v n="$pairs" 'BEGIN{printf "%.1f", dw / n}')
    echo "${mode}_pair_instructions ${per_pair[$mode]} stores ${stores} ($ir instructions / $pairs pairs)"
done
awk -v c="${per_pair[cached]}" -v s="${per_pair[system]}" -v r="${per_pair[recording]}" \
    -v e="${per_pair[empty]}" \
    'BEGIN{printf "cached/system %.2f  recording/cached %.2f  empty/system %.2f\n", c / s, r / c, e / s}'
