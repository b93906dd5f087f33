//! Drop points: after which statement each binding is dropped, or [`END`] (never early:
//! it lives to its scope's end, as without the attribute), computed to a fixpoint.

use super::graph::Graph;
use super::{Binding, END};
use crate::liveness::analysis::BorrowKind;

/// Each binding's drop point: its own last use, pushed back by the bindings that may
/// borrow it, or [`END`]. Dropping at the block's last statement or in its tail expression
/// gains nothing, but for a binding handed in to a branch (it outlives the branch) or inside
/// the branches of a last `if`/`match`.
pub(super) fn compute(graph: &Graph, stmt_count: usize, last_branches: bool) -> Vec<usize> {
    // A last statement that branches (`if`/`match`, often the block's value) may still free a
    // binding early inside its branches (see `schedule`).
    let last_stmt = stmt_count.saturating_sub(1) + usize::from(last_branches);
    let mut end: Vec<usize> = graph.bindings.iter().map(own_last_use).collect();
    // Both passes run every round (`|`, not `||`): each may move points the other reads.
    while extend_by_borrowers(graph, &mut end) | give_up_where_unsafe(graph, &mut end, last_stmt) {}
    end
}

/// A binding's own last use, or [`END`] when it is kept or never used after its declaration.
fn own_last_use(binding: &Binding) -> usize {
    match binding.mentions.iter().copied().max() {
        _ if binding.kept => END,
        None => END,
        Some(at) => at,
    }
}

/// Pushes each binding's drop point past the last use of every binding that may borrow it
/// (to [`END`] when the borrow's origin may also have moved it). Whether anything changed.
fn extend_by_borrowers(graph: &Graph, end: &mut [usize]) -> bool {
    let mut changed = false;
    for edge in &graph.edges {
        let borrower_end = end[edge.from];
        if borrower_end <= edge.at
            || borrower_end <= end[edge.to] && edge.kind == BorrowKind::Borrow
        {
            continue;
        }
        let new = if edge.kind == BorrowKind::Maybe {
            END
        } else {
            borrower_end
        };
        if new > end[edge.to] {
            end[edge.to] = new;
            changed = true;
        }
    }
    changed
}

/// Moves to [`END`] the drop points that are no longer safe or useful once borrowers have
/// pushed them back. Whether anything changed.
fn give_up_where_unsafe(graph: &Graph, end: &mut [usize], last_stmt: usize) -> bool {
    let mut changed = false;
    for (b, binding) in graph.bindings.iter().enumerate() {
        let at = end[b];
        if at == END {
            continue;
        }
        let pushed_past_shadow = binding.shadowed_at.is_some_and(|s| at > s);
        // A borrower pushed the drop point past a statement that passes the value by
        // value (the borrow was a conservative guess): nothing may be left to drop.
        let partially_moved_before = binding.partial_moves.iter().any(|&p| p < at)
            || binding.consumed_at.iter().any(|&m| m < at);
        // A binding handed in to a branch gains there too: the branch ends before its scope.
        let nothing_to_gain = at >= last_stmt && !binding.handed_in;
        let mentioned = binding.mentions.contains(&at);
        // (A `let … else` whose `else` uses the binding drops it after the statement:
        // see `schedule`.)
        let cannot_move_in = mentioned && !graph.wrappable[at];
        let maybe_borrowed_by_value = graph.borrowed_by_value[at]
            .iter()
            .any(|&(to, kind)| to == b && kind == BorrowKind::Maybe);
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
    changed
}
