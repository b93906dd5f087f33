//! Every tensor op on a CUDA device, forward and backward, against the host backend.
//!
//! Tolerance: `|gpu - host| <= 1e-4 · (1 + |host|)` per element. The kernels do the host's
//! arithmetic in the host's order, but the GPU's `expf`/`tanhf`/`logf` may differ from the host
//! libm by a few ulps and cuBLAS sums a dot product in its own order.
//!
//! Without a driver (or without NVRTC, which compiles the kernels at run time) each test prints
//! `skipped: <reason>` and passes; `VRAMGUARD_REQUIRE_GPU=1` (scripts/gpu-check.sh) makes that
//! a failure instead.

use vramguard_alloc::AllocatorConfig;
use vramguard_memory::{grad, memory, Device};
use vramguard_tensor::nn::{Adam, Linear, Module, Parameters, Sgd};
use vramguard_tensor::tensor::{Tensor, TensorError};

const TOLERANCE: f32 = 1e-4;

fn require_gpu() -> bool {
    std::env::var("VRAMGUARD_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// A CUDA device with an allocator of its own (so statistics are this test's), or `None` after
/// printing why there is none.
fn gpu() -> Option<Device> {
    let skip = |why: String| {
        assert!(!require_gpu(), "VRAMGUARD_REQUIRE_GPU=1 but {why}");
        println!("skipped: {why}");
        None
    };
    let device = match Device::cuda_with_config(0, AllocatorConfig::default()) {
        Ok(d) => d,
        Err(e) => return skip(format!("no usable CUDA device ({e})")),
    };
    // The first op compiles the kernels; without NVRTC (and without a prebuilt PTX file) that
    // is a typed error, not a panic. Only that is a skip: any other failure mentioning NVRTC
    // (a PTX file from other sources, a compile error) is a failure.
    match Tensor::zeros(&[1], &device) {
        Ok(_) => Some(device),
        Err(e @ TensorError::Backend { .. }) if nvrtc_missing(&e.to_string()) => {
            skip(format!("the CUDA kernels cannot be compiled here ({e})"))
        }
        Err(e) => panic!("the first op on the GPU failed: {e}"),
    }
}

/// Whether a backend error says only that NVRTC cannot be loaded (no PTX file given either).
fn nvrtc_missing(error: &str) -> bool {
    error.contains("NVRTC (")
        && error.contains("cannot be loaded, so the kernels cannot be compiled")
}

#[test]
fn only_a_missing_nvrtc_is_a_reason_to_skip() {
    assert!(nvrtc_missing(
        "backend error: NVRTC (libnvrtc.so.12) cannot be loaded, so the kernels cannot be \
         compiled; install ..."
    ));
    for other in [
        "VRAMGUARD_KERNELS_PTX=/x.ptx was compiled from other kernel sources than this build's; \
         rebuild it with scripts/kernels-check.sh, or unset VRAMGUARD_KERNELS_PTX to compile \
         with NVRTC",
        "NVRTC could not compile vramguard_kernels.cu: NVRTC_ERROR_COMPILATION",
    ] {
        assert!(!nvrtc_missing(other), "{other}");
    }
}

fn close(what: &str, gpu: &Tensor, host: &Tensor) {
    assert_eq!(gpu.dims(), host.dims(), "{what}: shapes differ");
    assert!(gpu.device().is_cuda(), "{what}: the result left the GPU");
    let (g, h) = (gpu.to_vec().unwrap(), host.to_vec().unwrap());
    for (i, (a, b)) in g.iter().zip(&h).enumerate() {
        assert!(
            (a - b).abs() <= TOLERANCE * (1.0 + b.abs()),
            "{what}: element {i} is {a} on the GPU and {b} on the host"
        );
    }
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, 0.0, 1.0, seed, &Device::host()).unwrap()
}

/// `f` on the host and on the GPU (inputs copied there), compared.
fn same(what: &str, gpu: &Device, inputs: &[&Tensor], f: impl Fn(&[Tensor]) -> Tensor) {
    let host: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    let dev: Vec<Tensor> = inputs.iter().map(|t| t.to_device(gpu).unwrap()).collect();
    close(what, &f(&dev), &f(&host));
}

/// Gradients of `loss(inputs)` with respect to every input, on the GPU against the host.
fn same_grads(what: &str, gpu: &Device, inputs: &[&Tensor], loss: impl Fn(&[Tensor]) -> Tensor) {
    let leaves = |device: &Device| -> Vec<Tensor> {
        inputs
            .iter()
            .map(|t| {
                t.to_device(device)
                    .unwrap()
                    .copy()
                    .unwrap()
                    .with_requires_grad()
                    .unwrap()
            })
            .collect()
    };
    let (host, dev) = (leaves(&Device::host()), leaves(gpu));
    loss(&host).backward().unwrap();
    loss(&dev).backward().unwrap();
    for (i, (h, d)) in host.iter().zip(&dev).enumerate() {
        close(
            &format!("{what}: gradient of input {i}"),
            &d.grad().unwrap(),
            &h.grad().unwrap(),
        );
    }
}

#[test]
fn cuda_elementwise_broadcasting_and_activations() {
    let Some(gpu) = gpu() else { return };
    let (x, y) = (randn(&[2, 3, 4], 1), randn(&[3, 1], 2));
    same("add", &gpu, &[&x, &y], |t| t[0].add(&t[1]).unwrap());
    same("sub", &gpu, &[&x, &y], |t| t[1].sub(&t[0]).unwrap());
    same("mul", &gpu, &[&x, &y], |t| t[0].mul(&t[1]).unwrap());
    same("div", &gpu, &[&x, &y], |t| t[0].div(&t[1]).unwrap());
    same("scalars", &gpu, &[&x], |t| {
        t[0].add_scalar(1.5)
            .unwrap()
            .mul_scalar(-2.0)
            .unwrap()
            .affine(0.5, 3.0)
            .unwrap()
            .neg()
            .unwrap()
    });
    same("transposed operand", &gpu, &[&x], |t| {
        t[0].transpose(0, 2)
            .unwrap()
            .add(&t[0].transpose(0, 2).unwrap())
            .unwrap()
    });
    for (name, f) in [
        ("relu", Tensor::relu as fn(&Tensor) -> _),
        ("gelu", Tensor::gelu),
        ("tanh", Tensor::tanh),
        ("sigmoid", Tensor::sigmoid),
        ("exp", Tensor::exp),
    ] {
        same(name, &gpu, &[&x], |t| f(&t[0]).unwrap());
        same_grads(name, &gpu, &[&x], |t| f(&t[0]).unwrap().sum_all().unwrap());
    }
    let positive = x.exp().unwrap();
    same("log", &gpu, &[&positive], |t| t[0].log().unwrap());
    same_grads("arithmetic", &gpu, &[&x, &y], |t| {
        let a = t[0].mul(&t[1]).unwrap().div(&t[1].exp().unwrap()).unwrap();
        a.sub(&t[1]).unwrap().add(&t[0]).unwrap().sum_all().unwrap()
    });
}

#[test]
fn cuda_matmul_and_batched_matmul_forward_and_backward() {
    let Some(gpu) = gpu() else { return };
    let cases = [
        (randn(&[8, 16], 3), randn(&[16, 5], 4)),
        (randn(&[2, 7, 16], 5), randn(&[16, 9], 6)),
        (randn(&[2, 1, 4, 8], 7), randn(&[3, 8, 6], 8)),
        (randn(&[3, 4, 8], 9), randn(&[3, 8, 2], 10)),
    ];
    for (a, b) in &cases {
        let what = format!("matmul {:?} x {:?}", a.dims(), b.dims());
        same(&what, &gpu, &[a, b], |t| t[0].matmul(&t[1]).unwrap());
        same_grads(&what, &gpu, &[a, b], |t| {
            t[0].matmul(&t[1]).unwrap().sum_all().unwrap()
        });
    }
    // Transposed views are read in place.
    let (a, b) = (randn(&[16, 8], 11), randn(&[5, 16], 12));
    same("matmul of transposes", &gpu, &[&a, &b], |t| {
        t[0].t().unwrap().matmul(&t[1].t().unwrap()).unwrap()
    });
    // Mixed devices are a typed error naming both.
    let on_gpu = a.to_device(&gpu).unwrap();
    let err = on_gpu.matmul(&b).unwrap_err();
    assert!(
        matches!(&err, TensorError::DeviceMismatch { lhs, rhs, .. } if lhs.contains("Cuda") && rhs == "Host"),
        "{err}"
    );
}

#[test]
fn cuda_batched_matmul_reads_permuted_operands_in_place() {
    let Some(gpu) = gpu() else { return };
    // Attention's layout: [batch, seq, heads, head_dim] viewed as [batch, heads, seq, head_dim],
    // whose batch dims do not collapse into one stride. The host reads such operands in place;
    // the GPU must too (one strided-batched GEMM per outer batch index), not copy them.
    let (q, k) = (randn(&[2, 16, 4, 8], 30), randn(&[2, 16, 4, 8], 31));
    let scores = |t: &[Tensor]| {
        let q = t[0].transpose(1, 2).unwrap();
        let kt = t[1].transpose(1, 2).unwrap().transpose(2, 3).unwrap();
        q.matmul(&kt).unwrap()
    };
    same("permuted batched matmul", &gpu, &[&q, &k], scores);
    let on_gpu = [q.to_device(&gpu).unwrap(), k.to_device(&gpu).unwrap()];
    let _g = grad::NoGradGuard::new();
    let before = memory::stats(&gpu).allocated_bytes;
    memory::reset_peak_stats(&gpu);
    let s = scores(&on_gpu);
    let peak = memory::stats(&gpu).peak_allocated_bytes - before;
    // The output alone: 2 × 4 × 16 × 16 f32.
    assert_eq!(peak, 2 * 4 * 16 * 16 * 4, "the matmul copied an operand");
    drop(s);
}

#[test]
fn cuda_reductions_softmax_and_layer_norm() {
    let Some(gpu) = gpu() else { return };
    let x = randn(&[3, 4, 5], 13);
    same("sum dim 1", &gpu, &[&x], |t| t[0].sum(1).unwrap());
    same("mean dims 0 and 2", &gpu, &[&x], |t| {
        t[0].mean_dims(&[0, 2], true).unwrap()
    });
    same("sum_all of a transpose", &gpu, &[&x], |t| {
        t[0].transpose(0, 1).unwrap().sum_all().unwrap()
    });
    same_grads("mean", &gpu, &[&x], |t| {
        t[0].mean(2).unwrap().sum_all().unwrap()
    });
    for dim in 0..3 {
        same("softmax", &gpu, &[&x], |t| t[0].softmax(dim).unwrap());
        same("log_softmax", &gpu, &[&x], |t| {
            t[0].log_softmax(dim).unwrap()
        });
    }
    let w = randn(&[5], 14);
    same_grads("softmax", &gpu, &[&x, &w], |t| {
        t[0].softmax(1)
            .unwrap()
            .mul(&t[1])
            .unwrap()
            .sum_all()
            .unwrap()
    });
    let b = randn(&[5], 15);
    same("layer_norm", &gpu, &[&x, &w, &b], |t| {
        t[0].layer_norm(Some(&t[1]), Some(&t[2]), 1e-5).unwrap()
    });
    same_grads("layer_norm", &gpu, &[&x, &w, &b], |t| {
        let y = t[0].layer_norm(Some(&t[1]), Some(&t[2]), 1e-5).unwrap();
        y.mul(&y).unwrap().sum_all().unwrap()
    });
}

#[test]
fn cuda_embedding_and_losses() {
    let Some(gpu) = gpu() else { return };
    let table = randn(&[10, 6], 16);
    let ids = [3u32, 9, 0, 3, 3, 7];
    same("embedding", &gpu, &[&table], |t| {
        t[0].embedding(&ids, &[2, 3]).unwrap()
    });
    same_grads("embedding", &gpu, &[&table], |t| {
        let e = t[0].embedding(&ids, &[2, 3]).unwrap();
        e.mul(&e).unwrap().sum_all().unwrap()
    });
    let logits = randn(&[4, 7], 17);
    let targets = [6u32, 0, 2, 2];
    same("cross_entropy", &gpu, &[&logits], |t| {
        t[0].cross_entropy(&targets).unwrap()
    });
    same_grads("cross_entropy", &gpu, &[&logits], |t| {
        t[0].cross_entropy(&targets)
            .unwrap()
            .mul_scalar(3.0)
            .unwrap()
    });
    let target = randn(&[4, 7], 18);
    same_grads("mse_loss", &gpu, &[&logits, &target], |t| {
        t[0].mse_loss(&t[1]).unwrap()
    });
}

#[test]
fn cuda_inplace_and_consuming_ops_reuse_device_buffers() {
    let Some(gpu) = gpu() else { return };
    let (x, y) = (randn(&[4, 8], 19), randn(&[8], 20));
    same("in-place chain", &gpu, &[&x, &y], |t| {
        let z = t[0].copy().unwrap();
        z.add_(&t[1]).unwrap();
        z.mul_(2.0).unwrap();
        z.relu_().unwrap();
        z.transpose(0, 1)
            .unwrap()
            .narrow(0, 2, 3)
            .unwrap()
            .sub_(1.0)
            .unwrap();
        z.div_(&t[1].exp().unwrap()).unwrap();
        z
    });
    same("copy_ and fill_", &gpu, &[&x, &y], |t| {
        let z = t[0].copy().unwrap();
        z.copy_(&t[1]).unwrap();
        z.narrow(0, 1, 2).unwrap().fill_(0.25).unwrap();
        z
    });
    // The consuming forms write into the owned buffer: no allocation on the device.
    let z = x.to_device(&gpu).unwrap();
    let yd = y.to_device(&gpu).unwrap();
    let before = memory::stats(&gpu);
    let z = ((z + &yd).unwrap() * 0.5).unwrap().into_gelu().unwrap();
    let after = memory::stats(&gpu);
    assert_eq!(
        after.num_allocs, before.num_allocs,
        "a consuming op allocated"
    );
    assert_eq!(after.allocated_bytes, before.allocated_bytes);
    let host = x.add(&y).unwrap().mul_scalar(0.5).unwrap().gelu().unwrap();
    close("consuming chain", &z, &host);
    // Under no_grad a consuming activation also reuses the buffer.
    let _g = grad::NoGradGuard::new();
    let before = memory::stats(&gpu);
    let z = z.into_relu().unwrap();
    assert_eq!(memory::stats(&gpu).num_allocs, before.num_allocs);
    close("consuming relu", &z, &host.relu().unwrap());
}

#[test]
fn cuda_consuming_softmax_and_layer_norm_write_in_place_as_on_the_host() {
    let Some(gpu) = gpu() else { return };
    // `#[inference]` turns `x.softmax(-1)` and `x.layer_norm(..)` on a dying local into these:
    // on the host they write into the receiver's buffer; on the GPU they must too, or its
    // peaks (and largest batches) are worse than the host's.
    let (x, w, b) = (randn(&[3, 4, 32], 40), randn(&[32], 41), randn(&[32], 42));
    let host_softmax = x.softmax(2).unwrap();
    let host_norm = x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap();
    let _g = grad::NoGradGuard::new();
    let (wd, bd) = (w.to_device(&gpu).unwrap(), b.to_device(&gpu).unwrap());
    for in_place in ["softmax", "layer_norm"] {
        let xd = x.to_device(&gpu).unwrap();
        let before = memory::stats(&gpu);
        let y = match in_place {
            "softmax" => xd.into_softmax(2).unwrap(),
            _ => xd.into_layer_norm(Some(&wd), Some(&bd), 1e-5).unwrap(),
        };
        let after = memory::stats(&gpu);
        assert_eq!(
            after.num_allocs, before.num_allocs,
            "consuming {in_place} allocated on the GPU"
        );
        let host = if in_place == "softmax" {
            &host_softmax
        } else {
            &host_norm
        };
        close(&format!("consuming {in_place}"), &y, host);
    }
}

#[test]
fn cuda_to_device_round_trips_and_allocates_through_the_caching_allocator() {
    let Some(gpu) = gpu() else { return };
    let x = randn(&[3, 5], 21);
    let before = memory::stats(&gpu);
    let on_gpu = x.to_device(&gpu).unwrap();
    let after = memory::stats(&gpu);
    // 15 f32s = 60 bytes, rounded to the allocator's 512-byte granularity.
    assert_eq!(after.allocated_bytes - before.allocated_bytes, 512);
    assert_eq!(on_gpu.to_vec().unwrap(), x.to_vec().unwrap());
    let back = on_gpu
        .transpose(0, 1)
        .unwrap()
        .to_device(&Device::host())
        .unwrap();
    assert_eq!(back.to_vec().unwrap(), x.t().unwrap().to_vec().unwrap());
    drop(on_gpu);
    assert_eq!(memory::stats(&gpu).allocated_bytes, before.allocated_bytes);
    // Gradients flow back across devices.
    let leaf = x.copy().unwrap().with_requires_grad().unwrap();
    leaf.to_device(&gpu)
        .unwrap()
        .mul_scalar(2.0)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let g = leaf.grad().unwrap();
    assert!(g.device().is_host());
    assert_eq!(g.to_vec().unwrap(), vec![2.0; 15]);
}

#[test]
fn cuda_training_steps_match_the_host() {
    let Some(gpu) = gpu() else { return };
    let x = randn(&[6, 8], 22);
    let targets = [0u32, 3, 1, 2, 3, 0];
    // The same layer, the same data, three steps of each optimizer on each device.
    let train = |device: &Device, adam: bool| -> Vec<Vec<f32>> {
        let layer = Linear::new(8, 4, true, 7, device).unwrap();
        let xd = x.to_device(device).unwrap();
        let params = layer.parameters();
        let mut sgd = Sgd::with_momentum(params.clone(), 0.1, 0.9);
        let mut adam_opt = Adam::new(params.clone(), 0.05);
        for _ in 0..3 {
            let loss = layer
                .forward(&xd)
                .unwrap()
                .gelu()
                .unwrap()
                .cross_entropy(&targets)
                .unwrap();
            layer.zero_grad();
            loss.backward().unwrap();
            if adam {
                adam_opt.step().unwrap();
            } else {
                sgd.step().unwrap();
            }
        }
        params.iter().map(|p| p.to_vec().unwrap()).collect()
    };
    for adam in [false, true] {
        let (host, dev) = (train(&Device::host(), adam), train(&gpu, adam));
        for (h, d) in host.iter().zip(&dev) {
            for (a, b) in d.iter().zip(h) {
                assert!(
                    (a - b).abs() <= TOLERANCE * (1.0 + b.abs()),
                    "adam {adam}: parameter {a} on the GPU, {b} on the host"
                );
            }
        }
    }
}
