//! The last shapes of third-party code that broke under the attributes (issue #43), each run
//! plain, under `#[inference]` and in a `#[batch_scope]` loop, and compared (the rule of
//! `drop_support::compare`: same results, every other event in place, `free`s only earlier):
//!
//! 1. a `mut` local reassigned inside an `if` while a borrow taken from it earlier feeds the
//!    condition and the new value (`let dims = xs.dims(); if dims.len() == 3 { xs =
//!    xs.reshape(..)?; }`, E0506 before), with `match`, a loop around it, a method chain on the
//!    right-hand side, `else if` two and three deep, and a borrower that is no reference by its
//!    syntax (an iterator over the dims);
//! 2. a by-value parameter cloned and borrowed at the top, then consumed only in the `else` arm
//!    of an `if` nested in an `if let` (burn's by-value ops, `let shape = labels.dims();`, E0382
//!    before), with the same variations;
//! 3. values that a call's result still borrows: `groups.last_mut()` receiving `&word` (outside
//!    and inside scoped loops), a view constructor `View::from_slice(&data, r, c)`, a
//!    regex-style `re.find(&line)?` in a function returning `Option`, an AST node's `kind()`
//!    returning `&Kind`, and a builder's consuming `data(self)`.
//!
//! Every program also holds a `Mem` that dies early, so each comparison must show an earlier
//! `free` (a transform that did nothing would fail).

use crate::support as drop_support;

use drop_support::{compare, Outcome};

/// Tensor-like types over `Mem` (every drop logs `free NAME`).
pub mod tensors {
    use super::drop_support::{ev, Mem};

    pub type Result<T> = std::result::Result<T, String>;

    /// candle-style: `&self` ops returning `Result<Tensor>`, `dims()` a reference.
    #[derive(Debug)]
    pub struct CTensor {
        #[allow(dead_code)] // held for its drop: the `free` event the comparison reads
        pub mem: Mem,
        pub dims: Vec<usize>,
        pub tag: String,
    }

    impl vramguard::DropAtLastUse for CTensor {}

    impl CTensor {
        pub fn new(tag: &str, dims: &[usize]) -> CTensor {
            CTensor {
                mem: Mem::new(tag, dims.iter().product()),
                dims: dims.to_vec(),
                tag: tag.to_string(),
            }
        }
        pub fn dims(&self) -> &[usize] {
            &self.dims
        }
        pub fn reshape(&self, dims: (usize, usize)) -> Result<CTensor> {
            if dims.0 * dims.1 != self.dims.iter().product::<usize>() {
                return Err(format!("cannot reshape {:?} to {dims:?}", self.dims));
            }
            ev(format!("reshape {}", self.tag));
            Ok(CTensor::new(&format!("r({})", self.tag), &[dims.0, dims.1]))
        }
        pub fn transpose(&self) -> Result<CTensor> {
            let mut dims = self.dims.clone();
            dims.reverse();
            Ok(CTensor::new(&format!("t({})", self.tag), &dims))
        }
        pub fn contiguous(&self) -> Result<CTensor> {
            Ok(CTensor::new(&format!("c({})", self.tag), &self.dims))
        }
        pub fn summary(&self) -> (String, Vec<usize>) {
            (self.tag.clone(), self.dims.clone())
        }
    }

    impl Clone for CTensor {
        fn clone(&self) -> CTensor {
            CTensor::new(&format!("{}'", self.tag), &self.dims)
        }
    }

    /// A layer whose `forward` takes `&CTensor`.
    pub struct Model;

    impl Model {
        pub fn forward(&self, xs: &CTensor) -> Result<CTensor> {
            ev(format!("forward {}", xs.tag));
            Ok(CTensor::new(&format!("f({})", xs.tag), &xs.dims))
        }
    }

    /// burn-style: ops take `self` by value, `dims()` an owned array.
    #[derive(Debug)]
    pub struct BTensor {
        #[allow(dead_code)] // held for its drop: the `free` event the comparison reads
        pub mem: Mem,
        pub values: Vec<i64>,
        pub tag: String,
    }

    impl vramguard::DropAtLastUse for BTensor {}

    impl BTensor {
        pub fn new(tag: &str, values: Vec<i64>) -> BTensor {
            BTensor {
                mem: Mem::new(tag, values.len()),
                values,
                tag: tag.to_string(),
            }
        }
        fn map(self, op: &str, f: impl Fn(i64) -> i64) -> BTensor {
            ev(format!("{op} {}", self.tag));
            let values = self.values.iter().map(|v| f(*v)).collect();
            BTensor::new(&format!("{op}({})", self.tag), values)
        }
        pub fn dims(&self) -> [usize; 2] {
            [1, self.values.len()]
        }
        pub fn float(self) -> BTensor {
            self.map("float", |v| v)
        }
        pub fn expand(self, shape: [usize; 2]) -> BTensor {
            let len = shape[1] as i64;
            self.map("expand", move |v| v * len)
        }
        pub fn gather(self, _dim: usize, index: BTensor) -> BTensor {
            let offset: i64 = index.values.iter().sum();
            self.map("gather", move |v| v + offset)
        }
        pub fn flatten(self, _start: usize, _end: usize) -> BTensor {
            self.map("flatten", |v| v)
        }
        // burn's name for it.
        #[allow(clippy::should_implement_trait)]
        pub fn neg(self) -> BTensor {
            self.map("neg", |v| -v)
        }
        pub fn mean(self) -> i64 {
            ev(format!("mean {}", self.tag));
            self.values.iter().sum::<i64>() / self.values.len().max(1) as i64
        }
    }

    impl Clone for BTensor {
        fn clone(&self) -> BTensor {
            BTensor::new(&format!("{}'", self.tag), self.values.clone())
        }
    }

    impl std::ops::Mul for BTensor {
        type Output = BTensor;
        fn mul(self, rhs: BTensor) -> BTensor {
            ev(format!("mul {} {}", self.tag, rhs.tag));
            let values = self
                .values
                .iter()
                .zip(rhs.values.iter().cycle())
                .map(|(a, b)| a * b)
                .collect();
            BTensor::new(&format!("{}*{}", self.tag, rhs.tag), values)
        }
    }

    /// Checks two tensors against each other (borrows both).
    pub fn check(a: &BTensor, b: &BTensor) {
        ev(format!("check {} {}", a.tag, b.tag));
    }

    /// How the weights are applied.
    #[derive(Clone, Copy, Debug)]
    pub enum Mode {
        Expand,
        Gather,
        Negate,
    }

    /// A view over borrowed data (ndarray's `ArrayView::from_shape`).
    pub struct View<'a> {
        pub data: &'a [i64],
        pub rows: usize,
        pub cols: usize,
    }

    impl<'a> View<'a> {
        pub fn from_slice(data: &'a [i64], rows: usize, cols: usize) -> View<'a> {
            View { data, rows, cols }
        }
        pub fn row_sum(&self, row: usize) -> i64 {
            self.data[row * self.cols..(row + 1) * self.cols]
                .iter()
                .sum()
        }
    }

    /// A regex-style matcher whose match borrows the haystack.
    pub struct Finder(pub char);

    pub struct Found<'h> {
        pub text: &'h str,
    }

    impl Finder {
        pub fn find<'h>(&self, haystack: &'h str) -> Option<Found<'h>> {
            haystack.find(self.0).map(|at| Found {
                text: &haystack[at..],
            })
        }
    }

    /// An AST node whose `kind()` is a reference into it.
    pub enum Kind {
        Word(String),
        Number(i64),
    }

    pub struct Node {
        pub kind: Kind,
    }

    impl Node {
        pub fn kind(&self) -> &Kind {
            &self.kind
        }
    }

    /// A builder whose `data(self)` consumes it.
    pub struct Builder {
        pub bytes: Vec<u8>,
    }

    impl Builder {
        pub fn data(self) -> Vec<u8> {
            ev("built");
            self.bytes
        }
    }
}

macro_rules! cases {
    ($($inference:meta, $batch:meta)?) => {
        #[allow(unused_imports)]
        use super::drop_support::{ev, Mem};
        #[allow(unused_imports)]
        use super::tensors::{
            check, BTensor, Builder, CTensor, Finder, Kind, Mode, Model, Node, Result, View,
        };

        /// A loss with optional class weights (burn's `CrossEntropyLoss`), one type per
        /// module so that each stamps its own methods.
        pub struct Loss {
            pub weights: Option<BTensor>,
        }

        impl Loss {
            fn of(weights: bool) -> Loss {
                Loss {
                    weights: weights.then(|| BTensor::new("w", vec![2, 3])),
                }
            }
        }

        fn inputs() -> (BTensor, BTensor) {
            (BTensor::new("x", vec![1, 2]), BTensor::new("labels", vec![3, 4]))
        }

        pub fn weighted_of(weights: bool, cond: bool) -> i64 {
            let (x, labels) = inputs();
            Loss::of(weights).weighted(x, labels, cond)
        }

        pub fn weighted_match_of(weights: bool, mode: Mode) -> i64 {
            let (x, labels) = inputs();
            Loss::of(weights).weighted_match(x, labels, mode)
        }

        pub fn weighted_else_if_of(weights: bool, mode: Mode) -> i64 {
            let (x, labels) = inputs();
            Loss::of(weights).weighted_else_if(x, labels, mode)
        }

        pub fn weighted_else_if_three_of(weights: bool, k: usize) -> i64 {
            let (x, labels) = inputs();
            Loss::of(weights).weighted_else_if_three(x, labels, k)
        }

        pub fn weighted_in_a_loop_of(weights: bool, rounds: usize) -> i64 {
            let (x, labels) = inputs();
            Loss::of(weights).weighted_in_a_loop(x, labels, rounds)
        }

        pub fn weighted_scoped_of(weights: bool, cond: bool) -> Vec<i64> {
            let batches = vec![inputs(), inputs()];
            Loss::of(weights).weighted_scoped(batches, cond)
        }

        // ---- 1. a `mut` local reassigned while a borrow of it feeds the condition -----------

        $(#[$inference])?
        pub fn reassigned_in_if(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims();
            if dims.len() == 3 {
                xs = xs.reshape((dims[0] * dims[1], dims[2]))?;
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        $(#[$inference])?
        pub fn reassigned_in_match(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims();
            match dims.len() {
                3 => xs = xs.reshape((dims[0] * dims[1], dims[2]))?,
                4 => {
                    xs = xs.reshape((dims[0] * dims[1] * dims[2], dims[3]))?;
                    ev("four");
                }
                _ => {}
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        $(#[$inference])?
        pub fn reassigned_in_a_loop(model: &Model, input: &CTensor, steps: usize) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            for step in 0..steps {
                let dims = xs.dims();
                if dims.len() == 2 && dims[0] > 1 {
                    xs = xs.reshape((dims[0] / 2, dims[1] * 2))?;
                }
                ev(format!("step {step}"));
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        $(#[$inference])?
        pub fn reassigned_by_a_chain(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims();
            if dims.len() == 3 {
                xs = xs
                    .transpose()?
                    .reshape((dims[0] * dims[1], dims[2]))?
                    .contiguous()?;
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        $(#[$inference])?
        pub fn reassigned_else_if(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims();
            if dims.len() == 4 {
                xs = xs.reshape((dims[0] * dims[1] * dims[2], dims[3]))?;
            } else if dims.len() == 3 {
                xs = xs.reshape((dims[0] * dims[1], dims[2]))?;
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        $(#[$inference])?
        pub fn reassigned_else_if_three(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims();
            if dims.len() == 4 {
                xs = xs.reshape((dims[0] * dims[1] * dims[2], dims[3]))?;
            } else if dims.len() == 3 {
                xs = xs.reshape((dims[0] * dims[1], dims[2]))?;
            } else if dims[0] == 1 {
                xs = xs.contiguous()?;
                ev("one row");
            } else {
                ev("unchanged");
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        /// The borrower is no reference by its syntax: an iterator over the dims.
        $(#[$inference])?
        pub fn reassigned_iterator_borrow(model: &Model, input: &CTensor) -> Result<(String, Vec<usize>)> {
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            let mut xs = input.clone();
            let dims = xs.dims().iter();
            if dims.len() == 3 {
                let lead: usize = dims.clone().take(2).product();
                xs = xs.reshape((lead, dims.clone().last().copied().unwrap_or(1)))?;
            }
            let ys = model.forward(&xs)?;
            ev("after");
            Ok(ys.summary())
        }

        // Plain summaries (strings, sizes) are collected, not tensors.
        $(#[$batch])?
        #[vramguard::allow(accumulates_across_iterations)]
        pub fn reassigned_scoped(model: &Model, inputs: &[CTensor]) -> Result<Vec<(String, Vec<usize>)>> {
            let mut out = Vec::new();
            for input in inputs {
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let mut xs = input.clone();
                let dims = xs.dims();
                if dims.len() == 3 {
                    xs = xs.reshape((dims[0] * dims[1], dims[2]))?;
                } else if dims.len() == 4 {
                    xs = xs
                        .reshape((dims[0] * dims[1] * dims[2], dims[3]))?
                        .contiguous()?;
                }
                let ys = model.forward(&xs)?;
                ev("after");
                out.push(ys.summary());
            }
            Ok(out)
        }

        $(#[$batch])?
        #[vramguard::allow(accumulates_across_iterations)]
        pub fn reassigned_scoped_match(model: &Model, inputs: &[CTensor]) -> Result<Vec<(String, Vec<usize>)>> {
            let mut out = Vec::new();
            for input in inputs {
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let mut xs = input.clone();
                let dims = xs.dims();
                match dims.len() {
                    3 => xs = xs.reshape((dims[0] * dims[1], dims[2]))?,
                    _ => ev("kept"),
                }
                let ys = model.forward(&xs)?;
                out.push(ys.summary());
            }
            Ok(out)
        }

        // ---- 2. a by-value parameter consumed only in a nested `else` ------------------------

        impl Loss {
            $(#[$inference])?
            pub fn weighted(&self, x: BTensor, labels: BTensor, cond: bool) -> i64 {
                check(&x, &labels);
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let y = labels.clone().float();
                let shape = labels.dims();
                let mut out = y * x;
                if let Some(w) = &self.weights {
                    let w = if cond {
                        w.clone().expand(shape)
                    } else {
                        w.clone().gather(0, labels.flatten(0, 0)).expand(shape)
                    };
                    out = out * w;
                }
                ev("before mean");
                out.mean()
            }

            $(#[$inference])?
            pub fn weighted_match(&self, x: BTensor, labels: BTensor, mode: Mode) -> i64 {
                check(&x, &labels);
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let y = labels.clone().float();
                let shape = labels.dims();
                let mut out = y * x;
                if let Some(w) = &self.weights {
                    let w = match mode {
                        Mode::Expand => w.clone().expand(shape),
                        Mode::Gather => w.clone().gather(0, labels.flatten(0, 0)).expand(shape),
                        Mode::Negate => {
                            ev("negate");
                            w.clone().neg()
                        }
                    };
                    out = out * w;
                }
                ev("before mean");
                out.mean()
            }

            $(#[$inference])?
            pub fn weighted_else_if(&self, x: BTensor, labels: BTensor, mode: Mode) -> i64 {
                check(&x, &labels);
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let y = labels.clone().float();
                let shape = labels.dims();
                let mut out = y * x;
                if let Some(w) = &self.weights {
                    let w = if matches!(mode, Mode::Expand) {
                        w.clone().expand(shape)
                    } else if matches!(mode, Mode::Gather) {
                        w.clone().gather(0, labels.flatten(0, 0).neg()).expand(shape)
                    } else {
                        w.clone().neg()
                    };
                    out = out * w;
                }
                ev("before mean");
                out.mean()
            }

            $(#[$inference])?
            pub fn weighted_else_if_three(&self, x: BTensor, labels: BTensor, k: usize) -> i64 {
                check(&x, &labels);
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let y = labels.clone().float();
                let shape = labels.dims();
                let mut out = y * x;
                if let Some(w) = &self.weights {
                    let w = if k == 0 {
                        w.clone().expand(shape)
                    } else if k == 1 {
                        w.clone().neg().expand(shape)
                    } else if k == 2 {
                        w.clone().gather(0, labels.flatten(0, 0)).expand(shape)
                    } else {
                        ev("unweighted");
                        w.clone()
                    };
                    out = out * w;
                }
                ev("before mean");
                out.mean()
            }

            /// The `if let` inside a loop that leaves after its first pass, the labels
            /// consumed on one path (`return`).
            $(#[$inference])?
            #[vramguard::allow(graph_across_iterations)]
            pub fn weighted_in_a_loop(&self, x: BTensor, labels: BTensor, rounds: usize) -> i64 {
                check(&x, &labels);
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                let shape = labels.dims();
                let mut out = labels.clone().float() * x;
                for round in 0..rounds {
                    if let Some(w) = &self.weights {
                        if round + 1 < rounds {
                            out = out * w.clone().expand(shape);
                        } else {
                            let w = w.clone().gather(0, labels.flatten(0, 0)).expand(shape);
                            return (out * w).mean();
                        }
                    }
                    ev(format!("round {round}"));
                }
                ev("before mean");
                out.mean()
            }

            $(#[$batch])?
            #[vramguard::allow(accumulates_across_iterations)]
            pub fn weighted_scoped(&self, batches: Vec<(BTensor, BTensor)>, cond: bool) -> Vec<i64> {
                let mut means = Vec::new();
                for (x, labels) in batches {
                    check(&x, &labels);
                    let early = Mem::new("early", 4);
                    ev(format!("early {}", early.len()));
                    let y = labels.clone().float();
                    let shape = labels.dims();
                    let mut out = y * x;
                    if let Some(w) = &self.weights {
                        let w = if cond {
                            w.clone().expand(shape)
                        } else {
                            w.clone().gather(0, labels.flatten(0, 0)).expand(shape)
                        };
                        out = out * w;
                    }
                    means.push(out.mean());
                }
                means
            }
        }

        // ---- 3. values that a call's result still borrows -------------------------------------

        $(#[$inference])?
        pub fn pushed_through_last_mut(words: &[&str]) -> (usize, usize) {
            let mut groups: Vec<Vec<&String>> = vec![Vec::new()];
            let word = words[0].to_string();
            if let Some(g) = groups.last_mut() {
                g.push(&word)
            }
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            ev("after");
            (groups.len(), groups[0][0].len())
        }

        $(#[$batch])?
        pub fn pushed_through_last_mut_scoped(words: &[&str]) -> Vec<usize> {
            let mut sizes = Vec::new();
            for w in words {
                let word = w.to_string();
                let mut groups: Vec<Vec<&String>> = vec![Vec::new()];
                if let Some(g) = groups.last_mut() {
                    g.push(&word)
                }
                let early = Mem::new("early", 4);
                ev(format!("early {}", early.len()));
                ev("after");
                sizes.push(groups[0][0].len());
            }
            sizes
        }

        /// The groups outlive the loop: the word they borrow is the loop's pattern.
        $(#[$batch])?
        pub fn pushed_into_outer_groups(words: &[String]) -> Vec<usize> {
            let mut groups: Vec<Vec<&String>> = vec![Vec::new()];
            for word in words {
                let early = Mem::new("early", 4);
                if word.is_empty() {
                    groups.push(Vec::new());
                    continue;
                }
                ev(format!("early {}", early.len()));
                if let Some(g) = groups.last_mut() {
                    g.push(word)
                }
                ev("after");
            }
            groups.iter().map(|g| g.len()).collect()
        }

        $(#[$inference])?
        pub fn view_constructor(rows: usize) -> i64 {
            let data: Vec<i64> = (0..rows as i64 * 3).collect();
            let view = View::from_slice(&data, rows, 3);
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            ev("after");
            view.row_sum(rows - 1) + view.rows as i64
        }

        $(#[$inference])?
        pub fn found_in_haystack(finder: &Finder, text: &str) -> Option<usize> {
            let line = text.to_uppercase();
            let found = finder.find(&line)?;
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            ev("after");
            Some(found.text.len())
        }

        $(#[$inference])?
        pub fn kind_of_node(node: Node) -> i64 {
            let kind = node.kind();
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            ev("after");
            match kind {
                Kind::Word(word) => word.len() as i64,
                Kind::Number(n) => *n,
            }
        }

        $(#[$inference])?
        pub fn consuming_data(builder: Builder) -> usize {
            let data = builder.data();
            let n = data.len();
            let early = Mem::new("early", 4);
            ev(format!("early {}", early.len()));
            ev("after");
            n + 1
        }
    };
}

mod with {
    cases!(vramguard::inference, vramguard::batch_scope);
}

mod without {
    cases!();
}

use tensors::{Builder, CTensor, Finder, Kind, Mode, Model, Node};

/// Compares `without::$f(args)` with `with::$f(args)`; at least one `free` must be earlier.
macro_rules! run {
    ($($f:ident)::+ ( $($arg:expr),* )) => {{
        let outcome: Outcome = compare(
            stringify!($($f)::+),
            || without::$($f)::+($($arg),*),
            || with::$($f)::+($($arg),*),
        );
        assert!(outcome.earlier > 0, "{}: nothing freed earlier: {outcome:?}", stringify!($($f)::+));
        outcome
    }};
}

#[test]
fn a_local_reassigned_while_its_dims_feed_the_condition() {
    let model = Model;
    for dims in [&[2, 3, 4][..], &[2, 3, 4, 5], &[1, 6], &[4, 2]] {
        let input = CTensor::new("in", dims);
        run!(reassigned_in_if(&model, &input));
        run!(reassigned_in_match(&model, &input));
        run!(reassigned_in_a_loop(&model, &input, 3));
        run!(reassigned_by_a_chain(&model, &input));
        run!(reassigned_else_if(&model, &input));
        run!(reassigned_else_if_three(&model, &input));
        run!(reassigned_iterator_borrow(&model, &input));
    }
    let inputs = vec![
        CTensor::new("a", &[2, 3, 4]),
        CTensor::new("b", &[2, 3, 4, 5]),
        CTensor::new("c", &[3, 2]),
    ];
    run!(reassigned_scoped(&model, &inputs));
    run!(reassigned_scoped_match(&model, &inputs));
}

#[test]
fn a_by_value_parameter_consumed_only_in_a_nested_else() {
    for weights in [true, false] {
        for cond in [true, false] {
            run!(weighted_of(weights, cond));
        }
        for mode in [Mode::Expand, Mode::Gather, Mode::Negate] {
            run!(weighted_match_of(weights, mode));
            run!(weighted_else_if_of(weights, mode));
        }
        for k in 0..4 {
            run!(weighted_else_if_three_of(weights, k));
        }
        for rounds in [1, 3] {
            run!(weighted_in_a_loop_of(weights, rounds));
        }
        for cond in [true, false] {
            run!(weighted_scoped_of(weights, cond));
        }
    }
}

#[test]
fn values_a_call_result_still_borrows_are_kept() {
    run!(pushed_through_last_mut(&["alpha", "beta"]));
    run!(pushed_through_last_mut_scoped(&["alpha", "beta", "gamma"]));
    let words: Vec<String> = ["a", "bb", "", "ccc"].map(String::from).to_vec();
    run!(pushed_into_outer_groups(&words));
    run!(view_constructor(3));
    let finder = Finder('B');
    run!(found_in_haystack(&finder, "abc"));
    let outcome = compare(
        "found_in_haystack (no match)",
        || without::found_in_haystack(&finder, "xyz"),
        || with::found_in_haystack(&finder, "xyz"),
    );
    assert_eq!(outcome.with, Vec::<String>::new());
    run!(kind_of_node(Node {
        kind: Kind::Word("leaf".into())
    }));
    run!(kind_of_node(Node {
        kind: Kind::Number(7)
    }));
    run!(consuming_data(Builder {
        bytes: vec![1, 2, 3]
    }));
}
