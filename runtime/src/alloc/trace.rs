//! The bounded event trace, the labels its events carry, and snapshots of segments and blocks.
//! The thread's current label is kept here, where the allocator records it; `crate::scope`'s
//! tags and batch scopes set it ([`push_label`], [`restore_label`]).

use super::{AllocOrigin, MemoryStats};
use serde::Serialize;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// The labels active on a thread when an allocator event happened, outermost first: batch-scope
/// iterations (`#[batch_scope]`, [`crate::scope::BatchScope`]) and tags ([`crate::scope::tag`]).
/// Both feed this one label, so a tag inside a batch scope reads `train #3 / generator`.
///
/// Cloning is cheap (one reference count); it serializes as its text.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TraceLabel(Arc<LabelFrame>);

/// One frame of a [`TraceLabel`]: a tag, or one iteration of a batch scope.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LabelFrame {
    /// The tag, or the batch scope's label.
    pub name: Arc<str>,
    /// The batch scope's iteration (1-based); `None` for a tag.
    pub iteration: Option<u64>,
    parent: Option<TraceLabel>,
}

impl TraceLabel {
    /// `parent` with the frame `name` (and, for a batch scope, `iteration`) inside it.
    pub(crate) fn nested(
        parent: Option<TraceLabel>,
        name: Arc<str>,
        iteration: Option<u64>,
    ) -> Self {
        TraceLabel(Arc::new(LabelFrame {
            name,
            iteration,
            parent,
        }))
    }

    /// The innermost frame.
    pub fn innermost(&self) -> &LabelFrame {
        &self.0
    }

    /// The frames, outermost first.
    pub fn frames(&self) -> Vec<&LabelFrame> {
        let mut frames = Vec::new();
        let mut at = Some(self);
        while let Some(label) = at {
            frames.push(&*label.0);
            at = label.0.parent.as_ref();
        }
        frames.reverse();
        frames
    }

    /// The innermost batch-scope frame: the scope's label and its iteration.
    pub fn batch_scope(&self) -> Option<(&str, u64)> {
        let mut at = Some(self);
        while let Some(label) = at {
            if let Some(iteration) = label.0.iteration {
                return Some((&label.0.name, iteration));
            }
            at = label.0.parent.as_ref();
        }
        None
    }

    /// The innermost frame's name when it is a tag (`None` when it is a batch scope).
    pub fn tag(&self) -> Option<&str> {
        let frame = &self.0;
        frame.iteration.is_none().then_some(&*frame.name)
    }

    /// [`TraceLabel::tag`], shared.
    pub(crate) fn tag_name(&self) -> Option<Arc<str>> {
        self.0.iteration.is_none().then(|| Arc::clone(&self.0.name))
    }
}

impl fmt::Display for TraceLabel {
    /// `train #3 / generator`: frames outermost first, batch-scope iterations after `#`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(parent) = &self.0.parent {
            write!(f, "{parent} / ")?;
        }
        f.write_str(&self.0.name)?;
        if let Some(iteration) = self.0.iteration {
            write!(f, " #{iteration}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TraceLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceLabel({self})")
    }
}

impl Serialize for TraceLabel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceEventKind {
    /// A block was handed out.
    Alloc,
    /// A block was returned.
    Free,
    /// A segment was obtained from the backend.
    SegmentAlloc,
    /// A segment was returned to the backend.
    SegmentFree,
    /// A request failed with out-of-memory.
    Oom,
}

/// One allocator event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEvent {
    /// What happened.
    pub kind: TraceEventKind,
    /// Address of the block or segment (0 for an OOM).
    pub addr: u64,
    /// Bytes of the block or segment (the rounded request for an OOM).
    pub size: u64,
    /// Nanoseconds since the allocator was created.
    pub time_ns: u64,
    /// The labels active on the thread at the time (batch-scope iteration, tags), if any.
    pub label: Option<TraceLabel>,
    /// Where the block was made (alloc and free events; `None` for segment and OOM events).
    pub origin: Option<AllocOrigin>,
    /// `allocated_bytes` after the event.
    pub allocated_bytes: u64,
    /// `reserved_bytes` after the event.
    pub reserved_bytes: u64,
}

/// A ring of the most recent events.
#[derive(Debug, Default)]
pub(crate) struct TraceRing {
    capacity: usize,
    events: VecDeque<TraceEvent>,
    dropped: u64,
}

impl TraceRing {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: VecDeque::with_capacity(capacity.min(1 << 16)),
            dropped: 0,
        }
    }
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }
    pub(crate) fn push(&mut self, event: TraceEvent) {
        if self.capacity == 0 {
            return;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }
    pub(crate) fn to_trace(&self) -> Trace {
        Trace {
            capacity: self.capacity,
            dropped: self.dropped,
            events: self.events.iter().cloned().collect(),
        }
    }
    pub(crate) fn clear(&mut self) {
        self.events.clear();
        self.dropped = 0;
    }
}

/// A copy of the trace ring, oldest event first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trace {
    /// Ring length; older events were overwritten.
    pub capacity: usize,
    /// Events overwritten since the trace was last cleared.
    pub dropped: u64,
    /// The events, oldest first.
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// The trace as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Which pool a segment belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Requests up to 1 MiB, carved from 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

/// One block in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockSnapshot {
    /// Address of the first byte.
    pub addr: u64,
    /// Block size.
    pub size: u64,
    /// Whether the block is handed out.
    pub allocated: bool,
    /// Bytes asked for (0 for a free block).
    pub requested: u64,
    /// Allocation id (0 for a free block).
    pub id: u64,
    /// Where the block was made (`None` for a free block).
    pub origin: Option<AllocOrigin>,
}

/// One segment in a snapshot, with its blocks in address order (they tile it exactly).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentSnapshot {
    /// Address of the segment.
    pub addr: u64,
    /// Segment size.
    pub size: u64,
    /// Pool it serves.
    pub pool: PoolKind,
    /// Whether this is the pool's expandable segment (its size is the mapped part).
    pub expandable: bool,
    /// Blocks, by address.
    pub blocks: Vec<BlockSnapshot>,
}

/// The allocator's segments and blocks at one moment, with its statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemorySnapshot {
    /// Device name.
    pub device: String,
    /// Whether the allocator's large pool uses an expandable segment (see
    /// [`crate::alloc::CachingAllocator::uses_expandable_segments`]).
    pub expandable_segments: bool,
    /// Statistics at the moment of the snapshot.
    pub stats: MemoryStats,
    /// Segments by address.
    pub segments: Vec<SegmentSnapshot>,
}

impl MemorySnapshot {
    /// The snapshot as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

thread_local! {
    /// This thread's label: its tags and batch-scope iterations.
    static LABEL: RefCell<Option<TraceLabel>> = const { RefCell::new(None) };
}

/// Makes `name` (with `iteration` for a batch scope) the innermost frame of this thread's
/// label; returns the label it replaced.
pub(crate) fn push_label(name: Arc<str>, iteration: Option<u64>) -> Option<TraceLabel> {
    LABEL
        .try_with(|label| {
            let mut label = label.borrow_mut();
            let nested = TraceLabel::nested(label.clone(), name, iteration);
            label.replace(nested)
        })
        .ok()
        .flatten()
}

/// Makes `previous` (what [`push_label`] returned) this thread's label again.
pub(crate) fn restore_label(previous: Option<TraceLabel>) {
    let _ = LABEL.try_with(|label| *label.borrow_mut() = previous);
}

/// Nanoseconds on the monotonic clock (the one `Instant` reads: `CLOCK_MONOTONIC` on Unix),
/// read directly: the trace stamps every event it records, and `Instant::elapsed`'s checked
/// arithmetic takes more instructions than the read itself.
#[cfg(unix)]
#[inline]
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC exists on every Unix we build
    // for, and on a failure `ts` stays zero (a time of 0, never undefined behaviour).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Nanoseconds on the monotonic clock, since the first call in this process.
#[cfg(not(unix))]
pub(crate) fn monotonic_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// This thread's label (tags and batch-scope iterations), recorded with allocator events.
pub(crate) fn thread_label() -> Option<TraceLabel> {
    // `try_borrow`: the tracking allocator asks from inside allocations, which may be made
    // while the label is being replaced.
    LABEL
        .try_with(|label| label.try_borrow().ok().and_then(|l| l.clone()))
        .ok()
        .flatten()
}
