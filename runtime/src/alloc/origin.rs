//! Where each allocation was made ([`AllocOrigin`]): the caller's source line, the tensor op (or
//! `Device::allocate`) that allocated, and the tensor's shape.
//!
//! Tensor constructors and ops are `#[track_caller]` and open an op frame ([`enter_op`]) on
//! their first line; the outermost frame of the thread names the op and the line the user
//! called it from, so an op that calls other ops (softmax calling exp, backward calling
//! matmul) attributes everything it allocates to the user's call. The tensor allocation helper
//! adds the shape. Without a frame (raw `Device::allocate`, `CachingAllocator::allocate`), the
//! caller of the allocation function is the origin.
//!
//! The origin of a live block is kept on the block (for the out-of-memory error's largest live
//! allocations and for snapshots) and copied into the trace's alloc and free events while the
//! trace is recording. It owns no allocator state.

use serde::Serialize;
use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::Arc;

/// Where an allocation was made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AllocOrigin {
    /// Source file of the call that allocated: the user's call of the outermost tensor
    /// constructor or op (they are `#[track_caller]`), or of `Device::allocate`.
    pub file: &'static str,
    /// Line in [`AllocOrigin::file`].
    pub line: u32,
    /// Column in [`AllocOrigin::file`].
    pub column: u32,
    /// The op the user called (`"matmul"`, `"zeros"`, `"backward"`, ...), or `"allocate"` for a
    /// raw allocation.
    pub op: &'static str,
    /// Shape of the tensor the memory was allocated for (`None` for a raw allocation).
    #[serde(serialize_with = "serialize_shape")]
    pub shape: Option<Arc<[usize]>>,
}

fn serialize_shape<S: serde::Serializer>(
    shape: &Option<Arc<[usize]>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match shape {
        Some(dims) => s.collect_seq(dims.iter()),
        None => s.serialize_none(),
    }
}

/// The op name of raw allocations (no tensor op frame).
pub(crate) const RAW_OP: &str = "allocate";

impl AllocOrigin {
    /// An origin at `location` for op `op`.
    pub(crate) fn at(location: &'static Location<'static>, op: &'static str) -> Self {
        AllocOrigin {
            file: location.file(),
            line: location.line(),
            column: location.column(),
            op,
            shape: None,
        }
    }

    /// The origin of an allocation requested at `location` (the caller of the allocation
    /// function) by `op`: the thread's outermost op frame if one is open, else `location`.
    pub(crate) fn current(location: &'static Location<'static>, op: &'static str) -> Self {
        match OP_FRAME.try_with(Cell::get).ok().flatten() {
            Some(frame) => AllocOrigin::at(frame.location, frame.op),
            None => AllocOrigin::at(location, op),
        }
    }

    /// `file:line`.
    pub fn source_line(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

impl std::fmt::Display for AllocOrigin {
    /// `src/model.rs:42 (matmul [8, 512, 768])`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} ({}", self.file, self.line, self.op)?;
        if let Some(shape) = &self.shape {
            write!(f, " {shape:?}")?;
        }
        f.write_str(")")
    }
}

#[derive(Clone, Copy)]
struct OpFrame {
    op: &'static str,
    location: &'static Location<'static>,
}

thread_local! {
    /// The outermost tensor op running on this thread.
    static OP_FRAME: Cell<Option<OpFrame>> = const { Cell::new(None) };
}

/// Opens the op frame of tensor op `op` called from the caller's caller (the op itself is
/// `#[track_caller]`), unless one is already open; closed when the guard drops.
#[track_caller]
#[inline]
pub(crate) fn enter_op(op: &'static str) -> OpFrameGuard {
    let location = Location::caller();
    let opened = OP_FRAME
        .try_with(|frame| {
            if frame.get().is_some() {
                return false;
            }
            frame.set(Some(OpFrame { op, location }));
            true
        })
        .unwrap_or(false);
    OpFrameGuard {
        opened,
        _not_send: PhantomData,
    }
}

/// Closes the op frame [`enter_op`] opened, if it opened one.
#[must_use = "the op frame closes when the guard drops"]
pub(crate) struct OpFrameGuard {
    opened: bool,
    _not_send: PhantomData<*const ()>,
}

impl Drop for OpFrameGuard {
    #[inline]
    fn drop(&mut self) {
        if self.opened {
            let _ = OP_FRAME.try_with(|frame| frame.set(None));
        }
    }
}
