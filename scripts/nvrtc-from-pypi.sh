#!/usr/bin/env bash
# NVRTC for the CUDA kernels without a CUDA toolkit: NVIDIA's PyPI wheel matching the pinned
# CUDA 12.8 (nvidia-cuda-nvrtc-cu12), installed into target/nvrtc/pkg when missing.
#
#   NVRTC_LIB=$(scripts/nvrtc-from-pypi.sh)    # the folder holding libnvrtc.so.12
#
# Prints the folder on standard output; what it does goes to standard error. Exits non-zero when
# the install fails or the wheel lacks the library. Used by kernels-check.sh, fake-cuda.sh and
# linking-check.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

NVRTC_VERSION="12.8.93"
NVRTC_DIR="$root/target/nvrtc/pkg"
NVRTC_LIB="$NVRTC_DIR/nvidia/cuda_nvrtc/lib"
if [[ ! -e "$NVRTC_LIB/libnvrtc.so.12" ]]; then
    echo "== installing NVRTC $NVRTC_VERSION (PyPI wheel nvidia-cuda-nvrtc-cu12) into $NVRTC_DIR" >&2
    rm -rf "$NVRTC_DIR"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$NVRTC_DIR" "nvidia-cuda-nvrtc-cu12==$NVRTC_VERSION" >&2
fi
if [[ ! -e "$NVRTC_LIB/libnvrtc.so.12" ]]; then
    echo "nvrtc-from-pypi: the wheel did not provide $NVRTC_LIB/libnvrtc.so.12" >&2
    exit 1
fi
echo "$NVRTC_LIB"
