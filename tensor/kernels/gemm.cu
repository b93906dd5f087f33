// Column-major strided-batched SGEMM with cuBLAS's semantics (C_i = op(A_i) · op(B_i)), used
// when cuBLAS cannot be loaded (and by the host check of the GEMM descriptor). One thread per
// element of C, summing k products in order: correct everywhere, not fast.
//
// shape = {m, n, k}; a_strides = {lda, stride_a}; b_strides = {ldb, stride_b};
// out_strides = {ldc, stride_c}; op bit 1: transpose A, bit 2: transpose B; n = m · n · batches.

extern "C" __global__ void vg_gemm(VgArgs p) {
    vg_u64 rows = p.shape[0], cols = p.shape[1], depth = p.shape[2];
    vg_u64 lda = p.a_strides[0], ldb = p.b_strides[0], ldc = p.out_strides[0];
    VG_FOR_EACH(idx, p.n) {
        vg_u64 i = idx % rows, j = (idx / rows) % cols, batch = idx / (rows * cols);
        const float* a = p.a + batch * p.a_strides[1];
        const float* b = p.b + batch * p.b_strides[1];
        float sum = 0.0f;
        for (vg_u64 l = 0; l < depth; ++l) {
            float x = (p.op & 1) ? a[l + i * lda] : a[i + l * lda];
            float y = (p.op & 2) ? b[j + l * ldb] : b[l + j * ldb];
            sum += x * y;
        }
        p.out[batch * p.out_strides[1] + i + j * ldc] = sum;
    }
}
