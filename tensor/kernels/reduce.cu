// Row reductions over contiguous data: rows of `p.len` values, each cut into chunks of
// `p.inner` values (the whole row when inner == len); one thread sums one chunk left to right.
// `p.n` = rows · chunks items; item i writes out[i]. A long row is summed in two launches: its
// chunks' partial sums first, then those (so a full reduction of a large tensor is not one
// thread's work). op bit 1: square each value first; bit 2: divide the sum by s0 (else
// multiply by s0 unless it is 1).

extern "C" __global__ void vg_sum_rows(VgArgs p) {
    vg_u64 chunk = p.inner == 0 ? 1 : p.inner;
    vg_u64 chunks = p.len == 0 ? 1 : (p.len + chunk - 1) / chunk;
    VG_FOR_EACH(i, p.n) {
        vg_u64 r = i / chunks, c = i % chunks;
        vg_u64 start = c * chunk;
        vg_u64 end = start + chunk < p.len ? start + chunk : p.len;
        const float* row = p.a + r * p.len;
        float sum = 0.0f;
        for (vg_u64 j = start; j < end; ++j) {
            sum += (p.op & 1) ? row[j] * row[j] : row[j];
        }
        if (p.op & 2) {
            sum /= p.s0;
        } else if (p.s0 != 1.0f) {
            sum *= p.s0;
        }
        p.out[i] = sum;
    }
}
