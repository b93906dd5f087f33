//! `--device host|cuda[:N]` for the examples and benchmarks.
//!
//! The default (no flag, or `host`) keeps each program's host device and output unchanged. On a
//! machine without a usable GPU, `--device cuda` prints one line saying why and the program
//! exits 0 (nothing to measure is not a failure).

use vramguard::alloc::{AllocatorConfig, MemoryLimit};
use vramguard::Device;

/// What `--device` asked for.
pub enum DeviceArg {
    /// No flag, or `host`.
    Host,
    /// A GPU, with an allocator of its own (its statistics are this program's).
    Cuda(Device),
    /// A GPU was asked for but cannot be used; the message says why.
    Unavailable(String),
}

impl DeviceArg {
    /// Parses the flag's value (`None` when absent). A value that names no device is an error.
    /// A GPU's allocator starts from `VRAMGUARD_ALLOC_CONF`, as the host devices do.
    pub fn parse(value: Option<String>) -> Result<DeviceArg, String> {
        let config = super::devices::env_config().map_err(|e| e.to_string())?;
        Self::parse_with(value, config)
    }

    /// As [`DeviceArg::parse`], with the GPU's allocator built from `config` (e.g. a memory
    /// limit for a budget).
    pub fn parse_with(value: Option<String>, config: AllocatorConfig) -> Result<DeviceArg, String> {
        let Some(value) = value else {
            return Ok(DeviceArg::Host);
        };
        if value == "host" {
            return Ok(DeviceArg::Host);
        }
        let ordinal = match value
            .strip_prefix("cuda")
            .map(|s| s.trim_start_matches(':'))
        {
            Some("") => 0,
            Some(n) => n
                .parse::<usize>()
                .map_err(|_| format!("unknown device `{value}`: use `host` or `cuda[:N]`"))?,
            None => {
                return Err(format!(
                    "unknown device `{value}`: use `host` or `cuda[:N]`"
                ))
            }
        };
        Ok(match Device::cuda_with_config(ordinal, config) {
            Ok(device) => DeviceArg::Cuda(device),
            Err(e) => DeviceArg::Unavailable(format!(
                "--device {value}: no usable GPU here ({e}); nothing measured"
            )),
        })
    }
}

/// The device of a largest-batch search in a budget of `budget_mib` MiB (weights included): on
/// a GPU (`on_gpu`, the device `value` names), an allocator whose memory limit is the budget; on
/// the host, a host device of that capacity. Both start from `VRAMGUARD_ALLOC_CONF`.
#[allow(dead_code)] // Shared: only the programs that search a batch size use it.
pub fn budget_device(
    value: Option<String>,
    on_gpu: bool,
    budget_mib: usize,
) -> Result<Device, Box<dyn std::error::Error>> {
    if !on_gpu {
        return Ok(super::devices::host_with_capacity(budget_mib << 20)?);
    }
    let limited = AllocatorConfig {
        memory_limit: Some(MemoryLimit::Bytes((budget_mib as u64) << 20)),
        ..super::devices::env_config()?
    };
    match DeviceArg::parse_with(value, limited)? {
        DeviceArg::Cuda(device) => Ok(device),
        _ => Err("the GPU went away between the two parts".into()),
    }
}

/// Waits for the work queued on a GPU device (a no-op on the host), so wall-clock times cover
/// the kernels and not only their launch.
#[allow(dead_code)] // Shared: only the programs that time kernels use it.
pub fn synchronize(device: &Device) -> Result<(), String> {
    // A build without the `cuda` feature has host devices only: nothing is queued.
    #[cfg(feature = "cuda")]
    if let Some(context) = device.cuda_context() {
        return context
            .default_stream()
            .synchronize()
            .map_err(|e| format!("cuStreamSynchronize failed: {e}"));
    }
    let _ = device;
    Ok(())
}
