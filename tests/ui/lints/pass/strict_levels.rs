// The warnings' generated code sets no lint level and trips no other lint: a crate that forbids
// the naming lints and denies every warning but `deprecated` (the warnings' own channel, allowed
// here) still compiles.
#![forbid(non_upper_case_globals, non_snake_case, non_camel_case_types)]
#![deny(warnings, unused_qualifications)]
#![allow(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn collect_features(n: usize) -> usize {
    let mut results = Vec::new();
    let mut total = Tensor::zeros();
    for i in 0..n {
        let feat = Tensor::input(i).forward();
        results.push(feat);
        let loss = Tensor::input(i).forward();
        total += loss;
    }
    results.len() + total.item() as usize
}

fn main() {
    let _ = collect_features(2);
    let _ = (Tensor::input(0).relu().item(), Tensor::input(0).detach());
    let _ = empty_cache(&vramguard::Device::host());
    let mut t = Tensor::zeros();
    t.relu_();
}
