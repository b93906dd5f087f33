//! The bounded event trace, the labels its events carry, and snapshots of segments and blocks.
//! The thread's current label is kept here, where the allocator records it; `crate::scope`'s
//! tags and batch scopes set it ([`push_label`], [`restore_label`]).

mod event_clock;
mod html;
#[cfg(unix)]
mod label_bridge;
mod memory_viz;
mod origin;
mod pickle;
pub mod timeline;

use crate::MemoryStats;
pub use event_clock::read_stamp;
use event_clock::EventClock;
pub use html::html_report;
#[cfg(unix)]
pub use label_bridge::offer_label_source;
pub use memory_viz::snapshot_pickle;
pub use origin::AllocOrigin;
pub use origin::{enter_op, BlockOrigin, RequestOrigin, Sites, RAW_OP};
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::Arc;

/// The labels active on a thread when an allocator event happened, outermost first: batch-scope
/// iterations (`#[batch_scope]`, `vramguard::scope::BatchScope`) and tags (`vramguard::scope::tag`).
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
    pub fn nested(parent: Option<TraceLabel>, name: Arc<str>, iteration: Option<u64>) -> Self {
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
    #[doc(hidden)]
    pub fn tag_name(&self) -> Option<Arc<str>> {
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
    /// Nanoseconds since the allocator was created. Recorded as a time-stamp counter reading
    /// where the kernel keeps time with that counter, and converted when the trace is read
    /// (to within the gap between reading the counter and the clock, tens of nanoseconds: two
    /// reads of one trace may differ by that much; the order of events never changes).
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

/// An event as the ring keeps it until the trace is read: its origin as the block keeps it (an
/// interned call site, see `origin.rs`), its time as a stamp of the ring's clock, its label as
/// an index into the ring's table of labels. Recording pays for neither the origin's record nor
/// the time's conversion nor a reference count per label; [`TraceRing::to_trace`] does all three.
#[doc(hidden)]
pub struct RingEvent {
    /// What happened.
    pub kind: TraceEventKind,
    /// Index of the event's label in its ring's table (0: none); set by the ring.
    pub label: u32,
    /// The block's or segment's address.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
    /// A stamp of the ring's `EventClock`, or nanoseconds for a ring without one.
    pub time: u64,
    /// Where the allocation was made.
    pub origin: BlockOrigin,
    /// Allocated bytes after the event.
    pub allocated_bytes: u64,
    /// Reserved bytes after the event.
    pub reserved_bytes: u64,
}

impl RingEvent {
    /// An event without an origin, at `time_ns` (for a ring built by [`TraceRing::new`]).
    #[doc(hidden)]
    pub fn without_origin(
        kind: TraceEventKind,
        addr: u64,
        size: u64,
        time_ns: u64,
        bytes: u64,
    ) -> Self {
        RingEvent {
            kind,
            label: NO_LABEL,
            addr,
            size,
            time: time_ns,
            origin: BlockOrigin::default(),
            allocated_bytes: bytes,
            reserved_bytes: bytes,
        }
    }
}

/// The label index of an event without a label.
#[doc(hidden)]
pub const NO_LABEL: u32 = 0;

/// The size of a ring's label table below which labels no event refers to are kept.
const LABELS_KEPT: usize = 64;

/// Labels a new one is compared with, the most recent first, before it gets an entry of its
/// own (a label entered twice is harmless: both entries hold the same `Arc`).
const LABELS_SEARCHED: usize = 16;

/// A ring of the most recent events.
#[doc(hidden)]
pub struct TraceRing {
    capacity: usize,
    /// Up to `capacity` events; once full, the oldest is at `oldest` and each new event
    /// overwrites it in place.
    events: Vec<RingEvent>,
    oldest: usize,
    /// The labels events refer to by index ([`RingEvent::label`]); entry 0 is no label. Once the
    /// table holds `compact_at` entries, those no event refers to are dropped
    /// ([`Self::compact_labels`]).
    labels: Vec<Option<TraceLabel>>,
    compact_at: usize,
    /// The identity ([`label_id`]) and index of the label the last event took. A loop's events
    /// share their iteration's label, so an event usually compares one word and stores an
    /// index: no reference count, and nothing to undo when it is overwritten. The entry is
    /// alive while cached (compaction keeps it), so no other label has its identity.
    last_label: (usize, u32),
    dropped: u64,
    /// The clock of a ring whose events' times are stamps until [`TraceRing::to_trace`]
    /// converts them (the allocator's); `None`: times are nanoseconds already.
    clock: Option<EventClock>,
}

impl TraceRing {
    /// A ring whose events come with their times.
    #[doc(hidden)]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: Vec::with_capacity(capacity.min(1 << 16)),
            oldest: 0,
            labels: vec![None],
            compact_at: LABELS_KEPT,
            last_label: (0, NO_LABEL),
            dropped: 0,
            clock: None,
        }
    }
    /// A ring whose events are stamped by [`TraceRing::stamp`], their times counting from
    /// `origin_ns` on the monotonic clock.
    #[doc(hidden)]
    pub fn stamped(capacity: usize, origin_ns: u64) -> Self {
        Self {
            clock: (capacity > 0).then(|| EventClock::new(origin_ns)),
            ..Self::new(capacity)
        }
    }
    /// Whether the ring records (a capacity above 0).
    #[inline]
    #[doc(hidden)]
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }
    /// The time of an event happening now (0 for a ring built by [`TraceRing::new`], whose
    /// events come with their times).
    #[inline]
    #[doc(hidden)]
    pub fn stamp(&mut self) -> u64 {
        self.clock.as_mut().map_or(0, EventClock::stamp)
    }
    /// The stamp of an event whose call read `read` (`stamp_read`).
    #[inline]
    #[doc(hidden)]
    pub fn stamp_read(&mut self, read: u64) -> u64 {
        self.clock
            .as_mut()
            .map_or(0, |clock| clock.stamp_read(read))
    }
    /// The place of an event made now on this thread, and the index of the thread's label, for
    /// the caller to write the event into: once the ring is full, the oldest event's place, so
    /// the event is written once, where it stays, instead of built and then copied (`None` when
    /// the ring keeps nothing).
    #[inline(always)]
    #[doc(hidden)]
    pub fn place_now(&mut self) -> Option<(&mut RingEvent, u32)> {
        let at = self.next_slot()?;
        let identity = LABEL_ID.try_with(Cell::get).unwrap_or(0);
        let label = if identity == self.last_label.0 {
            self.last_label.1
        } else {
            self.index_now(thread_label())
        };
        Some((self.events.get_mut(at)?, label))
    }
    /// The index of `label`, entered in the table if it is not among its recent entries; it
    /// becomes the cached last label.
    #[cold]
    #[inline(never)]
    fn index_now(&mut self, label: Option<TraceLabel>) -> u32 {
        let identity = label_id(label.as_ref());
        let index = match label {
            None => NO_LABEL,
            Some(label) => {
                let recent = self.labels.len().saturating_sub(LABELS_SEARCHED).max(1);
                match (recent..self.labels.len())
                    .rev()
                    .find(|&i| same_label(self.labels[i].as_ref(), Some(&label)))
                {
                    Some(i) => i as u32,
                    None => {
                        if self.labels.len() >= self.compact_at {
                            self.compact_labels();
                        }
                        self.labels.push(Some(label));
                        (self.labels.len() - 1) as u32
                    }
                }
            }
        };
        self.last_label = (identity, index);
        index
    }
    /// Entries of the label table (entry 0, no label, included).
    #[cfg(test)]
    #[doc(hidden)]
    pub fn label_entries(&self) -> usize {
        self.labels.len()
    }
    /// Drops the labels no event (nor the cache) refers to, and renumbers the rest. The table
    /// may then grow to twice what it kept (64 entries at least) before the next compaction, so
    /// each scan of the ring is shared by at least 32 new labels, and by at least as many as
    /// it kept.
    fn compact_labels(&mut self) {
        let mut used = vec![false; self.labels.len()];
        used[NO_LABEL as usize] = true;
        used[self.last_label.1 as usize] = true;
        for event in &self.events {
            used[event.label as usize] = true;
        }
        let mut renumbered = vec![NO_LABEL; self.labels.len()];
        let mut kept = Vec::new();
        for (i, label) in std::mem::take(&mut self.labels).into_iter().enumerate() {
            if used[i] {
                renumbered[i] = kept.len() as u32;
                kept.push(label);
            }
        }
        for event in &mut self.events {
            event.label = renumbered[event.label as usize];
        }
        self.last_label.1 = renumbered[self.last_label.1 as usize];
        self.compact_at = (2 * kept.len()).max(LABELS_KEPT);
        self.labels = kept;
    }
    /// Adds `event`, made under `label`.
    #[doc(hidden)]
    pub fn push(&mut self, mut event: RingEvent, label: Option<TraceLabel>) {
        if !self.enabled() {
            return;
        }
        event.label = if label_id(label.as_ref()) == self.last_label.0 {
            self.last_label.1
        } else {
            self.index_now(label)
        };
        self.store(event);
    }
    /// Stores `event` in place of the oldest once the ring is full.
    #[inline]
    fn store(&mut self, event: RingEvent) {
        if let Some(at) = self.next_slot() {
            self.events[at] = event;
        }
    }
    /// Where the next event goes: a new place while the ring fills, then the oldest event's;
    /// `None` when the ring keeps nothing.
    #[inline]
    fn next_slot(&mut self) -> Option<usize> {
        if self.capacity == 0 {
            return None;
        }
        if self.events.len() < self.capacity {
            self.events
                .push(RingEvent::without_origin(TraceEventKind::Oom, 0, 0, 0, 0));
            return Some(self.events.len() - 1);
        }
        let at = self.oldest;
        // A compare, not `%`: a division per event costs more than the rest of the push.
        self.oldest += 1;
        if self.oldest == self.capacity {
            self.oldest = 0;
        }
        self.dropped += 1;
        Some(at)
    }
    /// The events as shown, oldest first: origins looked up in `sites` (the allocator's call
    /// sites; `None` for a ring whose events have no origin), times in nanoseconds.
    #[doc(hidden)]
    pub fn to_trace(&self, sites: Option<&Sites>) -> Trace {
        let converter = self.clock.as_ref().map(EventClock::converter);
        Trace {
            capacity: self.capacity,
            dropped: self.dropped,
            events: self.events[self.oldest..]
                .iter()
                .chain(&self.events[..self.oldest])
                .map(|event| TraceEvent {
                    kind: event.kind,
                    addr: event.addr,
                    size: event.size,
                    time_ns: converter
                        .as_ref()
                        .map_or(event.time, |c| c.nanos(event.time)),
                    label: self.labels[event.label as usize].clone(),
                    origin: sites.and_then(|sites| sites.origin(&event.origin)),
                    allocated_bytes: event.allocated_bytes,
                    reserved_bytes: event.reserved_bytes,
                })
                .collect(),
        }
    }
    /// Forgets every event.
    #[doc(hidden)]
    pub fn clear(&mut self) {
        self.events.clear();
        self.oldest = 0;
        self.labels = vec![None];
        self.compact_at = LABELS_KEPT;
        self.last_label = (0, NO_LABEL);
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
    /// [`crate::CachingAllocator::uses_expandable_segments`]).
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
    /// The identity of [`LABEL`] ([`label_id`]), set with it: a recorded event compares it
    /// with the identity of its ring's last label, without borrowing the label.
    static LABEL_ID: Cell<usize> = const { Cell::new(0) };
}

/// A label's identity: the address of its innermost frame (0 for none). Labels alive at the
/// same time have different identities.
fn label_id(label: Option<&TraceLabel>) -> usize {
    label.map_or(0, |l| Arc::as_ptr(&l.0) as usize)
}

/// Makes `name` (with `iteration` for a batch scope) the innermost frame of this thread's
/// label; returns the label it replaced.
#[doc(hidden)]
pub fn push_label(name: Arc<str>, iteration: Option<u64>) -> Option<TraceLabel> {
    #[cfg(unix)]
    offer_label_source();
    LABEL
        .try_with(|label| {
            let mut label = label.borrow_mut();
            let nested = TraceLabel::nested(label.clone(), name, iteration);
            let id = label_id(Some(&nested));
            let previous = label.replace(nested);
            let _ = LABEL_ID.try_with(|cell| cell.set(id));
            previous
        })
        .ok()
        .flatten()
}

/// Makes `previous` (what [`push_label`] returned) this thread's label again.
#[doc(hidden)]
pub fn restore_label(previous: Option<TraceLabel>) {
    let id = label_id(previous.as_ref());
    let _ = LABEL.try_with(|label| *label.borrow_mut() = previous);
    let _ = LABEL_ID.try_with(|cell| cell.set(id));
}

/// Nanoseconds on the monotonic clock (the one `Instant` reads: `CLOCK_MONOTONIC` on Unix),
/// read directly: the trace stamps every event it records, and `Instant::elapsed`'s checked
/// arithmetic takes more instructions than the read itself.
#[cfg(unix)]
#[inline]
#[doc(hidden)]
pub fn monotonic_ns() -> u64 {
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
#[doc(hidden)]
pub fn monotonic_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// Whether two events' labels are one (the same `Arc`, or both none).
fn same_label(a: Option<&TraceLabel>, b: Option<&TraceLabel>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(&a.0, &b.0),
        (None, None) => true,
        _ => false,
    }
}

/// This thread's label (tags and batch-scope iterations), recorded with allocator events.
#[doc(hidden)]
pub fn thread_label() -> Option<TraceLabel> {
    // `try_borrow`: the tracking allocator asks from inside allocations, which may be made
    // while the label is being replaced.
    LABEL
        .try_with(|label| label.try_borrow().ok().and_then(|l| l.clone()))
        .ok()
        .flatten()
}
