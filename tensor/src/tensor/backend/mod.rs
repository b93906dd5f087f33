//! The backend contract and where each device computes. [`TensorBackend`] is the contract (as
//! candle-core's `backend.rs`): one method per primitive, on storage and layout only (a
//! [`StridedRef`] in, a [`Strided`] out). Primitives see no tensor, record nothing and call no
//! op, so the op layer above keeps its shape checks and autograd records, written once.
//!
//! [`on`] is the one place that chooses a device's backend, with the checks: the host backend
//! ([`host`], slices of host memory) on host-addressable devices or, with the `cuda` feature,
//! the CUDA backend (`cuda`, NVRTC kernels and cuBLAS on the device's stream) on a CUDA device;
//! any other device is unsupported. Every output comes from [`crate::Device::allocate`] on the
//! operands' device either way.

#[cfg(all(test, feature = "cuda"))]
mod checks;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod host;

use super::error::{Result, TensorError};
#[cfg(feature = "cuda")]
use super::kinds::checked_numel;
use super::kinds::{AdamStep, MapOp, MatmulShape, ZipOp};
use super::storage::{Strided, StridedRef};
use crate::Device;

/// The primitives every backend computes. Object safe: [`on`] returns the device's backend as
/// a `Box<dyn TensorBackend>`, so callers name no backend.
pub(crate) trait TensorBackend {
    /// `f(src)` into a new contiguous tensor.
    fn map(&self, src: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<Strided>;

    /// `dst = f(dst)` in `dst`'s own layout. Does not bump the version (callers that write a
    /// shared storage do).
    fn map_inplace(&self, dst: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<()>;

    /// `f(a, b)` element-wise with broadcasting, into a new contiguous tensor of `shape`.
    fn zip(
        &self,
        a: StridedRef<'_>,
        b: StridedRef<'_>,
        shape: &[usize],
        op: &'static str,
        f: ZipOp,
    ) -> Result<Strided>;

    /// `dst = f(dst, src)` with `src` broadcast to `dst`'s shape; `src` must not share `dst`'s
    /// storage. Does not bump the version.
    fn zip_inplace(
        &self,
        dst: StridedRef<'_>,
        src: StridedRef<'_>,
        op: &'static str,
        f: ZipOp,
    ) -> Result<()>;

    /// `a · b` for shapes already checked.
    fn matmul(&self, a: StridedRef<'_>, b: StridedRef<'_>, shape: &MatmulShape) -> Result<Strided>;

    /// Softmax (or log-softmax) along `dim`, into a new contiguous tensor.
    fn softmax(
        &self,
        x: StridedRef<'_>,
        dim: usize,
        log: bool,
        op: &'static str,
    ) -> Result<Strided>;

    /// Softmax along the last dimension of `x`, which covers its whole contiguous storage, written
    /// into `x`. Only where [`has_inplace_row_kernels`]. Does not bump the version.
    fn softmax_last_dim_inplace(&self, x: StridedRef<'_>, op: &'static str) -> Result<()>;

    /// Layer norm of `x` (covering its whole contiguous storage) over its last dimension, written
    /// into `x`; `weight` and `bias` contiguous and not sharing `x`'s storage. Only where
    /// [`has_inplace_row_kernels`]. Does not bump the version.
    fn layer_norm_inplace(
        &self,
        x: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        bias: Option<StridedRef<'_>>,
        eps: f32,
    ) -> Result<()>;

    /// Layer norm of contiguous `x` over its last dimension (`d` values); also the per-row mean and
    /// 1/std when `stats`.
    fn layer_norm(
        &self,
        x: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        bias: Option<StridedRef<'_>>,
        eps: f32,
        stats: bool,
    ) -> Result<(Strided, Option<(Strided, Strided)>)>;

    /// Gradient of layer norm: `(dx, dweight, dbias)`; every input contiguous.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn layer_norm_backward(
        &self,
        g: StridedRef<'_>,
        x: StridedRef<'_>,
        mean: StridedRef<'_>,
        rstd: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        need_w: bool,
        need_b: bool,
    ) -> Result<(Strided, Option<Strided>, Option<Strided>)>;

    /// Rows `ids` (checked against the vocabulary) of the `[vocab, dim]` table.
    fn embedding(&self, table: StridedRef<'_>, ids: &[u32], out_shape: &[usize])
        -> Result<Strided>;

    /// Gradient of an embedding lookup with respect to the table (rows scatter-added).
    fn embedding_backward(
        &self,
        g: StridedRef<'_>,
        ids: &[u32],
        table_shape: &[usize],
    ) -> Result<Strided>;

    /// `scale ·` the sum of `x` over `dims`, as a contiguous tensor of `keep_shape` (the reduced
    /// dims kept as size 1).
    fn reduce(
        &self,
        x: StridedRef<'_>,
        // The host backend reads the reduced dims from `keep_shape`; the CUDA backend takes both.
        dims: &[usize],
        keep_shape: &[usize],
        scale: f32,
        op: &'static str,
    ) -> Result<Strided>;

    /// Mean cross-entropy (a scalar tensor) from contiguous log-probabilities `[rows, classes]`.
    fn cross_entropy(&self, logp: StridedRef<'_>, targets: &[u32]) -> Result<Strided>;

    /// Gradient of mean cross-entropy: `(probs - onehot) · g / rows`.
    fn cross_entropy_backward(
        &self,
        g: StridedRef<'_>,
        probs: StridedRef<'_>,
        targets: &[u32],
    ) -> Result<Strided>;

    /// `sum(diff²) / n` (a scalar tensor) of contiguous `diff`.
    fn mean_square(&self, diff: StridedRef<'_>, op: &'static str) -> Result<Strided>;

    /// The elements in row-major order.
    fn to_vec(&self, t: StridedRef<'_>, op: &'static str) -> Result<Vec<f32>>;

    /// A new contiguous tensor on `device` holding `data` (row-major, `shape`'s element count).
    fn upload(
        &self,
        device: &Device,
        shape: &[usize],
        op: &'static str,
        data: &[f32],
    ) -> Result<Strided>;

    /// A tensor of `value`s.
    fn full(&self, device: &Device, shape: &[usize], value: f32) -> Result<Strided>;

    /// One fused Adam update of `[param, grad, m, v]` (contiguous, same element count, four
    /// storages); the caller bumps the versions.
    fn adam_step(&self, state: [StridedRef<'_>; 4], hyper: &AdamStep) -> Result<()>;
}

/// The backend that computes on `device`, for `op` (named in the error): the host backend on
/// host-addressable devices, the CUDA backend with the launcher of the device's context on a
/// CUDA device, [`TensorError::Unsupported`] on any other. Every backend it returns has the
/// in-place row kernels ([`has_inplace_row_kernels`]), so this also refuses, for the in-place
/// primitives, every device without them.
pub(crate) fn on(device: &Device, op: &'static str) -> Result<Box<dyn TensorBackend>> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => {
            let launcher = cuda::DeviceLauncher::for_device(d, op)?;
            Ok(Box::new(cuda::Cuda::new(launcher)))
        }
        // A zero-sized type: boxing it allocates nothing.
        _ if device.is_host() => Ok(Box::new(host::Host)),
        _ => Err(unsupported(device, op)),
    }
}

fn unsupported(device: &Device, op: &'static str) -> TensorError {
    TensorError::Unsupported {
        op,
        device: format!("{device:?}"),
    }
}

/// Whether `device` has the row kernels that write softmax and layer norm into their input
/// ([`TensorBackend::softmax_last_dim_inplace`], [`TensorBackend::layer_norm_inplace`]: the
/// host and CUDA backends).
pub(crate) fn has_inplace_row_kernels(device: &Device) -> bool {
    device.is_host() || device.is_cuda()
}

/// A new contiguous tensor filled by `fill` (on the host, then copied for a GPU).
#[track_caller]
pub(crate) fn alloc_with(
    device: &Device,
    shape: &[usize],
    op: &'static str,
    fill: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<Strided> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => {
            let numel = checked_numel(op, shape)?;
            let mut data = vec![0.0f32; numel];
            fill(&mut data)?;
            on(device, op)?.upload(device, shape, op, &data)
        }
        _ => host::alloc_with(device, shape, op, fill),
    }
}
