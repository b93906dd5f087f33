//! `cargo vramguard check` end to end on the fixture crates under `tests/fixtures/`: the real
//! binary, real cargo runs. The runs share one target directory under the workspace's
//! `target/`, so vramguard and its dependencies build once.

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Runs the tool on a fixture with a shared work and target directory.
fn check(name: &str, extra: &[&str]) -> Output {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vramguard-check");
    Command::new(env!("CARGO_BIN_EXE_cargo-vramguard"))
        .args(["vramguard", "check"])
        .arg(fixture(name))
        .arg("--work-dir")
        .arg(base.join("work"))
        .arg("--target-dir")
        .arg(base.join("target"))
        .args(extra)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("the cargo-vramguard binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_crate_that_compiles_annotated_reports_all_functions_and_same_test_results() {
    let output = check("compiles", &["--test"]);
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    // forward, Model::new, Model::run, Model::default, Describe::name, layers::twice and the
    // integration test; not the `const fn`.
    assert!(
        stdout.contains("(#[inference]): 7/7 functions compile"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "tests: 1 passed, 0 failed, 0 ignored (plain: 1 passed, 0 failed); same results"
        ),
        "{stdout}"
    );
    assert!(stderr.contains("[round 1] cargo check"), "{stderr}");
}

#[test]
fn failing_functions_are_named_with_their_error_and_a_verified_escape_hatch() {
    let output = check("needs_hatches", &["--json"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["total"], 5, "{stdout}");
    // `trains` compiles: `backward_in_inference` is a warning (a lint never fails a build).
    assert_eq!(report["compiled"], 3, "{stdout}");
    assert_eq!(report["converged"], true, "{stdout}");
    let failures = report["failures"].as_array().expect("failures");
    let by_name = |name: &str| {
        failures
            .iter()
            .find(|f| f["function"] == name)
            .unwrap_or_else(|| panic!("no failure for {name}: {stdout}"))
    };
    let keep = by_name("needs_keep");
    assert_eq!(keep["file"], "src/lib.rs");
    assert_eq!(keep["line"], 14);
    assert_eq!(keep["error"]["code"], "E0505", "{stdout}");
    assert_eq!(keep["suggested"], "#[inference(keep(x))]");
    assert_eq!(keep["fix"], "#[inference(keep(x))]");
    assert_eq!(keep["verified"], true);
    let two = by_name("needs_two_keeps");
    assert_eq!(two["suggested"], "#[inference(keep(x, y))]", "{stdout}");
    assert_eq!(two["fix"], "#[inference(keep(x, y))]", "{stdout}");
    assert_eq!(two["verified"], true);
    assert!(
        failures.iter().all(|f| f["function"] != "trains"),
        "{stdout}"
    );
}

#[test]
fn a_crate_broken_without_the_attribute_is_an_error_saying_so() {
    let output = check("broken", &["--fns", "broken"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("does not build even without the attribute"),
        "{stderr}"
    );
    assert!(stderr.contains("src/lib.rs:3: error[E0308]"), "{stderr}");
}

#[test]
fn the_features_the_crate_declares_for_vramguard_are_kept() {
    // `keeps_features` declares `default-features = false, features = ["ndarray"]`; its code
    // compiles only with the `ndarray` feature, so a build that dropped it fails.
    let output = check("keeps_features", &["--json"]);
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(
        report["features"],
        serde_json::json!(["ndarray"]),
        "{stdout}"
    );
    assert_eq!(report["default_features"], false, "{stdout}");
    assert_eq!(report["total"], 2, "{stdout}");
    assert_eq!(report["compiled"], 2, "{stdout}");
    assert_eq!(report["warnings"], serde_json::json!([]), "{stdout}");
    let copy = report["copy_dir"].as_str().expect("copy_dir");
    let manifest = std::fs::read_to_string(PathBuf::from(copy).join("Cargo.toml"))
        .expect("the copy's manifest");
    assert!(
        manifest.contains("default-features = false, features = [\"ndarray\"] }"),
        "{manifest}"
    );
}

#[test]
fn a_tensor_library_without_its_vramguard_feature_is_a_warning_with_the_fix() {
    let output = check("misses_feature", &[]);
    let stdout = text(&output.stdout);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let expected = "warning: the crate depends on `ndarray` but vramguard's `ndarray` feature is \
                    off, so vramguard does not know its tensors: in [dependencies] of Cargo.toml \
                    write `vramguard = { path = \"../../../..\", features = [\"ndarray\"] }` (or \
                    pass --features ndarray to this check)";
    let on_stderr: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: the crate"))
        .collect();
    assert_eq!(on_stderr, [expected], "one line on stderr: {stderr}");
    assert!(
        stdout.lines().any(|l| l == expected),
        "and in the report: {stdout}"
    );
    // The command line turns it on: no warning.
    let output = check("misses_feature", &["--features", "ndarray"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning: the crate"), "{stderr}");
}

#[test]
fn usage_errors_exit_with_2_and_say_what_to_do() {
    let output = Command::new(env!("CARGO_BIN_EXE_cargo-vramguard"))
        .args(["vramguard", "check", "--attr", "everything", "x@1.0.0"])
        .output()
        .expect("the cargo-vramguard binary runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("`inference` or `batch_scope`"));
}
