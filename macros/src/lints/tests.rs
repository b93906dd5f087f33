//! The lint rules on small functions: what fires, and the shapes that must stay silent.

use super::*;
use quote::quote;

struct Outcome {
    warnings: Vec<(Lint, String)>,
    errors: Vec<String>,
    body: String,
}

fn lint(item: TokenStream, inference: bool) -> Outcome {
    let mut func: syn::ItemFn = syn::parse2(item).expect("test input is a function");
    let krate: syn::Path = syn::parse_quote!(::vramguard);
    let ctx = LintContext {
        inference,
        krate: &krate,
        fn_name: &func.sig.ident,
    };
    let (findings, errors) = analyze(&func.attrs.clone(), &mut func.block, &ctx);
    Outcome {
        warnings: findings.into_iter().map(|f| (f.lint, f.message)).collect(),
        errors: errors.iter().map(ToString::to_string).collect(),
        body: func.block.to_token_stream().to_string(),
    }
}

fn fired(item: TokenStream) -> Vec<Lint> {
    lint(item, false)
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
fn warnings_become_deprecated_constants_at_the_top_of_the_body() {
    let mut func: syn::ItemFn = syn::parse_quote! {
        fn f(xs: &[T]) { let mut r = Vec::new(); for x in xs { r.push(x.f()); } }
    };
    let krate: syn::Path = syn::parse_quote!(::vramguard);
    let name = func.sig.ident.clone();
    let ctx = LintContext {
        inference: false,
        krate: &krate,
        fn_name: &name,
    };
    let output = check(&mut func.block, &ctx);
    assert!(output.errors.is_empty());
    let first = func.block.stmts[0].to_token_stream().to_string();
    assert!(first.contains("deprecated"), "{first}");
    assert!(
        first.contains("VRAMGUARD_ACCUMULATES_ACROSS_ITERATIONS"),
        "{first}"
    );
    assert!(
        !first.contains("# [allow"),
        "no lint level is forced: {first}"
    );
}

#[test]
fn allow_moves_itself_after_a_processing_attribute() {
    let out = expand_allow(
        quote!(graph_across_iterations),
        quote! { #[doc = "d"] #[vg::batch_scope(strict)] fn f() {} },
    )
    .to_string();
    assert_eq!(
        out,
        quote! { #[doc = "d"] #[vg::batch_scope(strict)] #[vg::allow(graph_across_iterations)] fn f() {} }
            .to_string()
    );
    let bare = expand_allow(
        quote!(graph_across_iterations),
        quote! { #[inference] fn f() {} },
    );
    assert!(bare.to_string().contains(":: vramguard :: allow"), "{bare}");
    let plain = quote! { fn f() {} };
    assert_eq!(
        expand_allow(quote!(graph_across_iterations), plain.clone()).to_string(),
        plain.to_string()
    );
}
