//! Helpers shared by the CUDA tests: opening the GPU or printing why a test skips, the driver's
//! free memory, raw device reads and writes, the tiny PTX kernels, and the figures file.
//!
//! Kernels are PTX text loaded with `cuModuleLoadData` (the driver compiles PTX itself), so the
//! tests need neither NVRTC nor nvcc on the GPU machine. The fake CUDA driver (`fake-cuda/`,
//! `scripts/fake-cuda.sh`) runs their host build instead: `test_kernels.cu`, the same kernels as
//! source, whose names and parameters match the PTX's entries.

#![allow(dead_code)]

use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::ffi::{c_void, CString};
use std::io::Write;
use std::sync::Arc;
use vramguard_alloc::AllocatorConfig;
use vramguard_alloc::ContextError;
use vramguard_memory::device::DeviceError;
use vramguard_memory::Device;

/// Whether the run demands a GPU (`scripts/gpu-check.sh run` sets it on the GPU machine).
pub fn require_gpu() -> bool {
    std::env::var("VRAMGUARD_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// Prints the skip line (and fails instead when a GPU is required).
pub fn skip(test: &str, why: &str) {
    assert!(!require_gpu(), "VRAMGUARD_REQUIRE_GPU=1 but {why}");
    println!("{test}: skipped: {why}");
}

/// Held by each test for its whole run: the tests measure the driver's free memory and time
/// kernels against the host, so they must not overlap (`cargo test` runs tests in parallel).
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

/// GPU 0 with an allocator of its own built from `config`, or `None` after printing why the
/// test skips.
pub fn own_device(test: &str, config: AllocatorConfig) -> Option<Device> {
    match Device::cuda_with_config(0, config) {
        Ok(d) => Some(d),
        Err(DeviceError::Context(ContextError::NoDriver)) => {
            skip(test, "no CUDA driver (libcuda.so not found)");
            None
        }
        Err(e @ DeviceError::Context(ContextError::NoDevice { .. })) => {
            skip(test, &format!("no CUDA device ({e})"));
            None
        }
        Err(e @ DeviceError::Context(ContextError::Driver { op: "cuInit", .. })) => {
            skip(test, &format!("the CUDA driver does not start ({e})"));
            None
        }
        Err(e) => panic!("{test}: opening cuda:0 failed: {e}"),
    }
}

/// The context of a CUDA device.
pub fn context(device: &Device) -> Arc<CudaContext> {
    Arc::clone(device.cuda_context().expect("a CUDA device"))
}

/// The driver's free memory on the device (`cuMemGetInfo`).
pub fn driver_free(ctx: &Arc<CudaContext>) -> usize {
    ctx.bind_to_thread().unwrap();
    result::mem_get_info().unwrap().0
}

/// Fills `words` 32-bit words at `addr` with `value` and waits for it.
pub fn fill(ctx: &Arc<CudaContext>, addr: u64, words: usize, value: u32) {
    ctx.bind_to_thread().unwrap();
    // SAFETY: the caller passes memory it owns of at least `words` words.
    unsafe { sys::cuMemsetD32_v2(addr, value, words) }
        .result()
        .unwrap();
    ctx.synchronize().unwrap();
}

/// Copies `words` 32-bit words at `addr` to the host.
pub fn read(ctx: &Arc<CudaContext>, addr: u64, words: usize) -> Vec<u32> {
    ctx.bind_to_thread().unwrap();
    let mut host = vec![0u32; words];
    // SAFETY: the caller passes memory it owns of at least `words` words.
    unsafe { result::memcpy_dtoh_sync(&mut host, addr) }.unwrap();
    host
}

/// `slow_fill(buf, n, value, spins)`: each thread waits `spins` clock cycles, then writes
/// `value` to its word of `buf` (if below `n`). `fault(p)`: writes through `p`.
const KERNELS: &str = r#"
.version 7.0
.target sm_52
.address_size 64

.visible .entry slow_fill(
    .param .u64 slow_fill_buf,
    .param .u32 slow_fill_n,
    .param .u32 slow_fill_value,
    .param .u64 slow_fill_spins
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<9>;

    ld.param.u64 %rd1, [slow_fill_buf];
    ld.param.u32 %r1, [slow_fill_n];
    ld.param.u32 %r2, [slow_fill_value];
    ld.param.u64 %rd2, [slow_fill_spins];
    cvta.to.global.u64 %rd3, %rd1;
    mov.u64 %rd4, %clock64;
$L_spin:
    mov.u64 %rd5, %clock64;
    sub.s64 %rd6, %rd5, %rd4;
    setp.lt.s64 %p1, %rd6, %rd2;
    @%p1 bra $L_spin;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p2, %r6, %r1;
    @%p2 bra $L_done;
    mul.wide.u32 %rd7, %r6, 4;
    add.s64 %rd8, %rd3, %rd7;
    st.global.u32 [%rd8], %r2;
$L_done:
    ret;
}

.visible .entry fault(
    .param .u64 fault_p
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [fault_p];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"#;

/// The test kernels, loaded into the device's context.
pub struct Kernels {
    slow_fill: sys::CUfunction,
    fault: sys::CUfunction,
}

impl Kernels {
    /// Loads the PTX module (the driver JIT-compiles it for the GPU).
    pub fn load(ctx: &Arc<CudaContext>) -> Kernels {
        ctx.bind_to_thread().unwrap();
        let image = CString::new(KERNELS).unwrap();
        // SAFETY: a NUL-terminated PTX text; the module lives as long as the process (tests).
        let module = unsafe { result::module::load_data(image.as_ptr().cast()) }
            .expect("cuModuleLoadData of the test kernels");
        // SAFETY: the module was just loaded and is never unloaded.
        let function = |name: &str| unsafe {
            result::module::get_function(module, CString::new(name).unwrap()).unwrap()
        };
        Kernels {
            slow_fill: function("slow_fill"),
            fault: function("fault"),
        }
    }

    /// Queues `slow_fill` on `stream`: every word of `[addr, addr + 4 * words)` becomes `value`
    /// after each thread waited `spins` clock cycles.
    pub fn slow_fill(&self, stream: &CudaStream, addr: u64, words: u32, value: u32, spins: u64) {
        stream.context().bind_to_thread().unwrap();
        let (mut a, mut n, mut v, mut s) = (addr, words, value, spins);
        let mut params: [*mut c_void; 4] = [
            (&mut a as *mut u64).cast(),
            (&mut n as *mut u32).cast(),
            (&mut v as *mut u32).cast(),
            (&mut s as *mut u64).cast(),
        ];
        let blocks = words.div_ceil(256);
        // SAFETY: the parameters match the kernel's and live through the call (the driver
        // copies them); the caller owns the memory the kernel writes.
        unsafe {
            result::launch_kernel(
                self.slow_fill,
                (blocks, 1, 1),
                (256, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
        .unwrap();
    }

    /// Queues `fault` on `stream`, which writes through `addr` (an invalid address faults).
    pub fn fault(&self, stream: &CudaStream, addr: u64) {
        stream.context().bind_to_thread().unwrap();
        let mut a = addr;
        let mut params: [*mut c_void; 1] = [(&mut a as *mut u64).cast()];
        // SAFETY: the parameter matches the kernel's; the fault is the point of this launch.
        unsafe {
            result::launch_kernel(
                self.fault,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
        .unwrap();
    }
}

/// Appends one figure to the JSON-lines file named by `VRAMGUARD_GPU_FIGURES` (set by
/// `scripts/gpu-check.sh`), and prints it.
pub fn figure(test: &str, metric: &str, value: f64, unit: &str) {
    let line = format!(
        "{{\"bench\":\"{test}\",\"metric\":\"{metric}\",\"value\":{value},\"unit\":\"{unit}\"}}"
    );
    println!("{line}");
    if let Ok(path) = std::env::var("VRAMGUARD_GPU_FIGURES") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}
