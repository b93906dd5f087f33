//! The lint rules on small functions: what fires, and the shapes that must stay silent.

use super::*;
use proc_macro2::TokenStream;
use quote::{quote, ToTokens};

struct Linted {
    warnings: Vec<(Lint, String)>,
    errors: Vec<String>,
    body: String,
}

fn lint_with(item: TokenStream, inference: bool, library: Library) -> Linted {
    let mut func: syn::ItemFn = syn::parse2(item).expect("test input is a function");
    let context = Context {
        inference,
        library,
        ..Context::of_signature(&func.sig)
    };
    let outcome = lint_fn(&func.attrs.clone(), &mut func.block, &context);
    Linted {
        warnings: outcome
            .findings
            .into_iter()
            .map(|f| (f.lint, f.sentence))
            .collect(),
        errors: outcome.errors.iter().map(ToString::to_string).collect(),
        body: func.block.to_token_stream().to_string(),
    }
}

fn lint(item: TokenStream, inference: bool) -> Linted {
    lint_with(item, inference, Library::Unknown)
}

fn fired(item: TokenStream) -> Vec<Lint> {
    fired_with(item, Library::Unknown)
}

fn fired_with(item: TokenStream, library: Library) -> Vec<Lint> {
    lint_with(item, false, library)
        .warnings
        .into_iter()
        .map(|(l, _)| l)
        .collect()
}

#[test]
fn backward_is_a_warning_under_inference_only() {
    let item = quote! {
        fn f(x: &T) { let loss = x.forward(); loss.backward(); }
    };
    let under_inference = lint(item.clone(), true);
    assert!(
        under_inference.errors.is_empty(),
        "a lint never fails a build by default"
    );
    assert_eq!(
        under_inference
            .warnings
            .iter()
            .map(|(l, _)| *l)
            .collect::<Vec<_>>(),
        vec![Lint::BackwardInInference]
    );
    assert!(lint(item, false).warnings.is_empty());
    let allowed = quote! {
        #[vramguard::allow(backward_in_inference)]
        fn f(x: &T) { x.forward().backward(); }
    };
    assert!(lint(allowed, true).warnings.is_empty());
}

#[test]
fn inplace_fires_on_activations_with_grad_only() {
    let item = quote! {
        fn f(xs: &[T]) { for x in xs { let mut h = x.matmul(&w); h.relu_(); } }
    };
    assert_eq!(fired(item.clone()), vec![Lint::InplaceOnActivation]);
    assert!(
        lint(item, true).warnings.is_empty(),
        "no-grad context of #[inference]"
    );
    for silent in [
        quote! { fn f(xs: &[T]) { for x in xs { let mut h = Tensor::zeros(4); h.add_(x); } } },
        quote! { fn f(xs: &[T]) { for x in xs { let mut h = x.forward().detach(); h.relu_(); } } },
        quote! { fn f(xs: &[T]) { for x in xs { let _g = NoGradGuard::new(); let mut h = x.f(); h.relu_(); } } },
        quote! { fn f(xs: &[T]) { for x in xs { no_grad(|| { let mut h = x.f(); h.relu_(); }); } } },
        quote! { fn f(x: &T) { let mut h = x.forward(); h.relu_(); } },
        quote! { fn f(xs: &[T]) { for mut x in xs { x.relu_(); } } },
        quote! { fn f(xs: &[T]) { for x in xs { let h = x.f(); let h = h.relu(); } } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
}

#[test]
fn accumulation_fires_on_computed_values_kept_outside_the_loop() {
    for firing in [
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { let y = m.forward(x)?; r.push(y); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(m.forward(x)?); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { let y = x.f(); r.push(y.clone()); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { let y = x.f(); r.push(y.detach()); } } },
        quote! { fn f(xs: &[T]) { let mut r = HashMap::new(); for (i, x) in xs { r.insert(i, x.f()); } } },
        quote! { fn f(&mut self, xs: &[T]) { for x in xs { let y = x.f(); self.history.push(y); } } },
        quote! { fn f(xs: &[T]) { let mut h = vec![]; for x in xs { let a = x.f(); let b = x.g(); h.push((a, b)); } } },
        quote! { fn f() { let mut h = vec![]; loop { let a = step(); h.push(a); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); let y = g(); for x in xs { r.push(y.f()); } } },
    ] {
        assert_eq!(
            fired(firing.clone()),
            vec![Lint::AccumulatesAcrossIterations],
            "{firing}"
        );
    }
    for silent in [
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { let y = x.f(); r.push(y.item()); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(x); } } },
        quote! { fn f(xs: &[T]) { for x in xs { let mut r = Vec::new(); r.push(x.f()); } } },
        quote! { fn f(n: usize) { let mut r = Vec::new(); for i in 0..n { r.push(i * 2); } } },
        quote! { fn f(n: usize) { let mut r = Vec::new(); for i in 0..n { r.push(format!("{i}")); } } },
        quote! { fn f(n: usize) { let mut r = Vec::new(); for i in 0..n { r.push(i as f32); } } },
        quote! { fn f(w: &[S]) { let mut r = Vec::new(); for s in w { r.push(v.get(s).copied().unwrap_or(0)); } } },
        quote! { fn f(w: &[S]) { let mut r = Vec::new(); for s in w { r.push(String::new()); } } },
        quote! { fn f(w: &[S]) { let mut r = Vec::new(); for s in w { let n = s.len(); r.push(n); } } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
}

#[test]
fn running_totals_fire_unless_scalar_or_detached() {
    for firing in [
        quote! { fn f(xs: &[T]) { let mut t = zeros(); for x in xs { let l = x.loss()?; t += l; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros(); for x in xs { let l = x.loss()?; t = t + l; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros(); for x in xs { let l = x.loss()?; t = &l + &t; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros(); for x in xs { t += x.loss()?; } } },
        quote! { fn f(&mut self, xs: &[T]) { for x in xs { let l = x.loss(); self.total += l; } } },
    ] {
        assert_eq!(
            fired(firing.clone()),
            vec![Lint::GraphAcrossIterations],
            "{firing}"
        );
    }
    for silent in [
        quote! { fn f(xs: &[T]) { let mut t = 0.0; for x in xs { let l = x.loss()?; t += l.item(); } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros(); for x in xs { let l = x.loss()?; t += l.detach(); } } },
        quote! { fn f(xs: &[T]) { let mut n = 0; for x in xs { n += 1; } } },
        quote! { fn f(xs: &[u32]) { let mut n = 0; for x in xs { n += x; } } },
        // candle-nn's layer norm: a total declared as a number, whatever is added to it.
        quote! { fn f(src: &[T]) { let mut sum = 0f32; for v in src { let v = v.as_(); sum += v; sum += v * v; } } },
        quote! { fn f(src: &[T]) { let mut sum = 0.0; for v in src { sum = sum + v.forward(); } } },
        quote! { fn f(xs: &[T]) { let mut n = 0; for x in xs { n += usize::from(x.ok()); } } },
        quote! { fn f(xs: &[T]) { for x in xs { let mut t = zeros(); let l = x.loss(); t += l; } } },
        quote! { fn f(xs: &[T]) { let mut t = 0.0; for x in xs { let l: f32 = x.loss(); t += l; } } },
        quote! { fn f(xs: &[T]) { let mut t = 0; for x in xs { let l = x.len(); t += l; } } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
}

#[test]
fn empty_cache_fires_while_values_are_used_afterwards() {
    let firing = quote! {
        fn f(d: &Device) {
            let a = m.forward(x);
            let b = Tensor::zeros(3);
            { empty_cache(d); }
            use_it(&a, &b);
        }
    };
    let outcome = lint(firing, false);
    assert_eq!(outcome.warnings.len(), 1);
    assert!(
        outcome.warnings[0].1.contains("`a`, `b` are still alive"),
        "{}",
        outcome.warnings[0].1
    );
    for silent in [
        quote! { fn f(d: &Device) { let a = m.forward(x); drop(a); empty_cache(d); } },
        quote! { fn f(d: &Device) { let a = m.forward(x); use_it(&a); memory::empty_cache(d); } },
        quote! { fn f(d: &Device) { let a = m.forward(x); empty_cache(d); let a = g(); use_it(&a); } },
        quote! { fn f(d: &Device) { let _guard = m.lock(); d.empty_cache(); drop(_guard); } },
        quote! { fn f(d: &Device) { let n = 3; empty_cache(d); use_it(n); } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
    let method = quote! { fn f(d: &Device) { let a = m.forward(x); d.empty_cache(); use_it(&a); } };
    assert_eq!(fired(method), vec![Lint::EmptyCacheIsNotFree]);
}

#[test]
fn statement_allows_apply_to_their_statement_and_are_stripped() {
    let outcome = lint(
        quote! {
            fn f(xs: &[T]) {
                let mut r = Vec::new();
                for x in xs {
                    let y = x.f();
                    #[vramguard::allow(accumulates_across_iterations)]
                    r.push(y);
                    let z = x.g();
                    r.push(z);
                }
            }
        },
        false,
    );
    assert_eq!(outcome.warnings.len(), 1, "only the second push");
    assert!(outcome.warnings[0].1.contains("r.push(z)"));
    assert!(!outcome.body.contains("allow"), "{}", outcome.body);
}

#[test]
fn running_totals_in_method_form_and_parentheses_fire() {
    for firing in [
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { let l = x.loss()?; t = (t + l)?; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { let l = x.loss()?; t = t.add(&l)?; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { t = x.loss()?.broadcast_add(&t)?; } } },
        quote! { fn f(&mut self, xs: &[T]) { for x in xs { self.total = self.total.add(&x.loss()?)?; } } },
    ] {
        assert_eq!(
            fired(firing.clone()),
            vec![Lint::GraphAcrossIterations],
            "{firing}"
        );
    }
    for silent in [
        // Numbers never count.
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { t = (t + x.loss()?.to_scalar::<f32>()?)?; } } },
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { t = t.add(&x.loss()?.into_scalar())?; } } },
        // Grad is off: no graph to chain.
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; no_grad(|| { for x in xs { t = (t + x.loss()?)?; } }); } },
        quote! { fn f(xs: &[T]) { let _g = tch::no_grad_guard(); let mut t = zeros(); for x in xs { t += x.loss(); } } },
        // `t.add(&l)` not assigned back to `t`.
        quote! { fn f(xs: &[T]) { let t = zeros()?; for x in xs { let l = x.loss()?; let s = t.add(&l)?; } } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
    let inference =
        quote! { fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { t = (t + x.loss()?)?; } } };
    assert!(
        lint(inference.clone(), true).warnings.is_empty(),
        "no graph under #[inference]"
    );
    assert!(
        fired_with(inference, Library::Ndarray).is_empty(),
        "ndarray records no graph"
    );
}

#[test]
fn collections_grow_through_entry_index_and_iterator_closures() {
    for firing in [
        quote! { fn f(xs: &[T]) { let mut m = HashMap::new(); for (k, x) in xs { m.entry(k).or_insert(x.f()?); } } },
        quote! { fn f(xs: &[T]) { let mut m = HashMap::new(); for (k, x) in xs { m.entry(k).or_default().push(x.f()?); } } },
        quote! { fn f(xs: &[T]) { let mut m = HashMap::new(); for (k, x) in xs { m.entry(k).or_insert_with(|| x.f()); } } },
        quote! { fn f(xs: &[T]) { let mut rows = vec![vec![]; 3]; for (i, x) in xs { rows[i].push(x.f()?); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); xs.iter().for_each(|x| r.push(m.forward(x).unwrap())); } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); let _: Vec<_> = xs.iter().map(|x| { let y = m.forward(x)?; r.push(y.clone()); Ok(y) }).collect(); } },
        quote! { fn f(n: usize) { let mut r = Vec::new(); (0..n).map(|i| r.extend(m.step(i))).count(); } },
        quote! { fn f() { let mut r = Vec::new(); while let Some(b) = it.next() { r.push(m.forward(&b)?); } } },
    ] {
        assert_eq!(
            fired(firing.clone()),
            vec![Lint::AccumulatesAcrossIterations],
            "{firing}"
        );
    }
    for silent in [
        // `Option::map` runs at most once.
        quote! { fn f(o: Option<T>) { let mut r = Vec::new(); o.map(|x| r.push(m.forward(x))); } },
        // Numbers never count.
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(m.forward(x)?.to_scalar::<f32>()?); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(m.forward(x)?.to_vec1::<f32>()?); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(m.forward(x).into_scalar()); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(m.forward(x).double_value(&[])); } } },
        quote! { fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { let l: f32 = m.loss(x); r.push(l); } } },
        quote! { fn f(xs: &[T]) { let mut m = HashMap::new(); for x in xs { *m.entry(x).or_insert(0) += 1; } } },
        // The closure's own collection.
        quote! { fn f(xs: &[T]) { xs.iter().for_each(|x| { let mut r = Vec::new(); r.push(m.forward(x)); }); } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
}

#[test]
fn evaluation_without_no_grad_fires_only_where_the_library_has_a_switch() {
    let evaluate = quote! {
        fn evaluate(model: &Net, xs: &[Tensor]) -> f64 {
            let mut correct = 0.0;
            for x in xs { correct += model.forward(x).double_value(&[]); }
            correct
        }
    };
    assert_eq!(
        fired_with(evaluate.clone(), Library::Tch),
        vec![Lint::EvalWithoutNoGrad]
    );
    assert_eq!(
        fired_with(evaluate.clone(), Library::Vramguard),
        vec![Lint::EvalWithoutNoGrad]
    );
    assert!(fired_with(evaluate.clone(), Library::Candle).is_empty());
    assert!(lint_with(evaluate, true, Library::Tch).warnings.is_empty());
    let eval_mode = quote! {
        fn step(model: &Net, x: &Tensor) -> Tensor { x.apply_t(model, false) }
    };
    assert_eq!(
        fired_with(eval_mode, Library::Tch),
        vec![Lint::EvalWithoutNoGrad]
    );
    for silent in [
        quote! { fn evaluate(m: &Net, x: &Tensor) -> Tensor { tch::no_grad(|| m.forward(x)) } },
        quote! { fn evaluate(m: &Net, x: &Tensor) -> Tensor { let _g = tch::no_grad_guard(); m.forward(x) } },
        quote! { fn train(m: &Net, x: &Tensor) -> Tensor { m.forward(x) } },
        quote! { fn step(m: &Net, x: &Tensor) -> Tensor { x.apply_t(m, true) } },
        quote! { fn evaluate(x: &Tensor) -> f64 { x.mean(Kind::Float).double_value(&[]) } },
    ] {
        assert!(
            fired_with(silent.clone(), Library::Tch).is_empty(),
            "{silent}"
        );
    }
}

#[test]
fn fixes_are_spelled_for_the_library() {
    let mut func: syn::ItemFn = syn::parse_quote! {
        fn f(xs: &[T]) { let mut t = zeros()?; for x in xs { let loss = x.loss()?; t = (t + loss)?; } }
    };
    let outcome = lint_fn(&[], &mut func.block, &Context::new("f"));
    let finding = &outcome.findings[0];
    assert_eq!(
        finding.fix(Library::Candle),
        "accumulate a number (`loss.to_scalar::<f32>()?`) or a detached value (`loss.detach()`)"
    );
    assert_eq!(
        finding.fix(Library::Burn),
        "accumulate a number (`loss.into_scalar()`) or a detached value (`loss.detach()`)"
    );
    assert!(
        finding
            .paragraph(Library::Unknown)
            .ends_with("(Silence with #[vramguard::allow(graph_across_iterations)].)"),
        "{}",
        finding.paragraph(Library::Unknown)
    );
}

#[test]
fn the_seed_mistakes_fire() {
    // 4.2: `intermediate_results.append(feat)` in `for i in range(100)`, then `del`.
    let features = quote! {
        fn extract(model: &M, x: &Tensor) -> Result<()> {
            let mut intermediate_results = Vec::new();
            for _ in 0..100 {
                let feat = model.get_feature(x)?;
                intermediate_results.push(feat);
            }
            drop(intermediate_results);
            empty_cache(&device);
            Ok(())
        }
    };
    assert_eq!(fired(features), vec![Lint::AccumulatesAcrossIterations]);
    // A training loop that logs its losses and sums them as tensors.
    let training = quote! {
        fn train(model: &M, loader: &Loader) -> Result<f32> {
            let mut losses = Vec::new();
            let mut total = Tensor::zeros(())?;
            for batch in loader.iter() {
                let loss = model.loss(&batch)?;
                loss.backward()?;
                total = total.add(&loss)?;
                losses.push(loss);
            }
            Ok(mean(&losses)? + total.to_scalar::<f32>()?)
        }
    };
    assert_eq!(
        fired(training),
        vec![
            Lint::GraphAcrossIterations,
            Lint::AccumulatesAcrossIterations
        ]
    );
    // 4.3: `relu_()` on an activation with grad on.
    let inplace = quote! {
        fn step(model: &M, xs: &[Tensor]) { for x in xs { let mut h = model.forward(x); h.relu_(); } }
    };
    assert_eq!(fired(inplace), vec![Lint::InplaceOnActivation]);
    // 4.2: `empty_cache()` believed to free the tensors still in use.
    let cache = quote! {
        fn run(model: &M, x: &Tensor, device: &Device) { let y = model.forward(x); empty_cache(device); use_it(&y); }
    };
    assert_eq!(fired(cache), vec![Lint::EmptyCacheIsNotFree]);
}

#[test]
fn results_working_sets_and_model_parts_stay_silent() {
    for silent in [
        // The collection is the function's result: returned, wrapped, converted, concatenated.
        quote! { fn f(xs: &[T]) -> Vec<T> { let mut out = Vec::new(); for x in xs { out.push(m.forward(x)); } out } },
        quote! { fn f(xs: &[T]) -> Result<Vec<T>> { let mut out = vec![]; for x in xs { out.push(m.forward(x)?); } Ok(out) } },
        quote! { fn f(xs: &[T]) -> Option<[T; 2]> { let mut out = vec![]; for x in xs { out.push(m.forward(x)); } out.try_into().ok() } },
        quote! { fn f(xs: &[T]) -> Result<T> { let mut out = vec![]; for x in xs { out.push(m.forward(x)?); } Tensor::cat(&out, 0) } },
        quote! { fn f(xs: &[T]) -> Result<T> { let mut out = vec![]; for x in xs { out.push(m.forward(x)?); } let y = Tensor::stack(&out, 0)?; y.relu() } },
        quote! { fn f(xs: &[T]) -> S { let mut parts = vec![]; for x in xs { parts.push(m.forward(x)); } S { parts, n: 1 } } },
        // A constructor collects the model's parts.
        quote! { fn new(vb: Vb, n: usize) -> Result<Self> { let mut layers = vec![]; for i in 0..n { layers.push(linear(vb.pp(i))?); } Ok(Self { layers, n }) } },
        quote! { fn load(vb: Vb, n: usize) -> Result<Model> { let mut layers = vec![]; for i in 0..n { layers.push(linear(vb.pp(i))?); } build(layers) } },
        // A working set: the loop also empties it.
        quote! { fn f(xs: &[T]) { let mut buf = Vec::new(); for x in xs { buf.clear(); buf.push(m.forward(x)); use_it(&buf); } } },
        quote! { fn f(xs: &[T]) { let mut live = HashMap::new(); for (i, x) in xs { live.insert(i, m.forward(x)); live.remove(&(i - 1)); } } },
        // Collections whose declared element type holds no tensor.
        quote! { fn f(xs: &[T]) { let mut ids: Vec<usize> = Vec::new(); for x in xs { ids.push(m.index(x)); } } },
        quote! { fn f(xs: &[T]) { let mut ids = Vec::<u32>::with_capacity(3); for x in xs { ids.push(m.index(x)); } } },
        quote! { fn f(xs: &[T]) { let mut views: SmallVec<[TensorView; 2]> = SmallVec::new(); for x in xs { views.push(x.view_of()); } } },
        // Loops over the model's own parts are one forward pass.
        quote! { fn forward(&self, x: &T) -> Result<T> { let mut h = x.clone(); let mut outs = vec![]; for layer in self.layers.iter() { h = layer.forward(&h)?; outs.push(h.clone()); } use_it(&outs); Ok(h) } },
        quote! { fn forward(&self, ids: &[T]) -> Result<T> { let mut emb = zeros()?; for (e, i) in self.embs.iter().zip(ids) { emb = (emb + i.apply(e)?)?; } Ok(emb) } },
        // Moved, not computed; threads and channels; numbers.
        quote! { fn f(mut q: Vec<T>) { let mut kept = vec![]; while !q.is_empty() { let t = q.pop().unwrap(); kept.push(t); } use_it(&kept); } },
        quote! { fn f(n: usize) { let mut hs = vec![]; for i in 0..n { let h = std::thread::spawn(move || i); hs.push(h); } join(hs); } },
        quote! { fn f(n: usize) { let mut tokens = vec![]; for _ in 0..n { let t = lp.sample(&logits)?; tokens.push(t); } use_it(&tokens); } },
        quote! { fn f(n: usize) { let mut v = vec![]; for i in 0..n { v.push(E::from_usize(i).unwrap()); } use_it(&v); } },
        quote! { fn f(xs: &[E]) { let mut b = vec![]; for x in xs { b.extend(x.to_le_bytes().as_ref()); } use_it(&b); } },
        quote! { fn f(xs: &[T]) { let mut names = vec![]; for x in xs { names.extend(x.names().iter().map(|s| s.to_string())); } use_it(&names); } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
    // Still a finding: a data loop inside a method, the model's parts inside a data loop.
    for firing in [
        quote! { fn run(&self, xs: &[T]) { let mut outs = vec![]; for x in xs { outs.push(self.forward(x)); } use_it(&outs); } },
        quote! { fn run(&self, xs: &[T]) { let mut outs = vec![]; for x in xs { for l in self.layers.iter() { outs.push(l.forward(x)); } } use_it(&outs); } },
        quote! { fn f(xs: &[T]) { let mut outs = vec![]; for x in xs { outs.extend(m.forward_all(x)?); } use_it(&outs); } },
    ] {
        assert_eq!(
            fired(firing.clone()),
            vec![Lint::AccumulatesAcrossIterations],
            "{firing}"
        );
    }
}

#[test]
fn zero_argument_reductions_are_numbers_except_in_burn_and_dfdx() {
    let item = quote! {
        fn f(steps: &[T]) { let mut total = zeros(); for s in steps { let loss = s.forward().mean(); total = total.add(loss); } }
    };
    assert!(fired_with(item.clone(), Library::Ndarray).is_empty());
    assert!(fired_with(item.clone(), Library::Candle).is_empty());
    assert_eq!(
        fired_with(item, Library::Burn),
        vec![Lint::GraphAcrossIterations]
    );
}

#[test]
fn empty_cache_does_not_count_its_own_device() {
    for silent in [
        quote! { fn f() { let dev = Cpu::default(); dev.empty_cache(); check(&dev); } },
        quote! { fn f() { let device = Device::new(); empty_cache(&device); check(&device); } },
    ] {
        assert!(fired(silent.clone()).is_empty(), "{silent}");
    }
}

#[test]
fn calls_declared_or_written_to_return_numbers_are_numbers() {
    let file: syn::File = syn::parse_quote! {
        fn timing(rounds: usize) -> Vec<f64> { vec![0.0; rounds] }
        fn count() -> Result<usize, Error> { Ok(1) }
        fn features(x: &Tensor) -> Tensor { x.clone() }
        struct S;
        impl S { fn stats(&self) -> (u64, u64) { (1, 2) } fn both(&self) -> u32 { 1 } }
        impl T { fn both(&self) -> Tensor { todo!() } }
    };
    let numbers = number_functions([&file]);
    let mut sorted: Vec<&str> = numbers.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        ["count", "stats", "timing"],
        "`both` is a tensor somewhere"
    );
    let lint_with_numbers = |item: TokenStream| {
        let mut func: syn::ItemFn = syn::parse2(item).expect("a function");
        let context = Context {
            number_fns: std::sync::Arc::new(numbers.clone()),
            ..Context::of_signature(&func.sig)
        };
        lint_fn(&[], &mut func.block, &context)
            .findings
            .into_iter()
            .map(|f| f.lint)
            .collect::<Vec<_>>()
    };
    for silent in [
        quote! { fn f(n: usize) { let mut all = vec![]; for _ in 0..n { all.extend(timing(10)); } use_it(&all); } },
        quote! { fn f(s: &S, n: usize) { let mut all = vec![]; for _ in 0..n { all.push(s.stats()); } use_it(&all); } },
        quote! { fn f(n: usize) { let round = || { let t = now(); t.elapsed().as_secs_f64() }; let mut all = vec![]; for _ in 0..n { all.push(round()); } use_it(&all); } },
    ] {
        assert!(lint_with_numbers(silent.clone()).is_empty(), "{silent}");
    }
    let firing = quote! { fn f(xs: &[Tensor]) { let mut all = vec![]; for x in xs { all.push(features(x)); all.push(s.both()); } use_it(&all); } };
    assert_eq!(
        lint_with_numbers(firing),
        vec![Lint::AccumulatesAcrossIterations; 2]
    );
}
