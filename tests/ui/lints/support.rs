//! A stand-in tensor type shared by the lint cases (the lints are syntactic: any type works).
#![allow(dead_code)]

pub struct Tensor(pub Vec<f32>);

impl Tensor {
    pub fn input(i: usize) -> Tensor {
        Tensor(vec![i as f32; 4])
    }
    pub fn zeros() -> Tensor {
        Tensor(vec![0.0; 4])
    }
    pub fn forward(&self) -> Tensor {
        Tensor(self.0.iter().map(|x| x * 2.0).collect())
    }
    pub fn relu_(&mut self) {
        self.0.iter_mut().for_each(|x| *x = x.max(0.0));
    }
    pub fn relu(&self) -> Tensor {
        Tensor(self.0.iter().map(|x| x.max(0.0)).collect())
    }
    pub fn item(&self) -> f32 {
        self.0[0]
    }
    pub fn detach(&self) -> Tensor {
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

pub fn empty_cache(device: &vramguard::Device) -> u64 {
    vramguard::memory::empty_cache(device)
}
