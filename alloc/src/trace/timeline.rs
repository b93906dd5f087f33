//! The data behind the HTML timeline: every allocation's and every mapped range's lifetime,
//! rebuilt from the event trace and the snapshot taken at its end, the trace labels, and the
//! fragmentation figures. Pure data, no markup: `html.rs` embeds it as JSON and the page's
//! script draws it.
//!
//! Lifetimes are event indices: an allocation made by event `start` and freed by event `end`
//! is live after `s` events when `start < s <= end`. Allocations live before the first recorded
//! event (the ring dropped their event, or recording began later) have `start = -1`; those
//! still live at the end have `end = events.len()`, and take their block size and id from the
//! snapshot. So the state after any number of events — the segment map at any moment — is a
//! filter over lifetimes, and after all of them it is the snapshot.

use super::{AllocOrigin, MemorySnapshot, PoolKind, Trace, TraceEventKind, TraceLabel};
use crate::SMALL_SIZE;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// At most this many allocations are drawn one by one (the largest); the others are still
/// counted in the allocated area below them, as memory_viz summarises what it elides.
#[doc(hidden)]
pub const MAX_DRAWN_ALLOCATIONS: usize = 4000;

/// One allocation's lifetime.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[doc(hidden)]
pub struct Lifetime {
    /// Block address.
    pub addr: u64,
    /// Bytes: the block's size from the snapshot when it is live at the end, else the event's.
    pub size: u64,
    /// Index of the Alloc event; -1 when made before the first recorded event.
    pub start: i64,
    /// Index of the Free event; `events.len()` when still live at the end.
    pub end: i64,
    /// Allocation id, when the snapshot knows it (0 otherwise).
    pub id: u64,
    /// Index into [`TimelineData::labels`] of the label active at the allocation, if any.
    pub label: Option<usize>,
    /// Whether the page draws it as a band of its own (the largest [`MAX_DRAWN_ALLOCATIONS`]).
    pub drawn: bool,
    /// Where it was made (source line, op, shape), from its events or the snapshot.
    pub origin: Option<AllocOrigin>,
}

/// One range of mapped memory with its lifetime: a fixed segment, or a run of pages of the
/// expandable segment (adjacent live runs are shown as one segment, as the snapshot does).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[doc(hidden)]
pub struct MappedRange {
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Index of the map event; -1 when mapped before the first recorded event.
    pub start: i64,
    /// Index of the unmap event; `events.len()` when still mapped at the end.
    pub end: i64,
    /// The pool, from the snapshot or from the allocations it held (small-pool allocations are
    /// at most 1 MiB, large-pool ones larger); `None` when nothing tells.
    pub pool: Option<PoolKind>,
    /// Whether it belongs to the large pool's expandable segment.
    pub expandable: bool,
}

/// The fragmentation figures of one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[doc(hidden)]
pub struct Fragmentation {
    /// PyTorch's inactive-split bytes: free bytes in segments that also hold allocated blocks
    /// (cached, yet not returnable to the device).
    pub inactive_split_bytes: u64,
    /// Free bytes in all segments.
    pub cached_free_bytes: u64,
    /// The largest free block.
    pub largest_free_block: u64,
    /// `1 - largest_free_block / cached_free_bytes` (0 with nothing cached): the share of the
    /// cached free memory a single request cannot use.
    pub free_split_ratio: f64,
}

impl Fragmentation {
    /// The figures of a snapshot.
    pub fn of(snapshot: &MemorySnapshot) -> Self {
        let (mut inactive, mut cached, mut largest) = (0, 0, 0);
        for seg in &snapshot.segments {
            let free: u64 = seg
                .blocks
                .iter()
                .filter(|b| !b.allocated)
                .map(|b| b.size)
                .sum();
            cached += free;
            largest = seg
                .blocks
                .iter()
                .filter(|b| !b.allocated)
                .map(|b| b.size)
                .fold(largest, u64::max);
            if seg.blocks.iter().any(|b| b.allocated) {
                inactive += free;
            }
        }
        Self::from_parts(inactive, cached, largest)
    }

    fn from_parts(inactive: u64, cached: u64, largest: u64) -> Self {
        Self {
            inactive_split_bytes: inactive,
            cached_free_bytes: cached,
            largest_free_block: largest,
            free_split_ratio: if cached == 0 {
                0.0
            } else {
                1.0 - largest as f64 / cached as f64
            },
        }
    }
}

/// One event, compact: `[kind, time_ns since the first event, addr, size, allocated, reserved,
/// label index or -1]`.
type EventRow = (u8, u64, u64, u64, u64, u64, i64);

/// Everything the page draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[doc(hidden)]
pub struct TimelineData {
    /// The events, oldest first (see `EventRow`; kinds index [`EVENT_KINDS`]).
    pub events: Vec<EventRow>,
    /// Event kind names, indexed by the first field of an event.
    pub kinds: [&'static str; 5],
    /// Distinct labels, in order of first appearance.
    pub labels: Vec<String>,
    /// Runs of consecutive events under one label: `(label index, first event, last event)`.
    pub bands: Vec<(usize, usize, usize)>,
    /// Every allocation seen in the trace or the snapshot.
    pub allocations: Vec<Lifetime>,
    /// Every mapped range seen in the trace or the snapshot.
    pub segments: Vec<MappedRange>,
    /// Events the ring dropped before the first one here.
    pub dropped: u64,
    /// Allocator-level figures at the end (the snapshot's).
    pub end: EndFigures,
}

/// The snapshot's figures the page compares its replay with.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[doc(hidden)]
pub struct EndFigures {
    /// Fragmentation of the snapshot.
    pub fragmentation: Fragmentation,
    /// Peak allocated bytes since creation or the last peak reset.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes since creation or the last peak reset.
    pub peak_reserved_bytes: u64,
    /// The last event index after which the allocated bytes exceeded the statistics' peak: the
    /// peak was reset after it (`None` when the trace never exceeds it).
    pub reset_after_event: Option<usize>,
    /// Segments in the snapshot (mapped runs of the expandable segment count one each).
    pub segments: usize,
    /// Allocated blocks in the snapshot.
    pub live_blocks: usize,
}

/// Event kind names, in the order of `kind_index`.
#[doc(hidden)]
pub const EVENT_KINDS: [&str; 5] = ["alloc", "free", "segment_map", "segment_unmap", "oom"];

fn kind_index(kind: TraceEventKind) -> u8 {
    match kind {
        TraceEventKind::Alloc => 0,
        TraceEventKind::Free => 1,
        TraceEventKind::SegmentAlloc => 2,
        TraceEventKind::SegmentFree => 3,
        TraceEventKind::Oom => 4,
    }
}

impl TimelineData {
    /// Rebuilds lifetimes from `trace` and the `snapshot` taken right after it.
    pub fn new(trace: &Trace, snapshot: &MemorySnapshot) -> Self {
        let events = &trace.events;
        let n = events.len() as i64;
        let t0 = events.first().map_or(0, |e| e.time_ns);
        let mut labels: Vec<String> = Vec::new();
        let mut label_ids: HashMap<&TraceLabel, usize> = HashMap::new();
        let event_labels: Vec<Option<usize>> = events
            .iter()
            .map(|e| {
                let l = e.label.as_ref()?;
                Some(*label_ids.entry(l).or_insert_with(|| {
                    labels.push(l.to_string());
                    labels.len() - 1
                }))
            })
            .collect();
        let rows = events
            .iter()
            .zip(&event_labels)
            .map(|(e, l)| {
                (
                    kind_index(e.kind),
                    e.time_ns.saturating_sub(t0),
                    e.addr,
                    e.size,
                    e.allocated_bytes,
                    e.reserved_bytes,
                    l.map_or(-1, |l| l as i64),
                )
            })
            .collect();
        let mut bands = Vec::new();
        let mut run = 0;
        for i in 1..=events.len() {
            if i < events.len() && event_labels[i] == event_labels[run] {
                continue;
            }
            if let Some(l) = event_labels[run] {
                bands.push((l, run, i - 1));
            }
            run = i;
        }

        let mut allocations: Vec<Lifetime> = Vec::new();
        let mut live: BTreeMap<u64, usize> = BTreeMap::new();
        let mut ranges = Ranges::default();
        for (i, e) in events.iter().enumerate() {
            let i = i as i64;
            match e.kind {
                TraceEventKind::Alloc => {
                    if let Some(stale) = live.insert(e.addr, allocations.len()) {
                        allocations[stale].end = i; // never freed in the trace: a gap in it
                    }
                    allocations.push(Lifetime {
                        addr: e.addr,
                        size: e.size,
                        start: i,
                        end: n,
                        id: 0,
                        label: event_labels[i as usize],
                        drawn: false,
                        origin: e.origin.clone(),
                    });
                }
                TraceEventKind::Free => match live.remove(&e.addr) {
                    Some(a) => {
                        allocations[a].end = i;
                        if allocations[a].origin.is_none() {
                            allocations[a].origin = e.origin.clone();
                        }
                    }
                    None => allocations.push(Lifetime {
                        addr: e.addr,
                        size: e.size,
                        start: -1,
                        end: i,
                        id: 0,
                        label: None,
                        drawn: false,
                        origin: e.origin.clone(),
                    }),
                },
                TraceEventKind::SegmentAlloc => ranges.map(e.addr, e.size, i, n),
                TraceEventKind::SegmentFree => ranges.unmap(e.addr, e.size, i),
                TraceEventKind::Oom => {}
            }
        }
        // The snapshot closes the books: live blocks take its sizes and ids; blocks and mapped
        // memory it holds that the trace never saw were there before the first event.
        for seg in &snapshot.segments {
            for gap in ranges.uncovered(seg.addr, seg.size) {
                ranges.pieces.push(MappedRange {
                    addr: gap.0,
                    size: gap.1,
                    start: -1,
                    end: n,
                    pool: None,
                    expandable: false,
                });
            }
            for b in seg.blocks.iter().filter(|b| b.allocated) {
                match live.get(&b.addr) {
                    Some(&a) => {
                        allocations[a].size = b.size;
                        allocations[a].id = b.id;
                        if allocations[a].origin.is_none() {
                            allocations[a].origin = b.origin.clone();
                        }
                    }
                    None => allocations.push(Lifetime {
                        addr: b.addr,
                        size: b.size,
                        start: -1,
                        end: n,
                        id: b.id,
                        label: None,
                        drawn: false,
                        origin: b.origin.clone(),
                    }),
                }
            }
        }
        let mut segments = ranges.pieces;
        segments.sort_by_key(|s| (s.start, s.addr));
        for s in &mut segments {
            s.pool = pool_of(s, &allocations, snapshot);
            s.expandable = snapshot.expandable_segments && s.pool == Some(PoolKind::Large);
        }
        let mut by_size: Vec<usize> = (0..allocations.len()).collect();
        by_size.sort_by_key(|&a| std::cmp::Reverse(allocations[a].size));
        for &a in by_size.iter().take(MAX_DRAWN_ALLOCATIONS) {
            allocations[a].drawn = true;
        }

        let peak = snapshot.stats.peak_allocated_bytes;
        Self {
            events: rows,
            kinds: EVENT_KINDS,
            labels,
            bands,
            allocations,
            segments,
            dropped: trace.dropped,
            end: EndFigures {
                fragmentation: Fragmentation::of(snapshot),
                peak_allocated_bytes: peak,
                peak_reserved_bytes: snapshot.stats.peak_reserved_bytes,
                reset_after_event: events.iter().rposition(|e| e.allocated_bytes > peak),
                segments: snapshot.segments.len(),
                live_blocks: snapshot
                    .segments
                    .iter()
                    .flat_map(|s| &s.blocks)
                    .filter(|b| b.allocated)
                    .count(),
            },
        }
    }

    /// The data as JSON safe to place inside a `<script>` element: `<`, `>` and `&` are written
    /// as `\u003c`, `\u003e`, `\u0026` (still the same JSON strings), so no label or file name
    /// can close the element.
    pub fn to_script_json(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "null".to_owned());
        let mut out = String::with_capacity(json.len());
        for c in json.chars() {
            match c {
                '<' => out.push_str("\\u003c"),
                '>' => out.push_str("\\u003e"),
                '&' => out.push_str("\\u0026"),
                // Line terminators JSON allows raw but older JavaScript did not.
                '\u{2028}' => out.push_str("\\u2028"),
                '\u{2029}' => out.push_str("\\u2029"),
                _ => out.push(c),
            }
        }
        out
    }

    /// The largest allocated bytes after any event.
    pub fn max_allocated(&self) -> u64 {
        self.events.iter().map(|e| e.4).max().unwrap_or(0)
    }
}

/// A segment's pool: the snapshot's, else from the allocations it held while mapped.
fn pool_of(
    s: &MappedRange,
    allocations: &[Lifetime],
    snapshot: &MemorySnapshot,
) -> Option<PoolKind> {
    let overlaps = |a: &Lifetime| {
        a.addr < s.addr + s.size && s.addr < a.addr + a.size && a.start < s.end && s.start < a.end
    };
    if let Some(a) = allocations.iter().find(|a| overlaps(a)) {
        return Some(if a.size <= SMALL_SIZE as u64 {
            PoolKind::Small
        } else {
            PoolKind::Large
        });
    }
    snapshot
        .segments
        .iter()
        .find(|seg| seg.addr <= s.addr && s.addr < seg.addr + seg.size)
        .map(|seg| seg.pool)
}

/// Mapped ranges, split as unmaps cut them.
#[derive(Debug, Default)]
struct Ranges {
    pieces: Vec<MappedRange>,
    /// Live pieces by address.
    live: BTreeMap<u64, usize>,
}

impl Ranges {
    fn map(&mut self, addr: u64, size: u64, at: i64, end: i64) {
        self.live.insert(addr, self.pieces.len());
        self.pieces.push(MappedRange {
            addr,
            size,
            start: at,
            end,
            pool: None,
            expandable: false,
        });
    }

    /// Ends the live pieces inside `[addr, addr + size)` at event `at`, splitting those that
    /// straddle its edges; what no live piece covers was mapped before the trace.
    fn unmap(&mut self, addr: u64, size: u64, at: i64) {
        let hi = addr + size;
        for (lo, len) in self.uncovered(addr, size) {
            self.pieces.push(MappedRange {
                addr: lo,
                size: len,
                start: -1,
                end: at,
                pool: None,
                expandable: false,
            });
        }
        let hit: Vec<usize> = self
            .live
            .values()
            .copied()
            .filter(|&p| {
                let r = &self.pieces[p];
                r.addr < hi && addr < r.addr + r.size
            })
            .collect();
        for p in hit {
            let r = self.pieces[p].clone();
            self.live.remove(&r.addr);
            let (cut_lo, cut_hi) = (r.addr.max(addr), (r.addr + r.size).min(hi));
            // The parts outside the cut stay mapped: new pieces with the same start.
            if r.addr < cut_lo {
                self.map(r.addr, cut_lo - r.addr, r.start, r.end);
            }
            if cut_hi < r.addr + r.size {
                self.map(cut_hi, r.addr + r.size - cut_hi, r.start, r.end);
            }
            self.pieces[p].addr = cut_lo;
            self.pieces[p].size = cut_hi - cut_lo;
            self.pieces[p].end = at;
        }
    }

    /// The parts of `[addr, addr + size)` no live piece covers.
    fn uncovered(&self, addr: u64, size: u64) -> Vec<(u64, u64)> {
        let hi = addr + size;
        let mut covered: Vec<(u64, u64)> = self
            .live
            .values()
            .map(|&p| {
                (
                    self.pieces[p].addr,
                    self.pieces[p].addr + self.pieces[p].size,
                )
            })
            .filter(|&(a, b)| a < hi && addr < b)
            .collect();
        covered.sort_unstable();
        let mut gaps = Vec::new();
        let mut at = addr;
        for (a, b) in covered {
            if a > at {
                gaps.push((at, a - at));
            }
            at = at.max(b);
        }
        if at < hi {
            gaps.push((at, hi - at));
        }
        gaps
    }
}

/// Address ranges `(first byte, bytes)`, by address.
/// Address ranges `(addr, size)`.
#[doc(hidden)]
pub type Spans = Vec<(u64, u64)>;

impl TimelineData {
    /// The state after `s` events, as the page's script rebuilds it: mapped ranges by address
    /// (adjacent ranges of the expandable segment joined) and live allocations `(addr, size)`.
    pub fn state_at(&self, s: i64) -> (Spans, Spans) {
        let mut ranges: Vec<&MappedRange> = self
            .segments
            .iter()
            .filter(|r| r.start < s && s <= r.end)
            .collect();
        ranges.sort_by_key(|r| r.addr);
        let mut rows: Vec<(u64, u64, bool)> = Vec::new();
        for r in ranges {
            match rows.last_mut() {
                Some(last) if r.expandable && last.2 && last.0 + last.1 == r.addr => {
                    last.1 += r.size
                }
                _ => rows.push((r.addr, r.size, r.expandable)),
            }
        }
        let mut live: Vec<(u64, u64)> = self
            .allocations
            .iter()
            .filter(|a| a.start < s && s <= a.end)
            .map(|a| (a.addr, a.size))
            .collect();
        live.sort_unstable();
        (rows.into_iter().map(|r| (r.0, r.1)).collect(), live)
    }
}
