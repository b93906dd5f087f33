//! Diagnostics as rustc and cargo write them: the human format (headline, location, the code
//! with carets, notes and help), the short format (one line), and cargo's JSON
//! `compiler-message` objects (rustc's diagnostic inside), which rust-analyzer reads from its
//! check command. Owns the layout only; what a finding says is `vramguard-lints`'.

use proc_macro2::LineColumn;
use serde_json::{json, Value};

/// A diagnostic's level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// `warning`.
    Warning,
    /// `error` (`--deny`).
    Error,
    /// `note`, for children.
    Note,
    /// `help`, for children.
    Help,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Note => "note",
            Level::Help => "help",
        }
    }
}

/// Where a diagnostic points, with the source lines it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    /// The file, relative to the workspace root (as cargo writes it).
    pub file_name: String,
    /// Byte offset of the start in the file.
    pub byte_start: usize,
    /// Byte offset of the end (exclusive).
    pub byte_end: usize,
    /// 1-based first line.
    pub line_start: usize,
    /// 1-based last line.
    pub line_end: usize,
    /// 1-based column (in characters) of the start.
    pub column_start: usize,
    /// 1-based column (in characters) just past the end, on the last line.
    pub column_end: usize,
    /// The text of lines `line_start..=line_end`, without their line ends.
    pub lines: Vec<String>,
}

impl Region {
    /// The region from `start` to `end` (proc-macro2's 1-based lines, 0-based character
    /// columns) in `text`.
    pub(crate) fn new(file_name: String, text: &str, start: LineColumn, end: LineColumn) -> Self {
        let lines: Vec<&str> = text.split('\n').collect();
        let line_text = |line: usize| {
            lines
                .get(line.saturating_sub(1))
                .map_or("", |l| l.strip_suffix('\r').unwrap_or(l))
        };
        let mut line_starts = Vec::with_capacity(lines.len());
        let mut offset = 0;
        for line in &lines {
            line_starts.push(offset);
            offset += line.len() + 1;
        }
        let byte = |at: LineColumn| {
            let start = line_starts
                .get(at.line.saturating_sub(1))
                .copied()
                .unwrap_or(text.len());
            let line = line_text(at.line);
            start
                + line
                    .char_indices()
                    .nth(at.column)
                    .map_or(line.len(), |(i, _)| i)
        };
        let end = if (end.line, end.column) < (start.line, start.column) {
            start
        } else {
            end
        };
        Region {
            file_name,
            byte_start: byte(start),
            byte_end: byte(end),
            line_start: start.line,
            line_end: end.line,
            column_start: start.column + 1,
            column_end: end.column + 1,
            lines: (start.line..=end.line)
                .map(|l| line_text(l).to_string())
                .collect(),
        }
    }
}

/// A note or help under a diagnostic.
#[derive(Clone, Debug)]
pub(crate) struct Child {
    /// `Note` or `Help`.
    pub level: Level,
    /// The text.
    pub message: String,
}

/// One diagnostic, ready to be written in any format.
#[derive(Clone, Debug)]
pub(crate) struct LintDiagnostic {
    /// `Warning`, or `Error` under `--deny`.
    pub level: Level,
    /// `vramguard::name`, when it is a lint's.
    pub code: Option<String>,
    /// The lint's one-line explanation (JSON's `code.explanation`).
    pub explanation: Option<String>,
    /// The headline.
    pub message: String,
    /// Where it points.
    pub region: Region,
    /// The words under the carets.
    pub label: Option<String>,
    /// Notes and help.
    pub children: Vec<Child>,
}

impl LintDiagnostic {
    fn headline(&self) -> String {
        match &self.code {
            Some(code) => format!("{}[{code}]: {}", self.level.name(), self.message),
            None => format!("{}: {}", self.level.name(), self.message),
        }
    }

    /// The human format, as rustc writes it (ends with an empty line).
    pub(crate) fn human(&self) -> String {
        let region = &self.region;
        let width = region.line_end.to_string().len();
        let pad = " ".repeat(width);
        let mut out = format!(
            "{}\n{pad}--> {}:{}:{}\n{pad} |\n",
            self.headline(),
            region.file_name,
            region.line_start,
            region.column_start
        );
        let label = self
            .label
            .as_deref()
            .map_or_else(String::new, |l| format!(" {l}"));
        let shown = |line: &str| line.replace('\t', " ");
        if region.lines.len() <= 1 {
            let line = region.lines.first().map_or("", String::as_str);
            let start = region.column_start - 1;
            let carets = (region.column_end.max(region.column_start + 1)) - region.column_start;
            out.push_str(&format!(
                "{:>width$} | {}\n{pad} | {}{}{label}\n",
                region.line_start,
                shown(line),
                " ".repeat(start),
                "^".repeat(carets),
            ));
        } else {
            // rustc's multi-line form: `/` (or `_^` from the start column) down the margin,
            // `|_^` under the end; the middle of a long region elided.
            let count = region.lines.len();
            let first = &region.lines[0];
            let starts_line = first
                .chars()
                .take(region.column_start - 1)
                .all(char::is_whitespace);
            for (index, line) in region.lines.iter().enumerate() {
                let number = region.line_start + index;
                if count > 6 && index == 2 {
                    out.push_str(&format!("{pad} | |\n...\n"));
                }
                if count > 6 && (2..count - 2).contains(&index) {
                    continue;
                }
                if index == 0 {
                    if starts_line {
                        out.push_str(&format!("{number:>width$} | / {}\n", shown(line)));
                    } else {
                        out.push_str(&format!("{number:>width$} |   {}\n", shown(line)));
                        out.push_str(&format!("{pad} |  {}^\n", "_".repeat(region.column_start)));
                    }
                } else {
                    out.push_str(&format!("{number:>width$} | | {}\n", shown(line)));
                }
            }
            out.push_str(&format!(
                "{pad} | |{}^{label}\n",
                "_".repeat(region.column_end.saturating_sub(1))
            ));
        }
        out.push_str(&format!("{pad} |\n"));
        for child in &self.children {
            out.push_str(&format!(
                "{pad} = {}: {}\n",
                child.level.name(),
                child.message
            ));
        }
        out.push('\n');
        out
    }

    /// The short format: `file:line:col: warning[code]: message`.
    pub(crate) fn short(&self) -> String {
        format!(
            "{}:{}:{}: {}\n",
            self.region.file_name,
            self.region.line_start,
            self.region.column_start,
            self.headline()
        )
    }

    /// rustc's JSON diagnostic.
    pub(crate) fn json(&self) -> Value {
        let region = &self.region;
        let count = region.lines.len();
        let text: Vec<Value> = region
            .lines
            .iter()
            .enumerate()
            .map(|(index, line)| {
                let start = if index == 0 { region.column_start } else { 1 };
                let end = if index + 1 == count {
                    region.column_end
                } else {
                    line.chars().count() + 1
                };
                json!({ "text": line, "highlight_start": start, "highlight_end": end })
            })
            .collect();
        let children: Vec<Value> = self
            .children
            .iter()
            .map(|child| {
                json!({
                    "message": child.message,
                    "code": null,
                    "level": child.level.name(),
                    "spans": [],
                    "children": [],
                    "rendered": null,
                })
            })
            .collect();
        json!({
            "$message_type": "diagnostic",
            "message": self.message,
            "code": self.code.as_ref().map(|code| json!({
                "code": code,
                "explanation": self.explanation,
            })),
            "level": self.level.name(),
            "spans": [{
                "file_name": region.file_name,
                "byte_start": region.byte_start,
                "byte_end": region.byte_end,
                "line_start": region.line_start,
                "line_end": region.line_end,
                "column_start": region.column_start,
                "column_end": region.column_end,
                "is_primary": true,
                "text": text,
                "label": self.label,
                "suggested_replacement": null,
                "suggestion_applicability": null,
                "expansion": null,
            }],
            "children": children,
            "rendered": self.human(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize) -> LineColumn {
        LineColumn { line, column }
    }

    fn diagnostic(region: Region) -> LintDiagnostic {
        LintDiagnostic {
            level: Level::Warning,
            code: Some("vramguard::graph_across_iterations".into()),
            explanation: Some("why".into()),
            message: "`total` accumulates `loss`".into(),
            region,
            label: Some("here".into()),
            children: vec![Child {
                level: Level::Help,
                message: "accumulate a number".into(),
            }],
        }
    }

    #[test]
    fn regions_count_bytes_and_characters_apart() {
        let text = "fn f() {\n    let é = 1; total = (total + loss)?;\n}\n";
        let region = Region::new("src/lib.rs".into(), text, at(2, 15), at(2, 38));
        assert_eq!(
            &text[region.byte_start..region.byte_end],
            "total = (total + loss)?"
        );
        assert_eq!((region.column_start, region.column_end), (16, 39));
        assert_eq!(region.lines, ["    let é = 1; total = (total + loss)?;"]);
    }

    #[test]
    fn one_line_renders_like_rustc() {
        let text = "fn f() {\n    total = (total + loss)?;\n}\n";
        let region = Region::new("src/lib.rs".into(), text, at(2, 4), at(2, 27));
        let d = diagnostic(region);
        assert_eq!(
            d.human(),
            "warning[vramguard::graph_across_iterations]: `total` accumulates `loss`\n \
             --> src/lib.rs:2:5\n  |\n2 |     total = (total + loss)?;\n  |     \
             ^^^^^^^^^^^^^^^^^^^^^^^ here\n  |\n  = help: accumulate a number\n\n"
        );
        assert_eq!(
            d.short(),
            "src/lib.rs:2:5: warning[vramguard::graph_across_iterations]: `total` accumulates `loss`\n"
        );
        let json = d.json();
        assert_eq!(json["spans"][0]["text"][0]["highlight_start"], 5);
        assert_eq!(json["spans"][0]["text"][0]["highlight_end"], 28);
        assert_eq!(json["code"]["code"], "vramguard::graph_across_iterations");
        assert_eq!(json["children"][0]["level"], "help");
    }

    #[test]
    fn several_lines_render_with_a_margin() {
        let text = "fn f() {\n    total = (total\n        + loss)?;\n}\n";
        let region = Region::new("src/lib.rs".into(), text, at(2, 4), at(3, 16));
        let human = diagnostic(region).human();
        assert!(
            human.contains(
                "2 | /     total = (total\n3 | |         + loss)?;\n  | |________________^ here\n"
            ),
            "{human}"
        );
    }
}
