//! Harder shapes: collected references read by index, `while let` with shadowing, closure
//! bodies with locals, labeled blocks with values, `&mut` and `ref` bindings, `RefCell`
//! borrows, `?` on `Option`, string slices, scoped threads, `if let` on a lock guard,
//! `let … else` with a type annotation, a statement macro declaring a binding, slice and
//! or-patterns, async closures, generic `AsRef` parameters.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// A statement macro that declares a binding the caller uses afterwards.
macro_rules! my_let {
    ($name:ident = $e:expr) => {
        let $name = $e;
    };
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{block_on, mk, step, T};
        use std::sync::Mutex;
        $(#[$attr])?
        pub fn t1(items: Vec<T>) -> i64 {
            let v: Vec<&T> = items.iter().collect();
            let first = v[0];
            step("1");
            let w = mk("w", 1);
            step("2");
            first.v + w.v
        }
        $(#[$attr])?
        pub fn t2() -> i64 {
            let mut stack = vec![mk("a", 1), mk("b", 2)];
            let mut acc = 0;
            while let Some(x) = stack.pop() {
                let y = mk("y", x.v);
                let x = mk("x2", y.v);
                acc += x.v;
            }
            let f = |a: T| { let b = mk("b2", a.v); let c = mk("c2", b.v); c.v };
            acc += f(mk("arg", 3));
            let r = 'blk: {
                let q = mk("q", acc);
                if q.v > 100 { break 'blk q.v; }
                let z = mk("z", q.v);
                z.v
            };
            r
        }
        $(#[$attr])?
        pub fn t3(mut x: T) -> i64 {
            let r = &mut x;
            r.v += 1;
            step("1");
            let pair = (mk("p0", 1), mk("p1", 2));
            let (ref a, b) = pair;
            let s = a.v + b.v;
            step("2");
            let t = mk("t", s);
            x.v + t.v
        }
        $(#[$attr])?
        pub fn t4(items: Vec<T>) -> i64 {
            let mut best: Option<&T> = None;
            for t in &items {
                if best.is_none_or(|b| t.v > b.v) { best = Some(t); }
            }
            step("1");
            let b = best.map(|b| b.v).unwrap_or(0);
            step("2");
            let m = items.iter().map(|t| t.v).max().unwrap_or(0);
            let g = items.get(0).map(|t| t.v);
            step("3");
            b + m + g.unwrap_or(0)
        }
        $(#[$attr])?
        pub fn t5(x: T) -> Option<i64> {
            let y = Some(mk("y", x.v))?;
            let z = if y.v > 0 { y } else { return None };
            step("1");
            let s = std::cell::RefCell::new(mk("cell", 1));
            s.borrow_mut().v += z.v;
            let n = s.borrow().v;
            step("2");
            Some(n)
        }
        $(#[$attr])?
        pub fn t6(x: T) -> String {
            let s = x.to_string();
            let parts: Vec<&str> = s.split('=').collect();
            let head = parts[0];
            step("1");
            let out = head.to_uppercase();
            step("2");
            out
        }
        $(#[$attr])?
        pub fn t7() -> i64 {
            let data = vec![mk("d0", 1), mk("d1", 2)];
            let total = std::thread::scope(|sc| {
                let h = sc.spawn(|| data.iter().map(|t| t.v).sum::<i64>());
                h.join().unwrap()
            });
            step("1");
            let m = mk("m", total);
            step("2");
            m.v
        }
        $(#[$attr])?
        pub fn t8(flag: bool) -> i64 {
            let x = Mutex::new(vec![mk("m", 1)]);
            if let Some(v) = x.lock().unwrap().first() {
                step("has");
                let _ = v.v;
            }
            step("1");
            let y = mk("y", 2);
            let Some(first): Option<i64> = [y.v].first().copied() else { return 0 };
            step("2");
            let z = mk("z", first);
            my_let!(w = z.v + 1);
            step("3");
            let s = stringify!(z);
            let [a, b] = [mk("a", 1), mk("b", 2)];
            let (Ok(c) | Err(c)) = if flag { Ok::<T, T>(a) } else { Err(b) };
            step("4");
            let label = format!("{c}{s}{w}", s = s.len());
            step("5");
            label.len() as i64 + w
        }

        $(#[$attr])?
        pub fn t9(items: Vec<T>) -> i64 {
            let mut total = 0;
            for it in items {
                let x = mk("x", it.v);
                if x.v > 1 {
                    let _ = it.into_value();
                    continue;
                }
                step("iter");
                total += x.v;
            }
            let n = 3usize;
            let mut i = 0;
            while i < n {
                i += 1;
            }
            let g = |a: i64| async move { a + 1 };
            let fut = g(1);
            let r = block_on(fut);
            let data = vec![mk("d", 5)];
            let cl = async || data.len();
            let len = block_on(cl());
            total + r + len as i64
        }

        $(#[$attr])?
        pub fn t10<Q: AsRef<str>>(q: Q, x: T) -> usize {
            let s = q.as_ref();
            let mut v = vec![];
            step("0");
            v.push(s.len());
            let read = || x.v;
            let y = read();
            step("1");
            let t = mk("t", y);
            step("2");
            v.len() + t.v as usize
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
    use support::mk;
    check!(t1(vec![mk("i", 1)]));
    check!(t2());
    check!(t3(mk("x", 1)));
    check!(t4(vec![mk("i", 1), mk("j", 4)]));
    check!(t5(mk("x", 1)));
    check!(t6(mk("x", 1)));
    check!(t7());
    check!(t8(false));
    check!(t8(true));
    check!(t9(vec![mk("i", 1), mk("j", 3)]));
    check!(t10(String::from("ab"), mk("x", 1)));
}
