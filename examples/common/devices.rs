//! The examples' own devices honour `VRAMGUARD_ALLOC_CONF`, as the process-wide devices do:
//! each starts from its settings (the defaults when it is unset), with the example's own
//! settings on top, and a bad value stops the example with the error naming the key.
#![allow(dead_code)] // Each program uses a different subset.

use vramguard::alloc::{AllocatorConfig, ConfigError, HostBackend, SetupError};
use vramguard::Device;

/// The settings of `VRAMGUARD_ALLOC_CONF`.
pub fn env_config() -> Result<AllocatorConfig, ConfigError> {
    AllocatorConfig::from_env()
}

/// A host device with an allocator of its own, configured by `VRAMGUARD_ALLOC_CONF`.
pub fn isolated_host() -> Result<Device, SetupError> {
    Device::host_with_config(env_config()?)
}

/// A host device of `capacity` bytes with an allocator of its own, configured by
/// `VRAMGUARD_ALLOC_CONF`.
pub fn host_with_capacity(capacity: usize) -> Result<Device, SetupError> {
    Device::host_pool(HostBackend::with_capacity(capacity), env_config()?)
}
