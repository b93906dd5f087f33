//! Runs one scenario of `tests/drop_at_last_use/notices.rs`, named by its first argument; the test
//! reads what this prints on stderr.

use candle_core::{DType, Device, Tensor, Var};
use std::rc::Rc;

type Result<T> = candle_core::Result<T>;

/// Kept with vramguard's `candle` feature off: a candle tensor and a `Vec` of them (noticed);
/// a borrowed and a shared tensor (kept with the feature on too: not noticed); a vramguard
/// tensor (dropped: not noticed).
#[vramguard::inference]
fn layers(input: &Tensor, weights: &[Tensor]) -> Result<Tensor> {
    let shared = Rc::new(input.clone());
    let borrowed = &*shared;
    let own = vramguard::Tensor::ones(&[4], &vramguard::Device::isolated_host())
        .map_err(candle_core::Error::wrap)?;
    let count = own.dims()[0];
    let mut outputs = Vec::new();
    let mut x = borrowed.clone();
    for w in weights {
        let h = x.matmul(w)?;
        let h = h.relu()?;
        outputs.push(h.clone());
        x = h;
    }
    let stacked: Vec<Tensor> = outputs;
    let total = Tensor::stack(&stacked, 0)?;
    let summed = total.sum_all()?;
    let scale = (count as f64).recip();
    let result = (summed * scale)?;
    Ok(result)
}

/// Three 4×4 weights: plain tensors, or tensors of `Var`s (which record candle's graph), or
/// those detached.
fn weights(kind: &str) -> Result<Vec<Tensor>> {
    (0..3)
        .map(|i| {
            let plain = (Tensor::eye(4, DType::F32, &Device::Cpu)? * (1.0 + i as f64))?;
            match kind {
                "plain" => Ok(plain),
                "var" => Ok(Var::from_tensor(&plain)?.as_tensor().clone()),
                _ => Ok(Var::from_tensor(&plain)?.as_tensor().detach()),
            }
        })
        .collect()
}

/// A training loop: grad mode on, as `#[batch_scope]` leaves it; its locals are dropped at
/// their last use too.
#[vramguard::batch_scope]
fn train(input: &Tensor, weights: &[Tensor], steps: usize) -> Result<f32> {
    let mut loss = 0.0;
    for _ in 0..steps {
        let mut x = input.clone();
        for w in weights {
            let h = x.matmul(w)?;
            x = h.relu()?;
        }
        let total = x.sum_all()?;
        loss = total.to_scalar::<f32>()?;
    }
    Ok(loss)
}

fn main() -> Result<()> {
    let scenario = std::env::args().nth(1).unwrap_or_default();
    let input = Tensor::ones((2, 4), DType::F32, &Device::Cpu)?;
    let value = match scenario.as_str() {
        // Twice each: a notice is printed once.
        "inference-plain" | "inference-var" | "inference-detached" => {
            let kind = scenario.trim_start_matches("inference-");
            let weights = weights(kind)?;
            let first = layers(&input, &weights)?.to_scalar::<f32>()?;
            let second = layers(&input, &weights)?.to_scalar::<f32>()?;
            first + second
        }
        "train-var" => train(&input, &weights("var")?, 2)?,
        other => {
            eprintln!("unknown scenario {other:?}");
            std::process::exit(2);
        }
    };
    println!("{value}");
    Ok(())
}
