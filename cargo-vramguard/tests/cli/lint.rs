//! `cargo vramguard lint` end to end on the fixture crates `tests/fixtures/lint_*`: the real
//! binary, nothing built (the fixtures depend on candle and burn, which these tests never
//! compile: the command reads manifests and source only).

use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn lint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cargo-vramguard"))
        .args(["vramguard", "lint"])
        .args(args)
        .output()
        .expect("the cargo-vramguard binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn candle() -> String {
    fixture("lint_candle").display().to_string()
}

/// The JSON lines of a run, each parsed.
fn messages(output: &Output) -> Vec<serde_json::Value> {
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

#[test]
fn the_candle_crate_gives_exactly_its_two_findings_at_their_lines() {
    let output = lint(&[&candle(), "--message-format", "short"]);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    let findings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(": warning["))
        .collect();
    assert_eq!(
        findings,
        [
            "src/lib.rs:14:9: warning[vramguard::graph_across_iterations]: `total` accumulates \
             `loss`, computed in each iteration",
            "src/lib.rs:15:9: warning[vramguard::accumulates_across_iterations]: \
             `features.push(feat)` keeps a value computed in each iteration",
        ]
    );
    assert!(
        text(&output.stderr).contains("2 findings in 2 functions (1 files)"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn the_clean_function_that_keeps_numbers_gives_none() {
    let output = lint(&[&candle(), "--fns", "evaluate_fixed", "--deny"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "");
    assert!(text(&output.stderr).contains("0 findings in 1 functions"));
}

#[test]
fn human_output_reads_as_rustc_writes_with_candle_spelling() {
    let output = lint(&[&candle()]);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains(
            "warning[vramguard::accumulates_across_iterations]: `features.push(feat)` keeps a \
             value computed in each iteration\n  --> src/lib.rs:15:9\n   |\n15 |         \
             features.push(feat);\n   |         ^^^^^^^^^^^^^^^^^^^ grows by one value per \
             iteration\n   |\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "   = help: keep a number (`feat.to_scalar::<f32>()?`) or a host copy \
             (`feat.to_vec1::<f32>()?`), or consume the value inside the iteration\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("   = help: accumulate a number (`loss.to_scalar::<f32>()?`)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("warning: `vramguard-fixture-lint-candle` (lib) generated 2 warnings"),
        "{stdout}"
    );
}

#[test]
fn json_output_is_cargo_messages_that_rust_analyzer_reads() {
    let output = lint(&[&candle(), "--message-format=json"]);
    assert_eq!(output.status.code(), Some(0));
    let messages = messages(&output);
    assert_eq!(messages.len(), 3, "two findings, then build-finished");
    let last = &messages[2];
    assert_eq!(last["reason"], "build-finished");
    assert_eq!(last["success"], true);
    // The same lines through the types rust-analyzer reads cargo's messages with.
    let typed: Vec<cargo_metadata::Message> =
        cargo_metadata::Message::parse_stream(output.stdout.as_slice())
            .collect::<Result<_, _>>()
            .expect("cargo messages");
    let diagnostics: Vec<&cargo_metadata::diagnostic::Diagnostic> = typed
        .iter()
        .filter_map(|m| match m {
            cargo_metadata::Message::CompilerMessage(m) => Some(&m.message),
            _ => None,
        })
        .collect();
    assert_eq!(diagnostics.len(), 2);
    assert!(diagnostics.iter().all(|d| d.level
        == cargo_metadata::diagnostic::DiagnosticLevel::Warning
        && d.spans.len() == 1
        && d.code
            .as_ref()
            .is_some_and(|c| c.code.starts_with("vramguard::"))));
    assert!(matches!(
        typed.last(),
        Some(cargo_metadata::Message::BuildFinished(finished)) if finished.success
    ));
    let manifest = fixture("lint_candle").join("Cargo.toml");
    let expected = [
        (
            "vramguard::graph_across_iterations",
            14,
            "total = (total + loss)?",
        ),
        (
            "vramguard::accumulates_across_iterations",
            15,
            "features.push(feat)",
        ),
    ];
    let source = std::fs::read_to_string(fixture("lint_candle").join("src/lib.rs"))
        .expect("the fixture's source");
    for (message, (code, line, covered)) in messages.iter().zip(expected) {
        assert_eq!(message["reason"], "compiler-message");
        assert!(
            message["package_id"]
                .as_str()
                .is_some_and(|id| id.contains("vramguard-fixture-lint-candle")),
            "{message}"
        );
        assert_eq!(
            message["manifest_path"].as_str().map(PathBuf::from),
            Some(manifest.clone())
        );
        assert_eq!(message["target"]["kind"][0], "lib");
        assert_eq!(message["target"]["name"], "vramguard_fixture_lint_candle");
        let diagnostic = &message["message"];
        assert_eq!(diagnostic["$message_type"], "diagnostic");
        assert_eq!(diagnostic["level"], "warning");
        assert_eq!(diagnostic["code"]["code"], code);
        assert!(diagnostic["code"]["explanation"].is_string());
        let spans = diagnostic["spans"].as_array().expect("spans");
        assert_eq!(spans.len(), 1);
        let span = &spans[0];
        assert_eq!(span["is_primary"], true);
        assert_eq!(span["file_name"], "src/lib.rs");
        assert_eq!(span["line_start"], line);
        assert_eq!(span["line_end"], line);
        assert_eq!(span["column_start"], 9);
        let (start, end) = (
            span["byte_start"].as_u64().expect("byte_start") as usize,
            span["byte_end"].as_u64().expect("byte_end") as usize,
        );
        assert_eq!(&source[start..end], covered);
        assert_eq!(
            span["column_end"].as_u64(),
            Some(9 + covered.len() as u64),
            "{span}"
        );
        assert_eq!(span["text"][0]["highlight_start"], 9);
        assert!(span["label"].is_string());
        assert!(span["expansion"].is_null());
        let children = diagnostic["children"].as_array().expect("children");
        assert!(
            children.iter().any(|c| c["level"] == "help"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("to_scalar::<f32>()?"))),
            "{diagnostic}"
        );
        assert!(diagnostic["rendered"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!("warning[{code}]"))));
    }
}

#[test]
fn all_targets_adds_the_tests_and_deny_makes_findings_errors() {
    let output = lint(&[
        &candle(),
        "--all-targets",
        "--deny",
        "--message-format=json",
    ]);
    assert_eq!(output.status.code(), Some(1), "a finding under --deny");
    let messages = messages(&output);
    let located: Vec<(String, u64, String)> = messages
        .iter()
        .filter(|m| m["reason"] == "compiler-message")
        .map(|m| {
            (
                m["message"]["spans"][0]["file_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                m["message"]["spans"][0]["line_start"]
                    .as_u64()
                    .unwrap_or_default(),
                m["message"]["level"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    assert_eq!(
        located,
        [
            ("src/lib.rs".to_string(), 14, "error".to_string()),
            ("src/lib.rs".to_string(), 15, "error".to_string()),
            ("tests/batches.rs".to_string(), 10, "error".to_string()),
        ]
    );
    let test_target = messages
        .iter()
        .find(|m| m["message"]["spans"][0]["file_name"] == "tests/batches.rs")
        .expect("the test's finding");
    assert_eq!(test_target["target"]["kind"][0], "test");
    assert_eq!(
        messages.last().map(|m| m["success"].clone()),
        Some(false.into())
    );
}

#[test]
fn burn_spelling_and_allows_on_functions_and_statements() {
    let output = lint(&[
        &fixture("lint_burn").display().to_string(),
        "--message-format",
        "short",
    ]);
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("src/")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("src/lib.rs:10:9: warning[vramguard::graph_across_iterations]"));
    assert!(
        lines[1].starts_with(
            "src/lib.rs:37:28: warning: unknown vramguard lint `graph_accross_iterations`; did \
             you mean `graph_across_iterations`?"
        ),
        "{stdout}"
    );
    let human = text(&lint(&[&fixture("lint_burn").display().to_string()]).stdout);
    assert!(
        human.contains("= help: accumulate a number (`loss.into_scalar()`) or a detached value (`loss.detach()`)"),
        "{human}"
    );
}

#[test]
fn usage_and_io_errors_exit_2() {
    for (args, needle) in [
        (vec!["--message-format", "xml"], "`--message-format xml`"),
        (vec!["/no/such/dir"], "neither a directory"),
    ] {
        let output = lint(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).contains(needle),
            "{}",
            text(&output.stderr)
        );
    }
    let empty = std::env::temp_dir().join(format!("vramguard-lint-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).expect("a temporary directory");
    let output = lint(&[&empty.display().to_string()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("has no Cargo.toml"));
    let _ = std::fs::remove_dir(&empty);
    let help = lint(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("cargo vramguard lint [PATH] [OPTIONS]"));
}

#[test]
fn a_virtual_workspace_lints_every_member() {
    let root = std::env::temp_dir().join(format!("vramguard-lint-ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let write = |rel: &str, text: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dirs");
        std::fs::write(path, text).expect("write");
    };
    write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"a\", \"b\"]\nresolver = \"2\"\n",
    );
    for member in ["a", "b"] {
        write(
            &format!("{member}/Cargo.toml"),
            &format!("[package]\nname = \"{member}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        );
        write(
            &format!("{member}/src/lib.rs"),
            "pub fn run(xs: &[f32]) -> usize {\n    let mut kept = Vec::new();\n    for x in xs {\n        kept.push(model(x));\n    }\n    kept.len()\n}\npub struct Tensor(Vec<f32>);\nfn model(x: &f32) -> Tensor { Tensor(vec![*x; 1024]) }\n",
        );
    }
    let output = lint(&[&root.display().to_string(), "--message-format", "short"]);
    let stdout = text(&output.stdout);
    let findings: Vec<&str> = stdout.lines().filter(|l| l.contains("warning[")).collect();
    assert_eq!(
        findings,
        [
            "a/src/lib.rs:4:9: warning[vramguard::accumulates_across_iterations]: `kept.push(model(x))` keeps a value computed in each iteration",
            "b/src/lib.rs:4:9: warning[vramguard::accumulates_across_iterations]: `kept.push(model(x))` keeps a value computed in each iteration",
        ],
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(text(&output.stderr).contains("of a, b"));
    let _ = std::fs::remove_dir_all(&root);
}
