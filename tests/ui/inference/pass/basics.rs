//! Straight-line code, shadowing, parameters, patterns, guards and the escape hatches.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{guard, mk, step, T};

        /// Moved by the statement itself on every path (issue #19, compile time): a consuming
        /// receiver ahead of closures, a `for` over a range, a value a closure takes; and a
        /// `match` whose value is a reference by one arm's syntax. None needs a second copy of
        /// its statement; the drops are those of the plain code.
        $(#[$attr])?
        pub fn moved_by_the_statement(flag: bool) -> i64 {
            let xs = vec![mk("x1", 1), mk("x2", 2)];
            let n = 3;
            let sum: i64 = xs
                .into_iter()
                .filter(|t| t.v > 0)
                .map(|t| {
                    let v = t.v;
                    step("mapped");
                    v
                })
                .sum();
            step("summed");
            let mut total = 0;
            for i in 0..n {
                if i > 0 {
                    total += i;
                }
            }
            let held = mk("held", 5);
            let take = move || held.v;
            step("closure made");
            let pair = [mk("p0", 7), mk("p1", 8)];
            let chosen = match flag {
                true => &pair[0],
                false => &pair[1],
            };
            let picked = chosen.v;
            step("picked");
            sum + total + take() + picked + pair.len() as i64
        }

        /// Straight line: each value dies after its last use.
        $(#[$attr])?
        pub fn straight(p: T) -> i64 {
            let a = mk("a", 1);
            let b = mk("b", a.v + p.v);
            step("1");
            let c = mk("c", b.v * 2);
            step("2");
            c.v + 1
        }

        /// Shadowing: `let x = f(&x)` frees the old `x` right there.
        $(#[$attr])?
        pub fn shadowing() -> i64 {
            let x = mk("x1", 1);
            let x = x.matmul(&x);
            step("1");
            let x = x.matmul(&x);
            step("2");
            x.v
        }

        /// `mut` bindings, reassignment, and a `let` with a type annotation.
        $(#[$attr])?
        pub fn mutable_and_annotated() -> i64 {
            let mut acc = mk("acc", 0);
            let extra: T = mk("extra", 5);
            acc.v += extra.v;
            step("1");
            let total: i64 = acc.v * 2;
            step("2");
            let parsed: Vec<i64> = "1 2 3".split(' ').map(|s| s.parse().unwrap_or(0)).collect();
            step("3");
            total + parsed.len() as i64
        }

        /// Numbers by their syntax (sizes, arithmetic on them, a `for` variable over a range
        /// of them, a primitive parameter) are never probed, in nested blocks too; a `T` whose
        /// method is named like a size is taken for a number and kept to its scope end.
        $(#[$attr])?
        pub fn numbers(x: T, heads: usize, eps: f64) -> i64 {
            let parts = vec![mk("p0", 1), mk("p1", 2)];
            let n = parts.len();
            let width = n * 2 + 1;
            let scale = (eps * 2.0).sqrt();
            let counted = x.elem_count();
            step("1");
            let mut total = 0;
            for h in 0..heads {
                let off = h * width;
                let t = mk("t", off as i64);
                total += t.v + (scale as i64);
                step("loop");
            }
            let rows = mk("rows", 3);
            step("2");
            total + rows.v + counted.v + parts[0].v
        }

        /// Tuple and struct patterns; a struct field moved out.
        $(#[$attr])?
        pub fn patterns() -> i64 {
            let (a, b) = (mk("a", 1), mk("b", 2));
            let pair = (mk("p0", 3), mk("p1", 4));
            let first = pair.0;
            step("1");
            let second = pair.1;
            let T { v, .. } = mk("destructured", 7);
            step("2");
            let sum = a.v + b.v + first.v + second.v + v;
            step("3");
            sum
        }

        /// By-value parameters, destructured parameters, `mut` parameters, reference params.
        $(#[$attr])?
        pub fn parameters(a: T, (b, c): (T, T), mut d: T, r: &T) -> i64 {
            d.v += a.v;
            step("1");
            let e = mk("e", b.v + c.v);
            step("2");
            let f = mk("f", d.v + r.v);
            step("3");
            e.v + f.v
        }

        /// Guards: `_`-prefixed, and bindings never used after their declaration.
        $(#[$attr])?
        pub fn guards() -> i64 {
            let _enter = guard("_enter");
            #[allow(unused_variables)]
            let lock = guard("_lock_like");
            let probe = mk("probe", 3);
            let _ = &probe;
            let x = mk("x", 1);
            step("1");
            let y = mk("y", x.v + 1);
            step("2");
            y.v
        }

        /// Nested blocks.
        $(#[$attr])?
        pub fn nested_blocks() -> i64 {
            let outer = mk("outer", 2);
            let inner_result = {
                let inner = mk("inner", outer.v * 3);
                step("in");
                let other = mk("other", 1);
                inner.v + other.v
            };
            step("1");
            let raw = [mk("r0", 1), mk("r1", 2)];
            let picked = raw[1].v;
            step("2");
            inner_result + picked
        }

        /// A function with an `unsafe` block gets the guard only: it keeps working unchanged.
        $(#[$attr])?
        pub fn unsafe_block() -> i64 {
            let keep_raw = [mk("keep_r0", 1), mk("keep_r1", 2)];
            // SAFETY: index 1 is in bounds.
            let picked = unsafe { keep_raw.get_unchecked(1).v };
            step("1");
            let keep_y = mk("keep_y", picked);
            step("2");
            keep_y.v + 1
        }

        /// Values whose last use is the tail expression gain nothing: left alone.
        $(#[$attr])?
        pub fn last_use_in_tail() -> i64 {
            let keep_a = mk("keep_a", 1);
            let keep_b = mk("keep_b", 2);
            step("1");
            keep_a.v + keep_b.v
        }
    };
}

mod with {
    cases!(vramguard::inference);

    use ::vramguard as vg;

    /// `crate = path`: the facade under another name.
    #[vg::inference(crate = vg)]
    pub fn renamed_facade() -> (i64, bool) {
        let a = mk("a", 1);
        let b = mk("b", a.v + 1);
        step("1");
        (b.v, vg::is_grad_enabled())
    }

    /// `crate = "path"` (string form, as serde accepts it).
    #[vramguard::inference(crate = "::vramguard")]
    pub fn renamed_facade_string() -> (i64, bool) {
        let a = mk("a", 1);
        let b = mk("b", a.v + 1);
        step("1");
        (b.v, vramguard::is_grad_enabled())
    }

    #[vramguard::inference(keep(keep_x))]
    pub fn keep_option() -> i64 {
        let keep_x = super::support::mk("keep_x", 4);
        let y = mk("y", keep_x.v);
        step("1");
        y.v
    }

    #[vramguard::inference(drops = false)]
    pub fn no_drops() -> i64 {
        let keep_a = mk("keep_a", 1);
        let keep_b = mk("keep_b", keep_a.v);
        step("1");
        keep_b.v
    }

    #[vramguard::inference]
    pub fn keep_marker() -> i64 {
        #[keep]
        let keep_m = mk("keep_m", 4);
        let y = mk("y", keep_m.v);
        step("1");
        y.v
    }
}

mod without {
    cases!();

    pub fn renamed_facade() -> (i64, bool) {
        let a = mk("a", 1);
        let b = mk("b", a.v + 1);
        step("1");
        (b.v, false)
    }

    pub fn renamed_facade_string() -> (i64, bool) {
        let a = mk("a", 1);
        let b = mk("b", a.v + 1);
        step("1");
        (b.v, false)
    }

    pub fn keep_option() -> i64 {
        let keep_x = super::support::mk("keep_x", 4);
        let y = mk("y", keep_x.v);
        step("1");
        y.v
    }

    pub fn no_drops() -> i64 {
        let keep_a = mk("keep_a", 1);
        let keep_b = mk("keep_b", keep_a.v);
        step("1");
        keep_b.v
    }

    pub fn keep_marker() -> i64 {
        let keep_m = mk("keep_m", 4);
        let y = mk("y", keep_m.v);
        step("1");
        y.v
    }
}

pub fn main() {
    use support::mk;
    check!(straight(mk("p", 1)) => earlier);
    check!(moved_by_the_statement(true));
    check!(moved_by_the_statement(false));
    check!(shadowing() => earlier);
    check!(mutable_and_annotated() => earlier);
    check!(patterns() => earlier);
    check!(numbers(mk("x", 2), 2, 2.0) => earlier);
    check!(parameters(mk("a", 1), (mk("b", 2), mk("c", 3)), mk("d", 4), &mk("r", 5)) => earlier);
    check!(guards() => earlier);
    check!(nested_blocks() => earlier);
    check!(unsafe_block());
    check!(last_use_in_tail());
    check!(keep_option());
    check!(no_drops());
    check!(keep_marker());
    check!(renamed_facade() => earlier);
    check!(renamed_facade_string() => earlier);
}
