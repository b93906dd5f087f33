//! `expandable_segments:auto` in `VRAMGUARD_ALLOC_CONF`: the process-wide host device uses
//! expandable segments where the backend maps pages (Unix), fixed segments elsewhere. (Own
//! test binary: the variable is read once per process.)

use vramguard_runtime::alloc::ExpandableSegments;
use vramguard_runtime::{memory, Device};

const MIB: u64 = 1 << 20;

#[test]
fn auto_from_the_environment_picks_what_the_backend_offers() {
    std::env::set_var(
        "VRAMGUARD_ALLOC_CONF",
        "expandable_segments:auto,memory_limit:64MiB",
    );
    let host = Device::Host;
    assert!(memory::config_error().is_none());
    let allocator = host.allocator();
    assert_eq!(
        allocator.config().expandable_segments,
        ExpandableSegments::Auto
    );
    assert_eq!(allocator.memory_limit(), Some(64 * MIB));
    let a = host.allocate(5 << 20).unwrap();
    let reserved = memory::stats(&host).reserved_bytes;
    if cfg!(unix) {
        assert!(allocator.uses_expandable_segments());
        // Whole 2 MiB granules of the expandable segment.
        assert_eq!(reserved, 6 * MIB);
    } else {
        assert!(!allocator.uses_expandable_segments());
        assert_eq!(reserved, 20 * MIB);
    }
    drop(a);
}
