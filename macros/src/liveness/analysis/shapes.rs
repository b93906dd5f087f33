//! Shapes: what the syntax alone says about a value's type (never `DropAtLastUse`, decided by a
//! later use, may hold a closure) and about a statement (may it be written twice, does it
//! branch).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{BinOp, Expr, Ident, Macro, Stmt};

use super::known_names::{self as lists, macro_name};
use super::patterns::local_name;
use crate::common::NameList;

/// Whether a statement may be written twice (`if <DropAtLastUse> { let x = x; S } else { S }`).
///
/// Not when the copies could differ in type or meaning: every closure and async block has a
/// type of its own, so a `let` whose value may hold one (`let f = move || x.v;`, an unfinished
/// iterator chain `v.iter().map(|a| a + 1)`) cannot choose between two copies, and an item
/// (`impl`, `fn`, `macro_rules!`) would be defined twice.
pub(crate) fn duplicable(stmt: &Stmt) -> bool {
    struct Items(bool);
    impl<'ast> syn::visit::Visit<'ast> for Items {
        fn visit_item(&mut self, _: &'ast syn::Item) {
            self.0 = true;
        }
    }
    let mut items = Items(false);
    syn::visit::Visit::visit_stmt(&mut items, stmt);
    let value_may_hold_closure = match stmt {
        Stmt::Local(local) => local
            .init
            .as_ref()
            .is_some_and(|init| may_hold_closure(&init.expr)),
        _ => false,
    };
    !items.0 && !value_may_hold_closure
}

/// Whether the value of `expr` may have a closure or async block in its type.
pub(crate) fn may_hold_closure(expr: &Expr) -> bool {
    match expr {
        Expr::Closure(_) | Expr::Async(_) => true,
        // A consuming end of an iterator chain (`collect`, `sum`, …) leaves no closure type.
        Expr::MethodCall(call) if lists::CLOSURE_FREE_RESULTS.contains(call.method.to_string()) => {
            false
        }
        Expr::MethodCall(call) => {
            may_hold_closure(&call.receiver) || call.args.iter().any(may_hold_closure)
        }
        Expr::Call(call) => may_hold_closure(&call.func) || call.args.iter().any(may_hold_closure),
        Expr::Try(t) => may_hold_closure(&t.expr),
        Expr::Await(a) => may_hold_closure(&a.base),
        Expr::Paren(p) => may_hold_closure(&p.expr),
        Expr::Group(g) => may_hold_closure(&g.expr),
        Expr::Reference(r) => may_hold_closure(&r.expr),
        Expr::Unary(u) => may_hold_closure(&u.expr),
        Expr::Cast(c) => may_hold_closure(&c.expr),
        Expr::Binary(b) => may_hold_closure(&b.left) || may_hold_closure(&b.right),
        Expr::Tuple(t) => t.elems.iter().any(may_hold_closure),
        Expr::Array(a) => a.elems.iter().any(may_hold_closure),
        Expr::Struct(s) => s.fields.iter().any(|f| may_hold_closure(&f.expr)),
        Expr::Field(f) => may_hold_closure(&f.base),
        Expr::Index(i) => may_hold_closure(&i.expr),
        Expr::Lit(_) | Expr::Path(_) | Expr::Range(_) => false,
        Expr::Macro(mac) => {
            !lists::is_known_macro(&macro_name(&mac.mac)) || closure_tokens(mac.mac.tokens.clone())
        }
        // Blocks, branches, loops: whatever they contain.
        other => {
            struct Find(bool);
            impl<'ast> syn::visit::Visit<'ast> for Find {
                fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {
                    self.0 = true;
                }
                fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {
                    self.0 = true;
                }
                fn visit_macro(&mut self, mac: &'ast Macro) {
                    self.0 |= !lists::is_known_macro(&macro_name(mac))
                        || closure_tokens(mac.tokens.clone());
                }
            }
            let mut find = Find(false);
            syn::visit::Visit::visit_expr(&mut find, other);
            find.0
        }
    }
}

/// Whether `expr` (through `?`, `.await` and parentheses) calls a local binding, such as a
/// closure: `g(1)` after `let g = |a| async move { a };`.
pub(crate) fn calls_local(expr: &Expr, is_local: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => local_name(path).is_some_and(|name| is_local(&name)),
            other => calls_local(other, is_local),
        },
        Expr::Try(t) => calls_local(&t.expr, is_local),
        Expr::Await(a) => calls_local(&a.base, is_local),
        Expr::Paren(p) => calls_local(&p.expr, is_local),
        Expr::Group(g) => calls_local(&g.expr, is_local),
        _ => false,
    }
}

/// Tokens that may form a closure or an async block (`|`, `move`, `async`).
fn closure_tokens(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Punct(p) => p.as_char() == '|',
        TokenTree::Ident(i) => i == "move" || i == "async",
        TokenTree::Group(g) => closure_tokens(g.stream()),
        TokenTree::Literal(_) => false,
    })
}

/// A value whose type the syntax alone shows is not `DropAtLastUse`: a literal, a reference, a
/// range, or a number or `bool` (see [`scalar`]), given which locals are known numbers. Such a
/// local needs no probe, and no statement is written twice for it; it keeps its scope end either
/// way.
pub(crate) fn never_dropped_early(expr: &Expr, scalar_local: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::Lit(_) | Expr::Reference(_) | Expr::Range(_) => true,
        // To a number, a reference or a raw pointer.
        Expr::Cast(cast) => plain_type(&cast.ty),
        Expr::Paren(paren) => never_dropped_early(&paren.expr, scalar_local),
        Expr::Group(group) => never_dropped_early(&group.expr, scalar_local),
        // Every arm has the type of the others: one that shows its type decides for all
        // (`match l.offsets() { None => bail!(..), Some((a, b)) => &src[a..b] }`). A coercion
        // to a common type keeps a reference a reference (or a pointer).
        Expr::Match(match_) => match_
            .arms
            .iter()
            .any(|arm| never_dropped_early(&arm.body, scalar_local)),
        Expr::If(if_) => {
            if_.else_branch.is_some()
                && (block_value(&if_.then_branch)
                    .is_some_and(|v| never_dropped_early(v, scalar_local))
                    || if_
                        .else_branch
                        .as_ref()
                        .is_some_and(|(_, e)| never_dropped_early(e, scalar_local)))
        }
        Expr::Block(block) if block.label.is_none() => {
            block_value(&block.block).is_some_and(|v| never_dropped_early(v, scalar_local))
        }
        _ => scalar(expr, scalar_local),
    }
}

/// The method whose call `expr` is, when it returns a plain reference into its receiver by
/// the lists (`x.dims()`, `node.kind()`, `t.as_ref()`): a reference, never `DropAtLastUse`.
pub(crate) fn reference_accessor(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Paren(paren) => reference_accessor(&paren.expr),
        Expr::Group(group) => reference_accessor(&group.expr),
        Expr::MethodCall(call) => {
            let name = call.method.to_string();
            lists::REFERENCE_METHODS
                .contains(name.as_str())
                .then_some(name)
        }
        _ => None,
    }
}

/// The value of a block: its tail expression.
fn block_value(block: &syn::Block) -> Option<&Expr> {
    match block.stmts.last() {
        Some(Stmt::Expr(expr, None)) => Some(expr),
        _ => None,
    }
}

/// Methods of the primitive number types that return a number (or `bool`) when called on one
/// with numbers as arguments.
static NUMBER_METHODS: NameList = NameList::new(&[
    "abs",
    "ceil",
    "clamp",
    "cos",
    "div_ceil",
    "div_euclid",
    "exp",
    "floor",
    "is_finite",
    "is_nan",
    "ln",
    "log10",
    "log2",
    "max",
    "min",
    "mul_add",
    "pow",
    "powf",
    "powi",
    "recip",
    "rem_euclid",
    "round",
    "saturating_add",
    "saturating_mul",
    "saturating_sub",
    "signum",
    "sin",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
    "wrapping_add",
    "wrapping_mul",
    "wrapping_sub",
]);

/// Methods that return a size or a `bool` on whatever they are called (`v.len()`,
/// `t.rank()`, `t.elem_count()`); `dim(d)?` on a tensor is its size along `d`.
static SIZE_METHODS: NameList =
    NameList::new(&["elem_count", "is_contiguous", "is_empty", "len", "rank"]);

/// The `dimsN()` of candle, which return a tuple of sizes (`let (b, t, c) = x.dims3()?`).
static DIMS_METHODS: NameList = NameList::new(&["dims1", "dims2", "dims3", "dims4", "dims5"]);

/// Whether `expr` is, by its syntax alone, a primitive number or a `bool`: a number, `bool` or
/// `char` literal, a cast to a primitive, a comparison or boolean operator, arithmetic and
/// negation of numbers, a known number local (`scalar_local`), a constant of a primitive type
/// (`usize::MAX`), a size (`v.len()`, `x.dim(1)?`, `x.dims()[0]`), or a number method on a
/// number (`(a + 1).min(n)`). A misjudged value only keeps its scope end (no early drop), so
/// the lists are of what model code writes, not of every possibility.
pub(crate) fn scalar(expr: &Expr, scalar_local: &dyn Fn(&str) -> bool) -> bool {
    match expr {
        Expr::Lit(lit) => !matches!(
            lit.lit,
            syn::Lit::Str(_) | syn::Lit::ByteStr(_) | syn::Lit::CStr(_) | syn::Lit::Verbatim(_)
        ),
        Expr::Cast(cast) => primitive(&cast.ty),
        Expr::Paren(paren) => scalar(&paren.expr, scalar_local),
        Expr::Group(group) => scalar(&group.expr, scalar_local),
        Expr::Unary(unary) => {
            matches!(unary.op, syn::UnOp::Neg(_) | syn::UnOp::Not(_))
                && scalar(&unary.expr, scalar_local)
        }
        Expr::Binary(binary) => match binary.op {
            BinOp::Eq(_)
            | BinOp::Ne(_)
            | BinOp::Lt(_)
            | BinOp::Le(_)
            | BinOp::Gt(_)
            | BinOp::Ge(_)
            | BinOp::And(_)
            | BinOp::Or(_) => true,
            BinOp::Add(_)
            | BinOp::Sub(_)
            | BinOp::Mul(_)
            | BinOp::Div(_)
            | BinOp::Rem(_)
            | BinOp::BitAnd(_)
            | BinOp::BitOr(_)
            | BinOp::BitXor(_)
            | BinOp::Shl(_)
            | BinOp::Shr(_) => {
                scalar(&binary.left, scalar_local) && scalar(&binary.right, scalar_local)
            }
            _ => false,
        },
        Expr::Path(path) if path.qself.is_none() => {
            let segments = &path.path.segments;
            match segments.len() {
                1 => scalar_local(&segments[0].ident.unraw().to_string()),
                // `usize::MAX`, `f32::NEG_INFINITY`.
                2 => is_primitive_name(&segments[0].ident),
                _ => false,
            }
        }
        Expr::MethodCall(call) => {
            let name = call.method.to_string();
            (call.args.is_empty() && SIZE_METHODS.contains(name.as_str()))
                || (NUMBER_METHODS.contains(name.as_str())
                    && scalar(&call.receiver, scalar_local)
                    && call.args.iter().all(|a| scalar(a, scalar_local)))
        }
        // `x.dim(1)?`: a size.
        Expr::Try(t) => matches!(&*t.expr, Expr::MethodCall(call) if call.method == "dim"),
        // `x.dims()[0]`.
        Expr::Index(index) => {
            matches!(&*index.expr, Expr::MethodCall(call) if call.method == "dims" && call.args.is_empty())
        }
        _ => false,
    }
}

/// `let (b, t, c) = x.dims3()?;` (or without `?`, a tuple): every name a size.
pub(crate) fn dims_tuple(expr: &Expr) -> bool {
    let call = match expr {
        Expr::Try(t) => &*t.expr,
        other => other,
    };
    matches!(call, Expr::MethodCall(c) if c.args.is_empty() && DIMS_METHODS.contains(c.method.to_string()))
}

fn is_primitive_name(ident: &Ident) -> bool {
    PRIMITIVES.contains(ident.to_string())
}

/// A primitive number, `bool` or `char` type.
pub(crate) fn primitive(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Paren(paren) => primitive(&paren.elem),
        syn::Type::Path(path) => {
            path.qself.is_none() && path.path.get_ident().is_some_and(is_primitive_name)
        }
        _ => false,
    }
}

static PRIMITIVES: NameList = NameList::new(&[
    "bool", "char", "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32",
    "u64", "u128", "usize",
]);

/// A primitive scalar, a reference or a raw pointer: never `DropAtLastUse`.
pub(crate) fn plain_type(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Reference(_) | syn::Type::Ptr(_) => true,
        syn::Type::Paren(paren) => plain_type(&paren.elem),
        other => primitive(other),
    }
}

/// Whether the type of a `let`'s value may be decided only by a later use of the binding:
/// `Vec::new()`, `HashMap::new()`, `Default::default()`, `None`, `Ok(..)`, `vec![]`,
/// `x.parse()`, `x.collect()`, `x.into()`, `x.sum()`, `x as _`, or a turbofish with `_`.
/// A drop probe must not be placed before that use: method resolution would have to
/// answer for a type not known yet (and would take it for a `DropAtLastUse` one).
pub(crate) fn type_deferred(expr: &Expr) -> bool {
    match expr {
        Expr::Try(t) => type_deferred(&t.expr),
        Expr::Await(a) => type_deferred(&a.base),
        Expr::Paren(p) => type_deferred(&p.expr),
        Expr::Group(g) => type_deferred(&g.expr),
        Expr::Cast(c) => has_placeholder(&c.ty),
        Expr::Tuple(t) => t.elems.iter().any(type_deferred),
        Expr::Array(a) => a.elems.iter().any(type_deferred),
        Expr::Reference(r) => type_deferred(&r.expr),
        Expr::MethodCall(call) => {
            let name = call.method.to_string();
            // `collect::<Vec<_>>()`: the turbofish fixes the type; its `_`s come from the
            // receiver, which is known by then.
            if call.turbofish.is_some() {
                return false;
            }
            lists::TYPE_DEFERRING_METHODS.contains(name.as_str())
                || (lists::PASSTHROUGH_METHODS.contains(name.as_str())
                    && type_deferred(&call.receiver))
        }
        // `Some(Vec::new())`, `Box::new(Vec::new())`: a constructor of a deferred value.
        Expr::Call(call) if call.args.iter().any(type_deferred) => true,
        Expr::Call(call) => match &*call.func {
            Expr::Path(path) => {
                let segments = &path.path.segments;
                // `Vec::<_>::new()`, `make::<_>()`.
                if segments
                    .iter()
                    .any(|s| has_placeholder_tokens(s.arguments.to_token_stream()))
                {
                    return true;
                }
                let Some(last) = segments.last() else {
                    return false;
                };
                let name = last.ident.to_string();
                if !last.arguments.is_none() {
                    return false;
                }
                let owner = (segments.len() >= 2)
                    .then(|| &segments[segments.len() - 2])
                    .filter(|owner| owner.arguments.is_none())
                    .map(|owner| owner.ident.to_string());
                match owner.as_deref() {
                    // `Vec::new()`, `Vec::with_capacity(2 * n)`, a trait's `Vec::zeros(2 * p)`:
                    // the element types come later, whatever the arguments are, unless the
                    // arguments are the elements (`Vec::from(xs)`, `Option::Some(x)`).
                    Some(owner) if lists::GENERIC_CONTAINERS.contains(owner) => {
                        !matches!(name.as_str(), "from" | "from_iter" | "Some")
                    }
                    // `Default::default()`, `From::from(x)`: `Self` comes later.
                    Some(owner) => lists::CONVERSION_TRAITS.contains(owner),
                    None => matches!(name.as_str(), "Ok" | "Err" | "default"),
                }
            }
            _ => false,
        },
        Expr::Path(path) => path.path.is_ident("None"),
        Expr::Macro(mac) => macro_name(&mac.mac) == "vec" && mac.mac.tokens.is_empty(),
        Expr::Block(b) => match b.block.stmts.last() {
            Some(Stmt::Expr(tail, None)) => type_deferred(tail),
            _ => false,
        },
        _ => false,
    }
}

/// The local whose value `expr` copies or passes on (`u`, `u.clone()`, `u.to_owned()`,
/// `u.unwrap()`): a value whose type is that local's, or follows from it, and so is known no
/// sooner than that local's.
pub(crate) fn copied_local(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Path(path) => local_name(path),
        Expr::Paren(p) => copied_local(&p.expr),
        Expr::Group(g) => copied_local(&g.expr),
        Expr::Try(t) => copied_local(&t.expr),
        Expr::MethodCall(call) if call.turbofish.is_none() => {
            let name = call.method.to_string();
            (matches!(name.as_str(), "clone" | "to_owned")
                || lists::PASSTHROUGH_METHODS.contains(name.as_str()))
            .then(|| copied_local(&call.receiver))
            .flatten()
        }
        _ => None,
    }
}

/// Whether a type has an inferred part (`_`).
pub(crate) fn has_placeholder(ty: &syn::Type) -> bool {
    has_placeholder_tokens(ty.to_token_stream())
}

fn has_placeholder_tokens(tokens: TokenStream) -> bool {
    tokens.into_iter().any(|token| match token {
        TokenTree::Ident(i) => i == "_",
        TokenTree::Punct(p) => p.as_char() == '_',
        TokenTree::Group(g) => has_placeholder_tokens(g.stream()),
        TokenTree::Literal(_) => false,
    })
}
