//! What a value holds (a number, a new tensor, a computed one, …), guessed from the shape of
//! the expression that produced it, and the small expression helpers the rules use.
//!
//! The macros have no type information, so every rule here is a guess from syntax. The guesses
//! lean towards silence: a lint fires only on shapes that model code produces (a call or a
//! method call producing a new value), never on literals, casts, counters or host scalars.

use crate::library::Library;
use crate::syntax::NameList;
use proc_macro2::{TokenStream, TokenTree};
use std::collections::HashSet;
use syn::{Attribute, Expr, Pat, Stmt, Type};

/// What classification reads besides the expression: what the names in scope hold, and the
/// library (where one spelling means different things).
pub(crate) struct Scope<'a> {
    /// What a local name holds (`None`: not a local of the current iteration).
    pub lookup: &'a dyn Fn(&str) -> Option<Holds>,
    /// The tensor library of the code.
    pub library: Library,
    /// Functions and methods of the crate declared to return numbers.
    pub number_fns: &'a std::collections::HashSet<String>,
    /// What the local closures of the function return (`let norm = |n| n.len();`).
    pub closures: &'a std::collections::HashMap<String, Holds>,
}

/// What a local holds, guessed from its initializer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A host scalar or a small host value (`loss.item()`, `x.len()`, `3.0`, `a as f32`).
    Scalar,
    /// A freshly created value that is not an activation (`Tensor::zeros(..)`, `Vec::new()`).
    Created,
    /// A value detached from the graph (`x.detach()`): still memory, but no graph.
    Detached,
    /// The result of a computation (`model.forward(&x)?`, `a.matmul(&b)`, `a + b`).
    Produced,
    /// A binding of a `for`/`match`/closure pattern: an item, not computed here.
    Pattern,
    /// Anything else (borrows, fields, indexing, control flow).
    Other,
}

impl Holds {
    /// Whether the value holds (device) memory of its own.
    pub(crate) fn holds_memory(self) -> bool {
        matches!(self, Holds::Created | Holds::Detached | Holds::Produced)
    }
}

/// Methods that return host scalars or host copies: the fix for accumulating device values.
static SCALAR_METHODS: NameList = NameList::new(&[
    "item",
    // candle-transformers' `LogitsProcessor::sample` and rand's `Distribution::sample`: a
    // token id or a number.
    "sample",
    "position",
    "rposition",
    "binary_search",
    // Bytes of a number; random numbers (rand's and its look-alikes).
    "all",
    "any",
    "to_le_bytes",
    "to_be_bytes",
    "to_ne_bytes",
    "next_u32",
    "next_u64",
    "next_f32",
    "next_f64",
    "gen",
    "gen_range",
    "random",
    "random_range",
    "to_scalar",
    "into_scalar",
    "double_value",
    "int64_value",
    "f_double_value",
    "f_int64_value",
    "into_data",
    "to_data",
    "into_vec",
    "as_vec",
    "array",
    "elem",
    "to_f32",
    "to_f64",
    "to_vec",
    "to_vec0",
    "to_vec1",
    "to_vec2",
    "to_vec3",
    "len",
    "numel",
    "elem_count",
    "count",
    "is_empty",
    "to_string",
    // Timers and memory statistics: host values that benchmark loops collect.
    "now",
    "elapsed",
    "duration_since",
    "as_secs",
    "as_secs_f32",
    "as_secs_f64",
    "as_millis",
    "as_micros",
    "as_nanos",
    "stats",
    "memory_stats",
    "snapshot",
    "to_uppercase",
    "to_lowercase",
    "to_ascii_uppercase",
    "to_ascii_lowercase",
    "dims",
    "shape",
    "dim",
    "size",
    "rank",
    "as_f32",
    "as_f64",
    "as_usize",
    "partial_cmp",
    "cmp",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "is_some",
    "is_none",
    "is_ok",
    "is_err",
    "contains",
    "starts_with",
    "ends_with",
]);

/// Functions and methods that create new values that are not computed from activations.
static CREATION: NameList = NameList::new(&[
    "new",
    "default",
    "with_capacity",
    "zeros",
    "ones",
    "full",
    "empty",
    "zeros_like",
    "ones_like",
    "full_like",
    "randn",
    "rand",
    "randn_like",
    "rand_like",
    "arange",
    "eye",
    "from_slice",
    "from_vec",
    "from_iter",
    "from_data",
    "collect",
    // Conversions (`T::from(x)`, num-traits' `E::from_usize(i)`): they convert a value, they
    // compute nothing on a tensor.
    "from",
    "try_from",
    "from_usize",
    "from_isize",
    "from_f32",
    "from_f64",
    "from_u8",
    "from_u16",
    "from_u32",
    "from_u64",
    "from_i8",
    "from_i16",
    "from_i32",
    "from_i64",
    "from_le_bytes",
    "from_be_bytes",
    "from_ne_bytes",
]);

/// Methods that move an existing value out of a collection or an iterator (no new memory),
/// and host handles (threads, channels).
static MOVED_OR_HOST: NameList = NameList::new(&[
    "remove",
    "swap_remove",
    "pop",
    "pop_front",
    "pop_back",
    "pop_first",
    "pop_last",
    "next",
    "next_back",
    "find",
    "find_map",
    "nth",
    "spawn",
    "channel",
    "sync_channel",
]);

/// `Option`/`Result`/iterator plumbing: not a computation on device values.
static PLUMBING: NameList = NameList::new(&[
    "then",
    "then_some",
    "and_then",
    "or_else",
    "map_or",
    "map_or_else",
    "ok_or",
    "ok_or_else",
    "ok",
    "err",
    "unwrap_or",
    "unwrap_or_default",
    "unwrap_or_else",
    "cloned",
    "copied",
    "as_ref",
    "as_deref",
    "get",
    "first",
    "last",
    "iter",
    "into_iter",
    "enumerate",
    "zip",
    "filter",
    "take",
    "skip",
    "rev",
    "chars",
    "bytes",
    "lines",
    "split",
    "trim",
    "parse",
    "min",
    "max",
    "abs",
    "powi",
    "powf",
    "sqrt",
    "ln",
    "floor",
    "ceil",
    "round",
]);

/// Methods that return a value without autograd history.
static DETACHING: NameList = NameList::new(&["detach", "detach_"]);

/// Methods that keep the receiver's nature (a copy or a conversion of it).
static TRANSPARENT: NameList = NameList::new(&[
    "clone",
    "to_owned",
    "into",
    "try_into",
    "unwrap",
    "expect",
    "contiguous",
    // dfdx's `split_tape`: the same tensor, its tape handed apart; a view of the receiver.
    "split_tape",
    "as_view",
]);

/// Primitive scalar types: a `let` annotated with one holds a host scalar.
static SCALAR_TYPES: NameList = NameList::new(&[
    "f32", "f64", "f16", "bf16", "usize", "isize", "u8", "u16", "u32", "u64", "u128", "i8", "i16",
    "i32", "i64", "i128", "bool", "char", "String", "str", "Duration", "Instant",
]);

/// Strips parentheses, invisible groups, `?` and `.await`.
pub(crate) fn peel(mut expr: &Expr) -> &Expr {
    loop {
        expr = match expr {
            Expr::Paren(e) => &e.expr,
            Expr::Group(e) => &e.expr,
            Expr::Try(e) => &e.expr,
            Expr::Await(e) => &e.base,
            _ => return expr,
        };
    }
}

/// Strips what [`peel`] strips, plus `&`, `*` and transparent methods (`.clone()`).
pub(crate) fn peel_value(mut expr: &Expr) -> &Expr {
    loop {
        expr = match peel(expr) {
            Expr::Reference(e) => &e.expr,
            Expr::Unary(e) if matches!(e.op, syn::UnOp::Deref(_)) => &e.expr,
            Expr::MethodCall(m) if is_one_of(&m.method, &TRANSPARENT) => &m.receiver,
            other => return other,
        };
    }
}

pub(crate) fn is_one_of(ident: &syn::Ident, names: &NameList) -> bool {
    names.contains(ident.to_string())
}

/// The single identifier an expression names (`x`), if it is one.
pub(crate) fn single_ident(expr: &Expr) -> Option<&syn::Ident> {
    match expr {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident(),
        _ => None,
    }
}

/// Whether an expression is `self.field` (any depth): state that outlives iterations.
pub(crate) fn is_self_field(expr: &Expr) -> bool {
    match expr {
        Expr::Field(f) => match peel(&f.base) {
            Expr::Path(p) => p.path.is_ident("self"),
            base => is_self_field(base),
        },
        _ => false,
    }
}

/// Guesses what `expr` holds; `lookup` gives the nature of local names.
pub(crate) fn classify(expr: &Expr, scope: &Scope<'_>) -> Holds {
    match peel(expr) {
        Expr::Lit(_) | Expr::Cast(_) => Holds::Scalar,
        Expr::Macro(m) => {
            if m.mac.path.is_ident("vec") {
                Holds::Created
            } else {
                Holds::Scalar
            }
        }
        Expr::MethodCall(m) => {
            if is_one_of(&m.method, &SCALAR_METHODS)
                || scope.number_fns.contains(&m.method.to_string())
            {
                Holds::Scalar
            } else if is_one_of(&m.method, &DETACHING) {
                Holds::Detached
            } else if is_one_of(&m.method, &CREATION) {
                Holds::Created
            } else if is_one_of(&m.method, &TRANSPARENT) {
                classify(&m.receiver, scope)
            } else if is_one_of(&m.method, &PLUMBING) || is_one_of(&m.method, &MOVED_OR_HOST) {
                Holds::Other
            } else if is_reduction_to_number(m, scope.library) {
                Holds::Scalar
            } else {
                Holds::Produced
            }
        }
        Expr::Call(c) => match peel(&c.func) {
            Expr::Path(p) => match p.path.segments.last() {
                // `usize::from(..)`, `f32::max(..)`: host scalars.
                _ if p
                    .path
                    .segments
                    .iter()
                    .any(|s| is_one_of(&s.ident, &SCALAR_TYPES)) =>
                {
                    Holds::Scalar
                }
                // `Instant::now()`, `memory::stats(&dev)`: host values.
                Some(last) if is_one_of(&last.ident, &SCALAR_METHODS) => Holds::Scalar,
                Some(last) if scope.number_fns.contains(&last.ident.to_string()) => Holds::Scalar,
                // A local closure: what its body gives.
                Some(last)
                    if p.path.segments.len() == 1
                        && scope.closures.contains_key(&last.ident.to_string()) =>
                {
                    scope.closures[&last.ident.to_string()]
                }
                Some(last) if is_one_of(&last.ident, &CREATION) => Holds::Created,
                Some(last) if is_one_of(&last.ident, &MOVED_OR_HOST) => Holds::Other,
                // `Some(x)`, `Ok(x)`, `Wrapper(x)`: a constructor, not a computation.
                Some(last) if last.ident.to_string().starts_with(char::is_uppercase) => {
                    Holds::Other
                }
                _ => Holds::Produced,
            },
            _ => Holds::Produced,
        },
        Expr::Binary(b) => {
            let left = classify(&b.left, scope);
            let right = classify(&b.right, scope);
            if left == Holds::Produced || right == Holds::Produced {
                Holds::Produced
            } else if left == Holds::Scalar && right == Holds::Scalar {
                Holds::Scalar
            } else {
                Holds::Other
            }
        }
        Expr::Tuple(t) => strongest(t.elems.iter().map(|e| classify(e, scope))),
        Expr::Array(a) => strongest(a.elems.iter().map(|e| classify(e, scope))),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => classify(&u.expr, scope),
        Expr::Unary(u) if matches!(u.op, syn::UnOp::Not(_)) => Holds::Scalar,
        // A block gives its tail.
        Expr::Block(b) => match b.block.stmts.last() {
            Some(Stmt::Expr(tail, None)) => classify(tail, scope),
            _ => Holds::Other,
        },
        Expr::Path(p) => p
            .path
            .get_ident()
            .and_then(|i| (scope.lookup)(&i.to_string()))
            .unwrap_or(Holds::Other),
        _ => Holds::Other,
    }
}

/// `xs.sum()`, `a.mean()` without arguments: ndarray's and iterators' reductions to a number
/// (candle's take a dimension, `sum(1)`, and `sum_all()` is a tensor). In burn and dfdx the
/// same call gives a tensor.
fn is_reduction_to_number(call: &syn::ExprMethodCall, library: Library) -> bool {
    call.args.is_empty()
        && !matches!(library, Library::Burn | Library::Dfdx)
        && ["sum", "mean", "product", "norm", "norm_l2", "norm_l1"]
            .iter()
            .any(|name| call.method == name)
}

/// What the items of an iterator (the argument of `extend`) hold: the body of a `map`-like
/// closure, the item of `repeat`, the elements of the collection iterated; else what the
/// expression itself holds (`extend(outputs)`).
pub(crate) fn classify_items(expr: &Expr, scope: &Scope<'_>) -> Holds {
    match peel(expr) {
        Expr::MethodCall(m) => {
            let method = m.method.to_string();
            match method.as_str() {
                "map" | "filter_map" | "flat_map" | "map_while" => match m.args.first() {
                    Some(Expr::Closure(c)) => {
                        let mut bound = Vec::new();
                        for input in &c.inputs {
                            crate::syntax::pattern_names(input, &mut bound);
                        }
                        let lookup = |name: &str| {
                            if bound.iter().any(|b| b == name) {
                                Some(Holds::Pattern)
                            } else {
                                (scope.lookup)(name)
                            }
                        };
                        let inner = Scope {
                            lookup: &lookup,
                            library: scope.library,
                            number_fns: scope.number_fns,
                            closures: scope.closures,
                        };
                        match peel(&c.body) {
                            // `filter_map(|x| Some(v))`: the item is `v`.
                            Expr::Call(call) if call.args.len() == 1 => {
                                classify(&call.args[0], &inner)
                            }
                            body => classify(body, &inner),
                        }
                    }
                    _ => Holds::Other,
                },
                "iter" | "into_iter" | "iter_mut" | "drain" | "values" | "into_values" => {
                    classify(&m.receiver, scope)
                }
                "chars" | "bytes" | "lines" | "split" => Holds::Scalar,
                // Items copied out of a collection that exists already.
                "cloned" | "copied" => Holds::Other,
                _ if is_one_of(&m.method, &PLUMBING) => classify_items(&m.receiver, scope),
                _ => classify(expr, scope),
            }
        }
        Expr::Call(c) => match peel(&c.func) {
            Expr::Path(p)
                if p.path.segments.last().is_some_and(|s| {
                    s.ident == "repeat" || s.ident == "repeat_n" || s.ident == "once"
                }) =>
            {
                c.args
                    .first()
                    .map_or(Holds::Other, |item| classify(item, scope))
            }
            _ => classify(expr, scope),
        },
        Expr::Range(_) => Holds::Scalar,
        other => classify(other, scope),
    }
}

/// For a tuple or array: `Produced` if any element is, else the first memory-holding kind.
fn strongest(kinds: impl Iterator<Item = Holds>) -> Holds {
    let kinds: Vec<Holds> = kinds.collect();
    if kinds.contains(&Holds::Produced) {
        Holds::Produced
    } else if kinds.contains(&Holds::Detached) {
        Holds::Detached
    } else {
        Holds::Other
    }
}

/// What a `let` binds, from its type annotation and initializer.
pub(crate) fn classify_local(local: &syn::Local, scope: &Scope<'_>) -> Holds {
    if let Pat::Type(pat_type) = &local.pat {
        if is_scalar_type(&pat_type.ty) {
            return Holds::Scalar;
        }
    }
    match &local.init {
        Some(init) if turbofish_is_scalar(&init.expr) => Holds::Scalar,
        Some(init) => classify(&init.expr, scope),
        None => Holds::Other,
    }
}

/// A primitive, a reference, or a collection of them (`Vec<usize>`, `SmallVec<[i32; 4]>`,
/// `HashMap<u64, usize>`, `Vec<TensorView>`): a type that holds no tensor memory of its own.
pub(crate) fn is_scalar_type(ty: &Type) -> bool {
    match ty {
        Type::Path(p) if p.qself.is_none() => {
            let Some(last) = p.path.segments.last() else {
                return false;
            };
            if p.path.segments.len() == 1 && is_one_of(&last.ident, &SCALAR_TYPES) {
                return true;
            }
            // A view borrows its data: `TensorView`, `ArrayView2`, `NdTensorView`.
            if last.ident.to_string().contains("View") {
                return true;
            }
            match &last.arguments {
                // `Result<usize, E>`: what it holds when it is `Ok`.
                syn::PathArguments::AngleBracketed(args) if last.ident == "Result" => {
                    match args.args.first() {
                        Some(syn::GenericArgument::Type(ok)) => is_scalar_type(ok),
                        _ => false,
                    }
                }
                syn::PathArguments::AngleBracketed(args)
                    if is_one_of(&last.ident, &COLLECTION_TYPES) =>
                {
                    let types: Vec<&Type> = args
                        .args
                        .iter()
                        .filter_map(|arg| match arg {
                            syn::GenericArgument::Type(ty) => Some(ty),
                            _ => None,
                        })
                        .collect();
                    !types.is_empty() && types.into_iter().all(is_scalar_type)
                }
                _ => false,
            }
        }
        Type::Reference(_) => true,
        Type::Paren(p) => is_scalar_type(&p.elem),
        Type::Array(a) => is_scalar_type(&a.elem),
        Type::Slice(s) => is_scalar_type(&s.elem),
        Type::Tuple(t) => !t.elems.is_empty() && t.elems.iter().all(is_scalar_type),
        _ => false,
    }
}

/// Standard (and common) collections: a collection of primitives holds only primitives.
static COLLECTION_TYPES: NameList = NameList::new(&[
    "Vec",
    "VecDeque",
    "SmallVec",
    "HashMap",
    "HashSet",
    "BTreeMap",
    "BTreeSet",
    "BinaryHeap",
    "IndexMap",
    "IndexSet",
    "FxHashMap",
    "FxHashSet",
    "Option",
    "Box",
]);

/// The element type written in a collection's constructor: `Vec::<i32>::with_capacity(n)`.
fn turbofish_is_scalar(expr: &Expr) -> bool {
    let Expr::Call(call) = peel(expr) else {
        return false;
    };
    let Expr::Path(path) = peel(&call.func) else {
        return false;
    };
    path.path.segments.iter().any(|segment| {
        is_one_of(&segment.ident, &COLLECTION_TYPES)
            && match &segment.arguments {
                syn::PathArguments::AngleBracketed(args) => {
                    let types: Vec<&Type> = args
                        .args
                        .iter()
                        .filter_map(|arg| match arg {
                            syn::GenericArgument::Type(ty) => Some(ty),
                            _ => None,
                        })
                        .collect();
                    !types.is_empty() && types.into_iter().all(is_scalar_type)
                }
                _ => false,
            }
    })
}

/// Whether an identifier of the syntax tree that `walk` visits is one of `names`.
pub(crate) fn names_any_of(
    names: &[&str],
    walk: impl FnOnce(&mut crate::syntax::IdentVisitor<'_>),
) -> bool {
    let mut found = false;
    crate::syntax::visit_idents(
        &mut |ident| {
            found = names.contains(&ident.to_string().as_str());
            !found
        },
        walk,
    );
    found
}

/// Every identifier in a token stream (a superset of the names an expression mentions).
pub(crate) fn idents_in(tokens: TokenStream, out: &mut HashSet<String>) {
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => {
                out.insert(ident.to_string());
            }
            TokenTree::Group(group) => idents_in(group.stream(), out),
            _ => {}
        }
    }
}

/// Source-like rendering of an expression for messages, shortened to `max` characters.
///
/// The source text when it is known (outside a proc macro, where spans can be joined), with
/// its runs of white space made one space; else the tokens printed and tidied.
pub(crate) fn shown(tokens: &impl quote::ToTokens, max: usize) -> String {
    let stream = tokens.to_token_stream();
    let first = stream.clone().into_iter().next().map(|t| t.span());
    let last = stream.clone().into_iter().last().map(|t| t.span());
    let source = first
        .zip(last)
        .and_then(|(first, last)| first.join(last))
        .and_then(|span| span.source_text());
    let text = match source {
        Some(source) => source.split_whitespace().collect::<Vec<_>>().join(" "),
        None => tidy(stream.to_string()),
    };
    if text.chars().count() > max {
        return text.chars().take(max).collect::<String>() + "…";
    }
    text
}

/// Printed tokens made to look more like source: no space around `::`, `.`, parentheses.
fn tidy(mut text: String) -> String {
    for (from, to) in [
        (" :: ", "::"),
        (":: ", "::"),
        (" . ", "."),
        (" .", "."),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        (" ,", ","),
        ("& ", "&"),
        (" ?", "?"),
        ("! (", "!("),
    ] {
        text = text.replace(from, to);
    }
    text
}

/// The attributes of a statement (for an expression statement, the expression's).
pub(crate) fn stmt_attrs_mut(stmt: &mut Stmt) -> Option<&mut Vec<Attribute>> {
    match stmt {
        Stmt::Local(local) => Some(&mut local.attrs),
        Stmt::Macro(mac) => Some(&mut mac.attrs),
        Stmt::Expr(expr, _) => crate::syntax::expr_attrs_mut(expr),
        Stmt::Item(_) => None,
    }
}
