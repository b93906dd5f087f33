#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

// The allow after the processing attribute.
#[vramguard::batch_scope]
#[vramguard::allow(accumulates_across_iterations)]
fn allow_after(n: usize) -> usize {
    let mut results = Vec::new();
    for i in 0..n {
        let feat = Tensor::input(i).forward();
        results.push(feat);
    }
    results.len()
}

// The allow before the processing attribute (it moves itself after it).
#[vramguard::allow(accumulates_across_iterations, graph_across_iterations)]
#[vramguard::batch_scope]
fn allow_before(n: usize) -> f32 {
    let mut results = Vec::new();
    let mut total = Tensor::zeros();
    for i in 0..n {
        let feat = Tensor::input(i).forward();
        results.push(feat);
        let loss = Tensor::input(i).forward();
        total += loss;
    }
    total.item()
}

// On a statement.
#[vramguard::batch_scope]
fn allow_statement(n: usize) -> f32 {
    let mut last = 0.0;
    for i in 0..n {
        let mut h = Tensor::input(i).forward();
        #[vramguard::allow(inplace_on_activation)]
        h.relu_();
        last = h.item();
    }
    last
}

// rustc's own level for the underlying lint applies.
#[vramguard::batch_scope]
#[allow(deprecated)]
fn rustc_allow(device: &vramguard::Device, n: usize) -> f32 {
    let mut score = 0.0;
    for i in 0..n {
        let activations = Tensor::input(i).forward();
        let released = empty_cache(device);
        score += activations.item() + released as f32;
    }
    score
}

fn main() {
    let _ = allow_after(2);
    let _ = allow_before(2);
    let _ = allow_statement(2);
    let _ = rustc_allow(&vramguard::Device::host(), 2);
    let _ = (Tensor::input(0).relu(), Tensor::input(0).detach());
    let _ = Tensor::zeros() + Tensor::zeros();
}
