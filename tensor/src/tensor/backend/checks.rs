//! Checks of the CUDA backend that need no GPU (run by `scripts/kernels-check.sh`):
//!
//! - every kernel source compiles to PTX with NVRTC (the library from the PyPI wheel, found
//!   through `LD_LIBRARY_PATH`);
//! - the kernel sources compiled for the host (g++ with `tensor/kernels/host_shim.h`, the
//!   library named by `VRAMGUARD_HOST_KERNELS`) run under the CUDA backend's own launch code on
//!   host tensors and agree with the host backend, so indexing mistakes show without a device;
//! - a whole model trained on a CUDA device agrees with the same model trained on the host
//!   (on a GPU, or on the fake driver that runs the kernels' host builds).
//!
//! Each check prints `skipped: <reason>` and passes when its library (or device) is absent.
//! The checks build the CUDA backend around a launcher of their own; [`super::on`], which tensor
//! ops go through, always takes the device's.

use super::cuda::{self, Cuda, Gemm, Kernel, Launcher, VgArgs, KERNEL_COMMON, KERNEL_SOURCES};
use super::host::Host;
use super::TensorBackend;
use crate::tensor::kinds::{AdamStep, BinOp, MapOp, MatmulShape, ZipOp};
use crate::tensor::storage::StridedRef;
use crate::tensor::{Result, Tensor};
use crate::Device;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

#[test]
fn kernels_compile_to_ptx() {
    if !crate::driver::library_present(crate::driver::CudaLibrary::Nvrtc) {
        println!(
            "skipped: NVRTC (libnvrtc.so.12) not found; scripts/kernels-check.sh installs it from \
             PyPI and puts it on LD_LIBRARY_PATH"
        );
        return;
    }
    let mut compiled = 0;
    for (name, text) in KERNEL_SOURCES {
        let source = format!("{KERNEL_COMMON}{text}");
        match cuda::compile(&source, name) {
            Ok(ptx) => {
                let ptx = ptx.to_src();
                let missing: Vec<&str> = Kernel::ALL
                    .iter()
                    .map(|k| k.name())
                    .filter(|k| text.contains(&format!("void {k}(")) && !ptx.contains(k))
                    .collect();
                if missing.is_empty() {
                    compiled += 1;
                    println!("compiled {name}");
                } else {
                    println!("FAILED {name}: PTX lacks {missing:?}");
                }
            }
            Err(e) => println!("FAILED {name}: {e}"),
        }
    }
    println!(
        "kernels compiled to PTX: {compiled}/{}",
        KERNEL_SOURCES.len()
    );
    assert_eq!(
        compiled,
        KERNEL_SOURCES.len(),
        "a kernel source does not compile"
    );
    // The whole module, as a device loads it; written out for machines without NVRTC.
    let module = cuda::compile_all().unwrap_or_else(|e| panic!("the module does not compile: {e}"));
    if let Some(path) = std::env::var_os("VRAMGUARD_PTX_OUT") {
        let text = format!("{}\n{}", cuda::ptx_header(), module.to_src());
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
        println!(
            "PTX module written to {}",
            std::path::Path::new(&path).display()
        );
    }
}

/// Runs the kernel sources compiled for the host: a launch calls the kernel once per (block,
/// thread) of a small grid, so the grid-stride loops are exercised with several "threads".
struct HostLauncher {
    _library: libloading::Library,
    set_index: unsafe extern "C" fn(u32, u32, u32, u32),
    kernels: HashMap<Kernel, unsafe extern "C" fn(VgArgs)>,
    // A mutex, not a cell: the backend holds its launcher in an `Arc`, which wants `Sync`.
    launched: Mutex<BTreeSet<&'static str>>,
}

impl HostLauncher {
    fn load(path: &str) -> std::result::Result<HostLauncher, String> {
        // SAFETY: the library is the kernel sources compiled by kernels-check.sh; loading it
        // runs no initialisers beyond the C++ runtime's.
        let library = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
        // SAFETY: the symbols have exactly these signatures in host_shim.h and common.cuh.
        unsafe {
            let set_index = *library
                .get::<unsafe extern "C" fn(u32, u32, u32, u32)>(b"vg_host_set_index\0")
                .map_err(|e| e.to_string())?;
            let mut kernels = HashMap::new();
            for kernel in Kernel::ALL {
                let symbol = format!("{}\0", kernel.name());
                let f = *library
                    .get::<unsafe extern "C" fn(VgArgs)>(symbol.as_bytes())
                    .map_err(|e| e.to_string())?;
                kernels.insert(kernel, f);
            }
            Ok(HostLauncher {
                _library: library,
                set_index,
                kernels,
                launched: Mutex::new(BTreeSet::new()),
            })
        }
    }
}

impl Launcher for HostLauncher {
    fn launch(&self, kernel: Kernel, items: u64, args: &VgArgs) -> std::result::Result<(), String> {
        if items == 0 {
            return Ok(());
        }
        let f = self.kernels[&kernel];
        let (grid, block) = (3u32, 4u32);
        for b in 0..grid {
            for t in 0..block {
                // SAFETY: the pointers in `args` are host addresses of live tensors sized for
                // the launch (the backend computed them exactly as for a device).
                unsafe {
                    (self.set_index)(grid, block, b, t);
                    f(*args);
                }
            }
        }
        self.launched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kernel.name());
        Ok(())
    }

    /// Through `vg_gemm`, the kernel the device uses when cuBLAS is absent: the check covers
    /// the descriptor the backend builds (cuBLAS's column-major semantics) and the kernel.
    fn gemm(&self, g: &Gemm) -> std::result::Result<(), String> {
        let (items, args) = g.kernel_args();
        self.launch(Kernel::Gemm, items, &args)
    }

    fn upload(&self, dst: u64, src: &[u8]) -> std::result::Result<(), String> {
        // SAFETY: `dst` is a host allocation of at least `src.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    fn download(&self, dst: &mut [u8], src: u64) -> std::result::Result<(), String> {
        // SAFETY: `src` is a host allocation of at least `dst.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// Largest difference allowed, relative to the magnitude: the sources do the host backend's
/// arithmetic, in its order except for long rows summed in chunks, and the compilers differ.
const TOLERANCE: f32 = 1e-5;

fn assert_close<'a, 'b>(
    what: &str,
    got: impl Into<StridedRef<'a>>,
    want: impl Into<StridedRef<'b>>,
) {
    let (got, want) = (got.into(), want.into());
    assert_eq!(got.dims(), want.dims(), "{what}: shapes differ");
    let (g, w) = (
        Host.to_vec(got, "check").unwrap_or_default(),
        Host.to_vec(want, "check").unwrap_or_default(),
    );
    assert_eq!(g.len(), w.len(), "{what}: lengths differ");
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a - b).abs() <= TOLERANCE * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
        assert!(ok, "{what}: element {i} is {a}, the host backend gives {b}");
    }
}

fn randn(shape: &[usize], seed: u64, device: &Device) -> Tensor {
    Tensor::randn(shape, 0.0, 1.0, seed, device).unwrap_or_else(|e| panic!("randn: {e}"))
}

fn check_all(cuda: &Cuda, dev: &Device) -> Result<()> {
    let x = randn(&[2, 3, 4], 1, dev);
    let xt = x.transpose(0, 2)?; // [4, 3, 2], strided
    let positive = x.map("abs", MapOp::Exp)?;
    // vg_map: every function, contiguous and strided.
    for f in [
        MapOp::Copy,
        MapOp::Scalar(BinOp::Add, 0.5),
        MapOp::Scalar(BinOp::Sub, 0.5),
        MapOp::Scalar(BinOp::Mul, -2.0),
        MapOp::Scalar(BinOp::Div, 3.0),
        MapOp::Affine(2.0, -1.0),
        MapOp::Relu,
        MapOp::Gelu,
        MapOp::Tanh,
        MapOp::Sigmoid,
        MapOp::Exp,
        MapOp::Neg,
        MapOp::Fill(7.0),
    ] {
        for t in [&x, &xt] {
            let what = format!("map {f:?} of {:?}", t.strides());
            assert_close(
                &what,
                &cuda.map(t.strided(), "check", f)?,
                &Host.map(t.strided(), "check", f)?,
            );
        }
    }
    assert_close(
        "map Log",
        &cuda.map(positive.strided(), "check", MapOp::Log)?,
        &Host.map(positive.strided(), "check", MapOp::Log)?,
    );
    // In place on a strided view (a narrow of a transpose).
    let (a, b) = (x.copy()?, x.copy()?);
    let (va, vb) = (
        a.transpose(1, 2)?.narrow(1, 1, 2)?,
        b.transpose(1, 2)?.narrow(1, 1, 2)?,
    );
    cuda.map_inplace(va.strided(), "check", MapOp::Affine(3.0, 1.0))?;
    Host.map_inplace(vb.strided(), "check", MapOp::Affine(3.0, 1.0))?;
    assert_close("map in place on a view", &a, &b);

    // vg_zip: broadcasting both ways, strided operands, every function.
    let y = randn(&[3, 1], 2, dev);
    let shape = [2, 3, 4];
    for f in [
        ZipOp::Bin(BinOp::Add),
        ZipOp::Bin(BinOp::Sub),
        ZipOp::Bin(BinOp::Mul),
        ZipOp::Bin(BinOp::Div),
        ZipOp::Second,
        ZipOp::ReluBackward,
        ZipOp::GeluBackward,
        ZipOp::TanhBackward,
        ZipOp::SigmoidBackward,
    ] {
        let what = format!("zip {f:?}");
        assert_close(
            &what,
            &cuda.zip(x.strided(), y.strided(), &shape, "check", f)?,
            &Host.zip(x.strided(), y.strided(), &shape, "check", f)?,
        );
        let xtt = xt.transpose(0, 2)?; // back to [2, 3, 4] through strides
        assert_close(
            &format!("{what} strided"),
            &cuda.zip(y.strided(), xtt.strided(), &shape, "check", f)?,
            &Host.zip(y.strided(), xtt.strided(), &shape, "check", f)?,
        );
    }
    let (a, b) = (x.copy()?, x.copy()?);
    cuda.zip_inplace(a.strided(), y.strided(), "check", ZipOp::Bin(BinOp::Mul))?;
    Host.zip_inplace(b.strided(), y.strided(), "check", ZipOp::Bin(BinOp::Mul))?;
    assert_close("zip in place", &a, &b);

    // Row sums: every set of reduced dims of a strided tensor.
    for dims in [vec![0], vec![1], vec![2], vec![0, 2], vec![0, 1, 2], vec![]] {
        let mut keep = xt.dims().to_vec();
        for &d in &dims {
            keep[d] = 1;
        }
        assert_close(
            &format!("sum over {dims:?}"),
            &cuda.reduce(xt.strided(), &dims, &keep, 0.25, "check")?,
            &Host.reduce(xt.strided(), &dims, &keep, 0.25, "check")?,
        );
    }
    assert_close(
        "mean square",
        &cuda.mean_square(x.strided(), "check")?,
        &Host.mean_square(x.strided(), "check")?,
    );
    // Rows long enough to be summed in two launches (chunks, then their partial sums), and
    // many rows of one chunk each.
    let long = randn(&[3, 5000], 22, dev);
    assert_close(
        "long rows",
        &cuda.reduce(long.strided(), &[1], &[3, 1], 0.5, "check")?,
        &Host.reduce(long.strided(), &[1], &[3, 1], 0.5, "check")?,
    );
    assert_close(
        "sum of all of a long tensor",
        &cuda.reduce(long.strided(), &[0, 1], &[1, 1], 1.0, "check")?,
        &Host.reduce(long.strided(), &[0, 1], &[1, 1], 1.0, "check")?,
    );
    assert_close(
        "mean square of a long tensor",
        &cuda.mean_square(long.strided(), "check")?,
        &Host.mean_square(long.strided(), "check")?,
    );
    let empty = Tensor::zeros(&[4, 0], dev)?;
    assert_close(
        "sum over an empty dimension",
        &cuda.reduce(empty.strided(), &[1], &[4, 1], 1.0, "check")?,
        &Host.reduce(empty.strided(), &[1], &[4, 1], 1.0, "check")?,
    );

    // Softmax along each dimension, strided input.
    for dim in 0..3 {
        for log in [false, true] {
            assert_close(
                &format!("softmax dim {dim} log {log}"),
                &cuda.softmax(xt.strided(), dim, log, "check")?,
                &Host.softmax(xt.strided(), dim, log, "check")?,
            );
        }
    }

    // Layer norm forward and backward, with and without the affine parameters.
    let (w, bias) = (randn(&[4], 3, dev), randn(&[4], 4, dev));
    let g = randn(&[2, 3, 4], 5, dev);
    for (weight, b) in [(None, None), (Some(&w), Some(&bias)), (Some(&w), None)] {
        let (out_c, stats_c) = cuda.layer_norm(
            x.strided(),
            weight.map(Tensor::strided),
            b.map(Tensor::strided),
            1e-5,
            true,
        )?;
        let (out_h, stats_h) = Host.layer_norm(
            x.strided(),
            weight.map(Tensor::strided),
            b.map(Tensor::strided),
            1e-5,
            true,
        )?;
        assert_close("layer norm", &out_c, &out_h);
        let ((mc, rc), (mh, rh)) = match (stats_c, stats_h) {
            (Some(c), Some(h)) => (c, h),
            _ => panic!("layer norm returned no statistics"),
        };
        assert_close("layer norm mean", &mc, &mh);
        assert_close("layer norm rstd", &rc, &rh);
        let (gx_c, gw_c, gb_c) = cuda.layer_norm_backward(
            g.strided(),
            x.strided(),
            mc.as_ref(),
            rc.as_ref(),
            weight.map(Tensor::strided),
            true,
            true,
        )?;
        let (gx_h, gw_h, gb_h) = Host.layer_norm_backward(
            g.strided(),
            x.strided(),
            mh.as_ref(),
            rh.as_ref(),
            weight.map(Tensor::strided),
            true,
            true,
        )?;
        assert_close("layer norm dx", &gx_c, &gx_h);
        match (gw_c, gw_h, gb_c, gb_h) {
            (Some(wc), Some(wh), Some(bc), Some(bh)) => {
                assert_close("layer norm dweight", &wc, &wh);
                assert_close("layer norm dbias", &bc, &bh);
            }
            _ => panic!("layer norm backward returned no parameter gradients"),
        }
    }

    // Embedding from a strided table, repeated ids, and its gradient.
    let table = randn(&[5, 6], 6, dev).t()?; // [6, 5] viewed as a transposed [5, 6]
    let ids = [4u32, 0, 4, 2, 1, 5];
    let out_shape = [2, 3, 5];
    assert_close(
        "embedding",
        &cuda.embedding(table.strided(), &ids, &out_shape)?,
        &Host.embedding(table.strided(), &ids, &out_shape)?,
    );
    let ge = randn(&[6, 5], 7, dev);
    assert_close(
        "embedding backward",
        &cuda.embedding_backward(ge.strided(), &ids, &[6, 5])?,
        &Host.embedding_backward(ge.strided(), &ids, &[6, 5])?,
    );

    // Cross-entropy and its gradient (rows 4, classes 6).
    let logits = randn(&[4, 6], 8, dev);
    let logp = Host.softmax(logits.strided(), 1, true, "check")?;
    let targets = [5u32, 0, 3, 3];
    assert_close(
        "cross entropy",
        &cuda.cross_entropy(logp.as_ref(), &targets)?,
        &Host.cross_entropy(logp.as_ref(), &targets)?,
    );
    let probs = Host.map(logp.as_ref(), "check", MapOp::Exp)?;
    let gs = Tensor::scalar(0.75, dev)?;
    assert_close(
        "cross entropy backward",
        &cuda.cross_entropy_backward(gs.strided(), probs.as_ref(), &targets)?,
        &Host.cross_entropy_backward(gs.strided(), probs.as_ref(), &targets)?,
    );

    // One Adam update of every element.
    let hyper = AdamStep {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        bias1: 0.19,
        bias2: 0.002,
    };
    let grad = randn(&[2, 3, 4], 9, dev);
    let fresh = || -> Result<[Tensor; 3]> {
        Ok([
            x.copy()?,
            y.copy()?.broadcast_as(&[2, 3, 4])?.contiguous()?,
            positive.copy()?,
        ])
    };
    let (device_state, host_state) = (fresh()?, fresh()?);
    let [p, m, v] = &device_state;
    cuda.adam_step([p, &grad, m, v].map(Tensor::strided), &hyper)?;
    let [p, m, v] = &host_state;
    Host.adam_step([p, &grad, m, v].map(Tensor::strided), &hyper)?;
    for (what, (c, h)) in ["parameter", "first moment", "second moment"]
        .iter()
        .zip(device_state.iter().zip(&host_state))
    {
        assert_close(&format!("adam {what}"), c, h);
    }

    // Matmul through the GEMM call the backend builds: plain, transposed operands, broadcast
    // batches, the folded Linear case, and a batch layout that needs a copy.
    let cases: Vec<(Tensor, Tensor)> = vec![
        (randn(&[3, 4], 10, dev), randn(&[4, 5], 11, dev)),
        (randn(&[4, 3], 12, dev).t()?, randn(&[5, 4], 13, dev).t()?),
        (randn(&[2, 3, 4], 14, dev), randn(&[4, 5], 15, dev)),
        (randn(&[2, 1, 3, 4], 16, dev), randn(&[3, 4, 5], 17, dev)),
        (
            randn(&[3, 2, 4], 18, dev).transpose(0, 1)?,
            randn(&[2, 4, 5], 19, dev),
        ),
        (randn(&[1, 4], 20, dev), randn(&[4, 1], 21, dev)),
    ];
    for (a, b) in &cases {
        let (ra, rb) = (a.rank(), b.rank());
        let batch = crate::tensor::kinds::broadcast_shape(
            "check",
            &a.dims()[..ra - 2],
            &b.dims()[..rb - 2],
        )?;
        let shape = MatmulShape {
            batch,
            m: a.dims()[ra - 2],
            k: a.dims()[ra - 1],
            n: b.dims()[rb - 1],
        };
        assert_close(
            &format!("matmul {:?}x{:?}", a.dims(), b.dims()),
            &cuda.matmul(a.strided(), b.strided(), &shape)?,
            &Host.matmul(a.strided(), b.strided(), &shape)?,
        );
    }
    Ok(())
}

#[test]
fn kernels_checked_on_the_host() {
    let Ok(path) = std::env::var("VRAMGUARD_HOST_KERNELS") else {
        println!(
            "skipped: VRAMGUARD_HOST_KERNELS is not set (scripts/kernels-check.sh compiles the \
             kernel sources for the host and sets it)"
        );
        return;
    };
    let launcher = Arc::new(
        HostLauncher::load(&path)
            .unwrap_or_else(|e| panic!("cannot load the host-compiled kernels {path}: {e}")),
    );
    let dev = Device::isolated_host();
    // The backend shares the launcher, so the kernels it launched can be read after.
    let cuda = Cuda::new(Arc::clone(&launcher) as Arc<dyn Launcher>);
    if let Err(e) = check_all(&cuda, &dev) {
        panic!("a check failed with {e}");
    }
    let launched = launcher.launched.lock().unwrap_or_else(|e| e.into_inner());
    let checked = Kernel::ALL
        .iter()
        .filter(|k| launched.contains(k.name()))
        .count();
    println!(
        "kernels checked on the host: {checked}/{}",
        Kernel::ALL.len()
    );
    assert_eq!(checked, Kernel::ALL.len(), "a kernel was never launched");
}

/// Parameters and their gradients after a forward, backward and Adam step of a small
/// transformer block and classifier, as flat vectors.
fn train_small_model(dev: &Device) -> Result<Vec<Vec<f32>>> {
    use crate::nn::{Adam, Embedding, EncoderLayer, Linear, Module, Parameters, Sgd};
    let embedding = Embedding::new(11, 16, 1, dev)?;
    let layer = EncoderLayer::new(16, 2, 32, 2, dev)?;
    let head = Linear::new(16, 5, true, 3, dev)?;
    let mut params = embedding.parameters();
    params.extend(layer.parameters());
    params.extend(head.parameters());
    let mut adam = Adam::new(params.clone(), 0.01);
    // Some gradients are rounding noise (the attention's key bias has none mathematically), and
    // Adam's first step divides each gradient by its own size: a larger eps keeps the noise from
    // being amplified into the comparison.
    adam.eps = 1e-3;
    let mut sgd = Sgd::with_momentum(params.clone(), 0.01, 0.9);
    let ids = [1u32, 4, 4, 10, 0, 7, 3, 3, 9, 2];
    let targets = [0u32, 4, 2, 2, 1, 3, 0, 4, 1, 1];
    let mut out = Vec::new();
    for step in 0..2 {
        let x = embedding.forward(&ids, &[2, 5])?;
        let h = layer.forward(&x)?;
        let logits = head.forward(&h)?.reshape(&[10, 5])?;
        let loss = (logits.cross_entropy(&targets)? + &h.mean_all()?.mul(&h.mean_all()?)?)?;
        layer.zero_grad();
        embedding.zero_grad();
        head.zero_grad();
        loss.backward()?;
        for p in &params {
            if let Some(g) = p.grad() {
                out.push(g.to_vec()?);
            }
        }
        if step == 0 {
            adam.step()?;
        } else {
            sgd.step()?;
        }
        out.push(vec![loss.to_scalar()?]);
    }
    for p in &params {
        out.push(p.to_vec()?);
    }
    Ok(out)
}

#[test]
fn a_whole_model_trains_the_same_through_the_cuda_backend() {
    let device = match Device::cuda(0) {
        Ok(device) => device,
        Err(e) => {
            println!(
                "skipped: no CUDA device ({e}); on a GPU, or on the fake driver that runs the \
                 kernels' host builds, a transformer block trains through the CUDA backend here"
            );
            return;
        }
    };
    let host =
        train_small_model(&Device::isolated_host()).unwrap_or_else(|e| panic!("host backend: {e}"));
    let cuda = train_small_model(&device).unwrap_or_else(|e| panic!("CUDA backend: {e}"));
    assert_eq!(host.len(), cuda.len());
    for (i, (h, c)) in host.iter().zip(&cuda).enumerate() {
        assert_eq!(h.len(), c.len(), "tensor {i}");
        for (a, b) in c.iter().zip(h) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "tensor {i}: {a} through the CUDA backend, {b} on the host"
            );
        }
    }
    println!(
        "a transformer block trained through the CUDA backend: {} values compared",
        host.iter().map(Vec::len).sum::<usize>()
    );
}
