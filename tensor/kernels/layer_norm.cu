// Layer normalisation over the last dimension of contiguous data: `p.n` rows of `p.len`.

// Forward: a = x, b = weight or null, c = bias or null, s0 = eps; out = y, out2/out3 = per-row
// mean and 1/std (null when not recorded).
extern "C" __global__ void vg_layer_norm(VgArgs p) {
    VG_FOR_EACH(r, p.n) {
        const float* row = p.a + r * p.len;
        float* y = p.out + r * p.len;
        float d = (float)p.len;
        float sum = 0.0f;
        for (vg_u64 j = 0; j < p.len; ++j) {
            sum += row[j];
        }
        float mean = sum / d;
        float var = 0.0f;
        for (vg_u64 j = 0; j < p.len; ++j) {
            var += (row[j] - mean) * (row[j] - mean);
        }
        var /= d;
        float rstd = 1.0f / sqrtf(var + p.s0);
        for (vg_u64 j = 0; j < p.len; ++j) {
            float v = (row[j] - mean) * rstd;
            if (p.b) {
                v *= p.b[j];
            }
            if (p.c) {
                v += p.c[j];
            }
            y[j] = v;
        }
        if (p.out2) {
            p.out2[r] = mean;
            p.out3[r] = rstd;
        }
    }
}

// Input gradient: a = g, b = x, c = mean, d = rstd, e = weight or null; out = dx.
extern "C" __global__ void vg_layer_norm_backward_input(VgArgs p) {
    VG_FOR_EACH(r, p.n) {
        const float* g = p.a + r * p.len;
        const float* x = p.b + r * p.len;
        float m = p.c[r], rs = p.d[r];
        float sum_gy = 0.0f, sum_gy_xhat = 0.0f;
        for (vg_u64 j = 0; j < p.len; ++j) {
            float xhat = (x[j] - m) * rs;
            float gy = g[j] * (p.e ? p.e[j] : 1.0f);
            sum_gy += gy;
            sum_gy_xhat += gy * xhat;
        }
        float mg = sum_gy / (float)p.len, mgx = sum_gy_xhat / (float)p.len;
        for (vg_u64 j = 0; j < p.len; ++j) {
            float xhat = (x[j] - m) * rs;
            float gy = g[j] * (p.e ? p.e[j] : 1.0f);
            p.out[r * p.len + j] = rs * (gy - mg - xhat * mgx);
        }
    }
}

// Weight and bias gradients, one thread per column j over the `p.inner` rows: a = g, b = x,
// c = mean, d = rstd; out = dweight or null, out2 = dbias or null.
extern "C" __global__ void vg_layer_norm_backward_params(VgArgs p) {
    VG_FOR_EACH(j, p.len) {
        float gw = 0.0f, gb = 0.0f;
        for (vg_u64 r = 0; r < p.inner; ++r) {
            float g = p.a[r * p.len + j];
            float xhat = (p.b[r * p.len + j] - p.c[r]) * p.d[r];
            gw += g * xhat;
            gb += g;
        }
        if (p.out) {
            p.out[j] = gw;
        }
        if (p.out2) {
            p.out2[j] = gb;
        }
    }
}
