//! Finding the functions to annotate and writing the attribute into the copy.
//!
//! syn parses each file to find the functions and their spans; the attribute goes in by text
//! insertion on the function's own line (after its existing attributes, before `pub`/`fn`), so
//! every other byte of the file stays as written: line numbers, comments and macros are those
//! of the original, and compiler errors map back to functions by line. Owns the list of
//! candidate functions ([`FnSite`]) and the rendering of a file for a given set of
//! annotations; deciding which annotation each function gets is `check`'s.

use std::path::{Path, PathBuf};

use proc_macro2::LineColumn;
use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::cli::Attr;
use crate::error::{Error, Result};

/// One source file of the copy, as it was before any annotation.
#[derive(Debug)]
pub(crate) struct SourceFile {
    /// Path relative to the crate root, with `/` separators (as cargo reports spans).
    pub rel: String,
    /// The original text.
    pub text: String,
}

/// A `let` inside a candidate function: where an inert `#[keep]` would go.
#[derive(Debug, Clone)]
pub(crate) struct LetSite {
    /// Byte offset of the `let` keyword.
    pub offset: usize,
    /// First line of the statement (1-based).
    pub start_line: usize,
    /// Last line of the statement.
    pub end_line: usize,
    /// The names the pattern binds.
    pub names: Vec<String>,
}

/// A function the attribute may go on.
#[derive(Debug, Clone)]
pub(crate) struct FnSite {
    /// Index of its file in the file list.
    pub file: usize,
    /// `Type::name` for methods, `Trait::name` for default methods, `name` for free functions.
    pub name: String,
    /// Line of the attribute (the line of `fn` or of its visibility), 1-based.
    pub line: usize,
    /// First line of the item, its attributes included.
    pub start_line: usize,
    /// Line of the closing brace.
    pub end_line: usize,
    /// Byte offset where the attribute goes.
    pub offset: usize,
    /// The `let` statements of its body, outside nested items.
    pub lets: Vec<LetSite>,
}

/// What one function gets written in front of it, and where `#[keep]` goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Annotation {
    /// The attribute text, e.g. `#[::vramguard::inference(keep(x))]`.
    pub attr: String,
    /// Byte offsets of `let`s that get an inert `#[keep]`.
    pub keep_lets: Vec<usize>,
}

/// Every `.rs` file under `src/` (and `tests/`, `examples/` when `with_tests`) of `root`,
/// sorted by path.
pub(crate) fn collect_files(root: &Path, with_tests: bool) -> Result<Vec<SourceFile>> {
    let mut paths = Vec::new();
    let mut dirs = vec!["src"];
    if with_tests {
        dirs.extend(["tests", "examples"]);
    }
    for dir in dirs {
        let dir = root.join(dir);
        if dir.is_dir() {
            walk(&dir, &mut paths)?;
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(Error::io("read", &path))?;
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            Ok(SourceFile { rel, text })
        })
        .collect()
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(Error::io("read", dir))? {
        let path = entry.map_err(Error::io("read", dir))?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Which functions to list.
#[derive(Debug, Clone)]
pub(crate) struct Selection<'a> {
    /// The attribute (batch_scope: only functions with a loop).
    pub attr: Attr,
    /// Only names matching this pattern (the bare name or `Type::name`).
    pub fns: Option<&'a glob::Pattern>,
    /// Include `#[test]` functions and `#[cfg(test)]` modules.
    pub tests: bool,
}

/// The candidate functions of one file, in source order. A file syn cannot parse is an error
/// string for the report (it is left unannotated).
pub(crate) fn find_fns(
    file_index: usize,
    file: &SourceFile,
    selection: &Selection<'_>,
) -> std::result::Result<Vec<FnSite>, String> {
    let ast = syn::parse_file(&file.text).map_err(|e| {
        let at = e.span().start();
        format!(
            "{}:{}: syn cannot parse it ({e}); left unannotated",
            file.rel, at.line
        )
    })?;
    let mut finder = FnFinder {
        file_index,
        lines: LineIndex::new(&file.text),
        selection,
        owner: Vec::new(),
        found: Vec::new(),
    };
    finder.visit_file(&ast);
    Ok(finder.found)
}

/// Byte offsets of line starts, to turn a (line, char column) into a byte offset.
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    pub(crate) fn offset(&self, at: LineColumn) -> usize {
        let start = self
            .starts
            .get(at.line.saturating_sub(1))
            .copied()
            .unwrap_or(self.text.len());
        let line = &self.text[start..];
        start
            + line
                .char_indices()
                .nth(at.column)
                .map_or(line.len(), |(i, _)| i)
    }
}

/// An enclosing `impl` or `trait`.
enum Enclosing {
    /// Its methods are named `Owner::method`.
    Named(String),
    /// `#[inference] impl`: its methods already carry the attribute.
    Covered,
}

struct FnFinder<'s, 'a> {
    file_index: usize,
    lines: LineIndex<'a>,
    selection: &'s Selection<'s>,
    /// The enclosing `impl`s and `trait`s (innermost last); empty in a free scope.
    owner: Vec<Enclosing>,
    found: Vec<FnSite>,
}

/// Whether `attrs` holds an attribute whose last path segment is `name`.
pub(crate) fn has_attr(attrs: &[syn::Attribute], names: &[&str]) -> bool {
    attrs.iter().any(|a| {
        a.path()
            .segments
            .last()
            .is_some_and(|s| names.iter().any(|n| s.ident == n))
    })
}

/// `#[cfg(test)]` (alone; `cfg(any(test, ..))` is left to the compiler).
fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    })
}

/// The attributes of vramguard that go on functions (and `impl` blocks).
pub(crate) const OURS: [&str; 2] = ["inference", "batch_scope"];

impl FnFinder<'_, '_> {
    #[allow(clippy::too_many_arguments)]
    fn candidate(
        &mut self,
        attrs: &[syn::Attribute],
        vis_start: Option<LineColumn>,
        sig: &syn::Signature,
        block: &syn::Block,
        item_start: LineColumn,
    ) {
        if sig.constness.is_some() || has_attr(attrs, &OURS) {
            return;
        }
        if !self.selection.tests && has_attr(attrs, &["test", "bench"]) {
            return;
        }
        // An enclosing `#[inference] impl` already covers it.
        if matches!(self.owner.last(), Some(Enclosing::Covered)) {
            return;
        }
        let bare = sig.ident.to_string();
        let name = match self.owner.last() {
            Some(Enclosing::Named(owner)) => format!("{owner}::{bare}"),
            _ => bare.clone(),
        };
        if let Some(pattern) = self.selection.fns {
            if !pattern.matches(&bare) && !pattern.matches(&name) {
                return;
            }
        }
        if self.selection.attr == Attr::BatchScope {
            let mut loops = LoopFinder(false);
            loops.visit_block(block);
            if !loops.0 {
                return;
            }
        }
        let at = vis_start.unwrap_or_else(|| sig.span().start());
        let mut lets = LetFinder {
            lines: &self.lines,
            found: Vec::new(),
        };
        lets.visit_block(block);
        self.found.push(FnSite {
            file: self.file_index,
            name,
            line: at.line,
            start_line: item_start.line.min(at.line),
            end_line: block.brace_token.span.close().end().line,
            offset: self.lines.offset(at),
            lets: lets.found,
        });
    }

    fn with_owner(&mut self, owner: Enclosing, f: impl FnOnce(&mut Self)) {
        self.owner.push(owner);
        f(self);
        self.owner.pop();
    }
}

/// `Foo` for `Foo<T>`, `[T]` and the like as written.
fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map_or_else(|| "_".to_string(), |s| s.ident.to_string()),
        syn::Type::Reference(r) => type_name(&r.elem),
        _ => "_".to_string(),
    }
}

fn vis_start(vis: &syn::Visibility) -> Option<LineColumn> {
    match vis {
        syn::Visibility::Inherited => None,
        vis => Some(vis.span().start()),
    }
}

impl<'ast> Visit<'ast> for FnFinder<'_, '_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !self.selection.tests && is_cfg_test(&module.attrs) {
            return;
        }
        // A module resets the owner: its functions are free functions.
        let saved = std::mem::take(&mut self.owner);
        syn::visit::visit_item_mod(self, module);
        self.owner = saved;
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let start = item.span().start();
        self.candidate(
            &item.attrs,
            vis_start(&item.vis),
            &item.sig,
            &item.block,
            start,
        );
        // Items nested in the body are candidates of their own, as free functions.
        let saved = std::mem::take(&mut self.owner);
        syn::visit::visit_item_fn(self, item);
        self.owner = saved;
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !self.selection.tests && is_cfg_test(&item.attrs) {
            return;
        }
        // `#[inference] impl` annotates every method itself: its methods are not candidates.
        let owner = if has_attr(&item.attrs, &OURS) {
            Enclosing::Covered
        } else {
            Enclosing::Named(type_name(&item.self_ty))
        };
        self.with_owner(owner, |this| syn::visit::visit_item_impl(this, item));
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        let start = item.span().start();
        self.candidate(
            &item.attrs,
            vis_start(&item.vis),
            &item.sig,
            &item.block,
            start,
        );
        let saved = std::mem::take(&mut self.owner);
        syn::visit::visit_impl_item_fn(self, item);
        self.owner = saved;
    }

    fn visit_item_trait(&mut self, item: &'ast syn::ItemTrait) {
        let owner = Enclosing::Named(item.ident.to_string());
        self.with_owner(owner, |this| syn::visit::visit_item_trait(this, item));
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            let start = item.span().start();
            self.candidate(&item.attrs, None, &item.sig, block, start);
            let saved = std::mem::take(&mut self.owner);
            syn::visit::visit_block(self, block);
            self.owner = saved;
        }
    }

    // `extern { fn f(); }` has no bodies; `macro_rules!` bodies are tokens syn never parses.
    fn visit_item_foreign_mod(&mut self, _: &'ast syn::ItemForeignMod) {}
}

/// Whether a body has a `for`, `while` or `loop` outside nested items and `const` blocks (what
/// `#[batch_scope]` requires).
struct LoopFinder(bool);

impl<'ast> Visit<'ast> for LoopFinder {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_expr_const(&mut self, _: &'ast syn::ExprConst) {}
    fn visit_expr(&mut self, expr: &'ast syn::Expr) {
        if matches!(
            expr,
            syn::Expr::ForLoop(_) | syn::Expr::While(_) | syn::Expr::Loop(_)
        ) {
            self.0 = true;
        }
        syn::visit::visit_expr(self, expr);
    }
}

struct LetFinder<'l, 'a> {
    lines: &'l LineIndex<'a>,
    found: Vec<LetSite>,
}

impl<'ast> Visit<'ast> for LetFinder<'_, '_> {
    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_local(&mut self, local: &'ast syn::Local) {
        let mut names = NameFinder(Vec::new());
        names.visit_pat(&local.pat);
        let start = local.let_token.span.start();
        self.found.push(LetSite {
            offset: self.lines.offset(start),
            start_line: start.line,
            end_line: local.span().end().line,
            names: names.0,
        });
        syn::visit::visit_local(self, local);
    }
}

struct NameFinder(Vec<String>);

impl<'ast> Visit<'ast> for NameFinder {
    fn visit_pat_ident(&mut self, pat: &'ast syn::PatIdent) {
        self.0.push(pat.ident.to_string());
        syn::visit::visit_pat_ident(self, pat);
    }
}

/// The file's text with each annotation inserted; bytes elsewhere unchanged.
pub(crate) fn render<'a>(
    text: &str,
    annotations: impl IntoIterator<Item = (&'a FnSite, &'a Annotation)>,
) -> String {
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (site, annotation) in annotations {
        inserts.push((site.offset, format!("{} ", annotation.attr)));
        for &offset in &annotation.keep_lets {
            inserts.push((offset, "#[keep] ".to_string()));
        }
    }
    inserts.sort_by_key(|(offset, _)| *offset);
    let mut out = String::with_capacity(text.len() + inserts.len() * 32);
    let mut at = 0;
    for (offset, insert) in inserts {
        out.push_str(&text[at..offset]);
        out.push_str(&insert);
        at = offset;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"//! A module.
use std::fmt;

/// Doc.
#[inline]
pub fn free(x: u32) -> u32 { x + 1 }

const fn skipped() -> u32 { 1 }

struct S;

impl S {
    pub(crate) fn method(&self) -> u32 {
        let a = 1;
        let (b, c) = (2, 3);
        for i in 0..a { let _ = i; }
        b + c
    }
}

trait T {
    fn required(&self);
    fn provided(&self) -> u32 { 0 }
}

impl fmt::Display for S {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { write!(f, "é S") }
}

#[vramguard::inference]
fn already() {}

extern "C" { fn ffi(); }

macro_rules! m { () => { fn in_macro() {} } }

#[cfg(test)]
mod tests {
    #[test]
    fn a_test() {}
}
"#;

    fn file() -> SourceFile {
        SourceFile {
            rel: "src/lib.rs".into(),
            text: SOURCE.into(),
        }
    }

    fn names(attr: Attr, tests: bool) -> Vec<String> {
        let selection = Selection {
            attr,
            fns: None,
            tests,
        };
        find_fns(0, &file(), &selection)
            .expect("parses")
            .into_iter()
            .map(|f| f.name)
            .collect()
    }

    #[test]
    fn every_fn_with_a_body_is_found_except_const_extern_macro_and_annotated_ones() {
        assert_eq!(
            names(Attr::Inference, false),
            ["free", "S::method", "T::provided", "S::fmt"]
        );
        assert_eq!(
            names(Attr::Inference, true),
            ["free", "S::method", "T::provided", "S::fmt", "a_test"]
        );
    }

    #[test]
    fn batch_scope_goes_only_on_fns_with_a_loop() {
        assert_eq!(names(Attr::BatchScope, false), ["S::method"]);
    }

    #[test]
    fn insertion_changes_no_other_byte_and_no_line_number() {
        let file = file();
        let selection = Selection {
            attr: Attr::Inference,
            fns: None,
            tests: false,
        };
        let sites = find_fns(0, &file, &selection).expect("parses");
        let annotation = Annotation {
            attr: "#[::vramguard::inference]".into(),
            keep_lets: vec![sites[1].lets[1].offset],
        };
        let out = render(&file.text, sites.iter().map(|s| (s, &annotation)));
        assert_eq!(out.lines().count(), file.text.lines().count());
        assert!(out.contains("#[inline]\n#[::vramguard::inference] pub fn free"));
        assert!(out.contains("#[::vramguard::inference] pub(crate) fn method"));
        assert!(out.contains("#[keep] let (b, c)"));
        assert!(out.contains("#[::vramguard::inference] fn fmt(&self"));
        let stripped = out
            .replace("#[::vramguard::inference] ", "")
            .replace("#[keep] ", "");
        assert_eq!(stripped, file.text);
        assert_eq!(sites[1].lets[1].names, ["b", "c"]);
        assert_eq!((sites[1].start_line, sites[1].end_line), (13, 18));
    }
}
