//! Exact-byte memory tests of `#[inference]` on the runtime's tensors: an attention block
//! written the way people write it (shadowed `let`s; a T×T score matrix scaled, masked and
//! softmaxed), with and without the attribute, against the liveness lower bound.

use vramguard::nn::{Linear, Module};
use vramguard::tensor::PeakBoundRecorder;
use vramguard::{memory, Device, Tensor, TensorError};

type Result<T> = std::result::Result<T, TensorError>;

const B: usize = 2;
const T: usize = 16;
const D: usize = 16;
const H: usize = 2;
const F32: usize = 4;
/// One `[B, T, D]` activation.
const S: u64 = (B * T * D * F32) as u64;
/// One `[B, H, T, T]` score matrix.
const P: u64 = (B * H * T * T * F32) as u64;

struct Attention {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
}

macro_rules! attention_fn {
    ($name:ident $(, #[$attr:meta])*) => {
        $(#[$attr])*
        fn $name(w: &Attention, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
            let (b, t, d) = x.dims3()?;
            let q = w.q.forward(x)?;
            let k = w.k.forward(x)?;
            let v = w.v.forward(x)?;
            let q = q.reshape(&[b, t, H, d / H])?.transpose(1, 2)?.contiguous()?;
            let k = k.reshape(&[b, t, H, d / H])?.transpose(1, 2)?.contiguous()?;
            let v = v.reshape(&[b, t, H, d / H])?.transpose(1, 2)?.contiguous()?;
            let scores = q.matmul(&k.t()?)?;
            let scores = (scores * (1.0 / ((d / H) as f32).sqrt()))?;
            let scores = scores.broadcast_add(mask)?;
            let probs = scores.softmax(3)?;
            let ctx = probs.matmul(&v)?;
            let ctx = ctx.transpose(1, 2)?.contiguous()?.reshape(&[b, t, d])?;
            let out = w.o.forward(&ctx)?;
            Ok(out)
        }
    };
}

attention_fn!(attention_plain);
attention_fn!(attention_inference, #[vramguard::inference]);

fn setup(device: &Device) -> Result<(Attention, Tensor, Tensor)> {
    let w = Attention {
        q: Linear::new(D, D, true, 1, device)?,
        k: Linear::new(D, D, true, 2, device)?,
        v: Linear::new(D, D, true, 3, device)?,
        o: Linear::new(D, D, true, 4, device)?,
    };
    let x = Tensor::randn(&[B, T, D], 0.0, 1.0, 5, device)?;
    let mask: Vec<f32> = (0..B * T)
        .map(|i| if i % T >= T - 3 { -1e4 } else { 0.0 })
        .collect();
    let mask = Tensor::from_slice(&mask, &[B, 1, 1, T], device)?;
    Ok((w, x, mask))
}

/// Peak allocated bytes above the bytes live before `f`, and its output.
fn peak<R>(device: &Device, f: impl FnOnce() -> Result<R>) -> Result<(u64, R)> {
    let before = memory::stats(device).allocated_bytes;
    memory::reset_peak_stats(device);
    let out = f()?;
    Ok((memory::stats(device).peak_allocated_bytes - before, out))
}

#[test]
fn attention_peak_falls_to_the_liveness_bound() -> Result<()> {
    // Each test gets its own device so that nothing else touches its statistics.
    let device = Device::isolated_host();
    let (w, x, mask) = setup(&device)?;

    let (plain_peak, plain_out) = peak(&device, || {
        vramguard::no_grad(|| attention_plain(&w, &x, &mask))
    })?;
    drop(plain_out);
    let (inference_peak, inference_out) = peak(&device, || attention_inference(&w, &x, &mask))?;
    let recorder = PeakBoundRecorder::start();
    let bound_out = vramguard::no_grad(|| attention_plain(&w, &x, &mask))?;
    let bound = recorder.finish();

    // Without the attribute every local lives to the end: q, k, v and their contiguous
    // per-head copies (6 S), the scaled, masked and softmaxed scores (3 P; the scaling
    // reuses the product's buffer), both ctx tensors and the output (3 S).
    assert_eq!(plain_peak, 9 * S + 3 * P);
    // Dropping each local at its last use, the live set is at most: q, k, v plus one copy
    // (4 S); the three per-head tensors and the scores (3 S + P); v, scores and the masked
    // or softmaxed scores (S + 2 P); ctx with v or the output (2 S + P).
    let by_hand = (4 * S).max(3 * S + P).max(S + 2 * P).max(2 * S + P);
    assert_eq!(inference_peak, by_hand);
    // The recorder's liveness bound for the same ops agrees with the hand count, and the
    // attribute reaches it.
    assert_eq!(bound.peak_bytes, by_hand);
    assert!(inference_peak < plain_peak);

    // Same result, bit for bit.
    let (a, b) = (inference_out.to_vec()?, bound_out.to_vec()?);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    Ok(())
}

#[test]
fn attention_with_grad_on_keeps_the_graph_and_inference_does_not() -> Result<()> {
    let device = Device::isolated_host();
    let (w, x, mask) = setup(&device)?;
    // Grad on: the output holds the graph, so the saved activations outlive the call.
    let out = attention_plain(&w, &x, &mask)?;
    let held_with_grad = memory::stats(&device).allocated_bytes;
    drop(out);
    let base = memory::stats(&device).allocated_bytes;
    assert!(
        held_with_grad > base + S,
        "the graph keeps activations alive"
    );
    // Under #[inference] nothing is recorded: only the output itself stays.
    let out = attention_inference(&w, &x, &mask)?;
    assert_eq!(memory::stats(&device).allocated_bytes, base + S);
    assert!(!out.requires_grad());
    Ok(())
}
