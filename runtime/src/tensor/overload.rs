//! Arithmetic operators. They return `Result<Tensor>` (write `(&a + &b)?`, as in candle), so a
//! shape mismatch is an error value, never a panic.
//!
//! - `&a op &b`, `&a op s`: allocate the result.
//! - `a op &b`, `a op s` with `a` owned: write into `a`'s buffer when nothing else can observe
//!   it (see the [module docs](super)), else allocate.

use super::kinds::BinOp;
use super::{Result, Tensor};
use std::ops::{Add, Div, Mul, Neg, Sub};

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                let _origin = crate::alloc::enter_op(stringify!($method));
                self.binary_owned(rhs, $op)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Result<Tensor> {
                let _origin = crate::alloc::enter_op(stringify!($method));
                self.binary_owned(&rhs, $op)
            }
        }
        impl $trait<f32> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: f32) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<f32> for Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: f32) -> Result<Tensor> {
                let _origin = crate::alloc::enter_op(stringify!($method));
                self.scalar_owned(rhs, $op)
            }
        }
    };
}

binary_operator!(Add, add, BinOp::Add);
binary_operator!(Sub, sub, BinOp::Sub);
binary_operator!(Mul, mul, BinOp::Mul);
binary_operator!(Div, div, BinOp::Div);

impl Add<&Tensor> for f32 {
    type Output = Result<Tensor>;
    #[track_caller]
    fn add(self, rhs: &Tensor) -> Result<Tensor> {
        rhs.add_scalar(self)
    }
}

impl Mul<&Tensor> for f32 {
    type Output = Result<Tensor>;
    #[track_caller]
    fn mul(self, rhs: &Tensor) -> Result<Tensor> {
        rhs.mul_scalar(self)
    }
}

impl Sub<&Tensor> for f32 {
    type Output = Result<Tensor>;
    #[track_caller]
    fn sub(self, rhs: &Tensor) -> Result<Tensor> {
        rhs.affine(-1.0, self)
    }
}

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("neg");
        self.scalar_owned(-1.0, BinOp::Mul)
    }
}
