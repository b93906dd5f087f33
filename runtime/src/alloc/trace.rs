//! The bounded event trace, the thread-local trace label, and snapshots of segments and blocks.

use super::MemoryStats;
use serde::Serialize;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

thread_local! {
    static LABEL: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Sets the label recorded with this thread's allocator events (e.g. the batch-scope name);
/// `None` clears it. Returns the previous label.
pub fn set_trace_label(label: Option<&str>) -> Option<Arc<str>> {
    LABEL.with(|l| l.replace(label.map(Arc::from)))
}

/// The current thread's trace label.
pub fn trace_label() -> Option<Arc<str>> {
    LABEL.with(|l| l.borrow().clone())
}

/// Sets the trace label until dropped, then restores the previous one (nesting-safe).
#[must_use = "the label is cleared when the guard is dropped"]
pub struct TraceLabelGuard {
    previous: Option<Arc<str>>,
}

impl TraceLabelGuard {
    /// Labels this thread's allocator events with `label` while the guard lives.
    pub fn new(label: &str) -> Self {
        Self {
            previous: set_trace_label(Some(label)),
        }
    }
}

impl Drop for TraceLabelGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        LABEL.with(|l| *l.borrow_mut() = previous);
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
    /// The thread's trace label at the time, if any.
    #[serde(serialize_with = "serialize_label")]
    pub label: Option<Arc<str>>,
    /// `allocated_bytes` after the event.
    pub allocated_bytes: u64,
    /// `reserved_bytes` after the event.
    pub reserved_bytes: u64,
}

fn serialize_label<S: serde::Serializer>(
    label: &Option<Arc<str>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match label {
        Some(l) => s.serialize_some(&**l),
        None => s.serialize_none(),
    }
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
