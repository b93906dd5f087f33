#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn collect_features(n: usize) -> usize {
    let mut results = Vec::new();
    for i in 0..n {
        let feat = Tensor::input(i).forward();
        results.push(feat);
    }
    results.len()
}

fn main() {
    let _ = collect_features(2);
    let _ = (Tensor::zeros(), Tensor::input(0).relu().item(), Tensor::input(0).detach());
    let _ = empty_cache(&vramguard::Device::host());
}
