//! Parsing of `#[batch_scope(..)]`: the options (on the function and on loop markers), the
//! annotated item, and what its loops say (markers, `.await`s), for validation and expansion.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{Parse, ParseStream};
use syn::visit::Visit;
use syn::{Attribute, Expr, LitInt, LitStr, Token};

use crate::options::{kw, CrateOption, NamedOption, OptionList};

/// The option list of `#[batch_scope(..)]`.
const OPTIONS: OptionList = OptionList {
    attribute: "#[batch_scope]",
    accepted: "`label = \"…\"`, `strict`, `every = N`, `warn_after = N`, \
               `warnings = \"auto\" | \"stderr\" | \"tracing\"`, `crate = path`",
};

/// The options of the function's `#[batch_scope(..)]`.
#[derive(Default)]
pub(crate) struct FnOptions {
    /// The scope settings of every scoped loop (a marker's own settings come first).
    pub settings: ScopeSettings,
    /// Path of the facade crate.
    pub krate: Option<syn::Path>,
}

/// The options of a `#[batch_scope(..)]` marker on a loop (no `crate`: it names the facade for
/// the whole function).
#[derive(Default)]
pub(crate) struct MarkerOptions {
    /// This loop's scope settings.
    pub settings: ScopeSettings,
}

/// The settings of a batch scope, each `None` (or `false`) where not given.
#[derive(Default)]
pub(crate) struct ScopeSettings {
    /// `label = "…"`: the scope's name in reports.
    pub label: Option<LitStr>,
    /// `strict`: a scope that grows fails instead of warning.
    pub strict: bool,
    /// `every = N`: empty the cache every N iterations.
    pub every: Option<u32>,
    /// `warn_after = N`: warn once the scope has grown N iterations in a row.
    pub warn_after: Option<u32>,
    /// `warnings = "auto" | "stderr" | "tracing"`: the runtime's `WarningOutput` variant.
    pub warnings: Option<syn::Ident>,
}

/// Where an option list is written.
#[derive(Clone, Copy, PartialEq)]
enum Site {
    Function,
    Loop,
}

impl Parse for FnOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (settings, krate) = scope_options(input, Site::Function)?;
        Ok(FnOptions {
            settings,
            krate: krate.map(|option| option.path),
        })
    }
}

impl Parse for MarkerOptions {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let (settings, _) = scope_options(input, Site::Loop)?;
        Ok(MarkerOptions { settings })
    }
}

/// The option list of either site; `crate` on a loop is an error at its keyword.
fn scope_options(
    input: ParseStream,
    site: Site,
) -> syn::Result<(ScopeSettings, Option<CrateOption>)> {
    let mut label: Option<LabelOption> = None;
    let mut strict: Option<kw::strict> = None;
    let mut every: Option<Iterations<kw::every>> = None;
    let mut warn_after: Option<Iterations<kw::warn_after>> = None;
    let mut warnings: Option<WarningsOption> = None;
    let mut krate: Option<CrateOption> = None;
    let mut more = !input.is_empty();
    while more {
        if input.peek(kw::label) {
            OPTIONS.set_once(&mut label, input.parse()?)?;
        } else if input.peek(kw::strict) {
            OPTIONS.set_once(&mut strict, input.parse()?)?;
        } else if input.peek(kw::every) {
            OPTIONS.set_once(&mut every, input.parse()?)?;
        } else if input.peek(kw::warn_after) {
            OPTIONS.set_once(&mut warn_after, input.parse()?)?;
        } else if input.peek(kw::warnings) {
            OPTIONS.set_once(&mut warnings, input.parse()?)?;
        } else if input.peek(Token![crate]) && site == Site::Loop {
            return Err(
                input.error("`crate = path` goes on the function's #[batch_scope], not on a loop")
            );
        } else if input.peek(Token![crate]) {
            OPTIONS.set_once(&mut krate, input.parse()?)?;
        } else {
            return Err(OPTIONS.unknown(input));
        }
        more = OPTIONS.next(input)?;
    }
    let settings = ScopeSettings {
        label: label.map(|option| option.value),
        strict: strict.is_some(),
        every: every.map(|option| option.value),
        warn_after: warn_after.map(|option| option.value),
        warnings: warnings.map(|option| option.variant),
    };
    Ok((settings, krate))
}

/// Parses `= value` after an option's keyword, or reports `expected` at the keyword (no `=`)
/// or at the value (not a `T`).
fn value<T: Parse>(input: ParseStream, keyword: Span, expected: &str) -> syn::Result<T> {
    if !input.peek(Token![=]) {
        return Err(syn::Error::new(keyword, expected));
    }
    input.parse::<Token![=]>()?;
    let start = input.span();
    input.parse().map_err(|_| syn::Error::new(start, expected))
}

/// `label = "…"`, not empty.
struct LabelOption {
    span: Span,
    value: LitStr,
}

impl Parse for LabelOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let keyword: kw::label = input.parse()?;
        let value: LitStr = value(
            input,
            keyword.span,
            "`label` takes a string: `label = \"eval\"`",
        )?;
        if value.value().is_empty() {
            return Err(syn::Error::new(value.span(), "the label must not be empty"));
        }
        Ok(LabelOption {
            span: keyword.span,
            value,
        })
    }
}

impl NamedOption for LabelOption {
    const NAME: &'static str = "label";
    fn span(&self) -> Span {
        self.span
    }
}

/// `every = N`, `warn_after = N`: a number of iterations from 1 to `u32::MAX`.
struct Iterations<K> {
    keyword: K,
    value: u32,
}

impl<K: NamedOption + Parse> Parse for Iterations<K> {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let keyword: K = input.parse()?;
        let expected = format!(
            "`{}` takes a whole number of iterations from 1 to {}",
            K::NAME,
            u32::MAX
        );
        let lit: LitInt = value(input, keyword.span(), &expected)?;
        match lit.base10_parse::<u32>() {
            Ok(value) if value > 0 => Ok(Iterations { keyword, value }),
            _ => Err(syn::Error::new(lit.span(), expected)),
        }
    }
}

impl<K: NamedOption> NamedOption for Iterations<K> {
    const NAME: &'static str = K::NAME;
    fn span(&self) -> Span {
        self.keyword.span()
    }
}

/// `warnings = "auto" | "stderr" | "tracing"`, as the `WarningOutput` variant it names.
struct WarningsOption {
    span: Span,
    variant: syn::Ident,
}

impl Parse for WarningsOption {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let keyword: kw::warnings = input.parse()?;
        let lit: LitStr = value(
            input,
            keyword.span,
            "`warnings` takes \"auto\", \"stderr\" or \"tracing\": `warnings = \"tracing\"`",
        )?;
        let variant = match lit.value().as_str() {
            "auto" => "Auto",
            "stderr" => "Stderr",
            "tracing" => "Tracing",
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown `warnings` output `{other}`; use \"auto\" (stderr unless a \
                         tracing subscriber is installed), \"stderr\" or \"tracing\""
                    ),
                ))
            }
        };
        Ok(WarningsOption {
            span: keyword.span,
            variant: syn::Ident::new(variant, lit.span()),
        })
    }
}

impl NamedOption for WarningsOption {
    const NAME: &'static str = "warnings";
    fn span(&self) -> Span {
        self.span
    }
}

/// The item under the attribute.
pub(crate) enum ScopeTarget {
    /// A function (or a method written alone) and its loops.
    Fn(Box<ScopedFunction>),
    /// Anything else, with a description and a span for the error.
    Other(&'static str, Span),
}

/// A function and what its loops say.
pub(crate) struct ScopedFunction {
    /// The function as written.
    pub item: syn::ItemFn,
    /// Every loop the expansion visits, in its order (a loop after the loops inside it).
    pub loops: Vec<Loop>,
    /// Markers that scope nothing, in source order.
    pub stray_markers: Vec<StrayMarker>,
}

impl ScopedFunction {
    /// Whether only the marked loops are scoped (some loop has a marker).
    pub(crate) fn only_marked(&self) -> bool {
        self.loops.iter().any(|l| l.marker.is_some())
    }

    /// The loops that get a scope.
    pub(crate) fn scoped_loops(&self) -> impl Iterator<Item = &Loop> {
        let only_marked = self.only_marked();
        self.loops
            .iter()
            .filter(move |l| !only_marked || l.marker.is_some())
    }
}

/// One `for`, `while` or `loop` of the function.
pub(crate) struct Loop {
    /// The options of its first `#[batch_scope]` marker, if it has one.
    pub marker: Option<MarkerOptions>,
    /// The first `.await` in its body (outside closures, async blocks and items).
    pub awaits: Option<Span>,
}

/// A `#[batch_scope]` marker that scopes nothing.
pub(crate) enum StrayMarker {
    /// On something other than a loop (span: the marker's name).
    NotOnALoop(Span),
    /// A second marker on one loop (span: the marker's name).
    Repeated(Span),
}

/// Parses the item; errors are the markers' option errors (non-functions become
/// [`ScopeTarget::Other`]).
pub(crate) fn target(item: TokenStream) -> syn::Result<ScopeTarget> {
    let parsed: syn::Item = match syn::parse2(item) {
        Ok(parsed) => parsed,
        Err(_) => return Ok(ScopeTarget::Other("this item", Span::call_site())),
    };
    let item = match parsed {
        syn::Item::Fn(item) => item,
        syn::Item::Struct(s) => return Ok(ScopeTarget::Other("a struct", s.ident.span())),
        syn::Item::Enum(e) => return Ok(ScopeTarget::Other("an enum", e.ident.span())),
        syn::Item::Impl(i) => {
            return Ok(ScopeTarget::Other(
                "an impl block (put it on the method)",
                i.impl_token.span,
            ))
        }
        syn::Item::Trait(t) => return Ok(ScopeTarget::Other("a trait", t.ident.span())),
        syn::Item::Mod(m) => return Ok(ScopeTarget::Other("a module", m.ident.span())),
        syn::Item::Static(s) => return Ok(ScopeTarget::Other("a static", s.ident.span())),
        syn::Item::Const(c) => return Ok(ScopeTarget::Other("a const", c.ident.span())),
        syn::Item::Type(t) => return Ok(ScopeTarget::Other("a type alias", t.ident.span())),
        _ => return Ok(ScopeTarget::Other("this item", Span::call_site())),
    };
    let mut scan = LoopScan::default();
    scan.visit_block(&item.block);
    if let Some(errors) = scan.errors {
        return Err(errors);
    }
    Ok(ScopeTarget::Fn(Box::new(ScopedFunction {
        item,
        loops: scan.loops,
        stray_markers: scan.stray_markers,
    })))
}

/// Whether an attribute is a `#[batch_scope]` loop marker (under any path).
pub(crate) fn is_marker(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "batch_scope")
}

/// The span of a marker's name, where its errors point.
fn marker_name_span(attr: &Attribute) -> Span {
    attr.path()
        .segments
        .last()
        .map_or_else(Span::call_site, |s| s.ident.span())
}

/// The attributes of a loop expression; `None` for any other expression.
pub(crate) fn loop_attrs(expr: &Expr) -> Option<&Vec<Attribute>> {
    match expr {
        Expr::ForLoop(e) => Some(&e.attrs),
        Expr::While(e) => Some(&e.attrs),
        Expr::Loop(e) => Some(&e.attrs),
        _ => None,
    }
}

/// The options of a marker.
fn marker_options(marker: &Attribute) -> syn::Result<MarkerOptions> {
    match &marker.meta {
        syn::Meta::Path(_) => Ok(MarkerOptions::default()),
        syn::Meta::List(list) => syn::parse2(list.tokens.clone()),
        syn::Meta::NameValue(nv) => Err(syn::Error::new(
            nv.eq_token.span,
            "write the marker as #[batch_scope] or #[batch_scope(label = \"…\")]",
        )),
    }
}

/// Records the loops, their markers and their `.await`s, and the markers on anything else.
///
/// Its order is the expansion's (`expand::Scoper`): nested items and `const { .. }` blocks are
/// skipped (the first is not this function's code, the second runs at compile time), and a loop
/// is recorded after the loops inside it.
#[derive(Default)]
struct LoopScan {
    loops: Vec<Loop>,
    stray_markers: Vec<StrayMarker>,
    errors: Option<syn::Error>,
}

impl LoopScan {
    fn not_on_a_loop(&mut self, attrs: &[Attribute]) {
        for attr in attrs.iter().filter(|a| is_marker(a)) {
            self.stray_markers
                .push(StrayMarker::NotOnALoop(marker_name_span(attr)));
        }
    }
}

impl<'ast> Visit<'ast> for LoopScan {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_const(&mut self, _: &'ast syn::ExprConst) {}

    fn visit_local(&mut self, local: &'ast syn::Local) {
        self.not_on_a_loop(&local.attrs);
        syn::visit::visit_local(self, local);
    }

    fn visit_stmt_macro(&mut self, mac: &'ast syn::StmtMacro) {
        self.not_on_a_loop(&mac.attrs);
    }

    fn visit_expr(&mut self, expr: &'ast Expr) {
        let Some(attrs) = loop_attrs(expr) else {
            if let Some(attrs) = crate::common::expr_attrs(expr) {
                self.not_on_a_loop(attrs);
            }
            syn::visit::visit_expr(self, expr);
            return;
        };
        let mut markers = attrs.iter().filter(|a| is_marker(a));
        let marker = match markers.next().map(marker_options) {
            Some(Ok(options)) => Some(options),
            Some(Err(err)) => {
                match &mut self.errors {
                    Some(all) => all.combine(err),
                    None => self.errors = Some(err),
                }
                None
            }
            None => None,
        };
        for repeated in markers {
            self.stray_markers
                .push(StrayMarker::Repeated(marker_name_span(repeated)));
        }
        syn::visit::visit_expr(self, expr);
        let body = match expr {
            Expr::ForLoop(e) => &e.body,
            Expr::While(e) => &e.body,
            Expr::Loop(e) => &e.body,
            _ => return,
        };
        let mut awaits = AwaitScan::default();
        awaits.visit_block(body);
        self.loops.push(Loop {
            marker,
            awaits: awaits.found,
        });
    }
}

/// Finds `.await` in a loop body (not inside closures, async blocks or items).
#[derive(Default)]
struct AwaitScan {
    found: Option<Span>,
}

impl<'ast> Visit<'ast> for AwaitScan {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_closure(&mut self, _: &'ast syn::ExprClosure) {}
    fn visit_expr_async(&mut self, _: &'ast syn::ExprAsync) {}
    fn visit_expr_await(&mut self, e: &'ast syn::ExprAwait) {
        if self.found.is_none() {
            self.found = Some(e.await_token.span);
        }
    }
    // Macro arguments are tokens: `println!("{}", f().await)` awaits too.
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if self.found.is_none() {
            self.found = await_in_tokens(mac.tokens.clone());
        }
    }
}

/// The span of a `.await` in `tokens`, outside `async` blocks.
fn await_in_tokens(tokens: TokenStream) -> Option<Span> {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    let mut skip_next_group = false;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Ident(ident) if ident == "async" => skip_next_group = true,
            TokenTree::Ident(ident) if ident == "move" => {}
            TokenTree::Ident(ident) if ident == "await" => {
                let after_dot =
                    i > 0 && matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                if after_dot {
                    return Some(ident.span());
                }
                skip_next_group = false;
            }
            TokenTree::Group(group) => {
                if !std::mem::take(&mut skip_next_group) {
                    if let Some(span) = await_in_tokens(group.stream()) {
                        return Some(span);
                    }
                }
            }
            _ => skip_next_group = false,
        }
    }
    None
}
