//! The tracking allocator's settings (read from `VRAMGUARD_ALLOC_CONF` at the first
//! allocation) and the report printed when the soft memory limit refuses an allocation.

use super::records;
use super::tracking::{CallMode, ModeGuard};
use crate::alloc::{human_bytes, AllocatorConfig, MemoryLimit, TraceEventKind, TraceLabel};
use crate::alloc::{ENV_VAR, OOM_LARGEST_LIVE};
use std::fmt;

/// What the tracking allocator takes from `VRAMGUARD_ALLOC_CONF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settings {
    /// `heap_tracking` (`false`: a plain pass-through).
    pub(super) tracking: bool,
    /// `memory_limit` in bytes (`memory_fraction` of the machine's physical memory).
    pub(super) limit: Option<u64>,
    /// `trace_capacity`.
    pub(super) trace_capacity: usize,
}

/// Reads `VRAMGUARD_ALLOC_CONF` now (not through the devices' once-parsed copy: this runs
/// inside the process's first allocation, which may be made while that copy is being built).
/// A bad value is reported once for all of vramguard and gives the defaults.
pub(super) fn read_settings() -> Settings {
    let config = AllocatorConfig::from_env().unwrap_or_else(|e| {
        crate::alloc::report_env_error_once(&e);
        AllocatorConfig::default()
    });
    let limit = match config.memory_limit {
        None => None,
        Some(MemoryLimit::Bytes(bytes)) => Some(bytes),
        Some(MemoryLimit::Fraction(fraction)) => match physical_memory() {
            Some(total) => Some((total as f64 * fraction) as u64),
            None => {
                crate::diagnostics::error(&format!(
                    "{ENV_VAR}: `memory_fraction` needs the machine's physical memory, which \
                     this platform does not report; the heap has no limit (use `memory_limit`)"
                ));
                None
            }
        },
    };
    Settings {
        tracking: config.heap_tracking,
        limit,
        trace_capacity: config.trace_capacity,
    }
}

/// Bytes of physical memory, where the platform says.
fn physical_memory() -> Option<u64> {
    #[cfg(unix)]
    {
        // SAFETY: `sysconf` only reads system configuration values.
        let (pages, page_size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages > 0 && page_size > 0 {
            return Some(pages as u64 * page_size as u64);
        }
    }
    None
}

/// The soft limit refused an allocation: the figures and what holds the memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LimitExceeded {
    requested: u64,
    live: u64,
    limit: u64,
    /// The largest recorded live allocations (those of 64 KiB and more, and those of batch
    /// scopes), largest first.
    largest_live: Vec<(u64, Option<TraceLabel>)>,
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of memory on the heap (vramguard::TrackingAllocator): cannot allocate {} ({} \
             bytes); memory limit reached: {} live of a {} limit. Drop tensors that are no \
             longer needed (#[vramguard::inference] frees each local at its last use), lower \
             the batch size (vramguard::heap::max_batch finds the largest that fits), or raise \
             `memory_limit` in {ENV_VAR} (vramguard::heap::set_memory_limit in code).",
            human_bytes(self.requested),
            self.requested,
            human_bytes(self.live),
            human_bytes(self.limit),
        )?;
        if self.largest_live.is_empty() {
            return f.write_str(
                "\nNo live allocation of 64 KiB or more is recorded: the memory is held in \
                 small allocations.",
            );
        }
        f.write_str("\nLargest live allocations (what holds the memory):")?;
        for (bytes, label) in &self.largest_live {
            write!(f, "\n  {:>10}  ", human_bytes(*bytes))?;
            match label {
                Some(label) => write!(f, "made in {label}")?,
                None => f.write_str("made outside any batch scope or tag")?,
            }
        }
        Ok(())
    }
}

/// Prints the report for a refused allocation of `requested` bytes with `live` bytes live (and
/// adds an out-of-memory event to the trace). Runs inside the allocator: in
/// [`CallMode::Internal`], so what it allocates passes through.
#[cold]
pub(super) fn report_limit(requested: u64, live: u64) {
    let _internal = ModeGuard::enter(CallMode::Internal);
    let report = LimitExceeded {
        requested,
        live,
        limit: super::tracking::LIMIT.load(std::sync::atomic::Ordering::Relaxed),
        largest_live: records::largest_live(OOM_LARGEST_LIVE),
    };
    if records::tracing() {
        records::push_event(
            TraceEventKind::Oom,
            0,
            requested as usize,
            crate::alloc::trace::thread_label(),
        );
    }
    eprintln!("error: vramguard: {report}");
}
