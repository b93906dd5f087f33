//! Expandable segments: the large pool as one reserved address range whose pages are mapped at
//! its end as the pool grows and unmapped when the cache is released. This module owns the
//! range ([`Expandable`]), its setup (self-test, reservation, the fallback to fixed segments
//! under `auto`), and growing and shrinking its mapped part; the blocks inside it are ordinary
//! blocks of `blocks.rs`.

use super::blocks::{State, NIL};
use super::policy::ADDR_LIMIT;
use super::{Backend, BackendError, ExpandableSegments, SegmentMode, SetupError, TraceEventKind};

/// The large pool's expandable segment: a reserved address range whose mapped prefix is a
/// segment that grows (map at the end) and shrinks (unmap free granules).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expandable {
    pub addr: u64,
    pub virt: usize,
    pub granularity: usize,
    /// Index of the segment while anything is mapped.
    pub seg: Option<u32>,
}

/// Address space reserved for an expandable segment when neither a limit nor a capacity bounds
/// it (only address space: pages are mapped as the pool grows).
pub const DEFAULT_EXPANDABLE_RANGE: usize = 64 << 30;

/// Why an expandable segment could not be set up.
enum Unavailable {
    /// The backend cannot map pages.
    NoVirtualMemory,
    /// [`super::VirtualMemory::self_test`] failed.
    SelfTest(String),
    /// The address range could not be reserved.
    Reserve { bytes: usize, message: String },
}

/// Reserves the expandable segment's address range: `limit` bytes, else the device capacity,
/// else [`DEFAULT_EXPANDABLE_RANGE`], after the backend's self-test.
fn setup<B: Backend + ?Sized>(backend: &B, limit: Option<u64>) -> Result<Expandable, Unavailable> {
    let vm = backend
        .virtual_memory()
        .ok_or(Unavailable::NoVirtualMemory)?;
    vm.self_test()
        .map_err(|e| Unavailable::SelfTest(e.to_string()))?;
    let granularity = vm.granularity();
    let wanted = limit
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
        .or(backend.capacity())
        .unwrap_or(DEFAULT_EXPANDABLE_RANGE);
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
        unsafe { vm.release_range(addr, virt) };
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

/// What [`resolve`] chose: the expandable segment, or fixed segments and why.
pub(crate) struct Resolved {
    pub expandable: Option<Expandable>,
    pub mode: SegmentMode,
    pub reason: Option<String>,
}

/// Resolves `mode` on `backend`: the expandable segment, or why there is none. Only
/// [`ExpandableSegments::On`] turns a failure into an error; `Auto` falls back to fixed
/// segments (with a warning when the backend offered page mapping but it did not work).
pub(crate) fn resolve<B: Backend + ?Sized>(
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
            tracing::warn!("{reason}; using fixed segments");
            reason
        }
        Unavailable::Reserve { bytes, message } => {
            let reason = format!(
                "{name} could not reserve {bytes} bytes of address space for expandable \
                 segments: {message}"
            );
            tracing::warn!("{reason}; using fixed segments (set `memory_limit` to reserve less)");
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
    pub fn expand<B: Backend + ?Sized>(
        &mut self,
        backend: &B,
        limit: Option<u64>,
        name: &str,
        size: usize,
    ) -> bool {
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return false;
        };
        let (mapped, tail_free) = match e.seg {
            Some(si) => {
                let seg = &self.segs[si as usize];
                let t = &self.nodes[seg.tail as usize];
                (seg.size, if t.allocated { 0 } else { t.size })
            }
            None => (0, 0),
        };
        let need = size
            .saturating_sub(tail_free)
            .next_multiple_of(e.granularity);
        if need == 0 {
            // The free tail already fits the request.
            return true;
        }
        if mapped + need > e.virt || limit.is_some_and(|l| self.reserved() + need as u64 > l) {
            return false;
        }
        let at = e.addr + mapped as u64;
        // SAFETY: `[at, at + need)` lies in the reserved range past the mapped prefix.
        if let Err(err) = unsafe { vm.map(at, need) } {
            if let BackendError::Driver(msg) = err {
                tracing::warn!(device = %name, "mapping pages failed: {msg}");
            }
            return false;
        }
        match e.seg {
            None => {
                let si = self.add_segment(super::PoolKind::Large, at, need, true);
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
                    let pool = self.segs[si as usize].pool;
                    self.free_set(pool).remove(tsize, taddr, tail);
                    self.note_inactive(tail, tsize, false);
                    self.nodes[tail as usize].size += need;
                    self.free_set(pool).insert(tsize + need, taddr, tail);
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
            .on_reserve(super::PoolKind::Large, need, e.seg.is_none());
        self.record(TraceEventKind::SegmentAlloc, at, need as u64);
        true
    }

    /// Unmaps the free tail of the expandable segment (whole granules); returns bytes released.
    pub fn shrink_expandable<B: Backend + ?Sized>(&mut self, backend: &B) -> u64 {
        let (Some(e), Some(vm)) = (self.expandable, backend.virtual_memory()) else {
            return 0;
        };
        let Some(si) = e.seg else { return 0 };
        let seg = self.segs[si as usize].clone();
        let tail = seg.tail;
        let (taddr, tsize, tprev, tfree) = {
            let t = &self.nodes[tail as usize];
            (t.addr, t.size, t.prev, !t.allocated)
        };
        let end = seg.addr + seg.size as u64;
        let cut = (taddr - e.addr).next_multiple_of(e.granularity as u64) + e.addr;
        if !tfree || cut >= end {
            return 0;
        }
        let bytes = (end - cut) as usize;
        // SAFETY: `[cut, end)` is mapped (inside the segment) and lies in a free block, so
        // nothing handed out uses it.
        unsafe { vm.unmap(cut, bytes) };
        self.free_set(seg.pool).remove(tsize, taddr, tail);
        self.note_inactive(tail, tsize, false);
        let keep = (cut - taddr) as usize;
        let mut gone = false;
        if keep > 0 {
            self.nodes[tail as usize].size = keep;
            self.free_set(seg.pool).insert(keep, taddr, tail);
            self.note_inactive(tail, keep, true);
        } else if tprev != NIL {
            self.nodes[tprev as usize].next = NIL;
            self.segs[si as usize].tail = tprev;
            self.spare_nodes.push(tail);
        } else {
            // Nothing mapped anymore: the segment goes, the address range stays reserved.
            self.spare_nodes.push(tail);
            self.segs[si as usize].live = false;
            self.spare_segs.push(si);
            gone = true;
            if let Some(x) = self.expandable.as_mut() {
                x.seg = None;
            }
        }
        self.segs[si as usize].size -= bytes;
        self.stats.on_release(seg.pool, bytes, gone);
        self.record(TraceEventKind::SegmentFree, cut, bytes as u64);
        bytes as u64
    }
}
