//! A tensor at its last use, as the receiver of an op that has a consuming form: what
//! `#[inference]` and `#[batch_scope]` call on a vramguard `Tensor` that dies in the statement
//! (the facade's `Dying<Tensor>` hands it out; see the facade's `last_use` module).
//!
//! Each op of [`TensorAtLastUse`] is defined by `with_consuming_form!` from the same tokens as
//! `Tensor`'s method of the same name, so the two are the same to the type checker in name,
//! receiver (`&self`), parameters and the places rustc quotes for them: a mistake in a call
//! reads the same in both copies of a statement the attribute writes twice, and rustc reports it
//! once.

use std::cell::Cell;
use std::ops::{Add, Div, Mul, Sub};

use crate::tensor::error::{Result, TensorError};
use crate::tensor::Tensor;

/// A vramguard `Tensor` at its last use: its ops compute in the tensor's own buffer when nothing
/// else can see it, and exactly as `Tensor`'s otherwise (see `Tensor::into_relu` and the other
/// consuming forms). The receiver is `&self`, as on `Tensor`, so that with `std::ops::Add` in
/// scope `x.add(y)` still resolves to the operator (implemented for the same right-hand sides).
#[doc(hidden)]
pub struct TensorAtLastUse(Cell<Option<Tensor>>);

impl TensorAtLastUse {
    /// The receiver for `tensor`, which dies with it.
    pub fn new(tensor: Tensor) -> TensorAtLastUse {
        TensorAtLastUse(Cell::new(Some(tensor)))
    }

    /// The tensor. The generated code calls one op once on a receiver it has just made; a
    /// second call (only possible by hand) is an error, not a panic.
    pub(crate) fn take(&self, op: &'static str) -> Result<Tensor> {
        self.0.take().ok_or_else(|| TensorError::InvalidArgument {
            op,
            shape: Vec::new(),
            message: "the receiver of a tensor at its last use was used twice".into(),
        })
    }
}

/// Defines methods of `Tensor` and, from the same tokens, their consuming forms on
/// [`TensorAtLastUse`]: `consuming(t) { .. }` computes the op on the owned tensor `t`.
macro_rules! with_consuming_form {
    ($(
        $(#[$attr:meta])*
        pub fn $name:ident $(<$lt:lifetime>)? (&$this:ident $(, $arg:ident: $ty:ty)* $(,)?)
            -> $ret:ty
        $body:block
        consuming($owned:ident) $consuming:block
    )*) => {
        impl Tensor {$(
            $(#[$attr])*
            pub fn $name $(<$lt>)? (&$this $(, $arg: $ty)*) -> $ret $body
        )*}
        impl $crate::tensor::TensorAtLastUse {$(
            /// The consuming form of `Tensor`'s method of the same name (see
            /// `TensorAtLastUse`).
            #[track_caller]
            pub fn $name $(<$lt>)? (&$this $(, $arg: $ty)*) -> $ret {
                let $owned = $this.take(stringify!($name))?;
                $consuming
            }
        )*}
    };
}

macro_rules! operators {
    ($($trait:ident, $method:ident => $op:tt;)*) => {$(
        /// The operator, as on the owned tensor (in place when unobservable), for the same
        /// right-hand sides: a wrong one reads as it does on a `Tensor`.
        impl<R> $trait<R> for TensorAtLastUse
        where
            Tensor: $trait<R, Output = Result<Tensor>>,
        {
            type Output = Result<Tensor>;
            #[track_caller]
            fn $method(self, rhs: R) -> Result<Tensor> {
                self.take(stringify!($method))? $op rhs
            }
        }
    )*};
}

operators! {
    Add, add => +;
    Sub, sub => -;
    Mul, mul => *;
    Div, div => /;
}
