//! Devices and the allocations made on them: a [`Device`] owns one caching allocator (the
//! process-wide host and GPU devices read `VRAMGUARD_ALLOC_CONF`), an [`Allocation`] returns its
//! block on drop, and `CudaBuffer` wraps one for cudarc (with the `cuda` feature). The allocator
//! itself is `crate::alloc`'s.
//!
//! The devices are a source of batch-scope accounting (`accounting.rs`, `DeviceAccounting`):
//! an allocation made while a batch-scope iteration is its thread's innermost is attributed to
//! it (one thread-local read), and its free is counted there wherever it happens. Batch scopes
//! sit above this layer and read the figures through `crate::accounting`'s interface.

mod accounting;
#[cfg(feature = "cuda")]
mod cuda_buffer;

pub(crate) use accounting::DeviceAccounting;
use accounting::ScopeLedger;

#[cfg(feature = "cuda")]
pub use cuda_buffer::{CudaBuffer, CudaBufferError};

#[cfg(feature = "cuda")]
use crate::alloc::cuda_backend::CudaBackend;
use crate::alloc::{
    AllocatorConfig, Backend, Block, CachingAllocator, DeviceAllocator, HostBackend, IterationId,
    KeepAlive, OutOfMemory, RequestOrigin, SetupError, StreamId,
};
#[cfg(feature = "cuda")]
use cudarc::driver::CudaContext;
#[cfg(feature = "cuda")]
use std::collections::HashMap;
use std::fmt;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::{Arc, Mutex, OnceLock};

use crate::alloc::ContextError;

/// A device that cannot be opened. The same variants in every build: without the `cuda`
/// feature `Device::cuda` returns [`DeviceError::CudaFeatureDisabled`]; with it, the driver's
/// reasons ([`DeviceError::Context`]) or the allocator's settings ([`DeviceError::Config`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// vramguard was built without its CUDA backend (the `cuda` feature, on by default).
    #[error("no CUDA device {ordinal}: vramguard was built without its `cuda` feature; enable it in Cargo.toml (`vramguard = {{ version = \"0.1\", features = [\"cuda\"] }}`, keeping your other features), or use Device::Host")]
    CudaFeatureDisabled {
        /// Ordinal asked for.
        ordinal: usize,
    },
    /// The GPU's context could not be opened: no CUDA driver, no GPU with this ordinal, or a
    /// driver call failed.
    #[error(transparent)]
    Context(#[from] ContextError),
    /// The allocator settings cannot be used on this device.
    #[error(transparent)]
    Config(#[from] SetupError),
}

/// A CUDA device: its ordinal, its allocator and its cudarc context.
#[cfg(feature = "cuda")]
#[derive(Clone)]
pub struct CudaDevice {
    ordinal: usize,
    allocator: Arc<DeviceAllocator>,
    context: Arc<CudaContext>,
}

#[cfg(feature = "cuda")]
impl CudaDevice {
    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// The cudarc context (the device's primary context), for kernel launches and streams.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }
}

/// Where memory lives. Each device owns one caching allocator.
#[derive(Clone)]
pub enum Device {
    /// The process-wide host device (its allocator reads `VRAMGUARD_ALLOC_CONF`).
    Host,
    /// A host device with an allocator of its own, e.g. bounded to behave as a GPU of N bytes.
    /// Tests and benchmarks use one each so that no other code touches their statistics.
    HostPool(Arc<DeviceAllocator>),
    /// A GPU, through the CUDA driver. One allocator per GPU, shared by every `Device::cuda(n)`.
    #[cfg(feature = "cuda")]
    Cuda(CudaDevice),
}

impl Device {
    /// The process-wide host device.
    pub fn host() -> Device {
        Device::Host
    }

    /// A new host device with its own allocator (default settings: expandable segments on Unix,
    /// reserving `capacity` bytes of address space), holding at most `capacity` bytes.
    pub fn host_with_capacity(capacity: usize) -> Device {
        Device::HostPool(Arc::new(CachingAllocator::new(Box::new(
            HostBackend::with_capacity(capacity),
        ))))
    }

    /// A new unbounded host device with its own allocator (default settings). On Unix its
    /// expandable segment reserves [`crate::alloc::DEFAULT_EXPANDABLE_RANGE`] of address space
    /// (no memory: pages are mapped as the pool grows), released when the device is dropped.
    pub fn isolated_host() -> Device {
        Device::HostPool(Arc::new(CachingAllocator::new(
            Box::new(HostBackend::new()),
        )))
    }

    /// A new host device with its own allocator built from `config` (bounded by
    /// `config.memory_limit`, if any). Use [`Device::host_pool`] for a bounded backend.
    pub fn host_with_config(config: AllocatorConfig) -> Result<Device, SetupError> {
        Self::host_pool(HostBackend::new(), config)
    }

    /// A new host device over `backend` (e.g. `HostBackend::with_capacity(n)`) with `config`.
    pub fn host_pool(backend: HostBackend, config: AllocatorConfig) -> Result<Device, SetupError> {
        let allocator = CachingAllocator::with_config(Box::new(backend) as Box<_>, config)?;
        Ok(Device::HostPool(Arc::new(allocator)))
    }

    /// GPU `ordinal` through the CUDA driver. Every call for the same ordinal returns the same
    /// device (one caching allocator per GPU), configured by `VRAMGUARD_ALLOC_CONF`.
    ///
    /// A bad `VRAMGUARD_ALLOC_CONF` (an unknown key, a value that does not parse, a setting this
    /// GPU cannot use) is [`DeviceError::Config`], naming the key, on every call until it is
    /// fixed. Without the driver library this returns `DeviceError::Context(ContextError::NoDriver)` (cudarc would
    /// panic). In a build without the `cuda` feature it returns
    /// `DeviceError::CudaFeatureDisabled`, whose message names the `Cargo.toml` change.
    #[cfg(feature = "cuda")]
    pub fn cuda(ordinal: usize) -> Result<Device, DeviceError> {
        static DEVICES: OnceLock<Mutex<HashMap<usize, CudaDevice>>> = OnceLock::new();
        let devices = DEVICES.get_or_init(|| Mutex::new(HashMap::new()));
        let mut devices = devices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.get(&ordinal) {
            return Ok(Device::Cuda(d.clone()));
        }
        // A bad setting is the caller's error, before the driver is asked for anything.
        let config = crate::alloc::env_config().map_err(SetupError::from)?;
        let backend = CudaBackend::new(ordinal)?;
        let context = Arc::clone(backend.context());
        let boxed: Box<dyn Backend> = Box::new(backend);
        let allocator = CachingAllocator::with_config(boxed, config)?.configured_from_environment();
        let device = CudaDevice {
            ordinal,
            allocator: Arc::new(allocator),
            context,
        };
        devices.insert(ordinal, device.clone());
        Ok(Device::Cuda(device))
    }

    /// GPU `ordinal`: in this build (without the `cuda` feature) always
    /// [`DeviceError::CudaFeatureDisabled`], whose message names the `Cargo.toml` change.
    #[cfg(not(feature = "cuda"))]
    pub fn cuda(ordinal: usize) -> Result<Device, DeviceError> {
        Err(DeviceError::CudaFeatureDisabled { ordinal })
    }

    /// A second allocator on GPU `ordinal`, configured by `config` instead of
    /// `VRAMGUARD_ALLOC_CONF` (e.g. expandable segments). Its statistics are its own; the GPU's
    /// memory is shared with every other allocator on it. Tests and benchmarks use it.
    #[cfg(feature = "cuda")]
    pub fn cuda_with_config(
        ordinal: usize,
        config: AllocatorConfig,
    ) -> Result<Device, DeviceError> {
        let backend = CudaBackend::new(ordinal)?;
        let context = Arc::clone(backend.context());
        let boxed: Box<dyn Backend> = Box::new(backend);
        let allocator = CachingAllocator::with_config(boxed, config)?;
        Ok(Device::Cuda(CudaDevice {
            ordinal,
            allocator: Arc::new(allocator),
            context,
        }))
    }

    /// A second allocator on GPU `ordinal`: in this build (without the `cuda` feature) always
    /// [`DeviceError::CudaFeatureDisabled`], whose message names the `Cargo.toml` change.
    #[cfg(not(feature = "cuda"))]
    pub fn cuda_with_config(
        ordinal: usize,
        _config: AllocatorConfig,
    ) -> Result<Device, DeviceError> {
        Err(DeviceError::CudaFeatureDisabled { ordinal })
    }

    /// The cudarc context of a CUDA device.
    #[cfg(feature = "cuda")]
    pub fn cuda_context(&self) -> Option<&Arc<CudaContext>> {
        match self {
            Device::Cuda(d) => Some(&d.context),
            _ => None,
        }
    }

    /// The allocator of this device.
    pub fn allocator(&self) -> &Arc<DeviceAllocator> {
        match self {
            Device::Host => global_host(),
            Device::HostPool(a) => a,
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => &d.allocator,
        }
    }

    /// Whether the CPU can read this device's memory directly (a `HostPool` only when its
    /// backend is host-addressable).
    pub fn is_host(&self) -> bool {
        match self {
            Device::Host => true,
            Device::HostPool(a) => a.backend().host_addressable(),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => false,
        }
    }

    /// Whether this is a CUDA device.
    pub fn is_cuda(&self) -> bool {
        match self {
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => true,
            Device::Host | Device::HostPool(_) => false,
        }
    }

    /// Allocates `bytes` bytes on this device, attributed to the innermost batch scope (whose
    /// iterations the allocator plans: see `iteration_planning` in
    /// [`AllocatorConfig`]). The caller's line (or the tensor op running on this thread) is
    /// recorded as the block's [`AllocOrigin`](crate::alloc::AllocOrigin).
    #[track_caller]
    pub fn allocate(&self, bytes: usize) -> Result<Allocation, OutOfMemory> {
        self.allocate_at(
            bytes,
            StreamId::DEFAULT,
            &mut RequestOrigin::current(Location::caller(), "allocate"),
        )
    }

    /// Allocates `bytes` bytes for use on `stream` (for CUDA, a `CUstream` of this device's
    /// context: `StreamId(stream.cu_stream() as u64)`): the block comes from that stream's pool
    /// and returns there when dropped, reused in the stream's order. Use
    /// [`Allocation::record_stream`] for any other stream that uses it.
    #[track_caller]
    pub fn allocate_on(&self, bytes: usize, stream: StreamId) -> Result<Allocation, OutOfMemory> {
        self.allocate_at(
            bytes,
            stream,
            &mut RequestOrigin::current(Location::caller(), "allocate"),
        )
    }

    /// Allocates the memory of a tensor of `shape` for tensor op `op` (the origin is the
    /// running op frame's, else the caller's line).
    #[track_caller]
    pub fn allocate_tensor(
        &self,
        bytes: usize,
        shape: &[usize],
        op: &'static str,
    ) -> Result<Allocation, OutOfMemory> {
        let mut origin = RequestOrigin::current(Location::caller(), op);
        origin.shape = Some(Arc::from(shape));
        self.allocate_at(bytes, StreamId::DEFAULT, &mut origin)
    }

    /// Inlined into the public allocation functions for the reason given at
    /// `CachingAllocator::malloc`: the block stays in registers.
    #[inline(always)]
    fn allocate_at(
        &self,
        bytes: usize,
        stream: StreamId,
        origin: &mut RequestOrigin,
    ) -> Result<Allocation, OutOfMemory> {
        let scope = accounting::attribution();
        let allocator = self.allocator();
        let holder: Option<&dyn KeepAlive> = Some(allocator);
        let served = if stream == StreamId::DEFAULT {
            let iteration = scope.as_ref().map(|(ledger, iteration)| IterationId {
                scope: ledger.scope(),
                iteration: *iteration,
            });
            allocator.allocate_at(bytes, iteration, origin, holder)
        } else {
            allocator.malloc(bytes, stream, origin, holder)
        };
        let block = match served {
            Ok(block) => block,
            Err(oom) => return Err(*oom),
        };
        if let Some((ledger, iteration)) = &scope {
            ledger.on_alloc(allocator, block.id, block.size, *iteration);
        }
        // SAFETY: a copy of this handle that holds no reference of its own, never dropped
        // (`ManuallyDrop`). What it refers to outlives it: the block was handed out held
        // (`State::hold`), so the allocator keeps a counted reference to itself until this
        // allocation's drop frees the block, the last thing the drop does with the copy. A
        // CUDA device's context lives as long as its allocator (whose backend holds it), and
        // the host device is a static.
        let device = ManuallyDrop::new(unsafe { std::ptr::read(self) });
        Ok(Allocation {
            block,
            device,
            scope: scope.map(|(ledger, _)| ledger),
        })
    }
}

/// The first error that made the process-wide host device fall back to the default settings.
static SETUP_ERROR: Mutex<Option<SetupError>> = Mutex::new(None);

/// The error that made the process-wide host device ignore `VRAMGUARD_ALLOC_CONF`, if any: a
/// value that does not parse, or settings the host device (created here if it was not yet)
/// cannot use. (`Device::cuda` returns such errors instead.)
pub(crate) fn config_error() -> Option<SetupError> {
    if let Err(e) = crate::alloc::env_config() {
        return Some(SetupError::Config(e));
    }
    global_host();
    SETUP_ERROR
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

fn global_host() -> &'static Arc<DeviceAllocator> {
    static HOST: OnceLock<Arc<DeviceAllocator>> = OnceLock::new();
    HOST.get_or_init(|| {
        let backend = || Box::new(HostBackend::new()) as Box<dyn Backend>;
        let configured = crate::alloc::env_config()
            .map_err(SetupError::from)
            .and_then(|config| CachingAllocator::with_config(backend(), config));
        let allocator = match configured {
            Ok(a) => a,
            Err(e) => {
                // `Device::Host` cannot return the error: say it once where it is seen (a
                // value that does not parse is said once for all of vramguard).
                match &e {
                    SetupError::Config(config) => crate::alloc::report_env_error_once(config),
                    other => crate::diagnostics::error(&format!(
                        "{}: {other}; the host device uses the default allocator settings \
                         (memory::config_error() returns this error)",
                        crate::alloc::ENV_VAR
                    )),
                }
                let mut first = SETUP_ERROR.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(e);
                CachingAllocator::new(backend())
            }
        };
        Arc::new(allocator.configured_from_environment())
    })
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(self.allocator(), other.allocator())
    }
}
impl Eq for Device {}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Host => f.write_str("Host"),
            Device::HostPool(a) => write!(f, "HostPool({:p})", Arc::as_ptr(a)),
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => write!(f, "Cuda({})", d.ordinal),
        }
    }
}

/// A live block of device memory; returned to its allocator on drop.
pub struct Allocation {
    block: Block,
    /// The device, as a handle without a reference count of its own: the allocator keeps
    /// itself alive while any of its allocations lives (see `Device::allocate_at`).
    device: ManuallyDrop<Device>,
    /// The books of the batch scope it was allocated in, told of the free.
    scope: Option<Arc<ScopeLedger>>,
}

impl Allocation {
    /// Device address of the first byte, as a number (for logs, snapshots, comparisons). It is
    /// memory of this allocation only while the allocation lives and only in its stream's
    /// order: to hand the memory to a kernel, go through [`CudaBuffer`], whose
    /// `DevicePtr`/`DevicePtrMut` give the pointer together with the borrow that keeps it
    /// valid (and record other streams, [`Allocation::record_stream`]).
    pub fn addr(&self) -> u64 {
        self.block.addr
    }
    /// Bytes held (the request rounded to the allocator's granularity).
    pub fn size(&self) -> usize {
        self.block.size
    }
    /// Bytes asked for.
    pub fn requested_bytes(&self) -> usize {
        self.block.requested
    }
    /// The device the memory lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// A CPU pointer to the memory, if the device is host-addressable.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        self.device.is_host().then_some(self.block.addr as *mut u8)
    }
    /// The stream the memory was allocated on (see [`Device::allocate_on`]).
    pub fn stream(&self) -> StreamId {
        self.block.stream
    }
    /// Records that work queued on `stream` uses this memory, as PyTorch's `record_stream`:
    /// when the allocation is dropped, the block is not handed out again until the work queued
    /// on `stream` up to that moment is done. Needed for every stream other than
    /// [`Allocation::stream`] that reads or writes the memory (cudarc code of your own, another
    /// library); the allocation's own stream needs nothing.
    pub fn record_stream(&self, stream: StreamId) {
        self.device.allocator().record_stream(&self.block, stream);
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(ledger) = &self.scope {
            ledger.on_free(self.device.allocator(), self.block.id);
        }
        let kept_alive = self.device.allocator().free_by_ref(&self.block);
        // The allocator's reference to itself, when this was its last held block: dropped now
        // that nothing refers into it. The device handle is not used after this.
        drop(kept_alive);
    }
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocation")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("size", &self.size())
            .field("device", &self.device)
            .finish()
    }
}

#[cfg(test)]
mod tests;
