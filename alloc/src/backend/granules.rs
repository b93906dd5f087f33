//! Page mapping with one physical allocation per granule, for backends that reserve address
//! space and map physical allocations into it (CUDA's `cuMemCreate`/`cuMemMap`): which granule
//! holds which handle, the order of the driver calls, and what happens when one fails. The
//! calls themselves are a [`PageDriver`] (the CUDA backend's in `cuda.rs`), so this logic runs
//! in the host tests too.
//!
//! One handle per granule, as PyTorch's expandable segments do, so that any granule can be
//! unmapped on its own later; the access rights are set with one call per mapped range (the
//! driver accepts a range that spans several allocations), not one per granule.

use super::{BackendError, BackendFailure};
use crate::diagnostics::WarningOutput;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A failed driver call: which one, the driver's error name, and whether it means the device
/// is out of memory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[doc(hidden)]
pub struct CallError {
    /// The driver function (`cuMemCreate`).
    pub op: &'static str,
    /// The driver's error name (`CUDA_ERROR_OUT_OF_MEMORY`).
    pub error: String,
    /// Whether the driver ran out of memory (rather than failing for another reason).
    pub out_of_memory: bool,
}

/// The driver calls behind [`GranuleMap`].
///
/// # Safety
/// An implementation must do what each call says on the device and nothing else.
#[doc(hidden)]
pub unsafe trait PageDriver {
    /// A physical allocation.
    type Handle: Copy + std::fmt::Debug;
    /// Creates a physical allocation of `bytes` bytes (`cuMemCreate`).
    fn create(&self, bytes: usize) -> Result<Self::Handle, CallError>;
    /// Maps `handle` at `addr` (`cuMemMap`).
    ///
    /// # Safety
    /// `[addr, addr + bytes)` is an unmapped part of a reserved range.
    unsafe fn map(&self, addr: u64, bytes: usize, handle: Self::Handle) -> Result<(), CallError>;
    /// Makes `[addr, addr + bytes)` readable and writable by the device (`cuMemSetAccess`).
    ///
    /// # Safety
    /// The range is fully mapped.
    unsafe fn set_access(&self, addr: u64, bytes: usize) -> Result<(), CallError>;
    /// Unmaps `[addr, addr + bytes)` (`cuMemUnmap`).
    ///
    /// # Safety
    /// The range is exactly one mapped allocation that nothing uses anymore.
    unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), CallError>;
    /// Releases a physical allocation (`cuMemRelease`); its memory returns once unmapped.
    ///
    /// # Safety
    /// `handle` is released once.
    unsafe fn release(&self, handle: Self::Handle) -> Result<(), CallError>;
}

/// The handles of the granules mapped so far, by address.
#[derive(Debug)]
#[doc(hidden)]
pub struct GranuleMap<H> {
    granularity: usize,
    handles: Mutex<BTreeMap<u64, H>>,
}

impl<H: Copy + std::fmt::Debug> GranuleMap<H> {
    /// No granule mapped yet; `granularity` is the size of each.
    #[doc(hidden)]
    pub fn new(granularity: usize) -> GranuleMap<H> {
        GranuleMap {
            granularity,
            handles: Mutex::new(BTreeMap::new()),
        }
    }

    /// Bytes mapped through this map and not unmapped since.
    #[cfg(test)]
    #[doc(hidden)]
    pub fn mapped_bytes(&self) -> usize {
        self.lock().len() * self.granularity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, H>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Err` unless `[addr, addr + bytes)` is a non-empty run of whole granules.
    fn check_whole(&self, what: &str, addr: u64, bytes: usize) -> Result<(), BackendError> {
        let g = self.granularity as u64;
        if bytes == 0 || !addr.is_multiple_of(g) || !(bytes as u64).is_multiple_of(g) {
            return Err(BackendError::driver(
                format!("{what} {bytes} bytes at {addr:#x}"),
                format!("not whole granules of {g} bytes (a bug in the caller: nothing was done)"),
            ));
        }
        Ok(())
    }

    /// Maps `[addr, addr + bytes)`: a new handle per granule, mapped in order, then the access
    /// rights of the whole range at once. On failure, what this call mapped is undone (a
    /// failure there is reported on stderr) and the range is left unmapped.
    ///
    /// # Safety
    /// The range lies in a reserved range of `driver`'s and is unmapped.
    #[doc(hidden)]
    pub unsafe fn map<D: PageDriver<Handle = H>>(
        &self,
        driver: &D,
        device: &str,
        addr: u64,
        bytes: usize,
    ) -> Result<(), BackendError> {
        self.check_whole("mapping", addr, bytes)?;
        let g = self.granularity;
        let mut done: Vec<u64> = Vec::new();
        let mut failed = None;
        for at in (addr..addr + bytes as u64).step_by(g) {
            let handle = match driver.create(g) {
                Ok(h) => h,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // SAFETY: `at` is an unmapped granule of the caller's reserved range.
            if let Err(e) = unsafe { driver.map(at, g, handle) } {
                // SAFETY: the handle was never mapped; released once, here.
                if let Err(r) = unsafe { driver.release(handle) } {
                    report(
                        device,
                        &format!("{} of an unmapped handle: {}", r.op, r.error),
                    );
                }
                failed = Some(e);
                break;
            }
            self.lock().insert(at, handle);
            done.push(at);
        }
        if failed.is_none() {
            // SAFETY: every granule of the range was just mapped.
            match unsafe { driver.set_access(addr, bytes) } {
                Ok(()) => return Ok(()),
                Err(e) => failed = Some(e),
            }
        }
        let Some(e) = failed else {
            return Ok(());
        };
        // Already failing: undo what this call mapped.
        if let Err((_, undo)) = self.unmap_granules(driver, device, &done) {
            report(
                device,
                &format!("undoing a failed map of {bytes} bytes at {addr:#x}: {undo}"),
            );
        }
        Err(if e.out_of_memory {
            BackendError::OutOfMemory { requested: bytes }
        } else {
            BackendError::Driver(BackendFailure {
                op: format!("{} while mapping {bytes} bytes at {addr:#x}", e.op),
                error: e.error,
            })
        })
    }

    /// Unmaps `[addr, addr + bytes)`, granule by granule. `Err` leaves the whole range mapped:
    /// the granules unmapped before the failure are mapped back (the error says so when that
    /// fails too). A range that is not whole granules mapped here is refused untouched.
    ///
    /// # Safety
    /// Nothing uses the range anymore.
    #[doc(hidden)]
    pub unsafe fn unmap<D: PageDriver<Handle = H>>(
        &self,
        driver: &D,
        device: &str,
        addr: u64,
        bytes: usize,
    ) -> Result<(), BackendError> {
        self.check_whole("unmapping", addr, bytes)?;
        let addrs: Vec<u64> = (addr..addr + bytes as u64)
            .step_by(self.granularity)
            .collect();
        {
            let handles = self.lock();
            if let Some(at) = addrs.iter().find(|a| !handles.contains_key(a)) {
                return Err(BackendError::driver(
                    format!("unmapping {bytes} bytes at {addr:#x}"),
                    format!("the granule at {at:#x} is not mapped (a bug in the caller: nothing was done)"),
                ));
            }
        }
        let Err((done, failure)) = self.unmap_granules(driver, device, &addrs) else {
            return Ok(());
        };
        if done == 0 {
            return Err(BackendError::Driver(failure));
        }
        // The contract: on failure the whole range is mapped. Map back what was unmapped.
        let back = addrs[0];
        let back_bytes = done * self.granularity;
        // SAFETY: `[back, back + back_bytes)` was unmapped just above and lies in the range.
        if let Err(e) = unsafe { self.map(driver, device, back, back_bytes) } {
            return Err(BackendError::driver(
                failure.op,
                format!(
                    "{}; mapping back the {back_bytes} bytes at {back:#x} unmapped before it \
                     also failed ({e}): the allocator's view of this range is wrong, do not use \
                     this device further",
                    failure.error
                ),
            ));
        }
        Err(BackendError::Driver(failure))
    }

    /// Unmaps and releases the granules at `addrs` (mapped here), in order. Stops at the first
    /// that cannot be unmapped: its failure, with how many were unmapped before it. A failed
    /// release after a successful unmap is reported on stderr only (the granule is unmapped;
    /// its memory is lost to the process).
    #[doc(hidden)]
    pub fn unmap_granules<D: PageDriver<Handle = H>>(
        &self,
        driver: &D,
        device: &str,
        addrs: &[u64],
    ) -> Result<(), (usize, BackendFailure)> {
        let g = self.granularity;
        for (done, &at) in addrs.iter().enumerate() {
            let Some(handle) = self.lock().get(&at).copied() else {
                return Err((
                    done,
                    BackendFailure {
                        op: format!("unmapping the granule at {at:#x}"),
                        error: "not mapped".into(),
                    },
                ));
            };
            // SAFETY: `at` is a mapped granule (one allocation of `g` bytes) nothing uses.
            if let Err(e) = unsafe { driver.unmap(at, g) } {
                return Err((
                    done,
                    BackendFailure {
                        op: format!("{}({at:#x}, {g})", e.op),
                        error: e.error,
                    },
                ));
            }
            self.lock().remove(&at);
            // SAFETY: the handle's only mapping was just removed; it is released once.
            if let Err(e) = unsafe { driver.release(handle) } {
                report(
                    device,
                    &format!("{} after unmapping {at:#x} failed: {}", e.op, e.error),
                );
            }
        }
        Ok(())
    }
}

/// A failure nobody can act on at the call site, on stderr (or `tracing` when a subscriber is
/// installed).
fn report(device: &str, message: &str) {
    crate::diagnostics::warn(WarningOutput::Auto, &format!("{device}: {message}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};

    const G: usize = 2 << 20;
    const BASE: u64 = 0x7000_0000_0000;

    /// Records every call; fails the `fail_at`-th call of kind `fail_op` (counting from 1).
    #[derive(Default)]
    struct Recorder {
        calls: RefCell<Vec<String>>,
        next: Cell<u32>,
        live: RefCell<Vec<u32>>,
        fail_op: Cell<&'static str>,
        fail_at: Cell<usize>,
    }

    impl Recorder {
        fn failing(op: &'static str, at: usize) -> Recorder {
            let r = Recorder::default();
            r.fail_op.set(op);
            r.fail_at.set(at);
            r
        }
        fn call(&self, op: &'static str, text: String) -> Result<(), CallError> {
            self.calls.borrow_mut().push(text);
            let seen = self
                .calls
                .borrow()
                .iter()
                .filter(|c| c.starts_with(op))
                .count();
            if self.fail_op.get() == op && self.fail_at.get() == seen {
                return Err(CallError {
                    op,
                    error: "CUDA_ERROR_UNKNOWN".into(),
                    out_of_memory: false,
                });
            }
            Ok(())
        }
        fn count(&self, op: &str) -> usize {
            self.calls
                .borrow()
                .iter()
                .filter(|c| c.starts_with(op))
                .count()
        }
    }

    // SAFETY: touches nothing; only records.
    unsafe impl PageDriver for Recorder {
        type Handle = u32;
        fn create(&self, bytes: usize) -> Result<u32, CallError> {
            self.call("create", format!("create {bytes}"))?;
            let h = self.next.get() + 1;
            self.next.set(h);
            self.live.borrow_mut().push(h);
            Ok(h)
        }
        unsafe fn map(&self, addr: u64, bytes: usize, handle: u32) -> Result<(), CallError> {
            self.call("map", format!("map {addr:#x} {bytes} {handle}"))
        }
        unsafe fn set_access(&self, addr: u64, bytes: usize) -> Result<(), CallError> {
            self.call("access", format!("access {addr:#x} {bytes}"))
        }
        unsafe fn unmap(&self, addr: u64, bytes: usize) -> Result<(), CallError> {
            self.call("unmap", format!("unmap {addr:#x} {bytes}"))
        }
        unsafe fn release(&self, handle: u32) -> Result<(), CallError> {
            self.call("release", format!("release {handle}"))?;
            self.live.borrow_mut().retain(|&h| h != handle);
            Ok(())
        }
    }

    #[test]
    fn a_range_gets_a_handle_per_granule_and_one_access_call() {
        let d = Recorder::default();
        let m = GranuleMap::new(G);
        // SAFETY: the recorder touches no memory.
        unsafe { m.map(&d, "fake", BASE, 5 * G) }.unwrap();
        assert_eq!(
            (d.count("create"), d.count("map"), d.count("access")),
            (5, 5, 1)
        );
        assert_eq!(
            d.calls.borrow().last().unwrap(),
            &format!("access {BASE:#x} {}", 5 * G)
        );
        assert_eq!(m.mapped_bytes(), 5 * G);
        // SAFETY: as above.
        unsafe { m.unmap(&d, "fake", BASE, 5 * G) }.unwrap();
        assert_eq!((d.count("unmap"), d.count("release")), (5, 5));
        assert_eq!(m.mapped_bytes(), 0);
        assert!(d.live.borrow().is_empty());
    }

    #[test]
    fn a_failed_map_undoes_the_granules_mapped_before_it_and_releases_every_handle() {
        for (op, at) in [("create", 3), ("map", 3), ("access", 1)] {
            let d = Recorder::failing(op, at);
            let m = GranuleMap::new(G);
            // SAFETY: the recorder touches no memory.
            let e = unsafe { m.map(&d, "fake", BASE, 4 * G) }.unwrap_err();
            assert!(e.to_string().contains(op), "{op}: {e}");
            assert_eq!(m.mapped_bytes(), 0, "{op}");
            assert!(
                d.live.borrow().is_empty(),
                "{op}: handles left {:?}",
                d.live
            );
            let mapped = if op == "access" { 4 } else { 2 };
            assert_eq!(d.count("unmap"), mapped, "{op}");
        }
    }

    #[test]
    fn a_range_that_is_not_whole_mapped_granules_is_refused_untouched() {
        let d = Recorder::default();
        let m = GranuleMap::new(G);
        // SAFETY: the recorder touches no memory.
        unsafe { m.map(&d, "fake", BASE, 2 * G) }.unwrap();
        let before = d.calls.borrow().len();
        for (addr, bytes) in [(BASE + 512, G), (BASE, G + 512), (BASE, 3 * G), (BASE, 0)] {
            // SAFETY: as above.
            assert!(unsafe { m.unmap(&d, "fake", addr, bytes) }.is_err());
        }
        // SAFETY: as above.
        assert!(unsafe { m.map(&d, "fake", BASE + 512, G) }.is_err());
        assert_eq!(d.calls.borrow().len(), before);
        assert_eq!(m.mapped_bytes(), 2 * G);
    }

    #[test]
    fn a_failed_unmap_maps_back_what_it_had_unmapped() {
        let d = Recorder::failing("unmap", 3);
        let m = GranuleMap::new(G);
        // SAFETY: the recorder touches no memory.
        unsafe { m.map(&d, "fake", BASE, 4 * G) }.unwrap();
        // SAFETY: as above.
        let e = unsafe { m.unmap(&d, "fake", BASE, 4 * G) }.unwrap_err();
        assert!(e.to_string().contains("unmap"), "{e}");
        assert_eq!(m.mapped_bytes(), 4 * G);
        // The two granules unmapped before the failure come back as one range: two handles,
        // one access call.
        assert_eq!((d.count("create"), d.count("access")), (6, 2));
        assert_eq!(d.live.borrow().len(), 4);
    }
}
