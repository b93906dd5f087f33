//! Expandable segments: the large pool as one reserved address range whose pages are mapped at
//! its end as the pool grows and unmapped when the cache is released. This module owns the
//! range ([`Expandable`]), its setup (self-test, reservation, the fallback to fixed segments
//! under `auto`), and growing and shrinking its mapped part; the blocks inside it are ordinary
//! blocks of the state (`mod.rs`).

use super::{State, NIL};
use crate::diagnostics::WarningOutput;
use crate::policy::ADDR_LIMIT;
use crate::{
    Backend, BackendError, BackendFailure, ExpandableSegments, PoolKind, SegmentMode, SetupError,
    TraceEventKind, VirtualMemory,
};

/// The large pool's expandable segment: a reserved address range whose mapped prefix is a
/// segment that grows (map at the end) and shrinks (unmap free granules).
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Expandable {
    pub(super) addr: u64,
    pub(super) virt: usize,
    pub(super) granularity: usize,
    /// Index of the segment while anything is mapped.
    pub(super) seg: Option<u32>,
}

/// Address space reserved for an expandable segment when neither a limit nor a capacity bounds
/// it (only address space: pages are mapped as the pool grows).
pub const DEFAULT_EXPANDABLE_RANGE: usize = 64 << 30;

/// Why an expandable segment could not be set up.
enum Unavailable {
    /// The backend cannot map pages.
    NoVirtualMemory,
    /// [`VirtualMemory::self_test`] failed.
    SelfTest(String),
    /// The address range could not be reserved.
    Reserve { bytes: usize, message: String },
}

/// Reserves the expandable segment's address range: twice the larger of `limit` and the device
/// capacity (whichever is known), else [`DEFAULT_EXPANDABLE_RANGE`], after the backend's
/// self-test.
fn setup<B: Backend + ?Sized>(backend: &B, limit: Option<u64>) -> Result<Expandable, Unavailable> {
    let vm = backend
        .virtual_memory()
        .ok_or(Unavailable::NoVirtualMemory)?;
    vm.self_test()
        .map_err(|e| Unavailable::SelfTest(e.to_string()))?;
    let granularity = vm.granularity();
    // Twice the bound: unmapped holes (see `unmap_free_granules`) keep their address space, so
    // the end of the mapping can lie past the bound while reserved memory stays within it. The
    // larger bound, not the limit alone: address space costs nothing, and a range sized to a
    // small limit was used up by holes in the model test (#22) while the limit had room.
    let limit = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
    let wanted = match (limit, backend.capacity()) {
        (Some(l), Some(c)) => Some(l.max(c)),
        (l, c) => l.or(c),
    }
    .map_or(DEFAULT_EXPANDABLE_RANGE, |b| b.saturating_mul(2));
    let virt = wanted
        .checked_next_multiple_of(granularity)
        .ok_or_else(|| Unavailable::Reserve {
            bytes: wanted,
            message: "the size overflows the address space".into(),
        })?;
    let addr = vm.reserve_range(virt).map_err(|e| Unavailable::Reserve {
        bytes: virt,
        message: e.to_string(),
    })?;
    if addr.saturating_add(virt as u64) >= ADDR_LIMIT {
        // SAFETY: just reserved, nothing mapped.
        if let Err(e) = unsafe { vm.release_range(addr, virt) } {
            crate::diagnostics::warn(
                WarningOutput::Auto,
                &format!("releasing an unusable address range: {e}"),
            );
        }
        return Err(Unavailable::Reserve {
            bytes: virt,
            message: "the range lies above 2^48".into(),
        });
    }
    Ok(Expandable {
        addr,
        virt,
        granularity,
        seg: None,
    })
}

/// Whether the device can back `need` more bytes right now ([`Backend::free_memory`]; `true`
/// when it does not say). Asked before mapping, so that a request larger than the device is
/// refused at once instead of after mapping (and unmapping) the device page by page.
fn device_has_room<B: Backend + ?Sized>(backend: &B, need: usize) -> bool {
    backend.free_memory().is_none_or(|free| need <= free)
}

/// What [`resolve`] chose: the expandable segment, or fixed segments and why.
#[doc(hidden)]
pub struct Resolved {
    pub expandable: Option<Expandable>,
    pub mode: SegmentMode,
    pub reason: Option<String>,
}

/// Resolves `mode` on `backend`: the expandable segment, or why there is none. Only
/// [`ExpandableSegments::On`] turns a failure into an error; `Auto` falls back to fixed
/// segments (with a warning when the backend offered page mapping but it did not work).
#[doc(hidden)]
pub fn resolve<B: Backend + ?Sized>(
    mode: ExpandableSegments,
    backend: &B,
    limit: Option<u64>,
    name: &str,
) -> Result<Resolved, SetupError> {
    if mode == ExpandableSegments::Off {
        return Ok(Resolved {
            expandable: None,
            mode: SegmentMode::FixedByConfig,
            reason: Some("`expandable_segments:false` is set".to_string()),
        });
    }
    let unavailable = match setup(backend, limit) {
        Ok(e) => {
            return Ok(Resolved {
                expandable: Some(e),
                mode: SegmentMode::Expandable,
                reason: None,
            })
        }
        Err(u) => u,
    };
    if mode == ExpandableSegments::On {
        return Err(match unavailable {
            Unavailable::NoVirtualMemory => SetupError::ExpandableUnsupported {
                device: name.to_string(),
            },
            Unavailable::SelfTest(reason) => SetupError::ExpandableSelfTestFailed {
                device: name.to_string(),
                reason,
            },
            Unavailable::Reserve { bytes, message } => SetupError::ReserveFailed { bytes, message },
        });
    }
    let reason = match unavailable {
        // Silently: fixed segments are simply what such a backend has.
        Unavailable::NoVirtualMemory => {
            format!("{name} cannot map pages into reserved address space")
        }
        Unavailable::SelfTest(reason) => {
            let reason = format!("the virtual memory self-test of {name} failed: {reason}");
            crate::diagnostics::warn(
                WarningOutput::Auto,
                &format!("{reason}; using fixed segments"),
            );
            reason
        }
        Unavailable::Reserve { bytes, message } => {
            let reason = format!(
                "{name} could not reserve {bytes} bytes of address space for expandable \
                 segments: {message}"
            );
            crate::diagnostics::warn(
                WarningOutput::Auto,
                &format!("{reason}; using fixed segments (set `memory_limit` to reserve less)"),
            );
            reason
        }
    };
    Ok(Resolved {
        expandable: None,
        mode: SegmentMode::FixedUnavailable,
        reason: Some(reason),
    })
}

impl State {
    /// Maps enough pages at the end of the expandable segment for a free block of `size` bytes
    /// there (the free tail grows; no new hole is needed). `false` when there is no expandable
    /// segment, the range is used up, the limit would be crossed or the backend refuses.
    #[doc(hidden)]
    pub fn expand<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        limit: Option<u64>,
        name: &str,
        size: usize,
    ) -> bool {
        self.range_used_up = false;
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return false;
        };
        let free = backend.free_memory();
        if let Some(mapped) = self.map_into_hole(vm, e, limit, free, name, size) {
            return mapped;
        }
        let tail_free = match e.seg {
            Some(si) => {
                let t = &self.nodes[self.segs[si as usize].tail as usize];
                if t.allocated {
                    0
                } else {
                    t.size
                }
            }
            None => 0,
        };
        let need = size
            .saturating_sub(tail_free)
            .next_multiple_of(e.granularity);
        if need == 0 {
            // The free tail already fits the request.
            return true;
        }
        if !device_has_room(backend, need) {
            return false;
        }
        self.map_at_end(vm, e, limit, name, need)
    }

    /// Maps pages at the end of the expandable segment until it reaches `end` (an address in
    /// its range); `true` when it does.
    pub(super) fn map_through<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        limit: Option<u64>,
        name: &str,
        end: u64,
    ) -> bool {
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return false;
        };
        self.range_used_up = false;
        let mapped = e.seg.map_or(0, |si| self.segs[si as usize].size) as u64;
        let Some(missing) = end.checked_sub(e.addr + mapped).filter(|&m| m > 0) else {
            return true;
        };
        let need = (missing as usize).next_multiple_of(e.granularity);
        if !device_has_room(backend, need) {
            return false;
        }
        self.map_at_end(vm, e, limit, name, need)
    }

    /// Maps `need` bytes (whole granules) at the end of the mapped part of the range: the free
    /// tail grows, or a free block follows the live one at the end.
    fn map_at_end(
        &mut self,
        vm: &dyn VirtualMemory,
        e: Expandable,
        limit: Option<u64>,
        name: &str,
        need: usize,
    ) -> bool {
        let mapped = e.seg.map_or(0, |si| self.segs[si as usize].size);
        let under_limit = limit.is_none_or(|l| self.reserved() + need as u64 <= l);
        if mapped + need > e.virt {
            // Unmapped holes keep their addresses: the range can end before reserved memory
            // reaches the limit. The caller falls back to a fixed segment; if that fails too,
            // the out-of-memory error names this cause.
            self.range_used_up = under_limit;
            return false;
        }
        if !under_limit {
            return false;
        }
        let at = e.addr + mapped as u64;
        // SAFETY: `[at, at + need)` lies in the reserved range past the mapped prefix.
        if let Err(err) = unsafe { vm.map(at, need) } {
            if let BackendError::Driver(f) = err {
                self.note_failure(name, f);
            }
            return false;
        }
        match e.seg {
            None => {
                let si = self.add_segment(PoolKind::Large, 0, at, need, true);
                if let Some(x) = self.expandable.as_mut() {
                    x.seg = Some(si);
                }
            }
            Some(si) => {
                let tail = self.segs[si as usize].tail;
                let (taddr, tsize, tfree) = {
                    let t = &self.nodes[tail as usize];
                    (t.addr, t.size, !t.allocated)
                };
                if tfree {
                    self.free_set_of(tail).remove(tsize, taddr, tail);
                    self.note_inactive(tail, tsize, false);
                    self.nodes[tail as usize].size += need;
                    self.free_set_of(tail).insert(tsize + need, taddr, tail);
                    self.note_inactive(tail, tsize + need, true);
                } else {
                    let node = self.insert_free_node(at, need, si, tail, NIL);
                    self.nodes[tail as usize].next = node;
                    self.segs[si as usize].tail = node;
                    self.note_inactive(node, need, true);
                }
                self.segs[si as usize].size += need;
            }
        }
        self.stats
            .on_reserve(PoolKind::Large, need, e.seg.is_none());
        self.record(TraceEventKind::SegmentAlloc, at, need as u64);
        true
    }

    /// Unmaps every whole granule of every free block of the expandable segment (PyTorch's
    /// `release_expandable_segment`): the granules inside a free block become an unmapped hole
    /// (the block's unaligned ends stay free and mapped), holes at the end are cut off the
    /// segment, and a segment left without mapped pages goes. Returns the bytes unmapped. A
    /// range the backend fails to unmap stays mapped and free (the failure is kept).
    pub(super) fn unmap_free_granules<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        name: &str,
    ) -> u64 {
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return 0;
        };
        let Some(si) = e.seg else { return 0 };
        let (pool, stream) = (self.segs[si as usize].pool, self.segs[si as usize].stream);
        let gran = e.granularity as u64;
        let mut released = 0u64;
        let mut at = self.segs[si as usize].head;
        while at != NIL {
            let next = self.nodes[at as usize].next;
            if !self.is_free(at) {
                at = next;
                continue;
            }
            let (addr, size) = (self.nodes[at as usize].addr, self.nodes[at as usize].size);
            let lo = (addr - e.addr).next_multiple_of(gran) + e.addr;
            let hi = (addr + size as u64 - e.addr) / gran * gran + e.addr;
            if hi <= lo {
                at = next;
                continue;
            }
            // SAFETY: `[lo, hi)` is mapped (inside a mapped free block) and nothing handed
            // out uses it.
            if let Err(err) = unsafe { vm.unmap(lo, (hi - lo) as usize) } {
                let failure = match err {
                    BackendError::Driver(f) => f,
                    e => BackendFailure {
                        op: format!("unmapping {} bytes at {lo:#x}", hi - lo),
                        error: e.to_string(),
                    },
                };
                self.note_failure(name, failure);
                at = next;
                continue;
            }
            released += hi - lo;
            self.free_set(pool, stream).remove(size, addr, at);
            self.note_inactive(at, size, false);
            // [addr, lo) stays free and mapped, [lo, hi) becomes the hole, [hi, end) free.
            let hole = if lo > addr {
                self.nodes[at as usize].size = (lo - addr) as usize;
                let h = self.insert_node_after(at, lo, (hi - lo) as usize);
                self.free_set(pool, stream)
                    .insert((lo - addr) as usize, addr, at);
                self.note_inactive(at, (lo - addr) as usize, true);
                h
            } else {
                self.nodes[at as usize].size = (hi - lo) as usize;
                at
            };
            self.nodes[hole as usize].mapped = false;
            let end = addr + size as u64;
            if end > hi {
                let rest = self.insert_node_after(hole, hi, (end - hi) as usize);
                self.free_set(pool, stream)
                    .insert((end - hi) as usize, hi, rest);
                self.note_inactive(rest, (end - hi) as usize, true);
            }
            // A hole next to a hole is one hole.
            let prev = self.nodes[hole as usize].prev;
            let hole = if prev != NIL && !self.nodes[prev as usize].mapped {
                self.absorb_next(prev);
                prev
            } else {
                hole
            };
            let after = self.nodes[hole as usize].next;
            if after != NIL && !self.nodes[after as usize].mapped {
                self.absorb_next(hole);
            }
            self.stats.on_release(pool, (hi - lo) as usize, false);
            self.record(TraceEventKind::SegmentFree, lo, hi - lo);
            at = self.nodes[hole as usize].next;
        }
        self.trim_unmapped_tail(si);
        released
    }

    /// Maps pages into the first unmapped hole that, with the free block before it (and, when
    /// the whole hole is mapped, the one after it), holds a `size` request: only the granules
    /// needed. `None`: no such hole (grow at the end instead).
    fn map_into_hole(
        &mut self,
        vm: &dyn VirtualMemory,
        e: Expandable,
        limit: Option<u64>,
        device_free: Option<usize>,
        name: &str,
        size: usize,
    ) -> Option<bool> {
        let si = e.seg?;
        let mut at = self.segs[si as usize].head;
        while at != NIL {
            let (mapped, hole, prev, next) = {
                let n = &self.nodes[at as usize];
                (n.mapped, n.size, n.prev, n.next)
            };
            let free_size = |st: &State, s: u32| {
                if s != NIL && st.is_free(s) {
                    st.nodes[s as usize].size
                } else {
                    0
                }
            };
            let (before, after) = (free_size(self, prev), free_size(self, next));
            let need = if mapped {
                None
            } else if before + hole >= size {
                Some(
                    size.saturating_sub(before)
                        .next_multiple_of(e.granularity)
                        .min(hole),
                )
            } else if before + hole + after >= size {
                Some(hole)
            } else {
                None
            };
            // A hole whose pages would cross the limit, or that the device cannot back, is
            // skipped: the end may need fewer.
            let Some(need) = need.filter(|&n| {
                limit.is_none_or(|l| self.reserved() + n as u64 <= l)
                    && device_free.is_none_or(|f| n <= f)
            }) else {
                at = next;
                continue;
            };
            let addr = self.nodes[at as usize].addr;
            // SAFETY: `[addr, addr + need)` lies in an unmapped hole of the reserved range.
            if let Err(err) = unsafe { vm.map(addr, need) } {
                if let BackendError::Driver(f) = err {
                    self.note_failure(name, f);
                }
                // The end of the mapping may need fewer pages than this hole.
                at = next;
                continue;
            }
            if need < hole {
                let rest = self.insert_node_after(at, addr + need as u64, hole - need);
                self.nodes[rest as usize].mapped = false;
                self.nodes[at as usize].size = need;
            }
            self.nodes[at as usize].mapped = true;
            let pool = self.nodes[at as usize].pool;
            self.stats.on_reserve(pool, need, false);
            self.record(TraceEventKind::SegmentAlloc, addr, need as u64);
            // The mapped pages join their free neighbours like a freed block.
            self.free_block(at);
            return Some(true);
        }
        None
    }

    /// A new free node of `size` bytes at `addr` linked right after `slot` (not entered into a
    /// free set).
    pub(super) fn insert_node_after(&mut self, slot: u32, addr: u64, size: usize) -> u32 {
        let (seg, next) = (
            self.nodes[slot as usize].seg,
            self.nodes[slot as usize].next,
        );
        let pool = self.nodes[slot as usize].pool;
        let now = self.lookups[pool as usize];
        let mut node = self.nodes[slot as usize].clone();
        node.addr = addr;
        node.size = size;
        node.allocated = false;
        node.mapped = true;
        node.prev = slot;
        node.next = next;
        node.seg = seg;
        node.freed_at = now;
        let new = self.new_node(node);
        self.nodes[slot as usize].next = new;
        if next != NIL {
            self.nodes[next as usize].prev = new;
        } else {
            self.segs[seg as usize].tail = new;
        }
        new
    }

    /// Cuts unmapped holes off the end of segment `si`; the segment goes when nothing mapped is
    /// left (the address range stays reserved).
    fn trim_unmapped_tail(&mut self, si: u32) {
        loop {
            let tail = self.segs[si as usize].tail;
            if tail == NIL || self.nodes[tail as usize].mapped {
                return;
            }
            let (size, prev) = (
                self.nodes[tail as usize].size,
                self.nodes[tail as usize].prev,
            );
            self.spare_nodes.push(tail);
            self.segs[si as usize].size -= size;
            if prev == NIL {
                let seg = &mut self.segs[si as usize];
                seg.live = false;
                seg.head = NIL;
                seg.tail = NIL;
                self.spare_segs.push(si);
                self.stats.on_segment_gone(PoolKind::Large);
                if let Some(x) = self.expandable.as_mut() {
                    x.seg = None;
                }
                return;
            }
            // The new tail loses a neighbour: re-note it if it is a free block.
            let was = self.is_free(prev).then(|| self.nodes[prev as usize].size);
            if let Some(b) = was {
                self.note_inactive(prev, b, false);
            }
            self.nodes[prev as usize].next = NIL;
            self.segs[si as usize].tail = prev;
            if let Some(b) = was {
                self.note_inactive(prev, b, true);
            }
        }
    }
}
