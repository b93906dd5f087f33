//! Per-device memory tools: statistics, peaks, cache release.

pub use crate::alloc::MemoryStats;
use crate::Device;

/// Current statistics of `device`'s allocator.
pub fn stats(device: &Device) -> MemoryStats {
    device.allocator().stats()
}

/// Resets peak statistics of `device` to the current values.
pub fn reset_peak_stats(device: &Device) {
    device.allocator().reset_peak_stats()
}

/// Returns cached, unused segments of `device` to the backend; returns the bytes released.
///
/// This frees nothing that is still referenced: drop the values first.
pub fn empty_cache(device: &Device) -> u64 {
    device.allocator().empty_cache()
}
