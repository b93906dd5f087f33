//! Where tensor ops compute: one dispatch per primitive, to the host backend ([`host`], slices
//! of host memory) or, with the `cuda` feature, the CUDA backend (`cuda`, NVRTC kernels and cuBLAS on the device's
//! stream). Ops in `ops.rs` keep their shape checks and autograd there, written once, and call
//! the primitives here for the arithmetic; every output comes from [`crate::Device::allocate`]
//! on the operands' device either way.

#[cfg(all(test, feature = "cuda"))]
mod checks;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub(crate) mod host;

use super::ops::BinOp;
use super::{Result, Tensor, TensorError};
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

/// An element-wise function of one value (the kernel's `VG_MAP_*` code in `code`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MapOp {
    Copy,
    Scalar(BinOp, f32),
    /// `x * mul + add`.
    Affine(f32, f32),
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    Exp,
    Log,
    Neg,
    Fill(f32),
}

#[cfg(feature = "cuda")]
impl MapOp {
    /// `(op, s0, s1)` for `vg_map` (runtime/kernels/elementwise.cu).
    pub(crate) fn code(self) -> (i32, f32, f32) {
        match self {
            MapOp::Copy => (0, 0.0, 0.0),
            MapOp::Scalar(BinOp::Add, s) => (1, s, 0.0),
            MapOp::Scalar(BinOp::Sub, s) => (2, s, 0.0),
            MapOp::Scalar(BinOp::Mul, s) => (3, s, 0.0),
            MapOp::Scalar(BinOp::Div, s) => (4, s, 0.0),
            MapOp::Affine(mul, add) => (5, mul, add),
            MapOp::Relu => (6, 0.0, 0.0),
            MapOp::Gelu => (7, 0.0, 0.0),
            MapOp::Tanh => (8, 0.0, 0.0),
            MapOp::Sigmoid => (9, 0.0, 0.0),
            MapOp::Exp => (10, 0.0, 0.0),
            MapOp::Log => (11, 0.0, 0.0),
            MapOp::Fill(v) => (12, v, 0.0),
            MapOp::Neg => (13, 0.0, 0.0),
        }
    }
}

/// An element-wise function of two values (the kernel's `VG_ZIP_*` code in `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZipOp {
    Bin(BinOp),
    /// The second operand (an in-place copy).
    Second,
    /// `g` where the output is positive, else 0 (`a` = g, `b` = relu's output).
    ReluBackward,
    /// `g · gelu'(x)` (`b` = gelu's input).
    GeluBackward,
    /// `g · (1 - y²)` (`b` = tanh's output).
    TanhBackward,
    /// `g · y(1 - y)` (`b` = sigmoid's output).
    SigmoidBackward,
}

#[cfg(feature = "cuda")]
impl ZipOp {
    /// `op` for `vg_zip` (runtime/kernels/elementwise.cu).
    pub(crate) fn code(self) -> i32 {
        match self {
            ZipOp::Bin(BinOp::Add) => 0,
            ZipOp::Bin(BinOp::Sub) => 1,
            ZipOp::Bin(BinOp::Mul) => 2,
            ZipOp::Bin(BinOp::Div) => 3,
            ZipOp::Second => 4,
            ZipOp::ReluBackward => 5,
            ZipOp::GeluBackward => 6,
            ZipOp::TanhBackward => 7,
            ZipOp::SigmoidBackward => 8,
        }
    }
}

/// The shapes of one matrix product `[batch.., m, k] · [batch.., k, n]` (batch dims already
/// broadcast).
#[derive(Debug, Clone)]
pub(crate) struct MatmulShape {
    pub(crate) batch: Vec<usize>,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
}

impl MatmulShape {
    pub(crate) fn out_shape(&self) -> Vec<usize> {
        let mut s = self.batch.clone();
        s.extend_from_slice(&[self.m, self.n]);
        s
    }
}

/// Runs `host` on host-addressable devices and `cuda` with the launcher of a CUDA device.
#[cfg(feature = "cuda")]
fn dispatch_to<R>(
    device: &Device,
    op: &'static str,
    host: impl FnOnce() -> Result<R>,
    cuda: impl FnOnce(&dyn cuda::Launcher) -> Result<R>,
) -> Result<R> {
    #[cfg(test)]
    if device.is_host() {
        if let Some(launcher) = checks::emulated() {
            // A check running whole models through the CUDA backend on host memory.
            return cuda(&*launcher);
        }
    }
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
pub(crate) fn map(src: &Tensor, op: &'static str, f: MapOp) -> Result<Tensor> {
    dispatch!(src.device(), op, || host::map(src, op, f), |l| cuda::map(
        l, src, op, f
    ),)
}

/// `dst = f(dst)` in `dst`'s own layout. Does not bump the version (callers that write a
/// shared storage do).
pub(crate) fn map_inplace(dst: &Tensor, op: &'static str, f: MapOp) -> Result<()> {
    dispatch!(dst.device(), op, || host::map_inplace(dst, op, f), |l| {
        cuda::map_inplace(l, dst, op, f)
    },)
}

/// `f(a, b)` element-wise with broadcasting, into a new contiguous tensor of `shape`.
pub(crate) fn zip(
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
    op: &'static str,
    f: ZipOp,
) -> Result<Tensor> {
    dispatch!(a.device(), op, || host::zip(a, b, shape, op, f), |l| {
        cuda::zip(l, a, b, shape, op, f)
    },)
}

/// `dst = f(dst, src)` with `src` broadcast to `dst`'s shape; `src` must not share `dst`'s
/// storage. Does not bump the version.
pub(crate) fn zip_inplace(dst: &Tensor, src: &Tensor, op: &'static str, f: ZipOp) -> Result<()> {
    dispatch!(
        dst.device(),
        op,
        || host::zip_inplace(dst, src, op, f),
        |l| cuda::zip_inplace(l, dst, src, op, f),
    )
}

/// `a · b` for shapes already checked.
pub(crate) fn matmul(a: &Tensor, b: &Tensor, shape: &MatmulShape) -> Result<Tensor> {
    dispatch!(a.device(), "matmul", || host::matmul(a, b, shape), |l| {
        cuda::matmul(l, a, b, shape)
    },)
}

/// Softmax (or log-softmax) along `dim`, into a new contiguous tensor.
pub(crate) fn softmax(x: &Tensor, dim: usize, log: bool, op: &'static str) -> Result<Tensor> {
    dispatch!(x.device(), op, || host::softmax(x, dim, log, op), |l| {
        cuda::softmax(l, x, dim, log, op)
    },)
}

/// Layer norm of contiguous `x` over its last dimension (`d` values); also the per-row mean and
/// 1/std when `stats`.
pub(crate) fn layer_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f32,
    stats: bool,
) -> Result<(Tensor, Option<(Tensor, Tensor)>)> {
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
    g: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    need_w: bool,
    need_b: bool,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    dispatch!(
        x.device(),
        "layer_norm_backward",
        || host::layer_norm_backward(g, x, mean, rstd, weight, need_w, need_b),
        |l| cuda::layer_norm_backward(l, g, x, mean, rstd, weight, need_w, need_b),
    )
}

/// Rows `ids` (checked against the vocabulary) of the `[vocab, dim]` table.
pub(crate) fn embedding(table: &Tensor, ids: &[u32], out_shape: &[usize]) -> Result<Tensor> {
    dispatch!(
        table.device(),
        "embedding",
        || host::embedding(table, ids, out_shape),
        |l| cuda::embedding(l, table, ids, out_shape),
    )
}

/// Gradient of an embedding lookup with respect to the table (rows scatter-added).
pub(crate) fn embedding_backward(g: &Tensor, ids: &[u32], table_shape: &[usize]) -> Result<Tensor> {
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
    x: &Tensor,
    // The host backend reads the reduced dims from `keep_shape`; the CUDA backend takes both.
    #[cfg_attr(not(feature = "cuda"), allow(unused_variables))] dims: &[usize],
    keep_shape: &[usize],
    scale: f32,
    op: &'static str,
) -> Result<Tensor> {
    dispatch!(
        x.device(),
        op,
        || host::reduce(x, keep_shape, scale, op),
        |l| cuda::reduce(l, x, dims, keep_shape, scale, op),
    )
}

/// Mean cross-entropy (a scalar tensor) from contiguous log-probabilities `[rows, classes]`.
pub(crate) fn cross_entropy(logp: &Tensor, targets: &[u32]) -> Result<Tensor> {
    dispatch!(
        logp.device(),
        "cross_entropy",
        || host::cross_entropy(logp, targets),
        |l| cuda::cross_entropy(l, logp, targets),
    )
}

/// Gradient of mean cross-entropy: `(probs - onehot) · g / rows`.
pub(crate) fn cross_entropy_backward(
    g: &Tensor,
    probs: &Tensor,
    targets: &[u32],
) -> Result<Tensor> {
    dispatch!(
        probs.device(),
        "cross_entropy_backward",
        || host::cross_entropy_backward(g, probs, targets),
        |l| cuda::cross_entropy_backward(l, g, probs, targets),
    )
}

/// `sum(diff²) / n` (a scalar tensor) of contiguous `diff`.
pub(crate) fn mean_square(diff: &Tensor, op: &'static str) -> Result<Tensor> {
    dispatch!(diff.device(), op, || host::mean_square(diff, op), |l| {
        cuda::mean_square(l, diff, op)
    },)
}

/// The elements in row-major order.
pub(crate) fn to_vec(t: &Tensor, op: &'static str) -> Result<Vec<f32>> {
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
) -> Result<Tensor> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => {
            let numel = super::checked_numel(op, shape)?;
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
) -> Result<Tensor> {
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
pub(crate) fn full(device: &Device, shape: &[usize], value: f32) -> Result<Tensor> {
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

/// The scalars of one Adam update (`bias1`, `bias2`: 1 - beta^t).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamStep {
    pub(crate) lr: f32,
    pub(crate) beta1: f32,
    pub(crate) beta2: f32,
    pub(crate) eps: f32,
    pub(crate) bias1: f32,
    pub(crate) bias2: f32,
}

/// One fused Adam update of `[param, grad, m, v]` (contiguous, same element count, four
/// storages); the caller bumps the versions.
pub(crate) fn adam_step(state: [&Tensor; 4], hyper: &AdamStep) -> Result<()> {
    dispatch!(
        state[0].device(),
        "Adam::step",
        || host::adam_step(state, hyper),
        |l| cuda::adam_step(l, state, hyper),
    )
}
