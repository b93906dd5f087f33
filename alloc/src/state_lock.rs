//! The lock around an allocator's state: taken at every allocation and every free, held for
//! tens of nanoseconds on the cached path.
//!
//! `std::sync::Mutex` releases with an atomic swap, to learn whether a thread sleeps on the
//! lock and must be woken. Here the release is a plain store (on x86, an ordinary `mov`), which
//! saves one atomic read-modify-write per lock, two per cached pair (measured in
//! `docs/perf-notes.md`, "The lock and the trace's stamps"). The price is that a waiting thread
//! is never woken: it spins, then yields, then sleeps in steps that grow to [`LONGEST_SLEEP`],
//! checking the lock between steps. The allocator holds the lock for more than a few
//! microseconds only on its slow paths (a new segment from the driver, waiting for another
//! stream's work, an out-of-memory report), where a waiter's extra delay of at most one sleep
//! step is small beside the driver call it waited for.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Spins (each doubling the pause) before a waiting thread yields its core.
const SPINS: u32 = 7;
/// Yields before a waiting thread starts to sleep.
const YIELDS: u32 = 16;
/// The first sleep of a waiting thread; each next one doubles, up to [`LONGEST_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(20);
/// The longest a waiting thread sleeps between two looks at the lock: the most a release can
/// go unnoticed.
const LONGEST_SLEEP: Duration = Duration::from_micros(500);

/// Mutual exclusion over a `T`, released by a plain store (see the module documentation).
/// A panic while the lock is held releases it and poisons nothing, as the allocator treated
/// `std::sync::Mutex`'s poisoning before: its state is kept consistent at every point where
/// the lock is released.
#[doc(hidden)]
pub struct StateLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a `StateGuard`, and `locked` lets at most one guard
// exist at a time (acquired by a compare-exchange with `Acquire`, released with `Release`, so
// each holder sees every write of the one before). Sharing the lock therefore hands `T` from
// thread to thread, which needs `T: Send` and nothing more, as for `std::sync::Mutex`.
unsafe impl<T: Send> Sync for StateLock<T> {}

impl<T> StateLock<T> {
    #[doc(hidden)]
    pub fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, waiting (spinning, yielding, then sleeping) while another thread holds it.
    #[inline]
    #[doc(hidden)]
    pub fn lock(&self) -> StateGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        StateGuard {
            lock: self,
            not_shared: PhantomData,
        }
    }

    /// [`Self::lock`] once the first try failed: out of line, so the uncontended path is short.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut attempt = 0u32;
        loop {
            // Test before test-and-set: waiters read the lock's cache line without taking it
            // from the holder until it looks free.
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            if attempt < SPINS {
                for _ in 0..(1u32 << attempt) {
                    std::hint::spin_loop();
                }
            } else if attempt < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                let doublings = (attempt - SPINS - YIELDS).min(8);
                std::thread::sleep((FIRST_SLEEP * (1u32 << doublings)).min(LONGEST_SLEEP));
            }
            attempt = attempt.saturating_add(1);
        }
    }

    /// The value, through exclusive access to the lock (no locking needed).
    #[doc(hidden)]
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// Access to a [`StateLock`]'s value while the lock is held; dropping it releases the lock.
#[doc(hidden)]
pub struct StateGuard<'a, T> {
    lock: &'a StateLock<T>,
    /// Neither `Send` nor `Sync`, as `std::sync::MutexGuard`: a guard shared between threads
    /// would hand out `&T` to several at once, which only `T: Sync` allows.
    not_shared: PhantomData<*const ()>,
}

impl<T> StateGuard<'_, T> {
    /// Runs `f` with the lock released, and takes it again before returning, also when `f`
    /// panics: the guard holds the lock at every point where it can be used or dropped.
    #[doc(hidden)]
    pub fn unlocked<R>(guard: &mut Self, f: impl FnOnce() -> R) -> R {
        struct Relock<'b, T>(&'b StateLock<T>);
        impl<T> Drop for Relock<'_, T> {
            fn drop(&mut self) {
                // Held on behalf of the outer guard, which releases it when dropped.
                std::mem::forget(self.0.lock());
            }
        }
        guard.lock.locked.store(false, Ordering::Release);
        let _relock = Relock(guard.lock);
        f()
    }
}

impl<T> Deref for StateGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard exists only while `locked` is held by it (see `StateLock`'s `Sync`),
        // so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for StateGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the guard's only live borrow.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for StateGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::{StateGuard, StateLock};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn threads_taking_the_lock_never_lose_an_update() {
        let counter = Arc::new(StateLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    for _ in 0..50_000 {
                        // A read and a write apart: a second holder between them loses an update.
                        let mut value = counter.lock();
                        let read = *value;
                        std::hint::black_box(&mut *value);
                        *value = read + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("counting thread");
        }
        assert_eq!(*counter.lock(), 200_000);
    }

    #[test]
    fn a_panic_while_holding_the_lock_releases_it() {
        let lock = Arc::new(StateLock::new(1u32));
        let held = Arc::clone(&lock);
        let panicked = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("while holding the state lock");
        })
        .join();
        assert!(panicked.is_err());
        *lock.lock() += 1;
        assert_eq!(*lock.lock(), 2);
    }

    #[test]
    fn a_waiter_gets_the_lock_only_after_a_long_hold_ends() {
        let lock = Arc::new(StateLock::new(()));
        let released = Arc::new(AtomicBool::new(false));
        let guard = lock.lock();
        let waiter = {
            let (lock, released) = (Arc::clone(&lock), Arc::clone(&released));
            std::thread::spawn(move || {
                let _guard = lock.lock();
                released.load(Ordering::SeqCst)
            })
        };
        // Long enough for the waiter to have reached its sleeping steps.
        std::thread::sleep(std::time::Duration::from_millis(20));
        released.store(true, Ordering::SeqCst);
        drop(guard);
        assert!(
            waiter.join().expect("waiting thread"),
            "the waiter took the lock while it was held"
        );
    }

    #[test]
    fn unlocked_lets_another_thread_in_and_holds_the_lock_again_after() {
        let lock = Arc::new(StateLock::new(0u32));
        let mut guard = lock.lock();
        *guard = 1;
        // Another thread takes the lock while it is released: it would wait forever otherwise.
        let seen = StateGuard::unlocked(&mut guard, || {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                let mut value = lock.lock();
                *value += 10;
                *value
            })
            .join()
            .expect("thread inside unlocked")
        });
        assert_eq!(seen, 11);
        assert_eq!(*guard, 11);
        assert!(
            lock.locked.load(Ordering::Relaxed),
            "held again after unlocked"
        );
        drop(guard);
        assert!(!lock.locked.load(Ordering::Relaxed));
    }

    #[test]
    fn a_panic_inside_unlocked_never_releases_a_lock_another_thread_holds() {
        let lock = Arc::new(StateLock::new(()));
        let (taken_tx, taken_rx) = std::sync::mpsc::channel();
        let (unwound_tx, unwound_rx) = std::sync::mpsc::channel::<()>();
        let mut other = None;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut guard = lock.lock();
            StateGuard::unlocked(&mut guard, || {
                let held = Arc::clone(&lock);
                other = Some(std::thread::spawn(move || {
                    let _guard = held.lock();
                    taken_tx.send(()).expect("signal");
                    // Held until the panicking thread has unwound, or, when it waits for this
                    // lock as it should, for a while.
                    let _ = unwound_rx.recv_timeout(std::time::Duration::from_millis(300));
                    // Still ours: the panicking thread's guard must not have released it.
                    held.locked.load(Ordering::Relaxed)
                }));
                taken_rx.recv().expect("the other thread took the lock");
                panic!("inside unlocked, while another thread holds the lock");
            });
        }));
        assert!(caught.is_err());
        let _ = unwound_tx.send(());
        let other = other.expect("thread started").join().expect("other thread");
        assert!(other, "the lock was released under the thread holding it");
        assert!(
            !lock.locked.load(Ordering::Relaxed),
            "released by the guard's drop"
        );
    }
}
