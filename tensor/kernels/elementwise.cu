// Element-wise kernels over strided operands (broadcast dims have stride 0). In-place forms pass
// the target as both `out` and `a` with the same strides: each element is read and written by
// the thread that owns it.

// Codes of `vg_map`'s `op`; `MapOp::code` in backend/mod.rs uses the same numbers.
#define VG_MAP_COPY 0
#define VG_MAP_ADD 1
#define VG_MAP_SUB 2
#define VG_MAP_MUL 3
#define VG_MAP_DIV 4
#define VG_MAP_AFFINE 5
#define VG_MAP_RELU 6
#define VG_MAP_GELU 7
#define VG_MAP_TANH 8
#define VG_MAP_SIGMOID 9
#define VG_MAP_EXP 10
#define VG_MAP_LOG 11
#define VG_MAP_FILL 12
#define VG_MAP_NEG 13

// Codes of `vg_zip`'s `op`; `ZipOp::code` uses the same numbers.
#define VG_ZIP_ADD 0
#define VG_ZIP_SUB 1
#define VG_ZIP_MUL 2
#define VG_ZIP_DIV 3
#define VG_ZIP_SECOND 4
#define VG_ZIP_RELU_BACKWARD 5
#define VG_ZIP_GELU_BACKWARD 6
#define VG_ZIP_TANH_BACKWARD 7
#define VG_ZIP_SIGMOID_BACKWARD 8

#define VG_GELU_C 0.7978846f

__device__ __forceinline__ float vg_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(VG_GELU_C * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float vg_gelu_derivative(float x) {
    float u = VG_GELU_C * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * VG_GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
}

__device__ __forceinline__ float vg_sigmoid(float x) {
    if (x >= 0.0f) {
        return 1.0f / (1.0f + expf(-x));
    }
    float e = expf(x);
    return e / (1.0f + e);
}

__device__ __forceinline__ float vg_map_one(int op, float x, float s0, float s1) {
    switch (op) {
    case VG_MAP_COPY: return x;
    case VG_MAP_ADD: return x + s0;
    case VG_MAP_SUB: return x - s0;
    case VG_MAP_MUL: return x * s0;
    case VG_MAP_DIV: return x / s0;
    case VG_MAP_AFFINE: return x * s0 + s1;
    case VG_MAP_RELU: return x > 0.0f ? x : 0.0f;
    case VG_MAP_GELU: return vg_gelu(x);
    case VG_MAP_TANH: return tanhf(x);
    case VG_MAP_SIGMOID: return vg_sigmoid(x);
    case VG_MAP_EXP: return expf(x);
    case VG_MAP_LOG: return logf(x);
    case VG_MAP_NEG: return -x;
    default: return s0; // VG_MAP_FILL
    }
}

__device__ __forceinline__ float vg_zip_one(int op, float a, float b) {
    switch (op) {
    case VG_ZIP_ADD: return a + b;
    case VG_ZIP_SUB: return a - b;
    case VG_ZIP_MUL: return a * b;
    case VG_ZIP_DIV: return a / b;
    case VG_ZIP_SECOND: return b;
    case VG_ZIP_RELU_BACKWARD: return b > 0.0f ? a : 0.0f;
    case VG_ZIP_GELU_BACKWARD: return a * vg_gelu_derivative(b);
    case VG_ZIP_TANH_BACKWARD: return a * (1.0f - b * b);
    default: return a * b * (1.0f - b); // VG_ZIP_SIGMOID_BACKWARD
    }
}

// out[i] = f(a[i]) for the `p.n` elements of `p.shape`; `a` is not read by VG_MAP_FILL.
extern "C" __global__ void vg_map(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        vg_u64 o, ia, ib;
        vg_offsets(p, i, &o, &ia, &ib);
        float x = p.op == VG_MAP_FILL ? 0.0f : p.a[ia];
        p.out[o] = vg_map_one(p.op, x, p.s0, p.s1);
    }
}

// out[i] = f(a[i], b[i]) for the `p.n` elements of `p.shape`.
extern "C" __global__ void vg_zip(VgArgs p) {
    VG_FOR_EACH(i, p.n) {
        vg_u64 o, ia, ib;
        vg_offsets(p, i, &o, &ia, &ib);
        p.out[o] = vg_zip_one(p.op, p.a[ia], p.b[ib]);
    }
}
