//! Element-wise ops: arithmetic on a tensor or a scalar (broadcast), activations, and the
//! arithmetic operators on borrowed tensors (`&a + &b`, `&a * 2.0`, …), which allocate their
//! result; the operators on owned tensors may reuse a buffer, so they are in `inplace`.

use super::record::{record, OpRecord, Saved};
use super::Rhs;
use crate::tensor::error::Result;
use crate::tensor::kinds::{BinOp, MapOp, Unary, ZipOp};
use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// What backward needs of `a op b`.
pub(crate) fn binary_record(op: BinOp, a: &Tensor, b: &Tensor) -> OpRecord {
    let (a_shape, b_shape) = (a.dims().to_vec(), b.dims().to_vec());
    match op {
        BinOp::Add => OpRecord::Add { a_shape, b_shape },
        BinOp::Sub => OpRecord::Sub { a_shape, b_shape },
        BinOp::Mul => OpRecord::Mul {
            a: b.requires_grad().then(|| Saved::new(a, "left operand")),
            b: a.requires_grad().then(|| Saved::new(b, "right operand")),
            a_shape,
            b_shape,
        },
        BinOp::Div => OpRecord::Div {
            a: b.requires_grad().then(|| Saved::new(a, "numerator")),
            b: Saved::new(b, "denominator"),
            a_shape,
            b_shape,
        },
    }
}

/// What backward needs of an activation.
pub(crate) fn unary_record(op: Unary, input: &Tensor, output: &Tensor) -> OpRecord {
    match op {
        Unary::Relu => OpRecord::Relu {
            out: Saved::new(output, "output"),
        },
        Unary::Gelu => OpRecord::Gelu {
            x: Saved::new(input, "input"),
        },
        Unary::Tanh => OpRecord::Tanh {
            out: Saved::new(output, "output"),
        },
        Unary::Sigmoid => OpRecord::Sigmoid {
            out: Saved::new(output, "output"),
        },
        Unary::Exp => OpRecord::Exp {
            out: Saved::new(output, "output"),
        },
        Unary::Log => OpRecord::Log {
            x: Saved::new(input, "input"),
        },
    }
}

/// What backward needs of `x op s` for a scalar `s`.
pub(crate) fn scalar_record(op: BinOp, s: f32) -> OpRecord {
    match op {
        BinOp::Add | BinOp::Sub => OpRecord::Identity,
        BinOp::Mul => OpRecord::MulScalar(s),
        BinOp::Div => OpRecord::MulScalar(1.0 / s),
    }
}

impl Tensor {
    pub(crate) fn binary(&self, rhs: &Tensor, op: BinOp) -> Result<Tensor> {
        let out = self.zip_map(rhs, op.name(), ZipOp::Bin(op))?;
        record(&out, op.name(), &[self, rhs], || {
            binary_record(op, self, rhs)
        });
        Ok(out)
    }

    pub(crate) fn scalar_op(&self, s: f32, op: BinOp) -> Result<Tensor> {
        let out = self.map(op.name(), MapOp::Scalar(op, s))?;
        record(&out, op.name(), &[self], || scalar_record(op, s));
        Ok(out)
    }

    /// `-self`.
    #[track_caller]
    pub fn neg(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("neg");
        let out = self.map("neg", MapOp::Neg)?;
        record(&out, "neg", &[self], || OpRecord::MulScalar(-1.0));
        Ok(out)
    }

    pub(crate) fn unary(&self, op: Unary) -> Result<Tensor> {
        let out = self.map(op.name(), op.map_op())?;
        record(&out, op.name(), &[self], || unary_record(op, self, &out));
        Ok(out)
    }
}

// The ops with a consuming form: each defined once for `Tensor` and, from the same tokens, for
// `TensorAtLastUse` (see `tensor::last_use`).
with_consuming_form! {
    /// `self + rhs` (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn add<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("add");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Add),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Add),
        }
    }
    consuming(tensor) {
        match rhs.into() {
            Rhs::Tensor(rhs) => tensor + rhs,
            Rhs::Scalar(rhs) => tensor + rhs,
        }
    }

    /// `self - rhs` (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn sub<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sub");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Sub),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Sub),
        }
    }
    consuming(tensor) {
        match rhs.into() {
            Rhs::Tensor(rhs) => tensor - rhs,
            Rhs::Scalar(rhs) => tensor - rhs,
        }
    }

    /// `self * rhs` element-wise (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn mul<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mul");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Mul),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Mul),
        }
    }
    consuming(tensor) {
        match rhs.into() {
            Rhs::Tensor(rhs) => tensor * rhs,
            Rhs::Scalar(rhs) => tensor * rhs,
        }
    }

    /// `self / rhs` element-wise (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn div<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("div");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Div),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Div),
        }
    }
    consuming(tensor) {
        match rhs.into() {
            Rhs::Tensor(rhs) => tensor / rhs,
            Rhs::Scalar(rhs) => tensor / rhs,
        }
    }

    /// Broadcasting add (candle's name).
    #[track_caller]
    pub fn broadcast_add(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_add");
        self.binary(rhs, BinOp::Add)
    }
    consuming(tensor) {
        tensor + rhs
    }

    /// Broadcasting subtract (candle's name).
    #[track_caller]
    pub fn broadcast_sub(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_sub");
        self.binary(rhs, BinOp::Sub)
    }
    consuming(tensor) {
        tensor - rhs
    }

    /// Broadcasting multiply (candle's name).
    #[track_caller]
    pub fn broadcast_mul(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_mul");
        self.binary(rhs, BinOp::Mul)
    }
    consuming(tensor) {
        tensor * rhs
    }

    /// Broadcasting divide (candle's name).
    #[track_caller]
    pub fn broadcast_div(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_div");
        self.binary(rhs, BinOp::Div)
    }
    consuming(tensor) {
        tensor / rhs
    }

    /// `self + s`.
    #[track_caller]
    pub fn add_scalar(&self, s: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("add_scalar");
        self.scalar_op(s, BinOp::Add)
    }
    consuming(tensor) {
        tensor + s
    }

    /// `self * s`.
    #[track_caller]
    pub fn mul_scalar(&self, s: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mul_scalar");
        self.scalar_op(s, BinOp::Mul)
    }
    consuming(tensor) {
        tensor * s
    }

    /// `self * mul + add`.
    #[track_caller]
    pub fn affine(&self, mul: f32, add: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("affine");
        let out = self.map("affine", MapOp::Affine(mul, add))?;
        record(&out, "affine", &[self], || OpRecord::MulScalar(mul));
        Ok(out)
    }
    consuming(tensor) {
        tensor.into_affine(mul, add)
    }

    /// `max(x, 0)`.
    #[track_caller]
    pub fn relu(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("relu");
        self.unary(Unary::Relu)
    }
    consuming(tensor) {
        tensor.into_relu()
    }

    /// GELU, tanh approximation (as in BERT/GPT-2 implementations).
    #[track_caller]
    pub fn gelu(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("gelu");
        self.unary(Unary::Gelu)
    }
    consuming(tensor) {
        tensor.into_gelu()
    }

    /// Hyperbolic tangent.
    #[track_caller]
    pub fn tanh(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("tanh");
        self.unary(Unary::Tanh)
    }
    consuming(tensor) {
        tensor.into_tanh()
    }

    /// Logistic sigmoid.
    #[track_caller]
    pub fn sigmoid(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sigmoid");
        self.unary(Unary::Sigmoid)
    }
    consuming(tensor) {
        tensor.into_sigmoid()
    }

    /// `e^x`.
    #[track_caller]
    pub fn exp(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("exp");
        self.unary(Unary::Exp)
    }
    consuming(tensor) {
        tensor.into_exp()
    }

    /// Natural logarithm.
    #[track_caller]
    pub fn log(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("log");
        self.unary(Unary::Log)
    }
    consuming(tensor) {
        tensor.into_log()
    }
}

macro_rules! borrowed_operator {
    ($trait:ident, $method:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<f32> for &Tensor {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: f32) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
    };
}

// The operators return `Result<Tensor>` (write `(&a + &b)?`, as in candle), so a shape
// mismatch is an error value, never a panic.
borrowed_operator!(Add, add);
borrowed_operator!(Sub, sub);
borrowed_operator!(Mul, mul);
borrowed_operator!(Div, div);

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
