//! N-dimensional `f32` tensors over storage from the caching allocator, with reverse-mode autograd.
//!
//! A [`Tensor`] is a cheap handle (`Clone` shares everything, like PyTorch's Python objects):
//! shape, strides and offset over an `Arc`'d [`Storage`] whose bytes come from
//! [`Device::allocate`], so every byte a tensor holds shows up in
//! [`crate::memory::stats`]. Views ([`Tensor::reshape`] when possible, [`Tensor::transpose`],
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

mod autograd;
mod backend;
mod consuming;
mod inspect;
mod kernels;
pub mod liveness;
mod ops;
mod overload;
pub mod rng;

pub(crate) use backend::{adam_step, AdamStep};
pub use liveness::{LivenessBound, LivenessRecorder};
pub use ops::Rhs;

use crate::alloc::OutOfMemory;
use crate::device::{Allocation, DeviceError};
use crate::Device;
use autograd::Node;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Element type of a tensor. Only `f32` is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
        }
    }
}

/// Errors of tensor operations. Each message says what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    /// Two shapes that an op cannot combine.
    #[error("{op}: shapes {lhs:?} and {rhs:?} are incompatible: {reason}")]
    ShapeMismatch {
        /// The op.
        op: &'static str,
        /// Shape of the left operand.
        lhs: Vec<usize>,
        /// Shape of the right operand.
        rhs: Vec<usize>,
        /// Why.
        reason: String,
    },
    /// A dimension index beyond the tensor's rank.
    #[error("{op}: dimension {dim} is out of range for a tensor of shape {shape:?} (rank {rank})", rank = shape.len())]
    DimOutOfRange {
        /// The op.
        op: &'static str,
        /// The dimension asked for.
        dim: usize,
        /// Shape of the tensor.
        shape: Vec<usize>,
    },
    /// Any other invalid argument.
    #[error("{op}: {message} (tensor shape {shape:?})")]
    InvalidArgument {
        /// The op.
        op: &'static str,
        /// Shape of the tensor involved.
        shape: Vec<usize>,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Slice length does not match the shape.
    #[error("{op}: {len} values cannot fill shape {shape:?}, which holds {expected}")]
    DataLength {
        /// The op.
        op: &'static str,
        /// Values given.
        len: usize,
        /// Shape asked for.
        shape: Vec<usize>,
        /// Values the shape holds.
        expected: usize,
    },
    /// The op has no kernel on this device.
    #[error("op {op} is not implemented on device {device}; move the tensor to a host device (Tensor::to_device)")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// The device, as `Debug` prints it.
        device: String,
    },
    /// Operands live on different devices.
    #[error("{op}: operands are on different devices ({lhs} and {rhs}); move one of them first")]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// Device of the left operand.
        lhs: String,
        /// Device of the right operand.
        rhs: String,
    },
    /// The allocator could not provide the memory.
    #[error(transparent)]
    OutOfMemory(#[from] OutOfMemory),
    /// The device could not be opened (no CUDA driver, no such GPU, a driver call failed).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A tensor of another rank than the op needs.
    #[error("{op}: expected a tensor of rank {expected}, found shape {shape:?} (rank {rank}); reshape or index it first", rank = shape.len())]
    RankMismatch {
        /// The op.
        op: &'static str,
        /// The rank the op needs.
        expected: usize,
        /// Shape of the tensor.
        shape: Vec<usize>,
    },
    /// `backward` was called on a tensor with more than one element.
    #[error("backward: the tensor has shape {shape:?}; backward needs a single-element tensor (reduce it first, e.g. with sum_all() or mean_all())")]
    BackwardOnNonScalar {
        /// Shape of the tensor.
        shape: Vec<usize>,
    },
    /// `backward_for` was given no tensors to differentiate.
    #[error("backward_for: no tensors to differentiate were given; pass the parameters whose gradients you want (e.g. an optimizer's), or call backward() for every leaf")]
    BackwardForNothing,
    /// `backward_for` was given a tensor that is not a leaf requiring grad.
    #[error("backward_for: input {index} (shape {shape:?}) is not a leaf that requires grad, so no gradient is stored for it; pass parameters (tensors created with requires_grad, not results of ops)")]
    BackwardForNotALeaf {
        /// Position of the tensor in the slice.
        index: usize,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// `backward` on a tensor that no gradient flows into.
    #[error("backward: the tensor does not require grad and has no graph; create leaves with requires_grad (e.g. `w.set_requires_grad(true)`) and compute the loss with grad mode on")]
    NoGraph,
    /// A tensor saved for backward was modified in place after it was saved.
    #[error("{op}'s saved {what} was modified in place by {by} after it was saved (version {saved} -> {now}); use the out-of-place op, or clone the tensor before the in-place op")]
    SavedTensorModified {
        /// Op whose backward needs the tensor.
        op: &'static str,
        /// Which of its tensors ("input", "output", "weight", …).
        what: &'static str,
        /// The in-place op that wrote it last.
        by: &'static str,
        /// Version when saved.
        saved: u64,
        /// Version now.
        now: u64,
    },
    /// `backward` ran a second time through a graph whose saved tensors were freed.
    #[error("backward through {op} a second time: its saved tensors were freed by the first backward; recompute the forward pass")]
    GraphFreed {
        /// The op.
        op: &'static str,
    },
    /// In-place op on a leaf that requires grad, with grad mode on.
    #[error("{op} on a leaf tensor that requires grad while grad mode is on; update parameters under no_grad (optimizers do), or use the out-of-place op")]
    InplaceOnLeaf {
        /// The in-place op.
        op: &'static str,
    },
    /// An in-place op whose gradient cannot be recorded.
    #[error("{op}: {reason}; use the out-of-place op")]
    InplaceNotDifferentiable {
        /// The in-place op.
        op: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// The device backend failed (the CUDA runtime compiler or cuBLAS missing, a launch
    /// refused, a copy failed).
    #[error("{op} on {device}: {message}")]
    Backend {
        /// The op.
        op: &'static str,
        /// The device, as `Debug` prints it.
        device: String,
        /// What failed, and what to do about it.
        message: String,
    },
    /// An index outside its range (embedding ids, cross-entropy targets, narrow bounds).
    #[error("{op}: index {index} is out of range for size {size}")]
    IndexOutOfRange {
        /// The op.
        op: &'static str,
        /// The index.
        index: usize,
        /// The size of the indexed dimension.
        size: usize,
    },
}

/// Result of tensor operations.
pub type Result<T, E = TensorError> = std::result::Result<T, E>;

/// Reference-counted memory of one or more tensors: one allocator block, its element count,
/// and a version counter bumped by every in-place write.
pub struct Storage {
    /// Process-unique id (addresses are reused after a free; ids are not).
    id: u64,
    /// Stored as a leaf's gradient (for the liveness bound, which keeps those until freed).
    held_as_grad: AtomicBool,
    allocation: Allocation,
    numel: usize,
    dtype: DType,
    version: AtomicU64,
    /// In-place writes that were recorded (rewrote the target's autograd history). Other
    /// handles on this storage (views, detached copies) made before such a write have stale
    /// history; see [`Tensor::has_stale_history`].
    history_rewrites: AtomicU64,
    last_writer: Mutex<&'static str>,
    // Readers (kernels reading inputs) take it shared, in-place writers exclusively, so that
    // clones shared across threads never race.
    lock: RwLock<()>,
}

impl Storage {
    /// Storage for a tensor of `shape` (`numel` elements) made by op `op`.
    #[track_caller]
    fn new(
        device: &Device,
        numel: usize,
        shape: &[usize],
        op: &'static str,
    ) -> Result<Arc<Storage>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let allocation = device.allocate_tensor(numel * DType::F32.size_in_bytes(), shape, op)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        liveness::on_alloc(id, allocation.size());
        Ok(Arc::new(Storage {
            id,
            held_as_grad: AtomicBool::new(false),
            allocation,
            numel,
            dtype: DType::F32,
            version: AtomicU64::new(0),
            history_rewrites: AtomicU64::new(0),
            last_writer: Mutex::new("an in-place op"),
            lock: RwLock::new(()),
        }))
    }

    /// Elements held.
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes held (the allocator's rounded block size).
    pub fn size_in_bytes(&self) -> usize {
        self.allocation.size()
    }

    /// Number of in-place writes so far.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The device the storage lives on.
    pub fn device(&self) -> &Device {
        self.allocation.device()
    }

    /// Address of the first element in the device's address space (a host pointer on host
    /// devices), for the device backends.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_addr(&self) -> u64 {
        self.allocation.addr()
    }

    /// Ends a use of the storage by a device kernel (for the liveness bound, as dropping a host
    /// read or write does).
    #[cfg(feature = "cuda")]
    pub(crate) fn note_use_end(&self) {
        liveness::on_use_end(self.id);
    }

    fn base_ptr(&self, op: &'static str) -> Result<*mut f32> {
        self.allocation
            .host_ptr()
            .map(|p| p.cast::<f32>())
            .ok_or_else(|| TensorError::Unsupported {
                op,
                device: format!("{:?}", self.allocation.device()),
            })
    }

    pub(crate) fn read(&self, op: &'static str) -> Result<StorageRead<'_>> {
        let ptr = self.base_ptr(op)?;
        let guard = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let _ = READS_HELD.try_with(|held| held.borrow_mut().push(self.id));
        // SAFETY: the allocation holds `numel` f32s (it was allocated for them, host
        // allocations are aligned to at least 64 bytes) and lives as long as `self`; the shared
        // lock excludes in-place writers for the lifetime of the slice.
        let data = unsafe { std::slice::from_raw_parts(ptr.cast_const(), self.numel) };
        Ok(StorageRead {
            _guard: guard,
            data,
            storage_id: self.id,
        })
    }

    pub(crate) fn write(&self, op: &'static str) -> Result<StorageWrite<'_>> {
        let ptr = self.base_ptr(op)?;
        // Waiting for the exclusive lock while this thread holds the shared one (an in-place op
        // inside `with_host_slice`'s closure) would never return.
        if READS_HELD
            .try_with(|held| held.borrow().contains(&self.id))
            .unwrap_or(false)
        {
            return Err(TensorError::InvalidArgument {
                op,
                shape: Vec::new(),
                message: "the tensor's storage is being read on this thread (inside \
                          with_host_slice?); write to it after the read ends"
                    .into(),
            });
        }
        let guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: as in `read`; the exclusive lock guarantees no other slice of this storage
        // exists while this one does.
        let data = unsafe { std::slice::from_raw_parts_mut(ptr, self.numel) };
        Ok(StorageWrite {
            _guard: guard,
            data,
            storage_id: self.id,
        })
    }

    /// Mutable access to storage nobody else can reach (just allocated, or uniquely owned).
    fn fresh_mut(&mut self, op: &'static str) -> Result<&mut [f32]> {
        let ptr = self.base_ptr(op)?;
        liveness::on_use_end(self.id);
        // SAFETY: `&mut self` proves exclusive access; the block holds `numel` aligned f32s.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.numel) })
    }

    pub(crate) fn bump_version(&self, by: &'static str) {
        *self.last_writer.lock().unwrap_or_else(|e| e.into_inner()) = by;
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn history_rewrites(&self) -> u64 {
        self.history_rewrites.load(Ordering::Acquire)
    }

    fn last_writer(&self) -> &'static str {
        *self.last_writer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("numel", &self.numel)
            .field("bytes", &self.size_in_bytes())
            .field("version", &self.version())
            .finish()
    }
}

thread_local! {
    /// Ids of the storages this thread holds read locks on (one entry per lock).
    static READS_HELD: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) struct StorageRead<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    pub(crate) data: &'a [f32],
    storage_id: u64,
}

pub(crate) struct StorageWrite<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    pub(crate) data: &'a mut [f32],
    storage_id: u64,
}

// A use ends when the kernel releases its access: after it wrote its output, so an op's
// inputs and output overlap in the liveness bound.
impl Drop for StorageRead<'_> {
    fn drop(&mut self) {
        let _ = READS_HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(pos) = held.iter().rposition(|&id| id == self.storage_id) {
                held.swap_remove(pos);
            }
        });
        liveness::on_use_end(self.storage_id);
    }
}

impl Drop for StorageWrite<'_> {
    fn drop(&mut self) {
        liveness::on_use_end(self.storage_id);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        liveness::on_free(
            self.id,
            self.allocation.size(),
            self.held_as_grad.load(Ordering::Relaxed),
        );
    }
}

/// Read locks on the distinct storages of several tensors, taken in address order (so that
/// concurrent readers and writers cannot deadlock, and a storage shared by two operands is
/// locked once).
pub(crate) struct ReadSet<'a> {
    guards: Vec<(*const Storage, StorageRead<'a>)>,
}

impl<'a> ReadSet<'a> {
    pub(crate) fn new(op: &'static str, tensors: &[&'a Tensor]) -> Result<ReadSet<'a>> {
        let mut storages: Vec<&'a Arc<Storage>> = tensors.iter().map(|t| t.storage()).collect();
        storages.sort_by_key(|s| Arc::as_ptr(s));
        storages.dedup_by_key(|s| Arc::as_ptr(s));
        let guards = storages
            .into_iter()
            .map(|s| Ok((Arc::as_ptr(s), s.read(op)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ReadSet { guards })
    }

    /// The whole storage of `t`, which must be one of the tensors the set was made from.
    pub(crate) fn storage_of(&self, t: &Tensor) -> &[f32] {
        let key = Arc::as_ptr(t.storage());
        self.guards
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&[], |(_, g)| g.data)
    }

    /// The elements of contiguous `t` (its window of the storage).
    pub(crate) fn contiguous_data(&self, t: &Tensor) -> &[f32] {
        let data = self.storage_of(t);
        let start = t.offset().min(data.len());
        let end = (t.offset() + t.elem_count()).min(data.len());
        &data[start..end]
    }
}

/// Shape, element strides and offset of a tensor into its storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) offset: usize,
}

impl Layout {
    pub(crate) fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub(crate) fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }
}

/// Elements in `shape`, or a typed error when their count (or byte size) overflows `usize`.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| n.checked_mul(DType::F32.size_in_bytes()).is_some())
        .ok_or_else(|| TensorError::InvalidArgument {
            op,
            shape: shape.to_vec(),
            message: "the shape holds more elements than any memory can; check the dimensions"
                .into(),
        })
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d;
    }
    strides
}

pub(crate) struct Inner {
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
pub struct Tensor(pub(crate) Arc<Inner>);

impl Tensor {
    pub(crate) fn from_parts(storage: Arc<Storage>, layout: Layout, is_view: bool) -> Tensor {
        let history_seen = AtomicU64::new(storage.history_rewrites());
        Tensor(Arc::new(Inner {
            storage,
            layout,
            is_view,
            leaf_requires_grad: AtomicBool::new(false),
            history_seen,
            grad_fn: Mutex::new(None),
            grad: Mutex::new(None),
        }))
    }

    /// An uninitialised contiguous tensor; callers fill every element before handing it out.
    #[track_caller]
    pub(crate) fn alloc_with(
        device: &Device,
        shape: &[usize],
        op: &'static str,
        fill: impl FnOnce(&mut [f32]) -> Result<()>,
    ) -> Result<Tensor> {
        backend::alloc_with(device, shape, op, fill)
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
        backend::full(device, shape, value)
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
        backend::upload(device, shape, "from_slice", data)
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
        backend::to_vec(self, "to_vec")
    }

    /// A copy of `self` on `device` (contiguous; `self` itself when it is already there).
    /// Recorded like any op: the gradient flows back to `self`'s device.
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device() == device {
            return Ok(self.clone());
        }
        // Through host memory: to_vec downloads (or reads) and upload copies in.
        let data = self.to_vec()?;
        let out = backend::upload(device, self.dims(), "to_device", &data)?;
        autograd::record(&out, "to_device", &[self], || {
            autograd::Backward::ToDevice {
                device: self.device().clone(),
            }
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

    /// Marks a recorded in-place write through this handle: other handles on the storage
    /// become stale, this one (and its clones) stays current.
    pub(crate) fn note_history_rewrite(&self) {
        let now = self
            .storage()
            .history_rewrites
            .fetch_add(1, Ordering::AcqRel)
            + 1;
        self.0.history_seen.store(now, Ordering::Release);
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

    /// Whether `self` could be overwritten without anyone observing it: the handle and the
    /// storage are uniquely owned, `self` covers its whole storage contiguously, and it is not a
    /// leaf requiring grad.
    pub(crate) fn is_exclusively_owned(&mut self) -> bool {
        let leaf_rg = self.0.leaf_requires_grad.load(Ordering::Acquire);
        let Some(inner) = Arc::get_mut(&mut self.0) else {
            return false;
        };
        !leaf_rg
            && inner.layout.offset == 0
            && inner.layout.is_contiguous()
            && inner.layout.numel() == inner.storage.numel
            && Arc::get_mut(&mut inner.storage).is_some()
    }
}

fn unreachable_error(op: &'static str, what: &str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        shape: Vec::new(),
        message: format!("internal invariant violated ({what}); please report this"),
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
