//! Devices and the allocations made on them.

use crate::alloc::{Block, CachingAllocator, DeviceAllocator, HostBackend, OutOfMemory};
use crate::scope::ScopeTracker;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// Where memory lives. Each device owns one caching allocator.
#[derive(Clone)]
pub enum Device {
    /// The process-wide host device (its allocator reads `VRAMGUARD_ALLOC_CONF`).
    Host,
    /// A host device with an allocator of its own, e.g. bounded to behave as a GPU of N bytes.
    /// Tests and benchmarks use one each so that no other code touches their statistics.
    HostPool(Arc<DeviceAllocator>),
}

impl Device {
    /// The process-wide host device.
    pub fn host() -> Device {
        Device::Host
    }

    /// A new host device with its own allocator, holding at most `capacity` bytes.
    pub fn host_with_capacity(capacity: usize) -> Device {
        Device::HostPool(Arc::new(CachingAllocator::new(Box::new(
            HostBackend::with_capacity(capacity),
        ))))
    }

    /// A new unbounded host device with its own allocator.
    pub fn isolated_host() -> Device {
        Device::HostPool(Arc::new(CachingAllocator::new(
            Box::new(HostBackend::new()),
        )))
    }

    /// The allocator of this device.
    pub fn allocator(&self) -> &Arc<DeviceAllocator> {
        match self {
            Device::Host => global_host(),
            Device::HostPool(a) => a,
        }
    }

    /// Whether the CPU can read this device's memory directly.
    pub fn is_host(&self) -> bool {
        matches!(self, Device::Host | Device::HostPool(_))
    }

    /// Allocates `bytes` bytes on this device, attributed to the innermost batch scope.
    pub fn allocate(&self, bytes: usize) -> Result<Allocation, OutOfMemory> {
        let block = self.allocator().allocate(bytes)?;
        let scope = crate::scope::current_tracker();
        if let Some(tracker) = &scope {
            tracker.on_alloc_on(self, block.id, block.size);
        }
        Ok(Allocation {
            block: Some(block),
            device: self.clone(),
            scope,
        })
    }
}

fn global_host() -> &'static Arc<DeviceAllocator> {
    static HOST: OnceLock<Arc<DeviceAllocator>> = OnceLock::new();
    HOST.get_or_init(|| Arc::new(CachingAllocator::new(Box::new(HostBackend::new()))))
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
        }
    }
}

/// A live block of device memory; returned to its allocator on drop.
pub struct Allocation {
    block: Option<Block>,
    device: Device,
    scope: Option<Arc<ScopeTracker>>,
}

impl Allocation {
    fn block(&self) -> &Block {
        // Invariant: `block` is `Some` until `drop`.
        self.block
            .as_ref()
            .unwrap_or_else(|| unreachable!("block taken before drop"))
    }
    /// Device address of the first byte.
    pub fn addr(&self) -> u64 {
        self.block().addr
    }
    /// Bytes held (the request rounded to the allocator's granularity).
    pub fn size(&self) -> usize {
        self.block().size
    }
    /// Bytes asked for.
    pub fn requested_bytes(&self) -> usize {
        self.block().requested
    }
    /// The device the memory lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// A CPU pointer to the memory, if the device is host-addressable.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        self.device.is_host().then(|| self.block().addr as *mut u8)
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            if let Some(tracker) = &self.scope {
                tracker.on_free_on(&self.device, block.id);
            }
            self.device.allocator().free(block);
        }
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
