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
