//! The CUDA backend: the primitives of [`super`] as launches of the kernels in
//! `runtime/kernels/*.cu` (compiled by NVRTC once per context and cached) and cuBLAS GEMMs, all
//! queued on the device's stream (the context's default stream), on memory from the device's
//! caching allocator.
//!
//! Everything here talks to the device through [`Launcher`]: [`DeviceLauncher`] is the real
//! one; the tests drive the same code with a launcher that runs the kernel sources compiled for
//! the host (see `scripts/kernels-check.sh`), so the argument marshalling and the kernels'
//! indexing are checked without a GPU.

use super::super::error::{Result, TensorError};
use super::super::kinds::{
    broadcast_strides, checked_numel, contiguous_strides, AdamStep, MapOp, MatmulShape, ZipOp,
};
use super::super::storage::{Storage, Strided, StridedRef};
use crate::device::CudaDevice;
use crate::driver::CurrentContext;
use crate::Device;
use cudarc::driver::{result as driver, PushKernelArg};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DeviceRepr, LaunchConfig};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The kernel sources, in the order they are compiled; `common.cuh` is prepended to each.
pub(crate) const KERNEL_SOURCES: [(&str, &str); 8] = [
    (
        "elementwise.cu",
        include_str!("../../../kernels/elementwise.cu"),
    ),
    ("reduce.cu", include_str!("../../../kernels/reduce.cu")),
    ("softmax.cu", include_str!("../../../kernels/softmax.cu")),
    (
        "layer_norm.cu",
        include_str!("../../../kernels/layer_norm.cu"),
    ),
    (
        "embedding.cu",
        include_str!("../../../kernels/embedding.cu"),
    ),
    (
        "cross_entropy.cu",
        include_str!("../../../kernels/cross_entropy.cu"),
    ),
    ("gemm.cu", include_str!("../../../kernels/gemm.cu")),
    ("adam.cu", include_str!("../../../kernels/adam.cu")),
];

/// What every kernel source starts with: the argument block and index helpers.
pub(crate) const KERNEL_COMMON: &str = include_str!("../../../kernels/common.cuh");

/// One kernel of the sources above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Map,
    Zip,
    SumRows,
    Softmax,
    LayerNorm,
    LayerNormBackwardInput,
    LayerNormBackwardParams,
    Embedding,
    EmbeddingBackward,
    CrossEntropy,
    CrossEntropyBackward,
    Gemm,
    Adam,
}

impl Kernel {
    pub(crate) const ALL: [Kernel; 13] = [
        Kernel::Map,
        Kernel::Zip,
        Kernel::SumRows,
        Kernel::Softmax,
        Kernel::LayerNorm,
        Kernel::LayerNormBackwardInput,
        Kernel::LayerNormBackwardParams,
        Kernel::Embedding,
        Kernel::EmbeddingBackward,
        Kernel::CrossEntropy,
        Kernel::CrossEntropyBackward,
        Kernel::Gemm,
        Kernel::Adam,
    ];

    /// The `extern "C"` name in the sources.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::Map => "vg_map",
            Kernel::Zip => "vg_zip",
            Kernel::SumRows => "vg_sum_rows",
            Kernel::Softmax => "vg_softmax",
            Kernel::LayerNorm => "vg_layer_norm",
            Kernel::LayerNormBackwardInput => "vg_layer_norm_backward_input",
            Kernel::LayerNormBackwardParams => "vg_layer_norm_backward_params",
            Kernel::Embedding => "vg_embedding",
            Kernel::EmbeddingBackward => "vg_embedding_backward",
            Kernel::CrossEntropy => "vg_cross_entropy",
            Kernel::CrossEntropyBackward => "vg_cross_entropy_backward",
            Kernel::Gemm => "vg_gemm",
            Kernel::Adam => "vg_adam",
        }
    }
}

/// Most dimensions an element-wise kernel indexes (after merging contiguous ones).
pub(crate) const MAX_RANK: usize = 8;

/// The argument block of every kernel: `struct VgArgs` in `runtime/kernels/common.cuh`, field
/// for field. Pointers are device addresses (host addresses under the host launcher).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct VgArgs {
    pub(crate) out: u64,
    pub(crate) out2: u64,
    pub(crate) out3: u64,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) c: u64,
    pub(crate) d: u64,
    pub(crate) e: u64,
    pub(crate) ids: u64,
    pub(crate) n: u64,
    pub(crate) rank: u64,
    pub(crate) shape: [u64; MAX_RANK],
    pub(crate) out_strides: [u64; MAX_RANK],
    pub(crate) a_strides: [u64; MAX_RANK],
    pub(crate) b_strides: [u64; MAX_RANK],
    pub(crate) out_offset: u64,
    pub(crate) a_offset: u64,
    pub(crate) b_offset: u64,
    pub(crate) len: u64,
    pub(crate) inner: u64,
    pub(crate) op: i32,
    pub(crate) s0: f32,
    pub(crate) s1: f32,
    pub(crate) s2: f32,
    pub(crate) s3: f32,
    pub(crate) s4: f32,
    pub(crate) s5: f32,
}

// SAFETY: `VgArgs` is `#[repr(C)]` plain data (integers and floats) whose layout matches the
// kernels' `struct VgArgs` (same field order and types; 64-bit pointers as u64), so its bytes
// are a valid kernel parameter.
unsafe impl DeviceRepr for VgArgs {}

/// One column-major strided-batched SGEMM, as cuBLAS defines it:
/// `C_i = op(A_i) · op(B_i)` for `count` batches, `op(A)` m×k, `op(B)` k×n, `C` m×n.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gemm {
    pub(crate) transa: bool,
    pub(crate) transb: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: u64,
    pub(crate) lda: usize,
    pub(crate) stride_a: usize,
    pub(crate) b: u64,
    pub(crate) ldb: usize,
    pub(crate) stride_b: usize,
    pub(crate) c: u64,
    pub(crate) ldc: usize,
    pub(crate) stride_c: usize,
    pub(crate) count: usize,
}

impl Gemm {
    /// The same product as a launch of `vg_gemm` (runtime/kernels/gemm.cu): `(items, args)`.
    pub(crate) fn kernel_args(&self) -> (u64, VgArgs) {
        let mut args = VgArgs {
            out: self.c,
            a: self.a,
            b: self.b,
            n: (self.m * self.n * self.count) as u64,
            op: i32::from(self.transa) | (i32::from(self.transb) << 1),
            ..Default::default()
        };
        args.shape[..3].copy_from_slice(&[self.m as u64, self.n as u64, self.k as u64]);
        args.a_strides[..2].copy_from_slice(&[self.lda as u64, self.stride_a as u64]);
        args.b_strides[..2].copy_from_slice(&[self.ldb as u64, self.stride_b as u64]);
        args.out_strides[..2].copy_from_slice(&[self.ldc as u64, self.stride_c as u64]);
        (args.n, args)
    }
}

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

fn backend_error(op: &'static str, device: &Device, message: String) -> TensorError {
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
                // SAFETY: only probes whether the library can be loaded.
                if !unsafe { cudarc::cublas::sys::is_culib_present() } {
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

/// Names a PTX file of the kernels built beforehand (`scripts/kernels-check.sh` writes
/// `target/kernels-ptx/vramguard_kernels.ptx`), loaded instead of compiling with NVRTC: for a
/// machine with a driver but without the runtime compiler.
pub(crate) const PTX_ENV: &str = "VRAMGUARD_KERNELS_PTX";

/// All kernel sources as one program, the module every context loads.
pub(crate) fn kernel_source() -> String {
    let mut source = String::from(KERNEL_COMMON);
    for (_, text) in KERNEL_SOURCES {
        source.push_str(text);
    }
    source
}

/// The first line of a prebuilt PTX file: names the sources it was compiled from (FNV-1a of
/// [`kernel_source`]), so a file from other sources is refused rather than launched.
pub(crate) fn ptx_header() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in kernel_source().bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("// vramguard kernels {hash:016x}")
}

fn prebuilt_ptx(path: &std::path::Path) -> Result<cudarc::nvrtc::Ptx, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {PTX_ENV}={}: {e}", path.display()))?;
    if text.lines().next() != Some(ptx_header().as_str()) {
        return Err(format!(
            "{PTX_ENV}={} was compiled from other kernel sources than this build's; rebuild it \
             with scripts/kernels-check.sh, or unset {PTX_ENV} to compile with NVRTC",
            path.display()
        ));
    }
    Ok(cudarc::nvrtc::Ptx::from_src(text))
}

/// The kernel sources compiled by NVRTC into one module (PTX).
pub(crate) fn compile_all() -> Result<cudarc::nvrtc::Ptx, String> {
    compile(&kernel_source(), "vramguard_kernels.cu")
}

/// Compiles one source with NVRTC (loaded at run time, like the driver).
pub(crate) fn compile(source: &str, name: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    // SAFETY: only probes whether the library can be loaded (cudarc would panic otherwise).
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(format!(
            "NVRTC (libnvrtc.so.12) cannot be loaded, so the kernels cannot be compiled; \
                 install the CUDA 12 runtime compiler (e.g. the PyPI wheel \
                 nvidia-cuda-nvrtc-cu12) and put its lib directory on LD_LIBRARY_PATH, or set \
                 {PTX_ENV} to the PTX file scripts/kernels-check.sh writes"
        ));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        name: Some(name.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts)
        .map_err(|e| format!("NVRTC could not compile {name}: {e}"))
}

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

// ----- tensors on the launcher -----

fn launch<'a>(
    l: &dyn Launcher,
    op: &'static str,
    t: impl Into<StridedRef<'a>>,
    kernel: Kernel,
    items: u64,
    args: &VgArgs,
) -> Result<()> {
    l.launch(kernel, items, args)
        .map_err(|m| backend_error(op, t.into().device(), m))
}

/// Byte address of element `offset` of `t`'s storage.
fn addr<'a>(t: impl Into<StridedRef<'a>>) -> u64 {
    let t = t.into();
    element_addr(t.storage(), t.offset())
}

fn element_addr(storage: &Storage, offset: usize) -> u64 {
    storage.device_addr() + (offset * std::mem::size_of::<f32>()) as u64
}

/// A fresh contiguous tensor whose elements the caller's launches write before it is read.
#[track_caller]
fn uninit(device: &Device, shape: &[usize], op: &'static str) -> Result<Strided> {
    let numel = checked_numel(op, shape)?;
    let storage = Storage::new(device, numel, shape, op)?;
    // The kernel's write is the storage's first use, as `fresh_mut` marks it on the host.
    storage.note_use_end();
    Ok(Strided::contiguous(storage, shape))
}

/// Merges dimensions that are contiguous for every operand and drops size-1 ones, so the
/// kernels index as few dimensions as possible; fails past [`MAX_RANK`].
fn coalesce<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
) -> Result<(Vec<usize>, [Vec<usize>; N])> {
    let mut dims: Vec<usize> = Vec::new();
    let mut strd: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        if let Some(last) = dims.last_mut() {
            if (0..N).all(|j| strd[j][strd[j].len() - 1] == strides[j][d] * size) {
                *last *= size;
                for j in 0..N {
                    let end = strd[j].len() - 1;
                    strd[j][end] = strides[j][d];
                }
                continue;
            }
        }
        dims.push(size);
        for j in 0..N {
            strd[j].push(strides[j][d]);
        }
    }
    if dims.len() > MAX_RANK {
        return Err(TensorError::InvalidArgument {
            op,
            shape: shape.to_vec(),
            message: format!(
                "the CUDA kernels index at most {MAX_RANK} non-contiguous dimensions; make the \
                 tensor contiguous first"
            ),
        });
    }
    Ok((dims, strd))
}

fn fill_shape(args: &mut VgArgs, dims: &[usize], strides: [&[usize]; 3]) {
    args.rank = dims.len() as u64;
    for (i, &d) in dims.iter().enumerate() {
        args.shape[i] = d as u64;
        args.out_strides[i] = strides[0][i] as u64;
        args.a_strides[i] = strides[1][i] as u64;
        args.b_strides[i] = strides[2][i] as u64;
    }
}

/// `vg_map` from `src` (layout `src_strides` from `src_addr`) into `dst` over `shape`.
#[allow(clippy::too_many_arguments)]
fn launch_map(
    l: &dyn Launcher,
    op: &'static str,
    t: StridedRef<'_>,
    shape: &[usize],
    dst: (u64, &[usize]),
    src: (u64, &[usize]),
    f: MapOp,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let (dims, [so, sa]) = coalesce(op, shape, [dst.1, src.1])?;
    let (code, s0, s1) = f.code();
    let mut args = VgArgs {
        out: dst.0,
        a: src.0,
        n: n as u64,
        op: code,
        s0,
        s1,
        ..Default::default()
    };
    fill_shape(&mut args, &dims, [&so, &sa, &sa]);
    launch(l, op, t, Kernel::Map, n as u64, &args)
}

/// `vg_zip` of `a` and `b` into `dst` over `shape`.
#[allow(clippy::too_many_arguments)]
fn launch_zip(
    l: &dyn Launcher,
    op: &'static str,
    t: StridedRef<'_>,
    shape: &[usize],
    dst: (u64, &[usize]),
    a: (u64, &[usize]),
    b: (u64, &[usize]),
    f: ZipOp,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let (dims, [so, sa, sb]) = coalesce(op, shape, [dst.1, a.1, b.1])?;
    let mut args = VgArgs {
        out: dst.0,
        a: a.0,
        b: b.0,
        n: n as u64,
        op: f.code(),
        ..Default::default()
    };
    fill_shape(&mut args, &dims, [&so, &sa, &sb]);
    launch(l, op, t, Kernel::Zip, n as u64, &args)
}

pub(crate) fn map(
    l: &dyn Launcher,
    src: StridedRef<'_>,
    op: &'static str,
    f: MapOp,
) -> Result<Strided> {
    let out = uninit(src.device(), src.dims(), op)?;
    let so = contiguous_strides(src.dims());
    launch_map(
        l,
        op,
        src,
        src.dims(),
        (addr(&out), &so),
        (addr(src), src.strides()),
        f,
    )?;
    src.storage().note_use_end();
    Ok(out)
}

pub(crate) fn map_inplace(
    l: &dyn Launcher,
    dst: StridedRef<'_>,
    op: &'static str,
    f: MapOp,
) -> Result<()> {
    let target = (addr(dst), dst.strides());
    launch_map(l, op, dst, dst.dims(), target, target, f)?;
    dst.storage().note_use_end();
    Ok(())
}

pub(crate) fn zip(
    l: &dyn Launcher,
    a: StridedRef<'_>,
    b: StridedRef<'_>,
    shape: &[usize],
    op: &'static str,
    f: ZipOp,
) -> Result<Strided> {
    let sa = broadcast_strides(a.dims(), a.strides(), shape);
    let sb = broadcast_strides(b.dims(), b.strides(), shape);
    let out = uninit(a.device(), shape, op)?;
    let so = contiguous_strides(shape);
    launch_zip(
        l,
        op,
        a,
        shape,
        (addr(&out), &so),
        (addr(a), &sa),
        (addr(b), &sb),
        f,
    )?;
    a.storage().note_use_end();
    b.storage().note_use_end();
    Ok(out)
}

pub(crate) fn zip_inplace(
    l: &dyn Launcher,
    dst: StridedRef<'_>,
    src: StridedRef<'_>,
    op: &'static str,
    f: ZipOp,
) -> Result<()> {
    let ss = broadcast_strides(src.dims(), src.strides(), dst.dims());
    let target = (addr(dst), dst.strides());
    launch_zip(l, op, dst, dst.dims(), target, target, (addr(src), &ss), f)?;
    dst.storage().note_use_end();
    src.storage().note_use_end();
    Ok(())
}

/// A GEMM operand: a matrix of `rows`×`cols` per batch, in a layout cuBLAS can read.
struct Operand {
    /// The operand, or a copy of it when its own layout could not be used.
    data: Strided,
    /// Row-major (`true`: consecutive columns adjacent) or column-major.
    row_major: bool,
    ld: usize,
    /// Element stride of each batch dim (0 where it is broadcast).
    batch_strides: Vec<usize>,
}

/// `t` (`[.., rows, cols]`) as a GEMM operand over the broadcast `batch`: used in place when
/// each matrix has a unit stride (any batch strides: `matmul` loops over the batch dims that do
/// not collapse into one stride, as the host backend reads any layout in place); otherwise a
/// contiguous copy of it broadcast to the batch.
fn gemm_operand(
    l: &dyn Launcher,
    t: StridedRef<'_>,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Result<Operand> {
    let r = t.rank();
    let (rs, cs) = (t.strides()[r - 2], t.strides()[r - 1]);
    let batch_strides = broadcast_strides(&t.dims()[..r - 2], &t.strides()[..r - 2], batch);
    let row_major = (cs == 1 || cols == 1).then_some(if rows == 1 { cols } else { rs });
    let col_major = (rs == 1 || rows == 1).then_some(if cols == 1 { rows } else { cs });
    if let Some(ld) = row_major.filter(|&ld| ld >= cols.max(1)) {
        return Ok(Operand {
            data: shared(t),
            row_major: true,
            ld,
            batch_strides,
        });
    }
    if let Some(ld) = col_major.filter(|&ld| ld >= rows.max(1)) {
        return Ok(Operand {
            data: shared(t),
            row_major: false,
            ld,
            batch_strides,
        });
    }
    let mut full = batch.to_vec();
    full.extend_from_slice(&[rows, cols]);
    checked_numel("broadcast_as", &full)?;
    let broadcast = t.layout.broadcast_to(&full);
    let data = contiguous(
        l,
        StridedRef {
            storage: t.storage,
            layout: &broadcast,
        },
    )?;
    Ok(Operand {
        data,
        row_major: true,
        ld: cols.max(1),
        batch_strides: contiguous_strides(batch)
            .iter()
            .map(|s| s * rows * cols)
            .collect(),
    })
}

/// Another handle on `t`'s storage and layout, for a result that keeps it alive.
fn shared(t: StridedRef<'_>) -> Strided {
    Strided {
        storage: std::sync::Arc::clone(t.storage),
        layout: t.layout.clone(),
    }
}

/// `t` if contiguous, else a contiguous copy of it (what `Tensor::contiguous` makes, under the
/// same op name).
fn contiguous(l: &dyn Launcher, t: StridedRef<'_>) -> Result<Strided> {
    if t.is_contiguous() {
        return Ok(shared(t));
    }
    map(l, t, "contiguous", MapOp::Copy)
}

/// The one stride that walks every batch in row-major order, if there is one.
fn single_stride(batch: &[usize], strides: &[usize]) -> Option<usize> {
    let mut stride: Option<usize> = None;
    let mut expected = 0usize;
    for (&d, &s) in batch.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        match stride {
            None => {
                stride = Some(s);
                expected = s * d;
            }
            Some(_) => {
                if s != expected {
                    return None;
                }
                expected = s * d;
            }
        }
    }
    Some(stride.unwrap_or(0))
}

pub(crate) fn matmul(
    l: &dyn Launcher,
    a: StridedRef<'_>,
    b: StridedRef<'_>,
    shape: &MatmulShape,
) -> Result<Strided> {
    const OP: &str = "matmul";
    let MatmulShape { batch, m, k, n } = shape;
    let (m, k, n) = (*m, *k, *n);
    let out = uninit(a.device(), &shape.out_shape(), OP)?;
    if out.elem_count() == 0 {
        return Ok(out);
    }
    if k == 0 {
        // An empty sum: the product is all zeros.
        map_inplace(l, out.as_ref(), OP, MapOp::Fill(0.0))?;
        return Ok(out);
    }
    let oa = gemm_operand(l, a, batch, m, k)?;
    let ob = gemm_operand(l, b, batch, k, n)?;
    let oc: Vec<usize> = contiguous_strides(batch)
        .iter()
        .map(|s| s * m * n)
        .collect();
    // The batch dims from `split` on collapse into one stride for every operand: one
    // strided-batched GEMM covers them; the dims before it are looped over.
    let split = (0..=batch.len())
        .find(|&s| {
            [&oa.batch_strides, &ob.batch_strides, &oc]
                .iter()
                .all(|strides| single_stride(&batch[s..], &strides[s..]).is_some())
        })
        .unwrap_or(batch.len());
    let inner = &batch[split..];
    let stride = |strides: &[usize]| single_stride(inner, &strides[split..]).unwrap_or(0);
    let (sa, sb, sc) = (
        stride(&oa.batch_strides),
        stride(&ob.batch_strides),
        stride(&oc),
    );
    let outer: usize = batch[..split].iter().product();
    for index in 0..outer {
        // Element offsets of this outer batch index in each operand.
        let (mut rest, mut at) = (index, [0usize; 3]);
        for d in (0..split).rev() {
            let i = rest % batch[d];
            rest /= batch[d];
            for (o, strides) in at
                .iter_mut()
                .zip([&oa.batch_strides, &ob.batch_strides, &oc])
            {
                *o += i * strides[d];
            }
        }
        let bytes = |elements: usize| (elements * std::mem::size_of::<f32>()) as u64;
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS's A is our B and its B our A.
        // A row-major matrix read column-major is its transpose, so it needs no op; a
        // column-major one does.
        let (mut rows, mut count) = (m, inner.iter().product::<usize>());
        if oa.row_major && sb == 0 && count > 1 && sa == m * oa.ld && oa.ld == k {
            // The Linear-layer case: every batch's rows are stacked contiguously and the right
            // operand is one matrix, so one GEMM covers them all.
            rows = m * count;
            count = 1;
        }
        let gemm = Gemm {
            transa: !ob.row_major,
            transb: !oa.row_major,
            m: n,
            n: rows,
            k,
            a: addr(&ob.data) + bytes(at[1]),
            lda: ob.ld,
            stride_a: sb,
            b: addr(&oa.data) + bytes(at[0]),
            ldb: oa.ld,
            stride_b: sa,
            c: addr(&out) + bytes(at[2]),
            ldc: n,
            stride_c: if count == 1 { rows * n } else { sc },
            count,
        };
        l.gemm(&gemm)
            .map_err(|msg| backend_error(OP, a.device(), msg))?;
    }
    oa.data.storage().note_use_end();
    ob.data.storage().note_use_end();
    Ok(out)
}

pub(crate) fn softmax(
    l: &dyn Launcher,
    x: StridedRef<'_>,
    dim: usize,
    log: bool,
    op: &'static str,
) -> Result<Strided> {
    let x = contiguous(l, x)?;
    let len = x.dims()[dim];
    let inner: usize = x.dims()[dim + 1..].iter().product();
    let outer: usize = x.dims()[..dim].iter().product();
    let out = uninit(x.device(), x.dims(), op)?;
    if len == 0 {
        return Ok(out);
    }
    let args = VgArgs {
        out: addr(&out),
        a: addr(&x),
        n: (outer * inner) as u64,
        len: len as u64,
        inner: inner as u64,
        op: i32::from(log),
        ..Default::default()
    };
    launch(l, op, &x, Kernel::Softmax, args.n, &args)?;
    x.storage().note_use_end();
    Ok(out)
}

pub(crate) fn layer_norm(
    l: &dyn Launcher,
    x: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    bias: Option<StridedRef<'_>>,
    eps: f32,
    stats: bool,
) -> Result<(Strided, Option<(Strided, Strided)>)> {
    const OP: &str = "layer_norm";
    let d = x.dims()[x.rank() - 1];
    let rows = x.elem_count() / d.max(1);
    let row_shape = &x.dims()[..x.rank() - 1];
    let out = uninit(x.device(), x.dims(), OP)?;
    let row_stats = if stats {
        Some((
            uninit(x.device(), row_shape, OP)?,
            uninit(x.device(), row_shape, OP)?,
        ))
    } else {
        None
    };
    let args = VgArgs {
        out: addr(&out),
        out2: row_stats.as_ref().map_or(0, |s| addr(&s.0)),
        out3: row_stats.as_ref().map_or(0, |s| addr(&s.1)),
        a: addr(x),
        b: weight.map_or(0, addr),
        c: bias.map_or(0, addr),
        n: rows as u64,
        len: d as u64,
        s0: eps,
        ..Default::default()
    };
    launch(l, OP, x, Kernel::LayerNorm, rows as u64, &args)?;
    for t in [Some(x), weight, bias].into_iter().flatten() {
        t.storage().note_use_end();
    }
    Ok((out, row_stats))
}

/// Softmax along the last dimension of contiguous `x`, written into `x`: `vg_softmax` reads
/// each element of a row before it writes it (true of softmax, not of log-softmax), so its
/// output may be its input.
pub(crate) fn softmax_last_dim_inplace(
    l: &dyn Launcher,
    x: StridedRef<'_>,
    op: &'static str,
) -> Result<()> {
    let len = x.dims().last().copied().unwrap_or(0);
    if len == 0 || x.elem_count() == 0 {
        return Ok(());
    }
    let args = VgArgs {
        out: addr(x),
        a: addr(x),
        n: (x.elem_count() / len) as u64,
        len: len as u64,
        inner: 1,
        op: 0,
        ..Default::default()
    };
    launch(l, op, x, Kernel::Softmax, args.n, &args)?;
    x.storage().note_use_end();
    Ok(())
}

/// Layer norm of contiguous `x` over its last dimension, written into `x`: `vg_layer_norm`
/// reads a row's statistics first and then each element before it writes it, so its output
/// may be its input. `weight` and `bias` are contiguous and do not share `x`'s storage.
pub(crate) fn layer_norm_inplace(
    l: &dyn Launcher,
    x: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    bias: Option<StridedRef<'_>>,
    eps: f32,
) -> Result<()> {
    const OP: &str = "layer_norm";
    let d = x.dims().last().copied().unwrap_or(0);
    if d == 0 || x.elem_count() == 0 {
        return Ok(());
    }
    let rows = x.elem_count() / d;
    let args = VgArgs {
        out: addr(x),
        a: addr(x),
        b: weight.map_or(0, addr),
        c: bias.map_or(0, addr),
        n: rows as u64,
        len: d as u64,
        s0: eps,
        ..Default::default()
    };
    launch(l, OP, x, Kernel::LayerNorm, rows as u64, &args)?;
    for t in [Some(x), weight, bias].into_iter().flatten() {
        t.storage().note_use_end();
    }
    Ok(())
}

#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub(crate) fn layer_norm_backward(
    l: &dyn Launcher,
    g: StridedRef<'_>,
    x: StridedRef<'_>,
    mean: StridedRef<'_>,
    rstd: StridedRef<'_>,
    weight: Option<StridedRef<'_>>,
    need_w: bool,
    need_b: bool,
) -> Result<(Strided, Option<Strided>, Option<Strided>)> {
    const OP: &str = "layer_norm_backward";
    let d = x.dims()[x.rank() - 1];
    let rows = x.elem_count() / d.max(1);
    let gx = uninit(x.device(), x.dims(), OP)?;
    let mut args = VgArgs {
        out: addr(&gx),
        a: addr(g),
        b: addr(x),
        c: addr(mean),
        d: addr(rstd),
        e: weight.map_or(0, addr),
        n: rows as u64,
        len: d as u64,
        ..Default::default()
    };
    launch(l, OP, x, Kernel::LayerNormBackwardInput, rows as u64, &args)?;
    let gw = need_w.then(|| uninit(x.device(), &[d], OP)).transpose()?;
    let gb = need_b.then(|| uninit(x.device(), &[d], OP)).transpose()?;
    if need_w || need_b {
        args.out = gw.as_ref().map_or(0, addr);
        args.out2 = gb.as_ref().map_or(0, addr);
        args.inner = rows as u64;
        launch(l, OP, x, Kernel::LayerNormBackwardParams, d as u64, &args)?;
    }
    for t in [Some(g), Some(x), Some(mean), Some(rstd), weight]
        .into_iter()
        .flatten()
    {
        t.storage().note_use_end();
    }
    Ok((gx, gw, gb))
}

/// `ids` in a temporary device buffer from the allocator (freed once the work is queued; the
/// block is reused only by work queued after it on the same stream).
fn upload_ids(
    l: &dyn Launcher,
    device: &Device,
    ids: &[u32],
    op: &'static str,
) -> Result<crate::device::Allocation> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_ne_bytes()).collect();
    let buffer = device.allocate(bytes.len().max(1))?;
    l.upload(buffer.addr(), &bytes)
        .map_err(|m| backend_error(op, device, m))?;
    Ok(buffer)
}

pub(crate) fn embedding(
    l: &dyn Launcher,
    table: StridedRef<'_>,
    ids: &[u32],
    out_shape: &[usize],
) -> Result<Strided> {
    const OP: &str = "embedding";
    let d = table.dims()[1];
    let out = uninit(table.device(), out_shape, OP)?;
    let ids_buffer = upload_ids(l, table.device(), ids, OP)?;
    let mut args = VgArgs {
        out: addr(&out),
        a: element_addr(table.storage(), 0),
        ids: ids_buffer.addr(),
        n: (ids.len() * d) as u64,
        len: d as u64,
        a_offset: table.offset() as u64,
        ..Default::default()
    };
    args.a_strides[0] = table.strides()[0] as u64;
    args.a_strides[1] = table.strides()[1] as u64;
    launch(l, OP, table, Kernel::Embedding, args.n, &args)?;
    table.storage().note_use_end();
    Ok(out)
}

pub(crate) fn embedding_backward(
    l: &dyn Launcher,
    g: StridedRef<'_>,
    ids: &[u32],
    table_shape: &[usize],
) -> Result<Strided> {
    const OP: &str = "embedding_backward";
    let d = table_shape[1];
    let out = uninit(g.device(), table_shape, OP)?;
    map_inplace(l, out.as_ref(), OP, MapOp::Fill(0.0))?;
    let ids_buffer = upload_ids(l, g.device(), ids, OP)?;
    let args = VgArgs {
        out: addr(&out),
        a: addr(g),
        ids: ids_buffer.addr(),
        len: d as u64,
        inner: ids.len() as u64,
        ..Default::default()
    };
    launch(l, OP, g, Kernel::EmbeddingBackward, d as u64, &args)?;
    g.storage().note_use_end();
    Ok(out)
}

pub(crate) fn reduce(
    l: &dyn Launcher,
    x: StridedRef<'_>,
    dims: &[usize],
    keep_shape: &[usize],
    scale: f32,
    op: &'static str,
) -> Result<Strided> {
    // Kept dims first, reduced dims last (each group in its order), made contiguous: each output
    // element is then one row, summed in the host backend's order (unless the row is long
    // enough to be summed in chunks).
    let kept: Vec<usize> = (0..x.rank()).filter(|d| !dims.contains(d)).collect();
    let mut perm = kept.clone();
    let mut reduced: Vec<usize> = dims.to_vec();
    reduced.sort_unstable();
    perm.extend_from_slice(&reduced);
    let rows: usize = kept.iter().map(|&d| x.dims()[d]).product();
    let len: usize = reduced.iter().map(|&d| x.dims()[d]).product();
    let permuted = x.layout.permuted(&perm);
    let lanes = contiguous(
        l,
        StridedRef {
            storage: x.storage,
            layout: &permuted,
        },
    )?;
    let out = uninit(x.device(), keep_shape, op)?;
    sum_rows(
        l,
        op,
        lanes.as_ref(),
        out.as_ref(),
        (rows, len),
        RowSum::Scale(scale),
    )?;
    lanes.storage().note_use_end();
    Ok(out)
}

pub(crate) fn cross_entropy(
    l: &dyn Launcher,
    logp: StridedRef<'_>,
    targets: &[u32],
) -> Result<Strided> {
    const OP: &str = "cross_entropy";
    let c = logp.dims()[logp.rank() - 1];
    let out = uninit(logp.device(), &[], OP)?;
    let ids = upload_ids(l, logp.device(), targets, OP)?;
    let args = VgArgs {
        out: addr(&out),
        a: addr(logp),
        ids: ids.addr(),
        n: 1,
        len: c as u64,
        inner: targets.len() as u64,
        ..Default::default()
    };
    launch(l, OP, logp, Kernel::CrossEntropy, 1, &args)?;
    logp.storage().note_use_end();
    Ok(out)
}

pub(crate) fn cross_entropy_backward(
    l: &dyn Launcher,
    g: StridedRef<'_>,
    probs: StridedRef<'_>,
    targets: &[u32],
) -> Result<Strided> {
    const OP: &str = "cross_entropy_backward";
    let c = probs.dims()[probs.rank() - 1];
    let out = uninit(probs.device(), probs.dims(), OP)?;
    let ids = upload_ids(l, probs.device(), targets, OP)?;
    let args = VgArgs {
        out: addr(&out),
        a: addr(probs),
        b: addr(g),
        ids: ids.addr(),
        n: probs.elem_count() as u64,
        len: c as u64,
        s0: targets.len().max(1) as f32,
        ..Default::default()
    };
    launch(l, OP, probs, Kernel::CrossEntropyBackward, args.n, &args)?;
    probs.storage().note_use_end();
    g.storage().note_use_end();
    Ok(out)
}

pub(crate) fn mean_square(
    l: &dyn Launcher,
    diff: StridedRef<'_>,
    op: &'static str,
) -> Result<Strided> {
    let out = uninit(diff.device(), &[], op)?;
    let n = diff.elem_count();
    sum_rows(
        l,
        op,
        diff,
        out.as_ref(),
        (1, n),
        RowSum::MeanOfSquares(n.max(1) as f32),
    )?;
    diff.storage().note_use_end();
    Ok(out)
}

/// What `sum_rows` makes of each row's sum.
#[derive(Clone, Copy)]
enum RowSum {
    /// `scale · sum`.
    Scale(f32),
    /// `sum of squares / n`.
    MeanOfSquares(f32),
}

/// Rows longer than this are summed in chunks of this many values first.
const SUM_CHUNK: usize = 1024;

/// `out[r]` from row `r` of contiguous `src` (`rows` rows of `len`), with `vg_sum_rows`: one
/// launch when rows are short or many, else partial sums of chunks and then their sums.
fn sum_rows(
    l: &dyn Launcher,
    op: &'static str,
    src: StridedRef<'_>,
    out: StridedRef<'_>,
    (rows, len): (usize, usize),
    how: RowSum,
) -> Result<()> {
    let (square, finish, s0) = match how {
        RowSum::Scale(s) => (0, 0, s),
        RowSum::MeanOfSquares(n) => (1, 2, n),
    };
    let mut args = VgArgs {
        out: addr(out),
        a: addr(src),
        n: rows as u64,
        len: len as u64,
        inner: len as u64,
        op: square | finish,
        s0,
        ..Default::default()
    };
    if len <= 2 * SUM_CHUNK || rows >= 4096 {
        return launch(l, op, src, Kernel::SumRows, rows as u64, &args);
    }
    let chunks = len.div_ceil(SUM_CHUNK);
    let partial = uninit(src.device(), &[rows, chunks], op)?;
    let first = VgArgs {
        out: addr(&partial),
        n: (rows * chunks) as u64,
        inner: SUM_CHUNK as u64,
        op: square,
        s0: 1.0,
        ..args
    };
    launch(l, op, src, Kernel::SumRows, first.n, &first)?;
    args.a = addr(&partial);
    args.len = chunks as u64;
    args.inner = chunks as u64;
    args.op = finish;
    launch(l, op, src, Kernel::SumRows, rows as u64, &args)?;
    partial.storage().note_use_end();
    Ok(())
}

pub(crate) fn to_vec(l: &dyn Launcher, t: StridedRef<'_>, op: &'static str) -> Result<Vec<f32>> {
    let copy;
    let t = if t.is_contiguous() {
        t
    } else {
        copy = map(l, t, op, MapOp::Copy)?;
        copy.as_ref()
    };
    let mut out = vec![0.0f32; t.elem_count()];
    l.download(f32_bytes_mut(&mut out), addr(t))
        .map_err(|m| backend_error(op, t.device(), m))?;
    t.storage().note_use_end();
    Ok(out)
}

/// The bytes of an `f32` slice.
fn f32_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: `u8` has alignment 1 and every byte of an `f32` is initialised; the slice covers
    // exactly the same memory, borrowed for the same lifetime.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// The bytes of an `f32` slice, writable.
fn f32_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: any byte pattern is a valid `f32` and `u8` has alignment 1; the slice covers
    // exactly the same memory, borrowed mutably for the same lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}

pub(crate) fn upload(
    l: &dyn Launcher,
    device: &Device,
    shape: &[usize],
    op: &'static str,
    data: &[f32],
) -> Result<Strided> {
    let out = uninit(device, shape, op)?;
    l.upload(addr(&out), f32_bytes(data))
        .map_err(|m| backend_error(op, device, m))?;
    Ok(out)
}

pub(crate) fn full(
    l: &dyn Launcher,
    device: &Device,
    shape: &[usize],
    value: f32,
) -> Result<Strided> {
    let out = uninit(device, shape, "full")?;
    map_inplace(l, out.as_ref(), "full", MapOp::Fill(value))?;
    Ok(out)
}

pub(crate) fn adam_step(
    l: &dyn Launcher,
    state: [StridedRef<'_>; 4],
    hyper: &AdamStep,
) -> Result<()> {
    let [param, grad, m, v] = state;
    let args = VgArgs {
        out: addr(param),
        out2: addr(m),
        out3: addr(v),
        a: addr(grad),
        n: param.elem_count() as u64,
        s0: hyper.lr,
        s1: hyper.beta1,
        s2: hyper.beta2,
        s3: hyper.eps,
        s4: hyper.bias1,
        s5: hyper.bias2,
        ..Default::default()
    };
    launch(l, "Adam::step", param, Kernel::Adam, args.n, &args)?;
    for t in state {
        t.storage().note_use_end();
    }
    Ok(())
}
