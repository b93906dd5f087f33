// One Adam update, fused: parameter, gradient and both moments in one pass, the host's
// arithmetic. out = parameter, out2 = first moment, out3 = second moment (all contiguous,
// `p.n` values), a = gradient; s0 = lr, s1 = beta1, s2 = beta2, s3 = eps, s4 = 1 - beta1^t,
// s5 = 1 - beta2^t.

extern "C" __global__ void vg_adam(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        float g = p.a[i];
        float m = p.s1 * p.out2[i] + (1.0f - p.s1) * g;
        float v = p.s2 * p.out3[i] + (1.0f - p.s2) * g * g;
        p.out2[i] = m;
        p.out3[i] = v;
        p.out[i] -= p.s0 * (m / p.s4) / (sqrtf(v / p.s5) + p.s3);
    }
}
