//! Everything that writes into existing memory, and the checks that keep autograd right
//! when something does:
//!
//! - the in-place ops (`add_`, `sub_`, `mul_`, `div_`, `relu_`, `copy_`, `zero_`, `fill_`): they
//!   bump the storage's version counter and, when recorded, rewrite the target's history;
//! - the consuming forms (`into_relu`, …, `into_affine`, `into_softmax`, `into_layer_norm`, and
//!   the operators on owned tensors, `x + &b`), which reuse `x`'s buffer when nothing else can
//!   observe it and autograd does not need the overwritten input (what `#[inference]` calls at
//!   a tensor's last use, issue #21); otherwise they compute out of place, with the same bits;
//! - the version checks: a saved tensor written after it was saved fails backward
//!   ([`Saved::check`]), and other handles on a rewritten storage become stale.

use super::backend;
use super::error::{Result, TensorError};
use super::kinds::{broadcast_shape, BinOp, Layout, MapOp, Unary, ZipOp};
use super::ops::elementwise::{binary_record, scalar_record, unary_record};
use super::ops::record::{attach, edges, should_record, OpRecord, Saved};
use super::ops::{check_dim, same_device, Rhs};
use super::storage::Storage;
use super::{Tensor, TensorInner};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Tensor {
    /// Whether `self` could be overwritten without anyone observing it: the handle and the
    /// storage are uniquely owned, `self` covers its whole storage contiguously, and it is not a
    /// leaf requiring grad.
    pub(crate) fn is_exclusively_owned(&mut self) -> bool {
        let leaf_rg = self.0.leaf_requires_grad.load(Ordering::Acquire);
        let Some(inner) = Arc::get_mut(&mut self.0) else {
            return false;
        };
        !leaf_rg
            && inner.layout.offset == 0
            && inner.layout.is_contiguous()
            && inner.layout.numel() == inner.storage.numel
            && Arc::get_mut(&mut inner.storage).is_some()
    }

    /// Marks a recorded in-place write through this handle: other handles on the storage
    /// become stale, this one (and its clones) stays current.
    pub(crate) fn note_history_rewrite(&self) {
        let now = self
            .storage()
            .history_rewrites
            .fetch_add(1, Ordering::AcqRel)
            + 1;
        self.0.history_seen.store(now, Ordering::Release);
    }

    /// Takes the buffer of an exclusively owned tensor (see [`Tensor::is_exclusively_owned`]).
    fn into_buffer(self) -> std::result::Result<(Arc<Storage>, Layout), Tensor> {
        match Arc::try_unwrap(self.0) {
            Ok(TensorInner {
                storage, layout, ..
            }) => Ok((storage, layout)),
            Err(inner) => Err(Tensor(inner)),
        }
    }

    /// `self op rhs`, writing into `self`'s buffer when nothing else can observe it.
    pub(crate) fn binary_owned(mut self, rhs: &Tensor, op: BinOp) -> Result<Tensor> {
        same_device(op.name(), &self, rhs)?;
        let shape = broadcast_shape(op.name(), self.dims(), rhs.dims())?;
        let recording = should_record(&[&self, rhs]);
        if shape != self.dims()
            || (recording && op.saves_lhs() && rhs.requires_grad())
            || !self.is_exclusively_owned()
        {
            return self.binary(rhs, op);
        }
        let edges = edges(&[&self, rhs]);
        let (a_shape, b_shape) = (self.dims().to_vec(), rhs.dims().to_vec());
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.binary(rhs, op),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::on(out.device(), op.name())?.zip_inplace(
            out.strided(),
            rhs.strided(),
            op.name(),
            ZipOp::Bin(op),
        )?;
        attach(&out, op.name(), edges, || match op {
            BinOp::Add => OpRecord::Add { a_shape, b_shape },
            BinOp::Sub => OpRecord::Sub { a_shape, b_shape },
            // Reached only when the right operand needs no gradient: nothing of `self` is kept.
            BinOp::Mul => OpRecord::Mul {
                a: None,
                b: Some(Saved::new(rhs, "right operand")),
                a_shape,
                b_shape,
            },
            BinOp::Div => OpRecord::Div {
                a: None,
                b: Saved::new(rhs, "denominator"),
                a_shape,
                b_shape,
            },
        });
        Ok(out)
    }

    pub(crate) fn scalar_owned(mut self, s: f32, op: BinOp) -> Result<Tensor> {
        if !self.is_exclusively_owned() {
            return self.scalar_op(s, op);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.scalar_op(s, op),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::on(out.device(), op.name())?.map_inplace(
            out.strided(),
            op.name(),
            MapOp::Scalar(op, s),
        )?;
        attach(&out, op.name(), edges, || scalar_record(op, s));
        Ok(out)
    }

    fn unary_owned(mut self, op: Unary) -> Result<Tensor> {
        let recording = should_record(&[&self]);
        if (recording && op.saves_input()) || !self.is_exclusively_owned() {
            return self.unary(op);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.unary(op),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::on(out.device(), op.name())?.map_inplace(out.strided(), op.name(), op.map_op())?;
        attach(&out, op.name(), edges, || unary_record(op, &out, &out));
        Ok(out)
    }

    /// Consuming [`Tensor::relu`]: reuses the buffer when exclusively owned (see module docs).
    #[track_caller]
    pub fn into_relu(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_relu");
        self.unary_owned(Unary::Relu)
    }

    /// Consuming [`Tensor::gelu`] (reuses the buffer unless backward needs the input).
    #[track_caller]
    pub fn into_gelu(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_gelu");
        self.unary_owned(Unary::Gelu)
    }

    /// Consuming [`Tensor::tanh`].
    #[track_caller]
    pub fn into_tanh(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_tanh");
        self.unary_owned(Unary::Tanh)
    }

    /// Consuming [`Tensor::sigmoid`].
    #[track_caller]
    pub fn into_sigmoid(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_sigmoid");
        self.unary_owned(Unary::Sigmoid)
    }

    /// Consuming [`Tensor::exp`].
    #[track_caller]
    pub fn into_exp(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_exp");
        self.unary_owned(Unary::Exp)
    }

    /// Consuming [`Tensor::log`] (reuses the buffer unless backward needs the input).
    #[track_caller]
    pub fn into_log(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_log");
        self.unary_owned(Unary::Log)
    }

    /// Consuming [`Tensor::affine`]: `self * mul + add`.
    #[track_caller]
    pub fn into_affine(mut self, mul: f32, add: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_affine");
        if !self.is_exclusively_owned() {
            return self.affine(mul, add);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.affine(mul, add),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::on(out.device(), "affine")?.map_inplace(
            out.strided(),
            "affine",
            MapOp::Affine(mul, add),
        )?;
        attach(&out, "affine", edges, || OpRecord::MulScalar(mul));
        Ok(out)
    }

    /// Consuming [`Tensor::softmax`]. In place only along the last dimension, where the device
    /// has the row kernel (host and CUDA devices); otherwise out of place.
    #[track_caller]
    pub fn into_softmax(mut self, dim: usize) -> Result<Tensor> {
        const OP: &str = "softmax";
        let _origin = crate::alloc::enter_op("into_softmax");
        check_dim(OP, &self, dim)?;
        if dim + 1 != self.rank()
            || !backend::has_inplace_row_kernels(self.device())
            || !self.is_exclusively_owned()
        {
            return self.softmax(dim);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.softmax(dim),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::on(out.device(), OP)?.softmax_last_dim_inplace(out.strided(), OP)?;
        // Softmax's backward needs its output, which is what the buffer now holds.
        attach(&out, OP, edges, || OpRecord::Softmax {
            out: Saved::new(&out, "output"),
            dim,
        });
        Ok(out)
    }

    /// Consuming [`Tensor::layer_norm`] (over the last dimension). In place where the device
    /// has the row kernel (host and CUDA devices) and nothing records a gradient through it
    /// (backward needs the input); otherwise out of place.
    #[track_caller]
    pub fn into_layer_norm(
        mut self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        const OP: &str = "layer_norm";
        let _origin = crate::alloc::enter_op("into_layer_norm");
        let mut inputs = vec![&self];
        inputs.extend(weight);
        inputs.extend(bias);
        let recording = should_record(&inputs);
        let d = self.dims().last().copied().unwrap_or(0);
        // Every argument error is the borrowing form's to report.
        let params_fit = [weight, bias]
            .into_iter()
            .flatten()
            .all(|p| p.dims() == [d] && same_device(OP, &self, p).is_ok());
        if recording
            || d == 0
            || !params_fit
            || !backend::has_inplace_row_kernels(self.device())
            || !self.is_exclusively_owned()
        {
            return self.layer_norm(weight, bias, eps);
        }
        let (w, b) = (
            weight.map(Tensor::contiguous).transpose()?,
            bias.map(Tensor::contiguous).transpose()?,
        );
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.layer_norm(weight, bias, eps),
        };
        let out = Tensor::from_parts(storage, layout, false);
        // The parameters cannot share `out`'s storage: it was uniquely owned.
        backend::on(out.device(), OP)?.layer_norm_inplace(
            out.strided(),
            w.as_ref().map(Tensor::strided),
            b.as_ref().map(Tensor::strided),
            eps,
        )?;
        Ok(out)
    }

    /// Checks shared by all in-place ops; returns whether the op will be recorded.
    fn check_inplace(&self, op: &'static str, others: &[&Tensor]) -> Result<bool> {
        if crate::grad::is_grad_enabled()
            && self.is_leaf()
            && self
                .0
                .leaf_requires_grad
                .load(std::sync::atomic::Ordering::Acquire)
        {
            return Err(TensorError::InplaceOnLeaf { op });
        }
        if self
            .strides()
            .iter()
            .zip(self.dims())
            .any(|(&s, &d)| s == 0 && d > 1)
        {
            return Err(TensorError::InvalidArgument {
                op,
                shape: self.dims().to_vec(),
                message: "several elements share one memory location (a broadcast view); write into a contiguous copy".into(),
            });
        }
        let mut inputs = vec![self];
        inputs.extend_from_slice(others);
        let recording = should_record(&inputs);
        if recording && self.0.is_view {
            return Err(TensorError::InplaceNotDifferentiable {
                op,
                reason: "the target is a view, and an in-place write through a view cannot update its base's gradient history",
            });
        }
        Ok(recording)
    }

    fn inplace_binary(&self, rhs: Rhs<'_>, op: BinOp) -> Result<()> {
        let name = op.inplace_name();
        match rhs {
            Rhs::Scalar(s) => {
                self.check_inplace(name, &[])?;
                self.write_unary(name, MapOp::Scalar(op, s))?;
                record_inplace(self, name, &[self], || scalar_record(op, s));
            }
            Rhs::Tensor(t) => {
                same_device(name, self, t)?;
                let recording = self.check_inplace(name, &[t])?;
                let shape = broadcast_shape(name, self.dims(), t.dims())?;
                if shape != self.dims() {
                    return Err(TensorError::ShapeMismatch {
                        op: name,
                        lhs: self.dims().to_vec(),
                        rhs: t.dims().to_vec(),
                        reason: "the right operand must broadcast to the target's shape".into(),
                    });
                }
                if recording && op.saves_lhs() && t.requires_grad() {
                    return Err(TensorError::InplaceNotDifferentiable {
                        op: name,
                        reason: "the right operand requires grad, and its gradient needs the value this op overwrites",
                    });
                }
                self.write_binary(name, t, ZipOp::Bin(op))?;
                record_inplace(self, name, &[self, t], || match op {
                    BinOp::Mul => OpRecord::Mul {
                        a: None,
                        b: Some(Saved::new(t, "right operand")),
                        a_shape: self.dims().to_vec(),
                        b_shape: t.dims().to_vec(),
                    },
                    BinOp::Div => OpRecord::Div {
                        a: None,
                        b: Saved::new(t, "denominator"),
                        a_shape: self.dims().to_vec(),
                        b_shape: t.dims().to_vec(),
                    },
                    _ => binary_record(op, self, t),
                });
            }
        }
        Ok(())
    }

    /// Writes `f(self)` into `self`'s elements and bumps the storage version.
    fn write_unary(&self, op: &'static str, f: MapOp) -> Result<()> {
        backend::on(self.device(), op)?.map_inplace(self.strided(), op, f)?;
        self.storage().bump_version(op);
        Ok(())
    }

    /// Writes `f(self, src)` (src broadcast) into `self` and bumps the storage version.
    fn write_binary(&self, op: &'static str, src: &Tensor, f: ZipOp) -> Result<()> {
        // Reading a storage while writing it through another layout would alias: copy first.
        let src = if src.shares_storage_with(self) {
            let _g = crate::grad::NoGradGuard::new();
            src.copy()?
        } else {
            src.clone()
        };
        backend::on(self.device(), op)?.zip_inplace(self.strided(), src.strided(), op, f)?;
        self.storage().bump_version(op);
        Ok(())
    }

    /// In place `self += rhs` (tensor broadcast to `self`'s shape, or scalar).
    #[track_caller]
    pub fn add_<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<()> {
        let _origin = crate::alloc::enter_op("add_");
        self.inplace_binary(rhs.into(), BinOp::Add)
    }

    /// In place `self -= rhs`.
    #[track_caller]
    pub fn sub_<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<()> {
        let _origin = crate::alloc::enter_op("sub_");
        self.inplace_binary(rhs.into(), BinOp::Sub)
    }

    /// In place `self *= rhs`.
    #[track_caller]
    pub fn mul_<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<()> {
        let _origin = crate::alloc::enter_op("mul_");
        self.inplace_binary(rhs.into(), BinOp::Mul)
    }

    /// In place `self /= rhs`.
    #[track_caller]
    pub fn div_<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<()> {
        let _origin = crate::alloc::enter_op("div_");
        self.inplace_binary(rhs.into(), BinOp::Div)
    }

    /// In place `max(self, 0)`.
    #[track_caller]
    pub fn relu_(&self) -> Result<()> {
        let _origin = crate::alloc::enter_op("relu_");
        self.check_inplace("relu_", &[])?;
        self.write_unary("relu_", MapOp::Relu)?;
        record_inplace(self, "relu_", &[self], || OpRecord::Relu {
            out: Saved::new(self, "output"),
        });
        Ok(())
    }

    /// Copies `src` (broadcast to `self`'s shape) into `self`.
    #[track_caller]
    pub fn copy_(&self, src: &Tensor) -> Result<()> {
        let _origin = crate::alloc::enter_op("copy_");
        same_device("copy_", self, src)?;
        self.check_inplace("copy_", &[src])?;
        let shape = broadcast_shape("copy_", self.dims(), src.dims())?;
        if shape != self.dims() {
            return Err(TensorError::ShapeMismatch {
                op: "copy_",
                lhs: self.dims().to_vec(),
                rhs: src.dims().to_vec(),
                reason: "the source must broadcast to the target's shape".into(),
            });
        }
        self.write_binary("copy_", src, ZipOp::Second)?;
        record_inplace(self, "copy_", &[self, src], || OpRecord::CopyInto {
            src_shape: src.dims().to_vec(),
        });
        Ok(())
    }

    /// Sets every element to zero.
    #[track_caller]
    pub fn zero_(&self) -> Result<()> {
        let _origin = crate::alloc::enter_op("zero_");
        self.fill_(0.0)
    }

    /// Sets every element to `value`.
    #[track_caller]
    pub fn fill_(&self, value: f32) -> Result<()> {
        let _origin = crate::alloc::enter_op("fill_");
        self.check_inplace("fill_", &[])?;
        self.write_unary("fill_", MapOp::Fill(value))?;
        record_inplace(self, "fill_", &[self], || OpRecord::Zeroed);
        Ok(())
    }
}

/// Records the in-place op `name` on `target` (`inputs` starts with it); when recorded, other
/// handles on the target's storage become stale (their history no longer matches the values).
pub(crate) fn record_inplace(
    target: &Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    make: impl FnOnce() -> OpRecord,
) {
    let edges = edges(inputs);
    if edges.is_some() {
        target.note_history_rewrite();
    }
    attach(target, name, edges, make)
}

impl Saved {
    /// Fails when the saved tensor was written in place after it was saved.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        let now = self.tensor.storage().version();
        if now != self.version {
            return Err(TensorError::SavedTensorModified {
                op,
                what: self.what,
                by: self.tensor.storage().last_writer(),
                saved: self.version,
                now,
            });
        }
        Ok(())
    }
}

/// The operators on an owned left operand (`a + &b`, `a + b`, `a * 2.0`, `-a`): they write into
/// `a`'s buffer when nothing else can observe it (see the [module docs](super)), else allocate
/// like the borrowed forms in `ops::elementwise`.
macro_rules! owned_operator {
    ($trait:ident, $method:ident, $op:expr) => {
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

owned_operator!(Add, add, BinOp::Add);
owned_operator!(Sub, sub, BinOp::Sub);
owned_operator!(Mul, mul, BinOp::Mul);
owned_operator!(Div, div, BinOp::Div);

impl Neg for Tensor {
    type Output = Result<Tensor>;
    #[track_caller]
    fn neg(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("neg");
        self.scalar_owned(-1.0, BinOp::Mul)
    }
}
