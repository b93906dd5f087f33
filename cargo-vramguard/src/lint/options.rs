//! The command line of `cargo vramguard lint [PATH] [OPTIONS]`, parsed into [`LintOptions`]: its
//! usage text and the validation of every argument. Runs nothing.

use crate::cli::CrateSource;
use crate::error::{Error, Result};

/// The usage text of `cargo vramguard lint --help`.
pub(crate) const USAGE: &str = "\
cargo vramguard lint: the memory lints over every function of a crate, as clippy runs

Reads the source of the crate's targets (no build, no vramguard dependency needed) and
reports, with or without #[vramguard::inference] or #[vramguard::batch_scope] on a function,
what keeps memory alive: collections that grow with every iteration, running totals that
chain autograd graphs, in-place ops on activations, empty_cache() on live values, evaluation
with grad recording on. `#[vramguard::allow(name)]` on a function or a statement silences a
lint there.

USAGE:
    cargo vramguard lint [PATH] [OPTIONS]

ARGS:
    [PATH]    a package directory (with a Cargo.toml) [default: .]; a virtual workspace's
              root lints every member; NAME@VERSION lints a crate from crates.io

OPTIONS:
    --fns <GLOB>                  only functions whose name or `Type::name` matches (`*`, `?`)
    --all-targets                 also tests, examples and benches, and #[cfg(test)] code
    --deny                        report findings as errors and exit 1 if there is one
    --message-format <FORMAT>     human (default), short (one line each), or json (cargo's
                                  `compiler-message` lines, for editors: see docs/lints.md)
    --offline                     with NAME@VERSION: pass --offline to cargo
    -h, --help                    print this text

EXIT CODE:
    0 no finding, or findings reported as warnings
    1 with --deny: at least one finding
    2 usage or I/O error
";

/// How findings are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MessageFormat {
    /// As rustc writes a warning: headline, location, code with carets, notes and help.
    Human,
    /// One line per finding: `file:line:col: warning[vramguard::name]: sentence`.
    Short,
    /// Cargo's JSON messages (`compiler-message`, then `build-finished`), one per line.
    Json,
}

/// Everything `lint` needs to know, validated.
#[derive(Clone, Debug)]
pub(crate) struct LintOptions {
    /// The crate (or workspace) to lint.
    pub source: CrateSource,
    /// Only functions matching this pattern.
    pub fns: Option<glob::Pattern>,
    /// Also tests, examples, benches and `#[cfg(test)]` code.
    pub all_targets: bool,
    /// Findings are errors; exit 1 when there is one.
    pub deny: bool,
    /// How findings are written.
    pub format: MessageFormat,
    /// `--offline` for fetching NAME@VERSION.
    pub offline: bool,
}

/// What `lint`'s command line asks for.
#[derive(Debug)]
pub(crate) enum LintCommand {
    /// Print the usage.
    Help,
    /// Lint.
    Run(LintOptions),
}

/// Parses the arguments after `lint`.
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<LintCommand> {
    let mut args = args.into_iter();
    let mut path: Option<String> = None;
    let mut fns = None;
    let mut all_targets = false;
    let mut deny = false;
    let mut format = MessageFormat::Human;
    let mut offline = false;
    while let Some(arg) = args.next() {
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
            "-h" | "--help" => return Ok(LintCommand::Help),
            "--fns" => {
                let text = value("GLOB")?;
                fns = Some(glob::Pattern::new(&text).map_err(|e| {
                    Error::Usage(format!("`--fns {text}` is not a valid pattern: {e}"))
                })?);
            }
            "--all-targets" => all_targets = true,
            "--deny" => deny = true,
            "--message-format" => {
                format = match value("human|short|json")?.as_str() {
                    "human" => MessageFormat::Human,
                    "short" => MessageFormat::Short,
                    "json" => MessageFormat::Json,
                    other => {
                        return Err(Error::Usage(format!(
                            "`--message-format {other}`: the format is `human`, `short` or `json`"
                        )))
                    }
                }
            }
            "--offline" => offline = true,
            flag if flag.starts_with('-') => {
                return Err(Error::Usage(format!(
                    "unknown option `{flag}` for `cargo vramguard lint`"
                )));
            }
            _ if path.is_some() => {
                return Err(Error::Usage(format!(
                    "one crate per run: `{arg}` comes after `{}`",
                    path.as_deref().unwrap_or_default()
                )));
            }
            _ => path = Some(arg),
        }
    }
    let source = match path {
        None => CrateSource::Path(
            std::env::current_dir().map_err(Error::io("read the current directory", "."))?,
        ),
        Some(arg) => crate::cli::crate_source(&arg)?,
    };
    Ok(LintCommand::Run(LintOptions {
        source,
        fns,
        all_targets,
        deny,
        format,
        offline,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<LintCommand> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn options_parse_in_both_spellings() {
        let Ok(LintCommand::Run(options)) = parse_strs(&[
            "candle-nn@0.11.1",
            "--message-format=json",
            "--fns",
            "forward*",
            "--deny",
            "--all-targets",
        ]) else {
            panic!("expected a lint command");
        };
        assert_eq!(
            options.source,
            CrateSource::Registry {
                name: "candle-nn".into(),
                version: "0.11.1".into()
            }
        );
        assert_eq!(options.format, MessageFormat::Json);
        assert!(options.deny && options.all_targets);
        assert!(options.fns.is_some_and(|p| p.matches("forward_t")));
        assert!(matches!(parse_strs(&["-h"]), Ok(LintCommand::Help)));
    }

    #[test]
    fn bad_arguments_are_usage_errors_naming_the_argument() {
        for (args, needle) in [
            (&["--message-format", "xml"][..], "--message-format xml"),
            (&["--fns"][..], "`--fns` needs a value"),
            (&["--bogus"][..], "--bogus"),
            (&["a@1", "b@2"][..], "one crate per run"),
            (&["not a crate"][..], "neither a directory"),
        ] {
            match parse_strs(args) {
                Err(Error::Usage(message)) => assert!(message.contains(needle), "{message}"),
                other => panic!("{args:?}: expected a usage error, got {other:?}"),
            }
        }
    }
}
