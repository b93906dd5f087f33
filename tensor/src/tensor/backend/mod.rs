//! Where tensor ops compute: one dispatch per primitive, to the host backend ([`host`], slices
//! of host memory) or, with the `cuda` feature, the CUDA backend (`cuda`, NVRTC kernels and
//! cuBLAS on the device's stream). Primitives work on storage and layout only (a
//! [`StridedRef`] in, a [`Strided`] out): they see no tensor, record nothing and call no op, so
//! the op layer above keeps its shape checks and autograd records, written once. Every output
//! comes from [`crate::Device::allocate`] on the operands' device either way.

#[cfg(all(test, feature = "cuda"))]
mod checks;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod host;
mod host_kernels;

use super::error::{Result, TensorError};
#[cfg(feature = "cuda")]
use super::kinds::checked_numel;
use super::kinds::{AdamStep, MapOp, MatmulShape, ZipOp};
use super::storage::{Strided, StridedRef};
use crate::Device;

/// `dispatch!(device, op, host_closure, |l| cuda_expr)`: one primitive, computed by the host
/// backend or, with the `cuda` feature, by the CUDA backend (`l` its launcher). Without the
/// feature the CUDA arm is not compiled at all.
#[cfg(feature = "cuda")]
macro_rules! dispatch {
    ($device:expr, $op:expr, $host:expr, |$l:ident| $cuda:expr $(,)?) => {
        dispatch_to($device, $op, $host, |$l: &dyn cuda::Launcher| $cuda)
    };
}

/// `dispatch!` without the CUDA backend: the host arm only.
#[cfg(not(feature = "cuda"))]
macro_rules! dispatch {
    ($device:expr, $op:expr, $host:expr, |$l:ident| $cuda:expr $(,)?) => {
        dispatch_to($device, $op, $host)
    };
}

/// Runs `host` on host-addressable devices and `cuda` with the launcher of a CUDA device.
#[cfg(feature = "cuda")]
fn dispatch_to<R>(
    device: &Device,
    op: &'static str,
    host: impl FnOnce() -> Result<R>,
    cuda: impl FnOnce(&dyn cuda::Launcher) -> Result<R>,
) -> Result<R> {
    match device {
        Device::Cuda(d) => {
            let launcher = cuda::DeviceLauncher::for_device(d, op)?;
            cuda(&*launcher)
        }
        _ if device.is_host() => host(),
        _ => Err(unsupported(device, op)),
    }
}

/// Runs `host` on host-addressable devices (a build without the CUDA backend has no other).
#[cfg(not(feature = "cuda"))]
fn dispatch_to<R>(
    device: &Device,
    op: &'static str,
    host: impl FnOnce() -> Result<R>,
) -> Result<R> {
    if device.is_host() {
        host()
    } else {
        Err(unsupported(device, op))
    }
}

fn unsupported(device: &Device, op: &'static str) -> TensorError {
    TensorError::Unsupported {
        op,
        device: format!("{device:?}"),
    }
}

/// `f(src)` into a new contiguous tensor.
pub(crate) fn map(src: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<Strided> {
    dispatch!(src.device(), op, || host::map(src, op, f), |l| cuda::map(
        l, src, op, f
    ),)
}

/// `dst = f(dst)` in `dst`'s own layout. Does not bump the version (callers that write a
/// shared storage do).
pub(crate) fn map_inplace(dst: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<()> {
    dispatch!(dst.device(), op, || host::map_inplace(dst, op, f), |l| {
        cuda::map_inplace(l, dst, op, f)
    },)
}

/// `f(a, b)` element-wise with broadcasting, into a new contiguous tensor of `shape`.
pub(crate) fn zip(
    a: StridedRef<'_>,
    b: StridedRef<'_>,
    shape: &[usize],
    op: &'static str,
    f: ZipOp,
) -> Result<Strided> {
    dispatch!(a.device(), op, || host::zip(a, b, shape, op, f), |l| {
        cuda::zip(l, a, b, shape, op, f)
    },)
}

/// `dst = f(dst, src)` with `src` broadcast to `dst`'s shape; `src` must not share `dst`'s
/// storage. Does not bump the version.
pub(crate) fn zip_inplace(
    dst: StridedRef<'_>,
    src: StridedRef<'_>,
    op: &'static str,
    f: ZipOp,
) -> Result<()> {
    dispatch!(
        dst.device(),
        op,
        || host::zip_inplace(dst, src, op, f),
        |l| cuda::zip_inplace(l, dst, src, op, f),
    )
}

/// `a · b` for shapes already checked.
pub(crate) fn matmul(a: StridedRef<'_>, b: StridedRef<'_>, shape: &MatmulShape) -> Result<Strided> {
    dispatch!(a.device(), "matmul", || host::matmul(a, b, shape), |l| {
        cuda::matmul(l, a, b, shape)
    },)
}

/// Softmax (or log-softmax) along `dim`, into a new contiguous tensor.
pub(crate) fn softmax(
    x: StridedRef<'_>,
    dim: usize,
    log: bool,
    op: &'static str,
) -> Result<Strided> {
    dispatch!(x.device(), op, || host::softmax(x, dim, log, op), |l| {
        cuda::softmax(l, x, dim, log, op)
    },)
}

/// Whether `device` has the row kernels below that write softmax and layer norm into their
/// input (the host and CUDA backends).
pub(crate) fn has_inplace_row_kernels(device: &Device) -> bool {
    device.is_host() || device.is_cuda()
}

/// Softmax along the last dimension of `x`, which covers its whole contiguous storage, written
/// into `x`. Only where [`has_inplace_row_kernels`]. Does not bump the version.
pub(crate) fn softmax_last_dim_inplace(x: StridedRef<'_>, op: &'static str) -> Result<()> {
    if !has_inplace_row_kernels(x.device()) {
        return Err(unsupported(x.device(), op));
    }
    dispatch!(
        x.device(),
        op,
        || host::softmax_last_dim_inplace(x, op),
        |l| { cuda::softmax_last_dim_inplace(l, x, op) },
    )
}

/// Layer norm of `x` (covering its whole contiguous storage) over its last dimension, written
/// into `x`; `weight` and `bias` contiguous and not sharing `x`'s storage. Only where
/// [`has_inplace_row_kernels`]. Does not bump the version.
pub(crate) fn layer_norm_inplace(
    x: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    bias: Option<StridedRef<'_>>,
    eps: f32,
) -> Result<()> {
    if !has_inplace_row_kernels(x.device()) {
        return Err(unsupported(x.device(), "layer_norm"));
    }
    dispatch!(
        x.device(),
        "layer_norm",
        || host::layer_norm_inplace(x, weight, bias, eps),
        |l| cuda::layer_norm_inplace(l, x, weight, bias, eps),
    )
}

/// Layer norm of contiguous `x` over its last dimension (`d` values); also the per-row mean and
/// 1/std when `stats`.
pub(crate) fn layer_norm(
    x: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    bias: Option<StridedRef<'_>>,
    eps: f32,
    stats: bool,
) -> Result<(Strided, Option<(Strided, Strided)>)> {
    dispatch!(
        x.device(),
        "layer_norm",
        || host::layer_norm(x, weight, bias, eps, stats),
        |l| cuda::layer_norm(l, x, weight, bias, eps, stats),
    )
}

/// Gradient of layer norm: `(dx, dweight, dbias)`; every input contiguous.
#[allow(clippy::type_complexity)]
pub(crate) fn layer_norm_backward(
    g: StridedRef<'_>,
    x: StridedRef<'_>,
    mean: StridedRef<'_>,
    rstd: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    need_w: bool,
    need_b: bool,
) -> Result<(Strided, Option<Strided>, Option<Strided>)> {
    dispatch!(
        x.device(),
        "layer_norm_backward",
        || host::layer_norm_backward(g, x, mean, rstd, weight, need_w, need_b),
        |l| cuda::layer_norm_backward(l, g, x, mean, rstd, weight, need_w, need_b),
    )
}

/// Rows `ids` (checked against the vocabulary) of the `[vocab, dim]` table.
pub(crate) fn embedding(
    table: StridedRef<'_>,
    ids: &[u32],
    out_shape: &[usize],
) -> Result<Strided> {
    dispatch!(
        table.device(),
        "embedding",
        || host::embedding(table, ids, out_shape),
        |l| cuda::embedding(l, table, ids, out_shape),
    )
}

/// Gradient of an embedding lookup with respect to the table (rows scatter-added).
pub(crate) fn embedding_backward(
    g: StridedRef<'_>,
    ids: &[u32],
    table_shape: &[usize],
) -> Result<Strided> {
    dispatch!(
        g.device(),
        "embedding_backward",
        || host::embedding_backward(g, ids, table_shape),
        |l| cuda::embedding_backward(l, g, ids, table_shape),
    )
}

/// `scale ·` the sum of `x` over `dims`, as a contiguous tensor of `keep_shape` (the reduced
/// dims kept as size 1).
pub(crate) fn reduce(
    x: StridedRef<'_>,
    // The host backend reads the reduced dims from `keep_shape`; the CUDA backend takes both.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))] dims: &[usize],
    keep_shape: &[usize],
    scale: f32,
    op: &'static str,
) -> Result<Strided> {
    dispatch!(
        x.device(),
        op,
        || host::reduce(x, keep_shape, scale, op),
        |l| cuda::reduce(l, x, dims, keep_shape, scale, op),
    )
}

/// Mean cross-entropy (a scalar tensor) from contiguous log-probabilities `[rows, classes]`.
pub(crate) fn cross_entropy(logp: StridedRef<'_>, targets: &[u32]) -> Result<Strided> {
    dispatch!(
        logp.device(),
        "cross_entropy",
        || host::cross_entropy(logp, targets),
        |l| cuda::cross_entropy(l, logp, targets),
    )
}

/// Gradient of mean cross-entropy: `(probs - onehot) · g / rows`.
pub(crate) fn cross_entropy_backward(
    g: StridedRef<'_>,
    probs: StridedRef<'_>,
    targets: &[u32],
) -> Result<Strided> {
    dispatch!(
        probs.device(),
        "cross_entropy_backward",
        || host::cross_entropy_backward(g, probs, targets),
        |l| cuda::cross_entropy_backward(l, g, probs, targets),
    )
}

/// `sum(diff²) / n` (a scalar tensor) of contiguous `diff`.
pub(crate) fn mean_square(diff: StridedRef<'_>, op: &'static str) -> Result<Strided> {
    dispatch!(diff.device(), op, || host::mean_square(diff, op), |l| {
        cuda::mean_square(l, diff, op)
    },)
}

/// The elements in row-major order.
pub(crate) fn to_vec(t: StridedRef<'_>, op: &'static str) -> Result<Vec<f32>> {
    dispatch!(t.device(), op, || host::to_vec(t, op), |l| cuda::to_vec(
        l, t, op
    ),)
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
            upload(device, shape, op, &data)
        }
        _ => host::alloc_with(device, shape, op, fill),
    }
}

/// A new contiguous tensor on `device` holding `data` (row-major, `shape`'s element count).
pub(crate) fn upload(
    device: &Device,
    shape: &[usize],
    op: &'static str,
    data: &[f32],
) -> Result<Strided> {
    dispatch!(
        device,
        op,
        || {
            host::alloc_with(device, shape, op, |d| {
                d.copy_from_slice(data);
                Ok(())
            })
        },
        |l| cuda::upload(l, device, shape, op, data),
    )
}

/// A tensor of `value`s.
pub(crate) fn full(device: &Device, shape: &[usize], value: f32) -> Result<Strided> {
    dispatch!(
        device,
        "full",
        || {
            host::alloc_with(device, shape, "full", |d| {
                d.fill(value);
                Ok(())
            })
        },
        |l| cuda::full(l, device, shape, value),
    )
}

/// One fused Adam update of `[param, grad, m, v]` (contiguous, same element count, four
/// storages); the caller bumps the versions.
pub(crate) fn adam_step(state: [StridedRef<'_>; 4], hyper: &AdamStep) -> Result<()> {
    dispatch!(
        state[0].device(),
        "Adam::step",
        || host::adam_step(state, hyper),
        |l| cuda::adam_step(l, state, hyper),
    )
}
