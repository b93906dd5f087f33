//! The error type of every tensor layer.

use crate::alloc::OutOfMemory;
use crate::device::DeviceError;

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
    /// The allocator could not provide the memory. Its text is the allocator's; the
    /// [`OutOfMemory`] is also the error's source, so that code which sees only a boxed error
    /// (the largest-batch search) finds it in the source chain.
    #[error("{0}")]
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

/// An error for a broken internal invariant (a bug, reported as such rather than a panic).
pub(crate) fn unreachable_error(op: &'static str, what: &str) -> TensorError {
    TensorError::InvalidArgument {
        op,
        shape: Vec::new(),
        message: format!("internal invariant violated ({what}); please report this"),
    }
}

impl vramguard_memory::memory::MaybeOutOfMemory for TensorError {
    fn is_out_of_memory(&self) -> bool {
        matches!(self, TensorError::OutOfMemory(_))
    }
}
