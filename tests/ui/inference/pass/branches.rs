//! Drops inside branches: every shape of `if`/`match`/`else if`/`if let`/`let … else` whose
//! branches drop a value at their own last use or at their start, compiled with
//! `#![deny(warnings)]` (no unused `mut`, no unreachable code) and run against the plain code.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// An early `return Err(..)`, as candle's and anyhow's `bail!`.
macro_rules! bail {
    ($($message:tt)*) => {
        return Err(format!($($message)*))
    };
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{consume, mk, step, Net, T};

        /// Nested branches, the inner `if` the outer branch's value.
        $(#[$attr])?
        pub fn nested(outer: bool, inner: bool) -> i64 {
            let a = mk("a", 3);
            let n = if outer {
                if inner {
                    let k = a.v;
                    step("inner");
                    k
                } else {
                    step("inner else");
                    1
                }
            } else {
                step("outer else");
                2
            };
            step("after");
            n
        }

        /// An `else if` chain; a value used in the last link's tail.
        $(#[$attr])?
        pub fn else_if(k: i64) -> i64 {
            let a = mk("a", 3);
            let b = mk("b", 4);
            let n = if k == 0 {
                step("first");
                0
            } else if k == 1 {
                let n = a.v + b.v;
                step("second");
                n
            } else {
                step("third");
                b.v
            };
            step("after");
            n
        }

        /// Guards use the value; an arm body that is no block; a value used in a guard only.
        $(#[$attr])?
        pub fn guards(k: i64) -> i64 {
            let a = mk("a", 3);
            let g = mk("g", 1);
            let r = match k {
                0 if g.v > 5 => 10,
                0 | 1 if a.v > 1 => {
                    let n = a.v;
                    step("arm");
                    n
                }
                2 => a.v + 1,
                _ => {
                    step("last");
                    0
                }
            };
            step("after");
            r
        }

        /// `?` inside a branch, and an early `return` from one.
        $(#[$attr])?
        pub fn question(net: &Net, fail: bool, early: bool) -> Result<i64, String> {
            let a = mk("a", 1);
            let r = if !early {
                let b = net.step(&a, fail)?;
                step("stepped");
                b.v
            } else {
                step("early");
                return Ok(a.v);
            };
            step("after");
            Ok(r)
        }

        /// Loops inside a branch (the value outlives the loop), and a loop's own value
        /// dropped inside a branch of its body; `break` and `continue` in branches.
        $(#[$attr])?
        pub fn loops(take: bool) -> i64 {
            let a = mk("a", 2);
            let mut total = 0;
            if take {
                for i in 0..3 {
                    total += a.v + i;
                }
                step("looped");
            } else {
                step("no loop");
            }
            for i in 0..4 {
                let b = mk("b", i);
                if i == 1 {
                    step("continue");
                    continue;
                } else if i == 3 {
                    total += b.v;
                    break;
                }
                let c = mk("c", b.v * 2);
                if c.v > 2 {
                    total += b.v;
                    step("big");
                } else {
                    step("small");
                }
                step("iter end");
            }
            total
        }

        /// Moved in one branch; a `mut` value changed in one branch.
        $(#[$attr])?
        pub fn moved_and_mut(take: bool) -> i64 {
            let a = mk("a", 5);
            let mut m = mk("m", 1);
            let n = if take {
                let c = consume(a, "c");
                m.v += 1;
                step("took");
                c.v + m.v
            } else {
                step("left");
                0
            };
            step("after");
            n
        }

        /// Last use in an `if` condition, a `match` scrutinee, or an `if let` scrutinee.
        $(#[$attr])?
        pub fn conditions(k: i64) -> i64 {
            let a = mk("a", 3);
            let b = mk("b", 4);
            let c = mk("c", 5);
            let x = if a.v > k {
                step("bigger");
                1
            } else {
                step("smaller");
                0
            };
            let y = match b.v - k {
                0 => 7,
                n => {
                    step("n");
                    n
                }
            };
            let z = if let Some(v) = Some(c.v).filter(|v| *v > k) {
                step("some");
                v
            } else {
                step("none");
                0
            };
            step("after");
            x + y + z
        }

        /// The branch's value is the value's last use: moved in, or bound and dropped.
        $(#[$attr])?
        pub fn tails(take: bool) -> i64 {
            let a = mk("a", 3);
            let b = mk("b", 2);
            let s = if take {
                step("then");
                a.scaled(2)
            } else {
                mk("e", 1)
            };
            let n = match take {
                true => *b.dims(),
                false => 0,
            };
            step("after");
            s.v + n
        }

        /// No `else` (one is added), and an `if` that is the function's value.
        $(#[$attr])?
        pub fn no_else(take: bool) -> i64 {
            let a = mk("a", 3);
            let b = mk("b", 4);
            let mut n = 0;
            if take {
                n = a.v;
                step("then");
            }
            if n > 0 {
                let k = b.v;
                step("positive");
                k
            } else {
                step("zero");
                n
            }
        }

        /// `let … else` whose `else` uses the value, and a shadowing inside a branch.
        $(#[$attr])?
        pub fn let_else_and_shadow(input: Option<i64>) -> i64 {
            let a = mk("a", 3);
            let Some(v) = input else {
                return a.v;
            };
            step("after let");
            let b = mk("b", v);
            let r = if v > 1 {
                let b = mk("b2", b.v + 1);
                step("shadowed");
                b.v
            } else {
                step("plain");
                0
            };
            step("after");
            r
        }

        /// A branch that ends in a macro that returns (`bail!`, as candle's and anyhow's):
        /// nothing is dropped after it (that would be unreachable code, a warning here).
        $(#[$attr])?
        pub fn bail_in_branch(fail: bool, early: bool) -> Result<i64, String> {
            let a = mk("a", 3);
            let b = mk("b", 4);
            if early {
                bail!("early {}", a.v);
            }
            if fail {
                bail!("failed at {}", b.v)
            }
            step("passed");
            Ok(a.v)
        }

        /// Branches that end in a `for` or `while` loop: a loop's value is `()`, so it holds
        /// nothing of `a`, and `a` is dropped at the start of the arm that does not use it.
        $(#[$attr])?
        pub fn loop_tails(mode: u8) -> i64 {
            let a = mk("a", 3);
            let mut n = 0;
            match mode {
                0 => {
                    for k in 0..a.into_value() {
                        n += k;
                    }
                }
                1 => {
                    while n < a.v {
                        n += 1;
                    }
                }
                _ => {
                    step("other");
                }
            }
            step("after");
            n
        }

        /// A closure and a borrow inside a branch.
        $(#[$attr])?
        pub fn closures_in_branch(take: bool) -> i64 {
            let a = mk("a", 3);
            let n = if take {
                let f = |k: i64| a.v * k;
                let r = &a;
                let n = f(2) + r.v;
                step("closure");
                n
            } else {
                step("none");
                0
            };
            step("after");
            n
        }

        /// `async fn`: branches that await.
        $(#[$attr])?
        pub async fn async_branches(take: bool) -> i64 {
            let a = mk("a", 3);
            let n = if take {
                let k = a.v;
                let b = async { mk("b", k) }.await;
                step("awaited");
                b.v
            } else {
                step("not awaited");
                0
            };
            step("after");
            n
        }
    };
}

mod with {
    cases!(vramguard::inference);
}

mod without {
    cases!();
}

pub fn main() {
    check!(nested(true, true) => earlier);
    check!(nested(true, false) => earlier);
    check!(nested(false, true) => earlier);
    check!(else_if(0) => earlier);
    check!(else_if(1) => earlier);
    check!(else_if(2) => earlier);
    check!(guards(0) => earlier);
    check!(guards(1) => earlier);
    check!(guards(2) => earlier);
    check!(guards(3) => earlier);
    check!(question(&support::Net, false, false) => earlier);
    check!(question(&support::Net, true, false));
    check!(question(&support::Net, false, true));
    check!(loops(true) => earlier);
    check!(loops(false) => earlier);
    check!(moved_and_mut(true) => earlier);
    check!(moved_and_mut(false) => earlier);
    check!(conditions(0) => earlier);
    check!(conditions(4) => earlier);
    check!(tails(true) => earlier);
    check!(tails(false) => earlier);
    check!(no_else(true) => earlier);
    check!(no_else(false) => earlier);
    check!(let_else_and_shadow(Some(3)) => earlier);
    check!(let_else_and_shadow(Some(1)) => earlier);
    check!(let_else_and_shadow(None));
    check!(bail_in_branch(false, false) => earlier);
    check!(bail_in_branch(true, false));
    check!(bail_in_branch(false, true));
    check!(loop_tails(0));
    check!(loop_tails(1));
    // Before the rule, the whole `match` was written twice and `a` died after it.
    let other = check!(loop_tails(2) => earlier);
    assert_eq!(other.with[..2], ["drop a", "step other"], "{other:?}");
    // A non-`move` closure may borrow `a` to the branch's end: kept, as before.
    check!(closures_in_branch(true));
    check!(closures_in_branch(false));
    let run = |take| {
        support::compare(
            "async_branches",
            || support::block_on(without::async_branches(take)),
            || support::block_on(with::async_branches(take)),
        )
    };
    assert!(run(true).earlier > 0);
    assert!(run(false).earlier > 0);
}
