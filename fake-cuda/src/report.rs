//! The exit report: one line on stderr with what the process left allocated (device memory,
//! physical pages, reservations, pool memory, streams, events, modules, cuBLAS handles) and
//! what ran (kernels, faults, injected failures). With `FAKE_CUDA_STRICT=1` a leak makes the
//! process exit with status 3.

use crate::device_memory::granules;
use crate::pool::ChunkState;
use crate::state::{existing_driver, Driver, Region};

/// Registers the report with `atexit` (once, at `cuInit`).
pub fn register() {
    extern "C" fn at_exit() {
        report();
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain function; the library is never unloaded (cudarc keeps it).
    ONCE.call_once(|| unsafe {
        libc::atexit(at_exit);
    });
}

/// What is left at exit.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leaks {
    /// `cuMemAlloc` allocations not freed, and their bytes.
    pub allocations: (usize, usize),
    /// Physical allocations (`cuMemCreate`) not released or still mapped, and their bytes.
    pub pages: (usize, usize),
    /// Address reservations not freed.
    pub reservations: usize,
    /// Pool allocations not freed, and their bytes.
    pub pool_allocations: (usize, usize),
    /// Streams not destroyed.
    pub streams: usize,
    /// Events not destroyed.
    pub events: usize,
    /// Modules not unloaded.
    pub modules: usize,
    /// cuBLAS handles not destroyed.
    pub blas_handles: usize,
    /// Page-locked host allocations not freed.
    pub host: usize,
}

impl Leaks {
    /// Whether anything is left.
    pub fn any(&self) -> bool {
        *self != Leaks::default()
    }
}

/// What `d` holds now.
pub fn leaks(d: &Driver) -> Leaks {
    let mut l = Leaks::default();
    for region in d.regions.values() {
        match region {
            Region::Alloc {
                len,
                extent: Some(_),
            } => {
                l.allocations.0 += 1;
                l.allocations.1 += granules(*len);
            }
            Region::Chunk(c) if matches!(c.state, ChunkState::Live { .. }) => {
                l.pool_allocations.0 += 1;
                l.pool_allocations.1 += c.len;
            }
            Region::Reserved { freed: false, .. } => l.reservations += 1,
            _ => {}
        }
    }
    l.pages = (
        d.handles.len(),
        d.handles.values().map(|h| h.extent.len).sum(),
    );
    l.streams = d
        .streams
        .iter()
        .filter(|(&id, s)| id != 0 && !s.destroyed)
        .count();
    l.events = d.events.values().filter(|e| !e.destroyed).count();
    l.modules = d.modules.values().filter(|m| !m.unloaded).count();
    l.blas_handles = crate::blas::live_handles();
    l.host = d.host_allocs.len();
    l
}

fn report() {
    let Some(d) = existing_driver() else {
        if crate::state::driver_created() {
            eprintln!(
                "fake cuda: at exit: a driver call is still running on another thread; no report"
            );
        }
        return;
    };
    if !d.initialized {
        return;
    }
    let l = leaks(&d);
    let c = &d.counters;
    eprintln!(
        "fake cuda: at exit: {} allocations ({} bytes), {} physical allocations ({} bytes), {} \
         reservations, {} pool allocations ({} bytes; {} bytes reserved by the pool), {} streams, \
         {} events, {} modules, {} cuBLAS handles, {} page-locked buffers not freed; {} kernels \
         run, {} faults, {} injected failures",
        l.allocations.0,
        l.allocations.1,
        l.pages.0,
        l.pages.1,
        l.reservations,
        l.pool_allocations.0,
        l.pool_allocations.1,
        d.pool.reserved,
        l.streams,
        l.events,
        l.modules,
        l.blas_handles,
        l.host,
        c.kernels,
        c.faults,
        crate::api::injected_failures()
    );
    if d.config.strict && l.any() {
        eprintln!("fake cuda: FAKE_CUDA_STRICT=1 and the process leaked: exit status 3");
        // SAFETY: ends the process at once, as `exit` is already running.
        unsafe { libc::_exit(3) };
    }
}
