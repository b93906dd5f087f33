//! The functions of one parsed file, each linted by `vramguard-lints`: free functions,
//! inherent and trait-impl methods, trait default methods, and functions nested in bodies,
//! with or without a vramguard attribute. `#[test]` functions and `#[cfg(test)]` modules only
//! with `--all-targets`.

use std::collections::HashSet;
use std::sync::Arc;

use proc_macro2::LineColumn;
use syn::visit::Visit;
use vramguard_lints::{allowed_in, lint_fn, Context, Finding, Library};

use super::modules::is_cfg_test;

/// A finding in a named function, or a misspelled `#[vramguard::allow(..)]`.
pub(crate) enum Found {
    /// A lint finding.
    Lint(Finding),
    /// An unknown lint name in an `allow`: the message, and where.
    BadAllow {
        /// What is wrong.
        message: String,
        /// Where it starts.
        start: LineColumn,
        /// Where it ends.
        end: LineColumn,
    },
}

/// What [`lint_file`] found, and how many functions it linted.
pub(crate) struct FileLint {
    /// The findings, in source order.
    pub found: Vec<Found>,
    /// Functions linted.
    pub functions: usize,
}

/// What every function of a file is linted with.
pub(crate) struct Settings<'a> {
    /// The file's tensor library.
    pub library: Library,
    /// The crate's functions declared to return numbers.
    pub number_fns: &'a Arc<HashSet<String>>,
    /// Only functions matching this pattern.
    pub fns: Option<&'a glob::Pattern>,
    /// Also `#[test]` functions and `#[cfg(test)]` modules.
    pub all_targets: bool,
}

/// Lints every function of `ast` (whose module is test code when `cfg_test`).
pub(crate) fn lint_file(ast: &syn::File, settings: Settings<'_>, cfg_test: bool) -> FileLint {
    let all_targets = settings.all_targets;
    let mut walker = FnWalker {
        settings,
        owner: Vec::new(),
        found: Vec::new(),
        functions: 0,
    };
    if cfg_test && !all_targets {
        return FileLint {
            found: Vec::new(),
            functions: 0,
        };
    }
    walker.visit_file(ast);
    FileLint {
        found: walker.found,
        functions: walker.functions,
    }
}

/// The library a file uses: the first in [`Library::KNOWN`] order of the crates its `use`
/// and `extern crate` items name (through `libraries`, the package's code names), else
/// `default`.
pub(crate) fn file_library(
    ast: &syn::File,
    libraries: &std::collections::BTreeMap<String, Library>,
    default: Library,
) -> Library {
    struct Uses(Vec<String>);
    impl<'ast> Visit<'ast> for Uses {
        fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
            // The first segment of each path: `use candle::{..}`, `use {candle, burn}`.
            let trees = match &item.tree {
                syn::UseTree::Group(group) => group.items.iter().collect(),
                tree => vec![tree],
            };
            for tree in trees {
                let ident = match tree {
                    syn::UseTree::Path(path) => &path.ident,
                    syn::UseTree::Name(name) => &name.ident,
                    syn::UseTree::Rename(rename) => &rename.ident,
                    _ => continue,
                };
                self.0.push(ident.to_string());
            }
        }
        fn visit_item_extern_crate(&mut self, item: &'ast syn::ItemExternCrate) {
            self.0.push(item.ident.to_string());
        }
    }
    let mut uses = Uses(Vec::new());
    uses.visit_file(ast);
    let used: Vec<Library> = uses
        .0
        .iter()
        .filter_map(|name| libraries.get(name).copied())
        .collect();
    Library::KNOWN
        .into_iter()
        .find(|known| used.contains(known))
        .unwrap_or(default)
}

/// An enclosing `impl` or `trait`.
struct EnclosingImpl {
    /// Its methods are named `Owner::method`.
    name: String,
    /// `#[inference] impl`: its methods run under `#[inference]`.
    inference: bool,
}

struct FnWalker<'p> {
    settings: Settings<'p>,
    owner: Vec<EnclosingImpl>,
    found: Vec<Found>,
    functions: usize,
}

/// Whether `attrs` holds an attribute whose last path segment is one of `names`.
fn has_attr(attrs: &[syn::Attribute], names: &[&str]) -> bool {
    attrs.iter().any(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| names.iter().any(|n| s.ident == n))
    })
}

/// `Foo` for `Foo<T>`, `&Foo`; `_` for other self types.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| "_".to_string(), |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "_".to_string(),
    }
}

impl FnWalker<'_> {
    fn function(&mut self, attrs: &[syn::Attribute], sig: &syn::Signature, block: &syn::Block) {
        if !self.settings.all_targets && has_attr(attrs, &["test", "bench"]) {
            return;
        }
        let bare = sig.ident.to_string();
        let name = match self.owner.last() {
            Some(owner) => format!("{}::{bare}", owner.name),
            None => bare.clone(),
        };
        if let Some(pattern) = self.settings.fns {
            if !pattern.matches(&bare) && !pattern.matches(&name) {
                return;
            }
        }
        self.functions += 1;
        if let Err(error) = allowed_in(attrs) {
            self.bad_allow(error);
        }
        let inference = has_attr(attrs, &["inference"])
            || self.owner.last().is_some_and(|owner| owner.inference);
        let context = Context {
            inference,
            library: self.settings.library,
            number_fns: Arc::clone(self.settings.number_fns),
            ..Context::of_signature(sig)
        };
        // The lints strip statement-level allows from the body they walk: walk a copy.
        let mut body = block.clone();
        let outcome = lint_fn(attrs, &mut body, &context);
        for error in outcome.errors {
            self.bad_allow(error);
        }
        self.found
            .extend(outcome.findings.into_iter().map(Found::Lint));
    }

    fn bad_allow(&mut self, error: syn::Error) {
        for error in error {
            let span = error.span();
            self.found.push(Found::BadAllow {
                message: error.to_string(),
                start: span.start(),
                end: span.end(),
            });
        }
    }

    /// Walks `f` as a free scope: items nested in a body are free functions.
    fn free_scope(&mut self, f: impl FnOnce(&mut Self)) {
        let saved = std::mem::take(&mut self.owner);
        f(self);
        self.owner = saved;
    }
}

impl<'ast> Visit<'ast> for FnWalker<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !self.settings.all_targets && is_cfg_test(&module.attrs) {
            return;
        }
        self.free_scope(|this| syn::visit::visit_item_mod(this, module));
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.function(&item.attrs, &item.sig, &item.block);
        self.free_scope(|this| syn::visit::visit_item_fn(this, item));
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !self.settings.all_targets && is_cfg_test(&item.attrs) {
            return;
        }
        self.owner.push(EnclosingImpl {
            name: type_name(&item.self_ty),
            inference: has_attr(&item.attrs, &["inference"]),
        });
        syn::visit::visit_item_impl(self, item);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.function(&item.attrs, &item.sig, &item.block);
        self.free_scope(|this| syn::visit::visit_impl_item_fn(this, item));
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        self.owner.push(EnclosingImpl {
            name: item.ident.to_string(),
            inference: false,
        });
        syn::visit::visit_item_trait(self, item);
        self.owner.pop();
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.function(&item.attrs, &item.sig, block);
            self.free_scope(|this| syn::visit::visit_block(this, block));
        }
    }

    // `extern { fn f(); }` has no bodies; `macro_rules!` bodies are tokens syn never parses.
    fn visit_item_foreign_mod(&mut self, _: &'ast syn::ItemForeignMod) {}
}
