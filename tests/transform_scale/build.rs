//! Writes the at-scale corpus into `OUT_DIR`: `tests/gen/kept_generator.rs` with the extended
//! statements (closures, `?`, async, macros), `FUNCTIONS` functions from a seed that changes per
//! fresh build (the clock), or `VRAMGUARD_GEN_SEED` to reproduce one. Runs again when that
//! variable or the generator changes: every CI run (a clean checkout) compiles a new corpus;
//! locally, `VRAMGUARD_GEN_SEED=$RANDOM cargo test -p vramguard-transform-scale` draws another.

#[path = "../gen/kept_generator.rs"]
#[allow(dead_code)]
mod kept_generator;

/// Functions per build (issue #22: at least 1,000 per CI run).
const FUNCTIONS: usize = 1000;
/// Files, so that rustc's codegen units split the work.
const FILES: usize = 8;

fn main() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let seed = match std::env::var("VRAMGUARD_GEN_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("VRAMGUARD_GEN_SEED={text}: expected a whole number")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    let (files, counts) = kept_generator::generate_with(seed, FUNCTIONS, FILES, true);
    let mut corpus = String::new();
    let mut cases = Vec::new();
    for (i, (name, text)) in files.iter().enumerate() {
        let path = out.join(name);
        std::fs::write(&path, text).expect("writing the corpus into OUT_DIR");
        corpus.push_str(&format!(
            "#[rustfmt::skip]\n#[path = {:?}]\nmod kept_corpus_{i};\n",
            path.display().to_string()
        ));
        cases.push(format!("kept_corpus_{i}::CASES"));
    }
    corpus.push_str(&format!(
        "/// Every generated function.\nfn all_cases() -> Vec<Case> {{\n    [{}].concat()\n}}\n\
         /// The seed the corpus was generated from.\nconst SEED: u64 = {seed};\n\
         /// Kept values, observations and droppable locals in the corpus.\n\
         const COUNTS: (usize, usize, usize, usize) = ({}, {}, {}, {});\n",
        cases.join(", "),
        counts.functions,
        counts.kept,
        counts.observations,
        counts.droppable
    ));
    std::fs::write(out.join("corpus.rs"), corpus).expect("writing corpus.rs into OUT_DIR");
    println!("cargo:rerun-if-env-changed=VRAMGUARD_GEN_SEED");
    println!("cargo:rerun-if-changed=../gen/kept_generator.rs");
    println!("cargo:rerun-if-changed=../gen/rng.rs");
    // No rerun on every build: a fresh target directory (each CI run is a clean checkout) draws
    // a new seed, while a developer's `cargo check` does not recompile 3,000 functions each time.
    println!("cargo:rerun-if-changed=build.rs");
}
