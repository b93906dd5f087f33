#!/usr/bin/env bash
# Compile-time cost of #[inference] on real code: a corpus crate's library (the corpus check's
# copy with every function annotated) built three ways, all depending on vramguard with the
# crate's feature: plain (attributes taken out), floor (each replaced by an attribute that only
# parses the function with syn and prints it back: what any syn-based attribute pays) and
# annotated. Dev profile, incremental off, dependencies prebuilt, the macros as a dev build
# compiles them (unoptimized); `REPS` (3) interleaved builds of the crate itself each. Prints
# each build with the share of CPU time the VM's host took meanwhile (steal), the steal over
# all of them, then the medians on a last line:
#
#   compile NAME: plain P s, floor F s, annotated A s, ratio R, floor ratio Q
#
# With `OPTIMIZED_MACROS=1`, all three copies build their proc macros (and the build scripts)
# optimized, through the profile setting the README recommends
# (`[profile.dev.build-override] opt-level = 3`); the crate itself stays a dev build.
#
# Usage: scripts/compile-time.sh NAME VERSION [FEATURE]   (e.g. candle-nn 0.11.1 candle)
# Needs the corpus check's work copy (`target/corpus/work/NAME-VERSION`: run
# scripts/corpus-check.sh first). Work in `target/compile-time/NAME/`
# (`NAME-optimized-macros/` with `OPTIMIZED_MACROS=1`).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 2 ]]; then
    echo "usage: $0 NAME VERSION [FEATURE]" >&2
    exit 2
fi
NAME=$1 VERSION=$2 FEATURE=${3:-}
OPTIMIZED=${OPTIMIZED_MACROS:-0}
ROOT=$PWD
SOURCE=target/corpus/work/$NAME-$VERSION
if [[ ! -d "$SOURCE/src" ]]; then
    echo "no $SOURCE: run scripts/corpus-check.sh first" >&2
    exit 1
fi
W=$ROOT/target/compile-time/$NAME
if [[ "$OPTIMIZED" == 1 ]]; then W=$W-optimized-macros; fi
MACRO=$ROOT/target/compile-time/syn-roundtrip
rm -rf "$W"
mkdir -p "$W" "$MACRO/src"
cat > "$MACRO/Cargo.toml" <<'TOML'
[package]
name = "vg-syn-roundtrip"
version = "0.0.0"
edition = "2021"
publish = false

[lib]
proc-macro = true

[dependencies]
# The syn features vramguard-macros enables.
syn = { version = "3", features = ["full", "visit", "visit-mut", "extra-traits"] }
quote = "1"
proc-macro2 = "1"

[workspace]
TOML
cat > "$MACRO/src/lib.rs" <<'RUST'
//! `#[roundtrip]`: parses the function with syn and prints it back unchanged.
use quote::ToTokens;

#[proc_macro_attribute]
pub fn roundtrip(_: proc_macro::TokenStream, item: proc_macro::TokenStream) -> proc_macro::TokenStream {
    match syn::parse::<syn::ItemFn>(item) {
        Ok(function) => function.into_token_stream().into(),
        Err(error) => error.to_compile_error().into(),
    }
}
RUST
features=""
if [[ -n "$FEATURE" ]]; then features=", features = [\"$FEATURE\"]"; fi
for copy in plain floor annotated; do
    cp -r "$SOURCE" "$W/$copy"
    rm -rf "$W/$copy/target"
    sed -i "s|^vramguard = .*|vramguard = { path = \"$ROOT\"$features }|" "$W/$copy/Cargo.toml"
    if [[ "$OPTIMIZED" == 1 ]]; then
        printf '\n[profile.dev.build-override]\nopt-level = 3\n' >> "$W/$copy/Cargo.toml"
    fi
done
if [[ "$OPTIMIZED" == 1 ]]; then
    echo "macros optimized: [profile.dev.build-override] opt-level = 3 in all three copies"
fi
# The corpus check writes `#[::vramguard::inference] ` or `#[::vramguard::inference(..)] `.
grep -rl "vramguard::inference" "$W/plain/src" | xargs -r sed -i \
    -e 's/#\[::vramguard::inference\] //g' -e 's/#\[::vramguard::inference([^]]*)\] //g'
grep -rl "vramguard::inference" "$W/floor/src" | xargs -r sed -i \
    -e 's/#\[::vramguard::inference\] /#[::vg_syn_roundtrip::roundtrip] /g' \
    -e 's/#\[::vramguard::inference([^]]*)\] /#[::vg_syn_roundtrip::roundtrip] /g'
for copy in plain floor; do
    if grep -rq "vramguard::inference" "$W/$copy/src"; then
        echo "could not replace every attribute in the $copy copy" >&2
        exit 1
    fi
done
sed -i "s|^vramguard = .*|&\nvg-syn-roundtrip = { path = \"$MACRO\" }|" "$W/floor/Cargo.toml"
echo "functions annotated: $(grep -ro 'vramguard::inference' "$W/annotated/src" | wc -l)"
export CARGO_TARGET_DIR=$W/target CARGO_INCREMENTAL=0
for copy in plain floor annotated; do
    if ! (cd "$W/$copy" && cargo build --lib --quiet 2> "$W/$copy.log"); then
        echo "the $copy copy does not build (see $W/$copy.log)" >&2
        exit 1
    fi
done
# CPU time the hypervisor gave to other guests ("steal", /proc/stat) and all CPU time, in
# ticks: on a shared VM the wall times of builds that ran while steal was high are not
# comparable with those of builds that ran while it was low.
cpu_ticks() { awk '/^cpu / {print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
declare -A times
read -r steal_start total_start < <(cpu_ticks)
for ((rep = 1; rep <= ${REPS:-3}; rep++)); do
    for copy in plain floor annotated; do
        touch "$W/$copy/src/lib.rs"
        read -r steal_before total_before < <(cpu_ticks)
        start=$(date +%s.%N)
        (cd "$W/$copy" && cargo build --lib --quiet 2> /dev/null)
        seconds=$(echo "$(date +%s.%N) - $start" | bc)
        read -r steal_after total_after < <(cpu_ticks)
        steal=$(( 100 * (steal_after - steal_before) / (total_after - total_before + 1) ))
        echo "  rep $rep: $copy $seconds s (steal $steal %)"
        times[$copy]+="$seconds "
    done
done
read -r steal_end total_end < <(cpu_ticks)
echo "steal: $(( 100 * (steal_end - steal_start) / (total_end - total_start + 1) )) % of the CPU time" \
    "during the timed builds (above a few % the times are not comparable)"
median() { tr ' ' '\n' <<< "$1" | sed '/^$/d' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
plain=$(median "${times[plain]}")
floor=$(median "${times[floor]}")
annotated=$(median "${times[annotated]}")
printf 'compile %s: plain %.2f s, floor %.2f s, annotated %.2f s, ratio %.2f, floor ratio %.2f\n' \
    "$NAME" "$plain" "$floor" "$annotated" \
    "$(echo "$annotated / $plain" | bc -l)" "$(echo "$floor / $plain" | bc -l)"
