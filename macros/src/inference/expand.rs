//! Code generation of `#[inference]`: the no-grad guard, the lints and the drops at last use.

use proc_macro2::{Span, TokenStream};
use quote::{quote, ToTokens};

use super::parse::{InferenceTarget, Options};
use crate::lints::{self, LintContext};
use crate::liveness::{self, DropOptions};

/// Expands a validated target.
pub(crate) fn expand(target: InferenceTarget, options: &Options) -> TokenStream {
    let krate = options
        .krate
        .clone()
        .unwrap_or_else(crate::common::default_crate_path);
    let mut drop_options = DropOptions::new(krate.clone());
    drop_options.keep = options.keep.clone();
    drop_options.inplace = options.inplace;
    drop_options.owned = options.owned.iter().map(|i| i.to_string()).collect();
    drop_options.borrows = options.borrows.iter().map(|i| i.to_string()).collect();
    let mut errors: Vec<syn::Error> = Vec::new();
    let tokens = match target {
        InferenceTarget::Fn(mut function) => {
            let block = std::mem::replace(&mut *function.block, empty_block());
            *function.block = body(
                &function.attrs,
                &mut function.sig,
                block,
                options,
                &drop_options,
                &mut errors,
            );
            function.into_token_stream()
        }
        InferenceTarget::TraitFn(mut method) => {
            if let Some(block) = method.default.take() {
                method.default = Some(body(
                    &method.attrs,
                    &mut method.sig,
                    block,
                    options,
                    &drop_options,
                    &mut errors,
                ));
            }
            method.into_token_stream()
        }
        InferenceTarget::Impl(mut block) => {
            let impl_attrs = block.attrs.clone();
            for item in &mut block.items {
                if let syn::ImplItem::Fn(method) = item {
                    // A method with its own `#[inference(..)]` is expanded by that attribute,
                    // with its own options.
                    let own_attribute = method.attrs.iter().any(|a| {
                        a.path()
                            .segments
                            .last()
                            .is_some_and(|s| s.ident == "inference")
                    });
                    if method.sig.constness.is_none() && !own_attribute {
                        let old = std::mem::replace(&mut method.block, empty_block());
                        // `#[vramguard::allow(..)]` on the impl block covers its methods.
                        let attrs: Vec<syn::Attribute> =
                            impl_attrs.iter().chain(&method.attrs).cloned().collect();
                        method.block = body(
                            &attrs,
                            &mut method.sig,
                            old,
                            options,
                            &drop_options,
                            &mut errors,
                        );
                    }
                }
            }
            block.into_token_stream()
        }
        InferenceTarget::Other(..) => TokenStream::new(),
    };
    let errors = errors.into_iter().map(|e| e.to_compile_error());
    quote! { #tokens #(#errors)* }
}

/// A placeholder while a body is rewritten.
fn empty_block() -> syn::Block {
    syn::Block {
        brace_token: syn::token::Brace::default(),
        stmts: Vec::new(),
    }
}

/// The new body of one function.
fn body(
    fn_attrs: &[syn::Attribute],
    sig: &mut syn::Signature,
    mut block: syn::Block,
    options: &Options,
    drop_options: &DropOptions,
    errors: &mut Vec<syn::Error>,
) -> syn::Block {
    let krate = &drop_options.krate;
    let lint = lints::check_fn(
        fn_attrs,
        &mut block,
        &LintContext {
            inference: true,
            krate,
            sig,
        },
    );
    errors.extend(lint.errors);
    let warnings = lint.warnings;
    // The body of an `unsafe fn` is unsafe code throughout (see `liveness::insert_drops`).
    let unsafe_fn = matches!(sig.safety, syn::Safety::Unsafe(_));
    if options.drops && !unsafe_fn {
        let drop_options = DropOptions {
            scalars: liveness::scalar_params(sig),
            try_owns: !liveness::returns_option(sig),
            ..drop_options.clone()
        };
        let report = liveness::insert_drops(&mut block, &liveness::params_of(sig), &drop_options);
        allow_unused_mut(sig, &report.moved_mut_params);
    } else {
        liveness::strip_keep_markers(&mut block);
    }
    // The new body keeps the user's braces: the edition of a block's span decides when its
    // tail expression's temporaries are dropped (before its locals in edition 2024), and
    // braces made here would carry this crate's edition. The user's statements are moved into
    // it, never re-parsed.
    let braces = block.brace_token;
    let stmts = std::mem::take(&mut block.stmts);
    let mut new_stmts: Vec<syn::Stmt> = if warnings.is_empty() {
        Vec::new()
    } else {
        match syn::parse2::<syn::Block>(quote!({ #warnings })) {
            Ok(parsed) => parsed.stmts,
            Err(error) => {
                errors.push(error);
                Vec::new()
            }
        }
    };
    if sig.asyncness.is_some() {
        // Each by-value parameter is rebound inside the future, as rustc's own lowering of an
        // `async fn` does: it then drops at the end of the body (not when the future is
        // dropped), and a borrow error names it as it would without the attribute.
        let rebinds = async_param_rebinds(sig);
        // A guard must not be held across `.await` (the task may move threads): the runtime
        // sets grad mode around each poll of the body instead.
        let annotated = match &sig.output {
            // `-> !` cannot annotate a `let` on stable.
            syn::ReturnType::Type(_, ty)
                if !mentions_impl(ty) && !matches!(**ty, syn::Type::Never(_)) =>
            {
                Some(ty)
            }
            _ => None,
        };
        let body = syn::Block {
            brace_token: braces,
            stmts,
        };
        let mut future_stmts = match annotated {
            // The annotation lets `?` inside the body find the error type.
            Some(ty) => {
                let value = syn::Ident::new("__vg_return", Span::mixed_site());
                let mut local: syn::Stmt = syn::parse_quote!(let #value: #ty = {};);
                if let syn::Stmt::Local(syn::Local {
                    init: Some(init), ..
                }) = &mut local
                {
                    *init.expr = syn::Expr::Block(syn::ExprBlock {
                        attrs: Vec::new(),
                        label: None,
                        block: body,
                    });
                }
                vec![local, syn::Stmt::Expr(syn::parse_quote!(#value), None)]
            }
            None => body.stmts,
        };
        future_stmts.splice(0..0, rebinds);
        // Grad mode (vramguard's and the other libraries' that have one, `tch` with its
        // feature) set around each poll.
        let mut call: syn::Expr = syn::parse_quote!(
            #krate::__private::no_grad_future(
                #krate::__private::with_library_no_grad(async move {})
            ).await
        );
        if let syn::Expr::Await(awaited) = &mut call {
            let library = match &mut *awaited.base {
                syn::Expr::Call(outer) => outer.args.first_mut(),
                _ => None,
            };
            if let Some(syn::Expr::Call(inner)) = library {
                if let Some(syn::Expr::Async(future)) = inner.args.first_mut() {
                    future.block = syn::Block {
                        brace_token: braces,
                        stmts: future_stmts,
                    };
                }
            }
        }
        new_stmts.push(syn::Stmt::Expr(call, None));
    } else {
        let guard = syn::Ident::new("__vg_no_grad", Span::mixed_site());
        // Emitted as written (nothing analyses the body after this point): parsing it back
        // into a tree once per function was measurable in an unoptimized macro. One guard for
        // vramguard's no-grad mode and the other libraries' that have one (`tch`, with its
        // feature): one local and one drop per function.
        let guards = quote! {
            let #guard = #krate::__private::inference_guard();
        };
        new_stmts.insert(0, syn::Stmt::Expr(syn::Expr::Verbatim(guards), None));
        new_stmts.extend(stmts);
    }
    syn::Block {
        brace_token: braces,
        stmts: new_stmts,
    }
}

/// `let x = x;` (or `let mut x = x;`) for each parameter bound by a plain identifier, in
/// order; a `mut` parameter keeps its `mut` on the rebinding, and the user's, now never
/// mutated, gets `#[allow(unused_mut)]`. Other patterns (`_`, tuples, `ref`) stay captured.
fn async_param_rebinds(sig: &mut syn::Signature) -> Vec<syn::Stmt> {
    let mut rebinds = Vec::new();
    let mut mutable = Vec::new();
    for input in &sig.inputs {
        let syn::FnArg::Typed(typed) = input else {
            continue;
        };
        let syn::Pat::Ident(pat) = &*typed.pat else {
            continue;
        };
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            continue;
        }
        let ident = &pat.ident;
        rebinds.push(match pat.mutability {
            Some(token) => {
                mutable.push(ident.to_string());
                syn::parse_quote!(let #token #ident = #ident;)
            }
            None => syn::parse_quote!(let #ident = #ident;),
        });
    }
    allow_unused_mut(sig, &mutable);
    rebinds
}

/// `mut` parameters whose last mutation moved onto a rebinding would trip `unused_mut` on the
/// user's parameter.
fn allow_unused_mut(sig: &mut syn::Signature, names: &[String]) {
    for input in &mut sig.inputs {
        if let syn::FnArg::Typed(typed) = input {
            let mut bound = Vec::new();
            crate::liveness::pattern_names(&typed.pat, &mut bound);
            let already = typed.attrs.iter().any(|a| {
                a.path().is_ident("allow") && a.to_token_stream().to_string().contains("unused_mut")
            });
            if !already && bound.iter().any(|n| names.contains(&n.to_string())) {
                typed.attrs.push(syn::parse_quote!(#[allow(unused_mut)]));
            }
        }
    }
}

fn mentions_impl(ty: &syn::Type) -> bool {
    fn scan(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => i == "impl",
            proc_macro2::TokenTree::Group(g) => scan(g.stream()),
            _ => false,
        })
    }
    scan(ty.to_token_stream())
}
