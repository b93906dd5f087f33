//! The out-of-memory error: what the allocator knew when it gave up ([`OutOfMemory`]), why
//! ([`OomCause`], judged by [`super::policy::oom_cause`]), and the text that says which setting
//! helps. It owns no allocator state; the allocator fills it in.

use super::AllocOrigin;
use super::BackendFailure;
use std::fmt;

/// Live allocations an [`OutOfMemory`] lists, largest first.
pub const OOM_LARGEST_LIVE: usize = 5;

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum OomCause {
    /// Enough bytes are cached free, but no free block is large enough.
    Fragmentation,
    /// The expandable segment would hold the request by mapping pages at its end, and the limit
    /// and the device have room for them, but its reserved address range is used up: unmapped
    /// holes between live blocks keep their addresses. A fixed segment of the whole request did
    /// not fit either.
    AddressRangeUsedUp,
    /// The configured memory limit would be exceeded.
    LimitReached,
    /// The device itself has no room left.
    DeviceFull,
    /// A backend call failed for another reason than a shortage of memory (for CUDA, often an
    /// error left by an earlier kernel, such as `CUDA_ERROR_ILLEGAL_ADDRESS`):
    /// [`OomContext::backend_error`] (in [`OutOfMemory::context`]) names the call and the
    /// driver's error.
    BackendFailed,
}

/// The allocation failed after every remedy was tried (releasing cached segments, pressure
/// handlers). Its message says why and which setting helps. Despite the name, the cause may
/// be a backend failure that is not a shortage ([`OomCause::BackendFailed`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OutOfMemory {
    /// Device name.
    pub device: Box<str>,
    /// Bytes requested.
    pub requested: usize,
    /// The request rounded to a block size.
    pub rounded: usize,
    /// Device capacity, if known.
    pub capacity: Option<u64>,
    /// Configured memory limit, if any.
    pub limit: Option<u64>,
    /// Bytes allocated (live blocks) at the failure.
    pub allocated: u64,
    /// Bytes reserved from the backend at the failure.
    pub reserved: u64,
    /// Reserved bytes in free cached blocks of the request's pool (requests up to 1 MiB and
    /// larger ones are served from separate pools, so the other pool's free bytes cannot help).
    pub cached_free: u64,
    /// The largest cached free block this request could use (same pool — requests up to 1 MiB
    /// and larger ones are served from separate pools — and allowed by `max_split_size`).
    pub largest_free_block: u64,
    /// Bytes that could still be reserved beyond `reserved`: what the device has free, capped
    /// by the memory limit (0 when neither is known: an unbounded backend without a limit).
    pub device_free: u64,
    /// Why it failed.
    pub cause: OomCause,
    /// The allocator's kind of large-pool segments (so the advice for fragmentation suggests
    /// expandable segments only where they are off by choice).
    pub segments: SegmentMode,
    /// Where the allocator's settings came from (so the advice names the environment variable
    /// or the builder method that changes them).
    pub config_source: ConfigSource,
    /// What the error knows beyond the figures: what holds the memory, and the backend's
    /// failure when that was the cause.
    pub context: Box<OomContext>,
}

/// The part of an [`OutOfMemory`] beyond its figures (boxed, so that the error, returned by
/// every allocating function, stays within 128 bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OomContext {
    /// The largest live allocations ([`OOM_LARGEST_LIVE`] at most), largest first: what holds
    /// the memory, and where each was made.
    pub largest_live: Vec<LiveAllocation>,
    /// The backend call that failed while serving the request, when the cause is
    /// [`OomCause::BackendFailed`].
    pub backend_error: Option<BackendFailure>,
}

/// One live allocation listed by an [`OutOfMemory`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LiveAllocation {
    /// Block size.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// Where it was made.
    pub origin: Option<AllocOrigin>,
}

/// Where an allocator's settings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigSource {
    /// `VRAMGUARD_ALLOC_CONF` (the process-wide devices, `Device::Host` and `Device::cuda`).
    Environment,
    /// An [`AllocatorConfig`](super::AllocatorConfig) built in code (or the defaults of a
    /// device made with its own allocator).
    Code,
}

impl ConfigSource {
    /// How to set `key` (as in `VRAMGUARD_ALLOC_CONF`) whose builder method is `method`.
    fn setting(self, key: &str, method: &str) -> String {
        match self {
            ConfigSource::Environment => format!("`{key}` in VRAMGUARD_ALLOC_CONF"),
            ConfigSource::Code => format!("AllocatorConfig::{method}"),
        }
    }
}

/// Which segments an allocator's large pool uses, and, for fixed ones, why
/// ([`CachingAllocator::segment_mode`](super::CachingAllocator::segment_mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentMode {
    /// One expandable segment (the default wherever the backend can map pages).
    Expandable,
    /// Fixed segments because `expandable_segments:false` is set.
    FixedByConfig,
    /// Fixed segments because the backend cannot provide expandable ones: no page mapping,
    /// or (under `auto`) a failed self-test or address-space reservation
    /// ([`CachingAllocator::fixed_segments_reason`](super::CachingAllocator::fixed_segments_reason) says which).
    FixedUnavailable,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (OomCause::BackendFailed, Some(failure)) = (self.cause, &self.context.backend_error)
        {
            return write!(
                f,
                "allocation of {} ({} bytes) on {} failed, not for lack of memory: {failure} \
                 (allocated {}, reserved {}). For CUDA this error is often left by an earlier \
                 kernel (an out-of-bounds access) and makes the device unusable for this \
                 process: run with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer to find it.",
                human_bytes(self.rounded as u64),
                self.requested,
                self.device,
                human_bytes(self.allocated),
                human_bytes(self.reserved),
            );
        }
        write!(
            f,
            "out of memory on {}: cannot allocate {} ({} bytes); ",
            self.device,
            human_bytes(self.rounded as u64),
            self.requested
        )?;
        match self.cause {
            OomCause::Fragmentation => {
                write!(
                    f,
                    "fragmentation: {} cached free",
                    human_bytes(self.cached_free)
                )?;
                if self.device_free > 0 {
                    write!(
                        f,
                        " (plus {} the device can still provide)",
                        human_bytes(self.device_free)
                    )?;
                }
                write!(
                    f,
                    ", but the largest free block is {}",
                    human_bytes(self.largest_free_block)
                )?
            }
            OomCause::AddressRangeUsedUp => f.write_str(
                "the expandable segment's address range is used up: unmapped holes between \
                 live blocks keep their addresses, so it cannot grow at its end, and a fixed \
                 segment of the whole request does not fit",
            )?,
            OomCause::LimitReached => write!(
                f,
                "memory limit reached: {} reserved of a {} limit",
                human_bytes(self.reserved),
                human_bytes(self.limit.unwrap_or(0))
            )?,
            OomCause::DeviceFull | OomCause::BackendFailed => write!(f, "the device is full")?,
        }
        write!(
            f,
            " (allocated {}, reserved {}, cached free {}, largest free block {}",
            human_bytes(self.allocated),
            human_bytes(self.reserved),
            human_bytes(self.cached_free),
            human_bytes(self.largest_free_block)
        )?;
        if let Some(c) = self.capacity {
            write!(f, ", capacity {}", human_bytes(c))?;
        }
        if let Some(l) = self.limit {
            write!(f, ", limit {}", human_bytes(l))?;
        }
        if self.device_free > 0 {
            write!(f, ", device free {}", human_bytes(self.device_free))?;
        }
        f.write_str("). ")?;
        match self.cause {
            OomCause::Fragmentation if self.segments == SegmentMode::Expandable => write!(
                f,
                "Free memory is split into holes between live blocks (expandable segments are \
                 already on: they grow and return only the free end of the mapped range, and \
                 cannot move live blocks): preallocate the largest buffer once (a Workspace, \
                 memory::reserve, {}), allocate long-lived buffers before short-lived ones, \
                 bucket variable shapes, or call memory::empty_cache between phases.",
                self.config_source
                    .setting("preallocate", "with_preallocate"),
            )?,
            OomCause::Fragmentation if self.segments == SegmentMode::FixedByConfig => write!(
                f,
                "Free memory is split into pieces, and this allocator's settings turn \
                 expandable segments off: turn them on with {} (`auto`, the default, uses them \
                 wherever the device can map pages), preallocate the largest buffer once (a \
                 Workspace, memory::reserve, {}), bucket variable shapes, set {} so large blocks \
                 stay whole, or call memory::empty_cache between phases.",
                self.config_source
                    .setting("expandable_segments:true", "with_expandable_segments(true)"),
                self.config_source
                    .setting("preallocate", "with_preallocate"),
                self.config_source
                    .setting("max_split_size_mb", "with_max_split_size"),
            )?,
            OomCause::Fragmentation => write!(
                f,
                "Free memory is split into pieces (and this device cannot use expandable \
                 segments: see the allocator's fixed_segments_reason): preallocate the largest \
                 buffer once (a Workspace, memory::reserve, {}), bucket variable shapes, set \
                 {} so large blocks stay whole, or call memory::empty_cache between phases.",
                self.config_source
                    .setting("preallocate", "with_preallocate"),
                self.config_source
                    .setting("max_split_size_mb", "with_max_split_size"),
            )?,
            OomCause::AddressRangeUsedUp => write!(
                f,
                "Free the long-lived blocks that sit between holes (allocate long-lived buffers \
                 before short-lived ones, so that they share the start of the range), or \
                 preallocate the largest buffer once (a Workspace, memory::reserve, {}).",
                self.config_source
                    .setting("preallocate", "with_preallocate"),
            )?,
            OomCause::LimitReached => write!(
                f,
                "Drop tensors that are no longer needed, lower the batch size, or raise the \
                 limit ({} or {}).",
                self.config_source
                    .setting("memory_limit", "with_memory_limit"),
                self.config_source
                    .setting("memory_fraction", "with_memory_fraction"),
            )?,
            OomCause::DeviceFull | OomCause::BackendFailed => f.write_str(
                "Drop tensors that are no longer needed (the cache was already released), \
                 lower the batch size, or free memory held by other processes.",
            )?,
        }
        if !self.context.largest_live.is_empty() {
            f.write_str("\nLargest live allocations (what holds the memory):")?;
            for live in self.context.largest_live.iter() {
                write!(f, "\n  {:>10}  ", human_bytes(live.size))?;
                match &live.origin {
                    Some(origin) => write!(f, "{origin}")?,
                    None => f.write_str("(origin unknown)")?,
                }
            }
        }
        Ok(())
    }
}

impl std::error::Error for OutOfMemory {}

/// `1.5 GiB`, `12.0 MiB`, `512 B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if bytes >= unit {
            return format!("{:.1} {name}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes} B")
}
