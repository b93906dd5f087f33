//! Blocks and devices: ids and alignment, a block freed only to its own allocator, host pointers only from host memory, and the device kept alive exactly as long as its allocations.

use super::*;

#[test]
fn block_ids_are_unique_and_memory_is_aligned() {
    let a = fixed();
    let b1 = a.allocate(100).unwrap();
    let b2 = a.allocate(100).unwrap();
    let id2 = b2.id;
    a.free(b2);
    let b3 = a.allocate(100).unwrap();
    assert_eq!(b3.addr % 64, 0);
    assert!(b1.id != id2 && b3.id != id2 && b3.id != b1.id);
    a.free(b1);
    a.free(b3);
}

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<DeviceAllocator>();
    send_sync::<Device>();
    send_sync::<crate::device::Allocation>();
    send_sync::<Workspace>();
    send_sync::<OutOfMemory>();
}

#[test]
fn a_block_from_another_allocator_is_refused() {
    let a = fixed();
    let b = fixed();
    let foreign = a.allocate(1000).unwrap();
    let mine = b.allocate(1000).unwrap();
    let before = b.stats();
    b.free(foreign);
    assert_eq!(b.stats(), before);
    check(&b);
    // `mine` is still live: the next block must not be handed out over it.
    let next = b.allocate(1000).unwrap();
    assert_ne!(next.addr, mine.addr);

    // A block of an allocator that is gone (its address may be reused by the next one).
    let gone = fixed();
    let stale = gone.allocate(1000).unwrap();
    drop(gone);
    let c = fixed();
    let live = c.allocate(1000).unwrap();
    let before = c.stats();
    c.free(stale);
    assert_eq!(c.stats(), before);
    check(&c);
    let other = c.allocate(1000).unwrap();
    assert_ne!(other.addr, live.addr);
    for (x, blk) in [(&b, mine), (&b, next), (&c, live), (&c, other)] {
        x.free(blk);
    }
    assert_eq!(b.stats().allocated_bytes, 0);
    assert_eq!(c.stats().allocated_bytes, 0);
}

#[test]
fn a_host_pool_over_device_memory_gives_no_host_pointers() {
    // `Device::HostPool` is public: it may wrap any backend. Memory the CPU cannot address must
    // never come out as a host pointer (Workspace would zero it, tensors would slice it).
    struct Remote(AtomicU64);
    // SAFETY: hands out disjoint address ranges and claims no host access.
    unsafe impl Backend for Remote {
        fn name(&self) -> String {
            "remote".into()
        }
        fn capacity(&self) -> Option<usize> {
            None
        }
        fn host_addressable(&self) -> bool {
            false
        }
        fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
            Ok(self.0.fetch_add(bytes as u64, Ordering::SeqCst))
        }
        unsafe fn free_segment(&self, _addr: u64, _bytes: usize) -> Result<(), BackendError> {
            Ok(())
        }
    }
    let backend: Box<dyn Backend> = Box::new(Remote(AtomicU64::new(1 << 40)));
    let device = Device::HostPool(Arc::new(CachingAllocator::new(backend)));
    assert!(!device.is_host());
    let a = device.allocate(1000).unwrap();
    assert!(a.host_ptr().is_none());
    drop(a);
    let mut ws = Workspace::new(&device, 4096).unwrap();
    assert!(ws.view(4096).unwrap().as_bytes_mut().is_none());
    assert!(Device::host().is_host() && Device::isolated_host().is_host());
}

/// An allocation holds no reference to its device of its own: the allocator keeps one to
/// itself while any of its allocations lives. Dropping every handle first leaves it alive
/// (its allocations still read their device, and a handle cloned from one works); the last
/// allocation's drop lets it go, in whatever order they are dropped.
#[test]
fn allocations_keep_their_device_alive_and_the_last_one_lets_it_go() {
    for order in [[0, 1, 2], [2, 0, 1], [1, 2, 0]] {
        let device = Device::isolated_host();
        let weak = Arc::downgrade(device.allocator());
        let mut held: Vec<Option<crate::device::Allocation>> = [1000, 3 << 20, 700]
            .into_iter()
            .map(|bytes| Some(device.allocate(bytes).expect("allocation")))
            .collect();
        assert_eq!(
            Arc::strong_count(device.allocator()),
            2,
            "one handle, one kept"
        );
        drop(device);
        for (n, &i) in order.iter().enumerate() {
            let a = held[i].take().expect("not dropped yet");
            // The device read through the allocation is the live allocator.
            assert!(Arc::ptr_eq(
                a.device().allocator(),
                &weak.upgrade().expect("alive")
            ));
            let again = a.device().clone();
            let b = again
                .allocate(4096)
                .expect("allocation through a cloned handle");
            drop((a, b));
            drop(again);
            let left = order.len() - n - 1;
            assert_eq!(
                weak.upgrade().is_some(),
                left > 0,
                "{left} allocations left"
            );
        }
        assert_eq!(weak.strong_count(), 0);
    }
}

/// The allocator's reference to itself comes and goes with its allocations: none while
/// nothing is allocated, so a device with no allocations is dropped with its last handle.
#[test]
fn a_device_without_allocations_is_dropped_with_its_last_handle() {
    let device = Device::isolated_host();
    let weak = Arc::downgrade(device.allocator());
    for bytes in [512, 1 << 20, 8 << 20] {
        drop(device.allocate(bytes).expect("allocation"));
        assert_eq!(Arc::strong_count(device.allocator()), 1);
    }
    drop(device);
    assert!(weak.upgrade().is_none());
}

/// Threads allocate and free on one device while every handle to it is dropped early: the
/// last allocation freed, on whichever thread, lets the allocator go, exactly once, and no
/// allocation reads a freed allocator before that (each checks its device on the way).
#[test]
fn the_last_allocation_on_any_thread_lets_the_device_go() {
    for round in 0..20 {
        let device = Device::isolated_host();
        let weak = Arc::downgrade(device.allocator());
        let per_thread: Vec<Vec<crate::device::Allocation>> = (0..4)
            .map(|t| {
                (0..8)
                    .map(|i| {
                        device
                            .allocate(512 + 4096 * (t * 8 + i))
                            .expect("allocation")
                    })
                    .collect()
            })
            .collect();
        drop(device);
        std::thread::scope(|s| {
            for (t, mut held) in per_thread.into_iter().enumerate() {
                s.spawn(move || {
                    for i in 0..held.len() {
                        let a = held.swap_remove((i * 7 + t + round) % held.len());
                        let more = a.device().allocate(1 << 20).expect("allocation");
                        assert!(a.device() == more.device());
                        drop((more, a));
                    }
                });
            }
        });
        assert!(
            weak.upgrade().is_none(),
            "round {round}: the allocator outlived its blocks"
        );
    }
}
