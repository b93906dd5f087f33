//! The fake device's state: the primary context, every range of device address space and what
//! backs it, the physical allocation handles of the virtual-memory calls, and the bookkeeping
//! of the other modules (streams and events in `streams`, the memory pool in `pool`, modules
//! and kernels in `kernels`). One [`Driver`] per process behind one lock: each exported call
//! takes it for its whole duration, so the fake is as thread-safe as the driver and every
//! queued operation runs under it.
//!
//! This module owns the rules of memory access: [`Driver::check_access`] says whether a range
//! may be touched right now, and why not.

use crate::config::{Config, GRANULE};
use crate::device_memory::{self, Extent, Physical};
use crate::errors::{self, CuResult, Fail};
use crate::kernels::{Function, HostLibrary, Module};
use crate::pool::Pool;
use crate::streams::{Event, Stream};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The primary context's handle (the fake has one device and one context).
pub const CONTEXT: u64 = 0xfa4e_c000;
/// The default memory pool's handle.
pub const POOL: u64 = 0xfa4e_9000;

/// What a range of device address space is.
#[derive(Debug)]
pub enum Region {
    /// `cuMemAlloc`: `len` bytes backed by `extent`; after `cuMemFree` an inaccessible hole.
    Alloc {
        /// Bytes asked for.
        len: usize,
        /// Its pages (`None` once freed).
        extent: Option<Extent>,
    },
    /// A chunk of the default memory pool (`cuMemAllocAsync`): see `pool`.
    Chunk(crate::pool::Chunk),
    /// `cuMemAddressReserve`: `len` bytes of address space, mapped granule by granule.
    Reserved {
        /// Bytes reserved.
        len: usize,
        /// `cuMemAddressFree` was called.
        freed: bool,
        /// The mapped granules, by address.
        granules: BTreeMap<u64, Granule>,
    },
}

/// A mapped granule of a reservation.
#[derive(Debug, Clone, Copy)]
pub struct Granule {
    /// The physical allocation mapped here.
    pub handle: u64,
    /// Where the `cuMemMap` call that mapped it started, and its length (unmapping must cover
    /// whole mappings).
    pub mapping: (u64, usize),
    /// What `cuMemSetAccess` allowed (`PROT_NONE` until it is called).
    pub prot: i32,
}

/// A physical allocation (`cuMemCreate`).
#[derive(Debug)]
pub struct PhysicalHandle {
    /// Its pages.
    pub extent: Extent,
    /// Granule-sized mappings of it that exist.
    pub mapped_granules: usize,
    /// `cuMemRelease` was called: its pages go once it is unmapped.
    pub released: bool,
}

/// The primary context.
#[derive(Debug, Default)]
pub struct Context {
    /// `cuDevicePrimaryCtxRetain` calls not yet released.
    pub retained: u32,
    /// The error a faulting kernel, copy or memset left (every later call that needs the
    /// context returns it, as on a GPU), cleared when the context is released.
    pub sticky: Option<CuResult>,
}

/// Figures reported at exit.
#[derive(Debug, Default)]
pub struct Counters {
    /// Kernels run.
    pub kernels: u64,
    /// Faults (kernels, copies, memsets).
    pub faults: u64,
}

/// The whole fake device.
pub struct Driver {
    /// Settings.
    pub config: Config,
    /// `cuInit` was called.
    pub initialized: bool,
    /// Device memory.
    pub physical: Physical,
    /// The primary context.
    pub context: Context,
    /// Every range of device address space handed out, by start address.
    pub regions: BTreeMap<u64, Region>,
    /// Physical allocations, by handle.
    pub handles: HashMap<u64, PhysicalHandle>,
    /// Streams by handle (the null stream is 0).
    pub streams: HashMap<u64, Stream>,
    /// Events by handle.
    pub events: HashMap<u64, Event>,
    /// Modules by handle.
    pub modules: HashMap<u64, Module>,
    /// Kernels by handle.
    pub functions: HashMap<u64, Function>,
    /// The default memory pool.
    pub pool: Pool,
    /// Page-locked host memory (`cuMemHostAlloc`): start and length.
    pub host_allocs: BTreeMap<u64, usize>,
    /// The kernels' host builds, loaded on first use.
    pub host_libraries: Option<Vec<HostLibrary>>,
    /// Figures for the exit report.
    pub counters: Counters,
    next_handle: u64,
}

// SAFETY: the raw pointers inside (host kernel functions, library handles) are process-wide
// and only used under the driver's lock.
unsafe impl Send for Driver {}

thread_local! {
    /// This thread's context stack (`cuCtxPushCurrent`/`cuCtxPopCurrent`); the top is current.
    pub static CONTEXT_STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The settings of this process.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

static DRIVER: OnceLock<Mutex<Driver>> = OnceLock::new();

/// The driver, locked for the caller's call.
pub fn driver() -> Result<MutexGuard<'static, Driver>, Fail> {
    let lock = match DRIVER.get() {
        Some(lock) => lock,
        None => {
            let config = config().clone();
            let physical = Physical::new(config.memory).map_err(|e| {
                Fail::loud(
                    errors::OUT_OF_MEMORY,
                    format!(
                        "cannot create the device memory file ({} bytes): {e}",
                        config.memory
                    ),
                )
            })?;
            DRIVER.get_or_init(|| Mutex::new(Driver::new(config, physical)))
        }
    };
    Ok(lock.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Whether the driver was ever created.
pub fn driver_created() -> bool {
    DRIVER.get().is_some()
}

/// The driver if it was ever created and no call holds it (for the exit report, which must
/// not wait for a thread that `exit` will never let finish).
pub fn existing_driver() -> Option<MutexGuard<'static, Driver>> {
    match DRIVER.get()?.try_lock() {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The context current on this thread (0 for none).
pub fn current_context() -> u64 {
    CONTEXT_STACK.with(|s| s.borrow().last().copied().unwrap_or(0))
}

impl Driver {
    fn new(config: Config, physical: Physical) -> Driver {
        Driver {
            config,
            initialized: false,
            physical,
            context: Context::default(),
            regions: BTreeMap::new(),
            handles: HashMap::new(),
            streams: HashMap::from([(0, Stream::new(true))]),
            events: HashMap::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            pool: Pool::default(),
            host_allocs: BTreeMap::new(),
            host_libraries: None,
            counters: Counters::default(),
            next_handle: 0x1000,
        }
    }

    /// A fresh handle value: non-null, never reused, never 0x1 or 0x2 (the legacy and
    /// per-thread stream handles).
    pub fn new_handle(&mut self) -> u64 {
        self.next_handle += 0x10;
        self.next_handle
    }

    /// `Err(CUDA_ERROR_NOT_INITIALIZED)` before `cuInit`.
    pub fn initialized(&self) -> Result<(), Fail> {
        if self.initialized {
            Ok(())
        } else {
            Err(Fail::loud(errors::NOT_INITIALIZED, "called before cuInit"))
        }
    }

    /// The rule of every call that works in a context: one must be current on this thread
    /// (`CUDA_ERROR_INVALID_CONTEXT` otherwise), and an earlier fault's sticky error is
    /// returned instead of doing anything.
    pub fn in_context(&self) -> Result<(), Fail> {
        self.initialized()?;
        match current_context() {
            0 => Err(Fail::loud(
                errors::INVALID_CONTEXT,
                "no context is current on this thread (push or set one first)",
            )),
            CONTEXT if self.context.retained == 0 => Err(Fail::loud(
                errors::INVALID_CONTEXT,
                "the current context is the primary context, released by every retain's \
                 cuDevicePrimaryCtxRelease",
            )),
            CONTEXT => match self.context.sticky {
                Some(code) => Err(Fail::quiet(code)),
                None => Ok(()),
            },
            other => Err(Fail::loud(
                errors::INVALID_CONTEXT,
                format!("the current context {other:#x} is not a context of this driver"),
            )),
        }
    }

    /// The region holding `addr`, with its start.
    pub fn region_at(&self, addr: u64) -> Option<(u64, &Region)> {
        let (&start, region) = self.regions.range(..=addr).next_back()?;
        (addr < start + region_span(region) as u64).then_some((start, region))
    }

    /// Whether `[addr, addr + len)` may be touched now (`write`: written), and if not, why.
    pub fn check_access(&self, addr: u64, len: usize, write: bool) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        let what = if write { "write" } else { "read" };
        let end = addr
            .checked_add(len as u64)
            .ok_or_else(|| format!("{what} of {len} bytes at {addr:#x} wraps around"))?;
        let Some((start, region)) = self.region_at(addr) else {
            return Err(format!(
                "{what} of {len} bytes at {addr:#x}: not device memory of this context"
            ));
        };
        match region {
            Region::Alloc { len: size, extent } => {
                if extent.is_none() {
                    return Err(format!(
                        "{what} of {len} bytes at {addr:#x}: the allocation of {size} bytes at \
                         {start:#x} was freed (cuMemFree)"
                    ));
                }
                if end > start + *size as u64 {
                    return Err(format!(
                        "{what} of {len} bytes at {addr:#x} runs past the end of the allocation \
                         of {size} bytes at {start:#x}"
                    ));
                }
                Ok(())
            }
            Region::Chunk(chunk) => chunk.check(start, addr, len, what),
            Region::Reserved {
                len: size,
                freed,
                granules,
            } => {
                if *freed {
                    return Err(format!(
                        "{what} of {len} bytes at {addr:#x}: the address range of {size} bytes \
                         at {start:#x} was freed (cuMemAddressFree)"
                    ));
                }
                if end > start + *size as u64 {
                    return Err(format!(
                        "{what} of {len} bytes at {addr:#x} runs past the end of the reserved \
                         range of {size} bytes at {start:#x}"
                    ));
                }
                let first = addr - (addr - start) % GRANULE as u64;
                for at in (first..end).step_by(GRANULE) {
                    let Some(g) = granules.get(&at) else {
                        return Err(format!(
                            "{what} of {len} bytes at {addr:#x}: the granule at {at:#x} is not \
                             mapped (never mapped, or cuMemUnmap'd)"
                        ));
                    };
                    let needed = if write {
                        libc::PROT_WRITE
                    } else {
                        libc::PROT_READ
                    };
                    if g.prot & needed == 0 {
                        return Err(format!(
                            "{what} of {len} bytes at {addr:#x}: the granule at {at:#x} is mapped \
                             but its access was not set for {what}s (cuMemSetAccess)"
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// Like [`Driver::check_access`] for a call's arguments, before anything is queued: only
    /// whether the range is device memory still allocated (a mapping without access is only
    /// found when the work runs, as on a GPU).
    pub fn check_argument(&self, addr: u64, len: usize) -> Result<(), Fail> {
        if len == 0 {
            return Ok(());
        }
        let end = addr.saturating_add(len as u64);
        let bad = |why: String| Err(Fail::loud(errors::INVALID_VALUE, why));
        match self.region_at(addr) {
            None => bad(format!(
                "{len} bytes at {addr:#x}: not device memory of this context"
            )),
            Some((start, region)) => {
                if end > start + usable_len(region) as u64 {
                    return bad(format!(
                        "{len} bytes at {addr:#x} run past the end of the device memory at {start:#x}"
                    ));
                }
                match region {
                    Region::Alloc { extent: None, .. } => bad(format!(
                        "{len} bytes at {addr:#x}: the allocation at {start:#x} was freed (cuMemFree)"
                    )),
                    Region::Reserved { freed: true, .. } => bad(format!(
                        "{len} bytes at {addr:#x}: the address range at {start:#x} was freed"
                    )),
                    Region::Chunk(chunk) if !chunk.allocated() => bad(format!(
                        "{len} bytes at {addr:#x}: the pool allocation at {start:#x} was freed \
                         (cuMemFreeAsync)"
                    )),
                    _ => Ok(()),
                }
            }
        }
    }

    /// A sticky error from now on: what a fault does to a context on a GPU. Queued work is
    /// dropped (a faulted context runs nothing more).
    pub fn fault(&mut self, message: String) -> Fail {
        eprintln!("fake cuda: {message}");
        self.counters.faults += 1;
        self.context.sticky = Some(errors::ILLEGAL_ADDRESS);
        for stream in self.streams.values_mut() {
            stream.drop_queued();
        }
        Fail::quiet(errors::ILLEGAL_ADDRESS)
    }

    /// Frees a physical allocation's pages once it is released and mapped nowhere.
    pub fn settle_handle(&mut self, handle: u64) {
        let gone = self
            .handles
            .get(&handle)
            .is_some_and(|h| h.released && h.mapped_granules == 0);
        if gone {
            if let Some(h) = self.handles.remove(&handle) {
                self.physical.free(h.extent);
            }
        }
    }

    /// Reserves fresh address space of `len` bytes (plus a guard), aligned to `align`.
    pub fn reserve_address_space(&mut self, len: usize, align: usize) -> Result<u64, Fail> {
        device_memory::reserve(len + GRANULE, align).map_err(|e| {
            Fail::loud(
                errors::OUT_OF_MEMORY,
                format!("cannot reserve {len} bytes of host address space: {e}"),
            )
        })
    }
}

/// The bytes of a region its owner may use (what was asked for).
pub fn usable_len(region: &Region) -> usize {
    match region {
        Region::Alloc { len, .. } | Region::Reserved { len, .. } => *len,
        Region::Chunk(chunk) => chunk.requested,
    }
}

/// The bytes of address space a region covers.
pub fn region_span(region: &Region) -> usize {
    match region {
        Region::Alloc { len, .. } => device_memory::granules(*len),
        Region::Chunk(chunk) => chunk.len,
        Region::Reserved { len, .. } => *len,
    }
}
