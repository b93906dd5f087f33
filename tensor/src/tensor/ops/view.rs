//! Views (reshape when possible, transpose, permute, narrow, unsqueeze, squeeze, broadcast),
//! which share storage, and the copies (`contiguous`, `copy`).

use super::check_dim;
use super::record::{record, OpRecord};
use crate::tensor::error::{unreachable_error, Result, TensorError};
use crate::tensor::kinds::{broadcast_shape, checked_numel, contiguous_strides, Layout, MapOp};
use crate::tensor::Tensor;
use std::sync::Arc;

impl Tensor {
    fn view(&self, layout: Layout, op: &'static str, make: impl FnOnce() -> OpRecord) -> Tensor {
        let out = Tensor::from_parts(Arc::clone(self.storage()), layout, true);
        record(&out, op, &[self], make);
        out
    }

    /// The same elements with another shape: a view when the layout allows, a copy otherwise.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("reshape");
        let numel = checked_numel("reshape", shape)?;
        if numel != self.elem_count() {
            return Err(TensorError::ShapeMismatch {
                op: "reshape",
                lhs: self.dims().to_vec(),
                rhs: shape.to_vec(),
                reason: format!("{} elements cannot be viewed as {numel}", self.elem_count()),
            });
        }
        if self.dims() == shape {
            return Ok(self.clone());
        }
        if !self.is_contiguous() {
            return self.contiguous()?.reshape(shape);
        }
        let layout = Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: self.offset(),
        };
        Ok(self.view(layout, "reshape", || OpRecord::Reshape {
            in_shape: self.dims().to_vec(),
        }))
    }

    /// All elements as one dimension.
    #[track_caller]
    pub fn flatten_all(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("flatten_all");
        self.reshape(&[self.elem_count()])
    }

    /// Swaps two dimensions (a view).
    #[track_caller]
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("transpose");
        check_dim("transpose", self, d0)?;
        check_dim("transpose", self, d1)?;
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(d0, d1);
        self.permute(&perm)
    }

    /// Transpose of the last two dimensions (a view).
    #[track_caller]
    pub fn t(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("t");
        if self.rank() < 2 {
            return Err(TensorError::InvalidArgument {
                op: "t",
                shape: self.dims().to_vec(),
                message: "needs at least 2 dimensions".into(),
            });
        }
        self.transpose(self.rank() - 2, self.rank() - 1)
    }

    /// Reorders dimensions: dimension `i` of the result is dimension `perm[i]` of `self`.
    #[track_caller]
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("permute");
        let mut seen = vec![false; self.rank()];
        if perm.len() != self.rank()
            || perm
                .iter()
                .any(|&p| p >= self.rank() || std::mem::replace(&mut seen[p], true))
        {
            return Err(TensorError::InvalidArgument {
                op: "permute",
                shape: self.dims().to_vec(),
                message: format!("{perm:?} is not a permutation of 0..{}", self.rank()),
            });
        }
        let layout = self.0.layout.permuted(perm);
        Ok(self.view(layout, "permute", || OpRecord::Permute {
            perm: perm.to_vec(),
        }))
    }

    /// `len` elements of dimension `dim` starting at `start` (a view).
    #[track_caller]
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("narrow");
        check_dim("narrow", self, dim)?;
        let size = self.dims()[dim];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(TensorError::IndexOutOfRange {
                op: "narrow",
                index: start.saturating_add(len),
                size,
            });
        }
        let mut layout = self.0.layout.clone();
        layout.shape[dim] = len;
        layout.offset += start * layout.strides[dim];
        Ok(self.view(layout, "narrow", || OpRecord::Narrow {
            in_shape: self.dims().to_vec(),
            dim,
            start,
        }))
    }

    /// Inserts a dimension of size 1 at `dim` (a view).
    #[track_caller]
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("unsqueeze");
        if dim > self.rank() {
            return Err(TensorError::DimOutOfRange {
                op: "unsqueeze",
                dim,
                shape: self.dims().to_vec(),
            });
        }
        let mut shape = self.dims().to_vec();
        shape.insert(dim, 1);
        self.reshape_view_any(shape, "unsqueeze")
    }

    /// Removes dimension `dim`, which must have size 1 (a view).
    #[track_caller]
    pub fn squeeze(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("squeeze");
        check_dim("squeeze", self, dim)?;
        if self.dims()[dim] != 1 {
            return Err(TensorError::InvalidArgument {
                op: "squeeze",
                shape: self.dims().to_vec(),
                message: format!("dimension {dim} has size {}, not 1", self.dims()[dim]),
            });
        }
        let mut shape = self.dims().to_vec();
        shape.remove(dim);
        self.reshape_view_any(shape, "squeeze")
    }

    /// Adds or removes size-1 dimensions of any layout as a view.
    fn reshape_view_any(&self, shape: Vec<usize>, op: &'static str) -> Result<Tensor> {
        let mut strides = Vec::with_capacity(shape.len());
        let mut src = self
            .dims()
            .iter()
            .zip(self.strides())
            .filter(|(&d, _)| d != 1);
        for &d in &shape {
            if d == 1 {
                strides.push(1);
            } else {
                let Some((_, &s)) = src.next() else {
                    return Err(unreachable_error(op, "size-1 reshape lost a dimension"));
                };
                strides.push(s);
            }
        }
        let layout = Layout {
            shape,
            strides,
            offset: self.offset(),
        };
        Ok(self.view(layout, op, || OpRecord::Reshape {
            in_shape: self.dims().to_vec(),
        }))
    }

    /// `self` repeated along broadcast dimensions to `shape` (a view with zero strides).
    #[track_caller]
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_as");
        checked_numel("broadcast_as", shape)?;
        let out = broadcast_shape("broadcast_as", self.dims(), shape)?;
        if out != shape {
            return Err(TensorError::ShapeMismatch {
                op: "broadcast_as",
                lhs: self.dims().to_vec(),
                rhs: shape.to_vec(),
                reason: "the tensor does not broadcast to the target shape".into(),
            });
        }
        let layout = self.0.layout.broadcast_to(shape);
        Ok(self.view(layout, "broadcast_as", || OpRecord::Expand {
            in_shape: self.dims().to_vec(),
        }))
    }

    /// `self` if already contiguous, else a contiguous copy.
    #[track_caller]
    pub fn contiguous(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("contiguous");
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.copy_named("contiguous")
    }

    /// A contiguous copy with its own storage (PyTorch's `clone()`; `Clone` shares storage).
    #[track_caller]
    pub fn copy(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("copy");
        self.copy_named("copy")
    }

    fn copy_named(&self, op: &'static str) -> Result<Tensor> {
        let out = self.map(op, MapOp::Copy)?;
        record(&out, op, &[self], || OpRecord::Identity);
        Ok(out)
    }
}
