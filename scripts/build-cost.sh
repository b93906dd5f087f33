#!/usr/bin/env bash
# What vramguard adds to a candle CPU user's build (issue #48): a fresh crate outside the
# workspace with candle-core and candle-nn 0.11.1 and one `forward` under `#[inference]`,
# depending on vramguard by path as the README says (`default-features = false, features =
# ["candle"]`), built from clean with `cargo build --timings`. Each compiled unit's seconds come
# from cargo's timing report; a unit is vramguard's when its package is not in the dependency
# tree of the same crate without vramguard. Prints each of vramguard's units, then
#
#   build cost: vramguard V s of T s compile-seconds (ratio R = T / (T - V)), wall W s
#
# Usage: scripts/build-cost.sh [VRAMGUARD_DIR]   (default: this checkout; another checkout,
# e.g. a worktree of an older commit, measures that one: run both in one go to compare).
# Work in target/build-cost/. Compile-seconds are summed over units, so they do not depend on
# how many run at once; wall time does (and on whatever else the machine does).
set -euo pipefail
cd "$(dirname "$0")/.."
vramguard=$(cd "${1:-.}" && pwd)
work=$PWD/target/build-cost/$(basename "$vramguard")
rm -rf "$work"
mkdir -p "$work/user/src" "$work/plain/src"

manifest() { # manifest NAME EXTRA_DEPENDENCY_LINE
    cat <<TOML
[package]
name = "$1"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
candle-core = { version = "0.11.1", default-features = false }
candle-nn = { version = "0.11.1", default-features = false }
$2

[workspace]
TOML
}
manifest build-cost-user "vramguard = { path = \"$vramguard\", default-features = false, features = [\"candle\"] }" \
    > "$work/user/Cargo.toml"
manifest build-cost-plain "" > "$work/plain/Cargo.toml"
model() { # model ATTRIBUTE
    cat <<RUST
use candle_core::{Device, Result, Tensor};
use candle_nn::{Linear, Module, VarBuilder, VarMap};

struct Mlp {
    up: Linear,
    down: Linear,
}

impl Mlp {
    $1
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let h = self.up.forward(xs)?;
        let h = h.gelu()?;
        let h = self.down.forward(&h)?;
        Ok(h)
    }
}

fn main() -> Result<()> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, &Device::Cpu);
    let mlp = Mlp { up: candle_nn::linear(64, 256, vb.pp("up"))?, down: candle_nn::linear(256, 64, vb.pp("down"))? };
    let out = mlp.forward(&Tensor::ones((8, 64), candle_core::DType::F32, &Device::Cpu)?)?;
    println!("{:?}", out.dims());
    Ok(())
}
RUST
}
model "#[vramguard::inference]" > "$work/user/src/main.rs"
model "" > "$work/plain/src/main.rs"
# The workspace's versions, so that both crates resolve the same candle.
cp Cargo.lock "$work/user/Cargo.lock"
cp Cargo.lock "$work/plain/Cargo.lock"

cargo tree -q --manifest-path "$work/plain/Cargo.toml" -e normal,build --prefix none \
    | sed -E 's/ \(.*//; s/ \*$//' | sort -u > "$work/plain-packages.txt"
started=$SECONDS
CARGO_TARGET_DIR=$work/target CARGO_INCREMENTAL=0 cargo build -q --timings \
    --manifest-path "$work/user/Cargo.toml"
wall=$((SECONDS - started))
report=$(ls "$work"/target/cargo-timings/cargo-timing-*.html | head -n 1)
python3 - "$report" "$work/plain-packages.txt" "$wall" <<'EOF'
import json, re, sys
report, plain_list, wall = sys.argv[1], sys.argv[2], int(sys.argv[3])
html = open(report).read()
units = json.loads(re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S).group(1))
plain = {line.strip() for line in open(plain_list) if line.strip()}
total = sum(u["duration"] for u in units)
ours = [u for u in units if f'{u["name"]} v{u["version"]}' not in plain
        and u["name"] != "build-cost-user"]
vramguard = sum(u["duration"] for u in ours)
print(f"{'unit':<40} {'seconds':>8}")
for u in sorted(ours, key=lambda u: -u["duration"]):
    label = f'{u["name"]} {u["version"]}' + (f' ({u["target"].strip()})' if u["target"].strip() else "")
    print(f"{label:<40} {u['duration']:>8.1f}")
print(f"build cost: vramguard {vramguard:.1f} s of {total:.1f} s compile-seconds "
      f"(ratio {total / (total - vramguard):.3f} = T / (T - V)), wall {wall} s")
EOF
