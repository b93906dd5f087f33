#!/usr/bin/env bash
# The facade's public API, checked on rustdoc's JSON: every type in the signature of an item
# public through `vramguard` can be named through `vramguard`, and no public type is of no use
# (no public field, method or trait, in no signature). Rustdoc's JSON output is unstable, so it
# runs with RUSTC_BOOTSTRAP=1, in a target directory of its own: a build script that probes for
# nightly features (thiserror's) must not see that setting in the main target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
target=target/rustdoc-json
# The runtime's crates with their `cuda` feature, as the facade's default features build them.
for crate in vramguard-alloc vramguard-memory vramguard-tensor vramguard; do
    features=()
    [[ "$crate" == vramguard ]] || features=(--features cuda)
    RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$target cargo rustdoc -q -p "$crate" "${features[@]}" --lib \
        -- -Z unstable-options --output-format json
done
python3 scripts/facade_check.py "$target/doc/vramguard_alloc.json" \
    "$target/doc/vramguard_memory.json" "$target/doc/vramguard_tensor.json" \
    "$target/doc/vramguard.json"
