//! A fake CUDA driver, and a fake cuBLAS, on host memory, that keeps the driver's rules: the
//! library that `scripts/fake-cuda.sh` links as `libcuda.so` (and `libcublas.so`) in a folder
//! of its own and puts on `LD_LIBRARY_PATH`, where cudarc (`dynamic-loading`) opens it instead
//! of NVIDIA's driver (`scripts/linking-check.sh` also links a program against it, as cudarc's
//! `dynamic-linking` does). Every CUDA test and GPU program of vramguard runs on it in CI.
//!
//! It owns nothing of vramguard: it implements the part of the driver API that cudarc and
//! vramguard call (modules `driver_api`, `execution_api` and `pool_api`; cuBLAS in `blas`), on
//! one device (ordinal 0) with one primary context, device memory the size of `FAKE_CUDA_MEMORY`.
//!
//! # The rules it enforces
//!
//! A breach fails the call with the driver's code and prints `fake cuda: CALL: what was wrong`
//! on stderr (a fault prints `fake cuda: kernel NAME faulted at ADDR (...)`):
//!
//! - **Initialisation and context**: every call but the version, error-name and pool-attribute
//!   ones fails with `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`; every call that works in a
//!   context (allocation, copies, memsets, streams, events, modules, launches, synchronisation,
//!   `cuMemGetInfo`) fails with `CUDA_ERROR_INVALID_CONTEXT` when no context is current on the
//!   calling thread (each thread has its own context stack: push, pop, get, set) or the
//!   primary context was released by every retain.
//! - **Virtual memory**: sizes, addresses and offsets of `cuMemAddressReserve`, `cuMemCreate`,
//!   `cuMemMap`, `cuMemSetAccess` and `cuMemUnmap` that are not multiples of the 2 MiB
//!   granularity fail with `CUDA_ERROR_INVALID_VALUE`, as do mapping over a mapped granule,
//!   setting access on or unmapping an unmapped one, unmapping part of a mapping, and freeing a
//!   reservation that still has mappings or with the wrong size.
//! - **Access**: a mapped granule is inaccessible until `cuMemSetAccess`; memory freed by
//!   `cuMemFree`, freed to the pool by `cuMemFreeAsync` (once the free ran in stream order),
//!   unmapped, or never allocated is inaccessible. A kernel that touches it faults (`SIGSEGV`
//!   caught, see `kernels`); a copy, memset or GEMM whose range it is fails when it runs. Both
//!   leave `CUDA_ERROR_ILLEGAL_ADDRESS` as the context's sticky error, returned by every later
//!   call in the context until the primary context is released, and drop the queued work. A
//!   range that is not allocated device memory at the call (or runs past its allocation) fails
//!   the call with `CUDA_ERROR_INVALID_VALUE`.
//! - **Stream order**: work on a stream runs in order, after the work it waits for (events,
//!   the legacy default stream's implicit waits); an event completes when the work before it
//!   has. By default work runs only when something waits for it (see `streams`), so a block
//!   reused across streams without a wait is overwritten by the late work every time.
//!   `cuMemUnmap` is not stream-ordered: queued work that touches unmapped granules faults.
//! - **Out of memory**: a request larger than the free device memory returns
//!   `CUDA_ERROR_OUT_OF_MEMORY` and changes nothing (the pool first gives back its cached
//!   memory, as the driver does).
//! - **Injection**: at the first successful `cuInit`, the library `CUDA_INJECTION64_PATH` names
//!   is loaded and its `InitializeInjection` called once, with no lock held (`injection`); a
//!   path that does not load or a library without the entry point is ignored, as the driver
//!   does.
//! - **Leaks**: at exit one line on stderr counts what is left (allocations, physical
//!   allocations, reservations, pool allocations, streams, events, modules, cuBLAS handles);
//!   `FAKE_CUDA_STRICT=1` turns a leak into exit status 3.
//!
//! What it does not check is listed in `docs/gpu.md` (what a GPU run is still needed for).
//!
//! # Settings (environment)
//!
//! | variable | meaning |
//! | --- | --- |
//! | `FAKE_CUDA_MEMORY` | device memory (`48GiB` by default); pages are host memory only once touched |
//! | `FAKE_CUDA_HOST_KERNELS` | `:`-separated shared libraries with the kernels' host builds |
//! | `FAKE_CUDA_EAGER=1` | run queued work at once instead of when waited for |
//! | `FAKE_CUDA_POLL_STEPS` | queries of unfinished work after which its stream runs one more operation (100) |
//! | `FAKE_CUDA_QUEUE_LIMIT` | operations a stream holds before its oldest runs (4096) |
//! | `FAKE_CUDA_FAIL` | `NAME:N[+][:ERROR],...`: call N (or N and later) of NAME fails with ERROR |
//! | `FAKE_CUDA_STRICT=1` | a leak at exit is exit status 3 |
//! | `FAKE_CUDA_VMM=0`, `FAKE_CUDA_POOLS=0` | the device reports no virtual memory management, no memory pools |
//! | `FAKE_CUDA_LOG=1` | every call and its result on stderr |
//!
//! # Design, and where it departs from the suggested one
//!
//! - Device addresses are host addresses, so the kernels' host builds dereference them.
//!   Physical memory is one sparse memfd the size of the device, handed out in whole 2 MiB
//!   granules (one file descriptor for any number of `cuMemCreate` handles, where a memfd per
//!   handle would run out of descriptors at 40 GiB of 2 MiB granules).
//! - Address space is never given back (`device_memory`), so a freed address is never handed
//!   out again and a late touch faults.
//! - The library is not named `libcuda.so` (see `Cargo.toml`): cargo puts its build folders on
//!   `LD_LIBRARY_PATH` for every test, so only a link made by the scripts makes it the driver.
//! - cuBLAS is faked in the same library (so its GEMMs queue on the fake's streams), computed
//!   by `matrixmultiply`: the runtime's cuBLAS path runs instead of only its fallback kernel.
//! - Every exported function passes through `api::call` with its name and a CUPTI-layout
//!   parameter struct: the seam for the fake CUPTI (`cupti`, issue #39), whose `cupti*`
//!   functions this library exports too, so that a `libcupti.so` link to it calls a
//!   subscriber from the driver's calls.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod api;
pub mod blas;
pub mod config;
pub mod cupti;
pub mod device_memory;
pub mod driver_api;
pub mod errors;
pub mod execution_api;
pub mod injection;
pub mod kernels;
pub mod pool;
pub mod pool_api;
pub mod ptx;
pub mod report;
pub mod state;
pub mod streams;
