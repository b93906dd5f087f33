// Lets the kernel sources compile as plain C++ (scripts/kernels-check.sh: g++ -include this),
// so their indexing runs on the host. A launch is a serial loop over blocks and threads that
// sets the built-in indices before each call (vg_host_set_index, exported for the test and for
// the fake CUDA driver, which runs these host builds for cuLaunchKernel).
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline

struct vg_dim3 {
    unsigned int x, y, z;
};

static vg_dim3 blockIdx, threadIdx, blockDim, gridDim;

extern "C" void vg_host_set_index(unsigned int grid, unsigned int block, unsigned int block_idx,
                                  unsigned int thread_idx) {
    gridDim = {grid, 1, 1};
    blockDim = {block, 1, 1};
    blockIdx = {block_idx, 0, 0};
    threadIdx = {thread_idx, 0, 0};
}


// A virtual clock: each read advances it by 2^40 cycles, so a spin loop on clock64() (the tests'
// slow_fill) ends after one turn. The fake driver models slow work by running it late (when
// something waits for it), not by taking time.
static long long vg_host_clock;

static inline long long clock64() {
    vg_host_clock += 1LL << 40;
    return vg_host_clock;
}
