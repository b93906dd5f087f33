//! A bad `VRAMGUARD_ALLOC_CONF` must not panic the process-wide host device: it is reported,
//! the defaults are used, and `memory::config_error()` returns the error. (Own test binary:
//! the variable is read once per process.)

use vramguard_runtime::alloc::{ConfigError, SetupError, DEFAULT_TRACE_CAPACITY};
use vramguard_runtime::{memory, Device};

#[test]
fn bad_env_config_falls_back_to_defaults_and_is_reported() {
    std::env::set_var("VRAMGUARD_ALLOC_CONF", "memory_limit:4GiB,max_split:12");
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
