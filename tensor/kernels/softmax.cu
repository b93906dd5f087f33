// Softmax and log-softmax of contiguous data along one dimension: `p.n` lanes, each of `p.len`
// values `p.inner` apart (lane l starts at (l / inner) * len * inner + l % inner). `p.op` 1
// gives log-softmax. Same arithmetic as the host backend: max, exp and sum, then scale.

extern "C" __global__ void vg_softmax(VgArgs p) {
    VG_FOR_EACH(lane, p.n) {
        vg_u64 base = (lane / p.inner) * p.len * p.inner + lane % p.inner;
        const float* x = p.a + base;
        float* y = p.out + base;
        float max = x[0];
        for (vg_u64 i = 1; i < p.len; ++i) {
            float v = x[i * p.inner];
            max = v > max ? v : max;
        }
        float sum = 0.0f;
        for (vg_u64 i = 0; i < p.len; ++i) {
            float e = expf(x[i * p.inner] - max);
            y[i * p.inner] = e;
            sum += e;
        }
        if (p.op == 1) {
            float lse = logf(sum);
            for (vg_u64 i = 0; i < p.len; ++i) {
                y[i * p.inner] = x[i * p.inner] - max - lse;
            }
        } else {
            float inv = 1.0f / sum;
            for (vg_u64 i = 0; i < p.len; ++i) {
                y[i * p.inner] *= inv;
            }
        }
    }
}
