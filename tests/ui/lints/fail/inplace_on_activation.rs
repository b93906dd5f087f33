#![deny(deprecated)]
struct Tensor(Vec<f32>);

impl Tensor {
    fn input(i: usize) -> Tensor {
        Tensor(vec![i as f32; 4])
    }
    fn zeros() -> Tensor {
        Tensor(vec![0.0; 4])
    }
    fn forward(&self) -> Tensor {
        Tensor(self.0.iter().map(|x| x * 2.0).collect())
    }
    fn relu_(&mut self) {
        self.0.iter_mut().for_each(|x| *x = x.max(0.0));
    }
    fn relu(&self) -> Tensor {
        Tensor(self.0.iter().map(|x| x.max(0.0)).collect())
    }
    fn item(&self) -> f32 {
        self.0[0]
    }
    fn detach(&self) -> Tensor {
        Tensor(self.0.clone())
    }
}

impl std::ops::AddAssign<Tensor> for Tensor {
    fn add_assign(&mut self, other: Tensor) {
        self.0.iter_mut().zip(other.0).for_each(|(a, b)| *a += b);
    }
}

impl std::ops::Add<Tensor> for Tensor {
    type Output = Tensor;
    fn add(mut self, other: Tensor) -> Tensor {
        self += other;
        self
    }
}

fn empty_cache(device: &vramguard::Device) -> u64 {
    vramguard::memory::empty_cache(device)
}

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
