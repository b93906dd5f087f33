//! The memory story in exact bytes (each test on its own allocator).

use vramguard_alloc::round_size;
use vramguard_memory::memory::{reset_peak_stats, stats};
use vramguard_memory::{no_grad, Device};
use vramguard_tensor::nn::{Linear, Module, Parameters, Sgd};
use vramguard_tensor::tensor::{Tensor, TensorError};

fn bytes(shape: &[usize]) -> u64 {
    round_size(shape.iter().product::<usize>() * 4) as u64
}

const B: usize = 16;
const IN: usize = 64;
const H: usize = 256;
const OUT: usize = 256;

/// A 2-layer MLP with GELU, written drop-at-last-use (what `#[inference]` generates).
fn mlp_forward(fc1: &Linear, fc2: &Linear, x: &Tensor) -> Tensor {
    let h = fc1.forward(x).unwrap(); // [B, H]; bias added in place (consuming add)
    let a = h.gelu().unwrap(); // [B, H]; with grad on, gelu saves its input `h`
    drop(h);
    fc2.forward(&a).unwrap() // [B, OUT]; with grad on, the matmul saves its input `a`
}

#[test]
fn mlp_with_grad_holds_exactly_the_saved_activations() {
    let device = Device::isolated_host();
    let fc1 = Linear::new(IN, H, true, 1, &device).unwrap();
    let fc2 = Linear::new(H, OUT, true, 2, &device).unwrap();
    let x = Tensor::randn(&[B, IN], 0.0, 1.0, 3, &device).unwrap();
    let base = stats(&device).allocated_bytes;
    assert_eq!(
        base,
        bytes(&[B, IN]) + bytes(&[H, IN]) + bytes(&[H]) + bytes(&[OUT, H]) + bytes(&[OUT])
    );

    reset_peak_stats(&device);
    let y = no_grad(|| mlp_forward(&fc1, &fc2, &x));
    let s = stats(&device);
    // Peak: two [B, H] activations at once (h and a, then a and y with OUT == H).
    assert_eq!(s.peak_allocated_bytes - base, 2 * bytes(&[B, H]));
    // Afterwards only the output is alive.
    assert_eq!(s.allocated_bytes - base, bytes(&[B, OUT]));
    assert!(!y.requires_grad());
    drop(y);
    assert_eq!(stats(&device).allocated_bytes, base);

    reset_peak_stats(&device);
    let y = mlp_forward(&fc1, &fc2, &x);
    let s = stats(&device);
    let saved = bytes(&[B, H]) /* gelu input h */ + bytes(&[B, H]) /* fc2 input a */;
    // The graph keeps h alive past its drop: the peak is one [B, H] higher...
    assert_eq!(s.peak_allocated_bytes - base, 3 * bytes(&[B, H]));
    // ...and until the output dies, both saved activations stay allocated.
    assert_eq!(s.allocated_bytes - base, bytes(&[B, OUT]) + saved);
    // transpose, matmul, add; gelu; transpose, matmul, add.
    assert_eq!(y.graph_node_count(), 7);
    // Backward frees the saved activations as it goes; gradients are the new memory.
    y.sum_all().unwrap().backward().unwrap();
    drop(y);
    let grads: u64 = fc1
        .parameters()
        .iter()
        .chain(fc2.parameters().iter())
        .map(|p| bytes(p.dims()))
        .sum();
    assert_eq!(stats(&device).allocated_bytes, base + grads);
}

#[test]
fn out_of_place_in_place_and_consuming_add() {
    const N: usize = 1 << 18; // 1 MiB of f32
    let a_bytes = bytes(&[N]);
    let device = Device::isolated_host();

    // a + 1.0: a second buffer.
    let a = Tensor::zeros(&[N], &device).unwrap();
    reset_peak_stats(&device);
    let b = (&a + 1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, 2 * a_bytes);
    assert_eq!(a.to_vec().unwrap()[0], 0.0);
    assert_eq!(b.to_vec().unwrap()[N - 1], 1.0);
    drop((a, b));

    // a.add_(1.0): no new memory.
    let a = Tensor::zeros(&[N], &device).unwrap();
    reset_peak_stats(&device);
    a.add_(1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, a_bytes);
    assert_eq!(a.to_vec().unwrap()[N - 1], 1.0);
    assert_eq!(a.storage().version(), 1);
    drop(a);

    // a + 1.0 with `a` owned and unique: a's buffer is reused.
    let a = Tensor::zeros(&[N], &device).unwrap();
    let addr = a.storage().as_ref() as *const _ as usize;
    reset_peak_stats(&device);
    let b = (a + 1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, a_bytes);
    assert_eq!(b.storage().as_ref() as *const _ as usize, addr);
    assert_eq!(b.to_vec().unwrap()[0], 1.0);
    // Tensor operands too, and chains: x * 2 + b - b stays in one buffer.
    let other = Tensor::ones(&[N], &device).unwrap();
    reset_peak_stats(&device);
    let c = (((b * 2.0).unwrap() + &other).unwrap() - &other).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, 2 * a_bytes);
    assert_eq!(c.to_vec().unwrap()[7], 2.0);
    drop((c, other));

    // a + 1.0 with `a` owned but shared with a clone: allocates, the clone is untouched.
    let a = Tensor::zeros(&[N], &device).unwrap();
    let keep = a.clone();
    reset_peak_stats(&device);
    let b = (a + 1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, 2 * a_bytes);
    assert_eq!(keep.to_vec().unwrap()[0], 0.0);
    assert_eq!(b.to_vec().unwrap()[0], 1.0);
    drop((b, keep));

    // Shared with a view: same.
    let a = Tensor::zeros(&[N], &device).unwrap();
    let view = a.narrow(0, 0, 4).unwrap();
    reset_peak_stats(&device);
    let b = (a + 1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, 2 * a_bytes);
    assert_eq!(view.to_vec().unwrap(), vec![0.0; 4]);
    drop((b, view));
}

#[test]
fn consuming_forms_respect_autograd() {
    let device = Device::isolated_host();
    let n = 1024;
    let n_bytes = bytes(&[n]);
    // A leaf that requires grad is never overwritten.
    let w = Tensor::ones(&[n], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let unique_leaf = Tensor::ones(&[n], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let before = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let leaf_storage = std::sync::Arc::as_ptr(unique_leaf.storage()) as usize;
    let scaled = (unique_leaf * 3.0).unwrap(); // moved and unique, but a leaf requiring grad
    assert_eq!(stats(&device).peak_allocated_bytes, before + n_bytes);
    // The graph keeps the leaf (and its storage) alive, so the address cannot have been reused.
    assert_ne!(
        std::sync::Arc::as_ptr(scaled.storage()) as usize,
        leaf_storage
    );
    assert_eq!(scaled.to_vec().unwrap()[0], 3.0);
    drop(scaled);
    let y = (w.clone() * 3.0).unwrap();
    assert_eq!(w.to_vec().unwrap()[0], 1.0);

    // A tensor saved for backward (tanh's output) is not reused: backward still works.
    let t = w.tanh().unwrap();
    let before = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let u = (t + 1.0).unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, before + n_bytes);
    let loss = (u.sum_all().unwrap() + &y.sum_all().unwrap()).unwrap();
    loss.backward().unwrap();
    let expected = 3.0 + (1.0 - 1f32.tanh().powi(2));
    assert!((w.grad().unwrap().to_vec().unwrap()[0] - expected).abs() < 1e-6);

    // An unsaved activation (the matmul output) is reused even with grad on.
    let x = Tensor::ones(&[4, n], &device).unwrap();
    let m = Tensor::ones(&[n, n], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let h = x.matmul(&m).unwrap();
    let before = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let h = (h * 0.5).unwrap().into_relu().unwrap();
    assert_eq!(stats(&device).peak_allocated_bytes, before);
    assert!(h.requires_grad());
}

/// A tiny regression: y = relu?(tanh(x W1)) W2.
fn train(inplace: bool) -> Result<Vec<f32>, TensorError> {
    let device = Device::isolated_host();
    let x = Tensor::randn(&[32, 4], 0.0, 1.0, 11, &device)?;
    let target = Tensor::randn(&[32, 1], 0.0, 1.0, 12, &device)?;
    let w1 = Tensor::randn(&[4, 16], 0.0, 0.5, 13, &device)?.with_requires_grad()?;
    let w2 = Tensor::randn(&[16, 1], 0.0, 0.5, 14, &device)?.with_requires_grad()?;
    let mut opt = Sgd::new(vec![w1.clone(), w2.clone()], 0.05);
    let mut losses = Vec::new();
    for _ in 0..40 {
        let t = x.matmul(&w1)?.tanh()?; // tanh saves its output for backward
        let r = if inplace {
            t.relu_()?; // the in-place pitfall: overwrites what tanh's backward needs
            t
        } else {
            t.relu()?
        };
        let loss = r.matmul(&w2)?.mse_loss(&target)?;
        losses.push(loss.to_scalar()?);
        opt.zero_grad();
        loss.backward()?;
        opt.step()?;
    }
    Ok(losses)
}

#[test]
fn inplace_on_saved_activation_fails_backward_out_of_place_trains() {
    let err = train(true).unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::SavedTensorModified {
                op: "tanh",
                what: "output",
                by: "relu_",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.starts_with("tanh's saved output was modified in place by relu_"),
        "{message}"
    );
    let losses = train(false).unwrap();
    assert!(
        losses[losses.len() - 1] < 0.7 * losses[0],
        "loss did not decrease: {losses:?}"
    );
}
