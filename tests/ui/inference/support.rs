//! Shared by the `#[inference]` pass cases, the equivalence tests and the edition-2024 crate:
//! a value that logs its drop, a step logger, and the equivalence check.
//!
//! Names starting with `_` or `keep` are *anchors*: guards and kept values, whose drops must
//! stay exactly where they were. Every other drop may only move earlier.
#![allow(dead_code)]

use std::cell::RefCell;
use std::fmt;

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// A value that logs its drop.
#[derive(Debug, PartialEq)]
pub struct T {
    pub name: &'static str,
    pub v: i64,
}

// Stands for a tensor: the attributes may free it at its last use. Its drop logs, which is
// how the tests see where that happens; the guards and kept values among the `T`s are told
// apart by name (see `is_anchor`), and values of other types by their own logs.
impl vramguard::DropAtLastUse for T {}

impl Drop for T {
    fn drop(&mut self) {
        LOG.with(|l| l.borrow_mut().push(format!("drop {}", self.name)));
    }
}

impl fmt::Display for T {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.v)
    }
}

impl T {
    /// An owned result, but by a name that is a view of the receiver in some libraries
    /// (`forward` returning `Prediction<'_>`): the transform keeps the receiver alive while
    /// the result lives.
    pub fn forward(&self, other: &T) -> T {
        mk("fwd", self.v + other.v)
    }
    /// An owned result, by a name the built-in lists know as owned (a tensor op).
    pub fn matmul(&self, other: &T) -> T {
        mk("mm", self.v * other.v)
    }
    /// Borrows `self` (like `dims()`).
    pub fn dims(&self) -> &i64 {
        &self.v
    }
    /// A method the lists do not know, returning an owned value.
    pub fn scaled(&self, k: i64) -> T {
        mk("scaled", self.v * k)
    }
    /// A method the lists do not know, borrowing `self`.
    pub fn peek_name(&self) -> &str {
        self.name
    }
    /// Consumes `self`.
    /// A value named like a size (`elem_count`, a number in candle), but a `T`: the transform
    /// takes it for a number and keeps it to its scope end, which changes nothing else.
    pub fn elem_count(&self) -> T {
        mk("count", self.v * 10)
    }

    pub fn into_value(self) -> i64 {
        self.v
    }
}

impl std::ops::Add<&T> for &T {
    type Output = T;
    fn add(self, rhs: &T) -> T {
        mk("sum", self.v + rhs.v)
    }
}

impl std::ops::Add<&T> for T {
    type Output = T;
    fn add(self, rhs: &T) -> T {
        mk("sum", self.v + rhs.v)
    }
}

/// A module-like helper whose methods take `&self` and `&T` (lifetime elision ties their
/// results to `self`, so the transform knows they do not borrow the argument).
pub struct Net;

impl Net {
    /// A fallible step returning an owned value.
    pub fn step(&self, t: &T, fail: bool) -> Result<T, String> {
        if fail {
            Err(format!("failed on {}", t.name))
        } else {
            Ok(mk("ok", t.v + 1))
        }
    }
}

/// A new logging value.
pub fn mk(name: &'static str, v: i64) -> T {
    T { name, v }
}

/// Consumes a value (it is dropped inside) and returns a new one named `name`.
pub fn consume(t: T, name: &'static str) -> T {
    mk(name, t.v + 1)
}

/// Logs a step (an anchor).
pub fn step(name: &str) {
    LOG.with(|l| l.borrow_mut().push(format!("step {name}")));
}

/// Logs the drop of a value named `name` (for types defined elsewhere).
pub fn step_drop(name: &str) {
    LOG.with(|l| l.borrow_mut().push(format!("drop {name}")));
}

/// A guard that logs when it ends (an anchor: its name starts with `_`).
pub fn guard(name: &'static str) -> T {
    mk(name, 0)
}

fn take_log() -> Vec<String> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

fn is_anchor(event: &str) -> bool {
    match event.strip_prefix("drop ") {
        Some(name) => name.starts_with('_') || name.starts_with("keep"),
        None => true,
    }
}

/// How the two runs compared.
#[derive(Debug)]
pub struct Comparison {
    /// Non-anchor drops that happened strictly earlier with the attribute.
    pub earlier: usize,
    pub without: Vec<String>,
    pub with: Vec<String>,
}

/// Runs both versions and checks: equal results; the same events; anchors (steps, guards,
/// kept values) in the same order; every other drop no later (counted in anchors passed)
/// with the attribute than without.
pub fn compare<R: PartialEq + fmt::Debug>(
    name: &str,
    without: impl FnOnce() -> R,
    with: impl FnOnce() -> R,
) -> Comparison {
    take_log();
    let expected = without();
    let without_log = take_log();
    let actual = with();
    let with_log = take_log();
    assert_eq!(expected, actual, "{name}: results differ");
    let mut sorted_a = without_log.clone();
    let mut sorted_b = with_log.clone();
    sorted_a.sort();
    sorted_b.sort();
    assert_eq!(
        sorted_a, sorted_b,
        "{name}: different events\nwithout: {without_log:?}\nwith:    {with_log:?}"
    );
    let anchors = |log: &[String]| {
        log.iter()
            .filter(|e| is_anchor(e))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        anchors(&without_log),
        anchors(&with_log),
        "{name}: guards, kept values or steps moved\nwithout: {without_log:?}\nwith:    {with_log:?}"
    );
    // Position of each non-anchor drop = anchors before it (k-th occurrence of equal events).
    let positions = |log: &[String]| {
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let mut passed = 0;
        let mut out = Vec::new();
        for event in log {
            if is_anchor(event) {
                passed += 1;
            } else {
                let k = seen.entry(event.clone()).or_default();
                out.push(((event.clone(), *k), passed));
                *k += 1;
            }
        }
        out.sort();
        out
    };
    let (a, b) = (positions(&without_log), positions(&with_log));
    let mut earlier = 0;
    for ((event, pa), (_, pb)) in a.iter().zip(&b) {
        assert!(
            pb <= pa,
            "{name}: `{}` dropped later with the attribute\nwithout: {without_log:?}\nwith:    {with_log:?}",
            event.0
        );
        if pb < pa {
            earlier += 1;
        }
    }
    Comparison {
        earlier,
        without: without_log,
        with: with_log,
    }
}

/// `check!(f(args))`: both versions equivalent. `check!(f(args) => earlier)`: and at least one
/// drop strictly earlier with the attribute. Both `with::` and `without::` must define `f`.
#[allow(unused_macros)]
macro_rules! check {
    ($f:ident ( $($arg:expr),* )) => {
        support::compare(stringify!($f), || without::$f($($arg),*), || with::$f($($arg),*))
    };
    ($f:ident ( $($arg:expr),* ) => earlier) => {{
        let c = support::compare(stringify!($f), || without::$f($($arg),*), || with::$f($($arg),*));
        assert!(c.earlier > 0, "{}: nothing was dropped earlier\n{:?}", stringify!($f), c);
        c
    }};
}

/// Polls a future that never waits to completion (enough for `async fn` tests).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
    }
}
