// Mean cross-entropy from log-probabilities, and its gradient. `ids` holds one target class per
// row (checked before launch); `p.inner` rows of `p.len` classes, contiguous.

// out[0] = -sum_r logp[r, ids[r]] / rows, added in row order by one thread.
extern "C" __global__ void vg_cross_entropy(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        float sum = 0.0f;
        for (vg_u64 r = 0; r < p.inner; ++r) {
            sum += p.a[r * p.len + p.ids[r]];
        }
        p.out[i] = -sum / (float)(p.inner > 0 ? p.inner : 1);
    }
}

// out = (probs - onehot) * g / rows; a = probs, b = g (one element), s0 = rows.
extern "C" __global__ void vg_cross_entropy_backward(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        float scale = p.b[0] / p.s0;
        vg_u64 r = i / p.len, col = i % p.len;
        float v = p.a[i] * scale;
        if (col == p.ids[r]) {
            v -= scale;
        }
        p.out[i] = v;
    }
}
