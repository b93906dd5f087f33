//! The vocabulary every tensor layer shares, and nothing above it: element types, op kinds
//! (binary, activation, element-wise map and zip functions, matmul shapes, the Adam update's
//! scalars), layouts (shape, strides, offset) and the shape rules (broadcasting, contiguous
//! strides, element counts). Backends compute from these; ops choose them.

use super::error::{Result, TensorError};

/// Element type of a tensor. Only `f32` is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
        }
    }
}

/// An element-wise arithmetic op of two operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
        }
    }

    pub(crate) fn inplace_name(self) -> &'static str {
        match self {
            BinOp::Add => "add_",
            BinOp::Sub => "sub_",
            BinOp::Mul => "mul_",
            BinOp::Div => "div_",
        }
    }

    /// Whether the backward of `a op b` needs `a`'s value (to differentiate with respect to `b`).
    pub(crate) fn saves_lhs(self) -> bool {
        matches!(self, BinOp::Mul | BinOp::Div)
    }
}

/// Element-wise activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unary {
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    Exp,
    Log,
}

impl Unary {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Unary::Relu => "relu",
            Unary::Gelu => "gelu",
            Unary::Tanh => "tanh",
            Unary::Sigmoid => "sigmoid",
            Unary::Exp => "exp",
            Unary::Log => "log",
        }
    }

    pub(crate) fn map_op(self) -> MapOp {
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
    pub(crate) fn saves_input(self) -> bool {
        matches!(self, Unary::Gelu | Unary::Log)
    }
}

/// An element-wise function of one value (the kernel's `VG_MAP_*` code in `code`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum MapOp {
    Copy,
    Scalar(BinOp, f32),
    /// `x * mul + add`.
    Affine(f32, f32),
    Relu,
    Gelu,
    Tanh,
    Sigmoid,
    Exp,
    Log,
    Neg,
    Fill(f32),
}

#[cfg(feature = "cuda")]
impl MapOp {
    /// `(op, s0, s1)` for `vg_map` (tensor/kernels/elementwise.cu).
    pub(crate) fn code(self) -> (i32, f32, f32) {
        match self {
            MapOp::Copy => (0, 0.0, 0.0),
            MapOp::Scalar(BinOp::Add, s) => (1, s, 0.0),
            MapOp::Scalar(BinOp::Sub, s) => (2, s, 0.0),
            MapOp::Scalar(BinOp::Mul, s) => (3, s, 0.0),
            MapOp::Scalar(BinOp::Div, s) => (4, s, 0.0),
            MapOp::Affine(mul, add) => (5, mul, add),
            MapOp::Relu => (6, 0.0, 0.0),
            MapOp::Gelu => (7, 0.0, 0.0),
            MapOp::Tanh => (8, 0.0, 0.0),
            MapOp::Sigmoid => (9, 0.0, 0.0),
            MapOp::Exp => (10, 0.0, 0.0),
            MapOp::Log => (11, 0.0, 0.0),
            MapOp::Fill(v) => (12, v, 0.0),
            MapOp::Neg => (13, 0.0, 0.0),
        }
    }
}

/// An element-wise function of two values (the kernel's `VG_ZIP_*` code in `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZipOp {
    Bin(BinOp),
    /// The second operand (an in-place copy).
    Second,
    /// `g` where the output is positive, else 0 (`a` = g, `b` = relu's output).
    ReluBackward,
    /// `g · gelu'(x)` (`b` = gelu's input).
    GeluBackward,
    /// `g · (1 - y²)` (`b` = tanh's output).
    TanhBackward,
    /// `g · y(1 - y)` (`b` = sigmoid's output).
    SigmoidBackward,
}

#[cfg(feature = "cuda")]
impl ZipOp {
    /// `op` for `vg_zip` (tensor/kernels/elementwise.cu).
    pub(crate) fn code(self) -> i32 {
        match self {
            ZipOp::Bin(BinOp::Add) => 0,
            ZipOp::Bin(BinOp::Sub) => 1,
            ZipOp::Bin(BinOp::Mul) => 2,
            ZipOp::Bin(BinOp::Div) => 3,
            ZipOp::Second => 4,
            ZipOp::ReluBackward => 5,
            ZipOp::GeluBackward => 6,
            ZipOp::TanhBackward => 7,
            ZipOp::SigmoidBackward => 8,
        }
    }
}

/// The shapes of one matrix product `[batch.., m, k] · [batch.., k, n]` (batch dims already
/// broadcast).
#[derive(Debug, Clone)]
pub(crate) struct MatmulShape {
    pub(crate) batch: Vec<usize>,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
}

impl MatmulShape {
    pub(crate) fn out_shape(&self) -> Vec<usize> {
        let mut s = self.batch.clone();
        s.extend_from_slice(&[self.m, self.n]);
        s
    }
}

/// The scalars of one Adam update (`bias1`, `bias2`: 1 - beta^t).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamStep {
    pub(crate) lr: f32,
    pub(crate) beta1: f32,
    pub(crate) beta2: f32,
    pub(crate) eps: f32,
    pub(crate) bias1: f32,
    pub(crate) bias2: f32,
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

/// Shape, element strides and offset of a tensor into its storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) shape: Vec<usize>,
    pub(crate) strides: Vec<usize>,
    pub(crate) offset: usize,
}

impl Layout {
    pub(crate) fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The same elements with dimensions reordered: dimension `i` is this layout's `perm[i]`
    /// (`perm` a permutation of the dimensions, checked by the caller).
    pub(crate) fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// The elements repeated along broadcast dimensions to `shape` (zero strides there; the
    /// caller checked that this layout broadcasts to `shape`).
    pub(crate) fn broadcast_to(&self, shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: broadcast_strides(&self.shape, &self.strides, shape),
            offset: self.offset,
        }
    }

    pub(crate) fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub(crate) fn is_contiguous(&self) -> bool {
        let mut expected = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != expected {
                return false;
            }
            expected *= d;
        }
        true
    }
}

/// Elements in `shape`, or a typed error when their count (or byte size) overflows `usize`.
pub(crate) fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|n| n.checked_mul(DType::F32.size_in_bytes()).is_some())
        .ok_or_else(|| TensorError::InvalidArgument {
            op,
            shape: shape.to_vec(),
            message: "the shape holds more elements than any memory can; check the dimensions"
                .into(),
        })
}

pub(crate) fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc *= d;
    }
    strides
}
