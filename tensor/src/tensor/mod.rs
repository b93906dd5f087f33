//! N-dimensional `f32` tensors over storage from the caching allocator, with reverse-mode autograd.
//!
//! A [`Tensor`] is a cheap handle (`Clone` shares everything, like PyTorch's Python objects):
//! shape, strides and offset over an `Arc`'d [`Storage`] whose bytes come from
//! [`Device::allocate`], so every byte a tensor holds shows up in
//! [`vramguard_memory::memory::stats`]. Views ([`Tensor::reshape`] when possible, [`Tensor::transpose`],
//! [`Tensor::permute`], [`Tensor::narrow`], [`Tensor::unsqueeze`], [`Tensor::broadcast_as`])
//! share storage; [`Tensor::contiguous`] copies only when needed.
//!
//! Ops return `Result<Tensor, TensorError>`, including the arithmetic operators
//! (`(&a + &b)?`, as in candle), so shape mistakes are typed errors naming both shapes, never
//! panics. Ops run on the device their operands live on: the host backend on host devices, NVRTC
//! kernels and cuBLAS on a CUDA device (see `backend`); operands on two devices are a
//! [`TensorError::DeviceMismatch`] naming both. [`Tensor::to_device`] copies between devices.
//!
//! # In-place ops and ownership
//!
//! `add_`, `sub_`, `mul_`, `div_`, `relu_`, `copy_`, `zero_` write into the tensor's storage and
//! bump the storage's version counter. Like PyTorch, they are visible through every tensor that
//! shares the storage (clones and views). Autograd compares versions: a tensor saved for backward
//! and modified afterwards makes [`Tensor::backward`] fail with
//! [`TensorError::SavedTensorModified`], naming both ops. In-place on a leaf that requires grad
//! while grad mode is on is an error ([`TensorError::InplaceOnLeaf`]). A view taken before a
//! recorded in-place op on its base, and used in a recorded op after it, has a history that no
//! longer matches its values: backward through it fails with
//! [`TensorError::SavedTensorModified`] rather than returning a wrong gradient (take the view
//! after the in-place op, or use the out-of-place op).
//!
//! The consuming forms (`x + &b`, `x * 2.0`, [`Tensor::into_relu`], … with `x` owned) reuse
//! `x`'s buffer when nothing else can observe it: the handle and its storage are uniquely owned,
//! the buffer is exactly `x`'s contiguous data, it is not saved for backward, and it is not a
//! leaf that requires grad. Otherwise they allocate, exactly like the borrowing forms.
//!
//! # Layers
//!
//! Each module imports only the ones in the rows above it (the workspace test
//! `tests/layout/layers.rs` checks it, and that this table is its list):
//!
//! | layer | owns |
//! | --- | --- |
//! | `error` | the error type |
//! | `kinds` | op kinds, layouts and the shape rules |
//! | `peak_bound`, `rng` | the out-of-place lower bound of a peak, recorded from storage allocations; random tensors |
//! | `storage` | memory under tensors, its locks and version counter |
//! | `backend` | the backend contract (`TensorBackend`) and where each device computes; host/ and cuda/ implement it |
//! | `last_use` | a tensor at its last use as the receiver of an op with a consuming form (what `#[inference]` calls), defined from the same tokens as `Tensor`'s op |
//! | `ops`, `inspect` | shape checks, the backend call and the op's record for autograd; printing |
//! | `autograd`, `inplace` | the engine and every gradient formula; everything that writes into existing memory, and the version checks |

mod autograd;
mod backend;
mod error;
mod inplace;
mod inspect;
mod kinds;
#[macro_use]
mod last_use;
mod ops;
mod peak_bound;
pub mod rng;
mod storage;

pub use error::{Result, TensorError};
pub(crate) use kinds::AdamStep;
pub use kinds::DType;
#[doc(hidden)]
pub use last_use::TensorAtLastUse;
pub use ops::Rhs;
pub use peak_bound::{PeakBound, PeakBoundRecorder};
pub use storage::Storage;

use crate::Device;
use kinds::{checked_numel, Layout};
use ops::record::{self, Node, OpRecord};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use storage::{Strided, StridedRef};

pub(crate) struct TensorInner {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
    /// Views made from another tensor; in-place ops on them cannot rebase the base's history.
    pub(crate) is_view: bool,
    pub(crate) leaf_requires_grad: AtomicBool,
    /// The storage's `history_rewrites` that this handle's history accounts for.
    pub(crate) history_seen: AtomicU64,
    pub(crate) grad_fn: Mutex<Option<Arc<Node>>>,
    pub(crate) grad: Mutex<Option<Tensor>>,
}

/// An n-dimensional `f32` array on a device, with optional autograd history.
///
/// `Clone` is cheap and shares the data and the autograd state (gradient, history).
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorInner>);

impl Tensor {
    pub(crate) fn from_parts(storage: Arc<Storage>, layout: Layout, is_view: bool) -> Tensor {
        let history_seen = AtomicU64::new(storage.history_rewrites());
        Tensor(Arc::new(TensorInner {
            storage,
            layout,
            is_view,
            leaf_requires_grad: AtomicBool::new(false),
            history_seen,
            grad_fn: Mutex::new(None),
            grad: Mutex::new(None),
        }))
    }

    /// The storage and layout, as the backends read them.
    pub(crate) fn strided(&self) -> StridedRef<'_> {
        StridedRef {
            storage: &self.0.storage,
            layout: &self.0.layout,
        }
    }

    /// An uninitialised contiguous tensor; callers fill every element before handing it out.
    #[track_caller]
    pub(crate) fn alloc_with(
        device: &Device,
        shape: &[usize],
        op: &'static str,
        fill: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<Tensor> {
        backend::alloc_with(device, shape, op, fill).map(Tensor::from)
    }

    // ----- creation -----

    /// A tensor of zeros.
    #[track_caller]
    pub fn zeros(shape: &[usize], device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("zeros");
        Tensor::full(shape, 0.0, device)
    }

    /// A tensor of ones.
    #[track_caller]
    pub fn ones(shape: &[usize], device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("ones");
        Tensor::full(shape, 1.0, device)
    }

    /// A tensor filled with `value`.
    #[track_caller]
    pub fn full(shape: &[usize], value: f32, device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("full");
        checked_numel("full", shape)?;
        backend::on(device, "full")?
            .full(device, shape, value)
            .map(Tensor::from)
    }

    /// A tensor of zeros with the shape and device of `self`.
    #[track_caller]
    pub fn zeros_like(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("zeros_like");
        Tensor::zeros(self.dims(), self.device())
    }

    /// A tensor of ones with the shape and device of `self`.
    #[track_caller]
    pub fn ones_like(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("ones_like");
        Tensor::ones(self.dims(), self.device())
    }

    /// A tensor holding `data` (row-major) with shape `shape`.
    #[track_caller]
    pub fn from_slice(data: &[f32], shape: &[usize], device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("from_slice");
        let expected = checked_numel("from_slice", shape)?;
        if data.len() != expected {
            return Err(TensorError::DataLength {
                op: "from_slice",
                len: data.len(),
                shape: shape.to_vec(),
                expected,
            });
        }
        backend::on(device, "from_slice")?
            .upload(device, shape, "from_slice", data)
            .map(Tensor::from)
    }

    /// A single-element tensor of shape `[]`.
    #[track_caller]
    pub fn scalar(value: f32, device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("scalar");
        Tensor::full(&[], value, device)
    }

    /// Normal samples with mean `mean` and standard deviation `std`, reproducible from `seed`.
    #[track_caller]
    pub fn randn(
        shape: &[usize],
        mean: f32,
        std: f32,
        seed: u64,
        device: &Device,
    ) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("randn");
        let mut rng = rng::Rng::new(seed);
        Tensor::alloc_with(device, shape, "randn", |d| {
            for v in d.iter_mut() {
                *v = mean + std * rng.normal();
            }
            Ok(())
        })
    }

    /// Uniform samples in `[low, high)`, reproducible from `seed`.
    #[track_caller]
    pub fn rand(
        shape: &[usize],
        low: f32,
        high: f32,
        seed: u64,
        device: &Device,
    ) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("rand");
        let mut rng = rng::Rng::new(seed);
        Tensor::alloc_with(device, shape, "rand", |d| {
            for v in d.iter_mut() {
                *v = low + (high - low) * rng.uniform();
            }
            Ok(())
        })
    }

    /// `0, 1, …, n-1` as a 1-D tensor.
    #[track_caller]
    pub fn arange(n: usize, device: &Device) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("arange");
        Tensor::alloc_with(device, &[n], "arange", |d| {
            for (i, v) in d.iter_mut().enumerate() {
                *v = i as f32;
            }
            Ok(())
        })
    }

    // ----- inspection -----

    /// The shape (candle's name).
    pub fn dims(&self) -> &[usize] {
        &self.0.layout.shape
    }

    /// The shape (same as [`Tensor::dims`]).
    pub fn shape(&self) -> &[usize] {
        &self.0.layout.shape
    }

    fn dims_n<const N: usize>(&self, op: &'static str) -> Result<[usize; N]> {
        <[usize; N]>::try_from(self.dims()).map_err(|_| TensorError::RankMismatch {
            op,
            expected: N,
            shape: self.dims().to_vec(),
        })
    }

    /// The two dimensions of a rank-2 tensor (`let (m, n) = x.dims2()?;`, as in candle).
    pub fn dims2(&self) -> Result<(usize, usize)> {
        let [a, b] = self.dims_n("dims2")?;
        Ok((a, b))
    }

    /// The three dimensions of a rank-3 tensor.
    pub fn dims3(&self) -> Result<(usize, usize, usize)> {
        let [a, b, c] = self.dims_n("dims3")?;
        Ok((a, b, c))
    }

    /// The four dimensions of a rank-4 tensor.
    pub fn dims4(&self) -> Result<(usize, usize, usize, usize)> {
        let [a, b, c, d] = self.dims_n("dims4")?;
        Ok((a, b, c, d))
    }

    /// Element strides into the storage.
    pub fn strides(&self) -> &[usize] {
        &self.0.layout.strides
    }

    /// Offset of the first element in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.0.layout.offset
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.layout.shape.len()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.0.layout.numel()
    }

    /// Size of dimension `dim`.
    pub fn dim(&self, dim: usize) -> Result<usize> {
        self.dims()
            .get(dim)
            .copied()
            .ok_or_else(|| TensorError::DimOutOfRange {
                op: "dim",
                dim,
                shape: self.dims().to_vec(),
            })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype
    }

    /// The device holding the data.
    pub fn device(&self) -> &Device {
        self.0.storage.device()
    }

    /// The shared storage.
    pub fn storage(&self) -> &Arc<Storage> {
        &self.0.storage
    }

    /// Whether the elements are laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// Whether `self` and `other` share storage.
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    /// The data in row-major order, copied into a `Vec`.
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        backend::on(self.device(), "to_vec")?.to_vec(self.strided(), "to_vec")
    }

    /// A copy of `self` on `device` (contiguous; `self` itself when it is already there).
    /// Recorded like any op: the gradient flows back to `self`'s device.
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        // Through host memory: to_vec downloads (or reads) and upload copies in.
        let data = self.to_vec()?;
        let out = Tensor::from(backend::on(device, "to_device")?.upload(
            device,
            self.dims(),
            "to_device",
            &data,
        )?);
        record::record(&out, "to_device", &[self], || OpRecord::ToDevice {
            device: self.device().clone(),
        });
        Ok(out)
    }

    /// Calls `f` with the elements of a contiguous host tensor, in place (no copy), while
    /// holding the storage's read lock. For interop with host libraries (BLAS, image codecs).
    pub fn with_host_slice<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        if !self.is_contiguous() {
            return Err(TensorError::InvalidArgument {
                op: "with_host_slice",
                shape: self.dims().to_vec(),
                message: "the tensor is not contiguous; call contiguous() first".into(),
            });
        }
        let read = self.0.storage.read("with_host_slice")?;
        let start = self.0.layout.offset;
        Ok(f(&read.data[start..start + self.elem_count()]))
    }

    /// The value of a single-element tensor.
    pub fn to_scalar(&self) -> Result<f32> {
        if self.elem_count() != 1 {
            return Err(TensorError::InvalidArgument {
                op: "to_scalar",
                shape: self.dims().to_vec(),
                message: "needs exactly one element; reduce first".into(),
            });
        }
        Ok(self.to_vec()?[0])
    }

    // ----- autograd state -----

    /// Whether gradients flow to this tensor (a leaf marked so, or the result of an op on one).
    pub fn requires_grad(&self) -> bool {
        self.0.leaf_requires_grad.load(Ordering::Acquire) || self.grad_fn().is_some()
    }

    /// Whether this handle has a history that a recorded in-place op through another handle
    /// (e.g. the base of this view) made stale: its values changed but its history did not,
    /// so gradients through it would be wrong (autograd makes that a
    /// [`TensorError::SavedTensorModified`] at backward). Handles without history (detached
    /// ones) are never stale: they promise no gradient.
    pub(crate) fn has_stale_history(&self) -> bool {
        self.0.history_seen.load(Ordering::Acquire) != self.storage().history_rewrites()
            && self.grad_fn().is_some()
    }

    /// Whether this tensor was created by the user rather than recorded by an op.
    pub fn is_leaf(&self) -> bool {
        self.grad_fn().is_none()
    }

    /// Marks a leaf as requiring grad (or not). Results of recorded ops cannot be changed:
    /// use [`Tensor::detach`] for that.
    pub fn set_requires_grad(&self, requires_grad: bool) -> Result<()> {
        if !self.is_leaf() {
            return Err(TensorError::InvalidArgument {
                op: "set_requires_grad",
                shape: self.dims().to_vec(),
                message: "only leaves can change requires_grad; call detach() to get a leaf".into(),
            });
        }
        self.0
            .leaf_requires_grad
            .store(requires_grad, Ordering::Release);
        Ok(())
    }

    /// Builder form of [`Tensor::set_requires_grad`]`(true)`, for freshly created leaves.
    pub fn with_requires_grad(self) -> Result<Tensor> {
        self.set_requires_grad(true)?;
        Ok(self)
    }

    /// The accumulated gradient of a leaf, if backward reached it.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Drops the accumulated gradient (its memory returns to the allocator).
    pub fn zero_grad(&self) {
        *self.0.grad.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// A tensor sharing the data but with no history and not requiring grad.
    pub fn detach(&self) -> Tensor {
        Tensor::from_parts(
            Arc::clone(&self.0.storage),
            self.0.layout.clone(),
            self.0.is_view,
        )
    }

    pub(crate) fn grad_fn(&self) -> Option<Arc<Node>> {
        self.0
            .grad_fn
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_grad_fn(&self, node: Option<Arc<Node>>) {
        *self.0.grad_fn.lock().unwrap_or_else(|e| e.into_inner()) = node;
    }
}

/// One fused Adam update of `[param, grad, m, v]` (contiguous, same element count, four
/// storages); the caller bumps the versions.
pub(crate) fn adam_step(state: [&Tensor; 4], hyper: &AdamStep) -> Result<()> {
    backend::on(state[0].device(), "Adam::step")?.adam_step(state.map(Tensor::strided), hyper)
}

impl<'a> From<&'a Tensor> for StridedRef<'a> {
    fn from(t: &'a Tensor) -> StridedRef<'a> {
        t.strided()
    }
}

/// A backend's result as a tensor of its own (not a view, no history yet).
impl From<Strided> for Tensor {
    fn from(s: Strided) -> Tensor {
        Tensor::from_parts(s.storage, s.layout, false)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Tensor");
        s.field("shape", &self.dims())
            .field("dtype", &self.dtype())
            .field("device", self.device())
            .field("requires_grad", &self.requires_grad());
        if let Some(node) = self.grad_fn() {
            s.field("grad_fn", &node.name());
        }
        if self.elem_count() <= 16 {
            if let Ok(v) = self.to_vec() {
                s.field("data", &v);
            }
        }
        s.finish()
    }
}
