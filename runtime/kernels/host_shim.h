// Lets the kernel sources compile as plain C++ (scripts/kernels-check.sh: g++ -include this),
// so their indexing runs on the host. A launch is a serial loop over blocks and threads that
// sets the built-in indices before each call (vg_host_set_index, exported for the test).
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

