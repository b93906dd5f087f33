//! In place at last use: what `#[inference]` and `#[batch_scope]` call when a local dies as the
//! receiver of an op that has a consuming form.
//!
//! Where the transform has already moved a binding `x` into the statement of its last use (only
//! values whose type is `Release` or `Copy` are: see [`crate::Release`]), and `x` is the
//! receiver of a listed method and mentioned nowhere else in that statement, the call
//!
//! ```text
//! x.gelu()             becomes   Dying(x).gelu_at_last_use(|x| x.gelu())
//! x.broadcast_add(&b)  becomes   Dying(x).broadcast_add_at_last_use(|x, a| x.broadcast_add(a), &b)
//! ```
//!
//! (the arguments are evaluated once, in order, then passed on). Which function runs is decided
//! by the type, at compile time, by method resolution: [`Dying`] has inherent methods only for
//! the types that declare consuming forms (vramguard's `Tensor`; with the `ndarray` feature,
//! owned arrays' `mapv`), and inherent methods win over the [`PlainAtLastUse`] trait, which every
//! `Dying<T>` implements by calling the original method, unchanged. So every other type (a
//! candle or burn tensor, a generic `T`, a `Copy` value, a type of yours with a method of the
//! same name) runs exactly the call that was written.
//!
//! # Who gets it, and why not the others
//!
//! - **vramguard's `Tensor`**: the element-wise unary ops (`relu`, `gelu`, `tanh`, `sigmoid`,
//!   `exp`, `log`), `add`/`sub`/`mul`/`div` and their `broadcast_*` forms with a right-hand side
//!   of the receiver's shape or broadcast to it, `add_scalar`, `mul_scalar`, `affine`, and
//!   `softmax`/`layer_norm` along the last dimension. The runtime writes into the dying value's
//!   buffer only when nothing else can see it: no other handle or view on the storage, the
//!   buffer is exactly the tensor's contiguous data, not saved for backward (a saved tensor
//!   holds the storage, so it is shared), not a leaf that requires grad, and, under grad mode,
//!   not an input the new op's backward needs. Otherwise it computes out of place, exactly as
//!   the plain method. The values are bit-identical either way.
//! - **ndarray** (feature `ndarray`): `mapv` on an owned `Array` becomes `mapv_into_any`, which
//!   maps in place when the element type does not change. An owned array is never shared.
//! - **candle and tch**: not offered. Their tensors are handles on reference-counted storage
//!   that views, clones and the autograd graph share (candle's `Arc`'d storage, libtorch's
//!   intrusive pointer), and neither exposes whether a handle is the only one. The macro sees
//!   only the local it moved, not the other handles, so an in-place op there could change what
//!   another handle, or a gradient, reads.
//! - **burn**: already does it by itself. Its ops take tensors by value and its backends write
//!   into an input's buffer when the handle is the only one (`can_mut`), so moving the value
//!   into its last use, which the attribute does for every `Release` type, is all it needs.

use vramguard_runtime::tensor::{Rhs, Tensor};

type TensorResult = vramguard_runtime::tensor::Result<Tensor>;

/// A value at its last use, as the receiver of the op called on it (see the module docs).
#[doc(hidden)]
pub struct Dying<T>(pub T);

// `x.mapv(f)` becomes `Dying(x).mapv(f)`, not a call through a closure: `f` is usually a
// closure literal, whose parameter types come from the method it is passed to, and a generic
// fallback could not give them. Owned arrays of numbers have an inherent `mapv` on `Dying`;
// every other type reaches its own `mapv` through this `Deref`, resolved as written.
impl<T> std::ops::Deref for Dying<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Declares the fallback trait: for each listed method, `NAME_at_last_use(self, plain, args..)`
/// calls `plain(value, args..)`, the original call.
macro_rules! plain_at_last_use {
    ($($method:ident($($arg:ident: $ty:ident),*);)*) => {
        /// The original call, for every type without a consuming form (see the module docs).
        #[doc(hidden)]
        pub trait PlainAtLastUse: Sized {
            /// The dying value's type.
            type Value;
            $(
                /// Calls `plain` (the original call) on the value and the arguments.
                fn $method<Out, Plain: FnOnce(Self::Value, $($ty),*) -> Out, $($ty),*>(
                    self,
                    plain: Plain,
                    $($arg: $ty),*
                ) -> Out;
            )*
        }

        impl<T> PlainAtLastUse for Dying<T> {
            type Value = T;
            $(
                #[inline(always)]
                fn $method<Out, Plain: FnOnce(T, $($ty),*) -> Out, $($ty),*>(
                    self,
                    plain: Plain,
                    $($arg: $ty),*
                ) -> Out {
                    plain(self.0, $($arg),*)
                }
            )*
        }
    };
}

plain_at_last_use! {
    relu_at_last_use();
    gelu_at_last_use();
    tanh_at_last_use();
    sigmoid_at_last_use();
    exp_at_last_use();
    log_at_last_use();
    add_at_last_use(rhs: A0);
    sub_at_last_use(rhs: A0);
    mul_at_last_use(rhs: A0);
    div_at_last_use(rhs: A0);
    broadcast_add_at_last_use(rhs: A0);
    broadcast_sub_at_last_use(rhs: A0);
    broadcast_mul_at_last_use(rhs: A0);
    broadcast_div_at_last_use(rhs: A0);
    add_scalar_at_last_use(scalar: A0);
    mul_scalar_at_last_use(scalar: A0);
    softmax_at_last_use(dim: A0);
    affine_at_last_use(mul: A0, add: A1);
    layer_norm_at_last_use(weight: A0, bias: A1, eps: A2);
}

macro_rules! tensor_unary {
    ($($method:ident => $consuming:ident,)*) => {$(
        /// The consuming form of the op (see the module docs).
        #[inline(always)]
        #[track_caller]
        pub fn $method<Plain: FnOnce(Tensor) -> TensorResult>(self, _plain: Plain) -> TensorResult {
            self.0.$consuming()
        }
    )*};
}

/// The right-hand sides `add`, `sub`, `mul` and `div` take on a tensor: what `Tensor`'s own
/// methods accept (`impl Into<Rhs>`: `&Tensor`, `f32`, `Rhs`) and what the operator traits on an
/// owned tensor accept when they are in scope (`x.add(y)` with `y: Tensor` is `Add::add`).
#[doc(hidden)]
pub trait TensorOperand<'a> {
    /// The operand, borrowed, owned or a scalar.
    fn operand(self) -> Operand<'a>;
}

/// A right-hand side of an element-wise op (see [`TensorOperand`]).
#[doc(hidden)]
pub enum Operand<'a> {
    /// A tensor, broadcast against the left operand.
    Borrowed(&'a Tensor),
    /// A tensor passed by value (freed after the op, as the operator frees it).
    Owned(Tensor),
    /// A scalar.
    Scalar(f32),
}

impl<'a> TensorOperand<'a> for &'a Tensor {
    fn operand(self) -> Operand<'a> {
        Operand::Borrowed(self)
    }
}
impl TensorOperand<'_> for Tensor {
    fn operand(self) -> Operand<'static> {
        Operand::Owned(self)
    }
}
impl TensorOperand<'_> for f32 {
    fn operand(self) -> Operand<'static> {
        Operand::Scalar(self)
    }
}
impl<'a> TensorOperand<'a> for Rhs<'a> {
    fn operand(self) -> Operand<'a> {
        match self {
            Rhs::Tensor(t) => Operand::Borrowed(t),
            Rhs::Scalar(s) => Operand::Scalar(s),
        }
    }
}

macro_rules! tensor_binary {
    ($($method:ident => $op:tt,)*) => {$(
        /// The consuming form of the op (see the module docs).
        #[inline(always)]
        #[track_caller]
        pub fn $method<'a, R: TensorOperand<'a>, Plain: FnOnce(Tensor, R) -> TensorResult>(
            self,
            _plain: Plain,
            rhs: R,
        ) -> TensorResult {
            match rhs.operand() {
                Operand::Borrowed(rhs) => self.0 $op rhs,
                // As the operator on two owned tensors: `rhs` is freed after the op.
                Operand::Owned(rhs) => self.0 $op &rhs,
                Operand::Scalar(rhs) => self.0 $op rhs,
            }
        }
    )*};
}

macro_rules! tensor_broadcast {
    ($($method:ident => $op:tt,)*) => {$(
        /// The consuming form of the op (see the module docs).
        #[inline(always)]
        #[track_caller]
        pub fn $method<Plain: FnOnce(Tensor, &Tensor) -> TensorResult>(
            self,
            _plain: Plain,
            rhs: &Tensor,
        ) -> TensorResult {
            self.0 $op rhs
        }
    )*};
}

macro_rules! tensor_scalar {
    ($($method:ident => $op:tt,)*) => {$(
        /// The consuming form of the op (see the module docs).
        #[inline(always)]
        #[track_caller]
        pub fn $method<Plain: FnOnce(Tensor, f32) -> TensorResult>(
            self,
            _plain: Plain,
            scalar: f32,
        ) -> TensorResult {
            self.0 $op scalar
        }
    )*};
}

impl Dying<Tensor> {
    tensor_unary! {
        relu_at_last_use => into_relu,
        gelu_at_last_use => into_gelu,
        tanh_at_last_use => into_tanh,
        sigmoid_at_last_use => into_sigmoid,
        exp_at_last_use => into_exp,
        log_at_last_use => into_log,
    }
    tensor_binary! {
        add_at_last_use => +,
        sub_at_last_use => -,
        mul_at_last_use => *,
        div_at_last_use => /,
    }
    tensor_broadcast! {
        broadcast_add_at_last_use => +,
        broadcast_sub_at_last_use => -,
        broadcast_mul_at_last_use => *,
        broadcast_div_at_last_use => /,
    }
    tensor_scalar! {
        add_scalar_at_last_use => +,
        mul_scalar_at_last_use => *,
    }

    /// The consuming form of `affine` (see the module docs).
    #[inline(always)]
    #[track_caller]
    pub fn affine_at_last_use<Plain: FnOnce(Tensor, f32, f32) -> TensorResult>(
        self,
        _plain: Plain,
        mul: f32,
        add: f32,
    ) -> TensorResult {
        self.0.into_affine(mul, add)
    }

    /// The consuming form of `softmax` (see the module docs).
    #[inline(always)]
    #[track_caller]
    pub fn softmax_at_last_use<Plain: FnOnce(Tensor, usize) -> TensorResult>(
        self,
        _plain: Plain,
        dim: usize,
    ) -> TensorResult {
        self.0.into_softmax(dim)
    }

    /// The consuming form of `layer_norm` (see the module docs).
    #[inline(always)]
    #[track_caller]
    #[allow(clippy::type_complexity)]
    pub fn layer_norm_at_last_use<
        Plain: FnOnce(Tensor, Option<&Tensor>, Option<&Tensor>, f32) -> TensorResult,
    >(
        self,
        _plain: Plain,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> TensorResult {
        self.0.into_layer_norm(weight, bias, eps)
    }
}

/// `mapv` at an owned array's last use, for arrays of numbers: `mapv_into_any`, in place when
/// `f` keeps the element type. Numbers only: a method's `'static` bound would not steer method
/// resolution to the fallback for an element type that borrows, it would fail to compile.
/// The output type must be `'static` too (a `mapv` whose closure returns a borrow is a compile
/// error here: mark the `let` `#[keep]`).
#[cfg(feature = "ndarray")]
macro_rules! numeric_mapv {
    ($($element:ty),*) => {$(
        impl<D: ndarray::Dimension> Dying<ndarray::Array<$element, D>> {
            /// `mapv` at the array's last use (see [`numeric_mapv`]).
            #[inline(always)]
            pub fn mapv<B: 'static, F: FnMut($element) -> B>(self, f: F) -> ndarray::Array<B, D> {
                self.0.mapv_into_any(f)
            }
        }
    )*};
}
#[cfg(feature = "ndarray")]
numeric_mapv!(f32, f64, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
