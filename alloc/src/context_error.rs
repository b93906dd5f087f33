//! Why a GPU's context cannot be opened: [`ContextError`]. In every build, with or without the
//! `cuda` feature, so that the errors that wrap it (`vramguard::DeviceError`) have the same
//! variants in every build; only a build with `cuda` returns it.

/// A GPU whose context cannot be opened: no driver, no such device, or a driver call failed
/// (`vramguard::DeviceError::Context` wraps it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContextError {
    /// The CUDA driver library is not installed.
    #[error("no CUDA driver found (libcuda.so): install the NVIDIA driver or use Device::Host")]
    NoDriver,
    /// The driver sees no GPU with this ordinal.
    #[error("no CUDA device {ordinal}: the driver sees {count} device(s); pick an ordinal below {count} or use Device::Host")]
    NoDevice {
        /// Ordinal asked for.
        ordinal: usize,
        /// Devices the driver reports.
        count: usize,
    },
    /// A driver call failed.
    #[error("CUDA driver call {op} failed: {message}")]
    Driver {
        /// The driver function.
        op: &'static str,
        /// The driver's error name.
        message: String,
    },
}
