#!/usr/bin/env bash
# The crates as a registry would serve them, and a new user's first steps with them.
#
# 1. Every publishable package of the workspace (from `cargo metadata`, each after the
#    workspace packages it depends on) is packaged (`cargo package`: the .crate, built once
#    from its own files) and goes through `cargo publish --dry-run`, then is unpacked into a
#    local registry: a directory source (`cargo vendor`'s format, `.cargo-checksum.json` with
#    the .crate's sha256) that also holds every third-party crate of the workspace's lock file,
#    vendored.
#
#    Why a directory source that replaces crates.io, rather than `[patch.crates-io]` pointing at
#    the unpacked packages: with `[source.crates-io] replace-with`, cargo resolves every
#    dependency, ours included, through one registry-like source, by version requirement,
#    checksums checked, compiled as registry crates are (lints capped), exactly as after a real
#    publish. A `[patch]` would make our packages path dependencies: their version
#    requirements go unchecked against an index, and the fresh crate would not see them as it
#    sees a published crate. The cost is that a directory source can only replace crates.io
#    whole, so it must hold every third-party crate too: `cargo vendor` of the workspace's lock
#    file (all features and dev-dependencies, as a package's verification resolves them).
#
#    `cargo publish --dry-run` of a package whose dependency is another of ours resolves it
#    through that registry: `--config source.crates-io.replace-with=…` names the directory, and
#    `--registry crates-io` tells cargo that the dry run is still for crates.io (it refuses to
#    publish to a replaced source otherwise; nothing is uploaded).
#
# 2. In a CARGO_HOME of its own whose config replaces crates.io with that registry, the
#    README's commands run as written: two fresh crates outside the workspace build and run
#    with the README's dependency lines (read from README.md now: the default line and candle
#    on the CPU); `cargo install cargo-vramguard` (`--debug`: see below); then, on the candle fixture
#    (cargo-vramguard/tests/fixtures/candle_model, copied into a git repository of its own),
#    `cargo vramguard apply --fns 'forward*' --track --test` (twice: the second run changes
#    nothing), `cargo vramguard measure --bin candle-model` and its `--json`, whose peak_ratio
#    must be within 0.01 of the ratio measured by hand (the applied crate and a copy without
#    its attributes, each printing its own heap peak).
#
# Every build shares one target directory (candle compiles once), with the lean profile
# (no debug info). Needs crates.io once (the index for the dry runs; the vendored crates come
# from cargo's cache when there). PACKAGE_CHECK_KEEP=1 keeps the scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$SECONDS
# Outside the workspace: cargo would take the fresh crates for members of this one.
scratch=${PACKAGE_CHECK_DIR:-${TMPDIR:-/tmp}/vramguard-package-check}
export CARGO_TARGET_DIR=${PACKAGE_CHECK_TARGET:-$root/target/package-check}
export CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 CARGO_INCREMENTAL=0
export CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never
registry=$scratch/registry
rm -rf "$scratch"
mkdir -p "$scratch"
if [[ "${PACKAGE_CHECK_KEEP:-0}" != 1 ]]; then
    trap 'rm -rf "$scratch"' EXIT
fi
say() { printf '== package-check (%ds): %s\n' $((SECONDS - started)) "$*"; }
fail() { echo "package-check: $*" >&2; exit 1; }

# The vendored crates are kept beside the builds while Cargo.lock stays the same (~850 MB that
# take a minute to copy); the registry links to them, and gets our packages of this run.
vendor=$CARGO_TARGET_DIR/vendor
lock_sum=$(sha256sum Cargo.lock | cut -d ' ' -f 1)
if [[ ! -f $vendor/.lock-sha256 || $(cat "$vendor/.lock-sha256") != "$lock_sum" ]]; then
    say "vendoring the third-party crates of Cargo.lock into $vendor"
    rm -rf "$vendor"
    cargo vendor --locked --versioned-dirs -q "$vendor" >/dev/null
    echo "$lock_sum" >"$vendor/.lock-sha256"
fi
mkdir -p "$registry"
ln -s "$vendor"/* "$registry"/

mapfile -t packages < <(cargo metadata --format-version 1 --no-deps --locked \
    | python3 scripts/package_check.py order)
say "publishable packages, in dependency order: ${packages[*]}"
# Cargo takes a registry crate it has built for fresh by its name and version alone: forget what
# an earlier run built of ours, which had other contents under the same versions.
for package in "${packages[@]}"; do
    rm -rf "$CARGO_TARGET_DIR"/{debug,release}/.fingerprint/"$package"-*
done
local_registry=(--config "source.crates-io.replace-with='vramguard-local'"
    --config "source.vramguard-local.directory='$registry'"
    # The facade's package keeps the workspace's profiles (its dependencies at opt-level 2):
    # the lean profile instead, so its verification reuses what the others built.
    --config 'profile.dev.package."*".opt-level=0')
for package in "${packages[@]}"; do
    version=$(cargo metadata --format-version 1 --no-deps --locked \
        | python3 -c "import json,sys; print(next(p['version'] for p in json.load(sys.stdin)['packages'] if p['name'] == sys.argv[1]))" "$package")
    say "cargo package --list -p $package"
    cargo package --list -p "$package" --allow-dirty "${local_registry[@]}" | sed 's/^/    /'
    say "cargo package -p $package, verified by building the .crate"
    cargo package -p "$package" --allow-dirty --locked "${local_registry[@]}" 2>&1 \
        | sed '/^ *Compiling /d' || fail "cargo package -p $package failed"
    crate=$CARGO_TARGET_DIR/package/$package-$version.crate
    [[ -f $crate ]] || fail "no $crate"
    contents=$(tar -tzf "$crate")
    for license in LICENSE-MIT LICENSE-APACHE README.md; do
        grep -qx "$package-$version/$license" <<<"$contents" \
            || fail "$package's package has no $license"
    done
    say "cargo publish --dry-run -p $package"
    cargo publish --dry-run -p "$package" --allow-dirty --registry crates-io \
        "${local_registry[@]}" 2>&1 | sed '/^ *Compiling /d' \
        || fail "cargo publish --dry-run -p $package failed"
    python3 scripts/package_check.py add "$crate" "$registry" >/dev/null
done

# From here on, cargo knows only the local registry, as a user's cargo knows crates.io.
export CARGO_HOME=$scratch/cargo-home
mkdir -p "$CARGO_HOME"
cat >"$CARGO_HOME/config.toml" <<EOF
[source.crates-io]
replace-with = "vramguard-local"

[source.vramguard-local]
directory = "$registry"
EOF
export PATH=$CARGO_HOME/bin:$PATH
# The tool's work copies go here too (its default is \$TMPDIR/cargo-vramguard).
export TMPDIR=$scratch/tmp
mkdir -p "$TMPDIR"

default_line=$(python3 scripts/package_check.py readme-lines README.md | sed -n 's/^default\t//p')
candle_line=$(python3 scripts/package_check.py readme-lines README.md | sed -n 's/^candle\t//p')
say "a fresh crate with the README's default line: $default_line"
fresh=$scratch/fresh-default
mkdir -p "$fresh/src"
cat >"$fresh/Cargo.toml" <<EOF
[package]
name = "fresh-default"
version = "0.1.0"
edition = "2021"

[dependencies]
$default_line

[workspace]
EOF
cat >"$fresh/src/main.rs" <<'EOF'
use vramguard::{Device, Tensor, TensorError};

#[vramguard::inference]
fn forward(x: &Tensor) -> Result<Tensor, TensorError> {
    let x = x.exp()?;
    let x = x.tanh()?;
    x.sigmoid()
}

fn main() -> Result<(), TensorError> {
    let device = Device::isolated_host();
    let out = forward(&Tensor::ones(&[4, 4], &device)?)?;
    println!("fresh-default: {:?}, peak {} B", out.dims(), vramguard::memory::stats(&device).peak_allocated_bytes);
    Ok(())
}
EOF
(cd "$fresh" && cargo run -q)

say "a fresh crate with the README's candle line: $candle_line"
fresh=$scratch/fresh-candle
mkdir -p "$fresh/src"
cat >"$fresh/Cargo.toml" <<EOF
[package]
name = "fresh-candle"
version = "0.1.0"
edition = "2021"

[dependencies]
candle-core = { version = "0.11", default-features = false }
$candle_line

[workspace]
EOF
cat >"$fresh/src/main.rs" <<'EOF'
use candle_core::{Device, Result, Tensor};

#[global_allocator]
static ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();

#[vramguard::inference]
fn forward(xs: &Tensor) -> Result<Tensor> {
    let xs = xs.exp()?;
    let xs = xs.gelu()?;
    xs.tanh()
}

fn main() -> Result<()> {
    let out = forward(&Tensor::ones((64, 64), candle_core::DType::F32, &Device::Cpu)?)?;
    println!("fresh-candle: {:?}, heap peak {} B", out.dims(), vramguard::heap::stats().peak_allocated_bytes);
    Ok(())
}
EOF
(cd "$fresh" && cargo run -q)
tree=$(cd "$fresh" && cargo tree -e normal --prefix none)
if grep -q '^cudarc ' <<<"$tree"; then
    fail "the README's candle line builds cudarc"
fi

say "the README's first command: cargo install cargo-vramguard (--debug)"
# `--debug`: the dev profile the package's verification built its dependencies with, instead of
# compiling them all again for release (minutes of CI); the package and its resolution are the
# same.
cargo install -q --debug cargo-vramguard
command -v cargo-vramguard >/dev/null || fail "cargo-vramguard is not on PATH after cargo install"

crate=$scratch/candle-model
cp -r cargo-vramguard/tests/fixtures/candle_model "$crate"
git_in() { git -C "$crate" -c user.name=package-check -c user.email=ci@example.invalid "$@"; }
git_in init -q
git_in add -A
git_in commit -qm "the fixture, before vramguard"

say "the README's second command (and --test): cargo vramguard apply --fns 'forward*' --track --test"
apply_out=$(cd "$crate" && cargo vramguard apply --fns 'forward*' --track --test)
echo "$apply_out"
grep -q '^  src/lib.rs:[0-9]*  Encoder::forward$' <<<"$apply_out" || fail "apply did not annotate Encoder::forward"
grep -q '^left untouched: 1 function' <<<"$apply_out" || fail "apply did not leave one function untouched"
grep -q '^  src/lib.rs:[0-9]*  Encoder::forward_and_backward$' <<<"$apply_out" \
    || fail "apply did not name Encoder::forward_and_backward"
grep -q '^cargo test: ok$' <<<"$apply_out" || fail "apply did not run the tests"
grep -q '^#\[vramguard::inference\]$' <(sed 's/^ *//' "$crate/src/lib.rs") || fail "no attribute in src/lib.rs"
grep -q 'vramguard::TrackingAllocator::system()' "$crate/src/main.rs" || fail "no TrackingAllocator line"
grep -q '^vramguard = { version = "0.1", default-features = false, features = \["candle"\] }$' \
    "$crate/Cargo.toml" || fail "no vramguard dependency with the candle feature in Cargo.toml"
above=$(grep -B1 'pub fn forward_and_backward' "$crate/src/lib.rs")
if grep -q vramguard <<<"$above"; then
    fail "forward_and_backward was annotated"
fi
git_in add -A
git_in commit -qm "cargo vramguard apply"

say "apply again: nothing changes"
again=$(cd "$crate" && cargo vramguard apply --fns 'forward*' --track)
grep -q '^nothing to change' <<<"$again" || fail "the second apply changed something: $again"
[[ -z $(git_in status --porcelain) ]] || fail "the second apply changed files: $(git_in status --porcelain)"

say "the README's third command: cargo vramguard measure --bin candle-model"
(cd "$crate" && cargo vramguard measure --bin candle-model)
(cd "$crate" && cargo vramguard measure --bin candle-model --json) >"$scratch/measure.json"
cat "$scratch/measure.json"

say "the same program measured by hand: its own heap peak, built as applied and without the attributes"
peak_of() { # peak_of DIR: builds and runs it, which prints its heap peak on stderr last
    local dir=$1
    sed -i 's/^    Ok(())$/    eprintln!("peak {}", vramguard::heap::stats().peak_allocated_bytes);\n    Ok(())/' \
        "$dir/src/main.rs"
    grep -q 'eprintln!("peak' "$dir/src/main.rs" || fail "cannot add the peak line to $dir/src/main.rs"
    # Newer sources make cargo build this copy's library and binary, not reuse another copy's.
    touch "$dir/src/lib.rs" "$dir/src/main.rs"
    (cd "$dir" && cargo run -q 2>&1 >/dev/null | sed -n 's/^peak //p' | tail -n 1)
}
by_hand=$scratch/by-hand
rm -rf "$by_hand"
mkdir -p "$by_hand"
cp -r "$crate" "$by_hand/annotated"
cp -r "$crate" "$by_hand/plain"
sed -i '/^ *#\[vramguard::inference/d' "$by_hand/plain/src/lib.rs"
! grep -q 'vramguard::inference' "$by_hand/plain/src/lib.rs" || fail "attributes left in the plain copy"
annotated_peak=$(peak_of "$by_hand/annotated")
plain_peak=$(peak_of "$by_hand/plain")
[[ -n $annotated_peak && -n $plain_peak ]] || fail "the copies did not print their peaks"
python3 "$root/scripts/package_check.py" compare "$scratch/measure.json" "$annotated_peak" "$plain_peak"
say "done"
