//! The context rule of the CUDA code (`driver.rs`): the runtime makes a context current
//! with `cuCtxPushCurrent` and pops it after, never with cudarc's `bind_to_thread` (which
//! replaces the caller's context and reports, and clears, an error cudarc recorded on the
//! context earlier), nor through cudarc calls that bind for us (`CudaStream::synchronize`,
//! `CudaStream::join`, `CudaContext::synchronize`). Checked on the sources, since no GPU is
//! needed to see a call.

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The calls that bind the context, as they appear in code.
const BINDING_CALLS: [&str; 4] = [
    ".bind_to_thread()",
    "stream.synchronize()",
    ".join(&",
    "context().synchronize()",
];

/// `text` without `//` comments (docs name the calls to say why they are avoided).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.split("//").next().unwrap_or("")))
}

#[test]
fn the_runtime_never_binds_a_context_to_the_thread() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 20,
        "found {} sources under {root:?}",
        files.len()
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (line, code) in code_lines(&text) {
            for call in BINDING_CALLS {
                if code.contains(call) {
                    found.push(format!("{}:{line}: {}", file.display(), code.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "context bound, not pushed:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_binding_call() {
    let sample = "    self.stream.context().bind_to_thread()?; // why\n    // .bind_to_thread()\n";
    let hits: Vec<usize> = code_lines(sample)
        .filter(|(_, c)| BINDING_CALLS.iter().any(|call| c.contains(call)))
        .map(|(l, _)| l)
        .collect();
    assert_eq!(hits, vec![1]);
}
