// Kernels for the fake driver's own tests (tests/rules.rs), compiled into a shared library by
// build.rs: the host builds the fake runs for the PTX entries of the same names. The built-in
// indices as tensor/kernels/host_shim.h keeps them.

#include <stdint.h>

static unsigned int grid_dim, block_dim, block_idx, thread_idx;

void vg_host_set_index(unsigned int grid, unsigned int block, unsigned int b, unsigned int t) {
    grid_dim = grid;
    block_dim = block;
    block_idx = b;
    thread_idx = t;
}

// fill(p, n, value): word i of p becomes value + i, for every i below n.
void fill(uint32_t *p, uint32_t n, uint32_t value) {
    uint32_t i = block_idx * block_dim + thread_idx;
    if (i < n) {
        p[i] = value + i;
    }
}

// add_signed(p, delta): p[0] += delta (delta a signed 16-bit parameter, sign-extended).
void add_signed(int64_t *p, int16_t delta) {
    if (block_idx == 0 && thread_idx == 0) {
        *p += delta;
    }
}

// A by-value struct larger than two eightbytes: passed in memory.
struct scaled_copy_args {
    const float *src;
    float *dst;
    uint64_t n;
    float scale;
    float pad[5];
};

// scaled_copy(args): dst[i] = src[i] * scale.
void scaled_copy(struct scaled_copy_args a) {
    uint64_t i = (uint64_t)block_idx * block_dim + thread_idx;
    if (i < a.n) {
        a.dst[i] = a.src[i] * a.scale;
    }
}
