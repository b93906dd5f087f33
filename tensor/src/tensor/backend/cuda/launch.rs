//! Launching on a device: the [`Launcher`] trait every primitive goes through, and the real
//! one of a CUDA context ([`DeviceLauncher`]: its stream, the compiled module, a cuBLAS
//! handle). The tests drive the same primitives with a launcher that runs the kernel sources
//! compiled for the host.

use super::compile::{compile_all, prebuilt_ptx, PTX_ENV};
use super::kernels::{Gemm, Kernel, VgArgs};
use crate::device::CudaDevice;
use crate::driver::CurrentContext;
use crate::tensor::error::{Result, TensorError};
use crate::Device;
use cudarc::driver::{result as driver, PushKernelArg};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// How the backend reaches a device: kernel launches, GEMMs and copies, queued in order.
pub(crate) trait Launcher {
    /// Queues `kernel` over `items` work items with `args`.
    fn launch(&self, kernel: Kernel, items: u64, args: &VgArgs) -> Result<(), String>;
    /// Queues a GEMM.
    fn gemm(&self, gemm: &Gemm) -> Result<(), String>;
    /// Copies `src` to device address `dst` (the source may be reused once this returns).
    fn upload(&self, dst: u64, src: &[u8]) -> Result<(), String>;
    /// Copies from device address `src` into `dst` after all queued work.
    fn download(&self, dst: &mut [u8], src: u64) -> Result<(), String>;
}

pub(super) fn backend_error(op: &'static str, device: &Device, message: String) -> TensorError {
    TensorError::Backend {
        op,
        device: format!("{device:?}"),
        message,
    }
}

/// The real launcher of one CUDA context: its stream, the compiled kernels and (once a matmul
/// needs it) a cuBLAS handle bound to the stream.
pub(crate) struct DeviceLauncher {
    stream: Arc<CudaStream>,
    functions: HashMap<Kernel, CudaFunction>,
    blas: OnceLock<std::result::Result<Blas, String>>,
}

/// A cuBLAS handle, destroyed on drop.
struct Blas(cudarc::cublas::sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one call at a time; every use goes
// through `DeviceLauncher::gemm`, which holds `BLAS_LOCK`.
unsafe impl Send for Blas {}
// SAFETY: as above.
unsafe impl Sync for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created by `create_handle` and is destroyed once, here.
        let _ = unsafe { cudarc::cublas::result::destroy_handle(self.0) };
    }
}

static BLAS_LOCK: Mutex<()> = Mutex::new(());

impl DeviceLauncher {
    /// The launcher of `device`'s context, compiling the kernels on first use in this process.
    pub(crate) fn for_device(device: &CudaDevice, op: &'static str) -> Result<Arc<DeviceLauncher>> {
        static LAUNCHERS: OnceLock<Mutex<HashMap<usize, Arc<DeviceLauncher>>>> = OnceLock::new();
        let context = device.context();
        let key = context.cu_ctx() as usize;
        let launchers = LAUNCHERS.get_or_init(|| Mutex::new(HashMap::new()));
        let mut launchers = launchers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = launchers.get(&key) {
            return Ok(Arc::clone(l));
        }
        let launcher = Arc::new(
            DeviceLauncher::new(context)
                .map_err(|m| backend_error(op, &Device::Cuda(device.clone()), m))?,
        );
        launchers.insert(key, Arc::clone(&launcher));
        Ok(launcher)
    }

    fn new(context: &Arc<CudaContext>) -> Result<DeviceLauncher, String> {
        let ptx = match std::env::var_os(PTX_ENV) {
            Some(path) => prebuilt_ptx(std::path::Path::new(&path))?,
            None => compile_all()?,
        };
        let module = context
            .load_module(ptx)
            .map_err(|e| format!("loading the compiled kernels failed: {e}"))?;
        let mut functions = HashMap::new();
        for kernel in Kernel::ALL {
            let f = module
                .load_function(kernel.name())
                .map_err(|e| format!("kernel {} is missing: {e}", kernel.name()))?;
            functions.insert(kernel, f);
        }
        Ok(DeviceLauncher {
            stream: context.default_stream(),
            functions,
            blas: OnceLock::new(),
        })
    }

    fn blas(&self) -> Result<&Blas, String> {
        self.blas
            .get_or_init(|| {
                if !crate::driver::library_present(crate::driver::CudaLibrary::Cublas) {
                    return Err(
                        "cuBLAS (libcublas.so or libcublas.so.12) cannot be loaded; install \
                         the CUDA toolkit's cuBLAS or put its directory on LD_LIBRARY_PATH \
                         (scripts/gpu-check.sh links PyTorch's wheel's copy)"
                            .into(),
                    );
                }
                let _current = self.current()?;
                let handle = cudarc::cublas::result::create_handle()
                    .map_err(|e| format!("cublasCreate failed: {e}"))?;
                let blas = Blas(handle);
                // SAFETY: the handle is live and the stream belongs to the current context.
                unsafe { cudarc::cublas::result::set_stream(handle, self.stream.cu_stream() as _) }
                    .map_err(|e| format!("cublasSetStream failed: {e}"))?;
                Ok(blas)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Makes the stream's context current until the guard drops, pushed (see
    /// `driver.rs`): cudarc's `bind_to_thread` would replace the caller's context and
    /// report (and clear) an error recorded on the context earlier.
    fn current(&self) -> Result<CurrentContext, String> {
        let context = self.stream.context();
        CurrentContext::push(context, context.ordinal(), "a launcher call")
            .map_err(|e| format!("making the CUDA context current failed: {e}"))
    }
}

/// Set to `1` where a GPU run must not fall back (scripts/gpu-check.sh sets it on the GPU
/// machine): a missing cuBLAS is then an error instead of the slow GEMM kernel.
pub(crate) const REQUIRE_GPU_ENV: &str = "VRAMGUARD_REQUIRE_GPU";

/// The end of the warning printed when matmul falls back to the GEMM kernel (the GPU check
/// looks for it in its logs to say which GEMM path ran).
pub(crate) const GEMM_FALLBACK_NOTICE: &str = "matmul uses vramguard's own (slow) GEMM kernel";

impl Launcher for DeviceLauncher {
    fn launch(&self, kernel: Kernel, items: u64, args: &VgArgs) -> Result<(), String> {
        if items == 0 {
            return Ok(());
        }
        let f = self
            .functions
            .get(&kernel)
            .ok_or_else(|| format!("kernel {} was not loaded", kernel.name()))?;
        const THREADS: u64 = 256;
        // Grid-stride loops cover the rest beyond this many blocks.
        let blocks = items.div_ceil(THREADS).min(65_535) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = self.stream.launch_builder(f);
        builder.arg(args);
        // SAFETY: the kernel takes exactly one `VgArgs` (common.cuh); its pointers are live
        // allocations of this device held by the caller's tensors until the work is queued, and
        // any later reuse of those blocks is queued after it on this same stream.
        unsafe { builder.launch(cfg) }
            .map(|_| ())
            .map_err(|e| format!("launching {} failed: {e}", kernel.name()))
    }

    fn gemm(&self, g: &Gemm) -> Result<(), String> {
        use cudarc::cublas::sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let blas = match self.blas() {
            Ok(blas) => blas,
            Err(why) => {
                // A run that must measure the GPU (scripts/gpu-check.sh) must not pass on the
                // fallback: there the missing library is an error.
                if std::env::var(REQUIRE_GPU_ENV).is_ok_and(|v| v == "1") {
                    return Err(format!(
                        "{REQUIRE_GPU_ENV}=1 but {why}; matmul would use vramguard's own \
                         (slow) GEMM kernel"
                    ));
                }
                // Without cuBLAS the product still runs, through the simple kernel; said once,
                // on stderr unless a tracing subscriber takes it.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    crate::diagnostics::warn(
                        crate::diagnostics::WarningOutput::Auto,
                        &format!("{why}; {GEMM_FALLBACK_NOTICE}"),
                    )
                });
                let (items, args) = g.kernel_args();
                return self.launch(Kernel::Gemm, items, &args);
            }
        };
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| format!("{what} = {v} exceeds cuBLAS's 32-bit limit"))
        };
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let (alpha, beta) = (1.0f32, 0.0f32);
        let _serial = BLAS_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _current = self.current()?;
        // SAFETY: the pointers are live device allocations sized for the given dimensions,
        // leading dimensions and batch strides (checked by `matmul`); alpha and beta are host
        // values read during the call; the handle runs on this launcher's stream.
        unsafe {
            cudarc::cublas::result::sgemm_strided_batched(
                blas.0,
                op(g.transa),
                op(g.transb),
                int(g.m, "m")?,
                int(g.n, "n")?,
                int(g.k, "k")?,
                &alpha,
                g.a as *const f32,
                int(g.lda, "lda")?,
                g.stride_a as i64,
                g.b as *const f32,
                int(g.ldb, "ldb")?,
                g.stride_b as i64,
                &beta,
                g.c as *mut f32,
                int(g.ldc, "ldc")?,
                g.stride_c as i64,
                int(g.count, "batch count")?,
            )
        }
        .map_err(|e| format!("cublasSgemmStridedBatched failed: {e}"))
    }

    fn upload(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        if src.is_empty() {
            return Ok(());
        }
        let _current = self.current()?;
        // SAFETY: `dst` is a live allocation of at least `src.len()` bytes on this device; the
        // driver copies pageable memory out before returning, so `src` may be reused after.
        unsafe { driver::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| format!("cuMemcpyHtoDAsync failed: {e}"))
    }

    fn download(&self, dst: &mut [u8], src: u64) -> Result<(), String> {
        if dst.is_empty() {
            return Ok(());
        }
        let _current = self.current()?;
        // SAFETY: `src` is a live allocation of at least `dst.len()` bytes; the stream is
        // synchronised before `dst` is read or dropped.
        unsafe { driver::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(|e| format!("cuMemcpyDtoHAsync failed: {e}"))?;
        // SAFETY: the stream belongs to the current context.
        unsafe { driver::stream::synchronize(self.stream.cu_stream()) }
            .map_err(|e| format!("cuStreamSynchronize failed: {e}"))
    }
}
