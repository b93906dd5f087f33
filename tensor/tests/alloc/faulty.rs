//! A fake device for the reliability tests (`scale.rs`; `heap_threads.rs` takes its random numbers): pure bookkeeping, no memory. It
//! hands out address ranges, maps 2 MiB granules into reserved ranges, records stream events that
//! complete a random number of ticks later, and fails any call of the kinds in [`FaultKind`] at
//! random, each failure with an error name of its own so a test can tell which one an error
//! names. It keeps the truth the allocator's books are checked against: the bytes it holds
//! ([`Ledger::held`]) and every breach of the backend contract ([`Ledger::violations`]).
#![allow(dead_code)] // Each test binary uses a different subset.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};
use vramguard_alloc::{Backend, BackendError, EventId, StreamId, VirtualMemory};

/// The fake's page size, as CUDA's usual VMM granularity.
pub const GRANULE: usize = 2 << 20;

/// A seeded xorshift64* generator (the same one the corpus generators use).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        // splitmix64 spreads neighbouring seeds apart.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    /// `true` with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        self.next() % 1000 < u64::from(per_mille)
    }
}

/// The backend calls the fake can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `alloc_segment` (`cuMemAlloc`).
    SegmentAlloc,
    /// `free_segment` (`cuMemFree`).
    SegmentFree,
    /// `VirtualMemory::map` (`cuMemCreate`/`cuMemMap`).
    Map,
    /// `VirtualMemory::unmap` (`cuMemUnmap`).
    Unmap,
    /// `record_event` (`cuEventRecord`).
    EventRecord,
    /// `query_event` (`cuEventQuery`).
    EventQuery,
}

impl FaultKind {
    /// Every kind, in the order of [`Ledger::injected`].
    pub const ALL: [FaultKind; 6] = [
        FaultKind::SegmentAlloc,
        FaultKind::SegmentFree,
        FaultKind::Map,
        FaultKind::Unmap,
        FaultKind::EventRecord,
        FaultKind::EventQuery,
    ];
    /// The driver call the fault is reported for.
    pub fn op(self) -> &'static str {
        match self {
            FaultKind::SegmentAlloc => "cuMemAlloc",
            FaultKind::SegmentFree => "cuMemFree",
            FaultKind::Map => "cuMemMap",
            FaultKind::Unmap => "cuMemUnmap",
            FaultKind::EventRecord => "cuEventRecord",
            FaultKind::EventQuery => "cuEventQuery",
        }
    }
    /// Whether the fault refuses memory to a request (rather than keeping memory held).
    pub fn refuses_memory(self) -> bool {
        matches!(self, FaultKind::SegmentAlloc | FaultKind::Map)
    }
}

/// One injected failure: its kind and the unique error name the fake returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    /// The kind of call that failed.
    pub kind: FaultKind,
    /// The error name returned (`FAKE_FAULT_<n>`).
    pub error: String,
}

/// The fake's state: what it holds, its events, its fault settings and what it injected.
#[derive(Debug)]
pub struct Ledger {
    rng: Rng,
    /// Per-mille chance that a call of each kind (in [`FaultKind::ALL`] order) fails.
    pub rates: [u32; 6],
    /// Failures injected so far, by kind (in [`FaultKind::ALL`] order).
    pub injected: [u64; 6],
    /// Failures injected since the test last took them ([`Ledger::take_recent`]).
    recent: Vec<Injected>,
    next_fault: u64,
    capacity: usize,
    next_addr: u64,
    segments: BTreeMap<u64, usize>,
    ranges: BTreeMap<u64, usize>,
    mapped: BTreeSet<u64>,
    /// Outstanding events: id → the tick at which its work completes.
    events: HashMap<u64, u64>,
    next_event: u64,
    /// Advanced by the test ([`Ledger::tick`]) and by every event call.
    clock: u64,
    /// Breaches of the backend contract the allocator made.
    pub violations: Vec<String>,
    /// While set, events complete only when waited for (`synchronize_event`).
    pub hold_events: bool,
}

impl Ledger {
    /// Fails the call of `kind` at random; `Err` carries the injected failure.
    fn maybe_fail(&mut self, kind: FaultKind) -> Result<(), BackendError> {
        let i = FaultKind::ALL.iter().position(|&k| k == kind).unwrap_or(0);
        if self.rates[i] == 0 || !self.rng.chance(self.rates[i]) {
            return Ok(());
        }
        self.next_fault += 1;
        let error = format!("FAKE_FAULT_{}", self.next_fault);
        self.injected[i] += 1;
        self.recent.push(Injected {
            kind,
            error: error.clone(),
        });
        Err(BackendError::driver(kind.op(), error))
    }
    /// Bytes the device holds for the allocator: live segments and mapped granules.
    pub fn held(&self) -> u64 {
        self.segments.values().map(|&b| b as u64).sum::<u64>()
            + (self.mapped.len() * GRANULE) as u64
    }
    /// Live segments (fixed) and mapped granules.
    pub fn holdings(&self) -> (usize, usize) {
        (self.segments.len(), self.mapped.len())
    }
    /// Events recorded and not destroyed yet.
    pub fn outstanding_events(&self) -> usize {
        self.events.len()
    }
    /// Advances the clock one tick (events complete as it passes them).
    pub fn tick(&mut self) {
        self.clock += 1;
    }
    /// Failures injected since the last call.
    pub fn take_recent(&mut self) -> Vec<Injected> {
        std::mem::take(&mut self.recent)
    }
    /// Sets the per-mille fault rates (all 0: no faults).
    pub fn set_rates(&mut self, rates: [u32; 6]) {
        self.rates = rates;
    }
    fn violation(&mut self, what: String) {
        self.violations.push(what);
    }
    fn granules(&mut self, what: &str, addr: u64, bytes: usize) -> Vec<u64> {
        let g = GRANULE as u64;
        if bytes == 0 || !addr.is_multiple_of(g) || !(bytes as u64).is_multiple_of(g) {
            self.violation(format!(
                "{what} {bytes} bytes at {addr:#x}: not whole granules"
            ));
            return Vec::new();
        }
        (addr..addr + bytes as u64).step_by(GRANULE).collect()
    }
    fn in_one_range(&self, addr: u64, bytes: usize) -> bool {
        self.ranges
            .range(..=addr)
            .next_back()
            .is_some_and(|(&r, &len)| addr + bytes as u64 <= r + len as u64)
    }
}

/// The fake backend; the allocator owns it, the test reads and steers it through
/// [`Faulty::ledger`].
#[derive(Debug)]
pub struct Faulty {
    ledger: Mutex<Ledger>,
}

impl Faulty {
    /// A device of `capacity` bytes whose faults and event delays are drawn from `seed`.
    pub fn new(capacity: usize, seed: u64) -> Faulty {
        Faulty {
            ledger: Mutex::new(Ledger {
                rng: Rng::new(seed),
                rates: [0; 6],
                injected: [0; 6],
                recent: Vec::new(),
                next_fault: 0,
                capacity,
                // Far from 0 and below 2^48, the allocator's address bound.
                next_addr: 1 << 40,
                segments: BTreeMap::new(),
                ranges: BTreeMap::new(),
                mapped: BTreeSet::new(),
                events: HashMap::new(),
                next_event: 0,
                clock: 0,
                violations: Vec::new(),
                hold_events: false,
            }),
        }
    }
    /// The fake's state (a poisoned lock is taken over: a failed test already reported).
    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }
    fn take_addresses(l: &mut Ledger, bytes: usize) -> u64 {
        let addr = l.next_addr;
        // Gaps between ranges: an allocator that runs past one lands in no other.
        l.next_addr += (bytes as u64).next_multiple_of(GRANULE as u64) + GRANULE as u64;
        addr
    }
}

// SAFETY: the fake hands out address ranges that never overlap (a bump pointer with gaps) and
// are never dereferenced: it reports itself as not host-addressable.
unsafe impl Backend for Faulty {
    fn name(&self) -> String {
        "faulty".into()
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.ledger().capacity)
    }
    fn host_addressable(&self) -> bool {
        false
    }
    fn alignment(&self) -> usize {
        512
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::SegmentAlloc)?;
        if l.held() + bytes as u64 > l.capacity as u64 {
            return Err(BackendError::OutOfMemory { requested: bytes });
        }
        let addr = Faulty::take_addresses(&mut l, bytes);
        l.segments.insert(addr, bytes);
        Ok(addr)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::SegmentFree)?;
        match l.segments.remove(&addr) {
            Some(b) if b == bytes => {}
            other => l.violation(format!(
                "freeing segment {addr:#x} of {bytes} bytes; the fake holds {other:?}"
            )),
        }
        Ok(())
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        Some(self)
    }
    fn free_memory(&self) -> Option<usize> {
        let l = self.ledger();
        Some(l.capacity - l.held() as usize)
    }
    fn record_event(&self, stream: StreamId) -> Result<Option<EventId>, BackendError> {
        let _ = stream;
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::EventRecord)?;
        l.clock += 1;
        l.next_event += 1;
        let (id, delay) = (l.next_event, l.rng.range(1, 60) as u64);
        let at = l.clock + delay;
        l.events.insert(id, at);
        Ok(Some(EventId(id)))
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackendError> {
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::EventQuery)?;
        l.clock += 1;
        match l.events.get(&event.0) {
            Some(&at) => Ok(!l.hold_events && l.clock >= at),
            None => {
                l.violation(format!("querying event {} after its destruction", event.0));
                Ok(true)
            }
        }
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackendError> {
        let mut l = self.ledger();
        let clock = l.clock;
        match l.events.get_mut(&event.0) {
            Some(at) => *at = (*at).min(clock),
            None => l.violation(format!(
                "waiting for event {} after its destruction",
                event.0
            )),
        }
        Ok(())
    }
    fn destroy_event(&self, event: EventId) {
        let mut l = self.ledger();
        if l.events.remove(&event.0).is_none() {
            l.violation(format!("destroying event {} twice", event.0));
        }
    }
}

// SAFETY: reserved ranges come from the same bump pointer as segments, so nothing overlaps; the
// fake checks every map and unmap against its granule set.
unsafe impl VirtualMemory for Faulty {
    fn granularity(&self) -> usize {
        GRANULE
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        let mut l = self.ledger();
        let addr = Faulty::take_addresses(&mut l, bytes);
        l.ranges.insert(addr, bytes);
        Ok(addr)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let mut l = self.ledger();
        let still = l.mapped.range(addr..addr + bytes as u64).count();
        if still > 0 {
            l.violation(format!(
                "releasing the range at {addr:#x} with {still} granules mapped"
            ));
        }
        if l.ranges.remove(&addr) != Some(bytes) {
            l.violation(format!(
                "releasing {bytes} bytes at {addr:#x}: no such range"
            ));
        }
        Ok(())
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::Map)?;
        if l.held() + bytes as u64 > l.capacity as u64 {
            return Err(BackendError::OutOfMemory { requested: bytes });
        }
        if !l.in_one_range(addr, bytes) {
            l.violation(format!(
                "mapping {bytes} bytes at {addr:#x}: outside every range"
            ));
        }
        for g in l.granules("mapping", addr, bytes) {
            if !l.mapped.insert(g) {
                l.violation(format!("mapping {g:#x} twice"));
            }
        }
        Ok(())
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let mut l = self.ledger();
        l.maybe_fail(FaultKind::Unmap)?;
        for g in l.granules("unmapping", addr, bytes) {
            if !l.mapped.remove(&g) {
                l.violation(format!("unmapping {g:#x}, which is not mapped"));
            }
        }
        Ok(())
    }
}
