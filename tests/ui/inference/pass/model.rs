//! Model code written the way people write it for other Rust tensor libraries (candle style):
//! `Result<Tensor>` with `?` chains, `let _enter = span.enter();`, shadowed `let`s, operator
//! overloads on `&Tensor` and `Tensor`, `match` on config enums, `x.dims()` borrows. The
//! tensor type here is a stand-in third-party type the transform knows nothing about.
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// A stand-in third-party tensor library.
pub mod tensorlib {
    use std::cell::RefCell;
    use std::ops::{Add, Mul};

    thread_local! {
        pub static LIVE: RefCell<(usize, usize)> = const { RefCell::new((0, 0)) };
    }

    pub type Result<T> = std::result::Result<T, String>;

    /// Logs its drop and counts live tensors (current, peak).
    #[derive(Debug, PartialEq)]
    pub struct Tensor {
        pub data: Vec<f32>,
        pub shape: Vec<usize>,
    }

    // Memory and nothing else (its drop log is the test's instrument).
    impl vramguard::DropAtLastUse for Tensor {}

    impl Tensor {
        pub fn new(data: Vec<f32>, shape: Vec<usize>) -> Tensor {
            LIVE.with(|l| {
                let mut l = l.borrow_mut();
                l.0 += 1;
                l.1 = l.1.max(l.0);
            });
            Tensor { data, shape }
        }
        pub fn dims(&self) -> &[usize] {
            &self.shape
        }
        pub fn dims2(&self) -> Result<(usize, usize)> {
            Ok((self.shape[0], self.shape[1]))
        }
        pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
            let data = self
                .data
                .iter()
                .zip(other.data.iter().cycle())
                .map(|(a, b)| a * b)
                .collect();
            Ok(Tensor::new(data, self.shape.clone()))
        }
        pub fn relu(&self) -> Result<Tensor> {
            Ok(Tensor::new(
                self.data.iter().map(|v| v.max(0.0)).collect(),
                self.shape.clone(),
            ))
        }
        pub fn gelu(&self) -> Result<Tensor> {
            Ok(Tensor::new(
                self.data.iter().map(|v| v * 0.5).collect(),
                self.shape.clone(),
            ))
        }
        pub fn softmax(&self, _dim: usize) -> Result<Tensor> {
            let sum: f32 = self.data.iter().map(|v| v.exp()).sum();
            Ok(Tensor::new(
                self.data.iter().map(|v| v.exp() / sum).collect(),
                self.shape.clone(),
            ))
        }
        pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
            Ok(Tensor::new(
                self.data
                    .iter()
                    .map(|v| v * mul as f32 + add as f32)
                    .collect(),
                self.shape.clone(),
            ))
        }
        pub fn reshape(&self, shape: (usize, usize)) -> Result<Tensor> {
            Ok(Tensor::new(self.data.clone(), vec![shape.0, shape.1]))
        }
        pub fn t(&self) -> Result<Tensor> {
            Ok(Tensor::new(
                self.data.clone(),
                self.shape.iter().rev().copied().collect(),
            ))
        }
        pub fn broadcast_add(&self, other: &Tensor) -> Result<Tensor> {
            let data = self
                .data
                .iter()
                .zip(other.data.iter().cycle())
                .map(|(a, b)| a + b)
                .collect();
            Ok(Tensor::new(data, self.shape.clone()))
        }
        pub fn to_vec1(&self) -> Result<Vec<f32>> {
            Ok(self.data.clone())
        }
        pub fn apply<M: Module>(&self, m: &M) -> Result<Tensor> {
            m.forward(self)
        }
    }

    impl Drop for Tensor {
        fn drop(&mut self) {
            LIVE.with(|l| l.borrow_mut().0 -= 1);
            super::support::step_drop("tensor");
        }
    }

    impl Add<&Tensor> for &Tensor {
        type Output = Result<Tensor>;
        fn add(self, rhs: &Tensor) -> Result<Tensor> {
            self.broadcast_add(rhs)
        }
    }

    impl Add<&Tensor> for Tensor {
        type Output = Result<Tensor>;
        fn add(self, rhs: &Tensor) -> Result<Tensor> {
            self.broadcast_add(rhs)
        }
    }

    impl Mul<f64> for &Tensor {
        type Output = Result<Tensor>;
        fn mul(self, rhs: f64) -> Result<Tensor> {
            self.affine(rhs, 0.0)
        }
    }

    pub trait Module {
        fn forward(&self, xs: &Tensor) -> Result<Tensor>;
    }

    pub struct Linear {
        pub weight: Tensor,
        pub bias: Tensor,
    }

    impl Module for Linear {
        fn forward(&self, xs: &Tensor) -> Result<Tensor> {
            xs.matmul(&self.weight)?.broadcast_add(&self.bias)
        }
    }

    pub fn linear(n: usize) -> Linear {
        Linear {
            weight: Tensor::new((0..n).map(|i| i as f32 * 0.1 + 0.5).collect(), vec![n]),
            bias: Tensor::new(vec![0.1; n], vec![n]),
        }
    }

    pub mod ops {
        pub fn softmax_last_dim(xs: &super::Tensor) -> super::Result<super::Tensor> {
            xs.softmax(1)
        }
    }

    pub struct Span;

    pub struct Entered;

    impl Span {
        pub fn enter(&self) -> Entered {
            Entered
        }
    }

    impl Drop for Entered {
        fn drop(&mut self) {
            super::support::step("_span_exit");
        }
    }

    pub fn peak_live() -> usize {
        LIVE.with(|l| {
            let mut l = l.borrow_mut();
            let peak = l.1;
            l.1 = l.0;
            peak
        })
    }
}

#[derive(Clone, Copy)]
pub enum Activation {
    Gelu,
    Relu,
}

macro_rules! cases {
    ($($attr:meta)?) => {
        use super::tensorlib::{ops, Linear, Module, Result, Span, Tensor};
        use super::Activation;

        pub struct Mlp {
            pub fc1: Linear,
            pub fc2: Linear,
            pub act: Activation,
            pub span: Span,
        }

        impl Mlp {
            /// The candle `forward` shape: span guard, shadowed lets, `?`, `match` on a config.
            $(#[$attr])?
            pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
                let _enter = self.span.enter();
                let xs = self.fc1.forward(xs)?;
                let xs = match self.act {
                    Activation::Gelu => xs.gelu()?,
                    Activation::Relu => xs.relu()?,
                };
                let xs = xs.apply(&self.fc2)?;
                Ok(xs)
            }
        }

        pub struct Attention {
            pub q: Linear,
            pub k: Linear,
            pub v: Linear,
            pub o: Linear,
            pub scale: f64,
        }

        impl Attention {
            /// Attention with a T×T score matrix scaled and softmaxed, one `let` per step.
            $(#[$attr])?
            pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
                let (t, c) = x.dims2()?;
                let dims = x.dims();
                let n = dims[0] * dims[1];
                let q = self.q.forward(x)?;
                let k = self.k.forward(x)?;
                let v = self.v.forward(x)?;
                let kt = k.t()?;
                let scores = q.matmul(&kt)?;
                let scores = (&scores * self.scale)?;
                let probs = ops::softmax_last_dim(&scores)?;
                let ctx = probs.matmul(&v)?;
                let ctx = (&ctx + x)?;
                let ctx = ctx.reshape((t, c))?;
                let out = self.o.forward(&ctx)?;
                let out = (out + &v)?;
                let _ = n;
                Ok(out)
            }
        }

        /// Owned inputs consumed by operator overloads on `Tensor`.
        $(#[$attr])?
        pub fn residual(a: Tensor, b: Tensor) -> Result<Vec<f32>> {
            let s = (a + &b)?;
            let s = s.relu()?;
            let r = (&s + &b)?;
            r.to_vec1()
        }
    };
}

mod with {
    cases!(vramguard::inference);
}

mod without {
    cases!();
}

fn input() -> tensorlib::Tensor {
    tensorlib::Tensor::new((0..8).map(|i| i as f32 * 0.25 - 1.0).collect(), vec![2, 4])
}

pub fn main() {
    use tensorlib::Span;
    use tensorlib::{linear, peak_live};
    let mlp = |act| {
        (
            without::Mlp {
                fc1: linear(8),
                fc2: linear(8),
                act,
                span: Span,
            },
            with::Mlp {
                fc1: linear(8),
                fc2: linear(8),
                act,
                span: Span,
            },
        )
    };
    for act in [Activation::Gelu, Activation::Relu] {
        let (a, b) = mlp(act);
        let x = input();
        support::compare("mlp", || a.forward(&x), || b.forward(&x));
        peak_live();
        let ra = a.forward(&x).map(|t| t.data.clone());
        let peak_without = peak_live();
        let rb = b.forward(&x).map(|t| t.data.clone());
        let peak_with = peak_live();
        assert_eq!(ra, rb);
        assert!(
            peak_with < peak_without,
            "mlp: peak with {peak_with}, without {peak_without}"
        );
    }
    let attention = || without::Attention {
        q: linear(8),
        k: linear(8),
        v: linear(8),
        o: linear(8),
        scale: 0.5,
    };
    let attention_with = || with::Attention {
        q: linear(8),
        k: linear(8),
        v: linear(8),
        o: linear(8),
        scale: 0.5,
    };
    let (a, b) = (attention(), attention_with());
    let x = input();
    peak_live();
    let ra = a.forward(&x).map(|t| t.data.clone());
    let peak_without = peak_live();
    let rb = b.forward(&x).map(|t| t.data.clone());
    let peak_with = peak_live();
    assert_eq!(ra, rb);
    // Live tensors at the peak besides the weights and the input: fewer with the attribute.
    assert!(
        peak_with < peak_without,
        "peak with {peak_with}, without {peak_without}"
    );
    support::compare("attention", || a.forward(&x), || b.forward(&x));
    support::compare(
        "residual",
        || without::residual(input(), input()),
        || with::residual(input(), input()),
    );
    let (a, b) = (input(), input());
    peak_live();
    let ra = without::residual(a, b);
    let peak_without = peak_live();
    let (a, b) = (input(), input());
    peak_live();
    let rb = with::residual(a, b);
    let peak_with = peak_live();
    assert_eq!(ra, rb);
    assert!(
        peak_with < peak_without,
        "residual: peak with {peak_with}, without {peak_without}"
    );
}
