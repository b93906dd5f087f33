//! Adversarial shapes found in review: local macros that invoke other local macros, consuming
//! methods whose names usually borrow (`Iterator::last`, `BufRead::lines`), raw identifiers in
//! format captures, `#[cfg]`-disabled shadowing `let`s, temporaries extended through
//! constructors and `format_args!`, local closures returning borrows, `&mut` out-parameters,
//! mixed hygiene contexts, `max`/`flatten` on iterators of references, `as _` casts, struct
//! update syntax.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{consume, guard, mk, step, T};

        /// A local macro whose body invokes another local macro that reads a `Copy` counter:
        /// the invocation is a use of the counter.
        $(#[$attr])?
        pub fn nested_local_macros() -> i64 {
            let mut n = 0i64;
            macro_rules! get_n { () => { n } }
            macro_rules! show { () => { get_n!() } }
            n += 1;
            step("1");
            let r = show!();
            step("2");
            let t = mk("t", r);
            step("3");
            t.v
        }

        /// `Iterator::last` consumes the iterator although `last` usually borrows (slices).
        $(#[$attr])?
        pub fn iterator_last(items: Vec<T>) -> i64 {
            let it = items.iter().map(|t| t.v);
            let l = it.last();
            step("1");
            let w = mk("w", l.unwrap_or(0));
            step("2");
            w.v
        }

        /// `BufRead::lines` consumes the reader.
        $(#[$attr])?
        pub fn bufread_lines() -> usize {
            use std::io::BufRead;
            let reader = std::io::Cursor::new(String::from("a\nbb\nccc"));
            let lines = reader.lines();
            let mut total = 0;
            for line in lines {
                total += line.map(|l| l.len()).unwrap_or(0);
            }
            step("1");
            let t = mk("t", total as i64);
            step("2");
            t.v as usize
        }

        /// A raw identifier (`r#type`), captured by a format string as `{type}`.
        $(#[$attr])?
        pub fn raw_ident_capture() -> String {
            let mut r#type = 1i64;
            r#type += 1;
            step("1");
            let u = format!("{type}");
            step("2");
            let t = mk("t", u.len() as i64);
            step("3");
            format!("{}{}", u, t.v)
        }

        /// A slice's `last` still borrows (and frees after the borrower).
        $(#[$attr])?
        pub fn slice_last() -> i64 {
            let v = vec![mk("a", 1), mk("b", 2)];
            let l = v.last();
            step("1");
            let x = l.map(|t| t.v).unwrap_or(0);
            step("2");
            let y = mk("y", x);
            step("3");
            y.v
        }

        /// Struct update syntax then a read of the base's remaining `Copy` field.
        $(#[$attr])?
        pub fn struct_update() -> i64 {
            #[derive(Clone)]
            struct P { a: i64, b: i64 }
            let base = P { a: 1, b: 2 };
            let p = P { a: 5, ..base.clone() };
            step("1");
            let s = p.a + p.b + base.b;
            step("2");
            let t = mk("t", s);
            step("3");
            t.v
        }

        /// `as _` cast inferred from a later use.
        $(#[$attr])?
        pub fn infer_cast(x: T) -> u64 {
            let n = x.v as _;
            step("1");
            let m: u64 = n;
            step("2");
            m + 1
        }

        /// A guard obtained from a method not named `lock`, never used after its declaration.
        $(#[$attr])?
        pub fn custom_guard() -> i64 {
            struct G(std::sync::Mutex<i64>);
            impl G {
                fn acquire(&self) -> std::sync::MutexGuard<'_, i64> {
                    self.0.lock().unwrap()
                }
            }
            let g = G(std::sync::Mutex::new(3));
            let held = g.acquire();
            step("1");
            let ok = g.0.try_lock().is_err();
            step("2");
            let t = mk("t", *held + ok as i64);
            step("3");
            t.v
        }

        /// RefCell guards: the `borrow_mut` guard is used once, then the cell is borrowed.
        $(#[$attr])?
        pub fn refcell_guards() -> i64 {
            let cell = std::cell::RefCell::new(mk("cell", 1));
            let mut w = cell.borrow_mut();
            w.v += 1;
            step("1");
            let busy = cell.try_borrow().is_err();
            step("2");
            let n = w.v + busy as i64;
            step("3");
            n
        }

        /// Labelled break with a value computed from a local declared inside.
        $(#[$attr])?
        pub fn labelled_break(xs: Vec<T>) -> i64 {
            let mut acc = mk("acc", 0);
            let found = 'outer: loop {
                for x in &xs {
                    let d = mk("d", x.v * 2);
                    if d.v > 2 { break 'outer d.v; }
                    acc = consume(acc, "acc");
                }
                break -1;
            };
            step("1");
            let r = mk("r", found + acc.v);
            step("2");
            r.v
        }

        /// A `#[cfg]`-disabled `let` that would shadow a `Copy` counter: later uses are of the
        /// counter, which must not be moved into its earlier increment.
        $(#[$attr])?
        pub fn cfg_shadow() -> i64 {
            let mut n = 1i64;
            n += 1;
            #[cfg(any())]
            let n = 100i64;
            step("1");
            let r = mk("r", n * 2);
            step("2");
            r.v
        }

        /// The same with an owned value (was E0382).
        $(#[$attr])?
        pub fn cfg_shadow_owned() -> i64 {
            let x = mk("x", 1);
            let y = mk("y", x.v);
            #[cfg(any())]
            let x = mk("x2", 5);
            step("1");
            let r = mk("r", x.v + y.v);
            step("2");
            r.v
        }

        /// The disabled shadow inside a nested block: the block still uses the outer counter.
        $(#[$attr])?
        pub fn cfg_shadow_nested() -> i64 {
            let mut n = 1i64;
            n += 1;
            step("1");
            let r = {
                #[cfg(any())]
                let n = 100i64;
                let q = mk("q", n * 2);
                q.v
            };
            step("2");
            let t = mk("t", r);
            step("3");
            t.v
        }

        /// Temporary lifetime extension through a constructor (`Some(&temp)`, Rust 1.89+): a
        /// local moved into this `let` would end the temporary's life with the block (E0716).
        $(#[$attr])?
        pub fn constructor_extension(z: T) -> i64 {
            let y = Some(&mk("tmp", z.v));
            step("1");
            let r = mk("r", y.map(|t| t.v).unwrap_or(0));
            step("2");
            r.v
        }

        /// `format_args!` stored in a `let` borrows its arguments through extended temporaries.
        $(#[$attr])?
        pub fn format_args_stored(x: T) -> String {
            let f = format_args!("{}", x.v);
            step("1");
            let s = f.to_string();
            step("2");
            let t = mk("t", s.len() as i64);
            step("3");
            format!("{s}{t}")
        }

        /// `pin!` in a `let` pins an extended temporary.
        $(#[$attr])?
        pub fn pin_stored(x: T) -> i64 {
            let p = std::pin::pin!(mk("pinned", x.v));
            step("1");
            let r = mk("r", p.v);
            step("2");
            r.v
        }

        /// A local closure returning a borrow of what it captured: its result borrows `x`
        /// (was E0505).
        $(#[$attr])?
        pub fn closure_returns_ref() -> i64 {
            let x = mk("x", 2);
            let get = || &x;
            let r = get();
            step("1");
            let z = mk("z", r.v);
            step("2");
            z.v
        }

        /// A free function storing a borrow through a `&mut` argument (was E0597).
        $(#[$attr])?
        pub fn out_param() -> i64 {
            fn fill<'a>(out: &mut Vec<&'a T>, x: &'a T) {
                out.push(x);
            }
            let x = mk("x", 2);
            let mut out = Vec::new();
            fill(&mut out, &x);
            step("1");
            let z = mk("z", out[0].v);
            step("2");
            z.v
        }

        /// `max`/`flatten` are tensor ops (owned) and iterator methods yielding references
        /// (were E0597).
        $(#[$attr])?
        pub fn iterator_items() -> i64 {
            let v = vec![mk("a", 1), mk("b", 3)];
            let n = v.iter().map(|t| &t.v).max();
            step("1");
            let nested = vec![vec![mk("c", 1)], vec![mk("d", 2)]];
            let flat = nested.iter().flatten();
            step("2");
            let s: i64 = flat.map(|t| t.v).sum();
            step("3");
            let z = mk("z", s + n.copied().unwrap_or(0));
            step("4");
            z.v
        }

        /// A loop that moves the state out and reassigns it, and may exit with it moved: it is
        /// moved into the loop statement, never dropped after it (that would be E0382).
        $(#[$attr])?
        pub fn state_moved_in_loop() -> i64 {
            let mut cur = mk("cur", 1);
            let last;
            loop {
                let next = consume(cur, "next");
                if next.v > 3 {
                    last = next.v;
                    break;
                }
                cur = next;
            }
            step("1");
            let z = mk("z", last);
            step("2");
            z.v
        }
    };
}
/// A function generated by a macro that binds the caller's `n` and its own `n` (two hygiene
/// contexts, one spelling): the scan cannot tell them apart, so the counter the statement
/// `$n += 1` mutates must stay one value (dropped after, not copied into the statement).
macro_rules! mixed_hygiene {
    ($module:ident, $n:ident, $($attr:meta)?) => {
        pub mod $module {
            use super::support::{mk, step};
            $(#[$attr])?
            pub fn f() -> i64 {
                let mut $n = 1i64;
                $n += 1;
                let n = 100i64;
                step("1");
                let t = mk("t", $n * 2 + n);
                step("2");
                t.v
            }
        }
    };
}
mixed_hygiene!(hygiene_with, n, vramguard::inference);
mixed_hygiene!(hygiene_without, n,);

mod with {
    cases!(vramguard::inference);
}

mod without {
    cases!();
}

pub fn main() {
    use support::mk;
    check!(nested_local_macros());
    check!(iterator_last(vec![mk("i", 1), mk("j", 2)]));
    check!(bufread_lines());
    check!(raw_ident_capture());
    check!(slice_last());
    check!(struct_update());
    check!(infer_cast(mk("x", 4)));
    check!(custom_guard());
    check!(refcell_guards());
    check!(labelled_break(vec![mk("i", 1), mk("j", 2)]));
    check!(cfg_shadow());
    check!(cfg_shadow_owned());
    check!(cfg_shadow_nested());
    check!(constructor_extension(mk("z", 1)));
    check!(format_args_stored(mk("x", 1)));
    check!(pin_stored(mk("x", 1)));
    check!(closure_returns_ref());
    check!(out_param());
    check!(iterator_items());
    check!(state_moved_in_loop());
    support::compare("mixed_hygiene", hygiene_without::f, hygiene_with::f);
}
