//! Values still borrowed stay alive: references, accessors, iterators, closures, stored
//! borrows, temporary lifetime extension, tail temporaries; the conservative default and the
//! `owned(..)`/`borrows(..)` lists.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{guard, mk, step, T};
        use std::sync::Mutex;

        fn make(t: &T) -> T {
            mk("made", t.v * 10)
        }

        /// `let r = &x;` keeps `x` alive until `r`'s last use.
        $(#[$attr])?
        pub fn reference_alias() -> i64 {
            let x = mk("x", 1);
            let r = &x;
            step("1");
            let s = r.v + 1;
            step("2");
            let y = mk("y", s);
            step("3");
            y.v
        }

        /// Accessors that return references (`dims()`), and iterators.
        $(#[$attr])?
        pub fn accessors_and_iterators() -> i64 {
            let x = mk("x", 4);
            let d = x.dims();
            step("1");
            let twice = *d * 2;
            step("2");
            let list = vec![mk("l0", 1), mk("l1", 2)];
            let iter = list.iter().map(|t| t.v);
            step("3");
            let sum: i64 = iter.sum();
            step("4");
            twice + sum
        }

        /// A non-`move` closure capturing a local keeps it alive while the closure lives.
        $(#[$attr])?
        pub fn closure_capture() -> i64 {
            let x = mk("x", 3);
            let read = || x.v;
            step("1");
            let a = read();
            step("2");
            let y = mk("y", a);
            step("3");
            y.v
        }

        /// A borrow stored into a collection (`v.push(&x)`) or assigned (`r = &x`).
        $(#[$attr])?
        pub fn stored_borrows() -> i64 {
            let a = mk("a", 1);
            let b = mk("b", 2);
            let mut refs: Vec<&T> = Vec::new();
            refs.push(&a);
            let mut last = &a;
            step("1");
            if last.v > 0 {
                last = &b;
            }
            refs.push(last);
            step("2");
            let total: i64 = refs.iter().map(|t| t.v).sum();
            step("3");
            let keep_c = mk("keep_c", total);
            keep_c.v
        }

        /// `let r = &make(&x);` extends the temporary's life: `x` stays alive.
        $(#[$attr])?
        pub fn temporary_lifetime_extension() -> i64 {
            let x = mk("x", 2);
            let r = &make(&x);
            step("1");
            let v = r.v;
            step("2");
            let y = mk("y", v);
            step("3");
            y.v
        }

        /// A temporary in a tail position (`x.lock().unwrap().len()`) must not outlive `x`.
        $(#[$attr])?
        pub fn tail_temporaries() -> usize {
            let x = Mutex::new(vec![mk("m0", 1)]);
            let n = x.lock().unwrap().len();
            step("1");
            let y = Mutex::new(vec![mk("m1", 2), mk("m2", 3)]);
            let m = y.lock().unwrap().len();
            step("2");
            n + m
        }

        /// A borrower that outlives a shadowing of the borrowed name keeps the old value.
        $(#[$attr])?
        pub fn borrow_across_shadowing() -> i64 {
            let x = mk("x1", 1);
            let d = x.dims();
            let x = mk("x2", *d + 1);
            step("1");
            let s = *d + x.v;
            step("2");
            let y = mk("y", s);
            step("3");
            y.v
        }

        /// A local whose address is taken as a raw pointer is never dropped early, even when
        /// the pointer escapes through an integer.
        $(#[$attr])?
        pub fn raw_pointer() -> i64 {
            let keep_x = mk("keep_x", 3);
            let address = &keep_x as *const T as usize;
            step("1");
            let y = mk("y", 1);
            step("2");
            // SAFETY: `keep_x` is still alive: nothing whose address was taken is dropped early.
            let v = unsafe { (*(address as *const T)).v };
            step("3");
            v + y.v
        }

        static STASH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

        /// # Safety
        /// `p` must stay valid until the last `read_stash`.
        unsafe fn stash(p: *const T) {
            STASH.store(p as usize, std::sync::atomic::Ordering::SeqCst);
        }

        /// # Safety
        /// The stashed pointer must still be valid.
        unsafe fn read_stash() -> i64 {
            // SAFETY: guaranteed by the caller.
            unsafe { (*(STASH.load(std::sync::atomic::Ordering::SeqCst) as *const T)).v }
        }

        /// A reference coerced to a raw pointer inside `unsafe` code and used later: locals
        /// mentioned in `unsafe` blocks are never dropped early.
        $(#[$attr])?
        pub fn stashed_pointer() -> i64 {
            let keep_x = mk("keep_x", 3);
            // SAFETY: `keep_x` lives until the end of the function.
            unsafe { stash(&keep_x) };
            step("1");
            let y = mk("y", 1);
            step("2");
            // SAFETY: `keep_x` is still alive.
            let v = unsafe { read_stash() };
            step("3");
            v + y.v
        }

        /// Unknown methods on a local whose result is bound: conservatively kept alive.
        $(#[$attr])?
        pub fn conservative_default() -> i64 {
            let x = mk("keep_x", 2);
            let name = x.peek_name();
            step("1");
            let n = name.len() as i64;
            step("2");
            let y = mk("y", n);
            step("3");
            y.v
        }
    };
}

mod with {
    cases!(vramguard::inference);

    /// `owned(scaled)`: the user declares the unknown method owned.
    #[vramguard::inference(owned(scaled))]
    pub fn owned_option() -> i64 {
        let x = mk("x", 2);
        let y = x.scaled(3);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }

    /// `borrows(peek_name)`: declared borrowing: `x` is dropped after `name`'s last use.
    #[vramguard::inference(borrows(peek_name))]
    pub fn borrows_option() -> i64 {
        let x = mk("x", 2);
        let name = x.peek_name();
        step("1");
        let n = name.len() as i64;
        step("2");
        let y = mk("y", n);
        step("3");
        y.v
    }

    fn helper(t: &T) -> T {
        mk("helper", t.v)
    }

    /// An unknown free function: its result might borrow `&x`, so `x` lives while it does…
    #[vramguard::inference]
    pub fn unknown_function() -> i64 {
        let keep_x = mk("keep_x", 2);
        let y = helper(&keep_x);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }

    /// …unless the user lists it in `owned(..)`.
    #[vramguard::inference(owned(helper))]
    pub fn unknown_function_owned() -> i64 {
        let x = mk("x", 2);
        let y = helper(&x);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }
}

mod without {
    cases!();

    pub fn owned_option() -> i64 {
        let x = mk("x", 2);
        let y = x.scaled(3);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }

    pub fn borrows_option() -> i64 {
        let x = mk("x", 2);
        let name = x.peek_name();
        step("1");
        let n = name.len() as i64;
        step("2");
        let y = mk("y", n);
        step("3");
        y.v
    }

    fn helper(t: &T) -> T {
        mk("helper", t.v)
    }

    pub fn unknown_function() -> i64 {
        let keep_x = mk("keep_x", 2);
        let y = helper(&keep_x);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }

    pub fn unknown_function_owned() -> i64 {
        let x = mk("x", 2);
        let y = helper(&x);
        step("1");
        let z = mk("z", y.v);
        step("2");
        z.v
    }
}

pub fn main() {
    check!(reference_alias() => earlier);
    check!(accessors_and_iterators() => earlier);
    check!(closure_capture());
    check!(stored_borrows() => earlier);
    check!(temporary_lifetime_extension());
    // A `Mutex` is not `DropAtLastUse`: the rewrite compiles, and nothing moves.
    check!(tail_temporaries());
    check!(borrow_across_shadowing() => earlier);
    check!(conservative_default());
    check!(raw_pointer());
    check!(stashed_pointer());
    check!(owned_option() => earlier);
    check!(borrows_option() => earlier);
    check!(unknown_function() => earlier);
    check!(unknown_function_owned() => earlier);
}
