#!/usr/bin/env bash
# The compile-time measure of scripts/compile-time.sh in instructions instead of seconds: the
# crate's own rustc run under callgrind (every thread, the macros included), once per copy.
# Wall-clock ratios on this 2-core VM move by ±0.1 from run to run; instruction counts of the
# same compiler on the same input repeat to within 0.3 % (two runs of candle-nn's plain copy:
# 10.792 G and 10.820 G), so this tells a real change from noise. Prints one line per copy and a
# last line
#
#   instructions NAME: plain P G, floor F G, annotated A G, ratio R, floor ratio Q
#
# Usage: scripts/compile-instructions.sh NAME   (after scripts/compile-time.sh NAME ..., whose
# copies in target/compile-time/NAME/ it builds again, in a target directory of its own: for
# candle-nn about 4 minutes per copy under callgrind, plus a first build of the dependencies).
# With `OPTIMIZED_MACROS=1`, the copies of `OPTIMIZED_MACROS=1 scripts/compile-time.sh`
# (proc macros built optimized).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 1 ]]; then
    echo "usage: $0 NAME   (run scripts/compile-time.sh NAME VERSION [FEATURE] first)" >&2
    exit 2
fi
NAME=$1
CRATE=${NAME//-/_}
W=$PWD/target/compile-time/$NAME
if [[ "${OPTIMIZED_MACROS:-0}" == 1 ]]; then W=$W-optimized-macros; fi
for copy in plain floor annotated; do
    if [[ ! -f "$W/$copy/Cargo.toml" ]]; then
        echo "no $W/$copy: run scripts/compile-time.sh $NAME VERSION [FEATURE] first" >&2
        exit 1
    fi
done
command -v valgrind > /dev/null || { echo "valgrind not found: apt-get install -y valgrind" >&2; exit 2; }
OUT=$W/instructions
rm -rf "$OUT"
mkdir -p "$OUT"
# A rustc wrapper that runs only the measured crate's compilation under callgrind.
cat > "$OUT/wrapper.sh" << 'SH'
#!/usr/bin/env bash
rustc=$1
shift
for arg in "$@"; do
    if [[ "$arg" == "$VG_MEASURED_CRATE" ]]; then
        exec valgrind --tool=callgrind --callgrind-out-file="$VG_MEASURED_OUT.callgrind" \
            "$rustc" "$@" 2> "$VG_MEASURED_OUT.log"
    fi
done
exec "$rustc" "$@"
SH
chmod +x "$OUT/wrapper.sh"
# Its own target directory: the wrapper must not change the fingerprints of the wall-clock runs.
export CARGO_TARGET_DIR=$W/target-instructions CARGO_INCREMENTAL=0
declare -A counts
for copy in plain floor annotated; do
    touch "$W/$copy/src/lib.rs"
    if ! (cd "$W/$copy" && RUSTC_WRAPPER="$OUT/wrapper.sh" VG_MEASURED_CRATE="$CRATE" \
        VG_MEASURED_OUT="$OUT/$copy" cargo build --lib --quiet 2> "$OUT/$copy.cargo.log"); then
        echo "the $copy copy does not build (see $OUT/$copy.cargo.log)" >&2
        exit 1
    fi
    if [[ ! -f "$OUT/$copy.callgrind" ]]; then
        echo "$copy: the crate was not rebuilt, nothing counted (see $OUT/$copy.cargo.log)" >&2
        exit 1
    fi
    counts[$copy]=$(awk '/^(summary|totals):/ {print $2; exit}' "$OUT/$copy.callgrind")
    printf '  %s: %s instructions\n' "$copy" "${counts[$copy]}"
done
awk -v name="$NAME" -v p="${counts[plain]}" -v f="${counts[floor]}" -v a="${counts[annotated]}" \
    'BEGIN {printf "instructions %s: plain %.3f G, floor %.3f G, annotated %.3f G, ratio %.3f, floor ratio %.3f\n",
        name, p / 1e9, f / 1e9, a / 1e9, a / p, f / p}'
