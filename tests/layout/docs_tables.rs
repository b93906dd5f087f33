//! The per-library table is written twice, in README.md and in the facade's crate docs: the two
//! copies must say the same.

fn table_rows(text: &str, strip: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.strip_prefix(strip).unwrap_or(line).trim())
        .skip_while(|line| !line.starts_with("| | vramguard `Tensor`"))
        .take_while(|line| line.starts_with('|'))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_library_table_in_the_readme_and_the_crate_docs_agree() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README.md");
    let docs = std::fs::read_to_string(format!("{root}/src/lib.rs")).expect("src/lib.rs");
    let from_readme = table_rows(&readme, "");
    let from_docs = table_rows(&docs, "//!");
    assert!(from_readme.len() >= 10, "no table found in README.md");
    assert_eq!(
        from_readme, from_docs,
        "the library table of README.md and src/lib.rs differ"
    );
}

/// BENCHMARKS.md holds only what the benchmark programs rewrite (`--write` replaces the text
/// between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`), each section with the command that
/// measured it; notes and hand-taken measurements belong in docs/perf-notes.md.
#[test]
fn benchmarks_md_holds_only_sections_the_programs_rewrite() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/BENCHMARKS.md")).expect("BENCHMARKS.md");
    let mut problems = Vec::new();
    let mut open: Option<(String, bool)> = None; // (name, has a command)
    let mut sections = 0;
    for (n, line) in text.lines().enumerate() {
        if let Some(name) = line
            .strip_prefix("<!-- bench:")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            open = Some((name.to_string(), false));
        } else if let Some(name) = line
            .strip_prefix("<!-- /bench:")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            match open.take() {
                Some((opened, true)) if opened == name => sections += 1,
                Some((opened, false)) if opened == name => {
                    problems.push(format!("section `{name}` names no command (`Command: …`)"))
                }
                _ => problems.push(format!("line {}: `{name}` closes no open section", n + 1)),
            }
        } else if let Some((_, has_command)) = open.as_mut() {
            *has_command |= line.starts_with("Command: ");
        } else if sections > 0 && !line.trim().is_empty() {
            problems.push(format!(
                "line {}: text outside the programs' sections (move it to docs/perf-notes.md): {line}",
                n + 1
            ));
        }
    }
    assert!(
        sections >= 10,
        "only {sections} sections found in BENCHMARKS.md"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
