//! Vec-based fake tensors for the batch-scope tests: real f32 values on the host, and one
//! device allocation of the same byte size each, so that memory accounting is exact.
//! (The real `Tensor` replaces them once it is merged.)
#![allow(dead_code)] // Each test file uses a subset.

use vramguard::Device;
// The facade does not re-export the allocation type; tests may name the runtime crate.
use vramguard_memory::device::Allocation;

/// A matrix of f32 whose bytes are held on `device`.
pub struct T {
    pub data: Vec<f32>,
    pub rows: usize,
    pub cols: usize,
    _memory: Allocation,
}

// Its drop returns its bytes and nothing else: the attributes may free it at its last use.
impl vramguard::DropAtLastUse for T {}

impl T {
    pub fn from_vec(device: &Device, rows: usize, cols: usize, data: Vec<f32>) -> T {
        assert_eq!(data.len(), rows * cols);
        let memory = device.allocate(rows * cols * 4).expect("host allocation");
        T {
            data,
            rows,
            cols,
            _memory: memory,
        }
    }

    /// Deterministic pseudo-random values in [-0.5, 0.5).
    pub fn seeded(device: &Device, rows: usize, cols: usize, seed: u64) -> T {
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let data = (0..rows * cols)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect();
        T::from_vec(device, rows, cols, data)
    }

    fn device_of(&self) -> &Device {
        self._memory.device()
    }

    fn map(&self, f: impl Fn(f32) -> f32) -> T {
        let data = self.data.iter().map(|&x| f(x)).collect();
        T::from_vec(self.device_of(), self.rows, self.cols, data)
    }

    pub fn matmul(&self, other: &T) -> T {
        assert_eq!(self.cols, other.rows);
        let mut data = vec![0.0; self.rows * other.cols];
        for i in 0..self.rows {
            for k in 0..self.cols {
                let a = self.data[i * self.cols + k];
                for j in 0..other.cols {
                    data[i * other.cols + j] += a * other.data[k * other.cols + j];
                }
            }
        }
        T::from_vec(self.device_of(), self.rows, other.cols, data)
    }

    /// `selfᵀ · other`: the shape of a weight gradient.
    pub fn t_matmul(&self, other: &T) -> T {
        assert_eq!(self.rows, other.rows);
        let mut data = vec![0.0; self.cols * other.cols];
        for r in 0..self.rows {
            for i in 0..self.cols {
                let a = self.data[r * self.cols + i];
                for j in 0..other.cols {
                    data[i * other.cols + j] += a * other.data[r * other.cols + j];
                }
            }
        }
        T::from_vec(self.device_of(), self.cols, other.cols, data)
    }

    pub fn relu(&self) -> T {
        self.map(|x| x.max(0.0))
    }

    pub fn tanh(&self) -> T {
        self.map(f32::tanh)
    }

    pub fn sigmoid(&self) -> T {
        self.map(|x| 1.0 / (1.0 + (-x).exp()))
    }

    /// Mean squared distance to `target`, as a 1×1 value.
    pub fn mse(&self, target: f32) -> T {
        let n = self.data.len() as f32;
        let loss = self
            .data
            .iter()
            .map(|x| (x - target) * (x - target))
            .sum::<f32>()
            / n;
        T::from_vec(self.device_of(), 1, 1, vec![loss])
    }

    /// `self -= lr * grad`, in place.
    pub fn sgd_step(&mut self, grad: &T, lr: f32) {
        for (p, g) in self.data.iter_mut().zip(&grad.data) {
            *p -= lr * g;
        }
    }

    pub fn item(&self) -> f32 {
        self.data[0]
    }

    /// Bytes this value holds on its device (the allocator's block size).
    pub fn bytes(&self) -> u64 {
        self._memory.size() as u64
    }
}
