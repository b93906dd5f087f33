//! The events the state records in the allocator's trace ring: a block handed out or freed
//! (with its origin), a segment or pages added or released, an out-of-memory failure.

use super::State;
use crate::stats::Key;
use crate::trace::{BlockOrigin, RingEvent, TraceRing};
use crate::{Trace, TraceEventKind};

impl State {
    /// Records a segment or out-of-memory event in the trace, if it is recording.
    #[inline(always)]
    pub(super) fn record(&mut self, kind: TraceEventKind, addr: u64, size: u64) {
        // Checked inline: segments come and go on the allocation path, and the trace is usually
        // off.
        if self.trace.enabled() {
            self.push_event(kind, addr, size);
        }
    }

    /// Records a segment or out-of-memory event in the trace (which the caller saw recording),
    /// stamped now.
    #[cold]
    #[inline(never)]
    pub(super) fn push_event(&mut self, kind: TraceEventKind, addr: u64, size: u64) {
        let time = self.trace.stamp();
        self.write_event(kind, addr, size, time, |_| BlockOrigin::default());
    }

    /// Records the alloc or free event of block `slot` in the trace (which the caller saw
    /// recording), with the block's origin (a free's is taken: the block keeps none), stamped
    /// with `read`, the clock as the call read it before it took the lock (`None`: read now).
    /// The allocation and the free call it after every other event of theirs (a segment mapped
    /// for the block), so the stamp, clamped to the last one, keeps the ring in order. The two
    /// counter reads are most of what recording costs a pair, and where they happen matters:
    /// read before the lock, the read overlaps the lock's atomic; read under the lock, it
    /// delays the release. The event is written in one pass, its origin read where the block
    /// keeps it: built on the caller's stack and copied, the origin was loaded wider than it
    /// was stored, which waits for the store. Inlined into both callers: out of line, the
    /// call's register saves and the origin held across it cost the recording pair more than
    /// the larger code costs the untraced pair (`docs/perf-notes.md`, "Copies on the allocation
    /// path, and the clock read before the lock", and "The recording pair's events, written in
    /// one pass").
    #[inline(always)]
    pub(super) fn record_block_event(
        &mut self,
        kind: TraceEventKind,
        addr: u64,
        size: u64,
        slot: u32,
        read: Option<u64>,
    ) {
        let time = match read {
            Some(read) => self.trace.stamp_read(read),
            None => self.trace.stamp(),
        };
        self.write_event(kind, addr, size, time, |origins| {
            let origin = &mut origins[slot as usize];
            if kind == TraceEventKind::Free {
                std::mem::take(origin)
            } else {
                origin.clone()
            }
        });
    }

    /// Writes an event into the ring's next place, with the allocator's totals now and the
    /// origin `origin` gives from the blocks' origins. The place is found first, then the
    /// origin goes straight into it: held across the call that finds the place, the origin
    /// went through the stack.
    #[inline(always)]
    fn write_event(
        &mut self,
        kind: TraceEventKind,
        addr: u64,
        size: u64,
        time: u64,
        origin: impl FnOnce(&mut [BlockOrigin]) -> BlockOrigin,
    ) {
        let (allocated_bytes, reserved_bytes) =
            (self.stats.total(Key::AllocatedBytes), self.reserved());
        if let Some((place, label)) = self.trace.place_now() {
            *place = RingEvent {
                kind,
                label,
                addr,
                size,
                time,
                origin: origin(&mut self.origins),
                allocated_bytes,
                reserved_bytes,
            };
        }
    }

    /// Whether the trace records.
    #[doc(hidden)]
    pub fn trace_recording(&self) -> bool {
        self.trace.enabled()
    }

    /// A copy of the trace ring, with the call sites of its events.
    #[doc(hidden)]
    pub fn trace(&self) -> Trace {
        self.trace.to_trace(Some(&self.sites))
    }

    /// Starts recording the last `events` events (0 stops); earlier events are dropped.
    #[doc(hidden)]
    pub fn set_trace_capacity(&mut self, events: usize) {
        self.trace = TraceRing::stamped(events, self.start_ns);
    }

    /// Empties the trace ring.
    #[doc(hidden)]
    pub fn clear_trace(&mut self) {
        self.trace.clear();
    }

    /// Entries of the trace ring's label table.
    #[cfg(test)]
    #[doc(hidden)]
    pub fn trace_label_entries(&self) -> usize {
        self.trace.label_entries()
    }
}
