#!/usr/bin/env bash
# Compile-time cost of #[inference] on real model code: candle-nn 0.11.1's library built plain
# and with every function annotated, both depending on vramguard (feature `candle`), dev
# profile, incremental off, dependencies prebuilt; `REPS` (3) interleaved builds of the crate
# itself each, medians and their ratio printed.
#
# The annotated copy is the corpus check's work copy (`target/corpus/work/candle-nn-0.11.1`,
# left by `scripts/corpus-check.sh`); the plain copy is the same tree with the attributes
# taken out. Work in `target/candle-nn-compile-time/`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SOURCE=target/corpus/work/candle-nn-0.11.1
if [[ ! -d "$SOURCE/src" ]]; then
    echo "no $SOURCE: run scripts/corpus-check.sh first" >&2
    exit 1
fi
W=target/candle-nn-compile-time
rm -rf "$W/plain" "$W/annotated"
mkdir -p "$W"
cp -r "$SOURCE" "$W/annotated"
cp -r "$SOURCE" "$W/plain"
grep -rl "vramguard::inference" "$W/plain/src" | xargs -r sed -i \
    -e 's/#\[::vramguard::inference\] //g' -e 's/#\[::vramguard::inference([^]]*)\] //g'
if grep -rq "vramguard::inference\|#\[keep\]" "$W/plain/src"; then
    echo "could not strip every attribute from the plain copy" >&2
    exit 1
fi
for copy in plain annotated; do
    sed -i "s|^vramguard = .*|vramguard = { path = \"$ROOT\", features = [\"candle\"] }|" \
        "$W/$copy/Cargo.toml"
done
echo "functions annotated: $(grep -ro 'vramguard::inference' "$W/annotated/src" | wc -l)"
export CARGO_TARGET_DIR=$ROOT/$W/target CARGO_INCREMENTAL=0
for copy in plain annotated; do
    (cd "$W/$copy" && cargo build --lib --quiet 2> /dev/null)
done
declare -A times
for ((rep = 1; rep <= ${REPS:-3}; rep++)); do
    for copy in plain annotated; do
        touch "$W/$copy/src/lib.rs"
        start=$(date +%s.%N)
        (cd "$W/$copy" && cargo build --lib --quiet 2> /dev/null)
        seconds=$(echo "$(date +%s.%N) - $start" | bc)
        echo "  rep $rep: $copy $seconds s"
        times[$copy]+="$seconds "
    done
done
median() { tr ' ' '\n' <<< "$1" | sed '/^$/d' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
plain=$(median "${times[plain]}")
annotated=$(median "${times[annotated]}")
printf 'candle-nn 0.11.1 lib: plain %.2f s, annotated %.2f s, ratio %.2f\n' \
    "$plain" "$annotated" "$(echo "$annotated / $plain" | bc -l)"
