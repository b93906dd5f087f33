#!/usr/bin/env bash
# vramguard in the same build as candle's CUDA backend (issue #39): candle 0.11 asks cudarc for
# `dynamic-linking`, vramguard asks for `fallback-dynamic-loading` (cudarc's build script turns
# on `dynamic-loading` only when no other linking mode is asked for), so the two build
# together and cudarc's linking mode is candle's. Without a GPU or the CUDA toolkit:
#
# 1. writes a scratch crate in target/linking-check/crate that depends on this workspace's
#    `vramguard-memory` (path, feature `cuda`) and on cudarc with candle's features
#    (`std`, `driver`, `dynamic-linking`, `cuda-12080`);
# 2. check: `cargo check` of it (with the build's environment, below) (before the switch to `fallback-dynamic-loading`, cudarc's build
#    script panicked here: "Both `dynamic-loading` and `dynamic-linking` features are active");
# 3. build: `cargo build` of it. Under `dynamic-linking` cudarc's build script links every
#    library of the unified features (`driver`, `nvrtc`, `cublas` from vramguard), so the linker
#    needs, in the folder `CUDA_HOME`, `CUDA_PATH` and `LIBRARY_PATH` point at
#    (target/linking-check/lib, cudarc searches `$CUDA_HOME/lib64` among others):
#      libcuda.so     the fake driver (`cargo build -p vramguard-fake-cuda`, as fake-cuda.sh);
#      libcublas.so   the fake driver too (it implements the cuBLAS calls vramguard makes);
#      libnvrtc.so    NVIDIA's NVRTC from PyPI (scripts/nvrtc-from-pypi.sh: target/nvrtc,
#                     installed here when missing), the unversioned name the linker asks for;
#      libcublasLt.so an empty stub (gcc -shared): cudarc links cuBLASLt beside cuBLAS, whose
#                     own dependency it is, but nothing here calls it;
#    rustc links with --as-needed, so the binary records only libcuda.so (its `NEEDED` entries
#    are checked: the driver linked, not loaded); every driver function cudarc and vramguard
#    reference must be in the fake, or the link fails (undefined symbol);
# 4. run: runs the binary with LD_LIBRARY_PATH on that folder (FAKE_CUDA_MEMORY=1GiB): it
#    checks `library_present(CudaLibrary::Driver)` (true: the binary links the driver), opens
#    `Device::cuda(0)`, allocates 1000 bytes and a 1 Mi-element f32 `CudaBuffer` (copied in and
#    out through cudarc), and prints the allocator's statistics; the figures are asserted here:
#      library_present(Driver)=true allocated_bytes=4195328 reserved_bytes=6291456 after_free_allocated_bytes=0
#    (1000 bytes round to 1024 in a 2 MiB small segment; the 4 MiB buffer takes two 2 MiB
#    granules of an expandable segment, the default on the fake, which has virtual memory
#    management: 1024 + 4 MiB allocated, 6 MiB reserved, nothing allocated once both drop);
# 5. ends with one line: `linking check: check ok, build ok, run ok` (or `... FAILED`).
#
# Exit status 0 only when all three passed. Output: target/linking-check/ (check.txt,
# build.txt, run.txt: each step's output; target/: the scratch crate's own build, whose cudarc
# features differ from the workspace's).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
OUT="$root/target/linking-check"
CRATE="$OUT/crate"
LIB="$OUT/lib"
export CARGO_TARGET_DIR="$OUT/target"
mkdir -p "$CRATE/src" "$LIB"
unset VRAMGUARD_ALLOC_CONF

result() { # result CHECK BUILD RUN: the last line
    echo "linking check: check $1, build $2, run $3"
}
# put FILE: stdin into FILE, left untouched when equal (a rewrite would rebuild the crate).
put() {
    local new
    new=$(cat)
    [[ -f "$1" && "$(cat "$1")" == "$new" ]] || printf '%s\n' "$new" > "$1"
}

# ----- the scratch crate -----
put "$CRATE/Cargo.toml" <<TOML
[package]
name = "vramguard-linking-check"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
vramguard-alloc = { path = "$root/alloc", features = ["cuda"] }
vramguard-memory = { path = "$root/memory", features = ["cuda"] }
# What candle-core 0.11's \`cuda\` feature asks cudarc for.
cudarc = { version = "0.19.10", default-features = false, features = ["std", "driver", "dynamic-linking", "cuda-12080"] }

[profile.dev]
debug = false

[workspace]
TOML
# The workspace's versions (cargo drops what the scratch crate does not use).
[[ -f "$CRATE/Cargo.lock" ]] || cp Cargo.lock "$CRATE/Cargo.lock"
put "$CRATE/src/main.rs" <<'RUST'
//! vramguard's CUDA backend in a binary that links the CUDA libraries (cudarc `dynamic-linking`).
use vramguard_alloc::driver::{library_present, CudaLibrary};
use vramguard_memory::device::CudaBuffer;
use vramguard_memory::{memory, Device};

fn main() {
    let driver = library_present(CudaLibrary::Driver);
    let device = Device::cuda(0).expect("cuda:0");
    let small = device.allocate(1000).expect("1000 bytes");
    let values: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
    let mut buffer = CudaBuffer::<f32>::new(&device, values.len()).expect("4 MiB buffer");
    let stream = device.cuda_context().expect("a CUDA device").default_stream();
    stream.memcpy_htod(&values, &mut buffer).expect("copy in");
    let back: Vec<f32> = stream.clone_dtoh(&buffer).expect("copy out");
    assert_eq!(back, values, "the buffer holds what was copied in");
    let held = memory::stats(&device);
    drop((small, buffer));
    let after = memory::stats(&device);
    println!(
        "library_present(Driver)={driver} allocated_bytes={} reserved_bytes={} \
         after_free_allocated_bytes={}",
        held.allocated_bytes, held.reserved_bytes, after.allocated_bytes
    );
}
RUST

# ----- the libraries the link step demands -----
NVRTC_LIB=$("$root/scripts/nvrtc-from-pypi.sh")
echo "== the fake driver (cargo build -p vramguard-fake-cuda) and the link folder $LIB"
# The workspace's own target dir, as fake-cuda.sh and observer-check.sh use it.
fake=$(env -u CARGO_TARGET_DIR cargo build -q -p vramguard-fake-cuda --message-format=json \
    | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line) if line.startswith("{") else {}
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "vramguard_fake_cuda":
        print(*[f for f in m["filenames"] if f.endswith(".so")])
')
[[ -n "$fake" ]] || { echo "cargo built no libvramguard_fake_cuda.so"; result skipped skipped skipped; exit 1; }
ln -sf "$fake" "$LIB/libcuda.so"
ln -sf "$fake" "$LIB/libcublas.so"
ln -sf "$NVRTC_LIB/libnvrtc.so.12" "$LIB/libnvrtc.so"
echo '/* cuBLASLt: linked by cudarc beside cuBLAS, never called here. */' > "$OUT/cublasLt_stub.c"
gcc -shared -fPIC -o "$LIB/libcublasLt.so" "$OUT/cublasLt_stub.c"

# cudarc's build script reruns when these change: the check and the build see the same.
scratch_env=(env CUDA_HOME="$LIB" CUDA_PATH="$LIB" LIBRARY_PATH="$LIB${LIBRARY_PATH:+:$LIBRARY_PATH}")

# ----- check -----
echo "== cargo check (vramguard's CUDA backend beside cudarc's dynamic-linking)"
if ! "${scratch_env[@]}" cargo check --manifest-path "$CRATE/Cargo.toml" > "$OUT/check.txt" 2>&1; then
    grep -E -A1 "panicked|^error" "$OUT/check.txt" | grep -v -E "^--$|^note" | head -n 12 \
        | sed 's/^/    /'
    echo "    (all of it: $OUT/check.txt)"
    result FAILED skipped skipped
    exit 1
fi

# ----- build -----
echo "== cargo build (CUDA_HOME=CUDA_PATH=$LIB, LIBRARY_PATH=$LIB)"
if ! "${scratch_env[@]}" cargo build --manifest-path "$CRATE/Cargo.toml" > "$OUT/build.txt" 2>&1; then
    grep -E "panicked|error|undefined" "$OUT/build.txt" | head -n 12 | sed 's/^/    /'
    echo "    (all of it: $OUT/build.txt)"
    result ok FAILED skipped
    exit 1
fi
binary="$CARGO_TARGET_DIR/debug/vramguard-linking-check"
# Linked, not loaded: the binary names the driver among the libraries it needs.
needed=$(readelf -d "$binary" | sed -n -E 's/.*\(NEEDED\).*\[(.*)\]/\1/p' | tr '\n' ' ')
echo "   the binary needs: $needed"
if [[ " $needed " != *" libcuda.so "* ]]; then
    echo "   libcuda.so is not among them: cudarc did not link the driver"
    result ok FAILED skipped
    exit 1
fi

# ----- run -----
echo "== run on the fake driver (LD_LIBRARY_PATH=$LIB:NVRTC, FAKE_CUDA_MEMORY=1GiB)"
if ! env LD_LIBRARY_PATH="$LIB:$NVRTC_LIB" FAKE_CUDA_MEMORY=1GiB "$binary" > "$OUT/run.txt" 2>&1; then
    sed 's/^/    /' "$OUT/run.txt" | tail -n 12
    result ok ok FAILED
    exit 1
fi
sed 's/^/   /' "$OUT/run.txt"
expected="library_present(Driver)=true allocated_bytes=4195328 reserved_bytes=6291456 after_free_allocated_bytes=0"
if ! grep -q -x -F "$expected" "$OUT/run.txt"; then
    echo "   expected: $expected"
    result ok ok FAILED
    exit 1
fi
result ok ok ok
