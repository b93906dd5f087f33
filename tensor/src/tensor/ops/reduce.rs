//! Ops that reduce rows: sums and means over dimensions, softmax, layer norm, and the losses.

use super::record::{record, should_record, OpRecord, Saved};
use super::{check_dim, same_device};
use crate::tensor::backend;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::kinds::{BinOp, Layout, MapOp, ZipOp};
use crate::tensor::Tensor;
use std::sync::Arc;

impl Tensor {
    fn reduce(&self, dims: &[usize], keepdim: bool, mean: bool) -> Result<Tensor> {
        let op = if mean { "mean" } else { "sum" };
        let mut keep_shape = self.dims().to_vec();
        for (i, &d) in dims.iter().enumerate() {
            check_dim(op, self, d)?;
            if dims[..i].contains(&d) {
                // Counting a dimension twice would scale the mean by its size twice.
                return Err(TensorError::InvalidArgument {
                    op,
                    shape: self.dims().to_vec(),
                    message: format!("dimension {d} is listed twice in {dims:?}; list each once"),
                });
            }
            keep_shape[d] = 1;
        }
        let count: usize = dims
            .iter()
            .map(|&d| self.dims()[d])
            .product::<usize>()
            .max(1);
        let scale = if mean { 1.0 / count as f32 } else { 1.0 };
        let out = Tensor::from(backend::on(self.device(), op)?.reduce(
            self.strided(),
            dims,
            &keep_shape,
            scale,
            op,
        )?);
        let out = if keepdim {
            out
        } else {
            let shape: Vec<usize> = self
                .dims()
                .iter()
                .enumerate()
                .filter(|(i, _)| !dims.contains(i))
                .map(|(_, &s)| s)
                .collect();
            Tensor::from_parts(Arc::clone(out.storage()), Layout::contiguous(&shape), false)
        };
        record(&out, op, &[self], || OpRecord::Sum {
            in_shape: self.dims().to_vec(),
            keep_shape,
            scale,
        });
        Ok(out)
    }

    /// Sum over `dims`, keeping them as size 1 when `keepdim`.
    #[track_caller]
    pub fn sum_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sum_dims");
        self.reduce(dims, keepdim, false)
    }

    /// Sum over one dimension, removing it.
    #[track_caller]
    pub fn sum(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sum");
        self.reduce(&[dim], false, false)
    }

    /// Sum over one dimension, keeping it as size 1.
    #[track_caller]
    pub fn sum_keepdim(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sum_keepdim");
        self.reduce(&[dim], true, false)
    }

    /// Sum of all elements (shape `[]`).
    #[track_caller]
    pub fn sum_all(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sum_all");
        let all: Vec<usize> = (0..self.rank()).collect();
        self.reduce(&all, false, false)
    }

    /// Mean over `dims`, keeping them as size 1 when `keepdim`.
    #[track_caller]
    pub fn mean_dims(&self, dims: &[usize], keepdim: bool) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mean_dims");
        self.reduce(dims, keepdim, true)
    }

    /// Mean over one dimension, removing it.
    #[track_caller]
    pub fn mean(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mean");
        self.reduce(&[dim], false, true)
    }

    /// Mean over one dimension, keeping it as size 1.
    #[track_caller]
    pub fn mean_keepdim(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mean_keepdim");
        self.reduce(&[dim], true, true)
    }

    /// Mean of all elements (shape `[]`).
    #[track_caller]
    pub fn mean_all(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mean_all");
        let all: Vec<usize> = (0..self.rank()).collect();
        self.reduce(&all, false, true)
    }

    /// Sums `self` down to `shape`, the inverse of broadcasting `shape` to `self`'s shape.
    #[track_caller]
    pub fn sum_to_shape(&self, shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sum_to_shape");
        if self.dims() == shape {
            return Ok(self.clone());
        }
        let mismatch = || TensorError::ShapeMismatch {
            op: "sum_to_shape",
            lhs: self.dims().to_vec(),
            rhs: shape.to_vec(),
            reason: "the target shape does not broadcast to the tensor's shape".into(),
        };
        if shape.len() > self.rank() {
            return Err(mismatch());
        }
        let lead = self.rank() - shape.len();
        let mut dims: Vec<usize> = (0..lead).collect();
        for (i, &s) in shape.iter().enumerate() {
            let d = self.dims()[lead + i];
            if s == 1 && d != 1 {
                dims.push(lead + i);
            } else if s != d {
                return Err(mismatch());
            }
        }
        self.reduce(&dims, true, false)?.reshape(shape)
    }

    fn softmax_impl(&self, dim: usize, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        check_dim(op, self, dim)?;
        let out =
            Tensor::from(backend::on(self.device(), op)?.softmax(self.strided(), dim, log, op)?);
        record(&out, op, &[self], || {
            let saved = Saved::new(&out, "output");
            if log {
                OpRecord::LogSoftmax { out: saved, dim }
            } else {
                OpRecord::Softmax { out: saved, dim }
            }
        });
        Ok(out)
    }

    /// Log-softmax along `dim` (numerically stable).
    #[track_caller]
    pub fn log_softmax(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("log_softmax");
        self.softmax_impl(dim, true)
    }

    /// Mean cross-entropy of `self` (logits `[.., classes]`) against class indices `targets`
    /// (one per row). Returns a scalar. When recorded, it saves the softmax probabilities.
    #[track_caller]
    pub fn cross_entropy(&self, targets: &[u32]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("cross_entropy");
        const OP: &str = "cross_entropy";
        if self.rank() == 0 {
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: Vec::new(),
                message: "logits need a class dimension".into(),
            });
        }
        let c = self.dims()[self.rank() - 1];
        if c == 0 {
            // No class can be the target (and `elem_count / c` would miscount the rows).
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: self.dims().to_vec(),
                message: "logits have 0 classes".into(),
            });
        }
        let rows = self.elem_count() / c;
        if targets.len() != rows {
            return Err(TensorError::DataLength {
                op: OP,
                len: targets.len(),
                shape: self.dims()[..self.rank() - 1].to_vec(),
                expected: rows,
            });
        }
        if let Some(&bad) = targets.iter().find(|&&t| t as usize >= c) {
            return Err(TensorError::IndexOutOfRange {
                op: OP,
                index: bad as usize,
                size: c,
            });
        }
        let recording = should_record(&[self]);
        let logp = self.log_softmax_untracked(self.rank() - 1)?;
        let out =
            Tensor::from(backend::on(logp.device(), OP)?.cross_entropy(logp.strided(), targets)?);
        if recording {
            let probs = logp.map(OP, MapOp::Exp)?;
            drop(logp);
            record(&out, OP, &[self], || OpRecord::CrossEntropy {
                probs: Saved::new(&probs, "probabilities"),
                targets: targets.to_vec(),
            });
        }
        Ok(out)
    }

    fn log_softmax_untracked(&self, dim: usize) -> Result<Tensor> {
        let _guard = crate::grad::NoGradGuard::new();
        self.softmax_impl(dim, true)
    }

    /// Mean squared error between `self` and `target` (same shape). Returns a scalar; when
    /// recorded, it saves the difference.
    #[track_caller]
    pub fn mse_loss(&self, target: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mse_loss");
        const OP: &str = "mse_loss";
        same_device(OP, self, target)?;
        if self.dims() != target.dims() {
            return Err(TensorError::ShapeMismatch {
                op: OP,
                lhs: self.dims().to_vec(),
                rhs: target.dims().to_vec(),
                reason: "prediction and target must have the same shape".into(),
            });
        }
        let diff = self.zip_map(target, OP, ZipOp::Bin(BinOp::Sub))?;
        let out = Tensor::from(backend::on(diff.device(), OP)?.mean_square(diff.strided(), OP)?);
        record(&out, OP, &[self, target], || OpRecord::Mse {
            diff: Saved::new(&diff, "difference"),
        });
        Ok(out)
    }
}

// The ops with a consuming form: each defined once for `Tensor` and, from the same tokens, for
// `TensorAtLastUse` (see `tensor::last_use`).
with_consuming_form! {
    /// Softmax along `dim`.
    #[track_caller]
    pub fn softmax(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("softmax");
        self.softmax_impl(dim, false)
    }
    consuming(tensor) {
        tensor.into_softmax(dim)
    }

    /// Layer normalisation over the last dimension, with optional `weight` and `bias` of
    /// shape `[last dim]`. When recorded, it saves the input and the per-row mean and 1/std.
    #[track_caller]
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("layer_norm");
        const OP: &str = "layer_norm";
        if self.rank() == 0 {
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: Vec::new(),
                message: "needs at least one dimension".into(),
            });
        }
        let d = self.dims()[self.rank() - 1];
        if d == 0 {
            // Nothing to normalise over; the per-row statistics would be left unwritten.
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: self.dims().to_vec(),
                message: "the last dimension (normalised over) has size 0".into(),
            });
        }
        for p in [weight, bias].into_iter().flatten() {
            same_device(OP, self, p)?;
            if p.dims() != [d] {
                return Err(TensorError::ShapeMismatch {
                    op: OP,
                    lhs: self.dims().to_vec(),
                    rhs: p.dims().to_vec(),
                    reason: format!("weight and bias must have shape [{d}] (the last dimension)"),
                });
            }
        }
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        let recording = should_record(&inputs);
        let x = self.contiguous()?;
        let (w, b) = (
            weight.map(Tensor::contiguous).transpose()?,
            bias.map(Tensor::contiguous).transpose()?,
        );
        let (out, stats) = backend::on(x.device(), OP)?.layer_norm(
            x.strided(),
            w.as_ref().map(Tensor::strided),
            b.as_ref().map(Tensor::strided),
            eps,
            recording,
        )?;
        let out = Tensor::from(out);
        let stats = stats.map(|(mean, rstd)| (Tensor::from(mean), Tensor::from(rstd)));
        if let Some((mean, rstd)) = stats {
            record(&out, OP, &inputs, || OpRecord::LayerNorm {
                x: Saved::new(&x, "input"),
                mean: Saved::new(&mean, "mean"),
                rstd: Saved::new(&rstd, "rstd"),
                weight: w.as_ref().map(|w| Saved::new(w, "weight")),
                has_bias: bias.is_some(),
            });
        }
        Ok(out)
    }
    consuming(tensor) {
        tensor.into_layer_norm(weight, bias, eps)
    }
}
