//! Fixed segments: each one a backend allocation of its own, added when no free block fits
//! and released (given back to the backend) when fully free — by `empty_cache`, the
//! out-of-memory path, garbage collection, and the allocator's drop.

use super::{State, NIL};
use crate::policy::ADDR_LIMIT;
use crate::{Backend, BackendError, BackendFailure, PoolKind, TraceEventKind};

impl State {
    /// Asks `backend` for a fixed segment of `bytes` for `pool` on stream index `stream`
    /// (within `limit`) and adds it; `false` when the limit or the backend refuses (a failure
    /// other than a shortage is kept: [`State::note_failure`]).
    #[allow(clippy::too_many_arguments)]
    #[doc(hidden)]
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
    pub(super) fn is_idle_segment(&self, i: usize) -> bool {
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
    #[doc(hidden)]
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
    pub(super) fn release_segment<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        name: &str,
        i: u32,
    ) -> u64 {
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

    /// Garbage collection as PyTorch's `garbage_collect_cached_blocks`, once reserved memory
    /// exceeds `threshold` bytes: the large pool's fully free fixed segments whose age
    /// (free-block lookups in the pool since they became free) is at least the average age are
    /// released, pass after pass, until the excess is reclaimed or nothing more can go. A pass
    /// does not stop at the target, so the collection is not triggered again at once.
    #[doc(hidden)]
    pub fn collect_garbage<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        name: &str,
        threshold: u64,
    ) {
        if self.reserved() <= threshold {
            return;
        }
        let target = self.reserved() - threshold;
        let now = self.lookups[PoolKind::Large as usize];
        let mut freeable: Vec<(u64, u32)> = (0..self.segs.len())
            .filter(|&i| self.is_idle_segment(i) && self.segs[i].pool == PoolKind::Large)
            .map(|i| {
                (
                    now - self.nodes[self.segs[i].head as usize].freed_at,
                    i as u32,
                )
            })
            .collect();
        let mut total_age: u64 = freeable.iter().map(|&(age, _)| age).sum();
        let mut reclaimed = 0;
        while reclaimed < target && !freeable.is_empty() {
            let average = total_age as f64 / freeable.len() as f64;
            let before = freeable.len();
            freeable.retain(|&(age, i)| {
                if age as f64 >= average {
                    reclaimed += self.release_segment(backend, name, i);
                    total_age -= age;
                    false
                } else {
                    true
                }
            });
            if freeable.len() == before {
                break;
            }
        }
    }

    /// Gives everything back to `backend` when the allocator is dropped: waits for the blocks
    /// other streams may still use, unmaps the expandable segment's pages and releases its
    /// range, frees every fixed segment. Failures are logged (nothing can be returned from a
    /// drop); address space whose pages could not be unmapped stays reserved.
    #[doc(hidden)]
    pub fn release_all<B: Backend + ?Sized>(&mut self, backend: &B, name: &str) {
        self.settle_deferred();
        self.synchronize_pending(backend, name);
        let warn = |what: &str, e: BackendError| {
            crate::diagnostics::warn(
                crate::diagnostics::WarningOutput::Auto,
                &format!("{name}: dropping the allocator: {what}: {e}"),
            );
        };
        if let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) {
            let mut all_unmapped = true;
            // Unmapped by runs of adjacent mapped blocks, not block by block: blocks start and
            // end anywhere inside a granule, runs on granule boundaries (holes are whole
            // granules, and so is the mapped end of the segment).
            let mut runs: Vec<(u64, usize)> = Vec::new();
            if let Some(si) = e.seg {
                let mut at = self.segs[si as usize].head;
                while at != NIL {
                    let n = &self.nodes[at as usize];
                    if n.mapped {
                        match runs.last_mut() {
                            Some((start, len)) if *start + *len as u64 == n.addr => *len += n.size,
                            _ => runs.push((n.addr, n.size)),
                        }
                    }
                    at = n.next;
                }
            }
            for (addr, bytes) in runs {
                // SAFETY: mapped pages of the range, whole granules, unused from now on: the
                // allocator is being dropped (see `CachingAllocator`'s `Drop`).
                if let Err(err) = unsafe { vm.unmap(addr, bytes) } {
                    warn(&format!("unmapping {bytes} bytes at {addr:#x}"), err);
                    all_unmapped = false;
                }
            }
            if all_unmapped {
                // SAFETY: reserved by this allocator, nothing mapped anymore.
                if let Err(err) = unsafe { vm.release_range(e.addr, e.virt) } {
                    warn("releasing the address range", err);
                }
            } else {
                crate::diagnostics::warn(
                    crate::diagnostics::WarningOutput::Auto,
                    &format!(
                        "{name}: dropping the allocator: {} bytes of address space at {:#x} stay \
                         reserved because pages in it could not be unmapped",
                        e.virt, e.addr
                    ),
                );
            }
        }
        for seg in self.segs.iter().filter(|s| s.live && !s.expandable) {
            // SAFETY: the segment came from this backend with this size and the allocator is
            // going away, so it will never hand out a block of it again.
            if let Err(err) = unsafe { backend.free_segment(seg.addr, seg.size) } {
                warn("freeing a segment", err);
            }
        }
    }
}
