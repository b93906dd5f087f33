//! Macros: format strings with inline and width captures, `vec!`, `assert!`, `write!`, local
//! `macro_rules!`, and macros the transform does not know.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// A macro the transform knows nothing about, taking a local by name.
macro_rules! value_of {
    ($t:ident) => {
        $t.v
    };
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{guard, mk, step, T};
        use std::fmt::Write as _;

        /// Inline captures (`{x}`, `{x:?}`) are uses.
        $(#[$attr])?
        pub fn inline_captures() -> String {
            let x = mk("x", 1);
            let y = mk("y", 2);
            let text = format!("{x} and {y:?}");
            step("1");
            let z = mk("z", 3);
            println!("{z}");
            step("2");
            text
        }

        /// Width and precision captures (`{:>w$}`, `{:.p$}`) and named arguments.
        $(#[$attr])?
        pub fn width_captures() -> String {
            let w = 8usize;
            let p = 2usize;
            let x = mk("x", 5);
            let value = 2.71f64;
            let a = format!("[{:>w$}]", x.v);
            let b = format!("[{value:.p$}]");
            let named = mk("named", 4);
            let c = format!("{n}", n = named.v);
            step("1");
            a + &b + &c
        }

        /// `vec!`, `assert!`, `assert_eq!`, `write!` and `matches!`.
        $(#[$attr])?
        pub fn std_macros() -> String {
            let a = mk("a", 1);
            let b = mk("b", 2);
            let items = vec![a.v, b.v, 3];
            assert!(items.len() == 3, "bad length {}", items.len());
            step("1");
            let c = mk("c", 3);
            assert_eq!(c.v, 3, "c is {c}");
            let mut out = String::new();
            write!(out, "{}-{}", items[0], c.v).unwrap();
            step("2");
            let d = mk("d", 4);
            let is_four = matches!(d.v, 4);
            step("3");
            format!("{out}{is_four}")
        }

        /// A local `macro_rules!` body mentions locals: its invocations are uses.
        $(#[$attr])?
        pub fn local_macro_rules() -> i64 {
            let hidden = mk("hidden", 6);
            macro_rules! read_hidden {
                () => {
                    hidden.v
                };
            }
            step("1");
            let first = read_hidden!();
            step("2");
            let second = read_hidden!();
            step("3");
            first + second
        }

        /// A macro the transform does not know: its tokens are scanned for names.
        $(#[$attr])?
        pub fn unknown_macro() -> i64 {
            let t = mk("t", 9);
            let u = mk("u", 1);
            let v = value_of!(t) + value_of!(u);
            step("1");
            v
        }

        /// `dbg!`-free debugging statements and `eprintln!` with captures at statement level.
        $(#[$attr])?
        pub fn statement_macros() -> i64 {
            let a = mk("a", 2);
            eprintln!("a = {a}");
            step("1");
            let b = mk("b", a.v * 2);
            eprintln!("{:?}", b.v);
            step("2");
            b.v
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
    check!(inline_captures() => earlier);
    check!(width_captures() => earlier);
    check!(std_macros() => earlier);
    check!(local_macro_rules());
    check!(unknown_macro());
    check!(statement_macros() => earlier);
}
