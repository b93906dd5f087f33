//! Where the attribute goes: methods (`&self`, `&mut self`, `self`), trait impl methods, whole
//! `impl` blocks, trait default methods, generic functions, `impl Trait` returns, `async fn`.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

pub trait Layer {
    fn run(&self, input: i64) -> i64;

    fn twice(&self, input: i64) -> i64;
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{guard, mk, step, T};
        use super::Layer;

        pub struct Model {
            pub bias: i64,
        }

        impl Model {
            /// `&self` method.
            $(#[$attr])?
            pub fn by_ref(&self, x: T) -> i64 {
                let h = mk("h", x.v + self.bias);
                step("1");
                let o = mk("o", h.v * 2);
                step("2");
                o.v
            }

            /// `&mut self` method.
            $(#[$attr])?
            pub fn by_mut(&mut self, x: T) -> i64 {
                let h = mk("h", x.v);
                self.bias += h.v;
                step("1");
                self.bias
            }

            /// `self` by value.
            $(#[$attr])?
            pub fn by_value(self, x: T) -> i64 {
                let h = mk("h", x.v + self.bias);
                step("1");
                let o = mk("o", h.v);
                step("2");
                o.v
            }
        }

        pub struct Nested;

        /// An `impl` block whose method has its own attribute (and options): expanded once.
        $(#[$attr])?
        impl Nested {
            $(#[$attr])?
            pub fn own(&self) -> i64 {
                let a = mk("a", 1);
                step("1");
                let b = mk("b", a.v);
                step("2");
                b.v
            }
        }

        /// A whole `impl` block: every method is transformed.
        $(#[$attr])?
        impl Layer for Model {
            fn run(&self, input: i64) -> i64 {
                let a = mk("a", input);
                step("1");
                let b = mk("b", a.v + self.bias);
                step("2");
                b.v
            }

            fn twice(&self, input: i64) -> i64 {
                let a = mk("a2", input * 2);
                step("1");
                a.v
            }
        }

        pub trait WithDefault {
            /// A trait method with a default body.
            $(#[$attr])?
            fn default_method(&self) -> i64 {
                let a = mk("a", 1);
                step("1");
                let b = mk("b", a.v + 1);
                step("2");
                b.v
            }
        }

        impl WithDefault for Model {}

        pub struct Other;

        impl Layer for Other {
            /// A trait impl method on its own.
            $(#[$attr])?
            fn run(&self, input: i64) -> i64 {
                let a = mk("a", input);
                step("1");
                let b = mk("b", a.v);
                step("2");
                b.v
            }

            fn twice(&self, input: i64) -> i64 {
                input * 2
            }
        }

        /// Generic function with bounds and a where clause.
        $(#[$attr])?
        pub fn generic<L: Layer, D>(layer: &L, extra: D) -> i64
        where
            D: Into<i64>,
        {
            let a = mk("a", layer.run(1));
            step("1");
            let b = mk("b", a.v + extra.into());
            step("2");
            b.v
        }

        /// Returns `impl Trait` (grad mode covers the call, not the later iteration).
        $(#[$attr])?
        pub fn returns_impl(n: i64) -> impl Iterator<Item = i64> {
            let scale = mk("scale", 2);
            let s = scale.v;
            step("1");
            let items = vec![mk("i0", 1), mk("i1", 2)];
            let values: Vec<i64> = items.iter().map(|t| t.v * s).collect();
            step("2");
            values.into_iter().take(n as usize)
        }

        /// `async fn`: grad mode is set around each poll.
        $(#[$attr])?
        pub async fn async_fn(x: T) -> Result<i64, String> {
            let a = mk("a", x.v);
            step("1");
            let b = async { mk("b", a.v + 1) }.await;
            step("2");
            let v: i64 = format!("{}", b.v).parse().map_err(|_| "parse".to_string())?;
            step("3");
            Ok(v)
        }

        pub fn by_ref_call(x: T) -> i64 {
            Model { bias: 1 }.by_ref(x)
        }

        pub fn by_mut_call(x: T) -> i64 {
            Model { bias: 1 }.by_mut(x)
        }

        pub fn by_value_call(x: T) -> i64 {
            Model { bias: 1 }.by_value(x)
        }

        pub fn generic_call() -> i64 {
            generic(&Model { bias: 1 }, 2i32)
        }

        /// Grad mode as seen inside the body.
        $(#[$attr])?
        pub fn grad_mode_inside() -> bool {
            vramguard::is_grad_enabled()
        }

        /// Grad mode as seen inside an async body.
        $(#[$attr])?
        pub async fn grad_mode_inside_async() -> bool {
            vramguard::is_grad_enabled()
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
    use support::{block_on, mk};
    use with::WithDefault as _;
    use without::WithDefault as _;
    check!(by_ref_call(mk("x", 1)) => earlier);
    check!(by_mut_call(mk("x", 1)) => earlier);
    check!(by_value_call(mk("x", 1)) => earlier);
    support::compare(
        "impl block run",
        || without::Model { bias: 1 }.run(2),
        || with::Model { bias: 1 }.run(2),
    );
    support::compare(
        "impl block twice",
        || without::Model { bias: 1 }.twice(2),
        || with::Model { bias: 1 }.twice(2),
    );
    let c = support::compare(
        "default method",
        || without::Model { bias: 1 }.default_method(),
        || with::Model { bias: 1 }.default_method(),
    );
    assert!(c.earlier > 0);
    let c = support::compare(
        "trait impl method",
        || without::Other.run(3),
        || with::Other.run(3),
    );
    assert!(c.earlier > 0);
    check!(generic_call() => earlier);
    let c = support::compare(
        "nested attribute",
        || without::Nested.own(),
        || with::Nested.own(),
    );
    assert!(c.earlier > 0);
    let c = support::compare(
        "impl Trait",
        || without::returns_impl(2).collect::<Vec<_>>(),
        || with::returns_impl(2).collect::<Vec<_>>(),
    );
    assert!(c.earlier > 0);
    let c = support::compare(
        "async",
        || block_on(without::async_fn(mk("x", 1))),
        || block_on(with::async_fn(mk("x", 1))),
    );
    assert!(c.earlier > 0);
    assert!(without::grad_mode_inside());
    assert!(!with::grad_mode_inside());
    assert!(vramguard::is_grad_enabled());
    assert!(block_on(without::grad_mode_inside_async()));
    assert!(!block_on(with::grad_mode_inside_async()));
    assert!(vramguard::is_grad_enabled());
}
