//! Blocks and segments: the allocator's bookkeeping under its lock ([`State`]). It owns the
//! block list of every segment, the free sets of both pools, the statistics counters and the
//! event trace, and the operations on them: take a free block (best fit, split), free one
//! (coalesce), add a fixed segment, release fully free segments, and the blocks freed while
//! other streams may still use them (kept out of the pool until their events complete).
//!
//! Free blocks are pooled per stream: a segment belongs to the stream it was allocated for, and
//! its free blocks serve only requests on that stream, where stream order makes reuse safe.
//!
//! A backend call that fails leaves the books as they were: segments and pages are removed from
//! them only after the backend gave them back, and the failure is kept
//! ([`State::note_failure`]) for the error of the request that met it.
//!
//! Decisions (which block may serve a request, whether to split, segment sizes) come from
//! `policy.rs`; growing and shrinking the expandable segment is in `expandable.rs`.

use super::expandable::Expandable;
use super::trace::{BlockOrigin, Sites};
use super::plan::Planner;
use super::policy::{self, ADDR_LIMIT};
use super::stats::{Counters, Key};
use super::trace::{RingEvent, TraceRing};
use super::{
    Backend, BackendError, BackendFailure, BlockSnapshot, EventId, LiveAllocation, MemoryStats,
    PoolKind, SegmentSnapshot, StreamId, TraceEventKind,
};
use std::collections::{BTreeSet, HashMap};

/// No block (end of a segment's list).
pub(crate) const NIL: u32 = u32::MAX;

/// One block: a piece of a segment, free or handed out.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub addr: u64,
    pub size: usize,
    /// Rounded request while allocated.
    pub rounded: usize,
    pub requested: usize,
    pub id: u64,
    pub seg: u32,
    pub prev: u32,
    pub next: u32,
    pub pool: PoolKind,
    /// Index of the segment's stream in [`State::streams`].
    pub stream: u32,
    /// Handed out, or freed while waiting for other streams' events (`pending`): not free.
    pub allocated: bool,
    /// Freed by its owner, but kept out of the pool until the events recorded on the streams
    /// that used it complete ([`State::pending`]).
    pub pending: bool,
    /// Other streams were recorded as using this block ([`State::stream_uses`]).
    pub has_uses: bool,
    /// `false` for a hole of the expandable segment whose pages were unmapped: neither free
    /// (not in a free set, not reserved) nor allocated, until pages are mapped there again.
    pub mapped: bool,
    /// The pool's lookup count ([`State::lookups`]) when the block last became free: its age
    /// for garbage collection is the lookups since.
    pub freed_at: u64,
}

impl Node {
    /// A free block of `size` bytes at `addr` in segment `seg`, between `prev` and `next`.
    #[allow(clippy::too_many_arguments)]
    fn free(
        addr: u64,
        size: usize,
        seg: u32,
        prev: u32,
        next: u32,
        pool: PoolKind,
        stream: u32,
        tick: u64,
    ) -> Node {
        Node {
            addr,
            size,
            rounded: 0,
            requested: 0,
            id: 0,
            seg,
            prev,
            next,
            pool,
            stream,
            allocated: false,
            pending: false,
            has_uses: false,
            mapped: true,
            freed_at: tick,
        }
    }
}

/// One segment: a fixed backend allocation, or the mapped prefix of the expandable range.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub addr: u64,
    pub size: usize,
    pub pool: PoolKind,
    /// Index of the stream the segment serves in [`State::streams`].
    pub stream: u32,
    pub head: u32,
    /// Last block (the one that grows or shrinks in an expandable segment).
    pub tail: u32,
    pub live: bool,
    pub expandable: bool,
}

/// Free blocks of one pool ordered by (size, address), each key packed into one `u128`
/// (48-bit size, 48-bit address, 32-bit slot) so comparisons are single integers.
///
/// A pool usually holds few free blocks, and a cached alloc+free pair takes one lookup, two
/// removals and two insertions: in a sorted vector those are a binary search and a short move,
/// a fraction of a B-tree's node walks and rebalancing. Past [`FreeSet::TREE_ABOVE`] blocks the
/// moves would grow with the pool, so the keys move to a B-tree (and back below
/// [`FreeSet::VEC_BELOW`]; the gap keeps a pool near the bound from switching at every call).
/// Both hold the same keys in the same order: which one holds them changes no answer.
pub(crate) enum FreeSet {
    Sorted(Vec<u128>),
    Tree(BTreeSet<u128>),
}

impl Default for FreeSet {
    fn default() -> Self {
        FreeSet::Sorted(Vec::new())
    }
}

impl FreeSet {
    /// More keys than this move to a B-tree.
    const TREE_ABOVE: usize = 256;
    /// Fewer keys than this move back to a sorted vector.
    const VEC_BELOW: usize = 64;

    #[inline]
    fn key(size: usize, addr: u64, slot: u32) -> u128 {
        ((size as u128) << 80) | ((addr as u128) << 32) | slot as u128
    }
    #[inline]
    fn unpack(k: u128) -> (usize, u64, u32) {
        (
            (k >> 80) as usize,
            ((k >> 32) as u64) & (ADDR_LIMIT - 1),
            k as u32,
        )
    }
    #[inline]
    pub fn insert(&mut self, size: usize, addr: u64, slot: u32) {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => {
                if let Err(at) = v.binary_search(&k) {
                    v.insert(at, k);
                }
                if v.len() > Self::TREE_ABOVE {
                    *self = FreeSet::Tree(std::mem::take(v).into_iter().collect());
                }
            }
            FreeSet::Tree(t) => {
                t.insert(k);
            }
        }
    }
    #[inline]
    pub fn remove(&mut self, size: usize, addr: u64, slot: u32) -> bool {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => match v.binary_search(&k) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            FreeSet::Tree(t) => {
                let removed = t.remove(&k);
                if t.len() < Self::VEC_BELOW {
                    *self = FreeSet::Sorted(std::mem::take(t).into_iter().collect());
                }
                removed
            }
        }
    }
    /// Replaces block `old` (size, address, slot) by block `new`: the set afterwards is the
    /// one `remove(old)` then `insert(new)` leave, in one move of the keys between their two
    /// places instead of two (a split leaves the remainder where the taken block was, a
    /// coalescing free the merged block where a neighbour was). Returns whether `old` was held.
    #[inline(always)]
    pub fn replace(&mut self, old: (usize, u64, u32), new: (usize, u64, u32)) -> bool {
        // The pool's only free block (a pair loop's usual case): nothing to search or move.
        if let FreeSet::Sorted(v) = self {
            if let [only] = v.as_mut_slice() {
                if *only == Self::key(old.0, old.1, old.2) {
                    *only = Self::key(new.0, new.1, new.2);
                    return true;
                }
            }
        }
        self.replace_searched(old, new)
    }

    /// [`Self::replace`] past its one-block case: a search in the sorted vector, or the B-tree's
    /// removal and insertion.
    #[inline(never)]
    fn replace_searched(&mut self, old: (usize, u64, u32), new: (usize, u64, u32)) -> bool {
        let FreeSet::Sorted(v) = self else {
            let held = self.remove(old.0, old.1, old.2);
            self.insert(new.0, new.1, new.2);
            return held;
        };
        let (ko, kn) = (
            Self::key(old.0, old.1, old.2),
            Self::key(new.0, new.1, new.2),
        );
        let Ok(i) = v.binary_search(&ko) else {
            self.insert(new.0, new.1, new.2);
            return false;
        };
        if kn >= ko {
            // `new` goes after `old`'s place: the keys between move one to the left.
            let j = i + 1 + v[i + 1..].partition_point(|&k| k < kn);
            if v.get(j) == Some(&kn) {
                v.remove(i);
            } else {
                v.copy_within(i + 1..j, i);
                v[j - 1] = kn;
            }
        } else {
            let j = v[..i].partition_point(|&k| k < kn);
            if v[j] == kn {
                v.remove(i);
            } else {
                v.copy_within(j..i, j + 1);
                v[j] = kn;
            }
        }
        true
    }
    pub fn contains(&self, size: usize, addr: u64, slot: u32) -> bool {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => v.binary_search(&k).is_ok(),
            FreeSet::Tree(t) => t.contains(&k),
        }
    }
    /// The smallest block of at least `size` bytes (lowest address among equals).
    #[inline]
    pub fn best_fit(&self, size: usize) -> Option<(usize, u64, u32)> {
        let from = Self::key(size, 0, 0);
        let k = match self {
            FreeSet::Sorted(v) => v.get(v.partition_point(|&k| k < from)),
            FreeSet::Tree(t) => t.range(from..).next(),
        };
        k.map(|&k| Self::unpack(k))
    }
    pub fn largest(&self) -> usize {
        let last = match self {
            FreeSet::Sorted(v) => v.last(),
            FreeSet::Tree(t) => t.last(),
        };
        last.map_or(0, |&k| Self::unpack(k).0)
    }
    /// The keys from `from` on, in order, whichever container holds them.
    fn keys_from(&self, from: u128) -> impl DoubleEndedIterator<Item = u128> + '_ {
        let (sorted, tree) = match self {
            FreeSet::Sorted(v) => (Some(&v[v.partition_point(|&k| k < from)..]), None),
            FreeSet::Tree(t) => (None, Some(t.range(from..))),
        };
        sorted
            .into_iter()
            .flatten()
            .chain(tree.into_iter().flatten())
            .copied()
    }
    /// Blocks from the largest down.
    pub fn descending(&self) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.keys_from(0).rev().map(Self::unpack)
    }
    /// Blocks of at least `size` bytes, smallest first.
    pub fn fitting(&self, size: usize) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.keys_from(Self::key(size, 0, 0)).map(Self::unpack)
    }
    pub fn len(&self) -> usize {
        match self {
            FreeSet::Sorted(v) => v.len(),
            FreeSet::Tree(t) => t.len(),
        }
    }
}

/// A block freed while other streams may still use it: it returns to its pool once every
/// event completed.
pub(crate) struct PendingFree {
    pub slot: u32,
    /// Events not yet seen complete.
    pub events: Vec<EventId>,
    /// An event could not be recorded or queried: the block stays out of the pool (counted as
    /// active) until a wait — `empty_cache`, the out-of-memory retry, the allocator's drop —
    /// records the missing events and sees every event complete (after a driver error that
    /// sticks, as CUDA's usually do, that never happens).
    pub poisoned: bool,
    /// Streams whose event could not be recorded: recorded again by the next wait.
    pub unrecorded: Vec<StreamId>,
}

/// What an allocator's held blocks keep alive ([`State::hold`]), type-erased.
pub(crate) type KeptAlive = std::sync::Arc<dyn Send + Sync>;

/// The holder of a block handed out for a device's allocation: it gives the reference the
/// allocator keeps while any such block lives, asked only when the first one is handed out.
pub(crate) trait KeepAlive {
    /// A new reference to what the held blocks keep alive.
    fn keep_alive(&self) -> KeptAlive;
}

/// Everything the allocator's mutex guards.
pub(crate) struct State {
    pub nodes: Vec<Node>,
    /// Where each allocated block was made, by slot (`None` for free blocks and spare slots).
    /// Kept beside the nodes, not in them: splitting and coalescing copy nodes around, and
    /// only `hand_out` and `free` need the origin.
    pub origins: Vec<BlockOrigin>,
    /// The call sites `origins` refer to.
    pub sites: Sites,
    pub spare_nodes: Vec<u32>,
    pub segs: Vec<Segment>,
    pub spare_segs: Vec<u32>,
    /// The streams blocks were allocated on; index 0 is [`StreamId::DEFAULT`].
    pub streams: Vec<StreamId>,
    /// Free blocks per stream index, per pool (small, large).
    pub free: Vec<[FreeSet; 2]>,
    /// Other streams recorded as using a handed-out block, by slot.
    pub stream_uses: HashMap<u32, Vec<StreamId>>,
    /// Blocks freed while other streams may still use them.
    pub pending: Vec<PendingFree>,
    /// The backend failure met by the request being served (cleared when a request starts).
    pub request_failure: Option<BackendFailure>,
    /// Whether the last attempt to grow the expandable segment at its end was refused because
    /// its address range is used up (while the limit had room).
    pub range_used_up: bool,
    /// The most recent backend failure.
    pub last_failure: Option<BackendFailure>,
    pub stats: Counters,
    /// `max_split_size`, for the oversize statistics.
    pub max_split: Option<usize>,
    pub next_id: u64,
    /// Free-block lookups per pool (small, large): PyTorch's `gc_count` clock.
    pub lookups: [u64; 2],
    pub trace: TraceRing,
    pub expandable: Option<Expandable>,
    /// The allocator's creation on the clock of [`super::trace::monotonic_ns`]: the origin of
    /// trace times.
    pub start_ns: u64,
    /// Recordings and plans of batch-scope iterations.
    pub planner: Planner,
    /// Blocks handed out with a holder ([`State::hold`]) and not yet freed.
    pub held_blocks: u64,
    /// What the held blocks keep alive while any of them lives ([`State::hold`]).
    pub kept_alive: Option<KeptAlive>,
    /// Per pool (small, large), the freed block of the default stream whose merge with the
    /// free block after it is deferred (`NIL`: none; the `deferred` module).
    pub deferred: [u32; 2],
    /// Requests served from a merged block whose merge was deferred.
    pub deferred_reuses: u64,
    /// Off: every free merges at once (the tests' reference for deferred merges).
    #[cfg(test)]
    pub defer_merges: bool,
}

/// Whether block `slot` is the second half of a free block whose merge is deferred.
fn prev_deferred(st: &State, slot: u32) -> bool {
    let n = &st.nodes[slot as usize];
    n.prev != NIL && st.deferred[n.pool as usize] == n.prev
}

impl State {
    pub fn new(trace_capacity: usize) -> Self {
        let start_ns = super::trace::monotonic_ns();
        State {
            nodes: Vec::new(),
            origins: Vec::new(),
            sites: Sites::default(),
            spare_nodes: Vec::new(),
            segs: Vec::new(),
            spare_segs: Vec::new(),
            streams: vec![StreamId::DEFAULT],
            free: vec![Default::default()],
            stream_uses: HashMap::new(),
            pending: Vec::new(),
            request_failure: None,
            range_used_up: false,
            last_failure: None,
            stats: Counters::default(),
            max_split: None,
            next_id: 1,
            lookups: [0; 2],
            trace: TraceRing::stamped(trace_capacity, start_ns),
            expandable: None,
            start_ns,
            planner: Planner::default(),
            held_blocks: 0,
            kept_alive: None,
            deferred: [NIL; 2],
            deferred_reuses: 0,
            #[cfg(test)]
            defer_merges: true,
        }
    }

    /// Forgets what the previous request met (its backend failure, a used-up range). Checked
    /// before written: a cached pair meets neither, and a store it does not need costs more
    /// than the load.
    #[inline]
    pub fn start_request(&mut self) {
        if self.request_failure.is_some() {
            self.request_failure = None;
        }
        if self.range_used_up {
            self.range_used_up = false;
        }
    }

    /// Counts a block handed out for `holder`. A device's allocation does not hold a reference
    /// to its device (an atomic increment and decrement per allocation, over a tenth of a
    /// cached pair's time); the allocator keeps one for all of them instead, taken when the first is
    /// handed out and given back by [`State::unhold`] when the last is freed. While any of
    /// them lives, the allocator so keeps itself alive, and with it every device handle an
    /// allocation carries.
    #[inline]
    pub fn hold(&mut self, holder: &dyn KeepAlive) {
        if self.held_blocks == 0 {
            self.kept_alive = Some(holder.keep_alive());
        }
        self.held_blocks += 1;
    }

    /// Counts a held block freed; returns the reference [`State::hold`] took when it was the
    /// last, for the caller to drop once it no longer refers into the allocator.
    #[inline]
    pub fn unhold(&mut self) -> Option<KeptAlive> {
        self.held_blocks -= 1;
        if self.held_blocks == 0 {
            self.kept_alive.take()
        } else {
            None
        }
    }

    /// The free blocks of `pool` on stream index `stream`.
    #[inline]
    pub fn free_set(&mut self, pool: PoolKind, stream: u32) -> &mut FreeSet {
        &mut self.free[stream as usize][pool as usize]
    }

    /// The free blocks of `pool` on stream index `stream`.
    #[inline]
    pub fn pool_free(&self, pool: PoolKind, stream: u32) -> &FreeSet {
        &self.free[stream as usize][pool as usize]
    }

    /// The free set block `slot` belongs to.
    #[inline]
    pub fn free_set_of(&mut self, slot: u32) -> &mut FreeSet {
        let n = &self.nodes[slot as usize];
        let (pool, stream) = (n.pool, n.stream);
        self.free_set(pool, stream)
    }

    /// The index of `stream` in [`State::streams`], added on first use.
    #[inline]
    pub fn stream_index(&mut self, stream: StreamId) -> u32 {
        if stream == StreamId::DEFAULT {
            return 0;
        }
        match self.streams.iter().position(|&s| s == stream) {
            Some(i) => i as u32,
            None => {
                self.streams.push(stream);
                self.free.push(Default::default());
                (self.streams.len() - 1) as u32
            }
        }
    }

    /// Keeps a backend failure for the request being served and for
    /// [`super::CachingAllocator::last_backend_error`], and logs it.
    pub fn note_failure(&mut self, name: &str, failure: BackendFailure) {
        crate::diagnostics::warn(
            crate::diagnostics::WarningOutput::Auto,
            &format!("{name}: {failure}"),
        );
        self.request_failure = Some(failure.clone());
        self.last_failure = Some(failure);
    }

    /// Whether block `slot` is a free, mapped block (one a free set holds).
    #[inline]
    pub fn is_free(&self, slot: u32) -> bool {
        let n = &self.nodes[slot as usize];
        !n.allocated && n.mapped
    }

    /// Whether block `slot` lies in the expandable segment.
    #[inline]
    pub fn in_expandable(&self, slot: u32) -> bool {
        self.segs[self.nodes[slot as usize].seg as usize].expandable
    }

    pub fn new_node(&mut self, node: Node) -> u32 {
        match self.spare_nodes.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                self.origins.push(BlockOrigin::default());
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// A new free block of `size` bytes at `addr` in segment `seg`, linked between `prev` and
    /// `next` and entered into its pool's free set.
    pub fn insert_free_node(
        &mut self,
        addr: u64,
        size: usize,
        seg: u32,
        prev: u32,
        next: u32,
    ) -> u32 {
        let (pool, stream) = (self.segs[seg as usize].pool, self.segs[seg as usize].stream);
        let now = self.lookups[pool as usize];
        let slot = self.new_node(Node::free(addr, size, seg, prev, next, pool, stream, now));
        self.free_set(pool, stream).insert(size, addr, slot);
        slot
    }

    /// A segment slot for a new segment (reused when one was released).
    pub fn segment_slot(&mut self) -> u32 {
        match self.spare_segs.pop() {
            Some(i) => i,
            None => {
                self.segs.push(Segment {
                    addr: 0,
                    size: 0,
                    pool: PoolKind::Large,
                    stream: 0,
                    head: NIL,
                    tail: NIL,
                    live: false,
                    expandable: false,
                });
                (self.segs.len() - 1) as u32
            }
        }
    }

    /// Registers `[addr, addr + bytes)` as a live segment of `pool` on stream index `stream`
    /// holding one free block.
    pub fn add_segment(
        &mut self,
        pool: PoolKind,
        stream: u32,
        addr: u64,
        bytes: usize,
        expandable: bool,
    ) -> u32 {
        let si = self.segment_slot();
        self.segs[si as usize] = Segment {
            addr,
            size: bytes,
            pool,
            stream,
            head: NIL,
            tail: NIL,
            live: true,
            expandable,
        };
        let head = self.insert_free_node(addr, bytes, si, NIL, NIL);
        let seg = &mut self.segs[si as usize];
        seg.head = head;
        seg.tail = head;
        si
    }

    pub fn largest_free(&self) -> u64 {
        let in_sets = self
            .free
            .iter()
            .flat_map(|sets| sets.iter().map(FreeSet::largest))
            .max()
            .unwrap_or(0);
        in_sets.max(self.deferred_largest()) as u64
    }

    /// Bytes reserved now.
    #[inline]
    pub fn reserved(&self) -> u64 {
        self.stats.total(Key::ReservedBytes)
    }

    /// Whether block `slot` shares its segment with other blocks (PyTorch's `is_split`).
    #[inline]
    pub fn is_split(&self, slot: u32) -> bool {
        let n = &self.nodes[slot as usize];
        n.prev != NIL || n.next != NIL
    }

    /// Records free block `slot` of `bytes` as an inactive split block appearing or going,
    /// when it shares its segment.
    #[inline]
    pub fn note_inactive(&mut self, slot: u32, bytes: usize, appeared: bool) {
        if self.is_split(slot) {
            let pool = self.nodes[slot as usize].pool;
            self.stats.on_inactive_split(pool, bytes, appeared);
        }
    }

    pub fn snapshot_stats(&self) -> MemoryStats {
        let d = &self.stats;
        let all = &d.detailed().all;
        let reserved = all.reserved_bytes.current;
        let allocated = all.allocated_bytes.current;
        MemoryStats {
            allocated_bytes: allocated,
            peak_allocated_bytes: all.allocated_bytes.peak,
            reserved_bytes: reserved,
            peak_reserved_bytes: all.reserved_bytes.peak,
            active_bytes: all.active_bytes.current,
            peak_active_bytes: all.active_bytes.peak,
            active_blocks: all.active.current,
            peak_active_blocks: all.active.peak,
            requested_bytes: all.requested_bytes.current,
            cached_free_bytes: reserved - all.active_bytes.current,
            largest_free_block: self.largest_free(),
            fragmentation: if reserved == 0 {
                0.0
            } else {
                1.0 - allocated as f64 / reserved as f64
            },
            segments: all.segment.current,
            backend_allocs: d.num_device_alloc,
            backend_frees: d.num_device_free,
            alloc_retries: d.num_alloc_retries,
            num_ooms: d.num_ooms,
            num_allocs: all.allocation.allocated,
            num_frees: all.allocation.freed,
        }
    }

    /// Best-fit free block for `size` in `pool` of stream index `stream` allowed by the
    /// max-split rules, split when [`policy::should_split`] says so. Returns the node slot, now
    /// sized for the request (not yet marked allocated).
    pub fn take_free(
        &mut self,
        pool: PoolKind,
        stream: u32,
        size: usize,
        max_split: Option<usize>,
    ) -> Option<u32> {
        self.lookups[pool as usize] += 1;
        let (bsize, baddr, slot) = match max_split {
            None => self.free_set(pool, stream).best_fit(size)?,
            Some(_) => self
                .pool_free(pool, stream)
                .fitting(size)
                .find(|&(b, _, slot)| {
                    policy::may_take(max_split, size, b, self.in_expandable(slot))
                })?,
        };
        self.note_inactive(slot, bsize, false);
        if policy::should_split(pool, self.in_expandable(slot), bsize, size, max_split) {
            // The remainder takes the block's place in the free set.
            let rest = self.cut(slot, size);
            let rest_addr = baddr + size as u64;
            self.free_set(pool, stream)
                .replace((bsize, baddr, slot), (bsize - size, rest_addr, rest));
            self.note_inactive(rest, bsize - size, true);
        } else {
            self.free_set(pool, stream).remove(bsize, baddr, slot);
        }
        Some(slot)
    }

    /// Takes exactly `[addr, addr + size)` for a planned request, when a free block of the
    /// expandable segment holds it: the block is cut before and after the range, the pieces
    /// staying free. Returns the slot of the range (not yet marked allocated).
    pub fn take_range(&mut self, addr: u64, size: usize) -> Option<u32> {
        let si = self.expandable?.seg?;
        let mut at = self.segs[si as usize].head;
        while at != NIL {
            let n = &self.nodes[at as usize];
            if n.addr + n.size as u64 > addr {
                break;
            }
            at = n.next;
        }
        if at == NIL || !self.is_free(at) {
            return None;
        }
        let (baddr, bsize, pool) = {
            let n = &self.nodes[at as usize];
            (n.addr, n.size, n.pool)
        };
        if baddr > addr || addr + size as u64 > baddr + bsize as u64 {
            return None;
        }
        self.lookups[pool as usize] += 1;
        self.free_set_of(at).remove(bsize, baddr, at);
        self.note_inactive(at, bsize, false);
        let slot = if addr > baddr {
            let front = (addr - baddr) as usize;
            self.nodes[at as usize].size = front;
            let slot = self.insert_node_after(at, addr, bsize - front);
            self.free_set_of(at).insert(front, baddr, at);
            self.note_inactive(at, front, true);
            slot
        } else {
            at
        };
        let rest = self.nodes[slot as usize].size - size;
        if rest > 0 {
            self.split(slot, size);
        }
        Some(slot)
    }

    /// Cuts free block `slot` (out of its free set) to `size` bytes; the rest becomes a free
    /// block after it.
    fn split(&mut self, slot: u32, size: usize) {
        let block = self.nodes[slot as usize].size;
        let rest = self.cut(slot, size);
        let addr = self.nodes[rest as usize].addr;
        self.free_set_of(rest).insert(block - size, addr, rest);
        self.note_inactive(rest, block - size, true);
    }

    /// Cuts block `slot` to `size` bytes; the rest becomes a free block linked after it, not
    /// yet in its free set nor counted. Returns the rest's slot.
    #[inline(always)]
    fn cut(&mut self, slot: u32, size: usize) -> u32 {
        let (addr, block, seg, next) = {
            let n = &self.nodes[slot as usize];
            (n.addr, n.size, n.seg, n.next)
        };
        let (pool, stream) = (self.segs[seg as usize].pool, self.segs[seg as usize].stream);
        let now = self.lookups[pool as usize];
        let rest = self.new_node(Node::free(
            addr + size as u64,
            block - size,
            seg,
            slot,
            next,
            pool,
            stream,
            now,
        ));
        if next != NIL {
            self.nodes[next as usize].prev = rest;
        } else {
            self.segs[seg as usize].tail = rest;
        }
        let n = &mut self.nodes[slot as usize];
        n.next = rest;
        n.size = size;
        rest
    }

    /// Marks block `slot` free and merges it with free neighbours of its segment; the merged
    /// block enters its pool's free set.
    pub fn free_block(&mut self, mut slot: u32) {
        let (pool, stream) = (
            self.nodes[slot as usize].pool,
            self.nodes[slot as usize].stream,
        );
        let tick = self.lookups[pool as usize];
        let n = &mut self.nodes[slot as usize];
        n.allocated = false;
        n.pending = false;
        n.has_uses = false;
        // The first free neighbour's key is replaced by the merged block's (one move in the
        // free set instead of a removal and an insertion); a second one is removed.
        let mut merged_into: Option<(usize, u64, u32)> = None;
        let prev = self.nodes[slot as usize].prev;
        if prev != NIL && self.is_free(prev) {
            let (psize, paddr) = (
                self.nodes[prev as usize].size,
                self.nodes[prev as usize].addr,
            );
            merged_into = Some((psize, paddr, prev));
            self.note_inactive(prev, psize, false);
            self.absorb_next(prev);
            slot = prev;
        }
        let next = self.nodes[slot as usize].next;
        if next != NIL && self.is_free(next) {
            let (nsize, naddr) = (
                self.nodes[next as usize].size,
                self.nodes[next as usize].addr,
            );
            if merged_into.is_some() {
                self.free_set(pool, stream).remove(nsize, naddr, next);
            } else {
                merged_into = Some((nsize, naddr, next));
            }
            self.note_inactive(next, nsize, false);
            self.absorb_next(slot);
        }
        let n = &mut self.nodes[slot as usize];
        n.freed_at = tick;
        let (size, addr) = (n.size, n.addr);
        let set = self.free_set(pool, stream);
        match merged_into {
            Some(old) => {
                set.replace(old, (size, addr, slot));
            }
            None => set.insert(size, addr, slot),
        }
        self.note_inactive(slot, size, true);
    }

    /// Merges the block after `slot` into `slot` (both in the same segment).
    #[inline(always)]
    pub fn absorb_next(&mut self, slot: u32) {
        let next = self.nodes[slot as usize].next;
        let (nsize, nnext) = (
            self.nodes[next as usize].size,
            self.nodes[next as usize].next,
        );
        let n = &mut self.nodes[slot as usize];
        n.size += nsize;
        n.next = nnext;
        let seg = n.seg;
        if nnext != NIL {
            self.nodes[nnext as usize].prev = slot;
        } else {
            self.segs[seg as usize].tail = slot;
        }
        self.spare_nodes.push(next);
    }

    /// Asks `backend` for a fixed segment of `bytes` for `pool` on stream index `stream`
    /// (within `limit`) and adds it; `false` when the limit or the backend refuses (a failure
    /// other than a shortage is kept: [`State::note_failure`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new_segment<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        limit: Option<u64>,
        name: &str,
        pool: PoolKind,
        stream: u32,
        bytes: usize,
    ) -> bool {
        if limit.is_some_and(|l| self.reserved() + bytes as u64 > l) {
            return false;
        }
        let addr = match backend.alloc_segment(bytes) {
            Ok(addr) if addr.saturating_add(bytes as u64) < ADDR_LIMIT => addr,
            Ok(addr) => {
                crate::diagnostics::warn(
                    crate::diagnostics::WarningOutput::Auto,
                    &format!("{name}: segment at {addr:#x} lies above 2^48; not usable"),
                );
                // SAFETY: just obtained from the backend with this size and never handed out.
                if let Err(BackendError::Driver(f)) = unsafe { backend.free_segment(addr, bytes) } {
                    self.note_failure(name, f);
                }
                return false;
            }
            Err(BackendError::OutOfMemory { .. }) => return false,
            Err(BackendError::Driver(f)) => {
                self.note_failure(name, f);
                return false;
            }
        };
        self.add_segment(pool, stream, addr, bytes, false);
        self.stats.on_reserve(pool, bytes, true);
        if self.max_split.is_some_and(|ms| bytes >= ms) {
            self.stats.oversize_segments.increase(1);
        }
        self.record(TraceEventKind::SegmentAlloc, addr, bytes as u64);
        true
    }

    /// Whether fixed segment `i` is live and holds one free block.
    pub fn is_idle_segment(&self, i: usize) -> bool {
        let seg = &self.segs[i];
        seg.live && !seg.expandable && {
            let head = &self.nodes[seg.head as usize];
            !head.allocated && head.next == NIL
        }
    }

    /// Returns the cache to the backend: first waits for the events of blocks freed while
    /// other streams used them (so those return to the pool), then releases every whole free
    /// granule of the expandable segment and every fully free fixed segment. Returns the bytes
    /// released.
    pub fn release_cached<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) -> u64 {
        self.synchronize_pending(backend, name);
        let mut released = self.unmap_free_granules(backend, name);
        for i in 0..self.segs.len() {
            if self.is_idle_segment(i) {
                released += self.release_segment(backend, name, i as u32);
            }
        }
        released
    }

    /// Returns fully free fixed segment `i` to the backend; returns its bytes (0 when the
    /// backend failed: the segment then stays, cached, and the failure is kept).
    pub fn release_segment<B: Backend + ?Sized>(&mut self, backend: &B, name: &str, i: u32) -> u64 {
        let seg = self.segs[i as usize].clone();
        // SAFETY: the segment came from `alloc_segment(seg.size)` and its only block is free,
        // so nothing handed out by this allocator points into it.
        if let Err(e) = unsafe { backend.free_segment(seg.addr, seg.size) } {
            let failure = match e {
                BackendError::Driver(f) => f,
                BackendError::OutOfMemory { .. } => BackendFailure {
                    op: format!("freeing the segment at {:#x}", seg.addr),
                    error: e.to_string(),
                },
            };
            self.note_failure(name, failure);
            return 0;
        }
        self.free_set(seg.pool, seg.stream)
            .remove(seg.size, seg.addr, seg.head);
        self.spare_nodes.push(seg.head);
        self.segs[i as usize].live = false;
        self.spare_segs.push(i);
        self.stats.on_release(seg.pool, seg.size, true);
        if self.max_split.is_some_and(|ms| seg.size >= ms) {
            self.stats.oversize_segments.decrease(1);
        }
        self.record(TraceEventKind::SegmentFree, seg.addr, seg.size as u64);
        seg.size as u64
    }

    /// Returns to the pool the pending blocks whose events have all completed (queried, not
    /// waited for). A failed query poisons the block and is kept as the request's failure.
    #[inline]
    pub fn process_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) {
        // Checked inline: every request passes here, and blocks rarely wait on other streams.
        if !self.pending.is_empty() {
            self.settle_pending(backend, name, false);
        }
    }

    /// Waits for the events of every pending block and returns the blocks to the pool (before
    /// the cache is released: `empty_cache` and the out-of-memory retry).
    pub fn synchronize_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) {
        self.settle_pending(backend, name, true);
    }

    /// Queries (or, when `wait`, waits for) the pending blocks' events and returns the blocks
    /// whose events all completed. Only a wait retries a poisoned block: it records the events
    /// that could not be recorded (an event recorded now follows the work that used the block)
    /// and waits for them all.
    fn settle_pending<B: Backend + ?Sized>(&mut self, backend: &B, name: &str, wait: bool) {
        if self.pending.is_empty() {
            return;
        }
        // A block returning to its pool may border a block whose merge is deferred.
        self.settle_deferred();
        let mut pending = std::mem::take(&mut self.pending);
        let (mut failures, mut finished) = (Vec::new(), Vec::new());
        pending.retain_mut(|p| {
            if p.poisoned {
                if !wait {
                    return true;
                }
                p.unrecorded
                    .retain(|&stream| match backend.record_event(stream) {
                        Ok(Some(e)) => {
                            p.events.push(e);
                            false
                        }
                        Ok(None) => false,
                        Err(err) => {
                            failures.push(err);
                            true
                        }
                    });
                if !p.unrecorded.is_empty() {
                    return true;
                }
                p.poisoned = false;
            }
            let done = |e: EventId| {
                if wait {
                    backend.synchronize_event(e).map(|()| true)
                } else {
                    backend.query_event(e)
                }
            };
            p.events.retain(|&e| match done(e) {
                Ok(true) => {
                    backend.destroy_event(e);
                    false
                }
                Ok(false) => true,
                Err(err) => {
                    failures.push(err);
                    p.poisoned = true;
                    true
                }
            });
            let keep = !p.events.is_empty() || p.poisoned;
            if !keep {
                finished.push(p.slot);
            }
            keep
        });
        self.pending = pending;
        for err in failures {
            let failure = match err {
                BackendError::Driver(f) => f,
                e => BackendFailure {
                    op: "waiting for a stream event".into(),
                    error: e.to_string(),
                },
            };
            self.note_failure(name, failure);
        }
        for slot in finished {
            self.finish_free(slot);
        }
    }

    /// Returns pending block `slot`, whose streams are done with it, to its pool.
    pub fn finish_free(&mut self, slot: u32) {
        let (pool, size) = (
            self.nodes[slot as usize].pool,
            self.nodes[slot as usize].size,
        );
        self.stats.on_deactivate(pool, size);
        self.free_block(slot);
    }

    /// Records a segment or out-of-memory event in the trace, if it is recording.
    #[inline(always)]
    pub fn record(&mut self, kind: TraceEventKind, addr: u64, size: u64) {
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
    pub fn push_event(&mut self, kind: TraceEventKind, addr: u64, size: u64) {
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
    /// delays the release (#24, BENCHMARKS.md). The event is written in one pass, its origin
    /// read where the block keeps it: built on the caller's stack and copied, the origin was
    /// loaded wider than it was stored, which waits for the store. Inlined into both callers:
    /// out of line, the call's register saves and the origin held across it cost the recording
    /// pair about a tenth of its time, more than the larger code costs the untraced pair.
    #[inline(always)]
    pub fn record_block_event(
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

    /// The `count` largest allocated blocks, largest first (by address among equals).
    pub fn largest_live(&self, count: usize) -> Vec<LiveAllocation> {
        let mut live: Vec<(u32, &Node)> = Vec::new();
        for s in self.segs.iter().filter(|s| s.live) {
            let mut at = s.head;
            while at != NIL {
                let n = &self.nodes[at as usize];
                if n.mapped && n.allocated {
                    live.push((at, n));
                }
                at = n.next;
            }
        }
        live.sort_by(|a, b| b.1.size.cmp(&a.1.size).then(a.1.addr.cmp(&b.1.addr)));
        live.into_iter()
            .take(count)
            .map(|(slot, n)| LiveAllocation {
                size: n.size as u64,
                requested: n.requested as u64,
                origin: self.sites.origin(&self.origins[slot as usize]),
            })
            .collect()
    }

    /// The live segments and their blocks, by address. The expandable segment appears as one
    /// segment per mapped run when holes of it were unmapped.
    pub fn segment_snapshots(&self) -> Vec<SegmentSnapshot> {
        let mut segments = Vec::new();
        for s in self.segs.iter().filter(|s| s.live) {
            let mut run: Option<SegmentSnapshot> = None;
            let mut at = s.head;
            while at != NIL {
                let n = &self.nodes[at as usize];
                if !n.mapped {
                    segments.extend(run.take());
                } else if prev_deferred(self, at) {
                    // Shown with the block whose merge with it is deferred.
                } else {
                    let r = run.get_or_insert_with(|| SegmentSnapshot {
                        addr: n.addr,
                        size: 0,
                        pool: s.pool,
                        expandable: s.expandable,
                        blocks: Vec::new(),
                    });
                    // A free block whose merge is deferred shows as the merged block.
                    let size = self.logical_size(at);
                    r.size += size as u64;
                    r.blocks.push(BlockSnapshot {
                        addr: n.addr,
                        size: size as u64,
                        allocated: n.allocated,
                        requested: if n.allocated { n.requested as u64 } else { 0 },
                        id: if n.allocated { n.id } else { 0 },
                        origin: if n.allocated {
                            self.sites.origin(&self.origins[at as usize])
                        } else {
                            None
                        },
                    });
                }
                at = n.next;
            }
            segments.extend(run);
        }
        segments.sort_by_key(|s| s.addr);
        segments
    }

    /// See [`super::CachingAllocator::check_invariants`]. A merge the cached pair deferred is
    /// checked as what it stands for: one free block (the `deferred` module).
    pub fn check_invariants(&self) -> Result<(), String> {
        let (mut reserved, mut active, mut allocated, mut blocks, mut free_count) =
            (0u64, 0u64, 0u64, 0u64, 0usize);
        let mut inactive_split = 0u64;
        let mut segments = 0u64;
        for (i, s) in self.segs.iter().enumerate().filter(|(_, s)| s.live) {
            segments += 1;
            reserved += s.size as u64;
            let mut prev_unmapped = false;
            let mut at = s.head;
            let mut addr = s.addr;
            let mut prev = NIL;
            let mut prev_free = false;
            while at != NIL {
                let n = &self.nodes[at as usize];
                if n.addr != addr
                    || n.seg != i as u32
                    || n.prev != prev
                    || n.pool != s.pool
                    || n.stream != s.stream
                {
                    return Err(format!(
                        "segment {:#x}: block {:#x} out of place",
                        s.addr, n.addr
                    ));
                }
                if !n.mapped {
                    if prev_unmapped || !s.expandable || n.next == NIL {
                        return Err(format!("unmapped block {:#x} misplaced", n.addr));
                    }
                    reserved -= n.size as u64;
                } else if n.allocated {
                    active += n.size as u64;
                    if !n.pending {
                        allocated += n.size as u64;
                    }
                    blocks += 1;
                    if n.rounded > n.size {
                        return Err(format!("block {:#x} smaller than its request", n.addr));
                    }
                } else if prev != NIL && prev == self.deferred[n.pool as usize] {
                    // The second half of a free block whose merge is deferred (`deferred`): the
                    // first half checked both.
                } else if self.deferred[n.pool as usize] == at {
                    if prev_free || n.stream != 0 || n.next == NIL || !self.is_free(n.next) {
                        return Err(format!("deferred merge of block {:#x} misplaced", n.addr));
                    }
                    let rest = &self.nodes[n.next as usize];
                    free_count += 1;
                    if n.prev != NIL || rest.next != NIL {
                        inactive_split += (n.size + rest.size) as u64;
                    }
                    let set = self.pool_free(s.pool, s.stream);
                    if !set.contains(rest.size, rest.addr, n.next)
                        || set.contains(n.size, n.addr, at)
                    {
                        return Err(format!(
                            "deferred merge of block {:#x}: its neighbour's key is not the one in \
                             its pool",
                            n.addr
                        ));
                    }
                } else {
                    if prev_free {
                        return Err(format!("free block {:#x} not coalesced", n.addr));
                    }
                    free_count += 1;
                    if self.is_split(at) {
                        inactive_split += n.size as u64;
                    }
                    if !self
                        .pool_free(s.pool, s.stream)
                        .contains(n.size, n.addr, at)
                    {
                        return Err(format!("free block {:#x} missing from its pool", n.addr));
                    }
                }
                // The two halves of a deferred merge count as one free block.
                prev_free = !n.allocated && n.mapped && self.deferred[n.pool as usize] != at;
                prev_unmapped = !n.mapped;
                addr += n.size as u64;
                prev = at;
                at = n.next;
            }
            if addr != s.addr + s.size as u64 {
                return Err(format!("blocks of segment {:#x} do not tile it", s.addr));
            }
            if prev != s.tail {
                return Err(format!("segment {:#x}: wrong tail block", s.addr));
            }
        }
        let pending_nodes = self
            .nodes
            .iter()
            .filter(|n| n.allocated && n.pending)
            .count();
        if self.pending.len() != pending_nodes
            || self.pending.iter().any(|p| {
                let n = &self.nodes[p.slot as usize];
                !(n.allocated && n.pending)
            })
        {
            return Err("pending frees disagree with the blocks".into());
        }
        let s = self.snapshot_stats();
        let counted = self.stats.total(Key::InactiveSplitBytes);
        if inactive_split != counted {
            return Err(format!(
                "inactive split bytes {inactive_split} counted as {counted}"
            ));
        }
        let in_sets: usize = self
            .free
            .iter()
            .flat_map(|sets| sets.iter().map(FreeSet::len))
            .sum();
        if free_count != in_sets {
            return Err("free sets hold blocks that are not free".into());
        }
        if (reserved, active, allocated, blocks, segments)
            != (
                s.reserved_bytes,
                s.active_bytes,
                s.allocated_bytes,
                s.active_blocks,
                s.segments,
            )
        {
            return Err(format!(
                "statistics disagree with the blocks: reserved {reserved}/{}, active {active}/{}, \
                 allocated {allocated}/{}, blocks {blocks}/{}, segments {segments}/{}",
                s.reserved_bytes, s.active_bytes, s.allocated_bytes, s.active_blocks, s.segments
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::FreeSet;
    use std::collections::BTreeSet;

    /// A set of one block (the pair loop's case, replaced without a search): the replacement
    /// is the one block afterwards; a key it does not hold is inserted beside it instead.
    #[test]
    fn replacing_the_only_block_leaves_the_new_one_alone() {
        let mut set = FreeSet::default();
        set.insert(2 << 20, 0x10_0000, 7);
        assert!(set.replace((2 << 20, 0x10_0000, 7), (1536, 0x10_0200, 9)));
        assert!(set.fitting(0).eq([(1536, 0x10_0200, 9)]));
        assert!(!set.replace((2 << 20, 0x10_0000, 7), (4096, 0x20_0000, 3)));
        assert!(set
            .fitting(0)
            .eq([(1536, 0x10_0200, 9), (4096, 0x20_0000, 3)]));
    }

    /// Random inserts, removals and replacements that cross the vector/B-tree bounds both ways:
    /// every answer equals a plain B-tree's over the same blocks.
    #[test]
    fn free_set_answers_as_a_btree_across_its_representations() {
        let mut set = FreeSet::default();
        let mut model: BTreeSet<(usize, u64, u32)> = BTreeSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut saw_tree, mut saw_vec_again) = (false, false);
        for step in 0..20_000u32 {
            // Grow for a while, then shrink, then grow again: both switches happen.
            let grow = (step / 2_000) % 2 == 0;
            let r = next();
            let size = 512 * (1 + (r % 64) as usize);
            let addr = 512 * ((r >> 8) % 4096);
            if grow == ((r >> 40) % 4 != 0) {
                set.insert(size, addr, step);
                model.insert((size, addr, step));
            } else if let Some(&(s, a, slot)) =
                model.iter().nth((r >> 20) as usize % model.len().max(1))
            {
                assert!(set.remove(s, a, slot));
                model.remove(&(s, a, slot));
                assert!(!set.remove(s, a, slot), "a removed block is gone");
            }
            if let Some(&(s, a, slot)) = model
                .iter()
                .nth((r >> 24) as usize % model.len().max(1))
                .filter(|_| (r >> 50) % 3 == 0)
            {
                // A replacement (as a split or a merge makes): larger or smaller, sometimes
                // a block the set already holds.
                let new = match (r >> 52) % 4 {
                    0 => model.iter().next().copied().unwrap_or((s, a, slot)),
                    1 => (s, a, slot),
                    _ => (512 * (1 + (r >> 54) as usize % 64), a + 512, step),
                };
                assert!(set.replace((s, a, slot), new));
                model.remove(&(s, a, slot));
                model.insert(new);
                assert!(set.fitting(0).eq(model.iter().copied()), "step {step}");
                let absent = (1 << 40, 0, u32::MAX);
                assert!(!set.replace(absent, absent), "a block never held");
                set.remove(absent.0, absent.1, absent.2);
            }
            match &set {
                FreeSet::Tree(_) => saw_tree = true,
                FreeSet::Sorted(_) if saw_tree => saw_vec_again = true,
                FreeSet::Sorted(_) => {}
            }
            assert_eq!(set.len(), model.len());
            let want = 512 * (1 + (next() % 70) as usize);
            assert_eq!(
                set.best_fit(want),
                model.range((want, 0, 0)..).next().copied(),
                "best fit for {want} at step {step}"
            );
            assert_eq!(set.largest(), model.last().map_or(0, |b| b.0));
            if step % 97 == 0 {
                assert!(set.fitting(want).eq(model.range((want, 0, 0)..).copied()));
                assert!(set.descending().eq(model.iter().rev().copied()));
                if let Some(&(s, a, slot)) = model.first() {
                    assert!(set.contains(s, a, slot));
                }
            }
        }
        assert!(
            saw_tree && saw_vec_again,
            "both representations were exercised"
        );
    }
}
