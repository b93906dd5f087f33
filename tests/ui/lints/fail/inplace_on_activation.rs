#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn train(n: usize) -> f32 {
    let mut last = 0.0;
    for i in 0..n {
        let mut h = Tensor::input(i).forward();
        h.relu_();
        last = h.item();
    }
    last
}

fn main() {
    let _ = train(2);
    let _ = (Tensor::zeros(), Tensor::input(0).relu(), Tensor::input(0).detach());
    let _ = empty_cache(&vramguard::Device::host());
    let mut t = Tensor::zeros();
    t += Tensor::zeros();
    let _ = t + Tensor::zeros();
}
