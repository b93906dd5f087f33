//! Release at last use: the transform shared by `#[inference]` and `#[batch_scope]`.
//!
//! Entry point: [`insert_releases`]. It rewrites a block (a function body, or a loop body for
//! `#[batch_scope]`) so that each local declared in it, and each by-value parameter, whose type
//! is `Release` is released right after the statement of its last use instead of at the end of
//! its scope; every other value keeps its scope end. Nested blocks
//! (branches, loop bodies, closure bodies, `unsafe` and async blocks) are handled the same way
//! for the locals they declare; nested `fn` items are left alone.
//!
//! # Glossary (one name per concept, in code, docs and errors)
//!
//! | concept | name |
//! |---|---|
//! | freeing a `Release` value early (the runtime's `release`, the trait `Release`) | *release*: [`insert_releases`], [`ReleaseOptions`], [`ReleaseReport`], `StmtReleases` |
//! | the statement after which a binding is released | its *release point* (`plan::release_points`) |
//! | where Rust itself drops a value | its *scope end* ("drop" only for Rust's own drop) |
//! | the last statement that mentions a binding | its *last use* (the runtime helper `last_use` rebinds a value moved in there) |
//! | a name occurring in a statement | a *mention* (`analysis::mentions`) |
//! | where a value may hold references from | a *source* (`analysis::sources`) |
//! | a binding never released early (`keep(..)`, `#[keep]`, guards, raw addresses…) | *kept* (`Binding::kept`); the user-facing word is `keep` |
//! | the second copy of a statement written twice, used when the type is not `Release` | the *fallback* copy |
//! | the user's switch that turns the transform off | `drops = false` (an attribute option; its name is public API) |
//!
//! # Layout
//!
//! - [`analysis`]: facts about each statement, no decisions (mentions, sources, patterns,
//!   shapes, the known-name lists);
//! - [`plan`]: per block, the borrow graph, the release points and the per-statement schedule;
//! - [`rewrite`]: applies the plan, innermost blocks first, writing statements twice where
//!   they may move a binding;
//! - [`emit`]: the small pieces of generated code (probes, releases, rebinds, imports).
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
//! copy (the fallback) no statement is written twice again (`no_dup`), so the output grows at most by one copy
//! per nesting level. Several bindings moved into one statement share one choice (all of them
//! or none), so a statement is never written more than twice.
//!
//! Temporaries never sit in a block's tail expression (edition 2021 drops those after the
//! block's locals): the initializer is bound to a local first, with the `let`'s type
//! annotation copied onto it so that inference is unchanged. A release lands inside a `let`'s
//! initializer only when the `let` shadows the released name.
//!
//! # When a local is *not* released early (it then lives to the end of its scope, as without
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
//! A block that contains `unsafe` code gets no early releases at all: unsafe code may rely on a
//! value living to the end of its scope in ways no syntactic analysis can see.
//!
//! Every mistake the analysis could make surfaces as a borrow-check or move error at compile
//! time (the rewrite only moves values; it never creates references or `unsafe` code).

mod analysis;
mod emit;
mod plan;
mod rewrite;

use std::collections::BTreeMap;

use syn::{Block, Ident};

use analysis::block::{self, ParamBinding};
use rewrite::Rewriter;

pub(crate) use analysis::block::{declared_names, params_of, pattern_params};
pub(crate) use analysis::patterns::pattern_names;
pub(crate) use rewrite::strip_keep_markers;

/// What the transform needs to know.
#[derive(Clone)]
pub(crate) struct ReleaseOptions {
    /// Path of the facade crate (`::vramguard` unless renamed with `crate = path`).
    pub krate: syn::Path,
    /// Locals never released early (`keep(a, b)`).
    pub keep: Vec<Ident>,
    /// Extra method/function names whose result owns its data (`owned(..)`).
    pub owned: Vec<String>,
    /// Extra method names whose result borrows the receiver (`borrows(..)`).
    pub borrows: Vec<String>,
    /// Measurement only: pretend every unknown call returns an owned value. Never used for
    /// code generation.
    pub optimistic: bool,
}

impl ReleaseOptions {
    /// Options with the default lists and nothing kept.
    pub(crate) fn new(krate: syn::Path) -> Self {
        Self {
            krate,
            keep: Vec::new(),
            owned: Vec::new(),
            borrows: Vec::new(),
            optimistic: false,
        }
    }
}

/// What the transform did, for tests and measurements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReleaseReport {
    /// Bindings that are not guards and are used after their declaration.
    pub candidates: usize,
    /// Of those, the ones now released before the end of their scope.
    pub released_early: usize,
    /// Names of the bindings released early, as `name@block_depth` (for tests).
    pub released: Vec<String>,
    /// The block contains `unsafe` code and was left without early releases.
    pub contains_unsafe: bool,
    /// Of the candidates, those whose last use passes them by value on every path (moved
    /// there with or without the attribute, so nothing is left to release).
    pub moved_at_last_use: usize,
    /// `mut` parameters moved into a later statement: the caller should put
    /// `#[allow(unused_mut)]` on them (the mutation may now happen on the rebinding).
    pub moved_mut_params: Vec<String>,
}

/// Inserts releases at last use into `block` and every block nested in it. `params` are the
/// bindings the block owns on entry (a function's by-value parameters; empty for a loop body).
/// Also strips the inert `#[keep]` markers from `let` statements.
pub(crate) fn insert_releases(
    block: &mut Block,
    params: &[ParamBinding],
    opts: &ReleaseOptions,
) -> ReleaseReport {
    // Unsafe code may rely on a value living to the end of its scope in ways no syntactic
    // analysis sees (`&x` coerced to `*const T` by a call that stashes it, read later by
    // another unsafe call that never names `x`). A block containing `unsafe` is left alone.
    if block::contains_unsafe(block) {
        strip_keep_markers(block);
        return ReleaseReport {
            contains_unsafe: true,
            ..ReleaseReport::default()
        };
    }
    let mut local_macros = BTreeMap::new();
    block::collect_local_macros(block, &mut local_macros);
    let mut rewriter = Rewriter {
        opts,
        local_macros,
        mixed_hygiene: block::mixed_hygiene_names(block, params),
        report: ReleaseReport::default(),
        depth: 0,
        no_dup: false,
        probes: false,
    };
    rewriter.block(block, params);
    if rewriter.probes {
        block.stmts.insert(0, emit::imports(&opts.krate));
    }
    rewriter.report
}

#[cfg(test)]
mod tests;
