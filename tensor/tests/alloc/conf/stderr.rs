//! Errors and warnings nobody misses: with no `tracing` subscriber installed (the default), a
//! bad `VRAMGUARD_ALLOC_CONF` and a batch scope whose live memory keeps growing reach stderr;
//! `Device::cuda` returns the bad setting as a typed error. Each case runs in a child process
//! (the variable is read once per process, and stderr is the child's).

use super::{in_child, is_child, vramguard_lines};
use vramguard_alloc::{ConfigError, SetupError};
#[cfg(feature = "cuda")]
use vramguard_memory::device::DeviceError;
use vramguard_memory::scope::{BatchScope, ScopeOptions, WarningOutput};
use vramguard_memory::{memory, Device};

#[test]
fn a_bad_value_for_the_host_device_is_printed_once_on_stderr() {
    const NAME: &str = "conf::stderr::a_bad_value_for_the_host_device_is_printed_once_on_stderr";
    if is_child(NAME) {
        let a = Device::Host.allocate(1000).expect("defaults work");
        let b = Device::host().allocate(1000).expect("defaults work");
        match memory::config_error() {
            Some(SetupError::Config(ConfigError::BadValue { key, value, .. })) => {
                assert_eq!((key.as_str(), value.as_str()), ("max_split_size_mb", "abc"))
            }
            other => panic!("expected the bad value, got {other:?}"),
        }
        drop((a, b));
        return;
    }
    let stderr = in_child(NAME, Some("max_split_size_mb:abc")).unwrap_err();
    let lines = vramguard_lines(&stderr);
    assert_eq!(lines.len(), 1, "printed once: {stderr}");
    assert!(lines[0].starts_with("error: vramguard: "), "{stderr}");
    assert!(
        lines[0].contains("max_split_size_mb"),
        "names the key: {stderr}"
    );
    assert!(lines[0].contains("VRAMGUARD_ALLOC_CONF"), "{stderr}");
    assert!(lines[0].contains("default allocator settings"), "{stderr}");
}

// Without the CUDA backend `Device::cuda` reads no settings (`DeviceError::CudaFeatureDisabled`).
#[cfg(feature = "cuda")]
#[test]
fn an_unknown_key_fails_the_first_use_of_a_gpu_with_the_typed_error() {
    const NAME: &str =
        "conf::stderr::an_unknown_key_fails_the_first_use_of_a_gpu_with_the_typed_error";
    if is_child(NAME) {
        for _ in 0..2 {
            match Device::cuda(0) {
                Err(DeviceError::Config(SetupError::Config(ConfigError::UnknownKey { key }))) => {
                    assert_eq!(key, "foo")
                }
                other => panic!("expected the unknown key, got {other:?}"),
            }
        }
        return;
    }
    let stderr = in_child(NAME, Some("foo:1")).unwrap_err();
    assert_eq!(
        vramguard_lines(&stderr),
        Vec::<&str>::new(),
        "returned, not printed"
    );
}

fn grow(options: ScopeOptions) {
    let device = Device::isolated_host();
    let mut history = Vec::new();
    for _ in 0..4 {
        let _scope = BatchScope::enter_with("growing", options.clone());
        history.push(device.allocate(1024).expect("host allocation"));
    }
}

#[test]
fn growth_across_iterations_reaches_stderr_without_any_set_up() {
    const NAME: &str = "conf::stderr::growth_across_iterations_reaches_stderr_without_any_set_up";
    if is_child(NAME) {
        grow(ScopeOptions::new().warn_after_growing(3));
        return;
    }
    let stderr = in_child(NAME, None).unwrap_err();
    let lines = vramguard_lines(&stderr);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("warning: vramguard: live memory keeps growing across iterations"),
        "{stderr}"
    );
    assert!(
        lines[0].contains("batch scope `growing` iteration 4"),
        "{stderr}"
    );
}

#[test]
fn growth_routed_to_tracing_stays_off_stderr() {
    const NAME: &str = "conf::stderr::growth_routed_to_tracing_stays_off_stderr";
    if is_child(NAME) {
        grow(
            ScopeOptions::new()
                .warn_after_growing(3)
                .warnings(WarningOutput::Tracing),
        );
        return;
    }
    let stderr = in_child(NAME, None).unwrap_err();
    assert_eq!(vramguard_lines(&stderr), Vec::<&str>::new(), "{stderr}");
}
