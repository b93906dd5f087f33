//! The rules of issue #43, one function each, compiled with `#![deny(warnings)]` and run against
//! the plain code: a reference an accessor returns is never dropped (its drop would read
//! the borrow after a write of what it borrows); a borrower keeps its scope end where the
//! statement of its last use moves or writes what it borrows; a borrowed value that its
//! statement may move as a receiver keeps its scope end; a borrow stored through a name the
//! statement binds (`if let Some(g) = groups.last_mut() { g.push(&w) }`) keeps what it borrows;
//! `kind()` borrows, `data()` may consume its receiver, a `from_slice` other than a tensor's may
//! borrow its arguments, and `?` in a function returning `Option` unwraps a lookup that may
//! borrow them.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// Tensors of two styles: candle's (`&self` ops returning `Result`, `dims()` a reference) and
/// burn's (ops taking `self`, `dims()` an owned array).
pub mod styles {
    // `T` by its path: the 2021 and 2024 style editions (this file is in both crates) sort
    // `{mk, T}` differently.
    use super::support::mk;
    type Logged = super::support::T;

    pub struct Candle {
        /// Held for its drop, which logs.
        #[allow(dead_code)]
        pub t: Logged,
        pub dims: Vec<usize>,
    }

    impl vramguard::DropAtLastUse for Candle {}

    impl Candle {
        pub fn new(name: &'static str, dims: &[usize]) -> Candle {
            Candle {
                t: mk(name, dims.iter().product::<usize>() as i64),
                dims: dims.to_vec(),
            }
        }
        pub fn dims(&self) -> &[usize] {
            &self.dims
        }
        pub fn reshape(&self, dims: (usize, usize)) -> Result<Candle, String> {
            Ok(Candle::new("reshaped", &[dims.0, dims.1]))
        }
    }

    pub struct Burn(pub Logged);

    impl vramguard::DropAtLastUse for Burn {}

    impl Burn {
        pub fn dims(&self) -> [usize; 1] {
            [self.0.v as usize]
        }
        pub fn flatten(self) -> Logged {
            mk("flat", self.0.v + 1)
        }
    }
}

/// A view of borrowed data, a haystack matcher, an AST node and a consuming builder.
pub mod borrowing {
    pub struct View<'a>(pub &'a [i64]);

    impl<'a> View<'a> {
        pub fn from_slice(data: &'a [i64], rows: usize) -> View<'a> {
            View(&data[..rows])
        }
    }

    pub struct Finder;

    impl Finder {
        pub fn find<'h>(&self, haystack: &'h str) -> Option<&'h str> {
            haystack.get(1..)
        }
    }

    pub enum Kind {
        Leaf(i64),
        Inner,
    }

    pub struct Node(pub Kind);

    impl Node {
        pub fn kind(&self) -> &Kind {
            &self.0
        }
    }

    pub struct Builder(pub Vec<u8>);

    impl Builder {
        pub fn data(self) -> Vec<u8> {
            self.0
        }
    }
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::borrowing::{Builder, Finder, Kind, Node, View};
        #[allow(unused_imports)]
        use super::styles::{Burn, Candle};
        #[allow(unused_imports)]
        use super::support::{mk, step, T};

        /// A reference from an accessor feeds the condition and the new value of the local it
        /// borrows (`let dims = xs.dims(); if .. { xs = xs.reshape(dims..)? }`).
        $(#[$attr])?
        pub fn accessor_reference_then_write(dims: &[usize]) -> Result<Vec<usize>, String> {
            let mut x = Candle::new("x", dims);
            let d = x.dims();
            if d.len() == 3 {
                x = x.reshape((d[0] * d[1], d[2]))?;
            }
            let shape = x.dims().to_vec();
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            Ok(shape.into_iter().chain([m as usize]).collect())
        }

        /// A borrower that is no reference by its syntax (an iterator over a `Vec`) used
        /// before a push into the vector it borrows.
        $(#[$attr])?
        pub fn borrower_then_mutating_call() -> usize {
            let mut v = vec![1i64, 2];
            let firsts = v.iter();
            v.push(firsts.len() as i64);
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            v.len() + m as usize
        }

        /// A borrower last used in the statement that then moves what it borrows.
        $(#[$attr])?
        pub fn borrower_then_move(take: bool) -> i64 {
            let x = mk("x", 3);
            let it = std::slice::from_ref(&x).iter();
            let (k, c) = (it.len() as i64, super::support::consume(x, "c"));
            step("1");
            let n = if take { k + c.v } else { k };
            step("2");
            n
        }

        /// A by-value parameter borrowed (burn's owned `dims()`), then consumed as a receiver in
        /// one arm of a branch nested in an `if let`.
        $(#[$attr])?
        pub fn receiver_consumed_in_a_nested_else(
            labels: Burn,
            weights: Option<i64>,
            cond: bool,
        ) -> i64 {
            let shape = labels.dims();
            let e = mk("e", 1);
            step("1");
            let mut out = e.v;
            if let Some(w) = weights {
                let w = if cond {
                    w * shape[0] as i64
                } else {
                    w + labels.flatten().v + shape[0] as i64
                };
                out += w;
            }
            step("2");
            out
        }

        /// A borrow stored through a name the `if let` binds.
        $(#[$attr])?
        pub fn stored_through_an_if_let_binding() -> usize {
            let mut groups: Vec<Vec<&T>> = vec![Vec::new()];
            let word = mk("word", 2);
            if let Some(g) = groups.last_mut() {
                g.push(&word)
            }
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            groups[0].len() + m as usize
        }

        /// A view constructor borrowing its argument.
        $(#[$attr])?
        pub fn view_from_slice() -> i64 {
            let data = vec![1i64, 2, 3];
            let view = View::from_slice(&data, 2);
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            view.0.iter().sum::<i64>() + m
        }

        /// `?` on an `Option`: the match borrows the haystack.
        $(#[$attr])?
        pub fn option_lookup(finder: &Finder) -> Option<usize> {
            let line = String::from("haystack");
            let found = finder.find(&line)?;
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            Some(found.len() + m as usize)
        }

        /// `kind()` returns a reference into the node.
        $(#[$attr])?
        pub fn node_kind(node: Node) -> i64 {
            let kind = node.kind();
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            match kind {
                Kind::Leaf(v) => *v + m,
                Kind::Inner => m,
            }
        }

        /// `data(self)` consumes the builder.
        $(#[$attr])?
        pub fn consuming_data(builder: Builder) -> usize {
            let data = builder.data();
            let n = data.len();
            step("1");
            let e = mk("e", 1);
            let m = e.v;
            step("2");
            n + m as usize
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
    use borrowing::{Builder, Finder, Kind, Node};
    for dims in [&[2, 3, 4][..], &[6, 4]] {
        check!(accessor_reference_then_write(dims) => earlier);
    }
    check!(borrower_then_mutating_call() => earlier);
    check!(borrower_then_move(true) => earlier);
    check!(borrower_then_move(false) => earlier);
    for (weights, cond) in [(Some(2), true), (Some(2), false), (None, true)] {
        let labels = || styles::Burn(support::mk("labels", 4));
        check!(receiver_consumed_in_a_nested_else(labels(), weights, cond) => earlier);
    }
    check!(stored_through_an_if_let_binding() => earlier);
    check!(view_from_slice() => earlier);
    check!(option_lookup(&Finder) => earlier);
    check!(node_kind(Node(Kind::Leaf(4))) => earlier);
    check!(node_kind(Node(Kind::Inner)) => earlier);
    check!(consuming_data(Builder(vec![1, 2])) => earlier);
}
