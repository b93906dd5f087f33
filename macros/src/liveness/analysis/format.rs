//! Inline captures of format strings: `{x}`, `{x:?}`, `{:>w$}`, `{v:.p$}` are uses of `x`, `w`,
//! `v` and `p` that a token scan does not see.

/// The identifiers a format string captures from the enclosing scope, in order of appearance
/// (duplicates included). Positional (`{0}`) and implicit (`{}`) arguments capture nothing.
pub(crate) fn captures(format: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
            }
            '{' => {
                let mut inner = String::new();
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                    inner.push(c);
                }
                let (argument, spec) = match inner.find(':') {
                    Some(at) => (&inner[..at], &inner[at + 1..]),
                    None => (inner.as_str(), ""),
                };
                if let Some(name) = identifier(argument.trim()) {
                    names.push(name);
                }
                names.extend(dollar_names(spec));
            }
            _ => {}
        }
    }
    names
}

/// `name` if `text` is an identifier (`r#name` allowed), not a number or empty.
fn identifier(text: &str) -> Option<String> {
    let text = text.strip_prefix("r#").unwrap_or(text);
    let mut chars = text.chars();
    let first = chars.next()?;
    if !(first.is_alphabetic() || first == '_') || !chars.all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    (text != "_").then(|| text.to_string())
}

/// Names used as `name$` (width or precision arguments) in a format spec.
fn dollar_names(spec: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    for c in spec.chars() {
        if c.is_alphanumeric() || c == '_' {
            current.push(c);
            continue;
        }
        if c == '$' {
            if let Some(name) = identifier(&current) {
                names.push(name);
            }
        }
        current.clear();
    }
    names
}

#[cfg(test)]
mod tests {
    use super::captures;

    #[test]
    fn finds_inline_and_dollar_captures() {
        assert_eq!(captures("{x} {y:?} {{z}} {0} {}"), ["x", "y"]);
        assert_eq!(captures("{:>w$} {v:.p$} {a:>1$}"), ["w", "v", "p", "a"]);
        assert_eq!(
            captures("{r#type} {_x:<width$.prec$}"),
            ["type", "_x", "width", "prec"]
        );
        assert!(captures("{{}} plain").is_empty());
    }
}
