//! The allocator's bookkeeping under its lock ([`State`]): the block list of every segment, the
//! free sets of both pools, the statistics counters, the event trace and the iteration planner,
//! and every operation on them — take a free block (best fit, split), hand it out, free it
//! (coalesce), add and release segments, keep the blocks other streams may still use out of
//! the pool until their events complete.
//!
//! Only this module and the files under it read or write `State`'s fields: the allocator
//! (`allocator.rs`) drives it through the `pub(crate)` methods, so the invariants
//! [`State::check_invariants`] verifies (blocks tile their segments, free sets hold exactly
//! the free blocks, statistics are sums over the blocks) are kept in one place.
//!
//! Free blocks are pooled per stream: a segment belongs to the stream it was allocated for, and
//! its free blocks serve only requests on that stream, where stream order makes reuse safe.
//!
//! A backend call that fails leaves the books as they were: segments and pages are removed from
//! them only after the backend gave them back, and the failure is kept
//! ([`State::note_failure`]) for the error of the request that met it.
//!
//! Decisions (which block may serve a request, whether to split, segment sizes) come from
//! `policy.rs`, as pure functions. The files of this module:
//!
//! | file | owns |
//! | --- | --- |
//! | `mod.rs` | blocks and segments: best fit, split, coalesce; a block handed out and freed |
//! | `free_set.rs` | [`FreeSet`]: one pool's free blocks by (size, address) |
//! | `deferred.rs` | deferred merges: the cached pair without node churn |
//! | `expandable.rs` | the expandable segment: setup, growing, shrinking |
//! | `segments.rs` | fixed segments added and released, garbage collection, everything released at the allocator's drop |
//! | `pending.rs` | blocks freed while other streams may still use them |
//! | `planned.rs` | a planned request placed where its iteration's plan puts it |
//! | `events.rs` | the trace events the state records |
//! | `readers.rs` | statistics, snapshots, the largest blocks, the invariant check |

mod deferred;
mod events;
pub(super) mod expandable;
mod free_set;
mod pending;
mod planned;
mod readers;
mod segments;

use super::plan::Planner;
use super::policy;
use super::stats::{Counters, Key};
use super::trace::{BlockOrigin, RequestOrigin, Sites, TraceRing};
use super::{Backend, BackendFailure, PoolKind, StreamId, TraceEventKind};
use expandable::Expandable;
use free_set::FreeSet;
use pending::PendingFree;
use std::collections::HashMap;

/// No block (end of a segment's list).
const NIL: u32 = u32::MAX;

/// One block: a piece of a segment, free or handed out.
#[derive(Debug, Clone)]
struct BlockNode {
    addr: u64,
    size: usize,
    /// Rounded request while allocated.
    rounded: usize,
    requested: usize,
    id: u64,
    seg: u32,
    prev: u32,
    next: u32,
    pool: PoolKind,
    /// Index of the segment's stream in [`State::streams`].
    stream: u32,
    /// Handed out, or freed while waiting for other streams' events (`pending`): not free.
    allocated: bool,
    /// Freed by its owner, but kept out of the pool until the events recorded on the streams
    /// that used it complete ([`State::pending`]).
    pending: bool,
    /// Other streams were recorded as using this block ([`State::stream_uses`]).
    has_uses: bool,
    /// `false` for a hole of the expandable segment whose pages were unmapped: neither free
    /// (not in a free set, not reserved) nor allocated, until pages are mapped there again.
    mapped: bool,
    /// The pool's lookup count ([`State::lookups`]) when the block last became free: its age
    /// for garbage collection is the lookups since.
    freed_at: u64,
}

impl BlockNode {
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
    ) -> BlockNode {
        BlockNode {
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
struct Segment {
    addr: u64,
    size: usize,
    pool: PoolKind,
    /// Index of the stream the segment serves in [`State::streams`].
    stream: u32,
    head: u32,
    /// Last block (the one that grows or shrinks in an expandable segment).
    tail: u32,
    live: bool,
    expandable: bool,
}

/// What an allocator's held blocks keep alive ([`State::hold`]), type-erased.
#[doc(hidden)]
pub type KeptAlive = std::sync::Arc<dyn Send + Sync>;

/// The holder of a block handed out for a device's allocation: it gives the reference the
/// allocator keeps while any such block lives, asked only when the first one is handed out.
#[doc(hidden)]
pub trait KeepAlive {
    /// A new reference to what the held blocks keep alive.
    fn keep_alive(&self) -> KeptAlive;
}

/// Everything the allocator's mutex guards.
#[doc(hidden)]
pub struct State {
    nodes: Vec<BlockNode>,
    /// Where each allocated block was made, by slot (`None` for free blocks and spare slots).
    /// Kept beside the nodes, not in them: splitting and coalescing copy nodes around, and
    /// only `hand_out` and `free` need the origin.
    origins: Vec<BlockOrigin>,
    /// The call sites `origins` refer to.
    sites: Sites,
    spare_nodes: Vec<u32>,
    segs: Vec<Segment>,
    spare_segs: Vec<u32>,
    /// The streams blocks were allocated on; index 0 is [`StreamId::DEFAULT`].
    streams: Vec<StreamId>,
    /// Free blocks per stream index, per pool (small, large).
    free: Vec<[FreeSet; 2]>,
    /// Other streams recorded as using a handed-out block, by slot.
    stream_uses: HashMap<u32, Vec<StreamId>>,
    /// Blocks freed while other streams may still use them.
    pending: Vec<PendingFree>,
    /// The backend failure met by the request being served (cleared when a request starts).
    request_failure: Option<BackendFailure>,
    /// Whether the last attempt to grow the expandable segment at its end was refused because
    /// its address range is used up (while the limit had room).
    range_used_up: bool,
    /// The most recent backend failure.
    last_failure: Option<BackendFailure>,
    stats: Counters,
    /// `max_split_size`, for the oversize statistics.
    max_split: Option<usize>,
    next_id: u64,
    /// Free-block lookups per pool (small, large): PyTorch's `gc_count` clock.
    lookups: [u64; 2],
    trace: TraceRing,
    expandable: Option<Expandable>,
    /// The allocator's creation on the clock of [`super::trace::monotonic_ns`]: the origin of
    /// trace times.
    start_ns: u64,
    /// Recordings and plans of batch-scope iterations.
    planner: Planner,
    /// Blocks handed out with a holder ([`State::hold`]) and not yet freed.
    held_blocks: u64,
    /// What the held blocks keep alive while any of them lives ([`State::hold`]).
    kept_alive: Option<KeptAlive>,
    /// Per pool (small, large), the freed block of the default stream whose merge with the
    /// free block after it is deferred (`NIL`: none; the `deferred` module).
    deferred: [u32; 2],
    /// Requests served from a merged block whose merge was deferred.
    deferred_reuses: u64,
    /// Off: every free merges at once (the tests' reference for deferred merges).
    #[cfg(test)]
    defer_merges: bool,
}

/// Whether block `slot` is the second half of a free block whose merge is deferred.
fn prev_deferred(st: &State, slot: u32) -> bool {
    let n = &st.nodes[slot as usize];
    n.prev != NIL && st.deferred[n.pool as usize] == n.prev
}

impl State {
    /// The state of a new allocator: no segment yet, the expandable segment's range (if any)
    /// reserved, a trace ring of `trace_capacity` events, oversize statistics counted from
    /// `max_split` (`max_split_size`).
    #[doc(hidden)]
    pub fn new(
        trace_capacity: usize,
        expandable: Option<Expandable>,
        max_split: Option<usize>,
    ) -> Self {
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
            max_split,
            next_id: 1,
            lookups: [0; 2],
            trace: TraceRing::stamped(trace_capacity, start_ns),
            expandable,
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
    #[doc(hidden)]
    pub fn start_request(&mut self) {
        if self.request_failure.is_some() {
            self.request_failure = None;
        }
        if self.range_used_up {
            self.range_used_up = false;
        }
    }

    /// Counts a block handed out for `holder`. A device's allocation does not hold a reference
    /// to its device (an atomic increment and decrement per allocation: `docs/perf-notes.md`,
    /// "Stores, atomics and the cached pair"); the allocator keeps one for all of them instead,
    /// taken when the first is handed out and given back by [`State::unhold`] when the last is freed. While any of
    /// them lives, the allocator so keeps itself alive, and with it every device handle an
    /// allocation carries.
    #[inline]
    fn hold(&mut self, holder: &dyn KeepAlive) {
        if self.held_blocks == 0 {
            self.kept_alive = Some(holder.keep_alive());
        }
        self.held_blocks += 1;
    }

    /// Counts a held block freed; returns the reference [`State::hold`] took when it was the
    /// last, for the caller to drop once it no longer refers into the allocator.
    #[inline]
    fn unhold(&mut self) -> Option<KeptAlive> {
        self.held_blocks -= 1;
        if self.held_blocks == 0 {
            self.kept_alive.take()
        } else {
            None
        }
    }

    /// The free blocks of `pool` on stream index `stream`.
    #[inline]
    fn free_set(&mut self, pool: PoolKind, stream: u32) -> &mut FreeSet {
        &mut self.free[stream as usize][pool as usize]
    }

    /// The free blocks of `pool` on stream index `stream`.
    #[inline]
    fn pool_free(&self, pool: PoolKind, stream: u32) -> &FreeSet {
        &self.free[stream as usize][pool as usize]
    }

    /// The free set block `slot` belongs to.
    #[inline]
    fn free_set_of(&mut self, slot: u32) -> &mut FreeSet {
        let n = &self.nodes[slot as usize];
        let (pool, stream) = (n.pool, n.stream);
        self.free_set(pool, stream)
    }

    /// The index of `stream` in [`State::streams`], added on first use.
    #[inline]
    #[doc(hidden)]
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
    fn note_failure(&mut self, name: &str, failure: BackendFailure) {
        crate::diagnostics::warn(
            crate::diagnostics::WarningOutput::Auto,
            &format!("{name}: {failure}"),
        );
        self.request_failure = Some(failure.clone());
        self.last_failure = Some(failure);
    }

    /// Whether block `slot` is a free, mapped block (one a free set holds).
    #[inline]
    fn is_free(&self, slot: u32) -> bool {
        let n = &self.nodes[slot as usize];
        !n.allocated && n.mapped
    }

    /// Whether block `slot` lies in the expandable segment.
    #[inline]
    fn in_expandable(&self, slot: u32) -> bool {
        self.segs[self.nodes[slot as usize].seg as usize].expandable
    }

    fn new_node(&mut self, node: BlockNode) -> u32 {
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
    fn insert_free_node(&mut self, addr: u64, size: usize, seg: u32, prev: u32, next: u32) -> u32 {
        let (pool, stream) = (self.segs[seg as usize].pool, self.segs[seg as usize].stream);
        let now = self.lookups[pool as usize];
        let slot = self.new_node(BlockNode::free(
            addr, size, seg, prev, next, pool, stream, now,
        ));
        self.free_set(pool, stream).insert(size, addr, slot);
        slot
    }

    /// A segment slot for a new segment (reused when one was released).
    fn segment_slot(&mut self) -> u32 {
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
    fn add_segment(
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

    /// Bytes reserved now.
    #[inline]
    #[doc(hidden)]
    pub fn reserved(&self) -> u64 {
        self.stats.total(Key::ReservedBytes)
    }

    /// Whether block `slot` shares its segment with other blocks (PyTorch's `is_split`).
    #[inline]
    fn is_split(&self, slot: u32) -> bool {
        let n = &self.nodes[slot as usize];
        n.prev != NIL || n.next != NIL
    }

    /// Records free block `slot` of `bytes` as an inactive split block appearing or going,
    /// when it shares its segment.
    #[inline]
    fn note_inactive(&mut self, slot: u32, bytes: usize, appeared: bool) {
        if self.is_split(slot) {
            let pool = self.nodes[slot as usize].pool;
            self.stats.on_inactive_split(pool, bytes, appeared);
        }
    }
    /// Best-fit free block for `size` in `pool` of stream index `stream` allowed by the
    /// max-split rules, split when [`policy::should_split`] says so. Returns the node slot, now
    /// sized for the request (not yet marked allocated).
    #[doc(hidden)]
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
        let rest = self.new_node(BlockNode::free(
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
    fn free_block(&mut self, mut slot: u32) {
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
    fn absorb_next(&mut self, slot: u32) {
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

    /// Hands block `slot` (sized for the request, from `pool` of stream index `stream`) out for a request of
    /// `requested` bytes rounded to `size`: marked allocated, counted, its origin kept and its
    /// event recorded (`read`: the clock as the call read it before it took the lock). Returns
    /// its address, its id and its stream. The block keeps `holder` alive while it lives
    /// ([`State::hold`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    #[doc(hidden)]
    pub fn hand_out(
        &mut self,
        slot: u32,
        pool: PoolKind,
        stream: u32,
        size: usize,
        requested: usize,
        origin: &mut RequestOrigin,
        holder: Option<&dyn KeepAlive>,
        read: Option<u64>,
    ) -> (u64, u64, StreamId) {
        if let Some(holder) = holder {
            self.hold(holder);
        }
        let id = self.next_id;
        self.next_id += 1;
        let n = &mut self.nodes[slot as usize];
        n.allocated = true;
        n.rounded = size;
        n.requested = requested;
        n.id = id;
        // The request's pool, which served the block: known before the node is loaded.
        debug_assert_eq!(n.pool, pool, "block {slot} served from another pool");
        let (addr, block_size) = (n.addr, n.size);
        self.stats.on_alloc(pool, block_size, requested);
        if self.max_split.is_some_and(|ms| block_size >= ms) {
            self.stats.on_oversize_allocation(true);
        }
        self.origins[slot as usize].set(&mut self.sites, origin);
        if self.trace.enabled() {
            self.record_block_event(TraceEventKind::Alloc, addr, size as u64, slot, read);
        }
        (addr, id, self.streams[stream as usize])
    }

    /// Whether block `slot` is the live block handed out at `addr` with `id` and `size` (the
    /// block a caller gives back is this allocator's, and not yet freed).
    #[inline]
    #[doc(hidden)]
    pub fn owns(&self, slot: u32, addr: u64, id: u64, size: usize) -> bool {
        self.nodes.get(slot as usize).is_some_and(|n| {
            n.allocated && !n.pending && n.addr == addr && n.id == id && n.rounded == size
        })
    }

    /// Frees block `slot` ([`State::owns`] it), handed out as `id` for a request of
    /// `requested` bytes rounded to `size`: counted as freed, its event recorded (`read`: as
    /// for [`State::hand_out`]), and the block back in its pool — its merge with the free
    /// block after it deferred when it may be (the `deferred` module), or once the events
    /// recorded on the other streams that used it complete. `held`: the block was handed out
    /// with a holder; returns what the held blocks kept alive when it was the last of them
    /// ([`State::unhold`]), for the caller to drop once it no longer refers into the
    /// allocator.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    #[doc(hidden)]
    pub fn free<B: Backend + ?Sized>(
        &mut self,
        slot: u32,
        size: usize,
        requested: usize,
        id: u64,
        held: bool,
        read: Option<u64>,
        backend: &B,
        name: &str,
    ) -> Option<KeptAlive> {
        let kept_alive = if held { self.unhold() } else { None };
        let (node_size, pool) = (
            self.nodes[slot as usize].size,
            self.nodes[slot as usize].pool,
        );
        self.stats.on_free(pool, node_size, requested);
        if self.max_split.is_some_and(|ms| node_size >= ms) {
            self.stats.on_oversize_allocation(false);
        }
        // The free's event takes the block's origin; untraced, it is dropped here.
        if self.trace.enabled() {
            self.record_block_event(
                TraceEventKind::Free,
                self.nodes[slot as usize].addr,
                size as u64,
                slot,
                read,
            );
        } else {
            drop(std::mem::take(&mut self.origins[slot as usize]));
        }
        self.planner.on_free(id);
        // The common case: no other stream used the block, it goes back to its pool now (its
        // merge with the free block after it deferred when it may be: the `deferred` module).
        if self.may_defer(slot) && !self.nodes[slot as usize].has_uses {
            self.free_deferred(slot);
        } else {
            self.settle_pool(pool);
            if !self.nodes[slot as usize].has_uses {
                self.finish_free(slot);
            } else {
                self.free_after_uses(slot, backend, name);
            }
        }
        kept_alive
    }

    /// Records that work queued on `stream` uses handed-out block `slot` (see
    /// [`super::CachingAllocator::record_stream`]).
    #[doc(hidden)]
    pub fn record_stream(&mut self, slot: u32, stream: StreamId) {
        self.nodes[slot as usize].has_uses = true;
        let uses = self.stream_uses.entry(slot).or_default();
        if !uses.contains(&stream) {
            uses.push(stream);
        }
    }

    /// Whether the large pool of the default stream grows by mapping pages into the
    /// expandable segment.
    #[inline]
    #[doc(hidden)]
    pub fn has_expandable(&self) -> bool {
        self.expandable.is_some()
    }

    /// The address range reserved for the expandable segment, if there is one.
    #[doc(hidden)]
    pub fn expandable_range(&self) -> Option<std::ops::Range<u64>> {
        self.expandable.map(|e| e.addr..e.addr + e.virt as u64)
    }

    /// Counts a retry after the cache was released (`alloc_retries`).
    #[doc(hidden)]
    pub fn count_alloc_retry(&mut self) {
        self.stats.num_alloc_retries += 1;
    }

    /// Counts an out-of-memory failure of a request rounded to `rounded` bytes and records its
    /// event; returns the backend failure the request met, if any (a failure, not a
    /// shortage). The deferred merges are performed first, so the error describes the state
    /// eager merges leave.
    #[doc(hidden)]
    pub fn count_oom(&mut self, rounded: usize) -> Option<BackendFailure> {
        self.settle_deferred();
        let backend_error = self.request_failure.take();
        self.stats.num_ooms += 1;
        self.record(TraceEventKind::Oom, 0, rounded as u64);
        backend_error
    }

    /// Whether the last request found the expandable segment's address range used up while
    /// the limit had room.
    #[doc(hidden)]
    pub fn range_used_up(&self) -> bool {
        self.range_used_up
    }

    /// The most recent backend failure that was not a shortage of memory.
    #[doc(hidden)]
    pub fn last_failure(&self) -> Option<BackendFailure> {
        self.last_failure.clone()
    }

    /// The statistics counters.
    #[doc(hidden)]
    pub fn counters(&self) -> &Counters {
        &self.stats
    }

    /// Peaks back to the current values.
    #[doc(hidden)]
    pub fn reset_peaks(&mut self) {
        self.stats.reset_peaks();
    }

    /// Accumulated counts back to 0 (PyTorch's `reset_accumulated_memory_stats`).
    #[doc(hidden)]
    pub fn reset_accumulated(&mut self) {
        self.stats.reset_accumulated();
    }

    /// The recordings and plans of batch-scope iterations.
    #[doc(hidden)]
    pub fn planner(&mut self) -> &mut Planner {
        &mut self.planner
    }

    /// Requests served from a merged block whose merge was deferred.
    #[doc(hidden)]
    pub fn deferred_reuses(&self) -> u64 {
        self.deferred_reuses
    }

    /// Makes every free merge at once (the tests' reference for deferred merges).
    #[cfg(test)]
    #[doc(hidden)]
    pub fn merge_eagerly(&mut self) {
        self.defer_merges = false;
    }
}
