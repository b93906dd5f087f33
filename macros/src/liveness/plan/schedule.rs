//! The schedule: at each binding's drop point, whether the statement there moves it in (the
//! statement is written twice) or is followed by its drop, or whether it keeps its scope end
//! after all; and the counts of the report.

use std::collections::BTreeMap;

use syn::ext::IdentExt;
use syn::{Block, Stmt};

use super::branches;
use super::graph::Graph;
use super::{Plan, PlanContext, END};
use crate::liveness::analysis::branches as branches_facts;
use crate::liveness::analysis::{known_names, shapes};
use crate::liveness::DropReport;

/// Turns drop points into the per-statement plan of `block`, counting in `report`.
pub(super) fn schedule(
    block: &Block,
    graph: &Graph,
    end: &[usize],
    ctx: &PlanContext<'_>,
    report: &mut DropReport,
) -> Plan {
    let duplicable: Vec<bool> = block.stmts.iter().map(shapes::duplicable).collect();
    // The block's value, where a binding handed in to a branch may die last (`{ …; f(&x) }`).
    let tail = match block.stmts.last() {
        Some(Stmt::Expr(expr, None)) => Some((block.stmts.len() - 1, expr)),
        _ => None,
    };
    let mut plan = Plan {
        stmts: BTreeMap::new(),
        mut_decls: Default::default(),
        handed_placed: BTreeMap::new(),
        scalars_at: graph.scalars_at.clone(),
    };
    // Per statement that branches, the bindings that may be dropped inside its branches.
    let mut in_branches: BTreeMap<usize, Vec<Candidate>> = BTreeMap::new();
    for (b, binding) in graph.bindings.iter().enumerate() {
        // The enclosing block counts a binding handed in to a branch.
        let counted = !ctx.no_dup && !binding.handed_in;
        let used_after_decl = !binding.mentions.is_empty();
        let guard = binding.ident.to_string().starts_with('_');
        if used_after_decl && !guard && counted {
            report.candidates += 1;
        }
        let at = end[b];
        if at == END || binding.never_dropped_early {
            continue;
        }
        // A statement that leaves the block (`return f(&x);`) drops the binding itself.
        if binding.handed_in && branches_facts::diverges(&block.stmts[at]) {
            plan.handed_placed
                .insert(binding.ident.unraw().to_string(), false);
            continue;
        }
        // Borrowed by the statement's own value, or by a borrower the statement still
        // uses (`let residual = &x; let x = (f(&x)? + residual)?;`): moved into the
        // statement, the value would be moved while borrowed.
        let borrowed_by_value_here = graph.borrowed_by_value[at].iter().any(|&(to, _)| to == b);
        let borrowed_here = borrowed_by_value_here
            || graph
                .edges
                .iter()
                .any(|e| e.to == b && e.at < at && graph.bindings[e.from].mentions.contains(&at));
        // Used in the `else` of a `let … else`: not movable into the initializer, but the
        // `else` diverges, so after the statement the binding is dead on the one path that
        // goes on; dropped there unless the `let` takes its name.
        let in_let_else = binding.no_move_in.contains(&at);
        if in_let_else && binding.shadowed_at == Some(at) {
            continue;
        }
        // Whether the statement may move the binding decides the form: a statement that
        // only borrows it is followed by a drop; one that may move it is written twice,
        // with and without the binding moved in (see `rewrite`). A statement that mutates a
        // `mut` binding without moving it is one that only borrows it: moved in, a value
        // would be mutated as a copy (the probe keeps `Copy` values, but a `DropAtLastUse` type
        // may be mutated too).
        let may_move_here = binding.mentions.contains(&at)
            && !borrowed_here
            && !in_let_else
            && !binding.used_in_place.contains(&at);
        // Passed by value here while a borrower of it is still used (`let widths =
        // rows.iter()…; for row in rows { use(widths) }`): the plain code compiled, so the borrow
        // had ended, but a drop after the statement would name a moved value. The statement
        // moves it: it keeps its scope end.
        // So too where it is a receiver of a call that may take `self` by value, anywhere in
        // the statement (`let shape = labels.dims(); … if c { f(shape) } else {
        // labels.flatten(0, 0) }`): a drop after the statement would follow a move on one
        // path, and moving it in would move it while borrowed on the other.
        if borrowed_here && binding.consumable_at.contains(&at) {
            continue;
        }
        // Passed by value on every path on which the statement completes (`f(x)`, `a + x`,
        // `x?`, `x.into_iter().map(|v| ..)`, `for i in 0..n { .. }`, a closure that takes it):
        // the statement itself moves it, so its scope end is the same either way.
        if may_move_here && binding.consumed_always_at.contains(&at) {
            if counted {
                report.moved_at_last_use += 1;
            }
            if binding.handed_in {
                plan.handed_placed
                    .insert(binding.ident.unraw().to_string(), false);
            }
            continue;
        }
        // A drop after the statement (or inside its branches, after the part that uses it)
        // reads the binding, and so the borrows it holds, after the statement: not where the
        // statement moves or writes what it may borrow (`let d = xs.view(); if d.len() > 1 {
        // xs = xs.reshape(&d)?; }`), where the plain code's borrow ended before the write.
        if !may_move_here && invalidates_a_borrowed(graph, b, at) {
            continue;
        }
        // The block's value (only a binding handed in to a branch is dropped there): it is
        // bound to a local first, which a closure's type (one per copy) or a statement macro
        // does not allow.
        let tail_closure =
            tail.is_some_and(|(index, expr)| index == at && shapes::may_hold_closure(expr));
        // A macro the lists do not know may leave the block (a drop after it would be
        // unreachable code, which rustc warns about).
        let tail_macro = at + 1 == block.stmts.len()
            && match &block.stmts[at] {
                Stmt::Macro(m) => m.semi_token.is_none(),
                Stmt::Expr(syn::Expr::Macro(m), None) => {
                    !known_names::is_known_macro(&known_names::macro_name(&m.mac))
                }
                _ => false,
            };
        if binding.handed_in && (tail_closure || tail_macro) {
            continue;
        }
        // The binding keeps its scope end where the statement cannot be written twice:
        // inside the fallback copy of a statement already written twice (one copy per nesting
        // level at most, so the output stays linear in the input per level), where the
        // copies would have different types (a closure in a `let`'s value), or where the
        // probe, placed before the statement, could not know the binding's type yet.
        let cannot_move_in = ctx.no_dup || !duplicable[at] || binding.type_deferred;
        // Dropped inside the branches of an `if`/`match` (decided below, per statement):
        // not where another binding's borrow or the probe's need of a known type ties it to
        // the statement as a whole. The statement itself is not written twice for it.
        let may_go_into_branches = !ctx.no_dup
            && !ctx.probe_only
            && !borrowed_here
            && !binding.type_deferred
            && branches_facts::branching_expr(&block.stmts[at]).is_some();
        // Dropped at the statement only inside its branches: at the block's last statement
        // a drop after it gains nothing (see `drop_points`), and where it may move the
        // binding but cannot be written twice, it keeps the binding otherwise.
        let only_in_branches =
            !binding.handed_in && at + 1 >= block.stmts.len() || may_move_here && cannot_move_in;
        if only_in_branches && !may_go_into_branches {
            continue;
        }
        if binding.handed_in {
            let gains = at + 1 < block.stmts.len()
                || branches_facts::branching_expr(&block.stmts[at]).is_some();
            plan.handed_placed
                .insert(binding.ident.unraw().to_string(), gains);
        }
        let candidate = Candidate {
            binding: b,
            may_move_here,
            borrowed_by_value_here,
            counted,
            only_in_branches,
        };
        if may_go_into_branches {
            in_branches.entry(at).or_default().push(candidate);
        } else {
            place(&mut plan, graph, report, ctx, at, &candidate);
        }
    }
    for (at, candidates) in in_branches {
        // A statement written twice for another binding keeps its forms for all: its
        // fallback copy would drop nothing inside its branches.
        let written_twice = plan.stmts.get(&at).is_some_and(|r| !r.move_in.is_empty());
        let bindings: Vec<(proc_macro2::Ident, bool)> = candidates
            .iter()
            .map(|c| {
                let binding = &graph.bindings[c.binding];
                (binding.ident.clone(), binding.mutable)
            })
            .collect();
        let pushable = if written_twice {
            vec![false; candidates.len()]
        } else {
            branches::pushable(&block.stmts[at], &bindings, ctx)
        };
        // One that stays must be moved into the statement: then it is written twice, and
        // all stay (as above).
        let all_stay = candidates
            .iter()
            .zip(&pushable)
            .any(|(c, &ok)| !ok && c.may_move_here && !c.only_in_branches);
        for (candidate, ok) in candidates.iter().zip(pushable) {
            let binding = &graph.bindings[candidate.binding];
            if ok && !all_stay {
                count(report, ctx, binding, candidate.counted);
                plan.stmts
                    .entry(at)
                    .or_default()
                    .pushed
                    .push((binding.ident.clone(), binding.mutable));
                // The last mutation may now happen on a rebinding inside a branch.
                if binding.mutable {
                    note_mut(&mut plan, report, binding);
                }
            } else if !candidate.only_in_branches {
                place(&mut plan, graph, report, ctx, at, candidate);
            }
        }
    }
    plan
}

/// Whether statement `at` may move or writes through a local that binding `b` may borrow (see
/// `Graph::invalidated`).
fn invalidates_a_borrowed(graph: &Graph, b: usize, at: usize) -> bool {
    let invalidated = &graph.invalidated[at];
    if invalidated.is_empty() {
        return false;
    }
    graph.bindings[b]
        .borrows_outer
        .iter()
        .any(|name| invalidated.contains(name))
        || graph.edges.iter().any(|e| {
            e.from == b
                && e.at <= at
                && invalidated.contains(&graph.bindings[e.to].ident.unraw().to_string())
        })
}

/// A binding dropped at a statement, and how the statement uses it.
struct Candidate {
    binding: usize,
    may_move_here: bool,
    borrowed_by_value_here: bool,
    /// Counted in the report (not in a fallback copy, not handed in).
    counted: bool,
    /// Dropped inside the statement's branches or not early at all (see `schedule`).
    only_in_branches: bool,
}

fn count(report: &mut DropReport, ctx: &PlanContext<'_>, binding: &super::Binding, counted: bool) {
    if counted {
        report.dropped_early += 1;
        report
            .dropped
            .push(format!("{}@{}", binding.ident, ctx.depth));
    }
}

/// Moves the binding into the statement at `at` (written twice) or drops it after.
fn place(
    plan: &mut Plan,
    graph: &Graph,
    report: &mut DropReport,
    ctx: &PlanContext<'_>,
    at: usize,
    candidate: &Candidate,
) {
    let binding = &graph.bindings[candidate.binding];
    count(report, ctx, binding, candidate.counted);
    let drops = plan.stmts.entry(at).or_default();
    if candidate.may_move_here {
        drops.move_in.push((binding.ident.clone(), binding.mutable));
        // The last mutation may now happen on the rebinding: the declaration's `mut`
        // can become unneeded, which rustc would report on the user's line.
        if binding.mutable {
            note_mut(plan, report, binding);
        }
    } else {
        drops.drop_after.push(binding.ident.clone());
        if candidate.borrowed_by_value_here {
            drops.after_value_borrows = true;
        }
    }
}

/// A `mut` binding may now be mutated only on a rebinding: its declaration gets
/// `#[allow(unused_mut)]` (a parameter's, through the report; a binding handed in to a branch
/// is noted where it is declared).
fn note_mut(plan: &mut Plan, report: &mut DropReport, binding: &super::Binding) {
    match binding.decl {
        Some(decl) => {
            plan.mut_decls.insert(decl);
        }
        None if !binding.handed_in => report.moved_mut_params.push(binding.ident.to_string()),
        None => {}
    }
}
