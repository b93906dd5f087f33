//! Tensor operations: arithmetic, matmul, activations, normalisation, reductions, losses,
//! views and in-place updates, with autograd recording.

use super::autograd::{self, attach, edges, record, should_record, Backward, Saved};
use super::backend::{self, MapOp, MatmulShape, ZipOp};
use super::{contiguous_strides, Inner, Layout, Result, Tensor, TensorError};
use std::sync::Arc;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
        }
    }

    fn inplace_name(self) -> &'static str {
        match self {
            BinOp::Add => "add_",
            BinOp::Sub => "sub_",
            BinOp::Mul => "mul_",
            BinOp::Div => "div_",
        }
    }

    /// Whether the backward of `a op b` needs `a`'s value (to differentiate with respect to `b`).
    fn saves_lhs(self) -> bool {
        matches!(self, BinOp::Mul | BinOp::Div)
    }

    fn backward(self, a: &Tensor, b: &Tensor) -> Backward {
        let (a_shape, b_shape) = (a.dims().to_vec(), b.dims().to_vec());
        match self {
            BinOp::Add => Backward::Add { a_shape, b_shape },
            BinOp::Sub => Backward::Sub { a_shape, b_shape },
            BinOp::Mul => Backward::Mul {
                a: b.requires_grad().then(|| Saved::new(a, "left operand")),
                b: a.requires_grad().then(|| Saved::new(b, "right operand")),
                a_shape,
                b_shape,
            },
            BinOp::Div => Backward::Div {
                a: b.requires_grad().then(|| Saved::new(a, "numerator")),
                b: Saved::new(b, "denominator"),
                a_shape,
                b_shape,
            },
        }
    }
}

/// The shape two shapes broadcast to (numpy rules).
pub(crate) fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(TensorError::ShapeMismatch {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                    reason: format!(
                        "dimension {i} (from the right: {}) has sizes {da} and {db}; sizes must match or one must be 1",
                        rank - i
                    ),
                })
            }
        };
    }
    Ok(out)
}

/// Strides that read a tensor of `shape`/`strides` broadcast to `out_shape` (0 on broadcast dims).
pub(crate) fn broadcast_strides(
    shape: &[usize],
    strides: &[usize],
    out_shape: &[usize],
) -> Vec<usize> {
    let lead = out_shape.len() - shape.len();
    (0..out_shape.len())
        .map(|i| {
            if i < lead || shape[i - lead] == 1 {
                0
            } else {
                strides[i - lead]
            }
        })
        .collect()
}

pub(super) fn same_device(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.device() != b.device() {
        return Err(TensorError::DeviceMismatch {
            op,
            lhs: format!("{:?}", a.device()),
            rhs: format!("{:?}", b.device()),
        });
    }
    Ok(())
}

pub(super) fn check_dim(op: &'static str, t: &Tensor, dim: usize) -> Result<()> {
    if dim >= t.rank() {
        return Err(TensorError::DimOutOfRange {
            op,
            dim,
            shape: t.dims().to_vec(),
        });
    }
    Ok(())
}

pub(crate) fn gelu(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

pub(crate) fn gelu_derivative(x: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    let u = C * (x + 0.044_715 * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * 0.044_715 * x * x)
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// Element-wise activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unary {
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    Exp,
    Log,
}

impl Unary {
    fn name(self) -> &'static str {
        match self {
            Unary::Relu => "relu",
            Unary::Gelu => "gelu",
            Unary::Tanh => "tanh",
            Unary::Sigmoid => "sigmoid",
            Unary::Exp => "exp",
            Unary::Log => "log",
        }
    }

    fn map_op(self) -> MapOp {
        match self {
            Unary::Relu => MapOp::Relu,
            Unary::Gelu => MapOp::Gelu,
            Unary::Tanh => MapOp::Tanh,
            Unary::Sigmoid => MapOp::Sigmoid,
            Unary::Exp => MapOp::Exp,
            Unary::Log => MapOp::Log,
        }
    }

    /// Whether backward needs the input (otherwise it needs the output).
    fn saves_input(self) -> bool {
        matches!(self, Unary::Gelu | Unary::Log)
    }

    fn backward(self, input: &Tensor, output: &Tensor) -> Backward {
        match self {
            Unary::Relu => Backward::Relu {
                out: Saved::new(output, "output"),
            },
            Unary::Gelu => Backward::Gelu {
                x: Saved::new(input, "input"),
            },
            Unary::Tanh => Backward::Tanh {
                out: Saved::new(output, "output"),
            },
            Unary::Sigmoid => Backward::Sigmoid {
                out: Saved::new(output, "output"),
            },
            Unary::Exp => Backward::Exp {
                out: Saved::new(output, "output"),
            },
            Unary::Log => Backward::Log {
                x: Saved::new(input, "input"),
            },
        }
    }
}

impl Tensor {
    // ----- untracked building blocks -----

    /// `f(self, other)` element-wise with broadcasting; records nothing.
    pub(crate) fn zip_map(&self, other: &Tensor, op: &'static str, f: ZipOp) -> Result<Tensor> {
        same_device(op, self, other)?;
        let shape = broadcast_shape(op, self.dims(), other.dims())?;
        backend::zip(self, other, &shape, op, f)
    }

    /// `f(self)` element-wise into a new contiguous tensor; records nothing.
    pub(crate) fn map(&self, op: &'static str, f: MapOp) -> Result<Tensor> {
        backend::map(self, op, f)
    }

    /// Takes the buffer of an exclusively owned tensor (see [`Tensor::is_exclusively_owned`]).
    pub(super) fn into_buffer(self) -> std::result::Result<(Arc<super::Storage>, Layout), Tensor> {
        match Arc::try_unwrap(self.0) {
            Ok(Inner {
                storage, layout, ..
            }) => Ok((storage, layout)),
            Err(inner) => Err(Tensor(inner)),
        }
    }

    // ----- arithmetic -----

    fn binary(&self, rhs: &Tensor, op: BinOp) -> Result<Tensor> {
        let out = self.zip_map(rhs, op.name(), ZipOp::Bin(op))?;
        record(&out, op.name(), &[self, rhs], || op.backward(self, rhs));
        Ok(out)
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
        backend::zip_inplace(&out, rhs, op.name(), ZipOp::Bin(op))?;
        attach(&out, op.name(), edges, || match op {
            BinOp::Add => Backward::Add { a_shape, b_shape },
            BinOp::Sub => Backward::Sub { a_shape, b_shape },
            // Reached only when the right operand needs no gradient: nothing of `self` is kept.
            BinOp::Mul => Backward::Mul {
                a: None,
                b: Some(Saved::new(rhs, "right operand")),
                a_shape,
                b_shape,
            },
            BinOp::Div => Backward::Div {
                a: None,
                b: Saved::new(rhs, "denominator"),
                a_shape,
                b_shape,
            },
        });
        Ok(out)
    }

    fn scalar_op(&self, s: f32, op: BinOp) -> Result<Tensor> {
        let out = self.map(op.name(), MapOp::Scalar(op, s))?;
        record(&out, op.name(), &[self], || scalar_backward(op, s));
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
        backend::map_inplace(&out, op.name(), MapOp::Scalar(op, s))?;
        attach(&out, op.name(), edges, || scalar_backward(op, s));
        Ok(out)
    }

    /// `self + rhs` (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn add<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("add");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Add),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Add),
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

    /// `self * rhs` element-wise (tensor, broadcast; or scalar).
    #[track_caller]
    pub fn mul<'a>(&self, rhs: impl Into<Rhs<'a>>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mul");
        match rhs.into() {
            Rhs::Tensor(t) => self.binary(t, BinOp::Mul),
            Rhs::Scalar(s) => self.scalar_op(s, BinOp::Mul),
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

    /// Broadcasting add (candle's name).
    #[track_caller]
    pub fn broadcast_add(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_add");
        self.binary(rhs, BinOp::Add)
    }

    /// Broadcasting subtract (candle's name).
    #[track_caller]
    pub fn broadcast_sub(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_sub");
        self.binary(rhs, BinOp::Sub)
    }

    /// Broadcasting multiply (candle's name).
    #[track_caller]
    pub fn broadcast_mul(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_mul");
        self.binary(rhs, BinOp::Mul)
    }

    /// Broadcasting divide (candle's name).
    #[track_caller]
    pub fn broadcast_div(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_div");
        self.binary(rhs, BinOp::Div)
    }

    /// `self + s`.
    #[track_caller]
    pub fn add_scalar(&self, s: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("add_scalar");
        self.scalar_op(s, BinOp::Add)
    }

    /// `self * s`.
    #[track_caller]
    pub fn mul_scalar(&self, s: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("mul_scalar");
        self.scalar_op(s, BinOp::Mul)
    }

    /// `self * mul + add`.
    #[track_caller]
    pub fn affine(&self, mul: f32, add: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("affine");
        let out = self.map("affine", MapOp::Affine(mul, add))?;
        record(&out, "affine", &[self], || Backward::MulScalar(mul));
        Ok(out)
    }

    /// `-self`.
    #[track_caller]
    pub fn neg(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("neg");
        let out = self.map("neg", MapOp::Neg)?;
        record(&out, "neg", &[self], || Backward::MulScalar(-1.0));
        Ok(out)
    }

    // ----- matmul -----

    /// Matrix product over the last two dimensions, with broadcast batch dimensions
    /// (`[.., m, k] · [.., k, n] -> [.., m, n]`). Transposed views are read in place (strided
    /// GEMM, no copy).
    #[track_caller]
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("matmul");
        const OP: &str = "matmul";
        same_device(OP, self, rhs)?;
        let mismatch = |reason: String| TensorError::ShapeMismatch {
            op: OP,
            lhs: self.dims().to_vec(),
            rhs: rhs.dims().to_vec(),
            reason,
        };
        let (ra, rb) = (self.rank(), rhs.rank());
        if ra < 2 || rb < 2 {
            return Err(mismatch(
                "both operands need at least 2 dimensions; unsqueeze vectors first".into(),
            ));
        }
        let (m, k) = (self.dims()[ra - 2], self.dims()[ra - 1]);
        let (k2, n) = (rhs.dims()[rb - 2], rhs.dims()[rb - 1]);
        if k != k2 {
            return Err(mismatch(format!(
                "inner dimensions differ ({k} vs {k2}); the left's last dimension must equal the right's second-to-last"
            )));
        }
        let batch = broadcast_shape(OP, &self.dims()[..ra - 2], &rhs.dims()[..rb - 2])
            .map_err(|_| mismatch("batch dimensions do not broadcast".into()))?;
        let out = backend::matmul(self, rhs, &MatmulShape { batch, m, k, n })?;
        record(&out, OP, &[self, rhs], || Backward::MatMul {
            a: rhs
                .requires_grad()
                .then(|| Saved::new(self, "left operand")),
            b: self
                .requires_grad()
                .then(|| Saved::new(rhs, "right operand")),
            a_shape: self.dims().to_vec(),
            b_shape: rhs.dims().to_vec(),
        });
        Ok(out)
    }

    // ----- activations -----

    fn unary(&self, op: Unary) -> Result<Tensor> {
        let out = self.map(op.name(), op.map_op())?;
        record(&out, op.name(), &[self], || op.backward(self, &out));
        Ok(out)
    }

    pub(super) fn unary_owned(mut self, op: Unary) -> Result<Tensor> {
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
        backend::map_inplace(&out, op.name(), op.map_op())?;
        attach(&out, op.name(), edges, || op.backward(&out, &out));
        Ok(out)
    }

    /// `max(x, 0)`.
    #[track_caller]
    pub fn relu(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("relu");
        self.unary(Unary::Relu)
    }
    /// GELU, tanh approximation (as in BERT/GPT-2 implementations).
    #[track_caller]
    pub fn gelu(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("gelu");
        self.unary(Unary::Gelu)
    }
    /// Hyperbolic tangent.
    #[track_caller]
    pub fn tanh(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("tanh");
        self.unary(Unary::Tanh)
    }
    /// Logistic sigmoid.
    #[track_caller]
    pub fn sigmoid(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("sigmoid");
        self.unary(Unary::Sigmoid)
    }
    /// `e^x`.
    #[track_caller]
    pub fn exp(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("exp");
        self.unary(Unary::Exp)
    }
    /// Natural logarithm.
    #[track_caller]
    pub fn log(&self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("log");
        self.unary(Unary::Log)
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

    // ----- softmax family -----

    fn softmax_impl(&self, dim: usize, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        check_dim(op, self, dim)?;
        let out = backend::softmax(self, dim, log, op)?;
        record(&out, op, &[self], || {
            let saved = Saved::new(&out, "output");
            if log {
                Backward::LogSoftmax { out: saved, dim }
            } else {
                Backward::Softmax { out: saved, dim }
            }
        });
        Ok(out)
    }

    /// Softmax along `dim`.
    #[track_caller]
    pub fn softmax(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("softmax");
        self.softmax_impl(dim, false)
    }

    /// Log-softmax along `dim` (numerically stable).
    #[track_caller]
    pub fn log_softmax(&self, dim: usize) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("log_softmax");
        self.softmax_impl(dim, true)
    }

    // ----- layer norm -----

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
        let (out, stats) = backend::layer_norm(&x, w.as_ref(), b.as_ref(), eps, recording)?;
        if let Some((mean, rstd)) = stats {
            record(&out, OP, &inputs, || Backward::LayerNorm {
                x: Saved::new(&x, "input"),
                mean: Saved::new(&mean, "mean"),
                rstd: Saved::new(&rstd, "rstd"),
                weight: w.as_ref().map(|w| Saved::new(w, "weight")),
                has_bias: bias.is_some(),
            });
        }
        Ok(out)
    }

    // ----- embedding -----

    /// Rows of the table `self` (`[vocab, dim]`) picked by `ids`, which has shape `ids_shape`;
    /// the result has shape `ids_shape + [dim]`.
    #[track_caller]
    pub fn embedding(&self, ids: &[u32], ids_shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("embedding");
        const OP: &str = "embedding";
        if self.rank() != 2 {
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: self.dims().to_vec(),
                message: "the table must have shape [vocab, dim]".into(),
            });
        }
        let expected = super::checked_numel(OP, ids_shape)?;
        if ids.len() != expected {
            return Err(TensorError::DataLength {
                op: OP,
                len: ids.len(),
                shape: ids_shape.to_vec(),
                expected,
            });
        }
        let (vocab, d) = (self.dims()[0], self.dims()[1]);
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(TensorError::IndexOutOfRange {
                op: OP,
                index: bad as usize,
                size: vocab,
            });
        }
        let mut out_shape = ids_shape.to_vec();
        out_shape.push(d);
        let out = backend::embedding(self, ids, &out_shape)?;
        record(&out, OP, &[self], || Backward::Embedding {
            ids: ids.to_vec(),
            table_shape: self.dims().to_vec(),
        });
        Ok(out)
    }

    // ----- reductions -----

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
        let out = backend::reduce(self, dims, &keep_shape, scale, op)?;
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
        record(&out, op, &[self], || Backward::Sum {
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

    // ----- losses -----

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
        let out = backend::cross_entropy(&logp, targets)?;
        if recording {
            let probs = logp.map(OP, MapOp::Exp)?;
            drop(logp);
            record(&out, OP, &[self], || Backward::CrossEntropy {
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
        let out = backend::mean_square(&diff, OP)?;
        record(&out, OP, &[self, target], || Backward::Mse {
            diff: Saved::new(&diff, "difference"),
        });
        Ok(out)
    }

    // ----- views -----

    fn view(&self, layout: Layout, op: &'static str, make: impl FnOnce() -> Backward) -> Tensor {
        let out = Tensor::from_parts(Arc::clone(self.storage()), layout, true);
        record(&out, op, &[self], make);
        out
    }

    /// The same elements with another shape: a view when the layout allows, a copy otherwise.
    #[track_caller]
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("reshape");
        let numel = super::checked_numel("reshape", shape)?;
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
        Ok(self.view(layout, "reshape", || Backward::Reshape {
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
        let layout = Layout {
            shape: perm.iter().map(|&p| self.dims()[p]).collect(),
            strides: perm.iter().map(|&p| self.strides()[p]).collect(),
            offset: self.offset(),
        };
        Ok(self.view(layout, "permute", || Backward::Permute {
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
        Ok(self.view(layout, "narrow", || Backward::Narrow {
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
                    return Err(super::unreachable_error(
                        op,
                        "size-1 reshape lost a dimension",
                    ));
                };
                strides.push(s);
            }
        }
        let layout = Layout {
            shape,
            strides,
            offset: self.offset(),
        };
        Ok(self.view(layout, op, || Backward::Reshape {
            in_shape: self.dims().to_vec(),
        }))
    }

    /// `self` repeated along broadcast dimensions to `shape` (a view with zero strides).
    #[track_caller]
    pub fn broadcast_as(&self, shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("broadcast_as");
        super::checked_numel("broadcast_as", shape)?;
        let out = broadcast_shape("broadcast_as", self.dims(), shape)?;
        if out != shape {
            return Err(TensorError::ShapeMismatch {
                op: "broadcast_as",
                lhs: self.dims().to_vec(),
                rhs: shape.to_vec(),
                reason: "the tensor does not broadcast to the target shape".into(),
            });
        }
        let layout = Layout {
            shape: shape.to_vec(),
            strides: broadcast_strides(self.dims(), self.strides(), shape),
            offset: self.offset(),
        };
        Ok(self.view(layout, "broadcast_as", || Backward::Expand {
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
        record(&out, op, &[self], || Backward::Identity);
        Ok(out)
    }

    // ----- in-place -----

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
                autograd::record_inplace(self, name, &[self], || scalar_backward(op, s));
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
                autograd::record_inplace(self, name, &[self, t], || match op {
                    BinOp::Mul => Backward::Mul {
                        a: None,
                        b: Some(Saved::new(t, "right operand")),
                        a_shape: self.dims().to_vec(),
                        b_shape: t.dims().to_vec(),
                    },
                    BinOp::Div => Backward::Div {
                        a: None,
                        b: Saved::new(t, "denominator"),
                        a_shape: self.dims().to_vec(),
                        b_shape: t.dims().to_vec(),
                    },
                    _ => op.backward(self, t),
                });
            }
        }
        Ok(())
    }

    /// Writes `f(self)` into `self`'s elements and bumps the storage version.
    fn write_unary(&self, op: &'static str, f: MapOp) -> Result<()> {
        backend::map_inplace(self, op, f)?;
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
        backend::zip_inplace(self, &src, op, f)?;
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
        autograd::record_inplace(self, "relu_", &[self], || Backward::Relu {
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
        autograd::record_inplace(self, "copy_", &[self, src], || Backward::CopyInto {
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
        autograd::record_inplace(self, "fill_", &[self], || Backward::Zeroed);
        Ok(())
    }

    // ----- autograd entry points -----

    /// Computes gradients of this single-element tensor with respect to every leaf that
    /// requires grad, accumulating into their [`Tensor::grad`]. Runs under no-grad and frees
    /// the graph's saved tensors as it goes.
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        let _origin = crate::alloc::enter_op("backward");
        autograd::run_backward(self, None)
    }

    /// Like [`Tensor::backward`], but accumulates gradients only into `inputs` (leaves that
    /// require grad, such as one optimizer's parameters), like PyTorch's
    /// `backward(inputs=...)`: gradients that flow only to other leaves are never computed,
    /// and other leaves' [`Tensor::grad`] are left as they were. The whole graph is consumed
    /// (its saved tensors freed) either way.
    ///
    /// In a GAN's generator step, `g_loss.backward_for(&generator_params)` does not fill the
    /// discriminator's gradients, which `backward` would (and keep alive until they are zeroed).
    #[track_caller]
    pub fn backward_for(&self, inputs: &[Tensor]) -> Result<()> {
        let _origin = crate::alloc::enter_op("backward_for");
        autograd::run_backward(self, Some(inputs))
    }

    /// Number of recorded ops this tensor's value depends on (0 when nothing was recorded).
    pub fn graph_node_count(&self) -> usize {
        autograd::graph_node_count(self)
    }
}

fn scalar_backward(op: BinOp, s: f32) -> Backward {
    match op {
        BinOp::Add | BinOp::Sub => Backward::Identity,
        BinOp::Mul => Backward::MulScalar(s),
        BinOp::Div => Backward::MulScalar(1.0 / s),
    }
}

/// Gradient of layer norm: `(dx, dweight, dbias)`.
#[allow(clippy::type_complexity)]
pub(crate) fn layer_norm_backward(
    g: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    need_w: bool,
    need_b: bool,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    // Every input here is contiguous with its own storage (saved by the forward, or made so
    // here).
    let g = g.contiguous()?;
    backend::layer_norm_backward(&g, x, mean, rstd, weight, need_w, need_b)
}

/// Gradient of an embedding lookup with respect to the table (rows scatter-added).
pub(crate) fn embedding_backward(g: &Tensor, ids: &[u32], table_shape: &[usize]) -> Result<Tensor> {
    let g = g.contiguous()?;
    backend::embedding_backward(&g, ids, table_shape)
}

/// Gradient of mean cross-entropy: `(softmax - onehot) * g / rows`.
pub(crate) fn cross_entropy_backward(
    g: &Tensor,
    probs: &Tensor,
    targets: &[u32],
) -> Result<Tensor> {
    backend::cross_entropy_backward(g, probs, targets)
}
