//! The driver and runtime calls the observer subscribes to, and what a callback's parameters
//! say about each: pure translation of CUPTI's `(domain, callback id, NAME_params)` into a
//! [`MemoryCall`], with the layouts from cudarc's bindings (generated from NVIDIA's headers).
//! Nothing here is called back, locked or counted.

use cudarc::cupti::sys::{
    self, CUpti_CallbackDomain, CUpti_driver_api_trace_cbid as Driver,
    CUpti_runtime_api_trace_cbid as Runtime,
};
use std::ffi::c_void;

/// `CUPTI_CB_DOMAIN_DRIVER_API`.
pub(crate) const DRIVER_DOMAIN: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;
/// `CUPTI_CB_DOMAIN_RUNTIME_API`.
pub(crate) const RUNTIME_DOMAIN: u32 = CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;

/// What one allocating or freeing call does, read from its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryCall {
    /// Allocates `bytes`; the address is written to `out` when the call succeeds.
    Alloc {
        /// Where the call writes the address (a `CUdeviceptr*`, or a `void**` for the runtime).
        out: *const u64,
        /// Bytes asked for.
        bytes: u64,
        /// The stream of a stream-ordered allocation (0 otherwise, and for the legacy stream).
        stream: u64,
    },
    /// `cuMemAllocPitch`: `width × height` bytes with rows padded to a pitch written to
    /// `pitch`; the allocation is `pitch × height`.
    AllocPitch {
        /// Where the address goes.
        out: *const u64,
        /// Where the pitch goes.
        pitch: *const usize,
        /// Rows.
        height: u64,
    },
    /// Frees the allocation at `address`.
    Free {
        /// Its address.
        address: u64,
        /// The stream of a stream-ordered free.
        stream: u64,
    },
    /// `cuMemCreate`: physical memory of `bytes`, its handle written to `out`.
    CreatePhysical {
        /// Where the handle goes.
        out: *const u64,
        /// Bytes.
        bytes: u64,
    },
    /// `cuMemRelease`: the physical allocation `handle` is given back (its pages go once they
    /// are unmapped too).
    ReleasePhysical {
        /// The handle.
        handle: u64,
    },
    /// `cuMemMap`: `handle`'s memory mapped at `address` (from `offset` into it).
    Map {
        /// The mapping's address.
        address: u64,
        /// Offset into the physical allocation.
        offset: u64,
        /// The handle.
        handle: u64,
    },
}

/// A callback the observer enables: its domain, id and the API's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subscribed {
    pub(crate) domain: u32,
    pub(crate) cbid: u32,
    pub(crate) name: &'static str,
}

const fn driver(cbid: Driver, name: &'static str) -> Subscribed {
    Subscribed {
        domain: DRIVER_DOMAIN,
        cbid: cbid as u32,
        name,
    }
}

const fn runtime(cbid: Runtime, name: &'static str) -> Subscribed {
    Subscribed {
        domain: RUNTIME_DOMAIN,
        cbid: cbid as u32,
        name,
    }
}

/// Every callback the observer enables. The driver's 32-bit `cuMemAlloc`/`cuMemFree` (ids 29
/// and 33, before CUDA 3.2's 64-bit pointers) are not: no library of this century calls them.
pub(crate) const SUBSCRIBED: &[Subscribed] = &[
    driver(Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc"),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
        "cuMemAllocPitch",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
        "cuMemAllocManaged",
    ),
    driver(Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree"),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
        "cuMemAllocAsync",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
        "cuMemAllocAsync",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
        "cuMemAllocFromPoolAsync",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
        "cuMemAllocFromPoolAsync",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
        "cuMemFreeAsync",
    ),
    driver(
        Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
        "cuMemFreeAsync",
    ),
    driver(Driver::CUPTI_DRIVER_TRACE_CBID_cuMemCreate, "cuMemCreate"),
    driver(Driver::CUPTI_DRIVER_TRACE_CBID_cuMemRelease, "cuMemRelease"),
    driver(Driver::CUPTI_DRIVER_TRACE_CBID_cuMemMap, "cuMemMap"),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
        "cudaMalloc",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
        "cudaMallocPitch",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
        "cudaMallocManaged",
    ),
    runtime(Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree"),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
        "cudaMallocAsync",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
        "cudaMallocAsync",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
        "cudaMallocFromPoolAsync",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
        "cudaMallocFromPoolAsync",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
        "cudaFreeAsync",
    ),
    runtime(
        Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
        "cudaFreeAsync",
    ),
];

/// Callback ids are below this (CUDA 12.8's highest driver id is under 800).
const MAX_CBID: usize = 1024;

/// For each domain (driver, runtime) and callback id, 1 + the index in [`SUBSCRIBED`] (0: not
/// subscribed): every callback looks itself up, so a table beats a search.
const INDEX: [[u8; MAX_CBID]; 2] = {
    let mut index = [[0u8; MAX_CBID]; 2];
    let mut i = 0;
    while i < SUBSCRIBED.len() {
        let s = &SUBSCRIBED[i];
        index[(s.domain - DRIVER_DOMAIN) as usize][s.cbid as usize] = (i + 1) as u8;
        i += 1;
    }
    index
};

/// The subscribed callback `(domain, cbid)`, if it is one.
pub(crate) fn subscribed(domain: u32, cbid: u32) -> Option<&'static Subscribed> {
    let table = INDEX.get(domain.wrapping_sub(DRIVER_DOMAIN) as usize)?;
    match *table.get(cbid as usize)? {
        0 => None,
        i => SUBSCRIBED.get(i as usize - 1),
    }
}

/// Reads the parameters of callback `cbid` of `domain`.
///
/// # Safety
/// `params` points to the `NAME_params` struct of that callback (CUPTI's `functionParams`).
pub(crate) unsafe fn decode(domain: u32, cbid: u32, params: *const c_void) -> Option<MemoryCall> {
    if params.is_null() {
        return None;
    }
    if domain == DRIVER_DOMAIN {
        // SAFETY: the caller's contract: `params` is this callback's parameter struct.
        unsafe { decode_driver(cbid, params) }
    } else if domain == RUNTIME_DOMAIN {
        // SAFETY: as above.
        unsafe { decode_runtime(cbid, params) }
    } else {
        None
    }
}

/// # Safety
/// As [`decode`].
unsafe fn decode_driver(cbid: u32, params: *const c_void) -> Option<MemoryCall> {
    // SAFETY (each arm): `params` is the parameter struct of callback `cbid`, whose type the
    // arm names.
    unsafe {
        Some(match cbid {
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2 as u32 => {
                let p = &*params.cast::<sys::cuMemAlloc_v2_params>();
                alloc(p.dptr, p.bytesize, std::ptr::null_mut())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged as u32 => {
                let p = &*params.cast::<sys::cuMemAllocManaged_params>();
                alloc(p.dptr, p.bytesize, std::ptr::null_mut())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2 as u32 => {
                let p = &*params.cast::<sys::cuMemAllocPitch_v2_params>();
                MemoryCall::AllocPitch {
                    out: p.dptr,
                    pitch: p.pPitch,
                    height: p.Height as u64,
                }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync as u32 => {
                let p = &*params.cast::<sys::cuMemAllocAsync_params>();
                alloc(p.dptr, p.bytesize, p.hStream.cast())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz as u32 => {
                let p = &*params.cast::<sys::cuMemAllocAsync_ptsz_params>();
                alloc(p.dptr, p.bytesize, p.hStream.cast())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync as u32 => {
                let p = &*params.cast::<sys::cuMemAllocFromPoolAsync_params>();
                alloc(p.dptr, p.bytesize, p.hStream.cast())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz as u32 => {
                let p = &*params.cast::<sys::cuMemAllocFromPoolAsync_ptsz_params>();
                alloc(p.dptr, p.bytesize, p.hStream.cast())
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2 as u32 => {
                let p = &*params.cast::<sys::cuMemFree_v2_params>();
                MemoryCall::Free {
                    address: p.dptr,
                    stream: 0,
                }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync as u32 => {
                let p = &*params.cast::<sys::cuMemFreeAsync_params>();
                MemoryCall::Free {
                    address: p.dptr,
                    stream: p.hStream as u64,
                }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz as u32 => {
                let p = &*params.cast::<sys::cuMemFreeAsync_ptsz_params>();
                MemoryCall::Free {
                    address: p.dptr,
                    stream: p.hStream as u64,
                }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemCreate as u32 => {
                let p = &*params.cast::<sys::cuMemCreate_params>();
                MemoryCall::CreatePhysical {
                    out: p.handle,
                    bytes: p.size as u64,
                }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemRelease as u32 => {
                let p = &*params.cast::<sys::cuMemRelease_params>();
                MemoryCall::ReleasePhysical { handle: p.handle }
            }
            c if c == Driver::CUPTI_DRIVER_TRACE_CBID_cuMemMap as u32 => {
                let p = &*params.cast::<sys::cuMemMap_params>();
                MemoryCall::Map {
                    address: p.ptr,
                    offset: p.offset as u64,
                    handle: p.handle,
                }
            }
            _ => return None,
        })
    }
}

/// # Safety
/// As [`decode`].
unsafe fn decode_runtime(cbid: u32, params: *const c_void) -> Option<MemoryCall> {
    // SAFETY (each arm): `params` is the parameter struct of callback `cbid`, whose type the
    // arm names; a `void**` out-parameter holds a pointer, which is a 64-bit device address.
    unsafe {
        Some(match cbid {
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 as u32 => {
                let p = &*params.cast::<sys::cudaMalloc_v3020_params>();
                alloc(p.devPtr.cast(), p.size, std::ptr::null_mut())
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000 as u32 => {
                let p = &*params.cast::<sys::cudaMallocManaged_v6000_params>();
                alloc(p.devPtr.cast(), p.size, std::ptr::null_mut())
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020 as u32 => {
                let p = &*params.cast::<sys::cudaMallocPitch_v3020_params>();
                MemoryCall::AllocPitch {
                    out: p.devPtr.cast(),
                    pitch: p.pitch,
                    height: p.height as u64,
                }
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020 as u32 => {
                let p = &*params.cast::<sys::cudaMallocAsync_v11020_params>();
                alloc(p.devPtr.cast(), p.size, p.hStream.cast())
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020 as u32 => {
                let p = &*params.cast::<sys::cudaMallocAsync_ptsz_v11020_params>();
                alloc(p.devPtr.cast(), p.size, p.hStream.cast())
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020 as u32 => {
                let p = &*params.cast::<sys::cudaMallocFromPoolAsync_v11020_params>();
                alloc(p.ptr.cast(), p.size, p.stream.cast())
            }
            c if c
                == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020 as u32 =>
            {
                let p = &*params.cast::<sys::cudaMallocFromPoolAsync_ptsz_v11020_params>();
                alloc(p.ptr.cast(), p.size, p.stream.cast())
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020 as u32 => {
                let p = &*params.cast::<sys::cudaFree_v3020_params>();
                MemoryCall::Free {
                    address: p.devPtr as u64,
                    stream: 0,
                }
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020 as u32 => {
                let p = &*params.cast::<sys::cudaFreeAsync_v11020_params>();
                MemoryCall::Free {
                    address: p.devPtr as u64,
                    stream: p.hStream as u64,
                }
            }
            c if c == Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020 as u32 => {
                let p = &*params.cast::<sys::cudaFreeAsync_ptsz_v11020_params>();
                MemoryCall::Free {
                    address: p.devPtr as u64,
                    stream: p.hStream as u64,
                }
            }
            _ => return None,
        })
    }
}

fn alloc(out: *mut u64, bytes: usize, stream: *mut c_void) -> MemoryCall {
    MemoryCall::Alloc {
        out: out.cast_const(),
        bytes: bytes as u64,
        stream: stream as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_parameters_read_as_the_call_made() {
        let mut address = 0u64;
        let stream = 0x5000usize as cudarc::driver::sys::CUstream;
        let params = sys::cuMemAllocAsync_params {
            dptr: &mut address,
            bytesize: 4096,
            hStream: stream,
        };
        let cbid = Driver::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync as u32;
        // SAFETY: the parameter struct of that callback.
        let call = unsafe { decode(DRIVER_DOMAIN, cbid, (&raw const params).cast()) };
        assert_eq!(
            call,
            Some(MemoryCall::Alloc {
                out: &address,
                bytes: 4096,
                stream: 0x5000
            })
        );
        let params = sys::cuMemFreeAsync_params {
            dptr: 0xabc000,
            hStream: stream,
        };
        let cbid = Driver::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync as u32;
        // SAFETY: as above.
        let call = unsafe { decode(DRIVER_DOMAIN, cbid, (&raw const params).cast()) };
        assert_eq!(
            call,
            Some(MemoryCall::Free {
                address: 0xabc000,
                stream: 0x5000
            })
        );
        assert_eq!(
            subscribed(DRIVER_DOMAIN, cbid).map(|s| s.name),
            Some("cuMemFreeAsync")
        );
        assert_eq!(subscribed(DRIVER_DOMAIN, 1), None);
        assert_eq!(subscribed(RUNTIME_DOMAIN, cbid), None);
        assert_eq!(subscribed(7, cbid), None);
        for s in SUBSCRIBED {
            assert_eq!(subscribed(s.domain, s.cbid), Some(s));
        }
    }

    /// libtorch's caching allocator asks the runtime (`cudaMalloc`): its parameters read with
    /// the runtime's layouts.
    #[test]
    fn the_runtime_parameters_read_as_the_call_made() {
        let mut address: *mut c_void = std::ptr::null_mut();
        let params = sys::cudaMalloc_v3020_params {
            devPtr: &mut address,
            size: 2 << 20,
        };
        let cbid = Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020 as u32;
        // SAFETY: the parameter struct of that callback.
        let call = unsafe { decode(RUNTIME_DOMAIN, cbid, (&raw const params).cast()) };
        assert_eq!(
            call,
            Some(MemoryCall::Alloc {
                out: (&address as *const *mut c_void).cast(),
                bytes: 2 << 20,
                stream: 0
            })
        );
        let params = sys::cudaFree_v3020_params {
            devPtr: 0x7f00_0000usize as *mut c_void,
        };
        let cbid = Runtime::CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020 as u32;
        // SAFETY: as above.
        let call = unsafe { decode(RUNTIME_DOMAIN, cbid, (&raw const params).cast()) };
        assert_eq!(
            call,
            Some(MemoryCall::Free {
                address: 0x7f00_0000,
                stream: 0
            })
        );
        // SAFETY: a null parameter pointer is refused before it is read.
        assert_eq!(
            unsafe { decode(RUNTIME_DOMAIN, cbid, std::ptr::null()) },
            None
        );
    }

    #[test]
    fn every_subscribed_callback_decodes() {
        let zeros = [0u8; 64];
        for s in SUBSCRIBED {
            // SAFETY: 64 zero bytes hold any of these parameter structs (null pointers, zero
            // sizes), and decoding only copies fields.
            let call = unsafe { decode(s.domain, s.cbid, zeros.as_ptr().cast()) };
            assert!(call.is_some(), "{} ({}, {})", s.name, s.domain, s.cbid);
        }
    }
}
