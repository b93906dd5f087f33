//! The default allocator settings: expandable segments wherever the backend can map pages.
//! Every unbounded host device reserves [`DEFAULT_EXPANDABLE_RANGE`] (64 GiB) of address space
//! for its expandable segment; a process that makes thousands of devices must get it back when
//! each is dropped.

use vramguard_alloc::DEFAULT_EXPANDABLE_RANGE;
use vramguard_memory::{memory, Device};

const MIB: usize = 1 << 20;

#[cfg(unix)]
#[test]
fn thousands_of_unbounded_host_devices_in_sequence_release_their_address_space() {
    // 4,000 × 64 GiB = 250 TiB, more than the 128 TiB of user address space on x86-64 and
    // AArch64 (47/48-bit): had a dropped device kept its range, the reservation would fail
    // after about 2,000 devices and `auto` would fall back to fixed segments.
    const DEVICES: usize = 4_000;
    assert!(DEVICES as u128 * DEFAULT_EXPANDABLE_RANGE as u128 > 1u128 << 47);
    for i in 0..DEVICES {
        let device = Device::isolated_host();
        let allocator = device.allocator();
        assert!(
            allocator.uses_expandable_segments(),
            "device {i}: {:?}",
            allocator.fixed_segments_reason()
        );
        // Map pages too, so the drop has something to unmap.
        let a = device.allocate(3 * MIB).unwrap();
        let s = memory::stats(&device);
        assert_eq!(
            (s.allocated_bytes, s.reserved_bytes),
            (3 * MIB as u64, 4 * MIB as u64)
        );
        drop(a);
    }
}

#[cfg(not(unix))]
#[test]
fn hosts_without_mmap_keep_fixed_segments_under_auto() {
    let device = Device::isolated_host();
    assert!(!memory::uses_expandable_segments(&device));
    let a = device.allocate(5 * MIB).unwrap();
    // PyTorch's segment rules: a 20 MiB segment for a request under 10 MiB.
    assert_eq!(memory::stats(&device).reserved_bytes, 20 * MIB as u64);
    drop(a);
}

#[cfg(unix)]
#[test]
fn the_process_wide_host_device_uses_expandable_segments_by_default() {
    // No VRAMGUARD_ALLOC_CONF in this binary: the defaults.
    assert!(std::env::var_os("VRAMGUARD_ALLOC_CONF").is_none());
    assert!(memory::uses_expandable_segments(&Device::Host));
    assert!(memory::snapshot(&Device::Host).expandable_segments);
}
