//! Idioms of third-party code that the attribute once broke (issue #10), each in the form it was
//! found in: candle models (a `mut` local then shadowing `let`s that read it, a borrow of the
//! local used in its own last-use statement, `dims()` used in the last use), burn layers
//! (by-value parameters and `self`-consuming ops), borrowing methods whose names mean "owned"
//! in other libraries (ndarray's `view`/`t`/`slice`, scraper's `select`, a `forward` returning
//! a borrowing prediction), and ordinary Rust (borrows carried by loop variables, closure
//! parameters, `if let` bindings, labeled-block values and `&mut` aliases; uppercase locals);
//! and, from the wider corpus of issue #19, rten (a method's output borrowing a reference
//! argument, a loop moving a value a borrower was computed from) and smartcore (generic element
//! types known only from later uses).
#![deny(warnings)]

#[macro_use]
#[path = "../support.rs"]
mod support;

/// A candle-style tensor: `&self` ops returning `Result<Tensor>`.
pub mod candle_like {
    use super::support::step_drop;

    pub type Result<T> = std::result::Result<T, String>;

    #[derive(Debug, PartialEq)]
    pub struct Tensor {
        pub name: &'static str,
        pub data: Vec<f32>,
        pub dims: Vec<usize>,
    }

    impl vramguard::DropAtLastUse for Tensor {}

    impl Drop for Tensor {
        fn drop(&mut self) {
            step_drop(self.name);
        }
    }

    impl Tensor {
        pub fn new(name: &'static str, data: Vec<f32>, dims: Vec<usize>) -> Tensor {
            Tensor { name, data, dims }
        }
        pub fn dims(&self) -> &[usize] {
            &self.dims
        }
        pub fn broadcast_add(&self, other: &Tensor) -> Result<Tensor> {
            let data = self
                .data
                .iter()
                .zip(other.data.iter().cycle())
                .map(|(a, b)| a + b);
            Ok(Tensor::new("badd", data.collect(), self.dims.clone()))
        }
        pub fn permute(&self, _order: (usize, usize, usize)) -> Result<Tensor> {
            let mut dims = self.dims.clone();
            dims.swap(1, 2);
            Ok(Tensor::new("perm", self.data.clone(), dims))
        }
        pub fn reshape(&self, dims: (usize, usize, usize, usize)) -> Result<Tensor> {
            let dims = vec![dims.0, dims.1, dims.2, dims.3];
            Ok(Tensor::new("reshaped", self.data.clone(), dims))
        }
    }

    impl std::ops::Add<&Tensor> for &Tensor {
        type Output = Result<Tensor>;
        fn add(self, rhs: &Tensor) -> Result<Tensor> {
            self.broadcast_add(rhs)
        }
    }

    impl std::ops::Add<&Tensor> for Tensor {
        type Output = Result<Tensor>;
        fn add(self, rhs: &Tensor) -> Result<Tensor> {
            self.broadcast_add(rhs)
        }
    }

    /// A layer whose `forward` takes `&Tensor`.
    pub struct Layer(pub f32);

    impl Layer {
        pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
            let data = x.data.iter().map(|v| v * self.0).collect();
            Ok(Tensor::new("layer", data, x.dims.clone()))
        }
    }
}

/// A burn-style tensor: ops take `self` by value.
pub mod burn_like {
    use super::support::step_drop;

    #[derive(Debug, PartialEq)]
    pub struct Tensor {
        pub name: &'static str,
        pub data: Vec<f32>,
    }

    impl vramguard::DropAtLastUse for Tensor {}

    impl Drop for Tensor {
        fn drop(&mut self) {
            step_drop(self.name);
        }
    }

    impl Tensor {
        pub fn matmul(self, other: Tensor) -> Tensor {
            let data = self
                .data
                .iter()
                .zip(&other.data)
                .map(|(a, b)| a * b)
                .collect();
            Tensor {
                name: "matmul",
                data,
            }
        }
        pub fn swap_dims(self) -> Tensor {
            Tensor {
                name: "swapped",
                data: self.data.clone(),
            }
        }
    }

    pub struct Linear(pub f32);

    impl Linear {
        pub fn forward(&self, x: Tensor) -> Tensor {
            Tensor {
                name: "linear",
                data: x.data.iter().map(|v| v * self.0).collect(),
            }
        }
    }
}

/// Methods named like owned tensor ops that borrow in other libraries.
pub mod borrowing_names {
    /// candle-nn's `VarMap`-like holder: `data()` returns the mutex inside.
    pub struct Holder(pub std::sync::Mutex<Vec<i32>>);

    impl Holder {
        pub fn data(&self) -> &std::sync::Mutex<Vec<i32>> {
            &self.0
        }
    }

    /// Trains one step, logging into `history` (both arguments `&mut`).
    pub fn train(gan: &mut [usize], history: &mut Vec<usize>) {
        gan[0] += 1;
        history.push(gan.len());
    }

    /// rten's `OpRunContext`: `with_new_inputs` returns a context that borrows its argument
    /// through a named lifetime (not the receiver, as elision would).
    pub struct Ctx<'a>(pub &'a [super::support::T]);

    impl<'a> Ctx<'a> {
        pub fn with_new_inputs<'b>(&self, inputs: &'b [super::support::T]) -> Ctx<'b> {
            Ctx(inputs)
        }
        pub fn run(&self) -> i64 {
            self.0.iter().map(|t| t.v).sum::<i64>() + self.0.len() as i64
        }
    }

    /// smartcore's `Array1::zeros`: a trait constructor on `Vec` whose element type comes from
    /// later uses.
    pub trait Zeros {
        fn zeros(n: usize) -> Self;
        fn add_mut(&mut self, k: f64);
    }

    impl<E: Copy + Default + From<f64> + std::ops::AddAssign> Zeros for Vec<E> {
        fn zeros(n: usize) -> Self {
            vec![E::default(); n]
        }
        fn add_mut(&mut self, k: f64) {
            self.iter_mut().for_each(|x| *x += E::from(k));
        }
    }

    /// A builder borrowing the holder (`VarBuilder::from_varmap(&varmap, ..)`).
    pub struct Builder<'a>(pub &'a Holder);

    /// ndarray-like: `view`, `t` and `slice` return views into the array.
    pub struct Array(pub Vec<f32>);

    pub struct View<'a>(pub &'a [f32]);

    impl Array {
        pub fn view(&self) -> View<'_> {
            View(&self.0)
        }
        pub fn t(&self) -> View<'_> {
            View(&self.0)
        }
        pub fn slice(&self, n: usize) -> View<'_> {
            View(&self.0[..n])
        }
    }

    /// scraper-like: `select` yields borrowed elements of the document.
    pub struct Document(pub Vec<String>);

    impl Document {
        pub fn select<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a String> + 'a {
            self.0.iter().filter(move |s| s.starts_with(prefix))
        }
    }

    /// A model whose `forward` returns a prediction borrowing the model (lifetime elision).
    pub struct Model(pub Vec<String>);

    pub struct Prediction<'a> {
        pub best: &'a str,
    }

    impl Model {
        pub fn forward(&self, input: &[String]) -> Prediction<'_> {
            let index = input.len() % self.0.len();
            Prediction {
                best: &self.0[index],
            }
        }
    }
}

macro_rules! cases {
    ($($attr:meta)?) => {
        #[allow(unused_imports)]
        use super::support::{mk, step, T};
        use super::candle_like::{Layer, Result, Tensor};
        use std::collections::{HashMap, HashSet};

        fn t(name: &'static str, v: f32) -> Tensor {
            Tensor::new(name, vec![v, v + 1.0], vec![1, 2, 1])
        }

        /// Idiom 1: a `mut` local updated in an `if let`, then shadowing `let`s reading it.
        $(#[$attr])?
        pub fn mut_then_shadowing(pos: Option<&Layer>, norm: &Layer, dropout: &Layer) -> Result<Vec<f32>> {
            let a = t("a", 1.0);
            let b = t("b", 2.0);
            let mut xs = (&a + &b)?;
            if let Some(p) = pos {
                xs = xs.broadcast_add(&p.forward(&a)?)?
            }
            step("1");
            let xs = norm.forward(&xs)?;
            let xs = dropout.forward(&xs)?;
            step("2");
            Ok(xs.data.clone())
        }

        /// Idiom 2: a borrow of the local used in the statement that last uses the local.
        $(#[$attr])?
        pub fn borrow_in_last_use(mlp: &Layer, norm2: &Layer) -> Result<Vec<f32>> {
            let x = t("x", 1.0);
            let residual = &x;
            let x = (mlp.forward(&norm2.forward(&x)?)? + residual)?;
            step("1");
            Ok(x.data.clone())
        }

        /// Idiom 3: `dims()` borrowed, then used in the last-use statement.
        $(#[$attr])?
        pub fn dims_in_last_use() -> Result<Vec<usize>> {
            let x = t("x", 1.0);
            let d = x.dims();
            let x = x.permute((0, 2, 1))?.reshape((d[0], d[2], 16, 16))?;
            step("1");
            Ok(x.dims().to_vec())
        }

        /// Idiom 4 (burn): by-value parameters moved into calls, then a later statement.
        $(#[$attr])?
        pub fn by_value_params(
            query_layer: &super::burn_like::Linear,
            query: super::burn_like::Tensor,
            context: super::burn_like::Tensor,
        ) -> Vec<f32> {
            let q = query_layer.forward(query);
            let v = query_layer.forward(context);
            step("1");
            let scores = q.matmul(v.swap_dims());
            step("2");
            scores.data.clone()
        }

        /// Borrows carried by a loop variable into a collection outside the loop.
        $(#[$attr])?
        pub fn loop_variable_borrows() -> usize {
            let text = String::from("a bb ccc");
            let mut words = Vec::new();
            for w in text.split_whitespace() {
                words.push(w)
            }
            step("1");
            words.iter().map(|w| w.len()).sum()
        }

        /// Borrows carried by a closure parameter.
        $(#[$attr])?
        pub fn closure_parameter_borrows() -> usize {
            let names = vec![String::from("x"), String::from("yy")];
            let mut refs: Vec<&String> = Vec::new();
            names.iter().for_each(|n| refs.push(n));
            step("1");
            refs.len()
        }

        /// A borrow carried by an `if let` binding into the `let`'s value.
        $(#[$attr])?
        pub fn if_let_binding_borrows() -> String {
            let map: HashMap<String, String> = HashMap::from([("k".to_string(), "v".to_string())]);
            let k = String::from("k");
            let l = if let Some(v) = map.get(&k) { v.as_str() } else { "?" };
            step("1");
            l.to_string()
        }

        /// A labeled block's `break` value borrowing a local.
        $(#[$attr])?
        pub fn labeled_block_borrows() -> usize {
            let data = vec![1, 2, 3];
            let first = 'found: {
                for d in &data {
                    if *d > 1 {
                        break 'found d;
                    }
                }
                &0
            };
            step("1");
            *first
        }

        /// A borrow stored through a `&mut` alias.
        $(#[$attr])?
        pub fn stored_through_mut_alias() -> usize {
            let owned = String::from("owned");
            let mut names: Vec<&String> = Vec::new();
            let sink = &mut names;
            sink.push(&owned);
            step("1");
            names.len()
        }

        /// ndarray-like `view`, `t`, `slice`: names of owned tensor ops, borrowing here.
        $(#[$attr])?
        pub fn borrowing_views() -> f32 {
            let a = super::borrowing_names::Array(vec![1.0, 2.0, 3.0]);
            let v = a.view();
            let tr = a.t();
            let s = a.slice(2);
            step("1");
            v.0[0] + tr.0[1] + s.0[1]
        }

        /// scraper-like `select` and a `forward` returning a borrowing prediction.
        $(#[$attr])?
        pub fn borrowing_select_and_forward() -> String {
            let doc = super::borrowing_names::Document(vec!["ab".into(), "ac".into(), "b".into()]);
            let hits: Vec<&String> = doc.select("a").collect();
            let model = super::borrowing_names::Model(vec!["cat".into(), "dog".into()]);
            let input = vec![String::from("first")];
            let prediction = model.forward(&input);
            step("1");
            format!("{} {}", hits.len(), prediction.best)
        }

        /// std constructors whose result borrows their argument.
        $(#[$attr])?
        pub fn borrowing_constructors() -> usize {
            let buf = vec![b'h', b'i'];
            let text = String::from_utf8_lossy(&buf);
            let sentence = String::from("a b a");
            let set: HashSet<&str> = HashSet::from_iter(sentence.split_whitespace());
            let w = String::from("w");
            let map = HashMap::from([("w", &w)]);
            let held = vec![&w];
            let copied = held.clone();
            let listed = held.to_vec();
            step("1");
            text.len() + set.len() + map.len() + copied.len() + listed.len()
        }

        /// A guard taken through an accessor, as candle-nn's tests read a `VarMap`:
        /// `let data = varmap.data().lock().unwrap();` keeps `varmap` to the guard's drop.
        $(#[$attr])?
        pub fn guard_through_accessor() -> usize {
            let varmap = super::borrowing_names::Holder(std::sync::Mutex::new(vec![1, 2]));
            let builder = super::borrowing_names::Builder(&varmap);
            let n = builder.0.data().lock().unwrap().len();
            let data = varmap.data().lock().unwrap();
            assert!(data.contains(&1));
            assert!(data.contains(&2));
            n
        }

        /// dfdx's tape: a `move` closure captures values it only borrows inside
        /// (`tape.add_backward_op(move |grads| grads.alloc(&lhs_ghost))`).
        $(#[$attr])?
        pub fn move_closure_captures() -> usize {
            let ghost = t("ghost", 1.0);
            let out = t("out", 2.0);
            let mut tape: Vec<Box<dyn FnOnce() -> usize>> = Vec::new();
            step("0");
            tape.push(Box::new(move || ghost.dims().len() + out.data.len()));
            step("1");
            tape.into_iter().map(|op| op()).sum()
        }

        /// Boxed closures borrowing a local (the `inplace` example's table of cases), and a
        /// call that stores two `&mut` arguments into each other (the GAN bench's history).
        $(#[$attr])?
        pub fn boxed_closures_and_mutual_stores() -> usize {
            let device = vec![1usize, 2, 3];
            let rows: [Box<dyn Fn() -> usize + '_>; 2] =
                [Box::new(|| device.len()), Box::new(|| device[0])];
            let total: usize = rows.iter().map(|row| row()).sum();
            let n = device.len();
            step("1");
            let mut history: Vec<usize> = Vec::new();
            let mut gan = vec![total];
            super::borrowing_names::train(&mut gan, &mut history);
            step("2");
            drop(history);
            step("3");
            total + n
        }

        /// Uppercase locals.
        #[allow(non_snake_case)]
        $(#[$attr])?
        pub fn uppercase_locals() -> usize {
            let data = vec![1, 2, 3];
            let X = &data;
            let N = X.len();
            step("1");
            N + X[0]
        }

        /// A method's output that borrows a reference argument (rten's
        /// `let concat_ctx = ctx.with_new_inputs(&concat_inputs)`): the argument lives as long
        /// as the output, not only to its own last mention.
        $(#[$attr])?
        pub fn output_borrows_an_argument() -> i64 {
            let outer = vec![mk("outer", 1)];
            let ctx = super::borrowing_names::Ctx(&outer);
            let concat_inputs = vec![mk("a", 2), mk("b", 3)];
            let concat_ctx = ctx.with_new_inputs(&concat_inputs);
            step("1");
            concat_ctx.run()
        }

        /// A value moved by a `for` loop while a value computed from a borrow of it is used in
        /// the loop (rten's timing table: `col_widths` from `rows.iter()`, then
        /// `for row in rows`): the loop moves it; nothing is dropped after the loop.
        $(#[$attr])?
        pub fn moved_by_a_loop_while_a_borrower_lives() -> usize {
            let rows: Vec<[String; 2]> = vec![
                ["a".to_string(), "bb".to_string()],
                ["ccc".to_string(), "d".to_string()],
            ];
            let col_widths: Vec<usize> = (0..2)
                .map(|col| rows.iter().fold(0, |width, row| row[col].len().max(width)))
                .collect();
            let scratch = mk("scratch", 1);
            let mut total = scratch.v as usize;
            for row in rows {
                total += row[0].len() + col_widths[0] + row[1].len() + col_widths[1];
            }
            step("1");
            total
        }

        /// Generic element types known only from later uses (smartcore's lasso optimizer):
        /// `Vec::zeros(2 * p)` through a trait, and `u.clone()` of such a `u`, both used in a
        /// loop that may move them. Their probes cannot be placed before the loop.
        $(#[$attr])?
        pub fn generic_elements_known_late<E>(p: usize, rounds: usize) -> f64
        where
            E: Copy + Default + From<f64> + Into<f64> + std::ops::AddAssign,
        {
            use super::borrowing_names::Zeros;
            let mut grad = Vec::zeros(2 * p);
            let u = Vec::zeros(p);
            let mut newu = u.clone();
            let marker = mk("marker", 1);
            for _ in 0..rounds {
                grad.add_mut(1.0);
                newu.add_mut(0.5);
                let g: &Vec<E> = &grad;
                let n: &Vec<E> = &newu;
                step("round");
                assert!(g.len() == 2 * n.len());
            }
            let total: f64 = grad.iter().map(|&x| x.into()).sum();
            total + marker.v as f64
        }

        $(#[$attr])?
        pub fn generic_elements_known_late_f64() -> f64 {
            generic_elements_known_late::<f64>(2, 3)
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
    use candle_like::Layer;
    let (pos, norm, dropout) = (Layer(0.5), Layer(2.0), Layer(1.0));
    check!(mut_then_shadowing(Some(&pos), &norm, &dropout) => earlier);
    check!(mut_then_shadowing(None, &norm, &dropout) => earlier);
    check!(borrow_in_last_use(&norm, &dropout));
    check!(dims_in_last_use() => earlier);
    let linear = burn_like::Linear(2.0);
    let b = |name, v: f32| burn_like::Tensor {
        name,
        data: vec![v, v],
    };
    // Every tensor is consumed by the op that uses it: nothing is left to free early.
    check!(by_value_params(&linear, b("query", 1.0), b("context", 2.0)));
    check!(loop_variable_borrows());
    check!(closure_parameter_borrows());
    check!(if_let_binding_borrows());
    check!(labeled_block_borrows());
    check!(stored_through_mut_alias());
    check!(borrowing_views());
    check!(borrowing_select_and_forward());
    check!(borrowing_constructors());
    check!(guard_through_accessor());
    check!(move_closure_captures());
    check!(boxed_closures_and_mutual_stores());
    check!(uppercase_locals());
    check!(output_borrows_an_argument());
    check!(moved_by_a_loop_while_a_borrower_lives());
    check!(generic_elements_known_late_f64());
}
