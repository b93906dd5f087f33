//! The command lines of `apply` and `measure`: the options they share with `check` (which
//! functions, which attribute, where the copy and its build go) parsed once, each command's
//! own flags handed back to it. Owns the argument loop and the shared [`CopyOptions`]; runs
//! nothing.

use std::path::PathBuf;

use crate::cli::{self, Attr, CrateSource};
use crate::error::{Error, Result};

/// The options `apply` and `measure` share with `check`: what the check's copy is made of.
#[derive(Debug, Clone)]
pub(crate) struct CopyOptions {
    /// The crate's directory (the current one by default).
    pub crate_dir: PathBuf,
    /// The attribute.
    pub attr: Attr,
    /// Only functions matching this pattern.
    pub fns: Option<glob::Pattern>,
    /// Features of the vramguard facade, added to those the crate declares.
    pub features: Vec<String>,
    /// Features of the crate itself.
    pub crate_features: Vec<String>,
    /// The vramguard workspace to build against (`None`: the registry's vramguard).
    pub vramguard_path: Option<PathBuf>,
    /// Whether `--vramguard-path` was given (then `apply` writes it into the manifest too).
    pub vramguard_path_given: bool,
    /// Where the copy goes.
    pub work_dir: PathBuf,
    /// Cargo's target directory for the copy.
    pub target_dir: PathBuf,
    /// Bound on the check's rounds.
    pub max_rounds: usize,
    /// Pass `--offline` to cargo.
    pub offline: bool,
}

impl CopyOptions {
    /// The check's options for this copy (`with_features`: more facade features, those the
    /// crate is about to get; `manifest`: its `Cargo.toml` as `apply` is about to write it).
    pub(crate) fn check_options(
        &self,
        with_features: &[String],
        manifest: Option<String>,
    ) -> cli::CheckOptions {
        let mut features = self.features.clone();
        for feature in with_features {
            if !features.contains(feature) {
                features.push(feature.clone());
            }
        }
        cli::CheckOptions {
            source: CrateSource::Path(self.crate_dir.clone()),
            attr: self.attr,
            fns: self.fns.clone(),
            features,
            crate_features: self.crate_features.clone(),
            vramguard_path: self.vramguard_path.clone(),
            test: false,
            skip_tests: Vec::new(),
            json: false,
            work_dir: self.work_dir.clone(),
            target_dir: self.target_dir.clone(),
            max_rounds: self.max_rounds,
            offline: self.offline,
            manifest,
        }
    }
}

/// The argument list of one command, consumed by [`parse`].
pub(crate) struct Args {
    items: std::collections::VecDeque<String>,
    /// What came after `--`.
    pub rest: Vec<String>,
}

impl Args {
    /// The value of a flag: its `=value`, else the next argument.
    pub(crate) fn value(
        &mut self,
        name: &str,
        inline: Option<String>,
        what: &str,
    ) -> Result<String> {
        inline
            .or_else(|| self.items.pop_front())
            .ok_or_else(|| Error::Usage(format!("`{name}` needs a value: `{name} {what}`")))
    }
}

/// Parses the shared options of `command` (`apply` or `measure`), calling `own` with every
/// other flag (its name, its `=value` when written so, and the arguments for its value);
/// `own` returns `false` for a flag the command does not know either.
pub(crate) fn parse(
    command: &str,
    args: impl IntoIterator<Item = String>,
    mut own: impl FnMut(&str, Option<String>, &mut Args) -> Result<bool>,
) -> Result<(CopyOptions, Vec<String>)> {
    let mut args = Args {
        items: args.into_iter().collect(),
        rest: Vec::new(),
    };
    let mut crate_dir: Option<PathBuf> = None;
    let mut attr = Attr::Inference;
    let mut fns = None;
    let mut features = Vec::new();
    let mut crate_features = Vec::new();
    let mut vramguard_path = None;
    let mut work_dir = None;
    let mut target_dir = None;
    let mut max_rounds = 10;
    let mut offline = false;
    while let Some(arg) = args.items.pop_front() {
        if arg == "--" {
            args.rest = args.items.drain(..).collect();
            break;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        match name.as_str() {
            "--attr" => {
                attr = match args.value(&name, inline, "inference|batch_scope")?.as_str() {
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
                let text = args.value(&name, inline, "GLOB")?;
                fns = Some(glob::Pattern::new(&text).map_err(|e| {
                    Error::Usage(format!("`--fns {text}` is not a valid pattern: {e}"))
                })?);
            }
            "--features" => features.extend(split_list(&args.value(&name, inline, "F,..")?)),
            "--crate-features" => {
                crate_features.extend(split_list(&args.value(&name, inline, "F,..")?))
            }
            "--vramguard-path" => {
                vramguard_path = Some(PathBuf::from(args.value(&name, inline, "DIR")?))
            }
            "--work-dir" => work_dir = Some(PathBuf::from(args.value(&name, inline, "DIR")?)),
            "--target-dir" => target_dir = Some(PathBuf::from(args.value(&name, inline, "DIR")?)),
            "--max-rounds" => {
                let text = args.value(&name, inline, "N")?;
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
                let known = own(&name, inline, &mut args)?;
                if !known {
                    return Err(Error::Usage(format!(
                        "unknown option `{flag}` for `cargo vramguard {command}`"
                    )));
                }
            }
            _ if crate_dir.is_some() => {
                return Err(Error::Usage(format!(
                    "one crate per run: `{arg}` comes after `{}`",
                    crate_dir
                        .as_deref()
                        .map(|d| d.display().to_string())
                        .unwrap_or_default()
                )));
            }
            _ => crate_dir = Some(PathBuf::from(arg)),
        }
    }
    let crate_dir = cli::absolute(&crate_dir.unwrap_or_else(|| PathBuf::from(".")))?;
    if !crate_dir.join("Cargo.toml").is_file() {
        return Err(Error::Usage(format!(
            "`{}` has no Cargo.toml: run `cargo vramguard {command}` in a crate's directory, or \
             name the directory",
            crate_dir.display()
        )));
    }
    let work_dir =
        cli::absolute(&work_dir.unwrap_or_else(|| std::env::temp_dir().join("cargo-vramguard")))?;
    let target_dir =
        match target_dir.or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from)) {
            Some(dir) => cli::absolute(&dir)?,
            None => work_dir.join("target"),
        };
    let vramguard_path_given = vramguard_path.is_some();
    let vramguard_path = cli::vramguard_path(vramguard_path)?;
    Ok((
        CopyOptions {
            crate_dir,
            attr,
            fns,
            features,
            crate_features,
            vramguard_path,
            vramguard_path_given,
            work_dir,
            target_dir,
            max_rounds,
            offline,
        },
        args.rest,
    ))
}

/// Whether `-h` or `--help` comes before any `--`.
pub(crate) fn asks_for_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
}

/// `a,b c` → `["a", "b", "c"]`.
fn split_list(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The options every command's usage lists the same way.
pub(crate) const SHARED_USAGE: &str = "\
    --fns <GLOB>                    only functions whose name or `Type::name` matches
                                    (`*` and `?`), e.g. --fns 'forward*'
    --attr <inference|batch_scope>  the attribute [default: inference]; batch_scope goes only
                                    on functions that contain a loop
    --features <F,..>               more features of the vramguard facade
    --crate-features <F,..>         features of the crate itself
    --vramguard-path <DIR>          build against this vramguard workspace [default: the one
                                    this tool was built from, else vramguard from the registry]
    --work-dir <DIR>                where the copy goes [default: $TMPDIR/cargo-vramguard]
    --target-dir <DIR>              the copy's target directory [default: $CARGO_TARGET_DIR,
                                    else <work-dir>/target]
    --max-rounds <N>                at most N cargo check rounds [default: 10]
    --offline                       pass --offline to cargo
";
