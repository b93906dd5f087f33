//! `VRAMGUARD_ALLOC_CONF` configures the process-wide host device. (Own test binary: the
//! variable is read once per process.)

use vramguard_runtime::alloc::{ConfigSource, OomCause};
use vramguard_runtime::{memory, Device};

#[test]
fn env_config_applies_to_the_host_device() {
    std::env::set_var(
        "VRAMGUARD_ALLOC_CONF",
        "memory_limit:64MiB, preallocate:24MiB, trace_capacity:16",
    );
    let host = Device::Host;
    assert!(memory::config_error().is_none());
    assert_eq!(host.allocator().memory_limit(), Some(64 << 20));
    let s = memory::stats(&host);
    assert_eq!(s.reserved_bytes, 24 << 20, "preallocated at start");
    let a = host.allocate(20 << 20).unwrap();
    assert_eq!(
        memory::stats(&host).backend_allocs,
        1,
        "carved from the preallocation"
    );
    let err = host.allocate(48 << 20).unwrap_err();
    assert_eq!(err.cause, OomCause::LimitReached);
    assert_eq!(err.config_source, ConfigSource::Environment);
    let text = err.to_string();
    assert!(
        text.contains("raise the limit (`memory_limit` in VRAMGUARD_ALLOC_CONF"),
        "the advice names the variable the setting came from: {text}"
    );
    assert!(!text.contains("AllocatorConfig::"), "{text}");
    let trace = memory::trace(&host);
    assert_eq!(trace.capacity, 16);
    assert!(!trace.events.is_empty());
    drop(a);
}
