// The CUDA tests' own kernels (tensor/tests/cuda/gpu.rs), as source: the PTX in gpu.rs is
// what a GPU runs (the driver compiles it); this file, compiled for the host with
// tensor/kernels/host_shim.h (scripts/fake-cuda.sh), is what the fake driver runs for them.
// Names and parameters must match the PTX's `.entry` signatures.

// slow_fill(buf, n, value, spins): each thread waits `spins` clock cycles, then writes `value`
// to its word of `buf` (if below `n`).
extern "C" __global__ void slow_fill(unsigned int* buf, unsigned int n, unsigned int value,
                                     unsigned long long spins) {
    long long start = clock64();
    while ((unsigned long long)(clock64() - start) < spins) {
    }
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        buf[i] = value;
    }
}

// fault(p): writes through `p` (an invalid address faults).
extern "C" __global__ void fault(unsigned int* p) {
    *p = 1;
}
