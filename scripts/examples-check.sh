#!/usr/bin/env bash
# `cargo vramguard check` on this workspace's own examples: every example (but the ones that
# need a feature or measure the macro itself) becomes a module of one throwaway library crate
# under target/examples-check, and every function in it gets #[vramguard::inference].
# Prints `M/N functions compile`; exits non-zero unless N/N.
#
# Then the two examples a candle or burn user would copy, `candle_inference` and
# `burn_inference`, run in `--quick --json` mode (release build; the first build of candle and
# burn takes minutes), and each must report `outputs_bit_identical`, `max_batch_exact` and
# `leak_exact` equal to 1. `EXAMPLES_CHECK_SKIP_RUNS=1` skips this part.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
dir="$root/target/examples-check/crate"
rm -rf "$dir"
mkdir -p "$dir/src" "$dir/benches"
cp -r examples/. "$dir/src/"
cp -r benches/support "$dir/benches/"
# candle_inference and burn_inference need the `candle` and `burn` features; compile_bench
# builds other crates.
rm -f "$dir/src/candle_inference.rs" "$dir/src/burn_inference.rs" "$dir/src/compile_bench.rs"
cat > "$dir/Cargo.toml" <<TOML
[package]
name = "vramguard-examples-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
vramguard = { path = "$root" }
matrixmultiply = "0.3.11"
serde_json = "1"
# tensor_bench --device cuda calls cuBLAS directly (loaded at run time; builds without CUDA).
cudarc = { version = "0.19.10", default-features = false, features = ["std", "driver", "nvrtc", "cublas", "dynamic-loading", "cuda-12080"] }

[workspace]
TOML
{
    echo '//! The workspace examples as modules of one library, for `cargo vramguard check`.'
    echo '#![allow(dead_code, unused_imports)]'
    for f in "$dir"/src/*.rs; do
        name=$(basename "$f" .rs)
        [[ "$name" == lib ]] || echo "mod $name;"
    done
} > "$dir/src/lib.rs"
cargo build --release -q -p cargo-vramguard
target/release/cargo-vramguard vramguard check "$dir" \
    --target-dir "$root/target/examples-check/target" \
    --work-dir "$root/target/examples-check/work"

[[ "${EXAMPLES_CHECK_SKIP_RUNS:-0}" == 1 ]] && exit 0
status=0
for example in candle:candle_inference burn-ndarray:burn_inference; do
    feature=${example%%:*}
    name=${example#*:}
    echo "== $name --quick --json"
    out=$(cargo run --release -q --features "$feature" --example "$name" -- --quick --json)
    echo "$out"
    for metric in outputs_bit_identical max_batch_exact leak_exact; do
        if ! grep -q "\"metric\":\"$metric\",\"value\":1," <<<"$out"; then
            echo "$name: $metric is not 1" >&2
            status=1
        fi
    done
done
exit $status
