//! The schedule: at each binding's release point, whether the statement there moves it in (the
//! statement is written twice) or is followed by its release, or whether it keeps its scope end
//! after all; and the counts of the report.

use std::collections::BTreeMap;

use syn::Block;

use super::graph::Graph;
use super::{Plan, PlanContext, END};
use crate::liveness::analysis::shapes;
use crate::liveness::ReleaseReport;

/// Turns release points into the per-statement plan of `block`, counting in `report`.
pub(super) fn schedule(
    block: &Block,
    graph: &Graph,
    end: &[usize],
    ctx: &PlanContext<'_>,
    report: &mut ReleaseReport,
) -> Plan {
    let duplicable: Vec<bool> = block.stmts.iter().map(shapes::duplicable).collect();
    let branching: Vec<bool> = block.stmts.iter().map(shapes::has_branches).collect();
    let mut plan = Plan {
        stmts: BTreeMap::new(),
        mut_decls: Default::default(),
    };
    for (b, binding) in graph.bindings.iter().enumerate() {
        let used_after_decl = !binding.mentions.is_empty();
        let guard = binding.ident.to_string().starts_with('_');
        if used_after_decl && !guard && !ctx.no_dup {
            report.candidates += 1;
        }
        let at = end[b];
        if at == END || binding.never_released {
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
        // Whether the statement may move the binding decides the form: a statement that
        // only borrows it is followed by a release; one that may move it is written twice,
        // with and without the binding moved in (see `rewrite`). A statement that mutates a
        // `mut` binding without moving it is one that only borrows it: moved in, a value
        // would be mutated as a copy (the probe keeps `Copy` values, but a `Release` type
        // may be mutated too).
        let may_move_here = binding.mentions.contains(&at)
            && !borrowed_here
            && !binding.used_in_place.contains(&at);
        // Passed by value here while a borrower of it is still used (`let widths =
        // rows.iter()…; for row in rows { use(widths) }`): the plain code compiled, so the borrow
        // had ended, but a release after the statement would name a moved value. The statement
        // moves it: it keeps its scope end.
        if borrowed_here && binding.consumed_at.contains(&at) {
            continue;
        }
        // Passed by value on every path of a straight-line statement (`f(x)`, `a + x`,
        // `x?`): the statement itself moves it, so its scope end is the same either way.
        if may_move_here && binding.consumed_at.contains(&at) && !branching[at] {
            if !ctx.no_dup {
                report.moved_at_last_use += 1;
            }
            continue;
        }
        // The binding keeps its scope end where the statement cannot be written twice:
        // inside the fallback copy of a statement already written twice (one copy per nesting
        // level at most, so the output stays linear in the input per level), where the
        // copies would have different types (a closure in a `let`'s value), or where the
        // probe, placed before the statement, could not know the binding's type yet.
        if may_move_here && (ctx.no_dup || !duplicable[at] || binding.type_deferred) {
            continue;
        }
        if !ctx.no_dup {
            report.released_early += 1;
            report
                .released
                .push(format!("{}@{}", binding.ident, ctx.depth));
        }
        let releases = plan.stmts.entry(at).or_default();
        if may_move_here {
            releases
                .move_in
                .push((binding.ident.clone(), binding.mutable));
            // The last mutation may now happen on the rebinding: the declaration's `mut`
            // can become unneeded, which rustc would report on the user's line.
            if binding.mutable {
                match binding.decl {
                    Some(decl) => {
                        plan.mut_decls.insert(decl);
                    }
                    None => report.moved_mut_params.push(binding.ident.to_string()),
                }
            }
        } else {
            releases.release_after.push(binding.ident.clone());
            if borrowed_by_value_here {
                releases.after_value_borrows = true;
            }
        }
    }
    plan
}
