//! What `#[inference]` and `#[batch_scope]` may free at a value's last use: the [`Release`]
//! marker trait and its implementations.
//!
//! The macros find each local's last use without types; whether the value is freed there is
//! decided by the compiler from the value's type (see `__private::Probe`). Only types that
//! implement [`Release`] are moved to their last use; every other value keeps the drop point
//! and the drop order it has without the attribute.

/// A type whose drop frees memory and does nothing anyone can observe, so that dropping it
/// earlier than its scope's end changes nothing but memory.
///
/// `#[vramguard::inference]` and `#[vramguard::batch_scope]` free a local of a `Release` type
/// right after its last use; a local of any other type (a lock guard, an `Rc`, a file, a
/// temporary directory, a channel, a `Copy` value, …) is dropped where it would be without the
/// attribute.
///
/// # Whether your type may implement it
///
/// Implement `Release` (or derive it, `#[derive(vramguard::Release)]`, which requires every
/// field to be `Release`) only if dropping a value does nothing but return memory: no lock is
/// released, no count another handle can read changes, no file, directory, connection or
/// channel closes, nothing is flushed, logged or sent, and no other object's behaviour depends
/// on the value being alive. A tensor, an activation cache or a plain numeric buffer qualifies;
/// a type holding an `Rc`/`Arc` that other code can also hold, a guard, a handle, or anything
/// with a hand-written `Drop` that has effects outside the value does not. Declaring a type
/// `Release` wrongly does not break memory safety, but the attribute may then change what your
/// program computes, which is exactly what it promises never to do.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `vramguard::Release`",
    label = "not `Release`: dropping it at its last use might change what the program does",
    note = "only types whose drop frees memory and does nothing else are `Release` (see the docs of `vramguard::Release`); a struct deriving it needs every field to be `Release`",
    note = "if this points at a statement that `#[inference]` or `#[batch_scope]` rewrote, the local's type was not known yet where the attribute asked for it: give its `let` a type annotation, or mark the `let` with `#[keep]`"
)]
pub trait Release {}

impl Release for vramguard_runtime::tensor::Tensor {}

impl<T: Release> Release for Vec<T> {}
impl<T: Release + ?Sized> Release for Box<T> {}
impl<T: Release> Release for Option<T> {}
impl<T: Release, E: Release> Release for Result<T, E> {}
impl<T: Release, const N: usize> Release for [T; N] {}
impl<T: Release> Release for [T] {}
impl<T: Release> Release for std::collections::VecDeque<T> {}

macro_rules! numeric_buffers {
    ($($element:ty),*) => {$(
        impl Release for Vec<$element> {}
        impl Release for [$element] {}
    )*};
}
// Plain numeric buffers: their drop is a deallocation and nothing else. The scalars themselves
// are `Copy` and never released (a released `Copy` value would be mutated as a copy).
numeric_buffers!(f32, f64, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! tuples {
    ($(($($name:ident),+)),*) => {$(
        impl<$($name: Release),+> Release for ($($name,)+) {}
    )*};
}
tuples!(
    (A),
    (A, B),
    (A, B, C),
    (A, B, C, D),
    (A, B, C, D, E),
    (A, B, C, D, E, F),
    (A, B, C, D, E, F, G),
    (A, B, C, D, E, F, G, H)
);

#[cfg(feature = "candle")]
impl Release for candle_core::Tensor {}

#[cfg(feature = "ndarray")]
// Owned arrays only: a view's drop frees nothing, and an `ArcArray` shares its data.
impl<A, D: ndarray::Dimension> Release for ndarray::Array<A, D> {}

/// The compile-time questions the generated code asks at each release point, answered by
/// method resolution from the value's type (autoref specialization): the receiver is
/// `&&&Probe<T>`, and each autoderef step down reaches a less specific answer.
///
/// - `__vg_releasable()`: is `T: Release`? (may the value be freed here);
/// - `__vg_movable()`: is `T: Release` or `T: Copy`? (may an immutable binding be moved into
///   the statement of its last use: moving a `Copy` value copies it, which nobody can observe).
#[doc(hidden)]
pub struct Probe<T: ?Sized>(core::marker::PhantomData<fn(&T)>);

impl<T: ?Sized> Probe<T> {
    /// A probe for the type of `value` (only its type is used).
    #[inline(always)]
    pub fn of(_value: &T) -> Self {
        Probe(core::marker::PhantomData)
    }
}

/// First step: `T: Release`.
#[doc(hidden)]
pub trait ReleaseAtLastUse {
    /// `true`: the value may be freed at its last use.
    #[inline(always)]
    fn __vg_releasable(&self) -> bool {
        true
    }
    /// `true`: the value may be moved into the statement of its last use.
    #[inline(always)]
    fn __vg_movable(&self) -> bool {
        true
    }
}
impl<T: Release + ?Sized> ReleaseAtLastUse for &&Probe<T> {}

/// Second step: `T: Copy` (answers only `__vg_movable`).
#[doc(hidden)]
pub trait CopyAtLastUse {
    /// `true`: a copy may be moved into the statement of its last use.
    #[inline(always)]
    fn __vg_movable(&self) -> bool {
        true
    }
}
impl<T: Copy> CopyAtLastUse for &Probe<T> {}

/// Last step: every other type keeps its drop point.
#[doc(hidden)]
pub trait KeepToScopeEnd {
    /// `false`: the value is not freed early.
    #[inline(always)]
    fn __vg_releasable(&self) -> bool {
        false
    }
    /// `false`: the value is not moved.
    #[inline(always)]
    fn __vg_movable(&self) -> bool {
        false
    }
}
impl<T: ?Sized> KeepToScopeEnd for Probe<T> {}
