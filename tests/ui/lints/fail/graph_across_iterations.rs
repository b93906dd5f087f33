#![deny(deprecated)]
#[path = "../support.rs"]
mod support;
use support::{empty_cache, Tensor};

#[vramguard::batch_scope]
fn running_totals(n: usize) -> (f32, f32) {
    let mut total = Tensor::zeros();
    let mut sum = Tensor::zeros();
    for i in 0..n {
        let loss = Tensor::input(i).forward();
        total += loss;
        let other = Tensor::input(i).forward();
        sum = sum + other;
    }
    (total.item(), sum.item())
}

fn main() {
    let _ = running_totals(2);
    let _ = (Tensor::input(0).relu().item(), Tensor::input(0).detach());
    let _ = empty_cache(&vramguard::Device::host());
    let _ = |t: &mut Tensor| t.relu_();
}
