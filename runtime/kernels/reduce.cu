// Row reductions over contiguous data: `p.n` rows of `p.len` values each. One thread sums one
// row from left to right, the order the host backend adds in.

// out[r] = s0 * sum(a[r * len .. (r + 1) * len]).
extern "C" __global__ void vg_sum_rows(VgArgs p) {
    VG_FOR_EACH(r, p.n) {
        const float* row = p.a + r * p.len;
        float sum = 0.0f;
        for (vg_u64 j = 0; j < p.len; ++j) {
            sum += row[j];
        }
        p.out[r] = p.s0 == 1.0f ? sum : sum * p.s0;
    }
}

// out[r] = sum(a[..]²) / s0 over each row (the mean squared error of a difference).
extern "C" __global__ void vg_mean_square_rows(VgArgs p) {
    VG_FOR_EACH(r, p.n) {
        const float* row = p.a + r * p.len;
        float sum = 0.0f;
        for (vg_u64 j = 0; j < p.len; ++j) {
            sum += row[j] * row[j];
        }
        p.out[r] = sum / p.s0;
    }
}
