//! The debug-build notices at drop points (see the docs of `vramguard::DropAtLastUse`), read from
//! the stderr of a real program: `tests/notices_fixture`, which uses candle-core 0.11 under
//! `#[inference]` and `#[batch_scope]`. It is built three ways, in this workspace's target
//! directory (candle-core builds once): vramguard's `candle` feature off, on, and off with
//! vramguard built without debug assertions (as in a release build; the rest of the program
//! keeps them, so only vramguard rebuilds). A standalone crate,
//! because in this workspace a `--features candle` build would unify the feature on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The fixture's three builds.
struct Builds {
    candle_off: PathBuf,
    candle_on: PathBuf,
    no_debug_assertions: PathBuf,
}

const FIXTURE_BIN: &str = "vramguard-notices-fixture";

fn cargo_build(target_dir: &Path, args: &[&str], copy_to: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/notices_fixture/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .arg("build")
        .arg("--locked")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .args(args)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "building the fixture with {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Copied out: the next build of the same binary replaces it.
    let built = target_dir
        .join("debug")
        .join(format!("{FIXTURE_BIN}{}", std::env::consts::EXE_SUFFIX));
    std::fs::copy(&built, copy_to).expect("the fixture binary copies");
    copy_to.to_path_buf()
}

fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let target_dir = tmp
            .parent()
            .expect("CARGO_TARGET_TMPDIR is inside the target dir");
        let out = tmp.join("debug_notices");
        std::fs::create_dir_all(&out).expect("the output directory is created");
        let bin = |name: &str| out.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
        Builds {
            candle_off: cargo_build(target_dir, &[], &bin("candle_off")),
            candle_on: cargo_build(
                target_dir,
                &["--features", "vramguard-candle"],
                &bin("candle_on"),
            ),
            // Only vramguard (and the fixture) rebuilt, as a release build would have it.
            no_debug_assertions: cargo_build(
                target_dir,
                &[
                    "--config",
                    "profile.dev.package.vramguard.debug-assertions=false",
                ],
                &bin("no_debug_assertions"),
            ),
        }
    })
}

/// What one scenario printed: stdout, and its vramguard notice lines.
struct Run {
    stdout: String,
    notices: Vec<String>,
}

impl Run {
    fn count(&self, text: &str) -> usize {
        self.notices.iter().filter(|n| n.contains(text)).count()
    }
}

fn run(binary: &Path, scenario: &str) -> Run {
    let output = Command::new(binary)
        .arg(scenario)
        .output()
        .expect("the fixture runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{scenario}: {stderr}");
    Run {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        notices: stderr
            .lines()
            .filter(|line| line.starts_with("warning: vramguard:"))
            .map(str::to_owned)
            .collect(),
    }
}

const GRAPH_NOTICE: &str = "records candle's graph";

#[test]
fn feature_off_kept_candle_tensors_are_noticed_once_per_type_with_the_cargo_toml_line() {
    let run = run(&builds().candle_off, "inference-plain");
    let cargo_toml = format!(
        "vramguard = {{ version = \"{}\", features = [\"candle\"] }}",
        env!("CARGO_PKG_VERSION")
    );
    for type_name in [
        "`candle_core::tensor::Tensor` is kept",
        "`alloc::vec::Vec<candle_core::tensor::Tensor>` is kept",
    ] {
        // Reached at several drop points, in two calls: one line.
        assert_eq!(run.count(type_name), 1, "{type_name}: {:#?}", run.notices);
    }
    assert!(
        run.notices.iter().all(|n| n.contains(&cargo_toml)),
        "{:#?}",
        run.notices
    );
    // Nothing for the kept `Rc`, the reference, or vramguard's own (dropped) tensor.
    assert_eq!(run.notices.len(), 2, "{:#?}", run.notices);
}

#[test]
fn feature_on_candle_tensors_are_dropped_at_last_use_without_a_notice_and_compute_the_same() {
    let on = run(&builds().candle_on, "inference-plain");
    assert_eq!(on.notices, Vec::<String>::new());
    let off = run(&builds().candle_off, "inference-plain");
    assert_eq!(on.stdout, off.stdout);
}

#[test]
fn vramguard_without_debug_assertions_prints_no_notice() {
    let run = run(&builds().no_debug_assertions, "inference-plain");
    assert_eq!(run.notices, Vec::<String>::new());
}

#[test]
fn a_var_tensor_dropped_at_last_use_under_inference_is_noticed_once_with_what_to_do() {
    let run = run(&builds().candle_on, "inference-var");
    assert_eq!(run.count(GRAPH_NOTICE), 1, "{:#?}", run.notices);
    assert_eq!(run.count("detach()"), 1, "{:#?}", run.notices);
    assert_eq!(run.notices.len(), 1, "{:#?}", run.notices);
}

#[test]
fn detached_weights_under_inference_are_not_noticed() {
    let run = run(&builds().candle_on, "inference-detached");
    assert_eq!(run.notices, Vec::<String>::new());
}

#[test]
fn var_tensors_in_a_batch_scope_training_loop_with_grad_on_are_not_noticed() {
    let run = run(&builds().candle_on, "train-var");
    assert_eq!(run.count(GRAPH_NOTICE), 0, "{:#?}", run.notices);
}
