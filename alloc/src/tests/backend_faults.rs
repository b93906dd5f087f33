//! Tests with a fake backend (host memory underneath) that the test controls: its streams'
//! events complete when the test says so, and its calls fail with a driver error on demand.
//! They check stream-safe reuse (blocks pooled per stream, `record_stream`, pending frees) and
//! that a backend failure is named in the error and leaves the books as they were.

use super::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const MIB: usize = 1 << 20;
const ILLEGAL: &str = "CUDA_ERROR_ILLEGAL_ADDRESS";

/// What the test controls, shared with the backend (which the allocator owns).
#[derive(Default)]
struct Control {
    /// Error name returned by `alloc_segment` and `map` while set.
    fail_alloc: Mutex<Option<&'static str>>,
    /// Error name returned by `free_segment` and `unmap` while set.
    fail_free: Mutex<Option<&'static str>>,
    /// Error name returned by `query_event` while set.
    fail_query: Mutex<Option<&'static str>>,
    /// Recorded events: id → (stream, complete).
    events: Mutex<HashMap<u64, (StreamId, bool)>>,
    next_event: AtomicU64,
    synchronized: AtomicU64,
    destroyed: AtomicU64,
    /// `map` calls that reached the backend (failed ones too).
    maps: AtomicU64,
    /// Granules mapped now, by address.
    mapped: Mutex<std::collections::BTreeSet<u64>>,
    /// Ranges released with `release_range`.
    released_ranges: AtomicU64,
    /// Calls that broke the `VirtualMemory` contract (a range not whole granules, mapped
    /// twice, unmapped while not mapped, released while mapped).
    violations: Mutex<Vec<String>>,
}

impl Control {
    fn set(slot: &Mutex<Option<&'static str>>, error: Option<&'static str>) {
        *slot.lock().unwrap() = error;
    }
    fn get(slot: &Mutex<Option<&'static str>>) -> Option<&'static str> {
        *slot.lock().unwrap()
    }
    /// Completes the work recorded so far on `stream`.
    fn complete(&self, stream: StreamId) {
        for (s, done) in self.events.lock().unwrap().values_mut() {
            if *s == stream {
                *done = true;
            }
        }
    }
    fn recorded(&self) -> usize {
        self.events.lock().unwrap().len()
    }
    fn violation(&self, what: String) {
        self.violations.lock().unwrap().push(what);
    }
    /// The granules of `[addr, addr + bytes)`, or a violation when it is not whole granules.
    fn granules(&self, what: &str, addr: u64, bytes: usize) -> Vec<u64> {
        let g = HOST_MAP_GRANULARITY as u64;
        if bytes == 0 || !addr.is_multiple_of(g) || !(bytes as u64).is_multiple_of(g) {
            self.violation(format!(
                "{what} {bytes} bytes at {addr:#x}: not whole granules"
            ));
            return Vec::new();
        }
        (addr..addr + bytes as u64).step_by(g as usize).collect()
    }
}

struct Fake {
    host: HostBackend,
    ctl: Arc<Control>,
}

impl Fake {
    fn new() -> (Fake, Arc<Control>) {
        let ctl = Arc::new(Control::default());
        let fake = Fake {
            host: HostBackend::with_capacity(1 << 30),
            ctl: Arc::clone(&ctl),
        };
        (fake, ctl)
    }
    fn failure(&self, slot: &Mutex<Option<&'static str>>, op: &str) -> Result<(), BackendError> {
        match Control::get(slot) {
            Some(name) => Err(BackendError::driver(op, name)),
            None => Ok(()),
        }
    }
}

// SAFETY: forwards to the host backend's page mapping, or fails without touching it.
unsafe impl VirtualMemory for Fake {
    fn granularity(&self) -> usize {
        self.host.granularity()
    }
    fn reserve_range(&self, bytes: usize) -> Result<u64, BackendError> {
        self.host.reserve_range(bytes)
    }
    unsafe fn release_range(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let still = self
            .ctl
            .mapped
            .lock()
            .unwrap()
            .range(addr..addr + bytes as u64)
            .count();
        if still > 0 {
            self.ctl.violation(format!(
                "releasing the range at {addr:#x} with {still} granules mapped"
            ));
            return Err(BackendError::driver(
                "cuMemAddressFree",
                "CUDA_ERROR_INVALID_VALUE",
            ));
        }
        self.ctl.released_ranges.fetch_add(1, Ordering::SeqCst);
        // SAFETY: forwarded contract.
        unsafe { self.host.release_range(addr, bytes) }
    }
    unsafe fn map(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.ctl.maps.fetch_add(1, Ordering::SeqCst);
        self.failure(&self.ctl.fail_alloc, "cuMemCreate")?;
        let granules = self.ctl.granules("mapping", addr, bytes);
        // SAFETY: forwarded contract.
        unsafe { self.host.map(addr, bytes) }?;
        let mut mapped = self.ctl.mapped.lock().unwrap();
        for g in granules {
            if !mapped.insert(g) {
                self.ctl.violation(format!("mapping {g:#x} twice"));
            }
        }
        Ok(())
    }
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.failure(&self.ctl.fail_free, "cuMemUnmap")?;
        let granules = self.ctl.granules("unmapping", addr, bytes);
        let mut mapped = self.ctl.mapped.lock().unwrap();
        for g in &granules {
            if !mapped.remove(g) {
                self.ctl
                    .violation(format!("unmapping {g:#x}, which is not mapped"));
            }
        }
        drop(mapped);
        // SAFETY: forwarded contract.
        unsafe { self.host.unmap(addr, bytes) }
    }
}

// SAFETY: forwards to the host backend, or fails without touching it.
unsafe impl Backend for Fake {
    fn name(&self) -> String {
        "fake".into()
    }
    fn capacity(&self) -> Option<usize> {
        self.host.capacity()
    }
    fn free_memory(&self) -> Option<usize> {
        self.host.free_memory()
    }
    fn host_addressable(&self) -> bool {
        true
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        self.failure(&self.ctl.fail_alloc, "cuMemAlloc")?;
        self.host.alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        self.failure(&self.ctl.fail_free, "cuMemFree")?;
        // SAFETY: forwarded contract.
        unsafe { self.host.free_segment(addr, bytes) }
    }
    fn virtual_memory(&self) -> Option<&dyn VirtualMemory> {
        Some(self)
    }
    fn record_event(&self, stream: StreamId) -> Result<Option<EventId>, BackendError> {
        let id = self.ctl.next_event.fetch_add(1, Ordering::SeqCst) + 1;
        self.ctl.events.lock().unwrap().insert(id, (stream, false));
        Ok(Some(EventId(id)))
    }
    fn query_event(&self, event: EventId) -> Result<bool, BackendError> {
        self.failure(&self.ctl.fail_query, "cuEventQuery")?;
        Ok(self.ctl.events.lock().unwrap()[&event.0].1)
    }
    fn synchronize_event(&self, event: EventId) -> Result<(), BackendError> {
        self.ctl.synchronized.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = self.ctl.events.lock().unwrap().get_mut(&event.0) {
            e.1 = true;
        }
        Ok(())
    }
    fn destroy_event(&self, _event: EventId) {
        self.ctl.destroyed.fetch_add(1, Ordering::SeqCst);
    }
}

fn fake(expandable: bool) -> (CachingAllocator<Fake>, Arc<Control>) {
    let (backend, ctl) = Fake::new();
    let config = AllocatorConfig::default().with_expandable_segments(expandable);
    (CachingAllocator::with_config(backend, config).unwrap(), ctl)
}

const SIDE: StreamId = StreamId(0x51de);
const OTHER: StreamId = StreamId(0x07e4);

#[test]
fn a_block_freed_on_its_stream_is_reused_there_at_once_and_pools_are_per_stream() {
    let (a, ctl) = fake(false);
    let b = a.allocate_on(MIB, SIDE).unwrap();
    assert_eq!(b.stream, SIDE);
    let addr = b.addr;
    a.free(b);
    // Stream order protects the block on its own stream: no event, reused at once.
    let again = a.allocate_on(MIB, SIDE).unwrap();
    assert_eq!(again.addr, addr);
    assert_eq!(ctl.recorded(), 0);
    // The default stream has a pool of its own: the side stream's free small-pool bytes do
    // not serve it, so it gets a segment of its own.
    a.free(again);
    assert_eq!(a.stats().backend_allocs, 1);
    let main = a.allocate(MIB).unwrap();
    assert_eq!(main.stream, StreamId::DEFAULT);
    assert_ne!(main.addr, addr);
    let s = a.stats();
    assert_eq!(s.backend_allocs, 2);
    assert_eq!(s.reserved_bytes, 2 * 2 * MIB as u64);
    assert_eq!(s.allocated_bytes, MIB as u64);
    a.free(main);
    a.check_invariants().unwrap();
    assert_eq!(a.empty_cache(), 4 * MIB as u64);
}

#[test]
fn a_block_used_by_another_stream_is_not_handed_out_before_its_event_completes() {
    let (a, ctl) = fake(false);
    let b = a.allocate(MIB).unwrap();
    let addr = b.addr;
    a.record_stream(&b, SIDE);
    a.record_stream(&b, SIDE);
    a.record_stream(&b, StreamId::DEFAULT);
    a.free(b);
    // One event, on the recorded stream only (the block's own stream needs none).
    assert_eq!(ctl.recorded(), 1);
    assert_eq!(a.pending_frees(), 1);
    let s = a.stats();
    assert_eq!(s.allocated_bytes, 0);
    assert_eq!(s.active_bytes, MIB as u64);
    assert_eq!(s.active_blocks, 1);
    assert_eq!(s.cached_free_bytes, MIB as u64);
    a.check_invariants().unwrap();

    // Before the side stream finished: the block stays out of the pool.
    let before = a.allocate(MIB).unwrap();
    assert_ne!(before.addr, addr);
    assert_eq!(a.pending_frees(), 1);
    a.check_invariants().unwrap();

    // Work on another stream completing changes nothing.
    ctl.complete(OTHER);
    let still = a.allocate(MIB).unwrap();
    assert_ne!(still.addr, addr);
    assert_eq!(a.pending_frees(), 1);

    // Once it completed, the next allocation finds the block back in the pool: it is handed
    // out again or lies free (best fit may prefer an equal block at a lower address, and the
    // host's segment addresses differ from run to run).
    ctl.complete(SIDE);
    let after = a.allocate(MIB).unwrap();
    let back_in_pool = after.addr == addr
        || a.snapshot()
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .any(|b| b.addr == addr && !b.allocated && b.size >= MIB as u64);
    assert!(
        back_in_pool,
        "the block at {addr:#x} is not back in the pool"
    );
    assert_eq!(a.pending_frees(), 0);
    assert_eq!(ctl.destroyed.load(Ordering::SeqCst), 1);
    let s = a.stats();
    assert_eq!(s.allocated_bytes, 3 * MIB as u64);
    assert_eq!(s.active_bytes, 3 * MIB as u64);
    for b in [before, still, after] {
        a.free(b);
    }
    a.check_invariants().unwrap();
    assert_eq!(a.stats().active_bytes, 0);
}

#[test]
fn empty_cache_waits_for_pending_events_then_releases_the_block() {
    let (a, ctl) = fake(false);
    let b = a.allocate(5 * MIB).unwrap();
    a.record_stream(&b, SIDE);
    a.free(b);
    assert_eq!(a.pending_frees(), 1);
    assert_eq!(a.empty_cache(), 20 * MIB as u64);
    assert_eq!(ctl.synchronized.load(Ordering::SeqCst), 1);
    assert_eq!(a.pending_frees(), 0);
    let s = a.stats();
    assert_eq!((s.reserved_bytes, s.active_bytes), (0, 0));
    a.check_invariants().unwrap();
}

#[test]
fn the_out_of_memory_retry_waits_for_pending_events() {
    let (backend, ctl) = Fake::new();
    let config = AllocatorConfig::default()
        .with_expandable_segments(false)
        .with_memory_limit(40 * MIB as u64);
    let a = CachingAllocator::with_config(backend, config).unwrap();
    let b = a.allocate(30 * MIB).unwrap();
    a.record_stream(&b, SIDE);
    a.free(b);
    // 30 MiB more fit the limit only once the pending block's segment is released, which
    // needs its event: the retry waits for it instead of failing.
    let c = a.allocate(35 * MIB).unwrap();
    assert_eq!(ctl.synchronized.load(Ordering::SeqCst), 1);
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 36 * MIB as u64);
    assert_eq!(s.alloc_retries, 1);
    a.free(c);
    a.check_invariants().unwrap();
}

#[test]
fn allocation_record_stream_keeps_a_dropped_block_out_of_the_pool() {
    // `Allocation::record_stream` and its drop are these two calls on the device's allocator.
    let (backend, ctl) = Fake::new();
    let a = CachingAllocator::new(backend);
    let x = a.allocate(MIB).unwrap();
    assert_eq!(x.stream, StreamId::DEFAULT);
    let addr = x.addr;
    a.record_stream(&x, SIDE);
    a.free(x);
    let y = a.allocate(MIB).unwrap();
    assert_ne!(
        y.addr, addr,
        "handed out while the side stream may still use it"
    );
    ctl.complete(SIDE);
    let z = a.allocate(MIB).unwrap();
    assert_eq!(z.addr, addr);
    a.free(y);
    a.free(z);
    a.check_invariants().unwrap();
    assert_eq!(a.stats().active_bytes, 0);

    // Without record_stream the block is reused at once (stream order is enough).
    let x = a.allocate_on(MIB, SIDE).unwrap();
    let addr = x.addr;
    a.free(x);
    let again = a.allocate_on(MIB, SIDE).unwrap();
    assert_eq!(again.addr, addr);
    a.free(again);
}

#[test]
fn a_failed_event_query_keeps_the_block_out_and_names_the_error() {
    let (a, ctl) = fake(false);
    let b = a.allocate(MIB).unwrap();
    let addr = b.addr;
    a.record_stream(&b, SIDE);
    a.free(b);
    Control::set(&ctl.fail_query, Some(ILLEGAL));
    let c = a.allocate(MIB).unwrap();
    assert_ne!(c.addr, addr);
    let e = a.last_backend_error().unwrap();
    assert_eq!((e.op.as_str(), e.error.as_str()), ("cuEventQuery", ILLEGAL));
    // Poisoned: never reused, even once the queries work again.
    Control::set(&ctl.fail_query, None);
    ctl.complete(SIDE);
    let d = a.allocate(MIB).unwrap();
    assert_ne!(d.addr, addr);
    assert_eq!(a.pending_frees(), 1);
    a.check_invariants().unwrap();
    a.free(c);
    a.free(d);
}

#[test]
fn a_failed_free_keeps_the_segment_in_the_books_and_names_the_driver_error() {
    let (a, ctl) = fake(false);
    let b = a.allocate(5 * MIB).unwrap();
    a.free(b);
    Control::set(&ctl.fail_free, Some(ILLEGAL));
    assert_eq!(a.empty_cache(), 0);
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 20 * MIB as u64);
    assert_eq!(s.segments, 1);
    assert_eq!(s.backend_frees, 0);
    a.check_invariants().unwrap();
    let e = a.last_backend_error().unwrap();
    assert_eq!((e.op.as_str(), e.error.as_str()), ("cuMemFree", ILLEGAL));
    // The segment is still cached and serves requests.
    let c = a.allocate(5 * MIB).unwrap();
    assert_eq!(a.stats().backend_allocs, 1);
    a.free(c);
    // Once the backend works again, the same segment goes.
    Control::set(&ctl.fail_free, None);
    assert_eq!(a.empty_cache(), 20 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 0);
    a.check_invariants().unwrap();
}

#[test]
fn a_failed_unmap_keeps_the_pages_mapped_in_the_books() {
    let (a, ctl) = fake(true);
    assert!(a.uses_expandable_segments());
    let b = a.allocate(30 * MIB).unwrap();
    a.free(b);
    Control::set(&ctl.fail_free, Some(ILLEGAL));
    assert_eq!(a.empty_cache(), 0);
    let s = a.stats();
    assert_eq!(s.reserved_bytes, 30 * MIB as u64);
    assert_eq!(s.backend_frees, 0);
    a.check_invariants().unwrap();
    let e = a.last_backend_error().unwrap();
    assert_eq!((e.op.as_str(), e.error.as_str()), ("cuMemUnmap", ILLEGAL));
    Control::set(&ctl.fail_free, None);
    assert_eq!(a.empty_cache(), 30 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes, 0);
    a.check_invariants().unwrap();
}

#[test]
fn a_driver_error_on_allocation_is_named_not_called_a_full_device() {
    for expandable in [false, true] {
        let (a, ctl) = fake(expandable);
        Control::set(&ctl.fail_alloc, Some(ILLEGAL));
        let e = a.allocate(5 * MIB).unwrap_err();
        assert_eq!(e.cause, OomCause::BackendFailed);
        let failure = e.context.backend_error.clone().unwrap();
        assert_eq!(failure.error, ILLEGAL);
        assert!(failure.op.starts_with("cuMem"), "{failure:?}");
        let text = e.to_string();
        assert!(
            text.contains(ILLEGAL) && text.contains("not for lack of memory"),
            "{text}"
        );
        assert!(!text.contains("device is full"), "{text}");
        let s = a.stats();
        assert_eq!((s.reserved_bytes, s.allocated_bytes, s.num_ooms), (0, 0, 1));
        a.check_invariants().unwrap();

        // The allocator keeps working once the backend does; the failure does not stick to
        // later requests.
        Control::set(&ctl.fail_alloc, None);
        let b = a.allocate(5 * MIB).unwrap();
        a.free(b);
        a.check_invariants().unwrap();
    }
}

#[test]
fn a_real_shortage_is_still_a_full_device_after_an_earlier_driver_error() {
    let (a, ctl) = fake(false);
    Control::set(&ctl.fail_alloc, Some(ILLEGAL));
    assert!(a.allocate(MIB).is_err());
    Control::set(&ctl.fail_alloc, None);
    let e = a.allocate(2 << 30).unwrap_err();
    assert_eq!(e.cause, OomCause::DeviceFull);
    assert_eq!(e.context.backend_error, None);
}

#[test]
fn a_request_larger_than_the_device_is_refused_before_any_page_is_mapped() {
    let (a, ctl) = fake(true);
    assert!(a.uses_expandable_segments());
    let keep = a.allocate(30 * MIB).unwrap();
    let maps = ctl.maps.load(Ordering::SeqCst);
    // The fake holds 1 GiB: 1.5 GiB more cannot be backed, whatever the reserved range allows.
    let e = a.allocate(1536 * MIB).unwrap_err();
    assert_eq!(e.cause, OomCause::DeviceFull);
    assert_eq!(
        ctl.maps.load(Ordering::SeqCst),
        maps,
        "pages were mapped for a request the device cannot hold"
    );
    assert_eq!(a.stats().reserved_bytes, 30 * MIB as u64);
    // Within what the device still holds, the segment grows as before.
    let more = a.allocate(500 * MIB).unwrap();
    assert!(ctl.maps.load(Ordering::SeqCst) > maps);
    a.free(keep);
    a.free(more);
    a.check_invariants().unwrap();
    assert!(ctl.violations.lock().unwrap().is_empty());
}

#[test]
fn dropping_the_allocator_unmaps_every_page_even_when_blocks_straddle_granules() {
    let (a, ctl) = fake(true);
    assert!(a.uses_expandable_segments());
    // Blocks of 3 MiB + 512 B: most start and end inside a granule.
    let mut blocks: Vec<Block> = (0..5).map(|_| a.allocate(3 * MIB + 512).unwrap()).collect();
    assert!(blocks
        .iter()
        .any(|b| b.addr % HOST_MAP_GRANULARITY as u64 != 0));
    // Holes: unmapped granules between mapped ones. The other blocks stay live (raw blocks
    // are plain data; the allocator goes with them).
    a.free(blocks.remove(2));
    a.free(blocks.remove(0));
    assert!(a.empty_cache() > 0);
    assert!(!ctl.mapped.lock().unwrap().is_empty());
    drop(a);
    assert_eq!(
        *ctl.violations.lock().unwrap(),
        Vec::<String>::new(),
        "contract broken on drop"
    );
    assert!(
        ctl.mapped.lock().unwrap().is_empty(),
        "granules left mapped: {:?}",
        ctl.mapped.lock().unwrap()
    );
    assert_eq!(ctl.released_ranges.load(Ordering::SeqCst), 1);
}

/// Runs the test `name` of this binary alone in a child process whose environment has
/// `VRAMGUARD_TEST_CHILD=name`, checks that it passed there, and returns its stderr.
fn child_stderr(name: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("VRAMGUARD_TEST_CHILD", name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child ran the case and it passed: {stdout}\n{stderr}"
    );
    stderr
}

#[test]
fn backend_failures_reach_stderr_without_a_tracing_subscriber() {
    const NAME: &str =
        "tests::backend_faults::backend_failures_reach_stderr_without_a_tracing_subscriber";
    if std::env::var("VRAMGUARD_TEST_CHILD").as_deref() == Ok(NAME) {
        // In the child: a failed free, a failed unmap on drop (the range stays reserved).
        let (a, ctl) = fake(true);
        let b = a.allocate(30 * MIB).unwrap();
        a.free(b);
        Control::set(&ctl.fail_free, Some(ILLEGAL));
        assert_eq!(a.empty_cache(), 0);
        drop(a);
        return;
    }
    let stderr = child_stderr(NAME);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: vramguard: ") && l.contains(ILLEGAL))
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cuMemUnmap") && !l.contains("dropping")),
        "the failed release is not on stderr: {stderr}"
    );
    assert!(
        lines.iter().any(|l| l.contains("dropping the allocator")),
        "the failed unmap on drop is not on stderr: {stderr}"
    );
    assert!(
        stderr.contains("stay reserved"),
        "the range left reserved is not on stderr: {stderr}"
    );
}
