#!/usr/bin/env bash
# Checks the CUDA kernel sources (tensor/kernels/*.cu) without a GPU:
#
# 1. NVRTC compiles every source to PTX. NVRTC comes from NVIDIA's PyPI wheel matching the
#    pinned CUDA 12.8 (scripts/nvrtc-from-pypi.sh installs it into target/nvrtc when missing);
#    no GPU and no CUDA toolkit are needed. Ends with `kernels compiled to PTX: K/N`.
# 2. The same sources, compiled for the host by g++ with tensor/kernels/host_shim.h, run under
#    the CUDA backend's own launch code on small host tensors and are compared with the host
#    backend (`kernels checked on the host: K/N`), and a small transformer is trained through
#    the CUDA backend on host memory against the host backend.
#
# It also writes target/kernels-ptx/vramguard_kernels.ptx, the whole module: a GPU machine
# without NVRTC loads it with VRAMGUARD_KERNELS_PTX=<that file> (scripts/gpu-check.sh).
#
# Exits non-zero when either count is short. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

NVRTC_LIB=$(scripts/nvrtc-from-pypi.sh)

echo "== compiling the kernel sources for the host (g++ with host_shim.h)"
HOST_DIR="target/kernels-host"
mkdir -p "$HOST_DIR"
cat tensor/kernels/common.cuh tensor/kernels/*.cu > "$HOST_DIR/kernels.cpp"
g++ -std=c++17 -O1 -fPIC -shared -ffp-contract=off -Wall -Werror \
    -include tensor/kernels/host_shim.h -x c++ "$HOST_DIR/kernels.cpp" \
    -o "$HOST_DIR/libvg_kernels_host.so"

echo "== cargo test: the backend checks (NVRTC to PTX, kernels on the host)"
LOG="$HOST_DIR/checks.log"
set +e
mkdir -p target/kernels-ptx
LD_LIBRARY_PATH="$NVRTC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
VRAMGUARD_PTX_OUT="$PWD/target/kernels-ptx/vramguard_kernels.ptx" \
VRAMGUARD_HOST_KERNELS="$PWD/$HOST_DIR/libvg_kernels_host.so" \
    cargo test -p vramguard-tensor --features cuda --lib tensor::backend::checks -- --nocapture --test-threads=1 \
    2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e

# --nocapture interleaves the harness's `test NAME ... ` with what the tests print.
ptx_line=$(grep -oE 'kernels compiled to PTX: [0-9]+/[0-9]+' "$LOG" | tail -1 || true)
host_line=$(grep -oE 'kernels checked on the host: [0-9]+/[0-9]+' "$LOG" | tail -1 || true)
fail=0
if [[ -z "$host_line" ]]; then
    echo "kernels-check: the host run printed no count" >&2
    fail=1
else
    echo "$host_line"
    read -r k n < <(sed -E 's/^kernels checked on the host: ([0-9]+)\/([0-9]+)$/\1 \2/' <<<"$host_line")
    [[ "$k" == "$n" ]] || fail=1
fi
if [[ "$status" -ne 0 ]]; then
    echo "kernels-check: cargo test failed (exit $status)" >&2
    fail=1
fi
if [[ -z "$ptx_line" ]]; then
    echo "kernels-check: NVRTC printed no count" >&2
    echo "kernels compiled to PTX: 0/$(ls tensor/kernels/*.cu | wc -l)"
    exit 1
fi
# The PTX count is the last line, as promised.
echo "$ptx_line"
read -r k n < <(sed -E 's/^kernels compiled to PTX: ([0-9]+)\/([0-9]+)$/\1 \2/' <<<"$ptx_line")
if [[ "$k" != "$n" || "$fail" -ne 0 ]]; then
    exit 1
fi
