//! Deferred coalescing: the cached pair without node churn.
//!
//! A block freed on the default stream whose next neighbour is free (and whose previous one is
//! not) is merged with that neighbour lazily: it is marked free and counted as merged at once
//! (statistics, peaks and the trace are exactly those of the merge), but the two nodes stay
//! apart and the free set keeps the neighbour's key, until either
//! - the next request of the same pool takes the merged block, which best fit would have
//!   chosen: the two nodes are then resized in place to the block handed out and the rest, with
//!   no node freed, linked, unlinked or taken from the spare list (a pair loop's every request),
//! - or another path that changes blocks takes the lock: [`State::settle_deferred`] (or
//!   [`State::settle_pool`], for a request or free of the same pool off the pair's path)
//!   performs the merge first, so it finds the state the eager merge leaves.
//!
//! Readers do not perform it (a check after every call would turn the shortcut off): the
//! statistics are already the merge's, and `largest_free`, the snapshot and the invariant check
//! show the two nodes as the one merged block.
//!
//! At most one merge per pool is deferred. The state either path leaves is the eager one:
//! same blocks at the same addresses, same free sets, same statistics; only which spare node
//! slot a block occupies may differ, and slots are never shown.

use super::free_set::FreeSet;
use super::{State, NIL};
use crate::{policy, PoolKind};

impl State {
    /// Whether block `slot`, being freed, may have its merge deferred: on the default stream,
    /// its next neighbour free, its previous one not, and no merge deferred in its pool.
    #[inline(always)]
    pub(super) fn may_defer(&self, slot: u32) -> bool {
        #[cfg(test)]
        if !self.defer_merges {
            return false;
        }
        let n = &self.nodes[slot as usize];
        n.stream == 0
            && n.next != NIL
            && self.is_free(n.next)
            && (n.prev == NIL || !self.is_free(n.prev))
            && self.deferred[n.pool as usize] == NIL
    }

    /// Frees block `slot` ([`Self::may_defer`]), counted as merged with its next neighbour,
    /// the merge itself deferred. Does what [`Self::finish_free`] does to the statistics, in
    /// the same order.
    #[inline(always)]
    pub(super) fn free_deferred(&mut self, slot: u32) {
        let (pool, size, prev, next) = {
            let n = &self.nodes[slot as usize];
            (n.pool, n.size, n.prev, n.next)
        };
        self.stats.on_deactivate(pool, size);
        let tick = self.lookups[pool as usize];
        let n = &mut self.nodes[slot as usize];
        n.allocated = false;
        n.pending = false;
        n.has_uses = false;
        n.freed_at = tick;
        let (rest_size, rest_next) = {
            let r = &self.nodes[next as usize];
            (r.size, r.next)
        };
        // The neighbour is split (this block precedes it); the merged block is unless it
        // fills its segment.
        self.stats.on_inactive_split(pool, rest_size, false);
        if prev != NIL || rest_next != NIL {
            self.stats.on_inactive_split(pool, size + rest_size, true);
        }
        self.deferred[pool as usize] = slot;
    }

    /// The block for a request of `size` bytes in `pool` on the default stream, taken from
    /// the merged block whose merge is deferred there, when best fit would take it and split
    /// it: it is the pool's only free block (so the best fit), it fits, no max split size
    /// applies, and the rest is worth splitting off. The block keeps the freed block's node
    /// and the rest the neighbour's, resized in place. `None`: serve as usual (after
    /// [`Self::settle_deferred`]).
    #[inline(always)]
    #[doc(hidden)]
    pub fn take_deferred(
        &mut self,
        pool: PoolKind,
        stream: u32,
        size: usize,
        max_split: Option<usize>,
    ) -> Option<u32> {
        let slot = self.deferred[pool as usize];
        if slot == NIL || stream != 0 || max_split.is_some() || !self.pending.is_empty() {
            return None;
        }
        let (addr, front, prev, rest) = {
            let n = &self.nodes[slot as usize];
            (n.addr, n.size, n.prev, n.next)
        };
        let (rest_addr, rest_size, rest_next) = {
            let r = &self.nodes[rest as usize];
            (r.addr, r.size, r.next)
        };
        let merged = front + rest_size;
        let FreeSet::Sorted(keys) = &mut self.free[0][pool as usize] else {
            return None;
        };
        if keys.len() != 1
            || merged < size
            || !policy::should_split(pool, self.in_expandable(slot), merged, size, None)
        {
            return None;
        }
        // What `take_free` does to the merged block, in the same order.
        self.lookups[pool as usize] += 1;
        let now = self.lookups[pool as usize];
        if prev != NIL || rest_next != NIL {
            self.stats.on_inactive_split(pool, merged, false);
        }
        self.nodes[slot as usize].size = size;
        let r = &mut self.nodes[rest as usize];
        r.addr = addr + size as u64;
        r.size = merged - size;
        r.freed_at = now;
        r.rounded = 0;
        r.requested = 0;
        r.id = 0;
        let held = self.free[0][pool as usize].replace(
            (rest_size, rest_addr, rest),
            (merged - size, addr + size as u64, rest),
        );
        debug_assert!(
            held,
            "the deferred block's neighbour was not in its free set"
        );
        self.stats.on_inactive_split(pool, merged - size, true);
        self.deferred[pool as usize] = NIL;
        self.deferred_reuses += 1;
        Some(slot)
    }

    /// The size of block `slot` as shown: with its next neighbour when its merge with it is
    /// deferred.
    pub(super) fn logical_size(&self, slot: u32) -> usize {
        let n = &self.nodes[slot as usize];
        if self.deferred[n.pool as usize] == slot {
            n.size + self.nodes[n.next as usize].size
        } else {
            n.size
        }
    }

    /// The largest free block whose merge is deferred (0: none).
    pub(super) fn deferred_largest(&self) -> usize {
        self.deferred
            .iter()
            .filter(|&&slot| slot != NIL)
            .map(|&slot| self.logical_size(slot))
            .max()
            .unwrap_or(0)
    }

    /// Performs the deferred merges: the state is then the one eager merges leave. Every path
    /// but the cached pair's calls this before it reads or changes blocks.
    #[inline(always)]
    #[doc(hidden)]
    pub fn settle_deferred(&mut self) {
        if self.deferred != [NIL; 2] {
            self.settle_pool(PoolKind::Small);
            self.settle_pool(PoolKind::Large);
        }
    }

    /// Performs the deferred merge of `pool`, if any (a request or a free of that pool that
    /// does not take the cached pair's path; the other pool's blocks are not involved).
    #[inline(always)]
    #[doc(hidden)]
    pub fn settle_pool(&mut self, pool: PoolKind) {
        if self.deferred[pool as usize] != NIL {
            self.settle_now(pool as usize);
        }
    }

    #[cold]
    #[inline(never)]
    fn settle_now(&mut self, pool: usize) {
        let slot = std::mem::replace(&mut self.deferred[pool], NIL);
        let rest = self.nodes[slot as usize].next;
        let (rest_size, rest_addr) = {
            let r = &self.nodes[rest as usize];
            (r.size, r.addr)
        };
        self.absorb_next(slot);
        let (size, addr) = {
            let n = &self.nodes[slot as usize];
            (n.size, n.addr)
        };
        let held = self.free[0][pool].replace((rest_size, rest_addr, rest), (size, addr, slot));
        debug_assert!(
            held,
            "the deferred block's neighbour was not in its free set"
        );
    }
}
