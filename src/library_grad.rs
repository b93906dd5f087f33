//! Other tensor libraries' no-grad modes, entered together for the code `#[inference]`
//! generates. Only libraries with a thread-wide switch appear here (tch); candle and burn have
//! none (see the docs of [`DropAtLastUse`](crate::DropAtLastUse) for what to do instead).

/// The no-grad guards of the other libraries this build of vramguard supports, entered together
/// (today tch's, with the `tch` feature; nothing without it). Restores each library's previous
/// mode when dropped. Thread-local like vramguard's own guard.
#[doc(hidden)]
#[must_use = "the libraries record gradients again as soon as the guard is dropped"]
pub struct LibraryNoGrad {
    #[cfg(feature = "tch")]
    _tch: tch::NoGradGuard,
}

/// Enters [`LibraryNoGrad`]: for the code `#[inference]` generates, next to vramguard's own
/// guard. The same call whatever features are on, so generated code never needs a `cfg`.
#[doc(hidden)]
#[inline]
pub fn library_no_grad() -> LibraryNoGrad {
    LibraryNoGrad {
        #[cfg(feature = "tch")]
        _tch: tch::no_grad_guard(),
    }
}

/// Everything a synchronous `#[inference]` function enters on its first line: vramguard's
/// no-grad mode, then the other libraries' ([`LibraryNoGrad`]). One local with one drop, not
/// two, in each annotated function: a debug build compiles one call and one drop glue fewer per
/// function. Dropped in reverse order of entry, as two guards in two `let`s would be.
#[doc(hidden)]
#[must_use = "grad recording is restored as soon as the guard is dropped"]
pub struct InferenceGuard {
    // Fields drop in declaration order: the library guards first.
    _library: LibraryNoGrad,
    _no_grad: vramguard_memory::grad::NoGradGuard,
}

/// Enters [`InferenceGuard`] (for the code `#[inference]` generates).
#[doc(hidden)]
#[inline]
pub fn inference_guard() -> InferenceGuard {
    let no_grad = vramguard_memory::grad::NoGradGuard::new();
    InferenceGuard {
        _library: library_no_grad(),
        _no_grad: no_grad,
    }
}

/// Runs `future` with [`LibraryNoGrad`] entered around each poll (a guard must not be held
/// across `.await`: the task may resume on another thread). For `async fn`s under
/// `#[inference]`.
#[doc(hidden)]
pub async fn with_library_no_grad<F: core::future::Future>(future: F) -> F::Output {
    let mut future = core::pin::pin!(future);
    core::future::poll_fn(|context| {
        let _guard = library_no_grad();
        future.as_mut().poll(context)
    })
    .await
}
