//! The kernels: their sources (`tensor/kernels/*.cu`, `common.cuh` prepended to each), the
//! kernel list, and the argument blocks a launch passes (`VgArgs`, `Gemm`), laid out as the
//! sources declare them.

use cudarc::driver::DeviceRepr;

/// The kernel sources, in the order they are compiled; `common.cuh` is prepended to each.
pub(crate) const KERNEL_SOURCES: [(&str, &str); 8] = [
    (
        "elementwise.cu",
        include_str!("../../../../kernels/elementwise.cu"),
    ),
    ("reduce.cu", include_str!("../../../../kernels/reduce.cu")),
    ("softmax.cu", include_str!("../../../../kernels/softmax.cu")),
    (
        "layer_norm.cu",
        include_str!("../../../../kernels/layer_norm.cu"),
    ),
    (
        "embedding.cu",
        include_str!("../../../../kernels/embedding.cu"),
    ),
    (
        "cross_entropy.cu",
        include_str!("../../../../kernels/cross_entropy.cu"),
    ),
    ("gemm.cu", include_str!("../../../../kernels/gemm.cu")),
    ("adam.cu", include_str!("../../../../kernels/adam.cu")),
];

/// What every kernel source starts with: the argument block and index helpers.
pub(crate) const KERNEL_COMMON: &str = include_str!("../../../../kernels/common.cuh");

/// One kernel of the sources above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Map,
    Zip,
    SumRows,
    Softmax,
    LayerNorm,
    LayerNormBackwardInput,
    LayerNormBackwardParams,
    Embedding,
    EmbeddingBackward,
    CrossEntropy,
    CrossEntropyBackward,
    Gemm,
    Adam,
}

impl Kernel {
    pub(crate) const ALL: [Kernel; 13] = [
        Kernel::Map,
        Kernel::Zip,
        Kernel::SumRows,
        Kernel::Softmax,
        Kernel::LayerNorm,
        Kernel::LayerNormBackwardInput,
        Kernel::LayerNormBackwardParams,
        Kernel::Embedding,
        Kernel::EmbeddingBackward,
        Kernel::CrossEntropy,
        Kernel::CrossEntropyBackward,
        Kernel::Gemm,
        Kernel::Adam,
    ];

    /// The `extern "C"` name in the sources.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Map => "vg_map",
            Kernel::Zip => "vg_zip",
            Kernel::SumRows => "vg_sum_rows",
            Kernel::Softmax => "vg_softmax",
            Kernel::LayerNorm => "vg_layer_norm",
            Kernel::LayerNormBackwardInput => "vg_layer_norm_backward_input",
            Kernel::LayerNormBackwardParams => "vg_layer_norm_backward_params",
            Kernel::Embedding => "vg_embedding",
            Kernel::EmbeddingBackward => "vg_embedding_backward",
            Kernel::CrossEntropy => "vg_cross_entropy",
            Kernel::CrossEntropyBackward => "vg_cross_entropy_backward",
            Kernel::Gemm => "vg_gemm",
            Kernel::Adam => "vg_adam",
        }
    }
}

/// Most dimensions an element-wise kernel indexes (after merging contiguous ones).
pub(crate) const MAX_RANK: usize = 8;

/// The argument block of every kernel: `struct VgArgs` in `tensor/kernels/common.cuh`, field
/// for field. Pointers are device addresses (host addresses under the host launcher).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct VgArgs {
    pub(crate) out: u64,
    pub(crate) out2: u64,
    pub(crate) out3: u64,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) c: u64,
    pub(crate) d: u64,
    pub(crate) e: u64,
    pub(crate) ids: u64,
    pub(crate) n: u64,
    pub(crate) rank: u64,
    pub(crate) shape: [u64; MAX_RANK],
    pub(crate) out_strides: [u64; MAX_RANK],
    pub(crate) a_strides: [u64; MAX_RANK],
    pub(crate) b_strides: [u64; MAX_RANK],
    pub(crate) out_offset: u64,
    pub(crate) a_offset: u64,
    pub(crate) b_offset: u64,
    pub(crate) len: u64,
    pub(crate) inner: u64,
    pub(crate) op: i32,
    pub(crate) s0: f32,
    pub(crate) s1: f32,
    pub(crate) s2: f32,
    pub(crate) s3: f32,
    pub(crate) s4: f32,
    pub(crate) s5: f32,
}

// SAFETY: `VgArgs` is `#[repr(C)]` plain data (integers and floats) whose layout matches the
// kernels' `struct VgArgs` (same field order and types; 64-bit pointers as u64), so its bytes
// are a valid kernel parameter.
unsafe impl DeviceRepr for VgArgs {}

/// One column-major strided-batched SGEMM, as cuBLAS defines it:
/// `C_i = op(A_i) · op(B_i)` for `count` batches, `op(A)` m×k, `op(B)` k×n, `C` m×n.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gemm {
    pub(crate) transa: bool,
    pub(crate) transb: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: u64,
    pub(crate) lda: usize,
    pub(crate) stride_a: usize,
    pub(crate) b: u64,
    pub(crate) ldb: usize,
    pub(crate) stride_b: usize,
    pub(crate) c: u64,
    pub(crate) ldc: usize,
    pub(crate) stride_c: usize,
    pub(crate) count: usize,
}

impl Gemm {
    /// The same product as a launch of `vg_gemm` (tensor/kernels/gemm.cu): `(items, args)`.
    pub(crate) fn kernel_args(&self) -> (u64, VgArgs) {
        let mut args = VgArgs {
            out: self.c,
            a: self.a,
            b: self.b,
            n: (self.m * self.n * self.count) as u64,
            op: i32::from(self.transa) | (i32::from(self.transb) << 1),
            ..Default::default()
        };
        args.shape[..3].copy_from_slice(&[self.m as u64, self.n as u64, self.k as u64]);
        args.a_strides[..2].copy_from_slice(&[self.lda as u64, self.stride_a as u64]);
        args.b_strides[..2].copy_from_slice(&[self.ldb as u64, self.stride_b as u64]);
        args.out_strides[..2].copy_from_slice(&[self.ldc as u64, self.stride_c as u64]);
        (args.n, args)
    }
}
