//! `mapv` at a local's last use (issue #21) in the shapes that must compile and compute as
//! written: a `DropAtLastUse` type whose own `mapv` takes `self` by value or `&mut self`, a
//! `DropAtLastUse` wrapper that reaches an array's `mapv` through its own `Deref`, and (feature
//! `ndarray`) an owned array whose closure returns a borrow, another element type, or a float
//! literal whose type only the fallback to `f64` decides.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// Types with a `mapv` of their own, each logging its call.
pub mod lookalike {
    use super::support::{mk, step, T};

    impl T {
        /// By value, like a burn op: the receiver is consumed.
        pub fn mapv(self, f: impl FnOnce(i64) -> i64) -> T {
            step("mapv by value");
            mk("mapv", f(self.v))
        }
    }

    /// A `DropAtLastUse` type whose `mapv` takes `&mut self`.
    pub struct Counter(pub i64);

    impl vramguard::DropAtLastUse for Counter {}

    impl Counter {
        pub fn mapv(&mut self, mut f: impl FnMut(i64) -> i64) -> i64 {
            step("mapv by &mut");
            self.0 = f(self.0);
            self.0
        }
    }
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::lookalike::Counter;
        #[allow(unused_imports)]
        use super::support::{mk, step, T};

        $(#[$attr])?
        pub fn by_value() -> i64 {
            let a = mk("a", 3);
            let b = a.mapv(|v| v * 7);
            step("after mapv");
            b.v
        }

        $(#[$attr])?
        pub fn by_mut() -> i64 {
            let mut c = Counter(5);
            let n = c.mapv(|v| v + 1);
            step("after mapv");
            n
        }
    };
}

#[cfg(feature = "ndarray")]
macro_rules! array_cases {
    ($($attr:meta)?) => {
        use ndarray::{Array1, Array2};

        /// A `DropAtLastUse` wrapper whose `mapv` is its array's, through `Deref`.
        pub struct Wrapped(pub Array1<f32>);

        impl vramguard::DropAtLastUse for Wrapped {}

        impl std::ops::Deref for Wrapped {
            type Target = Array1<f32>;
            fn deref(&self) -> &Array1<f32> {
                &self.0
            }
        }

        /// The closure returns a borrow (the output type is not `'static`).
        $(#[$attr])?
        pub fn borrowed(table: &[String]) -> Vec<String> {
            let idx = Array1::from(vec![2_usize, 0, 1, 2]);
            let names = idx.mapv(|i| &table[i]);
            let n = names.len();
            names.iter().take(n).map(|s| s.to_string()).collect()
        }

        /// Another element type; a float literal that falls back to `f64`.
        $(#[$attr])?
        pub fn other_types(a: Array2<f32>) -> (Vec<bool>, f64) {
            let b = a.mapv(|v| v > 0.0);
            let c = b.mapv(|v| if v { 0.1 } else { 0.2 });
            let s = c.sum();
            (b.iter().copied().collect(), s)
        }

        $(#[$attr])?
        pub fn through_deref(w: Wrapped) -> Vec<f32> {
            let x = w;
            let y = x.mapv(|v| v * 3.0);
            step("after mapv");
            y.to_vec()
        }
    };
}

#[cfg(feature = "ndarray")]
mod arrays_with {
    use super::support::step;
    array_cases!(vramguard::inference);
}

#[cfg(feature = "ndarray")]
mod arrays_without {
    use super::support::step;
    array_cases!();
}

mod with {
    #[cfg(feature = "ndarray")]
    pub use super::arrays_with::*;
    cases!(vramguard::inference);
}

mod without {
    #[cfg(feature = "ndarray")]
    pub use super::arrays_without::*;
    cases!();
}

fn main() {
    check!(by_value());
    check!(by_mut());
    #[cfg(feature = "ndarray")]
    {
        let table: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        assert_eq!(with::borrowed(&table), without::borrowed(&table));
        let a = ndarray::Array2::from_shape_fn((3, 4), |(i, j)| i as f32 - j as f32 * 0.5);
        assert_eq!(with::other_types(a.clone()), without::other_types(a));
        let w = || ndarray::Array1::from(vec![1.0_f32, -2.0, 0.5]);
        assert_eq!(
            with::through_deref(with::Wrapped(w())),
            without::through_deref(without::Wrapped(w()))
        );
    }
}
