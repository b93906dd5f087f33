//! Drop at last use: the transform shared by `#[inference]` and `#[batch_scope]`.
//!
//! Entry point: [`insert_drops`]. It rewrites a block (a function body, or a loop body for
//! `#[batch_scope]`) so that each local declared in it, and each by-value parameter, whose type
//! is `DropAtLastUse` is dropped right after the statement of its last use instead of at the end of
//! its scope; every other value keeps its scope end. Nested blocks
//! (branches, loop bodies, closure bodies, `unsafe` and async blocks) are handled the same way
//! for the locals they declare; nested `fn` items are left alone.
//!
//! # Glossary (one name per concept, in code, docs and errors)
//!
//! - *drop*: freeing a value of a `DropAtLastUse` type before its scope ends (the trait
//!   `DropAtLastUse`, the facade's `__private::drop_at_last_use`): [`insert_drops`],
//!   [`DropOptions`], [`DropReport`], `plan::StmtDrops`;
//! - *drop point*: the statement after which a binding is dropped (`plan::drop_points`);
//! - *scope end*: where Rust itself drops a value; "drop" is used only for Rust's own drop;
//! - *last use*: the last statement that mentions a binding (the runtime helper `last_use`
//!   rebinds a value moved into that statement);
//! - *mention*: a name occurring in a statement (`analysis::mentions`);
//! - *source*: where a value may hold references from (`analysis::sources`);
//! - *kept*: never dropped early (`keep(..)`, `#[keep]`, guards, raw addresses…; the field
//!   `Binding::kept`); the user-facing word is `keep`;
//! - *fallback*: the copy of a statement written twice that runs when the type is not
//!   `DropAtLastUse`;
//! - *handed in*: a binding of an enclosing block that dies inside an `if`/`match` statement,
//!   planned as an entry binding of each branch that uses it (`ParamBinding::handed_in`);
//! - `drops = false`: the attribute option that turns the transform off (public API, so its
//!   name stays).
//!
//! # Layout
//!
//! - [`analysis`]: facts about each statement, no decisions (mentions, sources, patterns,
//!   shapes, the known-name lists);
//! - [`plan`]: per block, the borrow graph, the drop points and the per-statement schedule;
//! - [`rewrite`]: applies the plan, innermost blocks first, writing statements twice where
//!   they may move a binding;
//! - [`emit`]: the small pieces of generated code (probes, drops, rebinds, imports).
//!
//! # Technique
//!
//! The macro has no types. It finds each binding's last use from the syntax and emits, there,
//! code in which the *compiler* decides from the binding's type whether it is dropped: a
//! probe (`__private::Probe`, autoref specialization) answers `true` for `DropAtLastUse` types. Two
//! forms, chosen by how the statement uses the binding:
//!
//! ```text
//! // the statement only borrows `x` (`&x`, `x.len()`, `x += 1`, a format argument):
//! f(&x);            →   f(&x); if <x: DropAtLastUse> { drop(x); }
//! let x = g(&x)?;   →   let x = { let v = g(&x)?; if <x: DropAtLastUse> { drop(x); } v };
//! // the statement may move `x` (`x.relu()`, `h(x)`): written twice, the type chooses
//! let y = x.relu()?; →  let y = if !<x: DropAtLastUse or Copy> { x.relu()? }
//!                                else { let x = last_use(x); let v = x.relu()?; v };
//! // the statement moves `x` on every path on which it completes (`h(x)`, `x?`, `a + x`,
//! // `for i in x {..}`, a `move` closure that takes it): nothing to drop, left as written
//! let y = h(x);     →   let y = h(x);
//! ```
//!
//! The conditional drop is a conditional move: when the probe says no, the compiler's drop
//! flag keeps the value to the end of its scope, in its original drop order. The statement
//! written twice moves the binding in only when its type allows; a `mut` binding is moved in
//! only if `DropAtLastUse` (a moved-in `Copy` value would be mutated as a copy). Inside the
//! fallback copy no statement is written twice again (`no_dup`), so the output grows at most by one
//! copy per nesting level. Several bindings moved into one statement share one choice (all of them
//! or none), so a statement is never written more than twice. The copies differ only in the
//! rebinding and the receivers of in-place calls, so a mistake inside the statement is the same
//! diagnostic twice, which rustc reports once.
//!
//! A binding whose drop point is an `if`/`match` statement is dropped inside it instead
//! where every branch can (see `plan::branches`): the branches that use it get it handed in
//! and drop it at their own last use (in a branch's value too: `{ …; let v = TAIL;
//! drop(x); v }`), the others at their start:
//!
//! ```text
//! if c { let n = f(&x); g(n) } else { h() }
//!   →  if c { let n = f(&x); if <x: DropAtLastUse> { drop(x); } g(n) }
//!      else { if <x: DropAtLastUse> { drop(x); } h() }
//! ```
//!
//! Temporaries never sit in a block's tail expression (edition 2021 drops those after the
//! block's locals): the initializer is bound to a local first, with the `let`'s type
//! annotation copied onto it so that inference is unchanged. A drop lands inside a `let`'s
//! initializer only when the `let` shadows the dropped name.
//!
//! # Where each rule lives
//!
//! The user-facing list of what is never dropped early is the `#[inference]` documentation
//! in `lib.rs`. Each rule is decided in one place:
//! - guards, `keep(..)`, `#[keep]`, `let x;`, `#[cfg]` lets, raw addresses, stores outside the
//!   block: `plan::graph` (the binding is *kept*);
//! - borrowers pushing a drop point back, shadowing, partial moves, unknown statement
//!   macros, `let … else`, nothing to gain at the block's end: `plan::drop_points`;
//! - a reference an accessor returns (`x.dims()`: never dropped, it frees nothing):
//!   `plan::graph`;
//! - moved in (written twice) or dropped after, closures, deferred types, the fallback copy,
//!   a borrower whose last statement moves or writes what it borrows, a borrowed value that
//!   its statement may move as a receiver: `plan::schedule`;
//! - dropped inside the branches of an `if`/`match` (conditions, scrutinees, guards, patterns,
//!   each branch's own last use): `plan::branches`, with the branch shapes of
//!   `analysis::branches`; written by `rewrite` (a missing `else` becomes one);
//! - what counts as a use, a move, a borrow or a store: `analysis::mentions`; what a value may
//!   borrow from: `analysis::sources` with the name lists of `analysis::known_names`.
//!
//! A block that contains `unsafe` code gets no early drops at all: unsafe code may rely on a
//! value living to the end of its scope in ways no syntactic analysis can see.
//!
//! Every mistake the analysis could make surfaces as a borrow-check or move error at compile
//! time (the rewrite only moves values; it never creates references or `unsafe` code).

mod analysis;
mod emit;
mod inplace;
mod plan;
mod rewrite;

use std::collections::{BTreeMap, BTreeSet};

use syn::{Block, Ident};

use analysis::block::{self, ParamBinding};
use rewrite::Rewriter;

pub(crate) use analysis::block::{declared_names, params_of, pattern_params, scalar_params};
pub(crate) use analysis::patterns::pattern_names;
pub(crate) use rewrite::strip_keep_markers;

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
    /// Names the function's signature declares as primitive numbers (`eps: f64`): what is
    /// computed from them is a number too (see `analysis::shapes::scalar`).
    pub scalars: BTreeSet<String>,
    /// `?` marks a fallible tensor op (see `analysis::Env::try_owns`): not in a function
    /// returning `Option` ([`returns_option`]).
    pub try_owns: bool,
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
            scalars: BTreeSet::new(),
            try_owns: true,
        }
    }
}

/// Whether a signature returns `Option<..>`: its `?`s unwrap lookups (`re.find(&line)?`), whose
/// results borrow their arguments, not fallible tensor ops.
pub(crate) fn returns_option(sig: &syn::Signature) -> bool {
    match &sig.output {
        syn::ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(path) => path
                .path
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "Option"),
            _ => false,
        },
        syn::ReturnType::Default => false,
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
    /// there with or without the attribute, so nothing is left to drop).
    pub moved_at_last_use: usize,
    /// Calls rewritten to let the receiver's type choose a consuming form (see `inplace`).
    pub in_place_calls: usize,
    /// `mut` parameters moved into a later statement: the caller should put
    /// `#[allow(unused_mut)]` on them (the mutation may now happen on the rebinding).
    pub moved_mut_params: Vec<String>,
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
    if block::contains_unsafe(block) {
        strip_keep_markers(block);
        return DropReport {
            contains_unsafe: true,
            ..DropReport::default()
        };
    }
    let mut local_macros = BTreeMap::new();
    block::collect_local_macros(block, &mut local_macros);
    let mut rewriter = Rewriter {
        opts,
        local_macros,
        mixed_hygiene: block::mixed_hygiene_names(block, params),
        report: DropReport::default(),
        depth: 0,
        no_dup: false,
        probes: false,
        outer_scalars: opts.scalars.clone(),
    };
    rewriter.block(block, params);
    if rewriter.probes {
        block.stmts.insert(0, emit::imports(&opts.krate));
    }
    rewriter.report
}

#[cfg(test)]
mod tests;
