//! The bounded event trace, the labels its events carry, and snapshots of segments and blocks.
//! The thread's current label is kept here, where the allocator records it; `crate::scope`'s
//! tags and batch scopes set it ([`push_label`], [`restore_label`]).

use super::event_clock::EventClock;
use super::origin::{BlockOrigin, Sites};
use super::{AllocOrigin, MemoryStats};
use serde::Serialize;
use std::cell::{Cell, RefCell};
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
/// interned call site, see `origin.rs`), its time as a stamp of the ring's clock, its label in
/// the ring's runs of labels. Recording pays for neither the origin's record nor the time's
/// conversion nor a reference count per label; [`TraceRing::to_trace`] does the first two.
pub(crate) struct RingEvent {
    pub kind: TraceEventKind,
    pub addr: u64,
    pub size: u64,
    /// A stamp of the ring's [`EventClock`], or nanoseconds for a ring without one.
    pub time: u64,
    pub origin: BlockOrigin,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
}

impl RingEvent {
    /// An event without an origin, at `time_ns` (for a ring built by [`TraceRing::new`]).
    pub(crate) fn without_origin(
        kind: TraceEventKind,
        addr: u64,
        size: u64,
        time_ns: u64,
        bytes: u64,
    ) -> Self {
        RingEvent {
            kind,
            addr,
            size,
            time: time_ns,
            origin: BlockOrigin::default(),
            allocated_bytes: bytes,
            reserved_bytes: bytes,
        }
    }
}

/// A ring of the most recent events.
#[derive(Default)]
pub(crate) struct TraceRing {
    capacity: usize,
    /// Up to `capacity` events; once full, the oldest is at `oldest` and each new event
    /// overwrites it in place.
    events: Vec<RingEvent>,
    oldest: usize,
    /// The events' labels, oldest first, as runs of consecutive events with one label (the
    /// same `Arc`): the label and the run's length. A loop's events share their iteration's
    /// label, so a push usually adds one to a count instead of cloning the label (an atomic
    /// increment, and a decrement when the event is overwritten).
    labels: VecDeque<(Option<TraceLabel>, usize)>,
    dropped: u64,
    /// The clock of a ring whose events' times are stamps until [`TraceRing::to_trace`]
    /// converts them (the allocator's); `None`: times are nanoseconds already.
    clock: Option<EventClock>,
}

impl TraceRing {
    /// A ring whose events come with their times.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            events: Vec::with_capacity(capacity.min(1 << 16)),
            oldest: 0,
            labels: VecDeque::new(),
            dropped: 0,
            clock: None,
        }
    }
    /// A ring whose events are stamped by [`TraceRing::stamp`], their times counting from
    /// `origin_ns` on the monotonic clock.
    pub(crate) fn stamped(capacity: usize, origin_ns: u64) -> Self {
        Self {
            clock: (capacity > 0).then(|| EventClock::new(origin_ns)),
            ..Self::new(capacity)
        }
    }
    #[inline]
    pub(crate) fn enabled(&self) -> bool {
        self.capacity > 0
    }
    /// The time of an event happening now (0 for a ring built by [`TraceRing::new`], whose
    /// events come with their times).
    #[inline]
    pub(crate) fn stamp(&mut self) -> u64 {
        self.clock.as_mut().map_or(0, EventClock::stamp)
    }
    /// The stamp of an event whose call read `read` ([`EventClock::stamp_read`]).
    #[inline]
    pub(crate) fn stamp_read(&mut self, read: u64) -> u64 {
        self.clock
            .as_mut()
            .map_or(0, |clock| clock.stamp_read(read))
    }
    /// The place of an event made now on this thread (under its label), for the caller to
    /// write the event into: once the ring is full, the oldest event's place, so the event is
    /// written once, where it stays, instead of built and then copied (`None` when the ring
    /// keeps nothing). The caller stamps it with [`Self::set_newest_time`].
    #[inline]
    pub(crate) fn place_now(&mut self) -> Option<&mut RingEvent> {
        let at = self.next_slot()?;
        match self.labels.back_mut() {
            Some((last, count)) => match thread_label_unless(last.as_ref()) {
                EventLabel::Same => *count += 1,
                EventLabel::Other(label) => self.labels.push_back((label, 1)),
            },
            None => self.labels.push_back((thread_label(), 1)),
        }
        self.events.get_mut(at)
    }
    /// Sets the time of the newest event (nothing when the ring holds none).
    #[inline]
    pub(crate) fn set_newest_time(&mut self, time: u64) {
        let newest = if self.events.len() < self.capacity {
            self.events.len().wrapping_sub(1)
        } else if self.oldest == 0 {
            self.capacity - 1
        } else {
            self.oldest - 1
        };
        if let Some(event) = self.events.get_mut(newest) {
            event.time = time;
        }
    }
    /// Adds `event`, made under `label`.
    pub(crate) fn push(&mut self, event: RingEvent, label: Option<TraceLabel>) {
        if self.store(event) {
            self.add_label(label);
        }
    }
    /// Stores `event` in place of the oldest once the ring is full (the oldest's label leaves
    /// the runs); `false` when the ring keeps nothing.
    #[inline]
    fn store(&mut self, event: RingEvent) -> bool {
        let Some(at) = self.next_slot() else {
            return false;
        };
        self.events[at] = event;
        true
    }
    /// Where the next event goes: a new place while the ring fills, then the oldest event's
    /// (whose label leaves the runs); `None` when the ring keeps nothing.
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
        self.forget_oldest_label();
        Some(at)
    }
    /// The newest event's label joins the last run, or starts one.
    fn add_label(&mut self, label: Option<TraceLabel>) {
        match self.labels.back_mut() {
            Some((last, count)) if same_label(last.as_ref(), label.as_ref()) => *count += 1,
            _ => self.labels.push_back((label, 1)),
        }
    }
    /// The overwritten event's label leaves the first run.
    fn forget_oldest_label(&mut self) {
        if let Some((_, count)) = self.labels.front_mut() {
            *count -= 1;
            if *count == 0 {
                self.labels.pop_front();
            }
        }
    }
    /// The events as shown, oldest first: origins looked up in `sites` (the allocator's call
    /// sites; `None` for a ring whose events have no origin), times in nanoseconds.
    pub(crate) fn to_trace(&self, sites: Option<&Sites>) -> Trace {
        let converter = self.clock.as_ref().map(EventClock::converter);
        Trace {
            capacity: self.capacity,
            dropped: self.dropped,
            events: self.events[self.oldest..]
                .iter()
                .chain(&self.events[..self.oldest])
                .zip(
                    self.labels
                        .iter()
                        .flat_map(|(label, count)| std::iter::repeat_n(label, *count)),
                )
                .map(|(event, label)| TraceEvent {
                    kind: event.kind,
                    addr: event.addr,
                    size: event.size,
                    time_ns: converter
                        .as_ref()
                        .map_or(event.time, |c| c.nanos(event.time)),
                    label: label.clone(),
                    origin: sites.and_then(|sites| sites.origin(&event.origin)),
                    allocated_bytes: event.allocated_bytes,
                    reserved_bytes: event.reserved_bytes,
                })
                .collect(),
        }
    }
    pub(crate) fn clear(&mut self) {
        self.events.clear();
        self.oldest = 0;
        self.labels.clear();
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
    /// The identity of [`LABEL`] ([`label_id`]), set with it: a recorded event compares it
    /// with its ring's last label without borrowing the label (two stores an event).
    static LABEL_ID: Cell<usize> = const { Cell::new(0) };
}

/// A label's identity: the address of its innermost frame (0 for none). Labels alive at the
/// same time have different identities.
fn label_id(label: Option<&TraceLabel>) -> usize {
    label.map_or(0, |l| Arc::as_ptr(&l.0) as usize)
}

/// Makes `name` (with `iteration` for a batch scope) the innermost frame of this thread's
/// label; returns the label it replaced.
pub(crate) fn push_label(name: Arc<str>, iteration: Option<u64>) -> Option<TraceLabel> {
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
pub(crate) fn restore_label(previous: Option<TraceLabel>) {
    let id = label_id(previous.as_ref());
    let _ = LABEL.try_with(|label| *label.borrow_mut() = previous);
    let _ = LABEL_ID.try_with(|cell| cell.set(id));
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

/// Whether two events' labels are one (the same `Arc`, or both none).
fn same_label(a: Option<&TraceLabel>, b: Option<&TraceLabel>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(&a.0, &b.0),
        (None, None) => true,
        _ => false,
    }
}

/// An event's label, as [`thread_label_unless`] finds it.
enum EventLabel {
    /// The label of the ring's last event (not cloned).
    Same,
    /// Another one.
    Other(Option<TraceLabel>),
}

/// This thread's label, unless it is `last`.
#[inline]
fn thread_label_unless(last: Option<&TraceLabel>) -> EventLabel {
    // `last` is alive (the ring holds it), so an equal identity is the same label.
    if LABEL_ID.try_with(Cell::get).ok() == Some(label_id(last)) {
        return EventLabel::Same;
    }
    LABEL
        .try_with(|label| match label.try_borrow() {
            Ok(label) if same_label(label.as_ref(), last) => EventLabel::Same,
            Ok(label) => EventLabel::Other(label.clone()),
            // Being replaced (see `thread_label`): none.
            Err(_) => EventLabel::Other(None),
        })
        .unwrap_or(EventLabel::Other(None))
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
