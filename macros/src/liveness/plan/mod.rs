//! Plan: for one block, which bindings are dropped after which statement, and how.
//!
//! Three steps, one file each:
//! 1. [`graph`]: the block's bindings (parameters and `let`s, with shadowing) and the borrow
//!    edges between them, from the analysis' facts of each statement;
//! 2. [`drop_points`]: each binding's drop point, its last use pushed back by the
//!    bindings that may borrow it, or "never" ([`END`]), computed to a fixpoint;
//! 3. [`schedule`]: for each statement, the bindings moved into it, those dropped after it
//!    and those dropped inside its branches ([`branches`]), and the counts of the
//!    [`DropReport`].

mod branches;
mod drop_points;
mod graph;
mod schedule;

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::Ident;
use syn::Block;

use super::analysis::block::ParamBinding;
use super::analysis::{BorrowKind, Env};
use super::DropReport;

/// Past any statement index: "lives to the end of its scope".
pub(super) const END: usize = usize::MAX;

/// What planning one block needs besides the block.
pub(super) struct PlanContext<'a> {
    /// The analysis' name lists and local macros.
    pub env: Env<'a>,
    /// Names never dropped early: `keep(..)`, and names written in more than one hygiene
    /// context (the analysis compares names as text, so it cannot tell their uses apart).
    pub kept_names: BTreeSet<String>,
    /// Planning inside the fallback copy of a statement written twice: no statement is
    /// written twice again, and nothing is counted in the report (the first copy was).
    pub no_dup: bool,
    /// Nesting depth of the block, for the report's `name@depth` entries.
    pub depth: usize,
    /// Planning a branch only to learn whether the bindings handed in to it are dropped there
    /// (see [`branches`]): nothing is pushed into nested branches (whether a binding is
    /// dropped in a branch does not depend on it, and the planning stays one level deep).
    pub probe_only: bool,
    /// Names of enclosing blocks (and primitive parameters) known to be numbers where this
    /// block starts (see `analysis::shapes::scalar`).
    pub outer_scalars: &'a BTreeSet<String>,
}

/// The plan of one block.
pub(super) struct Plan {
    /// Per statement index, what happens there (statements absent from the map are left as
    /// written).
    pub stmts: BTreeMap<usize, StmtDrops>,
    /// Statement indices of the block's `let mut` declarations moved into a later statement:
    /// the declaration gets `#[allow(unused_mut)]`.
    pub mut_decls: BTreeSet<usize>,
    /// The bindings handed in to this block (a branch) that it drops, moves or leaves
    /// with (`return`) — the others would outlive the branch —, each with whether that frees
    /// it before the block's last statement, or may do so in a nested branch (a gain over a
    /// drop after the whole `if`/`match`).
    pub handed_placed: BTreeMap<String, bool>,
    /// Per statement, the names known to be numbers there (for the blocks nested in it).
    pub scalars_at: Vec<BTreeSet<String>>,
}

/// For one statement: the bindings to move into it, and those to drop after it.
#[derive(Default)]
pub(super) struct StmtDrops {
    /// Bindings the statement may move, with whether each is `mut`: the statement is written
    /// twice (see [`super::rewrite`]).
    pub move_in: Vec<(Ident, bool)>,
    /// Bindings dropped once the statement is done with them: right after it, or, for a
    /// `let` that shadows one of them (and whose value does not borrow them), inside its
    /// initializer, before the new binding takes the name.
    pub drop_after: Vec<Ident>,
    /// The `let`'s value may borrow a dropped binding: drop after the whole statement.
    pub after_value_borrows: bool,
    /// Bindings dropped inside the statement's branches (an `if`/`match` whose branches
    /// each drop them at their own last use, or at their start where they are dead), with
    /// whether each is `mut`; see [`branches`].
    pub pushed: Vec<(Ident, bool)>,
}

/// A binding of the block (a parameter or a name a `let` binds) and what its statements do
/// to it.
struct Binding {
    ident: Ident,
    mutable: bool,
    /// Handed in by the enclosing block (see `ParamBinding::handed_in`).
    handed_in: bool,
    /// Statement index of the declaration; `None` for parameters.
    decl: Option<usize>,
    /// Never dropped early whatever its uses (guard, `keep`, no initializer…).
    kept: bool,
    /// Statements that mention it after its declaration.
    mentions: Vec<usize>,
    /// Statements that may move a field of it out.
    partial_moves: Vec<usize>,
    /// Statements passing it by value (see [`super::analysis::Mention::consumed`]).
    consumed_at: Vec<usize>,
    /// Statements that move it on every path on which they complete (see
    /// [`super::analysis::Mention::consumed_always`]).
    consumed_always_at: Vec<usize>,
    /// Statements that may move it by value or as a receiver (see
    /// [`super::analysis::Mention::consumable`]).
    consumable_at: Vec<usize>,
    /// Locals of enclosing blocks whose storage it may borrow (the graph's edges cover this
    /// block's own bindings).
    borrows_outer: BTreeSet<String>,
    /// Statements that use this binding without moving it (`x += 1`, `f(&mut x)`, `x = …`):
    /// such a statement only borrows it (see [`schedule`] on `mut` bindings).
    used_in_place: Vec<usize>,
    /// A closure, an async block, or a value that is not `DropAtLastUse` by its syntax (a literal,
    /// a reference, a number): never dropped; its last use still ends the borrows it holds.
    never_dropped_early: bool,
    /// A primitive number or `bool` by its syntax (`let n = x.len() + 1`): never dropped, and
    /// arithmetic on it gives another (see `analysis::shapes::scalar`).
    scalar: bool,
    /// Its type may be decided by a later use (`Vec::new()`, `parse()`, `collect()`,
    /// `x as _`, `None`): a probe placed before that use could not tell its type yet.
    type_deferred: bool,
    /// The statement of the first later `let` that redeclares its name.
    shadowed_at: Option<usize>,
    /// Statements where this binding may not be moved in (`else` of a let-else).
    no_move_in: Vec<usize>,
}

/// `from` may hold references into `to` since statement `at`.
struct Edge {
    from: usize,
    to: usize,
    kind: BorrowKind,
    /// `from` is a reference into `to` (reading through it yields what `to` holds).
    into: bool,
    at: usize,
}

/// Plans the drops of `block`, whose entry bindings are `params`; counts them in `report`.
pub(super) fn plan(
    block: &Block,
    params: &[ParamBinding],
    ctx: &PlanContext<'_>,
    report: &mut DropReport,
) -> Plan {
    // A block that declares nothing (no binding handed in, no `let`) has nothing to drop:
    // its statements need no analysis (the blocks nested in them are planned on their own).
    // Half of candle-nn's planned blocks (531 of 988) are such branches and closure bodies.
    if params.is_empty() && !block.stmts.iter().any(|s| matches!(s, syn::Stmt::Local(_))) {
        return Plan {
            stmts: BTreeMap::new(),
            mut_decls: BTreeSet::new(),
            handed_placed: BTreeMap::new(),
            scalars_at: vec![ctx.outer_scalars.clone(); block.stmts.len()],
        };
    }
    let graph = graph::build(block, params, ctx);
    let last_branches = !ctx.probe_only
        && !ctx.no_dup
        && block
            .stmts
            .last()
            .is_some_and(|s| super::analysis::branches::branching_expr(s).is_some());
    let points = drop_points::compute(&graph, block.stmts.len(), last_branches);
    schedule::schedule(block, &graph, &points, ctx, report)
}
