//! The borrow graph of one block: its bindings, and which may hold references into which,
//! built statement by statement from the analysis' facts.

use std::collections::{BTreeMap, BTreeSet};

use syn::ext::IdentExt;
use syn::{Block, Expr, Ident, Stmt};

use super::{Binding, Edge, PlanContext};
use crate::liveness::analysis::block::ParamBinding;
use crate::liveness::analysis::known_names::{is_known_macro, macro_name};
use crate::liveness::analysis::patterns::{let_bindings, pattern_bindings};
use crate::liveness::analysis::{
    is_cfg_attr, is_keep_attr, shapes, BorrowKind, Env, Facts, Source,
};

/// The bindings of a block and the borrow edges between them.
pub(super) struct Graph {
    /// Parameters first, then each `let`'s names in statement order.
    pub bindings: Vec<Binding>,
    /// Which binding may hold references into which, since which statement.
    pub edges: Vec<Edge>,
    /// The earliest statement of each edge's `(from, to, kind, into)` (see `add_edge`).
    edge_index: BTreeMap<(usize, usize, BorrowKind, bool), usize>,
    /// Per statement: whether a binding may be moved into it (not an unknown statement
    /// macro, which might declare bindings).
    pub wrappable: Vec<bool>,
    /// Per statement: the bindings the value of its `let` initializer may borrow; moving them
    /// into that statement would leave the value dangling (`let _ = &x;` binds nothing to
    /// carry the borrow).
    pub borrowed_by_value: Vec<Vec<(usize, BorrowKind)>>,
    /// Per statement, the names known to be numbers there.
    pub scalars_at: Vec<BTreeSet<String>>,
    /// Per statement, the names it may move or writes through (see `Mention::consumable` and
    /// `Mention::mutated`): a borrow of one of them cannot be used after the statement.
    pub invalidated: Vec<BTreeSet<String>>,
    /// The binding each name refers to at the current statement.
    current: BTreeMap<String, usize>,
}

/// Builds the graph of `block`, whose entry bindings are `params`.
pub(super) fn build(block: &Block, params: &[ParamBinding], ctx: &PlanContext<'_>) -> Graph {
    let count = block.stmts.len();
    let mut graph = Graph {
        bindings: Vec::new(),
        edges: Vec::new(),
        edge_index: BTreeMap::new(),
        wrappable: vec![true; count],
        borrowed_by_value: vec![Vec::new(); count],
        scalars_at: Vec::with_capacity(count),
        invalidated: Vec::with_capacity(count),
        current: BTreeMap::new(),
    };
    for param in params {
        let b = graph.declare(ctx, &param.ident, param.mutable, None, false);
        graph.bindings[b].handed_in = param.handed_in;
    }
    for (index, stmt) in block.stmts.iter().enumerate() {
        graph.scalars_at.push(graph.scalars_here(ctx));
        let facts = ctx.env.scan_stmt(stmt);
        graph.invalidated.push(
            facts
                .mentions
                .iter()
                .filter(|(_, m)| m.consumable || m.mutated)
                .map(|(name, _)| name.clone())
                .collect(),
        );
        graph.record_mentions(index, &facts);
        graph.record_stores(index, &facts);
        match stmt {
            Stmt::Macro(mac) if !is_known_macro(&macro_name(&mac.mac)) => {
                graph.wrappable[index] = false;
            }
            Stmt::Expr(Expr::Macro(mac), _) if !is_known_macro(&macro_name(&mac.mac)) => {
                graph.wrappable[index] = false;
            }
            Stmt::Local(local) => graph.declare_let(index, local, ctx),
            _ => {}
        }
    }
    graph
}

impl Graph {
    /// The names known to be numbers at the current statement: the enclosing blocks' that no
    /// binding of this block shadows, and this block's own.
    fn scalars_here(&self, ctx: &PlanContext<'_>) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = ctx
            .outer_scalars
            .iter()
            .filter(|name| !self.current.contains_key(*name))
            .cloned()
            .collect();
        names.extend(
            self.current
                .iter()
                .filter(|(_, &b)| self.bindings[b].scalar)
                .map(|(name, _)| name.clone()),
        );
        names
    }

    /// Adds a binding that from now on owns `ident`'s name; returns its index.
    fn declare(
        &mut self,
        ctx: &PlanContext<'_>,
        ident: &Ident,
        mutable: bool,
        decl: Option<usize>,
        kept: bool,
    ) -> usize {
        let name = ident.unraw().to_string();
        if let Some(&old) = self.current.get(&name) {
            if let Some(at) = decl {
                self.bindings[old].shadowed_at.get_or_insert(at);
            }
        }
        let guard = name.starts_with('_') || ctx.kept_names.contains(&name);
        self.bindings.push(Binding {
            ident: ident.clone(),
            mutable,
            handed_in: false,
            decl,
            kept: kept || guard,
            mentions: Vec::new(),
            partial_moves: Vec::new(),
            consumed_at: Vec::new(),
            consumed_always_at: Vec::new(),
            consumable_at: Vec::new(),
            borrows_outer: BTreeSet::new(),
            used_in_place: Vec::new(),
            type_deferred: false,
            never_dropped_early: false,
            scalar: false,
            shadowed_at: None,
            no_move_in: Vec::new(),
        });
        self.current.insert(name, self.bindings.len() - 1);
        self.bindings.len() - 1
    }

    /// Adds an edge unless one from and to the same bindings, of the same kind, exists since
    /// no later statement (it says all the new one would): a loop body that stores into a
    /// local at many statements (`U.set(..)` over an SVD's 300 lines, each store copying
    /// what the target holds) would otherwise copy the duplicates of the duplicates, and the
    /// list would double at each store.
    fn add_edge(&mut self, edge: Edge) {
        let key = (edge.from, edge.to, edge.kind, edge.into);
        match self.edge_index.get(&key) {
            Some(&at) if at <= edge.at => {}
            _ => {
                self.edge_index.insert(key, edge.at);
                self.edges.push(edge);
            }
        }
    }

    /// The bindings a value from `sources` may borrow: `(binding, kind, into)`, each once.
    fn resolve(&self, sources: &[Source]) -> Vec<(usize, BorrowKind, bool)> {
        let mut out = Vec::new();
        for source in sources {
            match source {
                Source::Storage(name, kind, into) => {
                    if let Some(&b) = self.current.get(name) {
                        out.push((b, *kind, *into));
                    }
                }
                // What the named local may borrow, the new value may borrow too.
                Source::ValueOf(name) => {
                    if let Some(&b) = self.current.get(name) {
                        out.extend(
                            self.edges
                                .iter()
                                .filter(|e| e.from == b)
                                .map(|e| (e.to, e.kind, e.into)),
                        );
                    }
                }
                // Read out of the local: through a reference into `t`, what `t` holds.
                Source::Contents(name) => {
                    if let Some(&b) = self.current.get(name) {
                        for edge in self.edges.iter().filter(|e| e.from == b) {
                            if edge.into {
                                out.extend(
                                    self.edges
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
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The locals of enclosing blocks (no binding of this block) whose storage a value from
    /// `sources` may borrow.
    fn outer_storage(&self, sources: &[Source]) -> BTreeSet<String> {
        sources
            .iter()
            .filter_map(|source| match source {
                Source::Storage(name, ..) if !self.current.contains_key(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Records how statement `index` uses the bindings it mentions.
    fn record_mentions(&mut self, index: usize, facts: &Facts) {
        for (name, mention) in &facts.mentions {
            if let Some(&b) = self.current.get(name) {
                let binding = &mut self.bindings[b];
                binding.mentions.push(index);
                if mention.partial {
                    binding.partial_moves.push(index);
                }
                if mention.consumed {
                    binding.consumed_at.push(index);
                }
                if mention.consumed_always {
                    binding.consumed_always_at.push(index);
                }
                if mention.consumable {
                    binding.consumable_at.push(index);
                }
                // Not after a statement that may move it (`loop { let n = f(cur);
                // if .. { break } cur = n; }` can exit with `cur` moved).
                if !mention.moved {
                    binding.used_in_place.push(index);
                }
                if mention.raw_address {
                    binding.kept = true;
                }
            }
        }
    }

    /// Records the borrows statement `index` stores into bindings (`v.push(&x)`, `r = &x`).
    fn record_stores(&mut self, index: usize, facts: &Facts) {
        for (target, sources) in &facts.stores {
            let resolved = self.resolve(sources);
            let outer = self.outer_storage(sources);
            match self.current.get(target) {
                Some(&t) => {
                    self.bindings[t].borrows_outer.extend(outer);
                    // Stored through a reference (`let sink = &mut names; sink.push(&s)`):
                    // what the reference points into holds the borrow too.
                    let mut holders = vec![t];
                    holders.extend(
                        self.edges
                            .iter()
                            .filter(|e| e.from == t && e.into)
                            .map(|e| e.to),
                    );
                    for holder in holders {
                        // A value cannot borrow itself (`f(&mut a, &mut b)` stores each
                        // into the other, and so back into itself).
                        for &(to, kind, into) in resolved.iter().filter(|r| r.0 != holder) {
                            self.add_edge(Edge {
                                from: holder,
                                to,
                                kind,
                                into,
                                at: index,
                            });
                        }
                    }
                }
                // Stored into something declared outside this block: keep it whole.
                None => resolved
                    .into_iter()
                    .for_each(|(to, _, _)| self.bindings[to].kept = true),
            }
        }
    }

    /// Declares the bindings of the `let` at statement `index`, with the borrows its value
    /// may hold and what its syntax says about their types.
    fn declare_let(&mut self, index: usize, local: &syn::Local, ctx: &PlanContext<'_>) {
        let env: &Env<'_> = &ctx.env;
        let mut names = Vec::new();
        let has_ref = match local.init.as_ref().map(|i| i.diverge.is_some()) {
            Some(true) => pattern_bindings(&local.pat, &mut names),
            _ => let_bindings(&local.pat, &mut names),
        };
        let marked_keep = local.attrs.iter().any(is_keep_attr);
        let mut resolved = Vec::new();
        let mut outer = BTreeSet::new();
        if let Some(init) = &local.init {
            // `let r = &make(&x);` and `ref` bindings: everything mentioned.
            let sources = if has_ref || Env::has_extended_temporary(&init.expr) {
                env.conservative(&init.expr)
            } else {
                env.value_sources(&init.expr)
            };
            resolved = self.resolve(&sources);
            outer = self.outer_storage(&sources);
            self.borrowed_by_value[index] = resolved.iter().map(|&(b, k, _)| (b, k)).collect();
            if let Some((_, otherwise)) = &init.diverge {
                for name in env.scan_expr(otherwise).mentions.keys() {
                    if let Some(&b) = self.current.get(name) {
                        self.bindings[b].no_move_in.push(index);
                    }
                }
            }
        }
        let uninit = local.init.is_none();
        // `let newu = u.clone()` of a `u` whose type comes later: the copy's type comes later
        // too, and may be fixed only by the copy's own uses, after `u`'s last one; a probe of
        // `u` there could not know its type either, so `u` keeps its scope end.
        let copied_deferred = local
            .init
            .as_ref()
            .and_then(|init| shapes::copied_local(&init.expr))
            .and_then(|name| self.current.get(&name).copied())
            .filter(|&b| self.bindings[b].type_deferred);
        if let Some(b) = copied_deferred {
            self.bindings[b].kept = true;
        }
        let type_deferred = match (&local.pat, &local.init) {
            (syn::Pat::Type(typed), _) if !shapes::has_placeholder(&typed.ty) => false,
            (_, Some(init)) => shapes::type_deferred(&init.expr) || copied_deferred.is_some(),
            (_, None) => true,
        };
        // A closure, an async block, or what a local closure returns: never `DropAtLastUse`, and
        // whether it is `Copy` is known only once its captures are, too late for a probe. It
        // keeps its scope end.
        let closure_typed = local.init.as_ref().is_some_and(|init| {
            shapes::may_hold_closure(&init.expr)
                || shapes::calls_local(&init.expr, &|name| self.current.contains_key(name))
        });
        // A number or `bool` by its syntax (what later arithmetic on it gives is one too).
        let scalar_local = |name: &str| match self.current.get(name) {
            Some(&b) => self.bindings[b].scalar,
            None => ctx.outer_scalars.contains(name),
        };
        let dims = local
            .init
            .as_ref()
            .is_some_and(|init| shapes::dims_tuple(&init.expr));
        let scalar = match (&local.pat, &local.init) {
            (syn::Pat::Type(typed), _) => shapes::primitive(&typed.ty),
            (syn::Pat::Tuple(_), Some(_)) => dims,
            (_, Some(init)) => shapes::scalar(&init.expr, &scalar_local),
            (_, None) => false,
        };
        // Not `DropAtLastUse` by its syntax: a probe would only ever answer "keep". A reference
        // an accessor returns (`let dims = xs.dims();`) is none either, and its drop would
        // be a use of the borrow after a statement that writes `xs` (`xs = xs.reshape(..)?`).
        let plain = match (&local.pat, &local.init) {
            (syn::Pat::Type(typed), _) if shapes::plain_type(&typed.ty) => true,
            (_, Some(init)) => {
                dims || shapes::never_dropped_early(&init.expr, &scalar_local)
                    || shapes::reference_accessor(&init.expr)
                        .is_some_and(|name| !env.owned.contains(&name))
            }
            (_, None) => false,
        };
        // `#[cfg(..)] let x = …;` may be compiled out: whether it shadows `x` is unknown, so
        // neither the old nor the new `x` is dropped early.
        let conditional = local.attrs.iter().any(is_cfg_attr);
        for (ident, mutable) in &names {
            if conditional {
                if let Some(&old) = self.current.get(&ident.unraw().to_string()) {
                    self.bindings[old].kept = true;
                }
            }
            let new = self.declare(
                ctx,
                ident,
                *mutable,
                Some(index),
                marked_keep || uninit || conditional,
            );
            self.bindings[new].never_dropped_early = closure_typed || plain;
            self.bindings[new].scalar = scalar;
            self.bindings[new].type_deferred = type_deferred;
            self.bindings[new].borrows_outer = outer.clone();
            for &(to, kind, into) in &resolved {
                self.add_edge(Edge {
                    from: new,
                    to,
                    kind,
                    into,
                    at: index,
                });
            }
        }
    }
}
