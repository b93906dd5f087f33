//! The op layer: shape checks, the backend call, and the op's record for autograd (what was
//! done and what backward will need, in [`record`]). Ops never compute gradients (that is
//! `autograd`, above them) and never write into their inputs (that is `inplace`).
//!
//! - [`elementwise`]: arithmetic (tensor or scalar, broadcast), activations, and the operators
//!   on borrowed tensors;
//! - [`matmul`]: the matrix product;
//! - [`reduce`]: sums and means, softmax, layer norm and the losses (each reduces rows);
//! - [`embedding`]: the table lookup;
//! - [`view`]: reshapes, transposes, narrows and broadcasts sharing storage, and the copies.

pub(crate) mod elementwise;
pub(crate) mod embedding;
pub(crate) mod matmul;
pub(crate) mod record;
pub(crate) mod reduce;
pub(crate) mod view;

use super::backend;
use super::error::{Result, TensorError};
use super::kinds::{broadcast_shape, MapOp, ZipOp};
use super::Tensor;

/// Right-hand side of arithmetic: a tensor (broadcast) or a scalar.
#[derive(Debug, Clone, Copy)]
pub enum Rhs<'a> {
    /// A tensor, broadcast against the left operand.
    Tensor(&'a Tensor),
    /// A scalar.
    Scalar(f32),
}

impl<'a> From<&'a Tensor> for Rhs<'a> {
    fn from(t: &'a Tensor) -> Self {
        Rhs::Tensor(t)
    }
}

impl From<f32> for Rhs<'_> {
    fn from(s: f32) -> Self {
        Rhs::Scalar(s)
    }
}

pub(crate) fn same_device(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.device() != b.device() {
        return Err(TensorError::DeviceMismatch {
            op,
            lhs: format!("{:?}", a.device()),
            rhs: format!("{:?}", b.device()),
        });
    }
    Ok(())
}

pub(crate) fn check_dim(op: &'static str, t: &Tensor, dim: usize) -> Result<()> {
    if dim >= t.rank() {
        return Err(TensorError::DimOutOfRange {
            op,
            dim,
            shape: t.dims().to_vec(),
        });
    }
    Ok(())
}

impl Tensor {
    /// `f(self, other)` element-wise with broadcasting; records nothing.
    pub(crate) fn zip_map(&self, other: &Tensor, op: &'static str, f: ZipOp) -> Result<Tensor> {
        same_device(op, self, other)?;
        let shape = broadcast_shape(op, self.dims(), other.dims())?;
        backend::on(self.device(), op)?
            .zip(self.strided(), other.strided(), &shape, op, f)
            .map(Tensor::from)
    }

    /// `f(self)` element-wise into a new contiguous tensor; records nothing.
    pub(crate) fn map(&self, op: &'static str, f: MapOp) -> Result<Tensor> {
        backend::on(self.device(), op)?
            .map(self.strided(), op, f)
            .map(Tensor::from)
    }
}
