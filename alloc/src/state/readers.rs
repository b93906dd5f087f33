//! What the state shows without changing it: the statistics, the snapshot of segments and
//! blocks, the largest live and free blocks, and the invariant check. A merge the cached pair
//! deferred shows as the merged block (the `deferred` module): readers never perform it.

use super::free_set::FreeSet;
use super::{prev_deferred, BlockNode, State, NIL};
use crate::policy;
use crate::stats::Key;
use crate::{BlockSnapshot, DetailedStats, LiveAllocation, MemoryStats, SegmentSnapshot};

impl State {
    pub(super) fn largest_free(&self) -> u64 {
        let in_sets = self
            .free
            .iter()
            .flat_map(|sets| sets.iter().map(FreeSet::largest))
            .max()
            .unwrap_or(0);
        in_sets.max(self.deferred_largest()) as u64
    }
    #[doc(hidden)]
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

    /// The `count` largest allocated blocks, largest first (by address among equals).
    #[doc(hidden)]
    pub fn largest_live(&self, count: usize) -> Vec<LiveAllocation> {
        let mut live: Vec<(u32, &BlockNode)> = Vec::new();
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
    #[doc(hidden)]
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

    /// See [`crate::CachingAllocator::check_invariants`]. A merge the cached pair deferred is
    /// checked as what it stands for: one free block (the `deferred` module).
    #[doc(hidden)]
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

    /// The largest free block a request of `size` bytes may use: same pool, allowed by the
    /// max-split rules (`max_split`).
    #[doc(hidden)]
    pub fn largest_usable(&self, size: usize, max_split: Option<usize>) -> u64 {
        self.pool_free(policy::pool_for(size), 0)
            .descending()
            .find(|&(b, _, slot)| policy::may_take(max_split, size, b, self.in_expandable(slot)))
            .map_or(0, |(b, _, _)| b as u64)
    }

    /// PyTorch's statistics, per pool and in total.
    #[doc(hidden)]
    pub fn detailed_stats(&self) -> DetailedStats {
        self.stats.detailed()
    }
}
