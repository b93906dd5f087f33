//! `cargo vramguard apply` and `measure` end to end on `tests/fixtures/adopt` (a small model
//! on ndarray): the real binary and real cargo runs, on a copy of the fixture committed to a
//! git repository of its own. The builds share the target directory of `end_to_end.rs`, so
//! vramguard and ndarray build once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn base() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vramguard-check")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args([
            "-c",
            "user.name=test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// A copy of the fixture in its own git repository, its vramguard path made absolute.
fn fixture_copy(case: &str) -> PathBuf {
    let dir = base().join("adopt").join(case);
    let _ = std::fs::remove_dir_all(&dir);
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/adopt");
    copy_dir(&source, &dir);
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("the fixture's manifest");
    let root = std::fs::canonicalize(workspace_root()).expect("the workspace root");
    std::fs::write(
        &manifest,
        text.replace("../../../..", &root.display().to_string()),
    )
    .expect("the copy's manifest is writable");
    git(&dir, &["init", "-q"]);
    commit_all(&dir, "the fixture");
    dir
}

fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the copy");
    for entry in std::fs::read_dir(from).expect("read the fixture") {
        let entry = entry.expect("a directory entry");
        let dest = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy a file");
        }
    }
}

/// Runs `cargo vramguard ARGS` in `dir`, with a work directory of the case's own and the
/// shared target directory (for the copy and for the crate's own builds).
fn tool(dir: &Path, case: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-vramguard"))
        .arg("vramguard")
        .args(args)
        .arg("--work-dir")
        .arg(base().join("adopt-work").join(case))
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", base().join("target"))
        .output()
        .expect("the cargo-vramguard binary runs")
}

#[test]
fn a_dry_run_prints_the_diff_and_a_dirty_crate_is_refused() {
    let dir = fixture_copy("dry-run");
    let output = tool(
        &dir,
        "dry-run",
        &["apply", "--fns", "forward*", "--track", "--dry-run"],
    );
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    for hunk in [
        "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -29,6 +29,7 @@\n     }\n \n     /// Every intermediate is an owned array: plain, all of them live until the return.\n+    #[vramguard::inference]\n     pub fn forward(&self, x: &Array2<f32>) -> Array2<f32> {\n",
        "/// Needs `#[inference(keep(x))]`: `r` borrows `x` through `pick`.\n+#[vramguard::inference(keep(x))]\n pub fn forward_picked(",
        "--- a/src/main.rs\n+++ b/src/main.rs\n@@ -2,6 +2,9 @@\n //! heap peak on stderr (`tests/adopt.rs` measures by hand with it; the stdout stays the same).\n use vramguard_fixture_adopt::{input, Mlp};\n \n+#[global_allocator]\n+static ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();\n+\n fn main() {\n",
        "default-features = false }\n+vramguard = { path = ",
        "default-features = false, features = [\"ndarray\"] }\n",
        "dry run: nothing written; 3 files would change\n",
    ] {
        assert!(stdout.contains(hunk), "missing:\n{hunk}\nin:\n{stdout}");
    }
    assert_eq!(git(&dir, &["status", "--porcelain"]), "", "nothing written");

    std::fs::write(dir.join("src/extra.rs"), "// uncommitted\n").expect("write");
    let output = tool(&dir, "dry-run", &["apply", "--fns", "forward*"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("has uncommitted changes"), "{stderr}");
    assert!(stderr.contains("* src/extra.rs (untracked)"), "{stderr}");
    assert!(stderr.contains("pass `--allow-dirty`"), "{stderr}");
    assert_eq!(
        git(&dir, &["status", "--porcelain"]),
        "?? src/extra.rs\n",
        "nothing written"
    );
}

/// The program's own peak, printed by the fixture's `main` on stderr: the measurement by hand.
fn peak_by_hand(dir: &Path) -> u64 {
    // A newer root file makes cargo build this binary again, not reuse the one another copy of
    // the same package left under `target/debug/` (see measure.rs).
    let main = std::fs::File::options()
        .append(true)
        .open(dir.join("src/main.rs"))
        .expect("open main.rs");
    main.set_modified(std::time::SystemTime::now())
        .expect("touch main.rs");
    let output = Command::new(env!("CARGO"))
        .args(["run", "-q", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", base().join("target"))
        .env("ADOPT_FIXTURE_PEAK", "1")
        .output()
        .expect("cargo run");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak ")?.parse().ok())
        .unwrap_or_else(|| panic!("no peak line: {stderr}"))
}

#[test]
fn apply_writes_what_compiles_names_what_does_not_and_measure_agrees_with_a_hand_measurement() {
    let dir = fixture_copy("apply");
    let output = tool(
        &dir,
        "apply",
        &["apply", "--fns", "forward*", "--track", "--test"],
    );
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    for line in [
        "cargo vramguard apply: vramguard-fixture-adopt 0.1.0, #[inference] on functions matching `forward*`\n",
        "annotated: 2 functions\n  src/lib.rs:32  Mlp::forward\n  src/lib.rs:60  forward_picked  #[vramguard::inference(keep(x))] (the escape hatch the check verified)\n",
        "left untouched: 1 function (nothing makes it compile with the attribute)\n  src/lib.rs:79  forward_and_backward\n      error[deprecated]: use of deprecated function `forward_and_backward::vramguard::backward_in_inference`: `.backward()` in `forward_and_backward`",
        "Cargo.toml: [dependencies] vramguard: feature `ndarray` added\n",
        "--track: src/main.rs (bin `vramguard-fixture-adopt`): the TrackingAllocator line added\n",
        "wrote 3 files: Cargo.toml, src/lib.rs, src/main.rs\n",
        "cargo build: ok\n",
        "cargo test: ok\n",
    ] {
        assert!(stdout.contains(line), "missing:\n{line}\nin:\n{stdout}");
    }
    let lib = std::fs::read_to_string(dir.join("src/lib.rs")).expect("lib.rs");
    let untouched = "/// lint's warning an error, so nothing makes this function compile with the attribute.\npub fn forward_and_backward(";
    assert!(lib.contains(untouched), "{lib}");
    let diff = git(&dir, &["diff", "--stat"]);
    assert!(
        diff.contains("src/lib.rs  | 2 ++"),
        "two lines added: {diff}"
    );
    assert!(diff.contains("src/main.rs | 3 +++"), "{diff}");
    assert!(
        diff.contains("Cargo.toml  | 2 +-"),
        "one line changed: {diff}"
    );

    // Twice: nothing changes.
    commit_all(&dir, "applied");
    let output = tool(&dir, "apply", &["apply", "--fns", "forward*", "--track"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    assert!(
        stdout.contains("nothing to change: the crate already has what apply writes\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("forward_and_backward"),
        "still named: {stdout}"
    );
    assert_eq!(git(&dir, &["status", "--porcelain"]), "", "nothing written");

    // Measured by the tool.
    let output = tool(
        &dir,
        "apply",
        &[
            "measure",
            "--bin",
            "vramguard-fixture-adopt",
            "--json",
            "--runs",
            "1",
        ],
    );
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["stdout_identical"], true, "{stdout}");
    assert_eq!(report["annotation_source"], "as_written", "{stdout}");
    assert_eq!(
        report["annotated_functions"],
        serde_json::json!(["Mlp::forward", "forward_picked"]),
        "{stdout}"
    );
    let plain = report["plain_peak_bytes"].as_u64().expect("plain peak");
    let annotated = report["annotated_peak_bytes"]
        .as_u64()
        .expect("annotated peak");
    assert!(annotated < plain, "{stdout}");
    assert!(
        report["time_ratio"].as_f64().is_some_and(|r| r > 0.0),
        "{stdout}"
    );
    assert_eq!(report["census_peak_bytes"], annotated, "{stdout}");
    let groups = report["largest_at_peak"].as_array().expect("groups");
    assert_eq!(groups[0]["label"], "forward", "{stdout}");
    // The model's three weight matrices, of 64 × 256, 256 × 256 and 256 × 8 f32s.
    for size in [64 * 256 * 4, 256 * 256 * 4, 256 * 8 * 4] {
        assert!(
            groups
                .iter()
                .any(|g| g["label"] == "weights" && g["size"] == size && g["count"] == 1),
            "{size}: {stdout}"
        );
    }
    let sum: u64 = groups.iter().filter_map(|g| g["bytes"].as_u64()).sum();
    assert_eq!(sum, annotated, "the groups add up to the peak: {stdout}");

    // Measured by hand: the same program built both ways, with the tracking allocator that
    // `--track` installed, its attributes removed by hand in a second copy.
    let annotated_by_hand = peak_by_hand(&dir);
    let plain_dir = base().join("adopt").join("apply-plain");
    let _ = std::fs::remove_dir_all(&plain_dir);
    copy_dir(&dir, &plain_dir);
    let _ = std::fs::remove_dir_all(plain_dir.join(".git"));
    let lib = std::fs::read_to_string(plain_dir.join("src/lib.rs")).expect("lib.rs");
    let plain_lib: String = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("#[vramguard::inference"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        lib.lines().count() - plain_lib.lines().count(),
        2,
        "the two attribute lines"
    );
    std::fs::write(plain_dir.join("src/lib.rs"), plain_lib).expect("write lib.rs");
    let plain_by_hand = peak_by_hand(&plain_dir);
    let by_hand = annotated_by_hand as f64 / plain_by_hand as f64;
    let measured = report["peak_ratio"].as_f64().expect("peak_ratio");
    assert!(
        (measured - by_hand).abs() <= 0.01,
        "measure: {measured} ({annotated} / {plain}); by hand: {by_hand} \
         ({annotated_by_hand} / {plain_by_hand})"
    );
}
