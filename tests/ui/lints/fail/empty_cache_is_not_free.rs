#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn evaluate(device: &vramguard::Device, n: usize) -> f32 {
    let mut score = 0.0;
    for i in 0..n {
        let activations = Tensor::input(i).forward();
        let released = empty_cache(device);
        score += activations.item() + released as f32;
    }
    score
}

fn main() {
    let _ = evaluate(&vramguard::Device::host(), 2);
    let _ = (Tensor::zeros(), Tensor::input(0).relu(), Tensor::input(0).detach());
    let mut t = Tensor::zeros();
    t.relu_();
    t += Tensor::zeros();
    let _ = t + Tensor::zeros();
}
