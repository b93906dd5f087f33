#!/usr/bin/env bash
# A CPU libtorch for the `tch` feature, assembled from PyPI packages (for machines that reach
# PyPI but not PyTorch's own download site).
#
#   eval "$(scripts/libtorch-from-pypi.sh [DIR])"    # DIR defaults to target/libtorch-cpu
#   cargo test --features tch --test drop_at_last_use -- table::
#
# tch 0.26 wants libtorch 2.13.0. PyPI's torch wheel for Linux is the CUDA build; its CPU half
# (libtorch_cpu.so, libc10.so, libgomp) needs only two small CUDA libraries to load
# (libcudart and libcupti, both from PyPI), never a GPU. libtorch.so would pull in
# libtorch_cuda.so and with it cuBLAS and cuDNN (gigabytes), so an empty stub stands in for it:
# tch links it but calls nothing in it. About 540 MB to download, 1 GB unpacked.
# Prints the `export` lines to evaluate; everything else goes to stderr.
set -euo pipefail

TORCH_VERSION=2.13.0
CUDART_VERSION='13.0.96.*'
CUPTI_VERSION='13.0.85.*'

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/target/libtorch-cpu}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
wheels=$dir/wheels

if [[ ! -f $dir/lib/libtorch_cpu.so ]]; then
    python_tag=$(python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
    echo "downloading torch $TORCH_VERSION (cp$python_tag), libcudart and libcupti from PyPI ..." >&2
    python3 -m pip download --quiet --no-deps --progress-bar off -d "$wheels" \
        "torch==$TORCH_VERSION" "nvidia-cuda-runtime==$CUDART_VERSION" \
        "nvidia-cuda-cupti==$CUPTI_VERSION" >&2
    echo "unpacking ..." >&2
    unpacked=$dir/unpacked
    mkdir -p "$unpacked" "$dir/lib"
    python3 - "$wheels" "$unpacked" <<'EOF'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
keep = ("torch/include/", "torch/lib/libtorch_cpu.so", "torch/lib/libc10.so",
        "torch/lib/libgomp", "nvidia/cu13/lib/libcudart.so", "nvidia/cu13/lib/libcupti.so")
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(keep):
                z.extract(name, out)
EOF
    rm -rf "$dir/include"
    mv "$unpacked/torch/include" "$dir/include"
    mv "$unpacked"/torch/lib/* "$unpacked"/nvidia/cu13/lib/* "$dir/lib/"
    rm -rf "$unpacked"
    # The empty stand-in for libtorch.so (see above).
    echo 'void vramguard_libtorch_stub(void) {}' >"$dir/stub.c"
    cc -shared -fPIC -o "$dir/lib/libtorch.so" "$dir/stub.c"
    rm "$dir/stub.c"
    echo "$TORCH_VERSION" >"$dir/build-version"
    echo "libtorch (CPU) ready in $dir; the wheels stay in $wheels and can be deleted" >&2
fi

echo "export LIBTORCH='$dir'"
echo "export LD_LIBRARY_PATH='$dir/lib'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
