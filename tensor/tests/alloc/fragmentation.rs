//! Fragmentation: free memory remains but a large request fails ("4 GB free, a 3 GB
//! allocation fails"), reproduced on a 20 MiB host device, and the remedies that make the same
//! sequence succeed: coalescing (drop what is no longer needed), `empty_cache` (when another
//! allocator needs the memory), preallocation (a `Workspace`, or `reserve` with
//! `max_split_size`).
//!
//! The failing pool is PyTorch's default, fixed segments, configured explicitly
//! (`expandable_segments:false`): the default host device now has expandable segments, under
//! which the same sequence succeeds (the last test).

use std::sync::Arc;
use vramguard_alloc::{
    AllocatorConfig, Backend, BackendError, CachingAllocator, HostBackend, OomCause,
};
use vramguard_memory::device::Allocation;
use vramguard_memory::memory::Workspace;
use vramguard_memory::{memory, Device};

const MIB: usize = 1 << 20;
const CAPACITY: usize = 20 * MIB;
/// Activation sizes of the variable-length batches (MiB): sequences grow batch by batch.
const ACTIVATIONS: [usize; 6] = [2, 3, 4, 5, 6, 7];
/// Each batch keeps an output of this size (a loop that keeps a summary of every batch, `results.append(out)`).
const OUTPUT: usize = 3 * MIB / 2;
/// The request that fails: a final large buffer. 9 MiB of outputs + 9 MiB fit in 20 MiB.
const BIG: usize = 9 * MIB;

/// A 20 MiB host device with fixed segments (PyTorch's default).
fn fixed_device() -> Device {
    Device::host_pool(
        HostBackend::with_capacity(CAPACITY),
        AllocatorConfig::default().with_expandable_segments(false),
    )
    .unwrap()
}

/// Runs the batches; activations come from `workspace` when given.
fn batches(device: &Device, mut workspace: Option<&mut Workspace>) -> Vec<Allocation> {
    let mut outputs = Vec::new();
    for &mib in &ACTIVATIONS {
        let activation = match workspace.as_deref_mut() {
            Some(ws) => {
                let view = ws.view(mib * MIB).unwrap();
                assert_eq!(view.len(), mib * MIB);
                None
            }
            None => Some(device.allocate(mib * MIB).unwrap()),
        };
        outputs.push(device.allocate(OUTPUT).unwrap());
        drop(activation);
    }
    outputs
}

#[test]
fn free_memory_remains_but_a_large_request_fails_with_fragmentation() {
    let device = fixed_device();
    let outputs = batches(&device, None);
    let before = memory::stats(&device);
    assert_eq!(before.requested_bytes, (ACTIVATIONS.len() * OUTPUT) as u64);
    let err = device.allocate(BIG).unwrap_err();
    assert_eq!(err.cause, OomCause::Fragmentation);
    // Outputs pinned between the holes the activations left.
    assert_eq!(err.cached_free, 19 * MIB as u64 / 2);
    assert_eq!(err.largest_free_block, 7 * MIB as u64);
    let msg = err.to_string();
    assert!(
        msg.contains("fragmentation: 9.5 MiB cached free, but the largest free block is 7.0 MiB"),
        "{msg}"
    );
    let after = memory::stats(&device);
    assert_eq!(after.num_ooms, 1);
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    assert_eq!(after.reserved_bytes, CAPACITY as u64);
    drop(outputs);
}

#[test]
fn coalescing_freed_outputs_makes_the_request_succeed() {
    let device = fixed_device();
    let outputs = batches(&device, None);
    assert!(device.allocate(BIG).is_err());
    let segments = memory::stats(&device).backend_allocs;
    // The outputs are consumed: dropping them merges every hole with its neighbours.
    drop(outputs);
    let s = memory::stats(&device);
    assert_eq!(s.allocated_bytes, 0);
    assert_eq!(s.largest_free_block, CAPACITY as u64);
    let big = device.allocate(BIG).unwrap();
    assert_eq!(
        memory::stats(&device).backend_allocs,
        segments,
        "served from the cache"
    );
    drop(big);
    device.allocator().check_invariants().unwrap();
}

#[test]
fn a_preallocated_workspace_makes_the_same_sequence_succeed() {
    let device = fixed_device();
    // Preallocate the largest buffer once and slice it: activations and the final buffer.
    let largest = (ACTIVATIONS.iter().max().unwrap() * MIB).max(BIG);
    let mut ws = Workspace::new(&device, largest).unwrap();
    let outputs = batches(&device, Some(&mut ws));
    let big = ws.view(BIG).unwrap();
    assert_eq!(big.len(), BIG);
    let s = memory::stats(&device);
    assert_eq!(
        s.allocated_bytes,
        (largest + ACTIVATIONS.len() * OUTPUT) as u64
    );
    assert_eq!(s.num_ooms, 0);
    drop(outputs);
}

/// One device shared by two allocators (two models), as on a GPU.
struct Shared(Arc<HostBackend>);

// SAFETY: forwards to the host backend.
unsafe impl Backend for Shared {
    fn name(&self) -> String {
        "shared-host".into()
    }
    fn capacity(&self) -> Option<usize> {
        self.0.capacity()
    }
    fn host_addressable(&self) -> bool {
        true
    }
    fn alloc_segment(&self, bytes: usize) -> Result<u64, BackendError> {
        self.0.alloc_segment(bytes)
    }
    unsafe fn free_segment(&self, addr: u64, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: forwarded contract.
        unsafe { self.0.free_segment(addr, bytes) }
    }
}

#[test]
fn empty_cache_gives_cached_memory_back_to_another_model() {
    let gpu = Arc::new(HostBackend::with_capacity(CAPACITY));
    let model_a = CachingAllocator::new(Shared(Arc::clone(&gpu)));
    let model_b = CachingAllocator::new(Shared(Arc::clone(&gpu)));
    // Model A ran its batches and freed everything, but its cache still holds the memory.
    let blocks: Vec<_> = (0..5).map(|_| model_a.allocate(4 * MIB).unwrap()).collect();
    for b in blocks {
        model_a.free(b);
    }
    assert_eq!(model_a.stats().reserved_bytes, CAPACITY as u64);
    let err = model_b.allocate(BIG).unwrap_err();
    assert_eq!(err.cause, OomCause::DeviceFull);
    // Model A returns its cache: model B's request now succeeds.
    assert_eq!(model_a.empty_cache(), CAPACITY as u64);
    let big = model_b.allocate(BIG).unwrap();
    assert_eq!(model_b.stats().allocated_bytes, BIG as u64);
    model_b.free(big);
}

#[cfg(unix)]
#[test]
fn the_default_expandable_segments_serve_it_by_unmapping_free_granules() {
    // The default expandable segment grows only at its end, and the outputs stay pinned between
    // the activations' holes. Mapped in 2 MiB granules, in MiB: out1 at 2, out3 at 0, out4 at
    // 3.5, out2 at 6.5, out5 at 5, and act7 (7 MiB at 8) pushes out6 to 15, so the mapping ends
    // at 18 with free blocks of 0.5 (1.5–2), 7 (8–15) and 1.5 (16.5–18) MiB: no 9 MiB block,
    // and only 2 MiB of the device left for the end to grow by. The out-of-memory path releases
    // the cache as PyTorch does, unmapping every whole free granule: 8–14 MiB goes back (the
    // other free blocks hold no whole granule), and the end of the mapping grows by the 8 MiB
    // the request lacks beyond the free 1.5 MiB tail (the address range is twice the device,
    // so the hole's address space does not stop it).
    let device = Device::host_with_capacity(CAPACITY);
    assert!(device.allocator().uses_expandable_segments());
    let outputs = batches(&device, None);
    let before = memory::stats(&device);
    assert_eq!(before.reserved_bytes, 18 * MIB as u64);
    assert_eq!(before.largest_free_block, 7 * MIB as u64);
    let big = device.allocate(BIG).unwrap();
    let s = memory::stats(&device);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(s.alloc_retries, 1);
    assert_eq!(s.reserved_bytes, 20 * MIB as u64);
    assert_eq!(s.backend_frees - before.backend_frees, 1);
    assert_eq!(s.backend_allocs - before.backend_allocs, 1);
    device.allocator().check_invariants().unwrap();
    drop(big);
    drop(outputs);
    device.allocator().check_invariants().unwrap();
}
