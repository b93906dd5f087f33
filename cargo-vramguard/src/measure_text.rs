//! The human text of `cargo vramguard measure`'s report (`measure::MeasureReport`): the peaks, their
//! ratio, the outputs compared, the time ratio, and the census at the annotated peak, in the
//! heap's words or, with `--device cuda`, the GPU's. Owns the wording only; the figures are
//! `measure`'s.

use std::fmt::Write as _;

use crate::measure::MeasureReport;

/// `1,234,567`.
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.50 MiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// At most this many groups in the human report.
const SHOWN_GROUPS: usize = 8;

impl MeasureReport {
    /// The human report.
    pub(crate) fn human(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "cargo vramguard measure: {} `{}` of {} {} ({} profile, {} run{} of each build)",
            self.target.kind.name(),
            self.target.name,
            self.krate,
            self.version,
            self.profile,
            self.runs,
            if self.runs == 1 { "" } else { "s" }
        );
        let source = if self.annotation_source == "check" {
            "added where the check found they compile"
        } else {
            "as the source has them"
        };
        let _ = writeln!(
            out,
            "annotated: {} function{} ({source}): {}",
            self.annotated_functions.len(),
            if self.annotated_functions.len() == 1 {
                ""
            } else {
                "s"
            },
            self.annotated_functions.join(", ")
        );
        let (peak, live) = if self.device == "cuda" {
            ("GPU peak", "live GPU allocations")
        } else {
            ("heap peak", "live allocations")
        };
        let _ = writeln!(
            out,
            "{:<23}{:>14} B  ({})",
            format!("{peak}, plain:"),
            grouped(self.plain_peak_bytes),
            human(self.plain_peak_bytes)
        );
        let _ = writeln!(
            out,
            "{:<23}{:>14} B  ({})",
            format!("{peak}, annotated:"),
            grouped(self.annotated_peak_bytes),
            human(self.annotated_peak_bytes)
        );
        let _ = writeln!(
            out,
            "peak ratio:            {:.3} (annotated / plain){}",
            self.peak_ratio,
            if self.peaks_stable {
                ""
            } else {
                "; the peaks varied between runs (threads?): these are the first runs'"
            }
        );
        match self.stdout_first_difference {
            None => {
                let _ = writeln!(out, "stdout:                identical");
            }
            Some(line) => {
                let _ = writeln!(
                    out,
                    "stdout:                DIFFERS (first at line {line}): the attribute changed \
                     what the program prints"
                );
            }
        }
        let _ = writeln!(
            out,
            "time ratio:            {:.2} (annotated / plain; median of {} run{}: {:.3} s / \
             {:.3} s)",
            self.time_ratio,
            self.runs,
            if self.runs == 1 { "" } else { "s" },
            self.annotated_seconds,
            self.plain_seconds
        );
        let _ = writeln!(
            out,
            "largest {live} at the annotated peak ({} B), by label:{}",
            grouped(self.census_peak_bytes),
            if self.census_complete {
                ""
            } else {
                " (incomplete: the observer's log dropped its oldest events, so older \
                 allocations may be missing)"
            }
        );
        let _ = writeln!(
            out,
            "  {:>14}  {:>7}  {:>14}  label",
            "bytes", "count", "size each"
        );
        for group in self.largest_at_peak.iter().take(SHOWN_GROUPS) {
            let _ = writeln!(
                out,
                "  {:>14}  {:>7}  {:>14}  {}",
                grouped(group.bytes),
                grouped(group.count),
                grouped(group.size),
                group.label
            );
        }
        if self.largest_at_peak.len() > SHOWN_GROUPS {
            let rest = &self.largest_at_peak[SHOWN_GROUPS..];
            let _ = writeln!(
                out,
                "  {:>14}  {:>7}  {:>14}  … the rest (--json lists them)",
                grouped(rest.iter().map(|g| g.bytes).sum()),
                grouped(rest.iter().map(|g| g.count).sum()),
                ""
            );
        }
        let mut by_label: Vec<(&str, u64)> = Vec::new();
        for group in &self.largest_at_peak {
            match by_label.iter_mut().find(|(label, _)| *label == group.label) {
                Some((_, bytes)) => *bytes += group.bytes,
                None => by_label.push((&group.label, group.bytes)),
            }
        }
        by_label.sort_by_key(|(_, bytes)| std::cmp::Reverse(*bytes));
        let totals: Vec<String> = by_label
            .iter()
            .map(|(label, bytes)| format!("{label} {} B", grouped(*bytes)))
            .collect();
        let _ = writeln!(out, "  by label: {}", totals.join(", "));
        let _ = writeln!(out, "builds and reports in {}", self.work_dir.display());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(grouped(999), "999");
        assert_eq!(human(1536), "1.50 KiB");
    }
}
