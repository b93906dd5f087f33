//! The plain form of a source file, for `measure`'s plain build: every `#[vramguard::inference]`
//! and `#[vramguard::batch_scope]` on a function or `impl` block removed, with the inert markers
//! (`#[keep]`, `#[batch_scope]` on a loop) inside the bodies they covered, which mean nothing
//! without them. Removed by text: a line that held only the attribute goes, every other byte
//! stays. Owns the recognition of those attributes; writing them is `annotate`'s and `apply`'s.

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::annotate::{LineIndex, OURS};

/// The text without vramguard's attributes, and how many were removed. `Err` when syn cannot
/// parse the file.
pub(crate) fn strip(text: &str) -> Result<(String, usize), String> {
    let file = syn::parse_file(text).map_err(|e| {
        let at = e.span().start();
        format!("line {}: syn cannot parse it ({e})", at.line)
    })?;
    let lines = LineIndex::new(text);
    let mut finder = AttributeFinder {
        lines: &lines,
        covered: 0,
        ranges: Vec::new(),
    };
    finder.visit_file(&file);
    let mut ranges = finder.ranges;
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in &ranges {
        let (start, end) = widen(text, *start, *end);
        if start < at {
            continue;
        }
        out.push_str(&text[at..start]);
        at = end;
    }
    out.push_str(&text[at..]);
    Ok((out, ranges.len()))
}

/// The attribute's range, widened to its whole line when nothing else is on it, else to the
/// one space after it.
fn widen(text: &str, start: usize, end: usize) -> (usize, usize) {
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i + 1);
    let before = &text[line_start..start];
    let after = &text[end..line_end];
    if before.trim().is_empty() && after.trim().is_empty() {
        (line_start, line_end)
    } else if text[end..].starts_with(' ') {
        (start, end + 1)
    } else {
        (start, end)
    }
}

/// `#[vramguard::inference]`, `#[::vramguard::batch_scope(..)]`, or the bare name as imported.
fn is_ours(attr: &syn::Attribute) -> bool {
    is_vramguard(attr, &OURS)
}

fn is_vramguard(attr: &syn::Attribute, names: &[&str]) -> bool {
    let segments = &attr.path().segments;
    let Some(last) = segments.last() else {
        return false;
    };
    let named = names.iter().any(|n| last.ident == n);
    named
        && match segments.len() {
            1 => true,
            2 => segments[0].ident == "vramguard",
            _ => false,
        }
}

struct AttributeFinder<'l, 'a> {
    lines: &'l LineIndex<'a>,
    /// Depth of items whose attribute is being removed: their inert markers go too.
    covered: usize,
    ranges: Vec<(usize, usize)>,
}

impl AttributeFinder<'_, '_> {
    fn remove(&mut self, attr: &syn::Attribute) {
        let span = attr.span();
        self.ranges.push((
            self.lines.offset(span.start()),
            self.lines.offset(span.end()),
        ));
    }

    /// Removes the item's attributes of vramguard; returns whether it had any.
    fn item(&mut self, attrs: &[syn::Attribute]) -> bool {
        let ours: Vec<&syn::Attribute> = attrs.iter().filter(|a| is_ours(a)).collect();
        for attr in &ours {
            self.remove(attr);
        }
        !ours.is_empty()
    }

    fn markers(&mut self, attrs: &[syn::Attribute]) {
        if self.covered == 0 {
            return;
        }
        for attr in attrs {
            if is_vramguard(attr, &["keep", "batch_scope"]) {
                self.remove(attr);
            }
        }
    }

    fn covering(&mut self, covers: bool, f: impl FnOnce(&mut Self)) {
        self.covered += usize::from(covers);
        f(self);
        self.covered -= usize::from(covers);
    }
}

impl<'ast> Visit<'ast> for AttributeFinder<'_, '_> {
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        let covers = self.item(&item.attrs);
        self.covering(covers, |this| syn::visit::visit_item_fn(this, item));
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        let covers = self.item(&item.attrs);
        self.covering(covers, |this| syn::visit::visit_impl_item_fn(this, item));
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        let covers = self.item(&item.attrs);
        self.covering(covers, |this| syn::visit::visit_trait_item_fn(this, item));
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        let covers = self.item(&item.attrs);
        self.covering(covers, |this| syn::visit::visit_item_impl(this, item));
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        self.markers(&local.attrs);
        syn::visit::visit_local(self, local);
    }

    fn visit_expr_for_loop(&mut self, expr: &'ast syn::ExprForLoop) {
        self.markers(&expr.attrs);
        syn::visit::visit_expr_for_loop(self, expr);
    }

    fn visit_expr_while(&mut self, expr: &'ast syn::ExprWhile) {
        self.markers(&expr.attrs);
        syn::visit::visit_expr_while(self, expr);
    }

    fn visit_expr_loop(&mut self, expr: &'ast syn::ExprLoop) {
        self.markers(&expr.attrs);
        syn::visit::visit_expr_loop(self, expr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_and_their_markers_go_and_every_other_byte_stays() {
        let text = "\
use vramguard::inference;

impl Model {
    /// Doc.
    #[vramguard::inference(keep(x))]
    pub fn forward(&self, x: &T) -> R {
        #[keep]
        let y = x.exp()?;
        #[allow(unused)] let z = 1;
        y
    }

    #[inline] #[inference] fn inline(&self) {}
}

#[vramguard::batch_scope(label = \"eval\")]
fn eval() {
    #[batch_scope]
    for b in 0..2 {}
}

#[other::inference]
fn not_ours() {
    #[keep]
    let kept = 1;
}
";
        let (out, removed) = strip(text).expect("parses");
        assert_eq!(removed, 5);
        assert_eq!(
            out,
            "\
use vramguard::inference;

impl Model {
    /// Doc.
    pub fn forward(&self, x: &T) -> R {
        let y = x.exp()?;
        #[allow(unused)] let z = 1;
        y
    }

    #[inline] fn inline(&self) {}
}

fn eval() {
    for b in 0..2 {}
}

#[other::inference]
fn not_ours() {
    #[keep]
    let kept = 1;
}
"
        );
        assert_eq!(strip(&out).map(|(_, n)| n), Ok(0));
    }
}
