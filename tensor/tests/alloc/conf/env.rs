//! `VRAMGUARD_ALLOC_CONF` configures the process-wide host device: settings applied (a limit,
//! a preallocation, the trace), `expandable_segments:auto` picking what the backend offers, and
//! a bad value falling back to the defaults, reported. Each case runs in a child process with
//! the variable set (it is read once per process).

use super::{in_child, is_child};
use vramguard_alloc::{
    ConfigError, ConfigSource, ExpandableSegments, OomCause, SetupError, DEFAULT_TRACE_CAPACITY,
};
use vramguard_memory::{memory, Device};

const MIB: u64 = 1 << 20;

#[test]
fn env_config_applies_to_the_host_device() {
    const NAME: &str = "conf::env::env_config_applies_to_the_host_device";
    if !is_child(NAME) {
        in_child(
            NAME,
            Some("memory_limit:64MiB, preallocate:24MiB, trace_capacity:16"),
        )
        .unwrap_err();
        return;
    }
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

#[test]
fn auto_from_the_environment_picks_what_the_backend_offers() {
    const NAME: &str = "conf::env::auto_from_the_environment_picks_what_the_backend_offers";
    if !is_child(NAME) {
        in_child(NAME, Some("expandable_segments:auto,memory_limit:64MiB")).unwrap_err();
        return;
    }
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

#[test]
fn bad_env_config_falls_back_to_defaults_and_is_reported() {
    const NAME: &str = "conf::env::bad_env_config_falls_back_to_defaults_and_is_reported";
    if !is_child(NAME) {
        in_child(NAME, Some("memory_limit:4GiB,max_split:12")).unwrap_err();
        return;
    }
    let a = Device::Host.allocate(1000).unwrap();
    assert_eq!(a.size(), 1024);
    let err = memory::config_error().expect("the bad setting is reported");
    assert_eq!(
        err,
        SetupError::Config(ConfigError::UnknownKey {
            key: "max_split".into()
        })
    );
    assert!(err.to_string().contains("VRAMGUARD_ALLOC_CONF"), "{err}");
    let allocator = Device::Host.allocator();
    assert_eq!(
        allocator.memory_limit(),
        None,
        "defaults, not a half-applied config"
    );
    assert_eq!(allocator.config().trace_capacity, DEFAULT_TRACE_CAPACITY);
}
