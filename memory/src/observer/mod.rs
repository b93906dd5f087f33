//! The observer of every GPU allocation in the process: each allocation and free that any
//! library makes through the CUDA driver (or runtime) — candle's per tensor
//! (`cuMemAllocAsync`/`cuMemFreeAsync` through cudarc), cubecl's per page (burn's CUDA
//! backend), libtorch's per caching-allocator segment (`cudaMalloc`, or `cuMemCreate` with
//! expandable segments) — fed into vramguard's tools: [`MemoryStats`] per device with peaks and
//! a peak reset, batch scopes' accounting (the observer is a source of `crate::scope`'s one
//! accounting interface: each allocation belongs to the allocating thread's iteration, escapes
//! exact to the byte, by tag), the allocation log, the HTML timeline and a snapshot PyTorch's
//! `_memory_viz` reads, an out-of-memory report printed before the library's own error, a soft
//! `memory_limit`, and the largest-batch finder
//! ([`crate::memory::MaxBatchSearch::run_on_observer`]). Only with the `cupti` feature.
//!
//! ```no_run
//! use vramguard_memory::observer::Observer;
//!
//! let observer = Observer::start()?; // or Observer::start_or_warn()
//! // ... candle, burn or tch code on cuda:0 ...
//! let s = observer.stats(0);
//! println!("{} bytes live, peak {}", s.allocated_bytes, s.peak_allocated_bytes);
//! # Ok::<(), vramguard_memory::observer::ObserverError>(())
//! ```
//!
//! It owns the subscription to CUPTI and what the callbacks record; the figures' types, the
//! timeline page and the snapshot format are `crate::alloc`'s, the batch scopes' labels
//! `crate::scope`'s.
//!
//! # Mechanism
//!
//! CUPTI's callback API (NVIDIA's profiling interface, `libcupti`), through cudarc's `cupti`
//! bindings: one subscriber, with the allocating and freeing functions of the driver domain
//! (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`, `cuMemFree_v2`,
//! `cuMemAllocAsync`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync` and their per-thread-stream
//! forms, `cuMemCreate`, `cuMemRelease`, `cuMemMap`) and of the runtime domain (`cudaMalloc`,
//! `cudaMallocPitch`, `cudaMallocManaged`, `cudaFree`, `cudaMallocAsync`,
//! `cudaMallocFromPoolAsync`, `cudaFreeAsync`) enabled. CUPTI calls the callback on the calling
//! thread at entry and exit of each call, with the call's parameters and, at exit, its result,
//! so the observer sees the address, the bytes, the stream, the thread (and through it the
//! batch scope and tag), and a refused request before the caller does. Other mechanisms were
//! weighed: reading the driver pool's attributes (`crate::driver_pool`) gives totals for one
//! pool, not allocations; interposing `libcuda` with `LD_PRELOAD` misses libraries that resolve
//! driver symbols through `cuGetProcAddress` (the runtime does) and has to be set up before the
//! process starts; CUPTI's activity API reports allocations after the fact, in buffers, too
//! late to print anything before the library's error.
//!
//! What is counted: the bytes each call asked for (`cuMemAllocPitch`: pitch × rows), from the
//! call's success to its free's entry. Granularity follows the library: candle allocates each
//! tensor, cubecl pages of tensors, libtorch segments that its caching allocator carves up (so
//! libtorch's figures are its reserved memory, not its tensors). A pool's cached but unused
//! memory is the driver's, not an allocation, and is not counted (the out-of-memory report
//! reads it); `cuMemCreate` counts physical memory at creation and release (its address is that
//! of its first mapping). Allocations made before [`Observer::start`] are not seen, nor their
//! frees.
//!
//! # It fails cleanly
//!
//! - No `libcupti`: [`ObserverError::NoCupti`] says where to get it (the CUDA toolkit's
//!   `extras/CUPTI/lib64`, tried under `CUDA_HOME`/`CUDA_PATH`; NVIDIA's `nvidia-cuda-cupti-cu12`
//!   wheel). cudarc would panic; the library is probed first.
//! - CUPTI before 13.2 takes one subscriber: when a profiler (Nsight Systems, Nsight Compute)
//!   or another tool holds it, [`ObserverError::SubscriberTaken`];
//!   [`Observer::start_or_warn`] prints it as a one-line warning and the program runs on.
//! - A callback never unwinds into CUPTI (a panic is caught), never runs inside itself, and
//!   **never takes a lock that the allocating thread may hold**: the only locks it takes are
//!   the observer's own (the books' record shards and log, the call-site cache), and no thread
//!   holds one of them while calling the driver, the runtime, a user callback or anything that
//!   waits for another thread. A thread that is inside the driver (where the callback runs)
//!   therefore holds none of them, and a thread that holds one finishes its short section
//!   without waiting. The out-of-memory report calls the driver (`cuMemGetInfo`, the pool's
//!   attributes) only after the books' locks are released. (Call sites, when asked for, walk
//!   the stack through the `backtrace` crate, which serialises its walks with a lock of its
//!   own; no driver call is made while it is held either.)
//!
//! # Layout
//!
//! | file | owns |
//! | --- | --- |
//! | `calls.rs` | the subscribed callbacks and what their parameters say (`MemoryCall`) |
//! | `callback.rs` | the callback: records, frees, refused requests, the limit |
//! | `books.rs` | live allocations, per-device counters, the event log |
//! | `report.rs` | the out-of-memory and limit text |
//! | `call_sites.rs` | the Rust call site of an allocation |
//! | `library.rs` | finding `libcupti`, the subscription |
//! | `exit_report.rs` | the report written at exit (`VRAMGUARD_GPU_REPORT`), for tools such as `cargo vramguard measure --device cuda` |

mod books;
mod call_sites;
mod callback;
mod calls;
mod exit_report;
mod library;
mod report;

pub use books::ObservedEvent;
pub use exit_report::{report_at_exit, set_label_source, GPU_REPORT_ENV, REPORT_LOG_CAPACITY};

use crate::accounting::{IterationFigures, IterationStart, ScopeIteration};
use crate::alloc::{
    AllocOrigin, AllocatorConfig, BlockSnapshot, ConfigError, MemoryLimit, MemorySnapshot,
    MemoryStats, PoolKind, SegmentSnapshot, Trace, TraceLabel,
};
use books::books;
use cudarc::driver::result as driver;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard};

/// One GPU allocation the observer saw.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObservedAllocation {
    /// The device's ordinal (CUPTI's id of the calling thread's context).
    pub device: u32,
    /// The device address (for `cuMemCreate`, that of its first mapping; 0 until mapped).
    pub address: u64,
    /// Bytes asked for (`cuMemAllocPitch`: pitch × rows).
    pub bytes: u64,
    /// The stream of a stream-ordered allocation (the `CUstream` handle's value; 0 for the
    /// legacy default stream and for allocations that are not stream-ordered).
    pub stream: u64,
    /// The allocating thread (the kernel's thread id on Linux).
    pub thread: u64,
    /// The function called (`cuMemAllocAsync`, `cudaMalloc`, `cuMemCreate`, ...).
    pub api: &'static str,
    /// The allocating thread's label: batch-scope iteration and tags
    /// ([`crate::scope::tag`]).
    pub label: Option<TraceLabel>,
    /// The Rust call site, when [`ObserverOptions::call_sites`] asks for it (its `op` is the
    /// function called).
    pub origin: Option<AllocOrigin>,
    /// A number unique in the process, in allocation order.
    pub id: u64,
    /// The batch-scope iteration the allocation is attributed to (the allocating thread's
    /// innermost, while the observer is a source of the thread's scopes).
    #[serde(skip)]
    pub(crate) scope: Option<crate::accounting::ScopeIteration>,
}

/// Why the observer could not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ObserverError {
    /// No CUDA driver library.
    #[error("no CUDA driver found (libcuda.so): the observer watches the driver's allocations; install the NVIDIA driver")]
    NoDriver,
    /// No CUPTI library where it was looked for.
    #[error("CUPTI (libcupti.so) not found (looked at: {searched}); it ships with the CUDA toolkit in extras/CUPTI/lib64 (put that folder on LD_LIBRARY_PATH, or set CUDA_HOME to the toolkit) and on PyPI as NVIDIA's `nvidia-cuda-cupti-cu12` wheel (`pip install nvidia-cuda-cupti-cu12`, then put site-packages/nvidia/cuda_cupti/lib on LD_LIBRARY_PATH)")]
    NoCupti {
        /// Where it was looked for.
        searched: String,
    },
    /// Another subscriber holds CUPTI's callback API.
    #[error("vramguard's GPU observer is off: another CUPTI subscriber holds the callback API (a profiler such as Nsight Systems or Nsight Compute, or another tool in this process), and CUPTI before 13.2 allows one")]
    SubscriberTaken,
    /// A CUPTI call failed.
    #[error("vramguard's GPU observer could not start: {op} failed with {code}")]
    Cupti {
        /// The CUPTI function.
        op: &'static str,
        /// CUPTI's name of the result.
        code: String,
    },
    /// A driver call failed.
    #[error(
        "vramguard's GPU observer could not start: CUDA driver call {op} failed with {message}"
    )]
    Driver {
        /// The driver function.
        op: &'static str,
        /// The driver's error name.
        message: String,
    },
    /// `VRAMGUARD_ALLOC_CONF` is malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// How the observer records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObserverOptions {
    /// Record each allocation's Rust call site (a stack walk per allocation; off by default).
    pub call_sites: bool,
    /// Events the log keeps (`None`: `trace_capacity` from `VRAMGUARD_ALLOC_CONF`, 0 if unset).
    pub log_capacity: Option<usize>,
    /// The soft limit on each device's observed live bytes (`None`: `memory_limit` or
    /// `memory_fraction` from `VRAMGUARD_ALLOC_CONF`, if set).
    pub memory_limit: Option<MemoryLimit>,
}

impl ObserverOptions {
    /// The defaults: no call sites; the log and the limit from `VRAMGUARD_ALLOC_CONF`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets [`ObserverOptions::call_sites`].
    pub fn call_sites(mut self, on: bool) -> Self {
        self.call_sites = on;
        self
    }
    /// Sets [`ObserverOptions::log_capacity`].
    pub fn log_capacity(mut self, events: usize) -> Self {
        self.log_capacity = Some(events);
        self
    }
    /// Sets [`ObserverOptions::memory_limit`].
    pub fn memory_limit(mut self, limit: MemoryLimit) -> Self {
        self.memory_limit = Some(limit);
        self
    }
}

/// The running observer's subscription.
static RUNNING: Mutex<Option<library::Subscription>> = Mutex::new(None);

fn running() -> MutexGuard<'static, Option<library::Subscription>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's GPU observer, while it runs: see the [module documentation](self). A cheap
/// handle; every handle reads the same books. Observation goes on until [`Observer::stop`]
/// (dropping a handle does not stop it), and the figures stay readable after.
#[derive(Debug, Clone)]
pub struct Observer {
    _private: (),
}

impl Observer {
    /// Starts observing with the default options ([`ObserverOptions::new`]).
    pub fn start() -> Result<Observer, ObserverError> {
        Self::start_with(ObserverOptions::new())
    }

    /// Starts observing: loads CUPTI, subscribes, and counts from zero; the batch scopes of the
    /// calling thread account with it ([`Observer::account_scopes_on_this_thread`]). When the
    /// observer already runs, returns a handle to it (its options unchanged), and the calling
    /// thread's scopes account with it.
    pub fn start_with(options: ObserverOptions) -> Result<Observer, ObserverError> {
        Self::start_observing(options, true)
    }

    /// [`Observer::start_with`]; without `driver_calls`, no CUDA driver call is made (no
    /// `cuInit`, no soft limit, which needs the devices' count): for the driver's injection
    /// hook, called while the driver is inside `cuInit` ([`report_at_exit`]).
    fn start_observing(
        options: ObserverOptions,
        driver_calls: bool,
    ) -> Result<Observer, ObserverError> {
        let mut running = running();
        if running.is_some() {
            let observer = Observer { _private: () };
            observer.account_scopes_on_this_thread();
            return Ok(observer);
        }
        if !crate::driver::library_present(crate::driver::CudaLibrary::Driver) {
            return Err(ObserverError::NoDriver);
        }
        library::cupti_present()?;
        let config = crate::alloc::env_config()?;
        if driver_calls {
            driver::init().map_err(|e| ObserverError::Driver {
                op: "cuInit",
                message: crate::driver::error_name(e),
            })?;
        }
        let books = books();
        books.reset();
        callback::GENERATION.fetch_add(1, Relaxed);
        if let Some(limit) = options.memory_limit.or(config.memory_limit) {
            if driver_calls {
                set_limits(limit)?;
            }
        }
        books.set_log_capacity(options.log_capacity.unwrap_or(config.trace_capacity));
        if options.call_sites {
            call_sites::note_libraries();
        }
        callback::CALL_SITES.store(options.call_sites, Relaxed);
        *running = Some(library::subscribe()?);
        let observer = Observer { _private: () };
        observer.account_scopes_on_this_thread();
        Ok(observer)
    }

    /// [`Observer::start`], or `None` after one line on stderr saying why not (a profiler
    /// holds CUPTI, no `libcupti`, ...): for programs that run on either way.
    pub fn start_or_warn() -> Option<Observer> {
        match Self::start() {
            Ok(observer) => Some(observer),
            Err(e) => {
                crate::diagnostics::warn(crate::diagnostics::WarningOutput::Auto, &e.to_string());
                None
            }
        }
    }

    /// The running observer, if one was started and not stopped.
    pub fn current() -> Option<Observer> {
        running().is_some().then_some(Observer { _private: () })
    }

    /// Makes the batch scopes entered on this thread account with the observer
    /// ([`crate::scope::account_with`]: in place of another source set there, such as a driver
    /// pool's whole-pool figures): each allocation the thread makes while an iteration is its
    /// innermost scope is that iteration's, exactly, and its escapes are grouped by tag.
    /// [`Observer::start`] does it for the thread that starts the observer.
    pub fn account_scopes_on_this_thread(&self) {
        crate::scope::account_with(Some(std::sync::Arc::new(self.clone())));
    }

    /// Stops observing (unsubscribes from CUPTI). The figures stay readable.
    pub fn stop(self) {
        if let Some(subscription) = running().take() {
            subscription.end();
        }
    }

    /// The figures of device `ordinal`: `allocated_bytes` the observed live bytes,
    /// `peak_allocated_bytes` their peak since the start or [`Observer::reset_peak_stats`],
    /// `num_allocs`/`num_frees` the calls, `num_ooms` the requests the driver refused for lack
    /// of memory, `active_blocks` the live allocations. The observer sees allocations, not
    /// caches: reserved and active bytes equal allocated ones, the rest is 0.
    pub fn stats(&self, ordinal: usize) -> MemoryStats {
        books().stats(ordinal_u32(ordinal))
    }

    /// Starts a new peak window of device `ordinal` at its live figures now.
    pub fn reset_peak_stats(&self, ordinal: usize) {
        books().reset_peak(ordinal_u32(ordinal))
    }

    /// The live allocations of device `ordinal`, largest first.
    pub fn live_allocations(&self, ordinal: usize) -> Vec<ObservedAllocation> {
        books().live(ordinal_u32(ordinal))
    }

    /// Keeps the last `events` allocations, frees and refused requests of every device from
    /// now on (0 stops, and forgets them); `trace_capacity` in `VRAMGUARD_ALLOC_CONF` sets it
    /// at the start.
    pub fn record_log(&self, events: usize) {
        books().set_log_capacity(events)
    }

    /// The log (the "CUDA allocation log"), oldest event first.
    pub fn log(&self) -> Vec<ObservedEvent> {
        books().events().0
    }

    /// The log of device `ordinal` as an allocator trace (events with address, size, label
    /// and call site; allocated and reserved bytes are the observed live bytes).
    pub fn trace(&self, ordinal: usize) -> Trace {
        books().trace(ordinal_u32(ordinal))
    }

    /// Device `ordinal`'s live allocations as a snapshot: each allocation a segment of its own
    /// holding one block (the driver gives each allocation its own memory; how a library
    /// carves it up is the library's).
    pub fn snapshot(&self, ordinal: usize) -> MemorySnapshot {
        let live = self.live_allocations(ordinal);
        let mut segments: Vec<SegmentSnapshot> = live
            .into_iter()
            .map(|a| SegmentSnapshot {
                addr: a.address,
                size: a.bytes,
                pool: PoolKind::Large,
                expandable: false,
                blocks: vec![BlockSnapshot {
                    addr: a.address,
                    size: a.bytes,
                    allocated: true,
                    requested: a.bytes,
                    id: a.id,
                    origin: a.origin,
                }],
            })
            .collect();
        segments.sort_by_key(|s| s.addr);
        MemorySnapshot {
            device: format!("cuda:{ordinal} (every library, observed through CUPTI)"),
            expandable_segments: false,
            stats: self.stats(ordinal),
            segments,
        }
    }

    /// The HTML timeline of device `ordinal`'s log (the same page as
    /// [`crate::memory::html_report`]): observed live bytes over time, each allocation's
    /// lifetime with its call site on hover, batch-scope iterations and tags as bands, refused
    /// requests as OOM markers. Start the log first ([`Observer::record_log`]).
    pub fn html_report(&self, ordinal: usize, title: &str) -> String {
        let mut snapshot = self.snapshot(ordinal);
        // The page's segment map shows a caching allocator's segments; here each allocation is
        // its own, already drawn on the timeline.
        snapshot.segments.clear();
        crate::alloc::html_report(title, &self.trace(ordinal), &snapshot)
    }

    /// Writes device `ordinal`'s live allocations and log to `path` in PyTorch's snapshot
    /// format (the pickle `torch.cuda.memory._dump_snapshot` writes): drop it on
    /// <https://pytorch.org/memory_viz> or read it with `torch.cuda._memory_viz`.
    pub fn dump_snapshot(
        &self,
        ordinal: usize,
        path: impl AsRef<std::path::Path>,
    ) -> std::io::Result<()> {
        let pickle = crate::alloc::snapshot_pickle(
            &self.snapshot(ordinal),
            &self.trace(ordinal),
            ordinal_u32(ordinal),
            None,
            &AllocatorConfig::default(),
        );
        std::fs::write(path, pickle)
    }

    /// Sets the soft limit on device `ordinal`'s observed live bytes (`None`: none), replacing
    /// `memory_limit` from `VRAMGUARD_ALLOC_CONF`. An allocation that takes the live bytes
    /// over it goes ahead (the driver cannot be told to refuse it) and prints the
    /// out-of-memory report's text once; it prints again only after the live bytes fell back.
    pub fn set_memory_limit(&self, ordinal: usize, limit: Option<u64>) {
        books().set_limit(ordinal_u32(ordinal), limit)
    }

    /// The soft limit of device `ordinal`, if one is set.
    pub fn memory_limit(&self, ordinal: usize) -> Option<u64> {
        books().limit(ordinal_u32(ordinal))
    }
}

/// A source of batch-scope accounting (see `crate::accounting`): attributed, exact to the byte,
/// over every device. The iteration is the allocating thread's (`callback::attribution`).
impl crate::scope::ScopeAccounting for Observer {
    fn begin_iteration(&self, iteration: ScopeIteration) -> Option<IterationStart> {
        running().as_ref()?;
        let start = books().begin_iteration(iteration, callback::attribution());
        callback::attribute(Some(iteration));
        Some(start)
    }

    fn end_iteration(&self, start: &IterationStart) -> Option<IterationFigures> {
        callback::attribute(start.previous);
        Some(books().end_iteration(start))
    }
}

fn ordinal_u32(ordinal: usize) -> u32 {
    u32::try_from(ordinal).unwrap_or(u32::MAX)
}

/// Sets `limit` on every device (a fraction of each device's memory).
fn set_limits(limit: MemoryLimit) -> Result<(), ObserverError> {
    let driver_error = |op| {
        move |e| ObserverError::Driver {
            op,
            message: crate::driver::error_name(e),
        }
    };
    let count = driver::device::get_count().map_err(driver_error("cuDeviceGetCount"))?;
    for ordinal in 0..count.max(0) {
        let bytes = match limit {
            MemoryLimit::Bytes(bytes) => bytes,
            MemoryLimit::Fraction(fraction) => {
                let dev = driver::device::get(ordinal).map_err(driver_error("cuDeviceGet"))?;
                // SAFETY: a device handle the driver just returned.
                let total = unsafe { driver::device::total_mem(dev) }
                    .map_err(driver_error("cuDeviceTotalMem"))?;
                (total as f64 * fraction) as u64
            }
        };
        books().set_limit(ordinal as u32, Some(bytes));
    }
    Ok(())
}
