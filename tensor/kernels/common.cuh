// Shared by every kernel source: the one argument block all kernels take, and index helpers.
// Prepended to each .cu file (by the runtime before NVRTC, by scripts/kernels-check.sh before
// g++), so the sources stay free of #include (NVRTC has no standard headers).
//
// Every kernel is `extern "C" __global__ void vg_NAME(VgArgs p)` and walks its work items with a
// grid-stride loop, so any launch shape covers them all and the host shim can run it with one
// thread or several. No kernel uses shared memory or __syncthreads(): each work item is
// independent, which is what lets the same source run serially on the host.

typedef unsigned long long vg_u64;

#define VG_MAX_RANK 8

// Mirrors `VgArgs` in tensor/src/tensor/backend/cuda.rs field for field (#[repr(C)]).
struct VgArgs {
    float* out;
    float* out2;
    float* out3;
    const float* a;
    const float* b;
    const float* c;
    const float* d;
    const float* e;
    const unsigned int* ids;
    vg_u64 n;
    vg_u64 rank;
    vg_u64 shape[VG_MAX_RANK];
    vg_u64 out_strides[VG_MAX_RANK];
    vg_u64 a_strides[VG_MAX_RANK];
    vg_u64 b_strides[VG_MAX_RANK];
    vg_u64 out_offset;
    vg_u64 a_offset;
    vg_u64 b_offset;
    vg_u64 len;
    vg_u64 inner;
    int op;
    float s0;
    float s1;
    float s2;
    float s3;
    float s4;
    float s5;
};

#define VG_FOR_EACH(i, n)                                                              \
    for (vg_u64 i = (vg_u64)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (vg_u64)gridDim.x * blockDim.x)

// Element offsets of linear (row-major) index `i` of `p.shape` into out, a and b.
__device__ __forceinline__ void vg_offsets(const VgArgs& p, vg_u64 i, vg_u64* o, vg_u64* ia,
                                           vg_u64* ib) {
    vg_u64 oo = p.out_offset, aa = p.a_offset, bb = p.b_offset;
    for (int dim = (int)p.rank - 1; dim >= 0; --dim) {
        vg_u64 size = p.shape[dim];
        vg_u64 idx = i % size;
        i /= size;
        oo += idx * p.out_strides[dim];
        aa += idx * p.a_strides[dim];
        bb += idx * p.b_strides[dim];
    }
    *o = oo;
    *ia = aa;
    *ib = bb;
}
