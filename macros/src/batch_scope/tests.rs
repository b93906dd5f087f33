//! Golden expansions (rendered with prettyplease). `UPDATE_GOLDEN=1 cargo test -p
//! vramguard-macros` rewrites them; review the diff.

use super::expand;
use proc_macro2::TokenStream;
use quote::quote;
use std::path::PathBuf;

fn check_golden(name: &str, args: TokenStream, item: TokenStream) {
    let expanded = expand(args, item);
    let file: syn::File = syn::parse2(expanded).expect("the expansion parses as a file");
    let rendered = prettyplease::unparse(&file);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/batch_scope/golden")
        .join(format!("{name}.expanded.rs"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &rendered).expect("write golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        rendered, golden,
        "expansion of `{name}` changed; UPDATE_GOLDEN=1 to accept"
    );
}

#[test]
fn golden_every_loop() {
    check_golden(
        "every_loop",
        quote!(strict, every = 10),
        quote! {
            fn train(model: &mut Model, data: &[Batch]) -> Result<f32, Error> {
                let mut total = 0.0;
                for batch in data {
                    let loss = model.step(batch)?;
                    total += loss.item();
                    if total > 10.0 {
                        continue;
                    }
                }
                let mut n = 0;
                while n < 3 {
                    n += 1;
                }
                Ok(total)
            }
        },
    );
}

#[test]
fn golden_marked_loop_with_label_and_crate() {
    check_golden(
        "marked_loop",
        quote!(crate = ::vg),
        quote! {
            fn evaluate(model: &Model, data: &[Batch]) -> Vec<f32> {
                let mut scores = Vec::new();
                for warmup in data.iter().take(1) {
                    model.warm(warmup);
                }
                #[batch_scope(label = "eval", warn_after = 3)]
                for (i, batch) in data.iter().enumerate() {
                    let out = model.forward(batch);
                    scores.push(out.item() + i as f32);
                }
                scores
            }
        },
    );
}

#[test]
fn golden_loop_and_while_let() {
    check_golden(
        "loop_shapes",
        quote!(warn_after = 2),
        quote! {
            fn drain(model: &mut Model, mut queue: Queue) -> usize {
                let mut steps = 0;
                while let Some(batch) = queue.pop() {
                    let out = model.forward(&batch);
                    model.record(out);
                }
                loop {
                    let probe = model.probe();
                    steps += 1;
                    if probe.done() {
                        break;
                    }
                }
                steps
            }
        },
    );
}

#[test]
fn golden_marker_options_over_function_options() {
    check_golden(
        "marker_options",
        quote!(strict, every = 4, warnings = "stderr"),
        quote! {
            fn train(model: &mut Model, epochs: usize, data: &[Batch]) {
                for epoch in 0..epochs {
                    #[batch_scope(label = "step", every = 2, warn_after = 5, warnings = "tracing")]
                    for batch in data {
                        let loss = model.step(batch);
                        loss.backward();
                    }
                    #[batch_scope]
                    while model.needs_eval(epoch) {
                        model.evaluate();
                    }
                }
            }
        },
    );
}

#[test]
fn errors_come_with_the_original_item() {
    let out = expand(
        quote!(bogus),
        quote! { fn f() { #[batch_scope] for _ in 0..1 {} } },
    );
    let text = out.to_string();
    assert!(text.contains("compile_error"), "{text}");
    assert!(text.contains("fn f"), "{text}");
    assert!(
        !text.contains("# [batch_scope]"),
        "markers are stripped: {text}"
    );
}

#[test]
fn loops_in_const_blocks_and_nested_items_are_left_alone() {
    let out = expand(
        quote!(),
        quote! {
            fn f() -> usize {
                fn helper() { for _ in 0..1 {} }
                let n = const { let mut i = 0; while i < 3 { i += 1; } i };
                let mut m = 0;
                for _ in 0..n { m += 1; }
                m
            }
        },
    )
    .to_string();
    assert_eq!(out.matches("enter_with").count(), 1, "{out}");
}

#[test]
fn warnings_option_routes_the_scope_warning() {
    let expanded = expand(
        quote!(warnings = "tracing"),
        quote! { fn f(xs: &[u32]) { for x in xs { g(x); } } },
    )
    .to_string();
    assert!(
        expanded.contains(". warnings (:: vramguard :: __private :: WarningOutput :: Tracing)"),
        "{expanded}"
    );
    let bad = expand(
        quote!(warnings = "loud"),
        quote! { fn f(xs: &[u32]) { for x in xs { g(x); } } },
    )
    .to_string();
    assert!(bad.contains("unknown `warnings` output `loud`"), "{bad}");
}

/// Each loop gets its own marker's settings: the loops `parse` records and the loops the
/// expansion rewrites are matched by visit order, through closures, nested items and `const`
/// blocks.
#[test]
fn each_marker_reaches_its_own_loop() {
    let out = expand(
        quote!(),
        quote! {
            fn f(xs: &[u32]) {
                fn helper() { for _ in 0..1 {} }
                let n = const { let mut i = 0; while i < 3 { i += 1; } i };
                #[batch_scope(label = "outer")]
                for a in xs {
                    let run = || {
                        #[batch_scope(label = "in_closure")]
                        loop { break; }
                    };
                    run();
                    #[batch_scope(label = "inner")]
                    while n > *a { g(a); }
                }
            }
        },
    )
    .to_string();
    for (head, label) in [
        ("for a in xs {", "outer"),
        ("loop {", "in_closure"),
        ("while n > * a {", "inner"),
    ] {
        let at = out
            .find(head)
            .unwrap_or_else(|| panic!("no `{head}`: {out}"));
        let guard = &out[at + head.len()..];
        assert!(
            guard.trim_start().starts_with(&format!(
                "let __vramguard_scope = :: vramguard :: __private :: BatchScope :: enter_with (\"{label}\""
            )),
            "`{head}` should open with the `{label}` scope: {out}"
        );
    }
    assert_eq!(out.matches("enter_with").count(), 3, "{out}");
}
