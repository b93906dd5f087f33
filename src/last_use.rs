//! In place at last use: what `#[inference]` and `#[batch_scope]` call when a local dies as the
//! receiver of an op that has a consuming form.
//!
//! Where the transform has already moved a binding `x` into the statement of its last use (only
//! values whose type is `DropAtLastUse` or `Copy` are: see [`crate::DropAtLastUse`]), and `x` is
//! the receiver of a listed method and mentioned nowhere else in that statement, the call
//!
//! ```text
//! x.gelu()             becomes   Dying(x).gelu_receiver().gelu()
//! x.broadcast_add(&b)  becomes   Dying(x).broadcast_add_receiver().broadcast_add(&b)
//! x.mapv(f)            becomes   Dying(x).mapv_receiver().mapv(f)
//! ```
//!
//! Only the receiver changes: the method, its arguments and their tokens are the ones written,
//! so a mistake in them is reported at the user's code with the same message as in the
//! statement's other copy, and rustc shows identical diagnostics once. Which receiver is used is
//! decided by the type, at compile time, by method resolution: [`Dying`] has inherent
//! `*_receiver` methods only for the types that declare consuming forms (vramguard's `Tensor`;
//! with the `ndarray` feature, owned arrays' `mapv`), and inherent methods win over the
//! [`PlainAtLastUse`] trait, whose receivers, for every `Dying<T>`, are the value itself. So
//! every other type (a candle or burn tensor, a generic `T`, a `Copy` value, a type of yours
//! with a method of the same name) runs exactly the call that was written, by value, `&self` or
//! `&mut self`.
//!
//! # Who gets it, and why not the others
//!
//! - **vramguard's `Tensor`**: the element-wise unary ops (`relu`, `gelu`, `tanh`, `sigmoid`,
//!   `exp`, `log`), `add`/`sub`/`mul`/`div` and their `broadcast_*` forms with a right-hand side
//!   of the receiver's shape or broadcast to it, `add_scalar`, `mul_scalar`, `affine`, and
//!   `softmax`/`layer_norm` along the last dimension (see [`TensorAtLastUse`]). The runtime
//!   writes into the dying value's buffer only when nothing else can see it: no other handle or
//!   view on the storage, the buffer is exactly the tensor's contiguous data, not saved for
//!   backward (a saved tensor holds the storage, so it is shared), not a leaf that requires
//!   grad, and, under grad mode, not an input the new op's backward needs. Otherwise it
//!   computes out of place, exactly as the plain method. The values are bit-identical either
//!   way.
//! - **ndarray** (feature `ndarray`): an owned `Array`'s `mapv_receiver` is [`MapvAtLastUse`]
//!   (the closure still gets its parameter types from a `mapv` with ndarray's signature), which
//!   maps in place, with `mapv_into`, when the elements are numbers, `f` returns their type, and
//!   the array is contiguous; otherwise it is the plain `mapv`. An owned array is never shared.
//! - **candle and tch**: not offered. Their tensors are handles on reference-counted storage
//!   that views, clones and the autograd graph share (candle's `Arc`'d storage, libtorch's
//!   intrusive pointer), and neither exposes whether a handle is the only one. The macro sees
//!   only the local it moved, not the other handles, so an in-place op there could change what
//!   another handle, or a gradient, reads.
//! - **burn**: already does it by itself. Its ops take tensors by value and its backends write
//!   into an input's buffer when the handle is the only one (`can_mut`), so moving the value
//!   into its last use, which the attribute does for every `DropAtLastUse` type, is all it needs.

#[cfg(feature = "tensor")]
use vramguard_tensor::tensor::{Tensor, TensorAtLastUse};

/// A value at its last use, as the receiver of the op called on it (see the module docs).
#[doc(hidden)]
pub struct Dying<T>(pub T);

/// Declares the fallback trait, whose receivers are the value itself (the call then runs as
/// written), and `Dying<Tensor>`'s inherent receivers, [`TensorAtLastUse`].
macro_rules! receivers {
    ($($receiver:ident),* ; mapv: $mapv:ident) => {
        /// The receivers of the original calls, for every type without a consuming form (see
        /// the module docs).
        #[doc(hidden)]
        pub trait PlainAtLastUse: Sized {
            /// The dying value's type.
            type Value;
            $(
                /// The value itself: the original call runs on it as written.
                fn $receiver(self) -> Self::Value;
            )*
            /// The value itself: its own `mapv` runs as written.
            fn $mapv(self) -> Self::Value;
        }

        impl<T> PlainAtLastUse for Dying<T> {
            type Value = T;
            $(
                #[inline]
                fn $receiver(self) -> T {
                    self.0
                }
            )*
            #[inline]
            fn $mapv(self) -> T {
                self.0
            }
        }

        #[cfg(feature = "tensor")]
        impl Dying<Tensor> {
            $(
                /// The receiver whose method of the same name is the consuming form.
                #[inline]
                pub fn $receiver(self) -> TensorAtLastUse {
                    TensorAtLastUse::new(self.0)
                }
            )*
        }
    };
}

receivers! {
    relu_receiver, gelu_receiver, tanh_receiver, sigmoid_receiver, exp_receiver, log_receiver,
    add_receiver, sub_receiver, mul_receiver, div_receiver,
    broadcast_add_receiver, broadcast_sub_receiver, broadcast_mul_receiver,
    broadcast_div_receiver, add_scalar_receiver, mul_scalar_receiver, softmax_receiver,
    affine_receiver, layer_norm_receiver;
    mapv: mapv_receiver
}

#[cfg(feature = "ndarray")]
impl<A, D: ndarray::Dimension> Dying<ndarray::Array<A, D>> {
    /// The receiver of `mapv` at an owned array's last use (see [`MapvAtLastUse`]). For every
    /// element type: a bound here would make the call fail to compile where the element type
    /// is still being inferred, or is not one of ours, instead of falling back.
    #[inline]
    pub fn mapv_receiver(self) -> MapvAtLastUse<A, D> {
        MapvAtLastUse(self.0)
    }
}

/// An owned array at its last use, as the receiver of `mapv` (feature `ndarray`).
///
/// `x.mapv(f)` becomes `Dying(x).mapv_receiver().mapv(f)`: the closure is checked against this
/// `mapv`, whose signature is ndarray's (`F: FnMut(A) -> B`, any `B`), so it compiles and infers
/// exactly as the plain call. Whether it maps in place is decided after type checking, on the
/// concrete types: only when the element type is a number, `f` returns that same type, and the
/// array is contiguous (then `mapv_into` visits the elements in the memory order `mapv` does,
/// so even a closure with side effects sees the same sequence). Otherwise it is the plain
/// `mapv`. A number has no lifetime and no drop glue, so writing `f`'s results over the array
/// it reads from is unobservable.
#[cfg(feature = "ndarray")]
#[doc(hidden)]
pub struct MapvAtLastUse<A, D: ndarray::Dimension>(ndarray::Array<A, D>);

#[cfg(feature = "ndarray")]
impl<A: Clone, D: ndarray::Dimension> MapvAtLastUse<A, D> {
    /// ndarray's `mapv`, in the array's buffer when that is unobservable (see the type's docs).
    #[inline]
    pub fn mapv<B, F: FnMut(A) -> B>(self, mut f: F) -> ndarray::Array<B, D> {
        let array = self.0;
        if !(is_number::<A>() && same_type::<A, B>() && array.as_slice_memory_order().is_some()) {
            return array.mapv(f);
        }
        let mapped = array.mapv_into(|a| {
            // SAFETY: `B` is `A` (checked above), so this is the identity.
            unsafe { transmute_same::<B, A>(f(a)) }
        });
        // SAFETY: as above: `Array<A, D>` is `Array<B, D>`.
        unsafe { transmute_same::<ndarray::Array<A, D>, ndarray::Array<B, D>>(mapped) }
    }
}

/// Moves a value of type `From` into type `To`.
///
/// # Safety
///
/// `From` and `To` must be the same type.
#[cfg(feature = "ndarray")]
#[inline]
unsafe fn transmute_same<From, To>(value: From) -> To {
    let value = std::mem::ManuallyDrop::new(value);
    // SAFETY: the caller guarantees `To` is `From`: same size, alignment and validity.
    unsafe { std::ptr::read((&*value as *const From).cast::<To>()) }
}

/// Whether `A` is one of Rust's number types (no lifetime, no drop glue).
#[cfg(feature = "ndarray")]
fn is_number<A>() -> bool {
    use std::any::TypeId;
    let id = type_id_erased::<A>();
    [
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
        TypeId::of::<i8>(),
        TypeId::of::<i16>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<i128>(),
        TypeId::of::<isize>(),
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<u128>(),
        TypeId::of::<usize>(),
    ]
    .contains(&id)
}

/// Whether `B` is `A`, for an `A` that has no lifetime parameters (a number): their ids with
/// lifetimes erased are equal only if `B` is `A` itself.
#[cfg(feature = "ndarray")]
fn same_type<A, B>() -> bool {
    type_id_erased::<A>() == type_id_erased::<B>()
}

/// `TypeId::of::<T>()` for any `T`, `'static` or not, with its lifetimes erased: the technique
/// of dtolnay's `typeid` crate. `TypeId::of` needs `T: 'static` only so that types differing in
/// lifetimes cannot be told apart at run time; callers here compare against types that have no
/// lifetimes, where erasing them loses nothing.
#[cfg(feature = "ndarray")]
fn type_id_erased<T: ?Sized>() -> std::any::TypeId {
    use std::marker::PhantomData;

    trait NonStaticAny {
        fn type_id_erased(&self) -> std::any::TypeId
        where
            Self: 'static;
    }
    impl<T: ?Sized> NonStaticAny for PhantomData<T> {
        fn type_id_erased(&self) -> std::any::TypeId
        where
            Self: 'static,
        {
            std::any::TypeId::of::<T>()
        }
    }
    let phantom = PhantomData::<T>;
    // SAFETY: only the lifetime of the trait object changes; the method reads nothing through
    // it, and lifetimes do not exist at run time, so the id is `T`'s with lifetimes erased.
    let erased = unsafe {
        std::mem::transmute::<&dyn NonStaticAny, &(dyn NonStaticAny + 'static)>(&phantom)
    };
    erased.type_id_erased()
}
