//! Code that compiles only under edition 2024's rules, annotated: the rewrite must keep them.
use std::cell::RefCell;

/// A tail temporary borrowing a local: edition 2024 drops it before the local.
#[vramguard::inference]
fn tail_temporary() -> usize {
    let cell = RefCell::new(vec![1, 2, 3]);
    cell.borrow().len()
}

/// The same in an `async fn`.
#[vramguard::inference]
async fn tail_temporary_async() -> usize {
    let cell = RefCell::new(vec![1, 2]);
    cell.borrow().len()
}

/// The same in a scoped loop body's tail and the function's tail.
#[vramguard::batch_scope]
fn tail_temporary_in_loop() -> usize {
    let mut total = 0;
    for i in 0..3 {
        let cell = RefCell::new(vec![i; 2]);
        total += {
            let inner = RefCell::new(1);
            *inner.borrow()
        };
        total += cell.borrow().len();
    }
    let last = RefCell::new(total);
    *last.borrow()
}

/// A scoped loop body whose tail locks a body-local `Mutex`: the body keeps its own braces, so
/// edition 2024 drops the guard before the `Mutex` (issue #43; the macro's braces were edition
/// 2021's, which keep a tail temporary past the block's locals).
#[vramguard::batch_scope]
fn tail_lock_in_scoped_loop(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let m = std::sync::Mutex::new(vec![i]);
        let a = vec![1.0f32; 4];
        total += a.len();
        m.lock().unwrap().push(i)
    }
    total
}

/// The same under `#[inference]`, in the loop body and the function's tail.
#[vramguard::inference]
fn tail_lock_in_loop(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let m = std::sync::Mutex::new(vec![i]);
        let a = vec![1.0f32; 4];
        total += a.len();
        m.lock().unwrap().push(i)
    }
    let last = std::sync::Mutex::new(vec![total]);
    last.lock().unwrap().len() + total
}

/// A loop inside an inline `const` block.
#[vramguard::inference]
fn loop_in_const_block() -> usize {
    let n = const {
        let mut i = 0;
        let mut acc = 0;
        while i < 4 {
            acc += i;
            i += 1;
        }
        acc
    };
    let v: Vec<usize> = (0..n).collect();
    v.len() + 2
}

/// An `async fn` that never returns.
#[vramguard::inference]
#[allow(unreachable_code)]
async fn never_returns() -> ! {
    let v = vec![1u8];
    drop(v);
    loop {
        std::hint::spin_loop();
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
    }
}

#[test]
fn edition_2024_rules_hold_under_the_attribute() {
    assert_eq!(tail_temporary(), 3);
    assert_eq!(block_on(tail_temporary_async()), 2);
    assert_eq!(tail_temporary_in_loop(), 9);
    assert_eq!(tail_lock_in_scoped_loop(3), 12);
    assert_eq!(tail_lock_in_loop(3), 13);
    assert_eq!(loop_in_const_block(), 8);
    // Only that it compiles: polling it would spin forever.
    let _never = never_returns();
}
