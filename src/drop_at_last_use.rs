//! What `#[inference]` and `#[batch_scope]` may free at a value's last use: the [`DropAtLastUse`]
//! marker trait and its implementations.
//!
//! The macros find each local's last use without types; whether the value is freed there is
//! decided by the compiler from the value's type (see `__private::Probe`). Only types that
//! implement [`DropAtLastUse`] are moved to their last use; every other value keeps the place
//! and the order of its drop that it has without the attribute.

/// A type whose drop frees memory and does nothing anyone can observe, so that dropping it
/// earlier than its scope's end changes nothing but memory.
///
/// `#[vramguard::inference]` and `#[vramguard::batch_scope]` free a local of a `DropAtLastUse` type
/// right after its last use; a local of any other type (a lock guard, an `Rc`, a file, a
/// temporary directory, a channel, a `Copy` value, …) is dropped where it would be without the
/// attribute.
///
/// # Whether your type may implement it
///
/// Implement `DropAtLastUse` (or derive it, `#[derive(vramguard::DropAtLastUse)]`, which requires
/// every field to be `DropAtLastUse`) only if dropping a value does nothing but return memory: no
/// lock is unlocked, no count another handle can read changes, no file, directory, connection or
/// channel closes, nothing is flushed, logged or sent, and no other object's behaviour depends
/// on the value being alive. A tensor, an activation cache or a plain numeric buffer qualifies;
/// a type holding an `Rc`/`Arc` that other code can also hold, a guard, a handle, or anything
/// with a hand-written `Drop` that has effects outside the value does not. Declaring a type
/// `DropAtLastUse` wrongly does not break memory safety, but the attribute may then change what
/// your program computes, which is exactly what it promises never to do.
///
/// # What is dropped at last use
///
/// Dropped at their last use:
///
/// - vramguard's [`Tensor`](crate::Tensor);
/// - `Vec<T>`, `VecDeque<T>`, `Box<T>`, `Option<T>`, `[T; N]`, `[T]`, tuples of up to 8 and
///   `Result<T, E>`, when every `T` (and `E`) is `DropAtLastUse`;
/// - `Vec<x>` and `[x]` (so `Box<[x]>`) of the primitive numbers `x` (`f32`, `u8`, …);
/// - feature `candle`: `candle_core::Tensor`;
/// - feature `ndarray`: owned arrays, `ndarray::Array<A, D>`, of a primitive number or of
///   an `A: DropAtLastUse`;
/// - feature `burn`: `burn_tensor::Tensor<D, K>` of burn 0.22 (every rank and kind);
/// - feature `burn-021`: `burn_tensor::Tensor<B, D, K>` of burn 0.21 (every backend);
/// - feature `tch`: `tch::Tensor` (tch 0.26, libtorch 2.13);
/// - your types, with `impl vramguard::DropAtLastUse for MyType {}` or the derive.
///
/// Kept to the end of their scope, exactly as without the attribute:
///
/// - references, `&T` and `&mut T` (dropping a borrow frees nothing);
/// - `Rc<T>`, `Arc<T>` and `Weak<T>` (another handle can observe the count), even of tensors;
/// - lock guards, `RefCell` borrows, files, temporary directories, channels, sockets, handles;
/// - the primitive numbers themselves and every other `Copy` type;
/// - ndarray's views (`ArrayView`, `ArrayViewMut`), `ArcArray` (data shared with other handles)
///   and `CowArray` (maybe a view);
/// - `String` (text, not tensor memory: nothing to gain by moving its drop);
/// - a `Result<T, E>` whose error is not `DropAtLastUse` (`io::Error`, `Box<dyn Error>`,
///   `candle_core::Error`, …), so a `candle_core::Result<Tensor>` kept unwrapped is kept whole;
/// - everything else.
///
/// A library's tensor is `DropAtLastUse` only for the version of that library the feature names
/// (candle-core 0.11, ndarray 0.17, burn-tensor 0.22 or 0.21, tch 0.26): a tensor of another
/// version is another type to the compiler, and is simply kept.
///
/// # Notices in debug builds
///
/// Two mistakes would make the attribute free nothing with no other sign, so in debug builds
/// (`debug_assertions` on; never in release builds) vramguard says so on stderr, one line
/// starting `warning: vramguard:`, at the first drop point where it happens:
///
/// - **a supported library's tensor is kept**: a `candle_core::Tensor`, an owned `ndarray`
///   array of numbers, a burn or a tch tensor, or a `Vec`, `Box`, `Option`, `VecDeque`, array
///   or slice of them, reached a drop point while vramguard's feature for that library is
///   off. The line names the type and the `Cargo.toml` line that turns the feature on
///   (`vramguard = { version = "…", features = ["candle"] }`). With the feature on, such a
///   type is kept only when it comes from another version of the library (or is a generic
///   parameter without a `DropAtLastUse` bound), and the line says that instead. Once per type.
///   References, `Rc`/`Arc` and views are kept with the feature on too, and are not noticed.
/// - **a candle tensor dropped at its last use records candle's graph** (`Tensor::track_op()`: a
///   `Var`, or a tensor computed from one) while grad mode is off, as under `#[inference]`:
///   dropping it frees nothing, since every tensor computed from it holds it. The line says to load
///   the weights as plain tensors or `detach()` them (see "No-grad with other libraries" below).
///   Once per process; never with grad mode on (a training loop records on purpose).
///
/// # No-grad with other libraries
///
/// `#[inference]` enters vramguard's own no-grad guard, and, with the `tch` feature, tch's
/// (`tch::no_grad_guard()`, around each poll in an `async fn`). candle and burn have no such
/// thread-wide switch, so with their tensors the attribute gives the drops at last use only. Inference
/// records no graph in them if it is set up this way:
///
/// - **candle**: a graph is recorded only through tensors that track gradients, which are the
///   ones created as `candle_core::Var` (a `VarMap` behind a `VarBuilder::from_varmap`). Load
///   inference weights as plain tensors (`VarBuilder::from_mmaped_safetensors`,
///   `VarBuilder::from_tensors`, `Tensor::new`/`from_vec`), or call `.detach()` on a trained
///   `Var`'s tensor; then no op records anything. A model trained with a `VarMap` and evaluated
///   in the same process still records: evaluate on `var.as_tensor().detach()`, or on weights
///   reloaded from the saved file.
/// - **burn 0.22** (autodiff is a property of the device): run inference on a device without
///   `.autodiff()`, or on `model.valid()` (a copy of the module whose parameters have left the
///   autodiff graph); a single tensor leaves it with `tensor.inner()` / `without_autodiff()`.
/// - **burn 0.21 and before** (autodiff is a backend decorator, `Autodiff<B>`): write the model
///   generic over `B: Backend` and run inference on `model.valid()`, which is the same module on
///   `B::InnerBackend` (no autodiff); tensors go there with `tensor.inner()`.
/// - **tch**: has a thread-local guard, `tch::no_grad_guard()`, which `#[inference]` holds for
///   the whole body when the `tch` feature is on; without the attribute, hold it yourself for
///   the whole forward pass (or use `tch::no_grad(|| …)`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not `vramguard::DropAtLastUse`",
    label = "not `DropAtLastUse`: dropping it at its last use might change what the program does",
    note = "only types whose drop frees memory and does nothing else are `DropAtLastUse` (see the docs of `vramguard::DropAtLastUse`); a struct deriving it needs every field to be `DropAtLastUse`",
    note = "if this points at a statement that `#[inference]` or `#[batch_scope]` rewrote, the local's type was not known yet where the attribute asked for it: give its `let` a type annotation, or mark the `let` with `#[keep]`"
)]
pub trait DropAtLastUse {
    /// Whether the value is or holds a candle tensor that records candle's graph, which
    /// dropping does not free (for the debug-build notice; not API). Only candle's tensor and
    /// the containers of `DropAtLastUse` values answer anything but `false`.
    #[doc(hidden)]
    #[inline]
    fn __vg_records_graph(&self) -> bool {
        false
    }

    /// Whether a value of this type may answer `true` to `__vg_records_graph`, so that a
    /// container walks its elements only when one might (not API).
    #[doc(hidden)]
    #[inline]
    fn __vg_may_record_graph() -> bool
    where
        Self: Sized,
    {
        false
    }
}

#[cfg(feature = "tensor")]
impl DropAtLastUse for vramguard_tensor::tensor::Tensor {}

impl<T: DropAtLastUse> DropAtLastUse for Vec<T> {
    fn __vg_records_graph(&self) -> bool {
        T::__vg_may_record_graph() && self.iter().any(T::__vg_records_graph)
    }
    fn __vg_may_record_graph() -> bool {
        T::__vg_may_record_graph()
    }
}
impl<T: DropAtLastUse + ?Sized> DropAtLastUse for Box<T> {
    fn __vg_records_graph(&self) -> bool {
        (**self).__vg_records_graph()
    }
    // `T` may be unsized (`Box<[T]>`), which cannot be asked: assume it may.
    fn __vg_may_record_graph() -> bool {
        true
    }
}
impl<T: DropAtLastUse> DropAtLastUse for Option<T> {
    fn __vg_records_graph(&self) -> bool {
        self.as_ref().is_some_and(T::__vg_records_graph)
    }
    fn __vg_may_record_graph() -> bool {
        T::__vg_may_record_graph()
    }
}
impl<T: DropAtLastUse, E: DropAtLastUse> DropAtLastUse for Result<T, E> {
    fn __vg_records_graph(&self) -> bool {
        match self {
            Ok(value) => value.__vg_records_graph(),
            Err(error) => error.__vg_records_graph(),
        }
    }
    fn __vg_may_record_graph() -> bool {
        T::__vg_may_record_graph() || E::__vg_may_record_graph()
    }
}
impl<T: DropAtLastUse, const N: usize> DropAtLastUse for [T; N] {
    fn __vg_records_graph(&self) -> bool {
        T::__vg_may_record_graph() && self.iter().any(T::__vg_records_graph)
    }
    fn __vg_may_record_graph() -> bool {
        T::__vg_may_record_graph()
    }
}
impl<T: DropAtLastUse> DropAtLastUse for [T] {
    fn __vg_records_graph(&self) -> bool {
        T::__vg_may_record_graph() && self.iter().any(T::__vg_records_graph)
    }
}
impl<T: DropAtLastUse> DropAtLastUse for std::collections::VecDeque<T> {
    fn __vg_records_graph(&self) -> bool {
        T::__vg_may_record_graph() && self.iter().any(T::__vg_records_graph)
    }
    fn __vg_may_record_graph() -> bool {
        T::__vg_may_record_graph()
    }
}

macro_rules! numeric_buffers {
    ($($element:ty),*) => {$(
        impl DropAtLastUse for Vec<$element> {}
        impl DropAtLastUse for [$element] {}
    )*};
}
// Plain numeric buffers: their drop is a deallocation and nothing else. The scalars themselves
// are `Copy` and never dropped (a dropped `Copy` value would be mutated as a copy).
numeric_buffers!(f32, f64, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);

macro_rules! tuples {
    ($(($($name:ident $field:ident),+)),*) => {$(
        impl<$($name: DropAtLastUse),+> DropAtLastUse for ($($name,)+) {
            fn __vg_records_graph(&self) -> bool {
                let ($($field,)+) = self;
                false $(|| $field.__vg_records_graph())+
            }
            fn __vg_may_record_graph() -> bool {
                false $(|| $name::__vg_may_record_graph())+
            }
        }
    )*};
}
tuples!(
    (A a),
    (A a, B b),
    (A a, B b, C c),
    (A a, B b, C c, D d),
    (A a, B b, C c, D d, E e),
    (A a, B b, C c, D d, E e, F f),
    (A a, B b, C c, D d, E e, F f, G g),
    (A a, B b, C c, D d, E e, F f, G g, H h)
);

#[cfg(feature = "candle")]
// A handle on shared, reference-counted storage, like vramguard's own tensor: dropping one frees
// the storage when no other handle (a view, a clone, a saved activation) still holds it.
impl DropAtLastUse for candle_core::Tensor {
    // A tensor that tracks ops (a `Var`, or computed from one) is held by every tensor computed
    // from it: dropping it frees nothing.
    fn __vg_records_graph(&self) -> bool {
        self.track_op()
    }
    fn __vg_may_record_graph() -> bool {
        true
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_arrays {
    use super::DropAtLastUse;
    use ndarray::{Array, Dimension};

    // Owned arrays only: a view's drop frees nothing, an `ArcArray` shares its data with other
    // handles, and a `CowArray` may be a view. Elements are held to the rule of `Vec`'s.
    impl<A: DropAtLastUse, D: Dimension> DropAtLastUse for Array<A, D> {
        fn __vg_records_graph(&self) -> bool {
            A::__vg_may_record_graph() && self.iter().any(A::__vg_records_graph)
        }
        fn __vg_may_record_graph() -> bool {
            A::__vg_may_record_graph()
        }
    }

    macro_rules! numeric_arrays {
        ($($element:ty),*) => {$(
            impl<D: Dimension> DropAtLastUse for Array<$element, D> {}
        )*};
    }
    numeric_arrays!(f32, f64, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
}

#[cfg(feature = "burn")]
// burn 0.22: the backend is chosen at run time from the device; every kind (float, int, bool).
impl<const D: usize, K: burn_tensor::kind::Basic> DropAtLastUse for burn_tensor::Tensor<D, K> {}

#[cfg(feature = "burn-021")]
// burn 0.21 (0.21.x only: each burn line is a separate crate version): the tensor is generic
// over its backend, as in every line before it.
impl<B, const D: usize, K> DropAtLastUse for burn_tensor_021::Tensor<B, D, K>
where
    B: burn_tensor_021::backend::Backend,
    K: burn_tensor_021::TensorKind<B>,
{
}

#[cfg(feature = "tch")]
// A handle on a libtorch tensor (reference-counted storage, like the others).
impl DropAtLastUse for tch::Tensor {}

/// The compile-time questions the generated code asks at each drop point, answered by
/// method resolution from the value's type (autoref specialization): the receiver is
/// `&&&Probe<T>`, and each autoderef step down reaches a less specific answer.
///
/// - `__vg_droppable()`: is `T: DropAtLastUse`? (may the value be freed here);
/// - `__vg_movable()`: is `T: DropAtLastUse` or `T: Copy`? (may an immutable binding be moved into
///   the statement of its last use: moving a `Copy` value copies it, which nobody can observe).
///
/// The probe holds the value's reference for the debug-build notices (`crate::notices`): the
/// answers themselves come from the type alone. The generated code builds it as
/// `__VgProbe(&x)`, a struct expression rather than a constructor call: one call fewer per
/// drop point for a debug build to compile.
#[doc(hidden)]
pub struct Probe<'a, T: ?Sized>(pub &'a T);

/// First step: `T: DropAtLastUse`.
#[doc(hidden)]
pub trait DroppableAtLastUse {
    /// `true`: the value may be freed at its last use.
    fn __vg_droppable(&self) -> bool;
    /// `true`: the value may be moved into the statement of its last use.
    fn __vg_movable(&self) -> bool;
}
impl<T: DropAtLastUse + ?Sized> DroppableAtLastUse for &&Probe<'_, T> {
    #[inline]
    fn __vg_droppable(&self) -> bool {
        if cfg!(debug_assertions) {
            crate::notices::dropped_with_graph(self.0);
        }
        true
    }
    #[inline]
    fn __vg_movable(&self) -> bool {
        if cfg!(debug_assertions) {
            crate::notices::dropped_with_graph(self.0);
        }
        true
    }
}

/// Second step: `T: Copy` (answers only `__vg_movable`).
#[doc(hidden)]
pub trait CopyAtLastUse {
    /// `true`: a copy may be moved into the statement of its last use.
    #[inline]
    fn __vg_movable(&self) -> bool {
        true
    }
}
impl<T: Copy> CopyAtLastUse for &Probe<'_, T> {}

/// Last step: every other type is dropped where it would be without the attribute.
#[doc(hidden)]
pub trait KeepToScopeEnd {
    /// `false`: the value is not freed early.
    fn __vg_droppable(&self) -> bool;
    /// `false`: the value is not moved.
    fn __vg_movable(&self) -> bool;
}
// The bodies are here, not in the trait, to see `T` (its name, for the notice).
impl<T: ?Sized> KeepToScopeEnd for Probe<'_, T> {
    #[inline]
    fn __vg_droppable(&self) -> bool {
        if cfg!(debug_assertions) {
            crate::notices::kept_tensor(core::any::type_name::<T>());
        }
        false
    }
    #[inline]
    fn __vg_movable(&self) -> bool {
        if cfg!(debug_assertions) {
            crate::notices::kept_tensor(core::any::type_name::<T>());
        }
        false
    }
}
