//! In place at last use (issue #21), one function per op shape: a listed op on a local at its
//! last use calls `Dying`'s consuming form for vramguard's `Tensor` (same bits, fewer bytes),
//! and the original call, unchanged, for every other type with methods of those names: a
//! `DropAtLastUse` type with `&self`, `&mut self` and by-value methods, a `Copy` type, a generic
//! parameter, a method taking a closure, and `inplace = false`.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// A type with methods named like the consuming forms, each logging its call.
pub mod lookalike {
    use super::support::{mk, step, T};

    impl T {
        pub fn gelu(&self) -> T {
            step("gelu");
            mk("gelu", self.v + 1)
        }
        pub fn broadcast_add(&self, rhs: &T) -> T {
            step("broadcast_add");
            mk("broadcast_add", self.v + rhs.v)
        }
        pub fn add_scalar(&self, s: i64) -> T {
            step("add_scalar");
            mk("add_scalar", self.v + s)
        }
        pub fn affine(&self, mul: i64, add: i64) -> T {
            step("affine");
            mk("affine", self.v * mul + add)
        }
        pub fn softmax(&self, dim: usize) -> T {
            step("softmax");
            mk("softmax", self.v + dim as i64)
        }
        pub fn layer_norm(&self, w: Option<&T>, b: Option<&T>, eps: i64) -> T {
            step("layer_norm");
            let (w, b) = (w.map_or(1, |w| w.v), b.map_or(0, |b| b.v));
            mk("layer_norm", self.v * w + b + eps)
        }
        /// `&mut self`: the receiver is a `mut` binding.
        pub fn relu(&mut self) -> i64 {
            step("relu");
            self.v = self.v.max(0);
            self.v
        }
        /// By value, like burn's ops.
        pub fn exp(self) -> T {
            step("exp");
            mk("exp", self.v * 3)
        }
        /// A closure argument, whose parameter type comes from the method.
        pub fn mapv(&self, f: impl Fn(i64) -> i64) -> T {
            step("mapv");
            mk("mapv", f(self.v))
        }
    }

    /// A `Copy` value with a listed name.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub struct Scalar(pub i64);

    impl Scalar {
        pub fn tanh(self) -> i64 {
            step("tanh");
            self.0 / 2
        }
    }

    /// A generic receiver.
    pub trait Activation {
        fn sigmoid(&self) -> i64;
    }

    impl Activation for T {
        fn sigmoid(&self) -> i64 {
            step("sigmoid");
            self.v * 5
        }
    }
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::lookalike::{Activation, Scalar};
        #[allow(unused_imports)]
        use super::support::{mk, step, T};
        use vramguard::{Device, Tensor, TensorError};

        /// Every op shape on vramguard's tensor; returns the output's bits.
        $(#[$attr])?
        pub fn tensor_ops(x: &Tensor, row: &Tensor) -> Result<Vec<u32>, TensorError> {
            let h = x.exp()?;
            let h = h.relu()?; // unary
            let h = h.add(x)?; // binary, same shape
            let h = h.broadcast_sub(row)?; // binary, broadcast
            let h = h.div(3.0)?; // scalar through `Rhs`
            let h = h.mul_scalar(0.5)?;
            let h = h.affine(2.0, -1.0)?;
            let h = h.softmax(1)?; // last dimension
            let h = h.layer_norm(Some(row), None, 1e-5)?;
            let out: Vec<f32> = h.to_vec()?;
            Ok(out.into_iter().map(f32::to_bits).collect())
        }

        /// `softmax` along another dimension: out of place, same bits.
        $(#[$attr])?
        pub fn softmax_first_dim(x: &Tensor) -> Result<Vec<f32>, TensorError> {
            let h = x.tanh()?;
            let h = h.softmax(0)?;
            let out = h.to_vec()?;
            Ok(out)
        }

        /// The original calls, in the original order, on a type without consuming forms.
        $(#[$attr])?
        pub fn lookalike_ops() -> i64 {
            let a = mk("a", 1);
            let b = mk("b", 2);
            let h = a.gelu();
            let h = h.broadcast_add(&b);
            let h = h.add_scalar(3);
            let h = h.affine(2, 1);
            let h = h.softmax(1);
            let h = h.layer_norm(Some(&b), None, 1);
            let h = h.mapv(|v| v * 10);
            let h = h.exp();
            let mut m = mk("m", -4);
            let r = m.relu();
            step("after relu");
            let s = Scalar(h.v);
            let t = s.tanh();
            let g = sigmoid_of(h);
            r + t + g
        }

        $(#[$attr])?
        pub fn sigmoid_of<A: Activation>(a: A) -> i64 {
            let x = a;
            let y = x.sigmoid();
            step("sigmoid done");
            y
        }

        /// The switch: every op as written.
        #[vramguard::inference(inplace = false)]
        pub fn switched_off(x: &Tensor) -> Result<Vec<f32>, TensorError> {
            let h = x.exp()?;
            let h = h.gelu()?;
            let out = h.to_vec()?;
            Ok(out)
        }

        pub fn device() -> Device {
            Device::isolated_host()
        }
    };
}

mod with {
    cases!(vramguard::inference);
}

mod without {
    cases!();
}

fn main() -> Result<(), vramguard::TensorError> {
    use vramguard::{memory, Tensor};
    let device = with::device();
    let x = Tensor::randn(&[16, 32], 0.0, 1.0, 1, &device)?;
    let row = Tensor::randn(&[32], 1.0, 0.1, 2, &device)?;

    let peak = |f: fn(&Tensor, &Tensor) -> Result<Vec<u32>, vramguard::TensorError>| {
        let before = memory::stats(&device).allocated_bytes;
        memory::reset_peak_stats(&device);
        let bits = vramguard::no_grad(|| f(&x, &row))?;
        let peak = memory::stats(&device).peak_allocated_bytes - before;
        Ok::<_, vramguard::TensorError>((peak, bits))
    };
    let (peak_with, bits_with) = peak(with::tensor_ops)?;
    let (peak_without, bits_without) = peak(without::tensor_ops)?;
    assert_eq!(bits_with, bits_without, "tensor ops: bits differ");
    // One 2 KiB buffer carries every op in place; without the attribute all nine live.
    assert_eq!(peak_with, 16 * 32 * 4);
    assert_eq!(peak_without, 9 * 16 * 32 * 4);

    let softmax = vramguard::no_grad(|| with::softmax_first_dim(&x))?;
    assert_eq!(softmax, without::softmax_first_dim(&x)?);
    assert_eq!(with::switched_off(&x)?, x.exp()?.gelu()?.to_vec()?);

    check!(lookalike_ops() => earlier);
    Ok(())
}
