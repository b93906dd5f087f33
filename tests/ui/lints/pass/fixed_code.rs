#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn collect_scalars(n: usize) -> Vec<f32> {
    let mut results = Vec::new();
    let mut count = 0usize;
    for i in 0..n {
        let feat = Tensor::input(i).forward();
        results.push(feat.item());
        count += 1;
    }
    results.push(count as f32);
    results
}

#[vramguard::batch_scope]
fn running_totals(n: usize) -> (f32, f32) {
    let mut total = 0.0;
    let mut detached = Tensor::zeros();
    for i in 0..n {
        let loss = Tensor::input(i).forward();
        total += loss.item();
        detached += loss.detach();
    }
    (total, detached.item())
}

#[vramguard::batch_scope]
fn out_of_place(n: usize) -> f32 {
    let mut last = 0.0;
    for i in 0..n {
        let h = Tensor::input(i).forward();
        let h = h.relu();
        let mut fresh = Tensor::zeros();
        fresh.relu_();
        last = h.item() + fresh.item();
    }
    last
}

#[vramguard::batch_scope]
fn in_place_without_grad(n: usize) -> f32 {
    let mut last = 0.0;
    for i in 0..n {
        let _no_grad = vramguard::NoGradGuard::new();
        let mut h = Tensor::input(i).forward();
        h.relu_();
        last = vramguard::no_grad(|| {
            let mut g = h.forward();
            g.relu_();
            g.item()
        });
    }
    last
}

#[vramguard::batch_scope]
fn empty_cache_after_last_use(device: &vramguard::Device, n: usize) -> f32 {
    let mut score = 0.0;
    for i in 0..n {
        let activations = Tensor::input(i).forward();
        score += activations.item();
        drop(activations);
        let released = empty_cache(device);
        score += released as f32;
    }
    score
}

fn main() {
    let _ = collect_scalars(3);
    let _ = running_totals(3);
    let _ = out_of_place(3);
    let _ = in_place_without_grad(3);
    let _ = empty_cache_after_last_use(&vramguard::Device::host(), 3);
    let _ = Tensor::zeros() + Tensor::zeros();
}
