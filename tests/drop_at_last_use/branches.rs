//! Drops inside branches (issue #19, point 2): a value whose last use is inside one branch of
//! an `if`, `match`, `else if` chain or `let … else` is freed inside that branch at its last
//! use, and in the other branches at their start, under `#[inference]` (also on an `async fn`)
//! and `#[batch_scope]`.
//!
//! Each shape is one program stamped `with` and `without` the attributes (as in
//! `contract.rs`); the run with the attribute passes the contract's comparison (same
//! results, every other event in place, `free`s only earlier), and its whole event log is
//! asserted: each `free` sits where the branch that ran last used the value, or at the start of a
//! branch that does not use it, never later (a drop after the whole `if`/`match` would put it
//! after the branch's own events).

use crate::support::{block_on, compare};

macro_rules! cases {
    ($($inference:meta, $batch:meta)?) => {
        #[allow(unused_imports)]
        use crate::support::{eat, ev, pending_once, Mem};

        /// Fails with `Err` when asked to: a `?` inside a branch.
        pub fn checked(n: usize, fail: bool) -> Result<usize, String> {
            if fail {
                Err(format!("failed at {n}"))
            } else {
                Ok(n)
            }
        }

        // ---- nested branches, the inner one the outer's value ------------------------------

        $(#[$inference])?
        pub fn nested(outer: bool, inner: bool) -> usize {
            let a = Mem::new("a", 4);
            let n = if outer {
                if inner {
                    let k = a.len();
                    ev("inner then");
                    k
                } else {
                    ev("inner else");
                    1
                }
            } else {
                ev("outer else");
                2
            };
            ev("after");
            n
        }

        // ---- an `else if` chain, the value used in the middle branch ----------------------

        $(#[$inference])?
        pub fn else_if(k: usize) -> usize {
            let a = Mem::new("a", 4);
            let b = Mem::new("b", 2);
            let n = if k == 0 {
                ev("first");
                0
            } else if k == 1 {
                let n = a.len() + b.len();
                ev("second");
                n
            } else {
                ev("third");
                b.len()
            };
            ev("after");
            n
        }

        // ---- a guard that uses the value: never dropped inside a guard --------------------

        $(#[$inference])?
        pub fn guards(k: usize) -> usize {
            let a = Mem::new("a", 4);
            let r = match k {
                0 if a.len() > 10 => {
                    ev("guarded");
                    0
                }
                0 | 1 => {
                    let n = a.len();
                    ev("second arm");
                    n
                }
                _ => {
                    ev("last arm");
                    2
                }
            };
            ev("after");
            r
        }

        // ---- `?` inside a branch -----------------------------------------------------------

        $(#[$inference])?
        pub fn question(take: bool, fail: bool) -> Result<usize, String> {
            let a = Mem::new("a", 4);
            let r = if take {
                let n = checked(a.len(), fail)?;
                ev("then");
                n
            } else {
                ev("else");
                0
            };
            ev("after");
            Ok(r)
        }

        // ---- a loop inside a branch: dropped after the loop, never inside it --------------

        $(#[$inference])?
        pub fn loop_in_branch(take: bool) -> usize {
            let a = Mem::new("a", 4);
            let mut total = 0;
            if take {
                for i in 0..2 {
                    total += a.len() + i;
                    ev(format!("iter {i}"));
                }
                ev("then");
            } else {
                ev("else");
            }
            ev("after");
            total
        }

        // ---- a loop's own value, dropped inside a branch of its body ----------------------

        $(#[$inference])?
        pub fn branch_in_loop() -> usize {
            let mut total = 0;
            for i in 0..3 {
                let b = Mem::new(format!("b{i}"), 2);
                if i % 2 == 0 {
                    let n = b.len();
                    ev(format!("even {i}"));
                    total += n;
                } else {
                    ev(format!("odd {i}"));
                }
                ev(format!("end {i}"));
            }
            total
        }

        // ---- moved in one branch, dropped at the start of the other -----------------------

        $(#[$inference])?
        pub fn moved_in_one(take: bool) -> usize {
            let a = Mem::new("a", 4);
            let n = if take {
                let m = eat(a, "m");
                ev("then");
                m.len()
            } else {
                ev("else");
                0
            };
            ev("after");
            n
        }

        // ---- last used in the condition: dropped at the start of every branch -------------

        $(#[$inference])?
        pub fn condition_last(limit: usize) -> usize {
            let a = Mem::new("a", 4);
            if a.len() > limit {
                ev("bigger");
                1
            } else {
                ev("smaller");
                0
            }
        }

        // ---- the branch's value is the value's last use (moved in, value unchanged) -------

        $(#[$inference])?
        pub fn tail_value(take: bool) -> usize {
            let a = Mem::new("a", 4);
            let m = if take {
                ev("then");
                a.gelu()
            } else {
                ev("else");
                Mem::new("e", 1)
            };
            ev("after");
            m.len()
        }

        // ---- no `else`: one is added to drop there -----------------------------------------

        $(#[$inference])?
        pub fn no_else(take: bool) -> usize {
            let a = Mem::new("a", 4);
            let mut n = 0;
            if take {
                n = a.len();
                ev("then");
            }
            ev("after");
            n
        }

        // ---- `let … else`: the `else` diverges, so the value is dead after the statement ---

        $(#[$inference])?
        pub fn let_else(input: Option<usize>) -> usize {
            let a = Mem::new("a", 4);
            let Some(v) = input else {
                return a.len();
            };
            ev("after let");
            v
        }

        // ---- `#[batch_scope]`: the iteration's value, dropped inside a branch --------------

        $(#[$batch])?
        pub fn scope_branches(n: usize) -> usize {
            let mut total = 0;
            for i in 0..n {
                let b = Mem::new(format!("b{i}"), 2);
                let r = match i % 3 {
                    0 => {
                        let k = b.len();
                        ev(format!("zero {i}"));
                        k
                    }
                    1 if b.len() > 1 => {
                        ev(format!("one {i}"));
                        1
                    }
                    _ => {
                        ev(format!("two {i}"));
                        0
                    }
                };
                total += r;
            }
            total
        }

        // ---- `async fn`: a branch that awaits ------------------------------------------------

        $(#[$inference])?
        pub async fn branches_async(take: bool) -> usize {
            let a = Mem::new("a", 4);
            let n = if take {
                let k = a.len();
                pending_once().await;
                ev("then");
                k
            } else {
                ev("else");
                pending_once().await;
                0
            };
            ev("after");
            n
        }
    };
}

mod with {
    cases!(vramguard::inference, vramguard::batch_scope);
}

mod without {
    cases!();
}

/// Runs `f(args)` without and with the attributes, checks the contract, and asserts the log
/// of the run with them.
macro_rules! check {
    ($f:ident ( $($arg:expr),* ) => $expected:expr) => {{
        let outcome = compare(
            stringify!($f),
            || without::$f($($arg),*),
            || with::$f($($arg),*),
        );
        assert_eq!(outcome.with, $expected, "{}({:?})", stringify!($f), ($($arg,)*));
    }};
    (async $f:ident ( $($arg:expr),* ) => $expected:expr) => {{
        let outcome = compare(
            stringify!($f),
            || block_on(without::$f($($arg),*)),
            || block_on(with::$f($($arg),*)),
        );
        assert_eq!(outcome.with, $expected, "{}({:?})", stringify!($f), ($($arg,)*));
    }};
}

#[test]
fn nested_branches_drop_in_the_branch_that_ran() {
    check!(nested(true, true) => ["free a", "inner then", "after"]);
    check!(nested(true, false) => ["free a", "inner else", "after"]);
    check!(nested(false, true) => ["free a", "outer else", "after"]);
}

#[test]
fn an_else_if_chain_drops_in_each_link() {
    // Both dead in the first branch: latest declaration first, as at a scope end.
    check!(else_if(0) => ["free b", "free a", "first", "after"]);
    check!(else_if(1) => ["free b", "free a", "second", "after"]);
    check!(else_if(2) => ["free a", "third", "free b", "after"]);
}

#[test]
fn a_guard_is_never_where_a_value_dies() {
    // `k == 0`: the guard runs, fails, and the next arm's body drops `a`.
    check!(guards(0) => ["free a", "second arm", "after"]);
    check!(guards(1) => ["free a", "second arm", "after"]);
    check!(guards(2) => ["free a", "last arm", "after"]);
}

#[test]
fn a_question_mark_inside_a_branch() {
    check!(question(true, false) => [
        "free a", "then", "after"
    ]);
    check!(question(true, true) => ["free a"]);
    check!(question(false, false) => ["free a", "else", "after"]);
}

#[test]
fn a_loop_inside_a_branch_keeps_the_value_to_its_end() {
    check!(loop_in_branch(true) => ["iter 0", "iter 1", "free a", "then", "after"]);
    check!(loop_in_branch(false) => ["free a", "else", "after"]);
    check!(branch_in_loop() => [
        "free b0", "even 0", "end 0",
        "free b1", "odd 1", "end 1",
        "free b2", "even 2", "end 2",
    ]);
}

#[test]
fn a_value_moved_in_one_branch_is_dropped_in_the_other() {
    // `eat` frees `a` inside the call: the move is the drop.
    check!(moved_in_one(true) => ["free a", "then", "free m", "after"]);
    check!(moved_in_one(false) => ["free a", "else", "after"]);
}

#[test]
fn a_value_last_used_in_the_condition_dies_at_every_branch_start() {
    check!(condition_last(2) => ["free a", "bigger"]);
    check!(condition_last(8) => ["free a", "smaller"]);
}

#[test]
fn a_branch_value_is_unchanged_by_the_drop() {
    check!(tail_value(true) => ["then", "gelu a", "free a", "after", "free gelu(a)"]);
    check!(tail_value(false) => ["free a", "else", "after", "free e"]);
    assert_eq!(with::tail_value(true), 4);
    assert_eq!(with::tail_value(false), 1);
}

#[test]
fn an_if_without_else_gets_one() {
    check!(no_else(true) => ["free a", "then", "after"]);
    check!(no_else(false) => ["free a", "after"]);
}

#[test]
fn let_else_drops_after_the_statement() {
    check!(let_else(Some(3)) => ["free a", "after let"]);
    check!(let_else(None::<usize>) => ["free a"]);
}

#[test]
fn batch_scope_drops_inside_an_iteration_s_branches() {
    check!(scope_branches(3) => [
        "free b0", "zero 0",
        "free b1", "one 1",
        "free b2", "two 2",
    ]);
}

#[test]
fn async_fn_drops_inside_a_branch_across_an_await() {
    check!(async branches_async(true) => ["free a", "pending", "poll 1", "then", "after"]);
    check!(async branches_async(false) => ["free a", "else", "pending", "poll 1", "after"]);
}
