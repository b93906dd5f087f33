//! Storage: the reference-counted memory under tensors, its locks and version counter, and the
//! `(storage, layout)` pairs that backends read and produce.

use super::error::{Result, TensorError};
use super::kinds::{DType, Layout};
use super::peak_bound;
use crate::device::Allocation;
use crate::Device;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Reference-counted memory of one or more tensors: one allocator block, its element count,
/// and a version counter bumped by every in-place write.
pub struct Storage {
    /// Process-unique id (addresses are reused after a free; ids are not).
    id: u64,
    /// Stored as a leaf's gradient (for the peak bound, which keeps those until freed).
    pub(super) held_as_grad: AtomicBool,
    allocation: Allocation,
    pub(super) numel: usize,
    pub(super) dtype: DType,
    version: AtomicU64,
    /// In-place writes that were recorded (rewrote the target's autograd history). Other
    /// handles on this storage (views, detached copies) made before such a write have stale
    /// history; see `Tensor::has_stale_history`.
    pub(super) history_rewrites: AtomicU64,
    last_writer: Mutex<&'static str>,
    // Readers (kernels reading inputs) take it shared, in-place writers exclusively, so that
    // clones shared across threads never race.
    lock: RwLock<()>,
}

impl Storage {
    /// Storage for a tensor of `shape` (`numel` elements) made by op `op`.
    #[track_caller]
    pub(super) fn new(
        device: &Device,
        numel: usize,
        shape: &[usize],
        op: &'static str,
    ) -> Result<Arc<Storage>> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let allocation = device.allocate_tensor(numel * DType::F32.size_in_bytes(), shape, op)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        peak_bound::on_alloc(id, allocation.size());
        Ok(Arc::new(Storage {
            id,
            held_as_grad: AtomicBool::new(false),
            allocation,
            numel,
            dtype: DType::F32,
            version: AtomicU64::new(0),
            history_rewrites: AtomicU64::new(0),
            last_writer: Mutex::new("an in-place op"),
            lock: RwLock::new(()),
        }))
    }

    /// Elements held.
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Bytes held (the allocator's rounded block size).
    pub fn size_in_bytes(&self) -> usize {
        self.allocation.size()
    }

    /// Number of in-place writes so far.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The device the storage lives on.
    pub fn device(&self) -> &Device {
        self.allocation.device()
    }

    /// Address of the first element in the device's address space (a host pointer on host
    /// devices), for the device backends.
    #[cfg(feature = "cuda")]
    pub(crate) fn device_addr(&self) -> u64 {
        self.allocation.addr()
    }

    /// Ends a use of the storage by a device kernel (for the peak bound, as dropping a host
    /// read or write does).
    #[cfg(feature = "cuda")]
    pub(crate) fn note_use_end(&self) {
        peak_bound::on_use_end(self.id);
    }

    fn base_ptr(&self, op: &'static str) -> Result<*mut f32> {
        self.allocation
            .host_ptr()
            .map(|p| p.cast::<f32>())
            .ok_or_else(|| TensorError::Unsupported {
                op,
                device: format!("{:?}", self.allocation.device()),
            })
    }

    pub(crate) fn read(&self, op: &'static str) -> Result<StorageRead<'_>> {
        let ptr = self.base_ptr(op)?;
        let guard = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let _ = READS_HELD.try_with(|held| held.borrow_mut().push(self.id));
        // SAFETY: the allocation holds `numel` f32s (it was allocated for them, host
        // allocations are aligned to at least 64 bytes) and lives as long as `self`; the shared
        // lock excludes in-place writers for the lifetime of the slice.
        let data = unsafe { std::slice::from_raw_parts(ptr.cast_const(), self.numel) };
        Ok(StorageRead {
            _guard: guard,
            data,
            storage_id: self.id,
        })
    }

    pub(crate) fn write(&self, op: &'static str) -> Result<StorageWrite<'_>> {
        let ptr = self.base_ptr(op)?;
        // Waiting for the exclusive lock while this thread holds the shared one (an in-place op
        // inside `with_host_slice`'s closure) would never return.
        if READS_HELD
            .try_with(|held| held.borrow().contains(&self.id))
            .unwrap_or(false)
        {
            return Err(TensorError::InvalidArgument {
                op,
                shape: Vec::new(),
                message: "the tensor's storage is being read on this thread (inside \
                          with_host_slice?); write to it after the read ends"
                    .into(),
            });
        }
        let guard = self.lock.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: as in `read`; the exclusive lock guarantees no other slice of this storage
        // exists while this one does.
        let data = unsafe { std::slice::from_raw_parts_mut(ptr, self.numel) };
        Ok(StorageWrite {
            _guard: guard,
            data,
            storage_id: self.id,
        })
    }

    /// Mutable access to storage nobody else can reach (just allocated, or uniquely owned).
    pub(super) fn fresh_mut(&mut self, op: &'static str) -> Result<&mut [f32]> {
        let ptr = self.base_ptr(op)?;
        peak_bound::on_use_end(self.id);
        // SAFETY: `&mut self` proves exclusive access; the block holds `numel` aligned f32s.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, self.numel) })
    }

    pub(crate) fn bump_version(&self, by: &'static str) {
        *self.last_writer.lock().unwrap_or_else(|e| e.into_inner()) = by;
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn history_rewrites(&self) -> u64 {
        self.history_rewrites.load(Ordering::Acquire)
    }

    pub(super) fn last_writer(&self) -> &'static str {
        *self.last_writer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Storage")
            .field("numel", &self.numel)
            .field("bytes", &self.size_in_bytes())
            .field("version", &self.version())
            .finish()
    }
}

thread_local! {
    /// Ids of the storages this thread holds read locks on (one entry per lock).
    static READS_HELD: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

pub(crate) struct StorageRead<'a> {
    _guard: RwLockReadGuard<'a, ()>,
    pub(crate) data: &'a [f32],
    storage_id: u64,
}

pub(crate) struct StorageWrite<'a> {
    _guard: RwLockWriteGuard<'a, ()>,
    pub(crate) data: &'a mut [f32],
    storage_id: u64,
}

// A use ends when the kernel releases its access: after it wrote its output, so an op's
// inputs and output overlap in the peak bound.
impl Drop for StorageRead<'_> {
    fn drop(&mut self) {
        let _ = READS_HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(pos) = held.iter().rposition(|&id| id == self.storage_id) {
                held.swap_remove(pos);
            }
        });
        peak_bound::on_use_end(self.storage_id);
    }
}

impl Drop for StorageWrite<'_> {
    fn drop(&mut self) {
        peak_bound::on_use_end(self.storage_id);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        peak_bound::on_free(
            self.id,
            self.allocation.size(),
            self.held_as_grad.load(Ordering::Relaxed),
        );
    }
}

/// Read locks on the distinct storages of several tensors, taken in address order (so that
/// concurrent readers and writers cannot deadlock, and a storage shared by two operands is
/// locked once).
pub(crate) struct ReadSet<'a> {
    guards: Vec<(*const Storage, StorageRead<'a>)>,
}

impl<'a> ReadSet<'a> {
    pub(crate) fn new(op: &'static str, tensors: &[StridedRef<'a>]) -> Result<ReadSet<'a>> {
        let mut storages: Vec<&'a Arc<Storage>> = tensors.iter().map(|t| t.storage).collect();
        storages.sort_by_key(|s| Arc::as_ptr(s));
        storages.dedup_by_key(|s| Arc::as_ptr(s));
        let guards = storages
            .into_iter()
            .map(|s| Ok((Arc::as_ptr(s), s.read(op)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ReadSet { guards })
    }

    /// The whole storage of `t`, which must be one of the tensors the set was made from.
    pub(crate) fn storage_of(&self, t: StridedRef<'_>) -> &[f32] {
        let key = Arc::as_ptr(t.storage);
        self.guards
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&[], |(_, g)| g.data)
    }

    /// The elements of contiguous `t` (its window of the storage).
    pub(crate) fn contiguous_data(&self, t: StridedRef<'_>) -> &[f32] {
        let data = self.storage_of(t);
        let start = t.offset().min(data.len());
        let end = (t.offset() + t.elem_count()).min(data.len());
        &data[start..end]
    }
}

/// A tensor's data as the backends read it: its storage and the layout that addresses it (no
/// autograd state, so backends cannot record or call ops).
#[derive(Clone, Copy)]
pub(crate) struct StridedRef<'a> {
    pub(crate) storage: &'a Arc<Storage>,
    pub(crate) layout: &'a Layout,
}

impl<'a> StridedRef<'a> {
    pub(crate) fn dims(&self) -> &'a [usize] {
        &self.layout.shape
    }

    pub(crate) fn strides(&self) -> &'a [usize] {
        &self.layout.strides
    }

    pub(crate) fn offset(&self) -> usize {
        self.layout.offset
    }

    pub(crate) fn rank(&self) -> usize {
        self.layout.shape.len()
    }

    pub(crate) fn elem_count(&self) -> usize {
        self.layout.numel()
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn is_contiguous(&self) -> bool {
        self.layout.is_contiguous()
    }

    pub(crate) fn device(&self) -> &'a Device {
        self.storage.device()
    }

    pub(crate) fn storage(&self) -> &'a Arc<Storage> {
        self.storage
    }
}

/// What a backend produces: storage it allocated and the layout of the result in it (the op
/// layer wraps it in a tensor).
pub(crate) struct Strided {
    pub(crate) storage: Arc<Storage>,
    pub(crate) layout: Layout,
}

impl Strided {
    /// Fresh storage holding a contiguous array of `shape`.
    pub(crate) fn contiguous(storage: Arc<Storage>, shape: &[usize]) -> Strided {
        Strided {
            storage,
            layout: Layout::contiguous(shape),
        }
    }

    pub(crate) fn as_ref(&self) -> StridedRef<'_> {
        StridedRef {
            storage: &self.storage,
            layout: &self.layout,
        }
    }
}

/// The accessors the CUDA backend uses on its results.
#[cfg(feature = "cuda")]
impl Strided {
    pub(crate) fn dims(&self) -> &[usize] {
        &self.layout.shape
    }

    pub(crate) fn elem_count(&self) -> usize {
        self.layout.numel()
    }

    pub(crate) fn device(&self) -> &Device {
        self.storage.device()
    }

    pub(crate) fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }
}

impl<'a> From<&'a Strided> for StridedRef<'a> {
    fn from(s: &'a Strided) -> StridedRef<'a> {
        s.as_ref()
    }
}
