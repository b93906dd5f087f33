//! Control flow: `?`, early return, loops with labels, branches, `match`, `if let`,
//! `let … else`, `while let`, closures.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{consume, guard, mk, step, Net, T};

        /// `?` chains and an early return.
        $(#[$attr])?
        pub fn question_mark(net: &Net, fail: bool) -> Result<i64, String> {
            let a = mk("a", 1);
            let b = net.step(&a, false)?;
            step("1");
            let c = net.step(&b, fail)?;
            step("2");
            if c.v > 100 {
                return Ok(0);
            }
            let d = net.step(&c, false)?;
            step("3");
            Ok(d.v)
        }

        /// A local declared outside a loop and used inside is freed after the loop.
        $(#[$attr])?
        pub fn outer_local_in_loop() -> i64 {
            let weights = mk("weights", 2);
            let mut total = 0;
            for i in 0..3 {
                let h = mk("h", i * weights.v);
                step("iter");
                let g = mk("g", h.v + 1);
                total += g.v;
            }
            step("after");
            total
        }

        /// `break`/`continue` with labels, `loop` with a value.
        $(#[$attr])?
        pub fn labels() -> i64 {
            let limit = mk("limit", 5);
            let mut count = 0;
            'outer: for i in 0..10 {
                let row = mk("row", i);
                for j in 0..10 {
                    let cell = mk("cell", row.v * j);
                    if cell.v > limit.v {
                        continue 'outer;
                    }
                    if i > 3 {
                        break 'outer;
                    }
                    count += 1;
                }
            }
            step("1");
            let found = loop {
                let probe = mk("probe", count);
                if probe.v >= 0 {
                    break probe.v;
                }
            };
            step("2");
            found
        }

        /// `if`/`else` and `match` on a config enum, with shadowing in the branches.
        $(#[$attr])?
        pub fn branches(kind: u8) -> i64 {
            let x = mk("x", 3);
            let y = if x.v > 2 { mk("big", x.v * 2) } else { mk("small", x.v) };
            step("1");
            let z = match kind {
                0 => mk("zero", y.v),
                1 => {
                    let t = mk("t", y.v + 1);
                    mk("one", t.v)
                }
                _ => mk("other", -y.v),
            };
            step("2");
            z.v
        }

        /// `if let`, `while let`, `let … else`.
        $(#[$attr])?
        pub fn pattern_control(values: Vec<i64>) -> i64 {
            let list = values.into_iter().map(|v| mk("item", v)).collect::<Vec<T>>();
            let mut iter = list.into_iter();
            let Some(first) = iter.next() else {
                return -1;
            };
            step("1");
            let mut acc = mk("acc", first.v);
            while let Some(next) = iter.next() {
                acc = mk("acc", acc.v + next.v);
            }
            step("2");
            if let Some(bonus) = Some(mk("bonus", acc.v)) {
                step("bonus");
                return bonus.v;
            }
            0
        }

        /// Closures: `move` and non-`move`, capturing locals.
        $(#[$attr])?
        pub fn closures() -> i64 {
            let base = mk("base", 10);
            let add = |k: i64| base.v + k;
            let r = add(1) + add(2);
            step("1");
            let owned = mk("owned", 5);
            let consume = move || owned.v * 2;
            let s = consume();
            step("2");
            let scale = mk("scale", 3);
            let scaled: Vec<i64> = (0..3).map(|i| i * scale.v).collect();
            step("3");
            r + s + scaled.iter().sum::<i64>()
        }

        /// `let … else` whose `else` mentions a local, and a `match` that moves a field.
        $(#[$attr])?
        pub fn let_else_mentions(input: Option<i64>) -> i64 {
            let fallback = mk("fallback", 7);
            let Some(v) = input.map(|i| i + fallback.v) else {
                return fallback.v;
            };
            step("1");
            let pair = (mk("p0", v), mk("p1", 1));
            let picked = match pair {
                (a, b) if a.v > 0 => a.v + b.v,
                (_, b) => b.v,
            };
            step("2");
            picked
        }

        /// A local used inside a loop that no `break` leaves is never moved there unless the
        /// path diverges (`return`, a `-> !` call): it is dropped after the loop.
        $(#[$attr])?
        pub fn used_in_breakless_loop(stop_at: i64) -> i64 {
            fn never_returns() -> ! {
                panic!("not reached in these cases")
            }
            let w = mk("w", 3);
            let mut acc = 0;
            for i in 0..4 {
                if i == stop_at {
                    return consume(w, "returned").v;
                }
                if i == 100 {
                    let _moved = consume(w, "diverged");
                    never_returns();
                }
                acc += w.scaled(i).v;
            }
            let mut n = 0;
            while n < w.v + acc {
                n += 5;
            }
            step("after loops");
            acc + n
        }

        /// A loop a `break` leaves after moving the local: it may be moved there, so the loop
        /// statement is written twice and the type chooses.
        $(#[$attr])?
        pub fn moved_then_break(flag: bool) -> i64 {
            let w = mk("w", 5);
            let mut out = 0;
            for i in 0..3 {
                out += i;
                if flag {
                    out += consume(w, "consumed").v;
                    break;
                }
            }
            step("after loop");
            out
        }

        /// A value moved conditionally in one branch and not used afterwards.
        $(#[$attr])?
        pub fn conditional_move(flag: bool) -> i64 {
            let x = mk("x", 4);
            let kept = if flag { x.into_value() } else { 0 };
            step("1");
            let y = mk("y", kept);
            step("2");
            y.v
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
    check!(question_mark(&support::Net, false) => earlier);
    check!(question_mark(&support::Net, true) => earlier);
    check!(outer_local_in_loop() => earlier);
    check!(labels() => earlier);
    check!(branches(0) => earlier);
    check!(branches(1) => earlier);
    check!(branches(2) => earlier);
    check!(pattern_control(vec![1, 2, 3]) => earlier);
    check!(pattern_control(vec![]));
    // Closures are never `DropAtLastUse`: `owned`, moved into one, lives as long as it does.
    check!(closures());
    check!(let_else_mentions(Some(2)));
    check!(let_else_mentions(None));
    check!(conditional_move(true));
    check!(conditional_move(false) => earlier);
    check!(used_in_breakless_loop(2));
    check!(used_in_breakless_loop(10) => earlier);
    check!(moved_then_break(true));
    check!(moved_then_break(false) => earlier);
}
