//! The command line: `cargo vramguard check [OPTIONS] <CRATE>` parsed into [`CheckOptions`].
//! Owns the usage text and the validation of every argument; runs nothing. (`lint`'s own
//! arguments are `lint::options`'.)

use std::path::PathBuf;

use crate::error::{Error, Result};

/// The usage text printed by `--help` and referred to by usage errors.
pub(crate) const USAGE: &str = "\
cargo vramguard check: where would #[vramguard::inference] break this crate?

Copies the crate, puts the attribute on every function with a body, runs `cargo check`,
takes the attribute off the functions that fail, and repeats until the crate builds. Prints
`M/N functions compile`, then each failure with its first error and the escape hatch that
fixes it.

USAGE:
    cargo vramguard check [OPTIONS] <CRATE>
    cargo vramguard lint [PATH] [OPTIONS]   the memory lints over a crate, no build
                                            (`cargo vramguard lint --help`)

The other commands: `cargo vramguard apply --help` (write the result into the crate),
`cargo vramguard measure --help` (a program's heap peak with and without the attribute).

ARGS:
    <CRATE>    a crate directory (with a Cargo.toml), or NAME@VERSION from crates.io

OPTIONS:
    --attr <inference|batch_scope>  the attribute to try [default: inference]; batch_scope goes
                                    only on functions that contain a loop
    --fns <GLOB>                    only functions whose name or `Type::name` matches
                                    (`*` and `?`), e.g. --fns 'forward*'
    --features <F,..>               features of the vramguard facade (e.g. candle, ndarray),
                                    added to the `features` (and `default-features`) the
                                    crate declares for vramguard; a tensor library the crate
                                    uses whose feature stays off is a warning
    --crate-features <F,..>         features of the checked crate
    --vramguard-path <DIR>          the vramguard facade to use [default: the workspace this
                                    tool was built from; installed from a registry: the
                                    vramguard version the crate declares, else this tool's]
    --test                          also annotate tests/ and examples/, check all targets, and
                                    run the crate's tests annotated and plain
    --skip-test <NAME>              with --test: skip tests whose name contains NAME (repeat)
    --json                          print one JSON object instead of the report
    --work-dir <DIR>                where the copy goes [default: $TMPDIR/cargo-vramguard]
    --target-dir <DIR>              cargo's target directory [default: $CARGO_TARGET_DIR, else
                                    <work-dir>/target, shared by every checked crate]
    --max-rounds <N>                at most N cargo check rounds [default: 10]
    --offline                       pass --offline to cargo
    -h, --help                      print this text

EXIT CODE:
    0 every annotated function compiles (and, with --test, the tests give the same results)
    1 some functions do not compile (or tests differ)
    2 usage or I/O error, or the crate does not build even without the attribute
";

/// The attribute the check tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Attr {
    /// `#[vramguard::inference]`: every function with a body.
    Inference,
    /// `#[vramguard::batch_scope]`: functions that contain a loop.
    BatchScope,
}

impl Attr {
    /// The attribute's name as written after `vramguard::`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Attr::Inference => "inference",
            Attr::BatchScope => "batch_scope",
        }
    }
}

/// Where the crate to check comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CrateSource {
    /// A directory containing `Cargo.toml`.
    Path(PathBuf),
    /// `NAME@VERSION` from crates.io.
    Registry {
        /// Crate name.
        name: String,
        /// Exact version.
        version: String,
    },
}

/// Everything `check` needs to know, validated.
#[derive(Clone, Debug)]
pub(crate) struct CheckOptions {
    /// The crate to check.
    pub source: CrateSource,
    /// The attribute to try.
    pub attr: Attr,
    /// Only functions matching this pattern.
    pub fns: Option<glob::Pattern>,
    /// Features of the vramguard facade from `--features` (the crate's own are added to them).
    pub features: Vec<String>,
    /// Features of the checked crate.
    pub crate_features: Vec<String>,
    /// The vramguard facade's directory; `None`: vramguard from the registry (see
    /// [`vramguard_path`]).
    pub vramguard_path: Option<PathBuf>,
    /// Also tests and examples, and run the tests.
    pub test: bool,
    /// Test name filters to skip.
    pub skip_tests: Vec<String>,
    /// Print JSON.
    pub json: bool,
    /// The work directory.
    pub work_dir: PathBuf,
    /// Cargo's target directory.
    pub target_dir: PathBuf,
    /// Bound on cargo check rounds.
    pub max_rounds: usize,
    /// Pass `--offline` to cargo.
    pub offline: bool,
    /// The crate's `Cargo.toml` as `apply` is about to write it, used instead of the file
    /// (never set from the command line).
    pub manifest: Option<String>,
}

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    /// Print the usage.
    Help,
    /// Run a check.
    Check(Box<CheckOptions>),
    /// `cargo vramguard lint`.
    Lint(crate::lint::options::LintCommand),
}

/// The facade this binary was built from: the workspace root above this crate, when it is
/// there. A tool installed from a registry was built from its package alone: `None`, and the
/// copies take vramguard from the registry.
fn default_vramguard_path() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).ok()?;
    let doc: toml_edit::DocumentMut = manifest.parse().ok()?;
    let name = doc.get("package")?.get("name")?.as_str()?;
    (name == "vramguard").then_some(root)
}

/// `--vramguard-path` made absolute and checked, else [`default_vramguard_path`].
pub(crate) fn vramguard_path(given: Option<PathBuf>) -> Result<Option<PathBuf>> {
    let Some(given) = given else {
        return default_vramguard_path()
            .map(|path| absolute(&path))
            .transpose();
    };
    let path = absolute(&given)?;
    if !path.join("Cargo.toml").is_file() {
        return Err(Error::Usage(format!(
            "`{}` has no Cargo.toml; `--vramguard-path` takes the vramguard workspace root \
             (the directory of the `vramguard` facade package)",
            path.display()
        )));
    }
    Ok(Some(path))
}

/// Parses the arguments after the program name (`cargo` passes `vramguard` first; it is skipped).
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Command> {
    let mut args = args.into_iter().peekable();
    if args.peek().map(String::as_str) == Some("vramguard") {
        args.next();
    }
    match args.next().as_deref() {
        Some("check") => {}
        Some("lint") => return crate::lint::options::parse(args).map(Command::Lint),
        Some("-h" | "--help" | "help") | None => return Ok(Command::Help),
        Some(other) => {
            return Err(Error::Usage(format!(
                "unknown command `{other}`; the commands are `cargo vramguard check <CRATE>`, \
                 `cargo vramguard lint`, `cargo vramguard apply` and `cargo vramguard measure`"
            )))
        }
    }
    let mut crate_arg: Option<String> = None;
    let mut attr = Attr::Inference;
    let mut fns = None;
    let mut features = Vec::new();
    let mut crate_features = Vec::new();
    let mut vramguard_path = None;
    let mut test = false;
    let mut skip_tests = Vec::new();
    let mut json = false;
    let mut work_dir = None;
    let mut target_dir = None;
    let mut max_rounds = 10;
    let mut offline = false;
    while let Some(arg) = args.next() {
        // `--name=value` and `--name value` are both accepted.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |what: &str| -> Result<String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| Error::Usage(format!("`{name}` needs a value: `{name} {what}`")))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--attr" => {
                attr = match value("inference|batch_scope")?.as_str() {
                    "inference" => Attr::Inference,
                    "batch_scope" => Attr::BatchScope,
                    other => {
                        return Err(Error::Usage(format!(
                            "`--attr {other}`: the attribute is `inference` or `batch_scope`"
                        )))
                    }
                }
            }
            "--fns" => {
                let text = value("GLOB")?;
                fns = Some(glob::Pattern::new(&text).map_err(|e| {
                    Error::Usage(format!("`--fns {text}` is not a valid pattern: {e}"))
                })?);
            }
            "--features" => features.extend(split_list(&value("F,..")?)),
            "--crate-features" => crate_features.extend(split_list(&value("F,..")?)),
            "--vramguard-path" => vramguard_path = Some(PathBuf::from(value("DIR")?)),
            "--test" | "--tests" => test = true,
            "--skip-test" => skip_tests.push(value("NAME")?),
            "--json" => json = true,
            "--work-dir" => work_dir = Some(PathBuf::from(value("DIR")?)),
            "--target-dir" => target_dir = Some(PathBuf::from(value("DIR")?)),
            "--max-rounds" => {
                let text = value("N")?;
                max_rounds = match text.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => {
                        return Err(Error::Usage(format!(
                            "`--max-rounds {text}`: give a whole number of rounds, 1 or more"
                        )))
                    }
                };
            }
            "--offline" => offline = true,
            flag if flag.starts_with('-') => {
                return Err(Error::Usage(format!("unknown option `{flag}`")));
            }
            _ if crate_arg.is_some() => {
                return Err(Error::Usage(format!(
                    "one crate per run: `{arg}` comes after `{}`",
                    crate_arg.as_deref().unwrap_or_default()
                )));
            }
            _ => crate_arg = Some(arg),
        }
    }
    let crate_arg = crate_arg.ok_or_else(|| {
        Error::Usage(
            "name the crate: `cargo vramguard check path/to/crate` or \
             `cargo vramguard check NAME@VERSION`"
                .to_string(),
        )
    })?;
    let source = crate_source(&crate_arg)?;
    let work_dir = work_dir.unwrap_or_else(|| std::env::temp_dir().join("cargo-vramguard"));
    let work_dir = absolute(&work_dir)?;
    let target_dir =
        match target_dir.or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)) {
            Some(dir) => absolute(&dir)?,
            None => work_dir.join("target"),
        };
    let vramguard_path = self::vramguard_path(vramguard_path)?;
    if !test && !skip_tests.is_empty() {
        return Err(Error::Usage(
            "`--skip-test` only applies with `--test`".to_string(),
        ));
    }
    Ok(Command::Check(Box::new(CheckOptions {
        source,
        attr,
        fns,
        features,
        crate_features,
        vramguard_path,
        test,
        skip_tests,
        json,
        work_dir,
        target_dir,
        max_rounds,
        offline,
        manifest: None,
    })))
}

/// `a,b c` → `["a", "b", "c"]`.
fn split_list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// A directory, or `NAME@VERSION` when no such directory exists.
pub(crate) fn crate_source(arg: &str) -> Result<CrateSource> {
    let path = PathBuf::from(arg);
    if path.exists() {
        if !path.join("Cargo.toml").is_file() {
            return Err(Error::Usage(format!(
                "`{arg}` has no Cargo.toml; give the directory of one package (not a workspace \
                 without a package), or NAME@VERSION"
            )));
        }
        return Ok(CrateSource::Path(absolute(&path)?));
    }
    match arg.split_once('@') {
        Some((name, version))
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && version.chars().next().is_some_and(|c| c.is_ascii_digit()) =>
        {
            Ok(CrateSource::Registry {
                name: name.to_string(),
                version: version.to_string(),
            })
        }
        _ => Err(Error::Usage(format!(
            "`{arg}` is neither a directory nor NAME@VERSION (e.g. candle-nn@0.11.1)"
        ))),
    }
}

/// `path` made absolute against the current directory (it need not exist yet).
pub(crate) fn absolute(path: &std::path::Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(Error::io("resolve", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn registry_crate_and_options_parse_after_cargo_subcommand_name() {
        let Ok(Command::Check(options)) = parse_strs(&[
            "vramguard",
            "check",
            "candle-nn@0.11.1",
            "--features=candle",
            "--attr",
            "batch_scope",
            "--fns",
            "forward*",
        ]) else {
            panic!("expected a check command");
        };
        assert_eq!(
            options.source,
            CrateSource::Registry {
                name: "candle-nn".into(),
                version: "0.11.1".into()
            }
        );
        assert_eq!(options.features, ["candle"]);
        assert_eq!(options.attr, Attr::BatchScope);
        assert!(options.fns.is_some_and(|p| p.matches("forward_t")));
    }

    #[test]
    fn bad_arguments_are_usage_errors_naming_the_argument() {
        for (args, needle) in [
            (&["check", "x@1", "--attr", "foo"][..], "--attr foo"),
            (&["check", "x@1", "--max-rounds", "0"][..], "--max-rounds 0"),
            (&["check", "not a crate"][..], "neither a directory"),
            (&["check"][..], "name the crate"),
            (&["check", "x@1", "--bogus"][..], "--bogus"),
            (&["frobnicate"][..], "frobnicate"),
        ] {
            match parse_strs(args) {
                Err(Error::Usage(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{args:?}: expected a usage error, got {other:?}"),
            }
        }
    }
}
