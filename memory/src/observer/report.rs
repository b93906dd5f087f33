//! The text printed when a driver allocation fails with out-of-memory, or when the observed
//! live bytes of a device cross its soft `memory_limit`: what was asked, what the device and
//! its driver pool hold, the largest live allocations by label and one by one, and what to
//! change. It owns the text and the gathering of its figures; the callback decides when.
//!
//! The report is written to stderr from the allocation's exit callback, so it comes before the
//! library that called the driver has seen the error, let alone wrapped it in its own.

use super::books::books;
use super::ObservedAllocation;
use crate::alloc::{human_bytes, AllocOrigin, TraceLabel, ENV_VAR};
use cudarc::driver::{result, sys};
use std::fmt;

/// Live allocations listed, one by one and by label.
const LISTED: usize = 8;

/// What made the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// The driver refused the allocation: `CUDA_ERROR_OUT_OF_MEMORY` (or the runtime's
    /// `cudaErrorMemoryAllocation`).
    OutOfMemory,
    /// The allocation went ahead and took the observed live bytes over `limit`.
    LimitCrossed {
        /// The soft limit.
        limit: u64,
    },
}

/// The request that made the report.
#[derive(Debug, Clone)]
pub(crate) struct ReportedRequest {
    pub(crate) device: u32,
    /// The API called (`cuMemAllocAsync`).
    pub(crate) api: &'static str,
    pub(crate) bytes: u64,
    pub(crate) thread: u64,
    pub(crate) label: Option<TraceLabel>,
    pub(crate) origin: Option<AllocOrigin>,
}

/// Everything the report says.
#[derive(Debug, Clone)]
pub(crate) struct MemoryReport {
    pub(crate) trigger: Trigger,
    pub(crate) request: ReportedRequest,
    /// The device's observed live bytes, allocations and peak (after the allocation, for a
    /// crossed limit).
    pub(crate) live: u64,
    pub(crate) live_count: u64,
    pub(crate) peak: u64,
    /// `cuMemGetInfo`: free and total bytes of the device.
    pub(crate) device_memory: Option<(u64, u64)>,
    /// The device's default memory pool: reserved and used bytes.
    pub(crate) pool: Option<(u64, u64)>,
    /// The largest live allocations, largest first.
    pub(crate) largest: Vec<ObservedAllocation>,
    /// Live bytes and allocations per label, largest first (all labels).
    pub(crate) by_label: Vec<super::books::LabelTotal>,
}

impl MemoryReport {
    /// Gathers the figures for `request` (in the allocating thread's callback, with its
    /// context current): the books, then the driver's figures — no lock is held across those
    /// calls.
    pub(crate) fn gather(trigger: Trigger, request: ReportedRequest) -> MemoryReport {
        let books = books();
        let stats = books.stats(request.device);
        let (largest, by_label) = books.largest(request.device, LISTED);
        MemoryReport {
            trigger,
            live: stats.allocated_bytes,
            live_count: stats.active_blocks,
            peak: stats.peak_allocated_bytes,
            device_memory: result::mem_get_info()
                .ok()
                .map(|(free, total)| (free as u64, total as u64)),
            pool: default_pool_figures(request.device),
            largest,
            by_label,
            request,
        }
    }

    /// Prints the report on stderr (always: it explains an error the program is about to see).
    pub(crate) fn print(&self) {
        eprintln!(
            "{}: vramguard: {self}",
            match self.trigger {
                Trigger::OutOfMemory => "error",
                Trigger::LimitCrossed { .. } => "warning",
            }
        );
    }

    /// The lines of "what to change", most specific first.
    fn advice(&self) -> Vec<String> {
        let mut advice = Vec::new();
        if let Some((reserved, used)) = self.pool {
            let cached = reserved.saturating_sub(used);
            if cached > 0 {
                advice.push(format!(
                    "the driver's memory pool holds {} cached but unused, which only its own \
                     stream-ordered allocations can take: trim it before other libraries \
                     allocate (vramguard::driver_pool::DriverPool::empty_cache, or \
                     cuMemPoolTrimTo), or lower its release threshold",
                    human_bytes(cached)
                ));
            }
        }
        if let Some((scope, now)) = self
            .request
            .label
            .as_ref()
            .and_then(TraceLabel::batch_scope)
        {
            let older: u64 = self
                .by_label
                .iter()
                .filter(|(label, _, _)| {
                    label
                        .as_ref()
                        .and_then(TraceLabel::batch_scope)
                        .is_some_and(|(s, i)| s == scope && i < now)
                })
                .map(|(_, bytes, _)| bytes)
                .sum();
            if older > 0 {
                advice.push(format!(
                    "{} of earlier iterations of batch scope `{scope}` are still alive: \
                     something computed in the loop is kept across iterations (a history Vec, a \
                     running total that keeps its graph); #[vramguard::batch_scope] reports it",
                    human_bytes(older)
                ));
            }
        }
        if let Some((free, total)) = self.device_memory {
            if self.trigger == Trigger::OutOfMemory && self.request.bytes >= total {
                advice.push(format!(
                    "the request alone ({}) is as large as the whole device ({}): a size in the \
                     program (batch, sequence length, a shape computed wrong) is off",
                    human_bytes(self.request.bytes),
                    human_bytes(total)
                ));
            }
            let held = total.saturating_sub(free);
            let unseen = held.saturating_sub(self.live);
            if unseen > self.request.bytes {
                advice.push(format!(
                    "the device has {} in use, of which this observer saw {} allocated: the rest \
                     is the CUDA context and libraries' workspaces, other processes on this GPU, \
                     or memory allocated before the observer started",
                    human_bytes(held),
                    human_bytes(self.live)
                ));
            }
        }
        advice.push(
            "free tensors at their last use (#[vramguard::inference] and #[vramguard::batch_scope] \
             drop each local right after it), or lower the batch size \
             (vramguard::memory::MaxBatchSearch::run_on_observer finds the largest that fits)"
                .to_string(),
        );
        if let Trigger::LimitCrossed { .. } = self.trigger {
            advice.push(format!(
                "or raise `memory_limit` in {ENV_VAR} (Observer::set_memory_limit in code)"
            ));
        }
        advice
    }
}

/// Reserved and used bytes of `device`'s default memory pool (`None` where the device has no
/// pools or the driver does not say).
fn default_pool_figures(device: u32) -> Option<(u64, u64)> {
    use sys::CUmemPool_attribute as A;
    let dev = result::device::get(device as i32).ok()?;
    // SAFETY: `dev` is a device handle the driver just returned.
    let pool = unsafe { result::device::get_default_mem_pool(dev) }.ok()?;
    let read = |attr: A| -> Option<u64> {
        let mut value = 0u64;
        // SAFETY: both attributes read here are `cuuint64_t`; `value` is one.
        unsafe { result::mem_pool::get_attribute(pool, attr, (&mut value as *mut u64).cast()) }
            .ok()?;
        Some(value)
    };
    Some((
        read(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
        read(A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
    ))
}

/// `made in LABEL at FILE:LINE`, or what is known of it.
fn provenance(label: &Option<TraceLabel>, origin: &Option<AllocOrigin>) -> String {
    let mut text = match label {
        Some(label) => format!("made in {label}"),
        None => "made outside any batch scope or tag".to_string(),
    };
    if let Some(origin) = origin {
        text.push_str(&format!(" at {}", origin.source_line()));
    }
    text
}

impl fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.request;
        match self.trigger {
            Trigger::OutOfMemory => write!(
                f,
                "out of memory on cuda:{}: {} of {} ({} bytes) failed with \
                 CUDA_ERROR_OUT_OF_MEMORY on thread {}, {}; the library's own error follows",
                r.device,
                r.api,
                human_bytes(r.bytes),
                r.bytes,
                r.thread,
                provenance(&r.label, &r.origin),
            )?,
            Trigger::LimitCrossed { limit } => write!(
                f,
                "memory limit crossed on cuda:{}: {} of {} ({} bytes) on thread {}, {}, took \
                 the observed live bytes to {}, over the memory_limit of {} ({ENV_VAR}); the \
                 driver cannot be told to refuse it, so it went ahead",
                r.device,
                r.api,
                human_bytes(r.bytes),
                r.bytes,
                r.thread,
                provenance(&r.label, &r.origin),
                human_bytes(self.live),
                human_bytes(limit),
            )?,
        }
        match self.device_memory {
            Some((free, total)) => write!(
                f,
                "\n  device memory (cuMemGetInfo): {} free of {}",
                human_bytes(free),
                human_bytes(total)
            )?,
            None => f.write_str("\n  device memory (cuMemGetInfo): not available")?,
        }
        match self.pool {
            Some((reserved, used)) => write!(
                f,
                "\n  driver pool (the device's default memory pool): {} reserved, {} used, {} \
                 cached unused",
                human_bytes(reserved),
                human_bytes(used),
                human_bytes(reserved.saturating_sub(used))
            )?,
            None => f.write_str("\n  driver pool: the device reports no memory pool")?,
        }
        write!(
            f,
            "\n  seen by vramguard's observer: {} live in {} allocations (peak {})",
            human_bytes(self.live),
            self.live_count,
            human_bytes(self.peak)
        )?;
        if !self.by_label.is_empty() {
            f.write_str("\nLargest live allocations by label:")?;
            for (label, bytes, count) in self.by_label.iter().take(LISTED) {
                let label = label
                    .as_ref()
                    .map_or_else(|| "(no batch scope or tag)".to_string(), |l| l.to_string());
                write!(
                    f,
                    "\n  {:>10} in {count:>5} allocations  {label}",
                    human_bytes(*bytes)
                )?;
            }
            if self.by_label.len() > LISTED {
                write!(f, "\n  ({} more labels)", self.by_label.len() - LISTED)?;
            }
            f.write_str("\nLargest live allocations:")?;
            for a in &self.largest {
                write!(
                    f,
                    "\n  {:>10}  {} at {:#x}, stream {:#x}, thread {}, {}",
                    human_bytes(a.bytes),
                    a.api,
                    a.address,
                    a.stream,
                    a.thread,
                    provenance(&a.label, &a.origin)
                )?;
            }
        }
        f.write_str("\nWhat to change:")?;
        for line in self.advice() {
            write!(f, "\n  - {line}")?;
        }
        Ok(())
    }
}
