//! Multi-thread stress: 8 threads × 12,500 operations (100,000 in all) on one allocator, each
//! thread writing its id into its blocks and checking it before the free (an overlap between
//! two live blocks would show up as a foreign id). Ends with exact statistics and the
//! allocator's invariants; runs on a bounded device (fixed and expandable segments) count
//! every OOM exactly. The unbounded run uses the default settings (expandable segments on the
//! host backend) and fixed segments.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use vramguard_alloc::{AllocatorConfig, HostBackend};
use vramguard_memory::device::Allocation;
use vramguard_memory::{memory, Device};

const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 12_500;
const MAX_LIVE: usize = 24;

/// The runtime's seeded generator, with a bounded draw.
struct Rng(vramguard_tensor::tensor::rng::Rng);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(vramguard_tensor::tensor::rng::Rng::new(seed))
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0.next_u64() % n
    }
}

/// Mostly small sizes, some up to 4 MiB.
fn size(rng: &mut Rng) -> usize {
    match rng.below(16) {
        0..=9 => 1 + rng.below(16 << 10) as usize,
        10..=13 => 1 + rng.below(1 << 20) as usize,
        _ => 1 + rng.below(4 << 20) as usize,
    }
}

fn stamp(a: &Allocation, tag: u64) {
    let p = a.host_ptr().unwrap() as *mut u64;
    let last = (a.requested_bytes() / 8).saturating_sub(1);
    // SAFETY: the allocation holds at least `requested_bytes` bytes, 64-byte aligned, and this
    // thread owns it.
    unsafe {
        p.write(tag);
        p.add(last).write(tag);
    }
}

fn verify(a: &Allocation, tag: u64) {
    let p = a.host_ptr().unwrap() as *const u64;
    let last = (a.requested_bytes() / 8).saturating_sub(1);
    // SAFETY: as in `stamp`; written by this thread.
    let (first, end) = unsafe { (p.read(), p.add(last).read()) };
    assert_eq!(
        (first, end),
        (tag, tag),
        "block {:#x} was overwritten",
        a.addr()
    );
}

struct Counts {
    allocs: AtomicU64,
    frees: AtomicU64,
    ooms: AtomicU64,
}

fn hammer(device: &Device) -> Counts {
    let counts = Arc::new(Counts {
        allocs: AtomicU64::new(0),
        frees: AtomicU64::new(0),
        ooms: AtomicU64::new(0),
    });
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (device, counts) = (device.clone(), Arc::clone(&counts));
            s.spawn(move || {
                let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ ((t as u64 + 1) * 0x1234_5678));
                let mut live: Vec<(Allocation, u64)> = Vec::new();
                for op in 0..OPS_PER_THREAD {
                    let tag = ((t as u64) << 32) | op as u64;
                    if !live.is_empty() && (live.len() >= MAX_LIVE || rng.below(2) == 0) {
                        let i = rng.below(live.len() as u64) as usize;
                        let (a, tag) = live.swap_remove(i);
                        verify(&a, tag);
                        drop(a);
                        counts.frees.fetch_add(1, Ordering::Relaxed);
                    } else {
                        match device.allocate(size(&mut rng).max(8)) {
                            Ok(a) => {
                                stamp(&a, tag);
                                live.push((a, tag));
                                counts.allocs.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                counts.ooms.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                for (a, tag) in live {
                    verify(&a, tag);
                    drop(a);
                    counts.frees.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Arc::into_inner(counts).unwrap()
}

fn check_final(device: &Device, counts: &Counts) {
    device.allocator().check_invariants().unwrap();
    let s = memory::stats(device);
    let allocs = counts.allocs.load(Ordering::Relaxed);
    assert_eq!(s.num_allocs, allocs);
    assert_eq!(s.num_frees, allocs);
    assert_eq!(counts.frees.load(Ordering::Relaxed), allocs);
    assert_eq!(s.num_ooms, counts.ooms.load(Ordering::Relaxed));
    assert_eq!(
        (
            s.allocated_bytes,
            s.active_bytes,
            s.active_blocks,
            s.requested_bytes
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(s.cached_free_bytes, s.reserved_bytes);
    let released = memory::empty_cache(device);
    assert_eq!(released, s.reserved_bytes);
    let s = memory::stats(device);
    assert_eq!((s.reserved_bytes, s.segments), (0, 0));
    let backend = device.allocator().backend();
    if let Some(capacity) = backend.capacity() {
        // Every segment and every mapped page went back to the device.
        assert_eq!(backend.free_memory(), Some(capacity));
    }
    if !device.allocator().uses_expandable_segments() {
        // One free per segment. (An expandable segment is mapped in many steps and unmapped
        // in whole free tails, so its counts need not pair up.)
        assert_eq!(s.backend_allocs, s.backend_frees);
    }
}

fn fixed() -> AllocatorConfig {
    AllocatorConfig::default().with_expandable_segments(false)
}

#[test]
fn eight_threads_share_one_allocator() {
    for device in [
        Device::isolated_host(),
        Device::host_with_config(fixed()).unwrap(),
    ] {
        let counts = hammer(&device);
        assert_eq!(counts.ooms.load(Ordering::Relaxed), 0);
        assert!(counts.allocs.load(Ordering::Relaxed) >= (THREADS * OPS_PER_THREAD / 3) as u64);
        check_final(&device, &counts);
    }
}

/// Hammers a 24 MiB device, far too small for 8 × 24 live blocks of up to 4 MiB, so that some
/// requests fail; statistics must stay exact through the OOMs.
fn ooms_under_threads(config: AllocatorConfig) {
    let device = Device::host_pool(HostBackend::with_capacity(24 << 20), config).unwrap();
    let counts = hammer(&device);
    assert!(
        counts.ooms.load(Ordering::Relaxed) > 0,
        "the device was meant to run out"
    );
    assert!(memory::stats(&device).peak_reserved_bytes <= 24 << 20);
    check_final(&device, &counts);
}

#[test]
fn statistics_stay_exact_through_ooms_under_threads() {
    ooms_under_threads(fixed());
}

#[cfg(unix)]
#[test]
fn expandable_segments_under_threads_keep_exact_statistics() {
    ooms_under_threads(AllocatorConfig::default().with_expandable_segments(true));
}
