//! Drop-at-last-use: the transform shared by `#[inference]` and `#[batch_scope]`.
//!
//! Entry point: [`insert_drops`]. It rewrites a block (a function body, or a loop body for
//! `#[batch_scope]`) so that each local declared in it, and each by-value parameter, whose type
//! is `Release` dies right after the statement of its last use instead of at the end of its
//! scope; every other value keeps its drop point. Nested blocks
//! (branches, loop bodies, closure bodies, `unsafe` and async blocks) are handled the same way
//! for the locals they declare; nested `fn` items are left alone.
//!
//! # Technique
//!
//! The macro has no types. It finds each binding's last use from the syntax and emits, there,
//! code in which the *compiler* decides from the binding's type whether it is released: a
//! probe (`__private::Probe`, autoref specialization) answers `true` for `Release` types. Two
//! forms, chosen by how the statement uses the binding:
//!
//! ```text
//! // the statement only borrows `x` (`&x`, `x.len()`, `x += 1`, a format argument):
//! f(&x);            →   f(&x); if <x: Release> { release(x); }
//! let x = g(&x)?;   →   let x = { let v = g(&x)?; if <x: Release> { release(x); } v };
//! // the statement may move `x` (`x.relu()`, `h(x)`): written twice, the type chooses
//! let y = x.relu()?; →  let y = if <x: Release or Copy> { let x = last_use(x); let v = x.relu()?; v }
//!                                else { x.relu()? };
//! ```
//!
//! The conditional release is a conditional move: when the probe says no, the compiler's drop
//! flag keeps the value to the end of its scope, in its original drop order. The statement
//! written twice moves the binding in only when its type allows; a `mut` binding is moved in
//! only if `Release` (a moved-in `Copy` value would be mutated as a copy). Inside the second
//! copy no statement is written twice again (`no_dup`), so the output grows at most by one copy
//! per nesting level. Several bindings moved into one statement share one choice (all of them
//! or none), so a statement is never written more than twice.
//!
//! Temporaries never sit in a block's tail expression (edition 2021 drops those after the
//! block's locals): the initializer is bound to a local first, with the `let`'s type
//! annotation copied onto it so that inference is unchanged. A release lands inside a `let`'s
//! initializer only when the `let` shadows the released name.
//!
//! # When a local is *not* dropped early (it then lives to the end of its scope, as without
//! the attribute)
//!
//! - guards: `_`-prefixed names, and bindings never mentioned after their declaration;
//! - names in `keep(..)`, `let`s marked `#[keep]`, `let x;` declarations without initializer;
//! - the last use is the block's tail expression (nothing to gain), or the block's last
//!   statement;
//! - a binding that may borrow the local lives on and the borrow's origin may also have moved
//!   the local (an unknown method on it, an unknown macro, a non-`move` closure capturing it);
//! - a borrower outlives a redeclaration (shadowing) of the local's name;
//! - a field of the local may have been moved out before its last use;
//! - the last use is an unknown statement macro (it might declare bindings), or the `else`
//!   block of a `let … else`;
//! - its address is taken as a raw pointer, or it is stored into something outside the block.
//!
//! A block that contains `unsafe` code gets no early drops at all: unsafe code may rely on a
//! value living to the end of its scope in ways no syntactic analysis can see.
//!
//! Every mistake the analysis could make surfaces as a borrow-check or move error at compile
//! time (the rewrite only moves values; it never creates references or `unsafe` code).

mod build;
mod format;
mod inplace;
mod lists;
mod scan;

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Ident, Item, Stmt};

use scan::{Env, Kind, Source};

pub(crate) use lists::is_known_macro;
pub(crate) use scan::pattern_bindings;

/// A by-value parameter (or other binding) the transformed block owns on entry.
#[derive(Clone, Debug)]
pub(crate) struct ParamBinding {
    /// The bound name.
    pub ident: Ident,
    /// Declared `mut`: the rebinding must be `let mut` too.
    pub mutable: bool,
}

/// What the transform needs to know.
#[derive(Clone)]
pub(crate) struct DropOptions {
    /// Path of the facade crate (`::vramguard` unless renamed with `crate = path`).
    pub krate: syn::Path,
    /// Locals never dropped early (`keep(a, b)`).
    pub keep: Vec<Ident>,
    /// Extra method/function names whose result owns its data (`owned(..)`).
    pub owned: Vec<String>,
    /// Extra method names whose result borrows the receiver (`borrows(..)`).
    pub borrows: Vec<String>,
    /// Measurement only: pretend every unknown call returns an owned value. Never used for
    /// code generation.
    pub optimistic: bool,
    /// Call consuming forms at last use (`inplace = false` turns it off; see `inplace`).
    pub inplace: bool,
}

impl DropOptions {
    /// Options with the default lists and nothing kept.
    pub(crate) fn new(krate: syn::Path) -> Self {
        Self {
            krate,
            keep: Vec::new(),
            owned: Vec::new(),
            borrows: Vec::new(),
            optimistic: false,
            inplace: true,
        }
    }
}

/// What the transform did, for tests and measurements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DropReport {
    /// Bindings that are not guards and are used after their declaration.
    pub candidates: usize,
    /// Of those, the ones now dropped before the end of their scope.
    pub dropped_early: usize,
    /// Names of the bindings dropped early, as `name@block_depth` (for tests).
    pub dropped: Vec<String>,
    /// The block contains `unsafe` code and was left without early drops.
    pub contains_unsafe: bool,
    /// Of the candidates, those whose last use passes them by value on every path (moved
    /// there with or without the attribute, so nothing is left to release).
    pub moved_at_last_use: usize,
    /// Calls rewritten to let the receiver's type choose a consuming form (see `inplace`).
    pub in_place_calls: usize,
    /// `mut` parameters moved into a later statement: the caller should put
    /// `#[allow(unused_mut)]` on them (the mutation may now happen on the rebinding).
    pub moved_mut_params: Vec<String>,
}

/// The by-value parameters of a signature: ident patterns (and destructured patterns) whose
/// type is not a reference. `self` is never included (it cannot be rebound).
pub(crate) fn params_of(sig: &syn::Signature) -> Vec<ParamBinding> {
    let mut out = Vec::new();
    for input in &sig.inputs {
        if let syn::FnArg::Typed(typed) = input {
            // Dropping a reference or a primitive number early frees nothing.
            if scan::plain_type(&typed.ty) {
                continue;
            }
            let mut names = Vec::new();
            scan::pattern_bindings(&typed.pat, &mut names);
            out.extend(
                names
                    .into_iter()
                    .map(|(ident, mutable)| ParamBinding { ident, mutable }),
            );
        }
    }
    out
}

/// The bindings of a pattern (a `for` or `while let` pattern), as owned bindings of the block
/// that follows it; `_`-prefixed names are left out (guards by convention).
pub(crate) fn pattern_params(pat: &syn::Pat) -> Vec<ParamBinding> {
    let mut names = Vec::new();
    scan::pattern_bindings(pat, &mut names);
    names
        .into_iter()
        .filter(|(ident, _)| !ident.to_string().starts_with('_'))
        .map(|(ident, mutable)| ParamBinding { ident, mutable })
        .collect()
}

/// The names a pattern binds.
pub(crate) fn pattern_names(pat: &syn::Pat, out: &mut Vec<String>) {
    let mut names = Vec::new();
    scan::pattern_bindings(pat, &mut names);
    out.extend(names.into_iter().map(|(ident, _)| ident.to_string()));
}

/// Inserts drops at last use into `block` and every block nested in it. `params` are the
/// bindings the block owns on entry (a function's by-value parameters; empty for a loop body).
/// Also strips the inert `#[keep]` markers from `let` statements.
pub(crate) fn insert_drops(
    block: &mut Block,
    params: &[ParamBinding],
    opts: &DropOptions,
) -> DropReport {
    // Unsafe code may rely on a value living to the end of its scope in ways no syntactic
    // analysis sees (`&x` coerced to `*const T` by a call that stashes it, read later by
    // another unsafe call that never names `x`). A block containing `unsafe` is left alone.
    if contains_unsafe(block) {
        strip_keep_markers(block);
        return DropReport {
            contains_unsafe: true,
            ..DropReport::default()
        };
    }
    let mut local_macros = BTreeMap::new();
    collect_local_macros(block, &mut local_macros);
    let mut rewriter = Rewriter {
        opts,
        local_macros,
        mixed_hygiene: mixed_hygiene_names(block, params),
        report: DropReport::default(),
        depth: 0,
        mut_decls: BTreeSet::new(),
        no_dup: false,
        probes: false,
    };
    rewriter.block(block, params);
    if rewriter.probes {
        block.stmts.insert(0, build::imports(&opts.krate));
    }
    rewriter.report
}

/// Removes `#[keep]` markers without transforming anything (`drops = false`).
pub(crate) fn strip_keep_markers(block: &mut Block) {
    struct Strip;
    impl VisitMut for Strip {
        fn visit_local_mut(&mut self, local: &mut syn::Local) {
            local.attrs.retain(|a| !is_keep_attr(a));
            visit_mut::visit_local_mut(self, local);
        }
        fn visit_item_mut(&mut self, _: &mut Item) {}
    }
    Strip.visit_block_mut(block);
}

/// Every binding name declared anywhere in `block` (for validating `keep(..)`).
pub(crate) fn declared_names(block: &Block, out: &mut BTreeSet<String>) {
    struct Names<'a>(&'a mut BTreeSet<String>);
    impl<'ast> syn::visit::Visit<'ast> for Names<'_> {
        fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
            self.0.insert(pat.ident.unraw().to_string());
            syn::visit::visit_pat_ident(self, pat);
        }
        fn visit_item(&mut self, _: &'ast Item) {}
    }
    syn::visit::Visit::visit_block(&mut Names(out), block);
}

/// Whether `block` contains an `unsafe` block (nested items excluded).
pub(crate) fn contains_unsafe(block: &Block) -> bool {
    struct Find(bool);
    impl<'ast> syn::visit::Visit<'ast> for Find {
        fn visit_expr_unsafe(&mut self, _: &'ast syn::ExprUnsafe) {
            self.0 = true;
        }
        fn visit_item(&mut self, _: &'ast Item) {}
        fn visit_macro(&mut self, mac: &'ast syn::Macro) {
            // Macro arguments are tokens: look for the keyword.
            fn scan(tokens: TokenStream) -> bool {
                tokens.into_iter().any(|t| match t {
                    TokenTree::Ident(i) => i == "unsafe",
                    TokenTree::Group(g) => scan(g.stream()),
                    _ => false,
                })
            }
            self.0 |= scan(mac.tokens.clone());
        }
    }
    let mut find = Find(false);
    syn::visit::Visit::visit_block(&mut find, block);
    find.0
}

/// The names of locals of `block` that occur with more than one hygiene context in it.
///
/// Stable proc macros cannot compare hygiene, but the compiler's `Debug` of a span starts with
/// its syntax context (`#3 bytes(10..11)`); outside the compiler (unit tests) there is none and
/// every name counts as one context. Only identifiers spelling a declared local are asked (the
/// rule pins locals), and the tree is walked rather than printed: each `Debug` is a round trip
/// to the compiler.
fn mixed_hygiene_names(block: &Block, params: &[ParamBinding]) -> BTreeSet<String> {
    let mut declared: BTreeSet<String> =
        params.iter().map(|p| p.ident.unraw().to_string()).collect();
    declared_names(block, &mut declared);
    if declared.is_empty() {
        return BTreeSet::new();
    }
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    crate::common::visit_idents(
        &mut |ident| {
            let name = ident.unraw().to_string();
            if declared.contains(&name) {
                let debug = format!("{:?}", ident.span());
                if let Some(context) = debug.strip_prefix('#').and_then(|d| d.split(' ').next()) {
                    seen.entry(name).or_default().insert(context.to_string());
                }
            }
            true
        },
        |visitor| syn::visit::Visit::visit_block(visitor, block),
    );
    seen.into_iter()
        .filter(|(_, contexts)| contexts.len() > 1)
        .map(|(name, _)| name)
        .collect()
}

fn is_cfg_attr(attr: &syn::Attribute) -> bool {
    attr.path().is_ident("cfg") || attr.path().is_ident("cfg_attr")
}

fn is_keep_attr(attr: &syn::Attribute) -> bool {
    attr.path().is_ident("keep")
}

fn collect_local_macros(block: &Block, out: &mut BTreeMap<String, BTreeSet<String>>) {
    struct Macros<'a>(&'a mut BTreeMap<String, BTreeSet<String>>);
    impl<'ast> syn::visit::Visit<'ast> for Macros<'_> {
        fn visit_item_macro(&mut self, item: &'ast syn::ItemMacro) {
            if let (Some(name), true) = (&item.ident, item.mac.path.is_ident("macro_rules")) {
                let mut idents = BTreeSet::new();
                idents_of(item.mac.tokens.clone(), &mut idents);
                self.0.entry(name.to_string()).or_default().extend(idents);
            }
        }
    }
    syn::visit::Visit::visit_block(&mut Macros(out), block);
    // A local macro whose body invokes another local macro mentions what that one mentions
    // (`macro_rules! show { () => { get_n!() } }`): close the sets transitively.
    loop {
        let mut changed = false;
        let names: Vec<String> = out.keys().cloned().collect();
        for name in &names {
            let inner: BTreeSet<String> = out[name]
                .iter()
                .filter(|ident| *ident != name)
                .filter_map(|ident| out.get(ident))
                .flatten()
                .cloned()
                .collect();
            if let Some(idents) = out.get_mut(name) {
                let before = idents.len();
                idents.extend(inner);
                changed |= idents.len() != before;
            }
        }
        if !changed {
            break;
        }
    }
}

fn idents_of(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for token in tokens {
        match token {
            TokenTree::Ident(ident) => {
                out.insert(ident.unraw().to_string());
            }
            TokenTree::Group(group) => idents_of(group.stream(), out),
            TokenTree::Literal(literal) => {
                if let Ok(text) = syn::parse2::<syn::LitStr>(TokenTree::Literal(literal).into()) {
                    out.extend(format::captures(&text.value()));
                }
            }
            TokenTree::Punct(_) => {}
        }
    }
}

/// Past any statement index: "lives to the end of its scope".
const END: usize = usize::MAX;

struct Binding {
    ident: Ident,
    mutable: bool,
    /// Statement index of the declaration; `None` for parameters.
    decl: Option<usize>,
    /// Never dropped early whatever its uses (guard, `keep`, no initializer…).
    pinned: bool,
    mentions: Vec<usize>,
    partial_moves: Vec<usize>,
    /// Statements passing it by value (see [`scan::Mention::consumed`]).
    consumed_at: Vec<usize>,
    /// Statements that use this binding without moving it (`x += 1`, `f(&mut x)`, `x = …`):
    /// see [`Rewriter::plan`] on `mut` bindings.
    kept_in_place: Vec<usize>,
    /// A closure or async block: never `Release`, so never released; its last use still
    /// ends the borrows it holds (it has no drop glue of its own that uses them).
    never_released: bool,
    /// Its type may be decided by a later use (`Vec::new()`, `parse()`, `collect()`,
    /// `x as _`, `None`): a probe placed before that use could not tell its type yet.
    type_deferred: bool,
    shadowed_at: Option<usize>,
    /// Statements where this binding may not be moved in (`else` of a let-else).
    no_move_in: Vec<usize>,
}

/// `from` may hold references into `to` since statement `at`.
struct Edge {
    from: usize,
    to: usize,
    kind: Kind,
    /// `from` is a reference into `to` (reading through it yields what `to` holds).
    into: bool,
    at: usize,
}

/// For each statement index: the bindings to move into it, and those to release after it.
#[derive(Default)]
struct StmtDrops {
    /// Bindings the statement may move: it is written twice (see [`wrap`]).
    move_in: Vec<(Ident, bool)>,
    /// Bindings released once the statement is done with them: right after it, or, for a
    /// `let` that shadows one of them (and whose value does not borrow them), inside its
    /// initializer, before the new binding takes the name.
    release_after: Vec<Ident>,
    /// The `let`'s value may borrow a released binding: release after the whole statement.
    after_value_borrows: bool,
}

struct Rewriter<'o> {
    opts: &'o DropOptions,
    local_macros: BTreeMap<String, BTreeSet<String>>,
    /// Names written in more than one hygiene context (`$m` and a `macro_rules!` body's own
    /// `m`): the scan compares names as text, so it cannot tell their uses apart, and locals
    /// of these names keep their drop points.
    mixed_hygiene: BTreeSet<String>,
    report: DropReport,
    depth: usize,
    /// Statement indices of the current block's `let mut` declarations moved into a later
    /// statement.
    mut_decls: BTreeSet<usize>,
    /// Rewriting the kept copy of a statement that is written twice: no statement inside it
    /// is written twice again, so the output stays within (nesting depth + 1) × the input.
    no_dup: bool,
    /// A release probe was emitted: the block needs the probe traits in scope.
    probes: bool,
}

impl Rewriter<'_> {
    fn env(&self) -> Env<'_> {
        Env {
            owned: &self.opts.owned,
            borrows: &self.opts.borrows,
            local_macros: &self.local_macros,
            optimistic: self.opts.optimistic,
        }
    }

    fn block(&mut self, block: &mut Block, params: &[ParamBinding]) {
        let plan = self.plan(block, params);
        let mut_decls = std::mem::take(&mut self.mut_decls);
        // A statement that may move a binding it releases is written twice (see `apply`);
        // its second copy, used when the binding's type is not `Release`, starts from the
        // statement as written.
        let mut kept: BTreeMap<usize, Stmt> = plan
            .iter()
            .filter(|(_, drops)| !drops.move_in.is_empty())
            .map(|(&index, _)| (index, block.stmts[index].clone()))
            .collect();
        self.depth += 1;
        for stmt in &mut block.stmts {
            self.visit_stmt_mut(stmt);
        }
        let no_dup = std::mem::replace(&mut self.no_dup, true);
        for stmt in kept.values_mut() {
            self.visit_stmt_mut(stmt);
        }
        self.no_dup = no_dup;
        self.depth -= 1;
        self.mut_decls = mut_decls;
        for stmt in block.stmts.iter_mut().chain(kept.values_mut()) {
            if let Stmt::Local(local) = stmt {
                local.attrs.retain(|a| !is_keep_attr(a));
            }
        }
        self.apply(block, plan, kept);
    }

    fn plan(&mut self, block: &Block, params: &[ParamBinding]) -> BTreeMap<usize, StmtDrops> {
        let env = self.env();
        let count = block.stmts.len();
        let mut bindings: Vec<Binding> = Vec::new();
        let mut edges: Vec<Edge> = Vec::new();
        let mut current: BTreeMap<String, usize> = BTreeMap::new();
        let mut wrappable = vec![true; count];
        let duplicable: Vec<bool> = block.stmts.iter().map(scan::duplicable).collect();
        let branching: Vec<bool> = block.stmts.iter().map(scan::has_branches).collect();
        // Locals the value of a `let` initializer may borrow: moving them into that statement
        // would leave the value dangling (`let _ = &x;` binds nothing to carry the borrow).
        let mut borrowed_by_value: Vec<Vec<(usize, Kind)>> = vec![Vec::new(); count];
        let mixed_hygiene = &self.mixed_hygiene;
        let keep: BTreeSet<String> = self
            .opts
            .keep
            .iter()
            .map(|k| k.unraw().to_string())
            .collect();

        let declare = |bindings: &mut Vec<Binding>,
                       current: &mut BTreeMap<String, usize>,
                       ident: &Ident,
                       mutable: bool,
                       decl: Option<usize>,
                       pinned: bool| {
            let name = ident.unraw().to_string();
            if let Some(&old) = current.get(&name) {
                if let Some(at) = decl {
                    bindings[old].shadowed_at.get_or_insert(at);
                }
            }
            let guard =
                name.starts_with('_') || keep.contains(&name) || mixed_hygiene.contains(&name);
            bindings.push(Binding {
                ident: ident.clone(),
                mutable,
                decl,
                pinned: pinned || guard,
                mentions: Vec::new(),
                partial_moves: Vec::new(),
                consumed_at: Vec::new(),
                kept_in_place: Vec::new(),
                type_deferred: false,
                never_released: false,
                shadowed_at: None,
                no_move_in: Vec::new(),
            });
            current.insert(name, bindings.len() - 1);
            bindings.len() - 1
        };

        for param in params {
            declare(
                &mut bindings,
                &mut current,
                &param.ident,
                param.mutable,
                None,
                false,
            );
        }

        let resolve = |current: &BTreeMap<String, usize>,
                       edges: &[Edge],
                       sources: &[Source]|
         -> Vec<(usize, Kind, bool)> {
            let mut out = Vec::new();
            for source in sources {
                match source {
                    Source::Storage(name, kind, into) => {
                        if let Some(&b) = current.get(name) {
                            out.push((b, *kind, *into));
                        }
                    }
                    // What the named local may borrow, the new value may borrow too.
                    Source::ValueOf(name) => {
                        if let Some(&b) = current.get(name) {
                            out.extend(
                                edges
                                    .iter()
                                    .filter(|e| e.from == b)
                                    .map(|e| (e.to, e.kind, e.into)),
                            );
                        }
                    }
                    // Read out of the local: through a reference into `t`, what `t` holds.
                    Source::Contents(name) => {
                        if let Some(&b) = current.get(name) {
                            for edge in edges.iter().filter(|e| e.from == b) {
                                if edge.into {
                                    out.extend(
                                        edges
                                            .iter()
                                            .filter(|e| e.from == edge.to)
                                            .map(|e| (e.to, e.kind, e.into)),
                                    );
                                } else {
                                    out.push((edge.to, edge.kind, edge.into));
                                }
                            }
                        }
                    }
                }
            }
            out
        };

        for (index, stmt) in block.stmts.iter().enumerate() {
            let facts = env.scan_stmt(stmt);
            for (name, mention) in &facts.mentions {
                if let Some(&b) = current.get(name) {
                    bindings[b].mentions.push(index);
                    if mention.partial {
                        bindings[b].partial_moves.push(index);
                    }
                    if mention.consumed {
                        bindings[b].consumed_at.push(index);
                    }
                    // Not after a statement that may move it (`loop { let n = f(cur);
                    // if .. { break } cur = n; }` can exit with `cur` moved).
                    if !mention.moved {
                        bindings[b].kept_in_place.push(index);
                    }
                    if mention.raw_address {
                        bindings[b].pinned = true;
                    }
                }
            }
            for (target, sources) in &facts.stores {
                let resolved = resolve(&current, &edges, sources);
                match current.get(target) {
                    Some(&t) => {
                        // Stored through a reference (`let sink = &mut names; sink.push(&s)`):
                        // what the reference points into holds the borrow too.
                        let mut holders = vec![t];
                        holders
                            .extend(edges.iter().filter(|e| e.from == t && e.into).map(|e| e.to));
                        for holder in holders {
                            // A value cannot borrow itself (`f(&mut a, &mut b)` stores each
                            // into the other, and so back into itself).
                            edges.extend(resolved.iter().filter(|r| r.0 != holder).map(
                                |&(to, kind, into)| Edge {
                                    from: holder,
                                    to,
                                    kind,
                                    into,
                                    at: index,
                                },
                            ));
                        }
                    }
                    // Stored into something declared outside this block: keep it whole.
                    None => resolved
                        .into_iter()
                        .for_each(|(to, _, _)| bindings[to].pinned = true),
                }
            }
            match stmt {
                Stmt::Macro(mac) if !is_known_macro(&scan::macro_name(&mac.mac)) => {
                    wrappable[index] = false;
                }
                Stmt::Expr(Expr::Macro(mac), _) if !is_known_macro(&scan::macro_name(&mac.mac)) => {
                    wrappable[index] = false;
                }
                Stmt::Local(local) => {
                    let mut names = Vec::new();
                    let has_ref = match local.init.as_ref().map(|i| i.diverge.is_some()) {
                        Some(true) => scan::pattern_bindings(&local.pat, &mut names),
                        _ => scan::let_bindings(&local.pat, &mut names),
                    };
                    let marked_keep = local.attrs.iter().any(is_keep_attr);
                    let mut resolved = Vec::new();
                    if let Some(init) = &local.init {
                        // `let r = &make(&x);` and `ref` bindings: everything mentioned.
                        let sources = if has_ref || Env::has_extended_temporary(&init.expr) {
                            env.conservative(&init.expr)
                        } else {
                            env.value_sources(&init.expr)
                        };
                        resolved = resolve(&current, &edges, &sources);
                        borrowed_by_value[index] =
                            resolved.iter().map(|&(b, k, _)| (b, k)).collect();
                        if let Some((_, otherwise)) = &init.diverge {
                            for name in env.scan_expr(otherwise).mentions.keys() {
                                if let Some(&b) = current.get(name) {
                                    bindings[b].no_move_in.push(index);
                                }
                            }
                        }
                    }
                    let uninit = local.init.is_none();
                    let type_deferred = match (&local.pat, &local.init) {
                        (syn::Pat::Type(typed), _) if !scan::has_placeholder(&typed.ty) => false,
                        (_, Some(init)) => scan::type_deferred(&init.expr),
                        (_, None) => true,
                    };
                    // A closure, an async block, or what a local closure returns: never
                    // `Release`, and whether it is `Copy` is known only once its captures are,
                    // too late for a probe. It keeps its drop point.
                    let closure_typed = local.init.as_ref().is_some_and(|init| {
                        scan::may_hold_closure(&init.expr)
                            || scan::calls_local(&init.expr, &|name| current.contains_key(name))
                    });
                    // Not `Release` by its syntax: a probe would only ever answer "keep".
                    let plain = match (&local.pat, &local.init) {
                        (syn::Pat::Type(typed), _) if scan::plain_type(&typed.ty) => true,
                        (_, Some(init)) => scan::never_release(&init.expr),
                        (_, None) => false,
                    };
                    // `#[cfg(..)] let x = …;` may be compiled out: whether it shadows `x` is
                    // unknown, so neither the old nor the new `x` is dropped early.
                    let conditional = local.attrs.iter().any(is_cfg_attr);
                    for (ident, mutable) in &names {
                        if conditional {
                            if let Some(&old) = current.get(&ident.unraw().to_string()) {
                                bindings[old].pinned = true;
                            }
                        }
                        let new = declare(
                            &mut bindings,
                            &mut current,
                            ident,
                            *mutable,
                            Some(index),
                            marked_keep || uninit || conditional,
                        );
                        bindings[new].never_released = closure_typed || plain;
                        bindings[new].type_deferred = type_deferred;
                        edges.extend(resolved.iter().map(|&(to, kind, into)| Edge {
                            from: new,
                            to,
                            kind,
                            into,
                            at: index,
                        }));
                    }
                }
                _ => {}
            }
        }

        // Drop points: own last mention, pushed back by borrowers, or END.
        // Dropping at the last statement or in the tail expression gains nothing.
        let last_stmt = count.saturating_sub(1);
        let mut end: Vec<usize> = bindings
            .iter()
            .map(|b| {
                let own = b.mentions.iter().copied().max();
                match own {
                    _ if b.pinned => END,
                    None => END,
                    Some(at) => at,
                }
            })
            .collect();
        loop {
            let mut changed = false;
            for edge in &edges {
                let borrower_end = end[edge.from];
                if borrower_end <= edge.at
                    || borrower_end <= end[edge.to] && edge.kind == Kind::Borrow
                {
                    continue;
                }
                let new = if edge.kind == Kind::Maybe {
                    END
                } else {
                    borrower_end
                };
                if new > end[edge.to] {
                    end[edge.to] = new;
                    changed = true;
                }
            }
            for (b, binding) in bindings.iter().enumerate() {
                let at = end[b];
                if at == END {
                    continue;
                }
                let pushed_past_shadow = binding.shadowed_at.is_some_and(|s| at > s);
                // A borrower pushed the drop point past a statement that passes the value by
                // value (the borrow was a conservative guess): nothing may be left to release.
                let partially_moved_before = binding.partial_moves.iter().any(|&p| p < at)
                    || binding.consumed_at.iter().any(|&m| m < at);
                let nothing_to_gain = at >= last_stmt;
                let mentioned = binding.mentions.contains(&at);
                let cannot_move_in =
                    mentioned && (!wrappable[at] || binding.no_move_in.contains(&at));
                let maybe_borrowed_by_value = borrowed_by_value[at]
                    .iter()
                    .any(|&(to, kind)| to == b && kind == Kind::Maybe);
                if pushed_past_shadow
                    || partially_moved_before
                    || nothing_to_gain
                    || cannot_move_in
                    || maybe_borrowed_by_value
                {
                    end[b] = END;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }

        let mut plan: BTreeMap<usize, StmtDrops> = BTreeMap::new();
        for (b, binding) in bindings.iter().enumerate() {
            let used_after_decl = !binding.mentions.is_empty();
            let guard = binding.ident.to_string().starts_with('_');
            if used_after_decl && !guard && !self.no_dup {
                self.report.candidates += 1;
            }
            let at = end[b];
            if at == END || binding.never_released {
                continue;
            }
            // Borrowed by the statement's own value, or by a borrower the statement still
            // uses (`let residual = &x; let x = (f(&x)? + residual)?;`): moved into the
            // statement, the value would be moved while borrowed.
            let borrowed_by_value_here = borrowed_by_value[at].iter().any(|&(to, _)| to == b);
            let borrowed_here = borrowed_by_value_here
                || edges
                    .iter()
                    .any(|e| e.to == b && e.at < at && bindings[e.from].mentions.contains(&at));
            // Whether the statement may move the binding decides the form: a statement that
            // only borrows it is followed by a release; one that may move it is written twice,
            // with and without the binding moved in (see `wrap`). A statement that mutates a
            // `mut` binding without moving it is one that only borrows it: moved in, a value
            // would be mutated as a copy (the probe keeps `Copy` values, but a `Release` type
            // may be mutated too).
            let may_move_here = binding.mentions.contains(&at)
                && !borrowed_here
                && !binding.kept_in_place.contains(&at);
            // Passed by value on every path of a straight-line statement (`f(x)`, `a + x`,
            // `x?`): the statement itself moves it, so its drop point is the same either way.
            if may_move_here && binding.consumed_at.contains(&at) && !branching[at] {
                if !self.no_dup {
                    self.report.moved_at_last_use += 1;
                }
                continue;
            }
            // The binding keeps its drop point where the statement cannot be written twice:
            // inside the kept copy of a statement already written twice (one copy per nesting
            // level at most, so the output stays linear in the input per level), where the
            // copies would have different types (a closure in a `let`'s value), or where the
            // probe, placed before the statement, could not know the binding's type yet.
            if may_move_here && (self.no_dup || !duplicable[at] || binding.type_deferred) {
                continue;
            }
            if !self.no_dup {
                self.report.dropped_early += 1;
                self.report
                    .dropped
                    .push(format!("{}@{}", binding.ident, self.depth));
            }
            let drops = plan.entry(at).or_default();
            if may_move_here {
                drops.move_in.push((binding.ident.clone(), binding.mutable));
                // The last mutation may now happen on the rebinding: the declaration's `mut`
                // can become unneeded, which rustc would report on the user's line.
                if binding.mutable {
                    match binding.decl {
                        Some(decl) => {
                            self.mut_decls.insert(decl);
                        }
                        None => self.report.moved_mut_params.push(binding.ident.to_string()),
                    }
                }
            } else {
                drops.release_after.push(binding.ident.clone());
                if borrowed_by_value_here {
                    drops.after_value_borrows = true;
                }
            }
        }
        plan
    }

    fn apply(
        &mut self,
        block: &mut Block,
        plan: BTreeMap<usize, StmtDrops>,
        mut kept: BTreeMap<usize, Stmt>,
    ) {
        for decl in std::mem::take(&mut self.mut_decls) {
            if let Some(Stmt::Local(local)) = block.stmts.get_mut(decl) {
                local
                    .attrs
                    .push(build::allow(&["unused_mut"], Span::call_site()));
            }
        }
        for (index, drops) in plan.into_iter().rev() {
            let stmt = &mut block.stmts[index];
            let span = scan::first_span_of_stmt(stmt);
            let located = |ident: &Ident| {
                // Cloned, not `Ident::new`: raw identifiers (`r#type`) and the identifier's
                // hygiene (a `macro_rules!` body's own locals) stay as written.
                let mut ident = ident.clone();
                ident.set_span(ident.span().located_at(span));
                ident
            };
            // A `mut` binding moved in would be mutated as a copy if it were `Copy`.
            let condition = drops
                .move_in
                .iter()
                .map(|(ident, mutable)| {
                    let question = if *mutable {
                        "__vg_releasable"
                    } else {
                        "__vg_movable"
                    };
                    build::probe(located(ident), question, span)
                })
                .reduce(|all, next| build::and(all, next, span));
            if let (Some(condition), Some(kept)) = (condition, kept.remove(&index)) {
                self.probes = true;
                let rebinds: Vec<Stmt> = drops
                    .move_in
                    .iter()
                    .map(|(ident, mutable)| build::rebind(located(ident), *mutable, span))
                    .collect();
                let moved: &[(Ident, bool)] = if self.opts.inplace {
                    &drops.move_in
                } else {
                    &[]
                };
                self.report.in_place_calls += wrap(stmt, rebinds, condition, kept, moved);
            }
            // Released after the statement, latest declaration first (like a scope end);
            // only if the type is `Release`, otherwise the value stays to its scope's end
            // (a conditional move: the compiler's drop flag keeps its drop point and order).
            let releases: Vec<Stmt> = drops
                .release_after
                .iter()
                .rev()
                .map(|ident| {
                    self.probes = true;
                    build::release(located(ident), span)
                })
                .collect();
            if releases.is_empty() {
                continue;
            }
            match stmt {
                Stmt::Local(local)
                    if local.init.is_some()
                        && !drops.after_value_borrows
                        && shadows_any(&local.pat, &drops.release_after) =>
                {
                    release_in_initializer(local, releases);
                }
                _ => {
                    block.stmts.splice(index + 1..index + 1, releases);
                }
            }
        }
    }
}

/// Writes a statement that may move the bindings it releases twice, and lets their types
/// choose: `if <all Release> { let x = x; STMT } else { STMT }`. In the first copy the
/// bindings are moved in, so they die at the statement's end whether it borrows or moves
/// them; the second copy, `kept`, is the statement with nothing moved, so values of other
/// types keep their drop point and order. For a `let`, only the initializer is written twice.
///
/// In the first copy, calls of listed methods on the `moved` bindings become consuming calls
/// (see [`inplace`]); returns how many.
fn wrap(
    stmt: &mut Stmt,
    rebinds: Vec<Stmt>,
    condition: Expr,
    kept: Stmt,
    moved: &[(Ident, bool)],
) -> usize {
    let mut in_place = 0;
    // Built as syntax trees around the statement, never re-parsed: re-parsing a statement at
    // every level it is nested in would make the macro's own time grow with nesting depth.
    let span = scan::first_span_of_stmt(stmt);
    match (stmt, kept) {
        (Stmt::Local(local), Stmt::Local(kept)) => {
            let (Some(init), Some(kept_init)) = (&mut local.init, kept.init) else {
                return 0;
            };
            let placeholder = Expr::Verbatim(TokenStream::new());
            let mut expr = std::mem::replace(&mut *init.expr, placeholder);
            in_place += inplace::rewrite(&mut expr, moved);
            let mut then = rebinds;
            then.push(value_local(&local.pat, expr, span));
            then.push(Stmt::Expr(value_ident_expr(), None));
            let otherwise = vec![Stmt::Expr(*kept_init.expr, None)];
            let chosen = if_else(condition, then, otherwise, span);
            // `let … else` initializers may not end with `}`.
            *init.expr = if init.diverge.is_some() {
                Expr::Paren(syn::ExprParen {
                    attrs: Vec::new(),
                    paren_token: syn::token::Paren(span),
                    expr: Box::new(chosen),
                })
            } else {
                chosen
            };
        }
        (stmt @ (Stmt::Expr(..) | Stmt::Macro(_)), kept) => {
            let placeholder = Stmt::Expr(Expr::Verbatim(TokenStream::new()), None);
            let mut inner = as_statement(std::mem::replace(stmt, placeholder));
            if let Stmt::Expr(expr, _) = &mut inner {
                in_place += inplace::rewrite(expr, moved);
            }
            let mut then = rebinds;
            then.push(inner);
            let chosen = if_else(condition, then, vec![as_statement(kept)], span);
            *stmt = Stmt::Expr(chosen, None);
        }
        _ => {}
    }
    in_place
}

/// `if condition { then } else { otherwise }`.
fn if_else(condition: Expr, then: Vec<Stmt>, otherwise: Vec<Stmt>, span: Span) -> Expr {
    let block = |stmts| syn::Block {
        brace_token: syn::token::Brace(span),
        stmts,
    };
    Expr::If(syn::ExprIf {
        attrs: Vec::new(),
        if_token: syn::Token![if](span),
        cond: Box::new(condition),
        then_branch: block(then),
        else_branch: Some((
            syn::Token![else](span),
            Box::new(Expr::Block(syn::ExprBlock {
                attrs: Vec::new(),
                label: None,
                block: block(otherwise),
            })),
        )),
    })
}

/// The hygienic local that carries a `let`'s value through a block.
fn value_ident() -> Ident {
    Ident::new("__vg_value", Span::mixed_site())
}

fn value_ident_expr() -> Expr {
    build::ident(value_ident())
}

/// `let __vg_value: T = expr;`, with the type annotation of the `let` whose value it carries,
/// so that inference is unchanged.
fn value_local(pat: &syn::Pat, expr: Expr, span: Span) -> Stmt {
    let ty = match pat {
        syn::Pat::Type(typed) => Some((*typed.ty).clone()),
        _ => None,
    };
    build::local(value_ident(), ty, expr, span)
}

/// A statement that can be followed by others in a block: ends with `;` where it could
/// otherwise be read as the block's value.
fn as_statement(stmt: Stmt) -> Stmt {
    match stmt {
        Stmt::Expr(expr, None) => Stmt::Expr(expr, Some(syn::Token![;](Span::call_site()))),
        Stmt::Macro(mut mac)
            if mac.semi_token.is_none()
                && !matches!(mac.mac.delimiter, syn::MacroDelimiter::Brace(_)) =>
        {
            mac.semi_token = Some(syn::Token![;](Span::call_site()));
            Stmt::Macro(mac)
        }
        other => other,
    }
}

/// Whether a `let` pattern binds one of `names` (which the statement's releases must still
/// name as they were before it).
fn shadows_any(pat: &syn::Pat, names: &[Ident]) -> bool {
    let mut bound = Vec::new();
    scan::let_bindings(pat, &mut bound);
    bound
        .iter()
        .any(|(ident, _)| names.iter().any(|n| n.unraw() == ident.unraw()))
}

/// `let p = { let v = INIT; RELEASES v };`: the releases name the bindings as they were before
/// this `let`, which may shadow them. `INIT`'s temporaries are gone by then (a temporary
/// borrowing a released binding, `x.lock().unwrap().len()`, must die first).
fn release_in_initializer(local: &mut syn::Local, releases: Vec<Stmt>) {
    let Some(init) = &mut local.init else { return };
    let span = scan::first_span(&init.expr);
    let placeholder = Expr::Verbatim(TokenStream::new());
    let expr = std::mem::replace(&mut *init.expr, placeholder);
    let mut stmts = vec![value_local(&local.pat, expr, span)];
    stmts.extend(releases);
    stmts.push(Stmt::Expr(value_ident_expr(), None));
    let block = Expr::Block(syn::ExprBlock {
        attrs: Vec::new(),
        label: None,
        block: syn::Block {
            brace_token: syn::token::Brace(span),
            stmts,
        },
    });
    *init.expr = if init.diverge.is_some() {
        Expr::Paren(syn::ExprParen {
            attrs: Vec::new(),
            paren_token: syn::token::Paren(span),
            expr: Box::new(block),
        })
    } else {
        block
    };
}

impl VisitMut for Rewriter<'_> {
    fn visit_block_mut(&mut self, block: &mut Block) {
        self.block(block, &[]);
    }

    // Nested items are other functions: not ours to rewrite.
    fn visit_item_mut(&mut self, _: &mut Item) {}

    // A `const { }` block runs at compile time: nothing there to free, and a release probe
    // is not a `const` call.
    fn visit_expr_const_mut(&mut self, konst: &mut syn::ExprConst) {
        strip_keep_markers(&mut konst.block);
    }
}

#[cfg(test)]
mod tests;
