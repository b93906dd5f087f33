//! Grad mode: whether operations record the autograd graph on this thread.
//!
//! The flag is thread-local, like PyTorch's. Guards restore the previous state when dropped, so
//! they nest and survive panics. An `async fn` must not hold a guard across `.await` (the task
//! may resume on another thread); wrap the future in [`WithGradMode`] instead, which sets the
//! mode around each poll.

use std::cell::Cell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether operations on this thread record the autograd graph.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Sets grad mode on this thread and returns the previous value. Prefer the guards.
pub fn set_grad_enabled(enabled: bool) -> bool {
    GRAD_ENABLED.with(|g| g.replace(enabled))
}

/// Guard that sets grad mode to a value and restores the previous one on drop.
///
/// Not `Send`: grad mode belongs to the thread that set it.
#[must_use = "grad mode is restored as soon as the guard is dropped"]
#[derive(Debug)]
pub struct GradModeGuard {
    previous: bool,
    _not_send: PhantomData<*const ()>,
}

impl GradModeGuard {
    /// Sets grad mode to `enabled` until the guard is dropped.
    pub fn new(enabled: bool) -> Self {
        Self {
            previous: set_grad_enabled(enabled),
            _not_send: PhantomData,
        }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        set_grad_enabled(self.previous);
    }
}

/// Disables grad recording until dropped (`torch.no_grad()`).
#[must_use = "grad mode is restored as soon as the guard is dropped"]
#[derive(Debug)]
pub struct NoGradGuard(#[allow(dead_code)] GradModeGuard);

impl NoGradGuard {
    /// Disables grad recording on this thread until the guard is dropped.
    pub fn new() -> Self {
        Self(GradModeGuard::new(false))
    }
}

impl Default for NoGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// Enables grad recording until dropped (`torch.enable_grad()`).
#[must_use = "grad mode is restored as soon as the guard is dropped"]
#[derive(Debug)]
pub struct EnableGradGuard(#[allow(dead_code)] GradModeGuard);

impl EnableGradGuard {
    /// Enables grad recording on this thread until the guard is dropped.
    pub fn new() -> Self {
        Self(GradModeGuard::new(true))
    }
}

impl Default for EnableGradGuard {
    fn default() -> Self {
        Self::new()
    }
}

/// Runs `f` with grad recording disabled.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = NoGradGuard::new();
    f()
}

/// Runs `f` with grad recording enabled.
pub fn enable_grad<R>(f: impl FnOnce() -> R) -> R {
    let _guard = EnableGradGuard::new();
    f()
}

/// A future that runs every poll of the inner future under a fixed grad mode.
///
/// This is the async form of the guards: the mode is set on whichever thread polls, and the
/// previous mode of that thread is restored after each poll.
#[derive(Debug)]
pub struct WithGradMode<F> {
    inner: F,
    enabled: bool,
}

impl<F: Future> WithGradMode<F> {
    /// Wraps `inner` so that it always runs with grad mode `enabled`.
    pub fn new(inner: F, enabled: bool) -> Self {
        Self { inner, enabled }
    }
}

impl<F: Future> Future for WithGradMode<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `inner` is structurally pinned: it is never moved out of `self`, and
        // `WithGradMode` has no `Drop` impl and no `Unpin` impl that would contradict that.
        let this = unsafe { self.get_unchecked_mut() };
        let _guard = GradModeGuard::new(this.enabled);
        // SAFETY: see above; `this.inner` stays where it was pinned.
        unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx)
    }
}

/// Wraps a future so that it runs with grad recording disabled on every poll.
pub fn no_grad_future<F: Future>(inner: F) -> WithGradMode<F> {
    WithGradMode::new(inner, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_nest_and_restore() {
        assert!(is_grad_enabled());
        {
            let _a = NoGradGuard::new();
            assert!(!is_grad_enabled());
            {
                let _b = EnableGradGuard::new();
                assert!(is_grad_enabled());
            }
            assert!(!is_grad_enabled());
        }
        assert!(is_grad_enabled());
    }

    #[test]
    fn panic_inside_guard_restores_mode() {
        let result = std::panic::catch_unwind(|| {
            let _g = NoGradGuard::new();
            panic!("boom");
        });
        assert!(result.is_err());
        assert!(is_grad_enabled());
    }

    #[test]
    fn other_threads_are_unaffected() {
        let _g = NoGradGuard::new();
        let other = std::thread::spawn(is_grad_enabled).join().unwrap();
        assert!(other);
        assert!(!is_grad_enabled());
    }
}
