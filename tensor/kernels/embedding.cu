// Embedding lookup and its gradient. `ids` holds `p.n / p.len` row indices (checked against the
// vocabulary before launch).

// out[r, j] = table[ids[r], j]; a = table with strides a_strides[0..2] from a_offset,
// len = dim, n = rows * dim.
extern "C" __global__ void vg_embedding(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        vg_u64 r = i / p.len, j = i % p.len;
        p.out[i] = p.a[p.a_offset + (vg_u64)p.ids[r] * p.a_strides[0] + j * p.a_strides[1]];
    }
}

// out[ids[r], j] += g[r, j] over the `p.inner` rows, one thread per column j (no two threads
// write one element, and rows are added in order, as on the host); out is zeroed first.
extern "C" __global__ void vg_embedding_backward(VgArgs p) {
    VG_FOR_EACH(j, p.len) {
        for (vg_u64 r = 0; r < p.inner; ++r) {
            p.out[(vg_u64)p.ids[r] * p.len + j] += p.a[r * p.len + j];
        }
    }
}
