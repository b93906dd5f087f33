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
        // `#[inference]` enters this guard: a bad `VRAMGUARD_ALLOC_CONF` is reported even in a
        // program that uses nothing else of vramguard.
        crate::alloc::check_env_once();
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

    type WakerSlot = std::sync::Arc<std::sync::Mutex<Option<std::task::Waker>>>;

    /// A future that stays pending `remaining` times, checking grad mode and noting its thread
    /// at each poll. Its waker goes into `slot`, so whoever wakes it decides where it runs next
    /// (or it wakes itself when there is no slot).
    struct Probe {
        remaining: usize,
        threads: Vec<std::thread::ThreadId>,
        grad_seen: Vec<bool>,
        slot: Option<WakerSlot>,
    }

    impl Future for Probe {
        type Output = (Vec<std::thread::ThreadId>, Vec<bool>);
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            self.threads.push(std::thread::current().id());
            let enabled = is_grad_enabled();
            self.grad_seen.push(enabled);
            if self.remaining == 0 {
                return Poll::Ready((
                    std::mem::take(&mut self.threads),
                    std::mem::take(&mut self.grad_seen),
                ));
            }
            self.remaining -= 1;
            match &self.slot {
                Some(slot) => *slot.lock().unwrap() = Some(cx.waker().clone()),
                None => cx.waker().wake_by_ref(),
            }
            Poll::Pending
        }
    }

    #[test]
    fn future_adapter_follows_the_task_across_threads() {
        // Deterministic: poll the same future on two threads by hand.
        let waker = std::task::Waker::noop();
        let mut fut = Box::pin(no_grad_future(Probe {
            remaining: 2,
            threads: Vec::new(),
            grad_seen: Vec::new(),
            slot: None,
        }));
        assert!(fut
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_pending());
        assert!(
            is_grad_enabled(),
            "the polling thread's mode is restored after the poll"
        );
        let fut = std::thread::spawn(move || {
            let mut fut = fut;
            assert!(fut
                .as_mut()
                .poll(&mut Context::from_waker(waker))
                .is_pending());
            assert!(is_grad_enabled());
            fut
        })
        .join()
        .unwrap();
        let mut fut = fut;
        let Poll::Ready((threads, grad)) = fut.as_mut().poll(&mut Context::from_waker(waker))
        else {
            panic!("probe should finish on its third poll");
        };
        assert_ne!(threads[0], threads[1]);
        assert_eq!(grad, vec![false; 3]);
    }

    #[test]
    fn future_adapter_on_a_multi_thread_executor() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .build()
            .unwrap();
        runtime.block_on(async {
            let slot: WakerSlot = Arc::default();
            let done = Arc::new(AtomicBool::new(false));
            // The waker runs on a plain thread: each wake-up goes through the runtime's shared
            // queue to whichever worker is free, so the probe hops between workers.
            let waker_thread = {
                let (slot, done) = (Arc::clone(&slot), Arc::clone(&done));
                std::thread::spawn(move || {
                    while !done.load(Ordering::Acquire) {
                        let waker = slot.lock().unwrap().take();
                        if let Some(w) = waker {
                            w.wake();
                        }
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                })
            };
            // Tasks without the adapter see the worker thread's own mode.
            let plain = tokio::spawn(async { is_grad_enabled() });
            assert!(plain.await.unwrap());
            let probe = tokio::spawn(no_grad_future(Probe {
                remaining: 500,
                threads: Vec::new(),
                grad_seen: Vec::new(),
                slot: Some(Arc::clone(&slot)),
            }));
            let (threads, grad) = probe.await.unwrap();
            done.store(true, Ordering::Release);
            waker_thread.join().unwrap();
            let mut distinct: Vec<String> = threads.iter().map(|t| format!("{t:?}")).collect();
            distinct.sort();
            distinct.dedup();
            assert!(distinct.len() > 1, "the task never moved threads");
            assert!(grad.iter().all(|&g| !g), "grad mode leaked into a poll");
        });
    }
}
