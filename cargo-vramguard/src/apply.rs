//! `cargo vramguard apply`: the check's result written into the crate itself. The attribute
//! goes on every function that compiles with it (in the form the check verified: bare, or with
//! its escape hatch), the `vramguard` dependency gets the feature of each tensor library the
//! crate uses, and with `--track` each binary gets the `TrackingAllocator` line. Only those
//! lines change (text insertion, toml_edit: no rustfmt); functions that compile with nothing
//! are left as they are and named. Like `cargo fix`, it refuses a crate with uncommitted
//! changes; `--dry-run` prints the unified diff instead of writing. It ends by building the
//! crate (and with `--test`, running its tests).
//!
//! Owns the command: its options, the edits of the crate's files and the summary. Which
//! functions compile is `check`'s; the dependency edit is `dependency`'s, the allocator line
//! `track`'s.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use crate::adopt_cli::{self, CopyOptions};
use crate::annotate::{Annotation, FnSite};
use crate::check::{self, Checked};
use crate::error::{Error, Result};
use crate::report::shorten;
use crate::track::{self, Allocator};
use crate::{dependency, targets, vcs};

/// The usage text of `cargo vramguard apply --help`.
pub(crate) const USAGE: &str = "\
cargo vramguard apply: write #[vramguard::inference] onto the functions that compile with it

Runs the check (`cargo vramguard check`) on a copy of the crate, then writes its result into
the crate: the attribute on every function that compiles with it (with the escape hatch the
check verified, when one was needed), the `vramguard` dependency with the feature of each
tensor library the crate uses, and with --track the TrackingAllocator line in each binary.
Only those lines change. Functions that compile with nothing are left untouched and named.
Ends by building the crate (with --test, by running its tests). Running it twice changes
nothing the second time.

USAGE:
    cargo vramguard apply [OPTIONS] [CRATE_DIR]

ARGS:
    [CRATE_DIR]    the crate's directory [default: the current directory]

OPTIONS:
    --track                         install vramguard::TrackingAllocator as the global
                                    allocator of each binary target (what `measure` and the
                                    heap statistics need)
    --dry-run                       print the unified diff of every change; write nothing
    --allow-dirty                   write even with uncommitted changes in the crate
    --allow-no-vcs                  write even if no git repository holds the crate
    --test                          after building, run the crate's tests (`cargo test`)

EXIT CODE:
    0 applied (or nothing to change), and the crate builds (and its tests pass)
    2 usage error, uncommitted changes, the check did not settle, or the build or the tests
      failed (what was written stays written: `git diff` shows it)
";

/// What `apply` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct ApplyOptions {
    /// The crate and the check's settings.
    pub copy: CopyOptions,
    /// Install the tracking allocator in each binary.
    pub track: bool,
    /// Print the diff; write nothing.
    pub dry_run: bool,
    /// What `vcs` lets through.
    pub allowed: vcs::Allowed,
    /// Run the tests at the end.
    pub test: bool,
}

/// Parses the arguments after `apply` (`None`: `--help`).
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<ApplyOptions>> {
    let args: Vec<String> = args.into_iter().collect();
    if adopt_cli::asks_for_help(&args) {
        return Ok(None);
    }
    let mut track = false;
    let mut dry_run = false;
    let mut allowed = vcs::Allowed::default();
    let mut test = false;
    let (copy, rest) = adopt_cli::parse("apply", args, |name, _, _| {
        match name {
            "--track" => track = true,
            "--dry-run" => dry_run = true,
            "--allow-dirty" => allowed.dirty = true,
            "--allow-no-vcs" => allowed.no_vcs = true,
            "--test" | "--tests" => test = true,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if let Some(extra) = rest.first() {
        return Err(Error::Usage(format!(
            "`apply` takes no arguments after `--` (got `{extra}`)"
        )));
    }
    Ok(Some(ApplyOptions {
        copy,
        track,
        dry_run,
        allowed,
        test,
    }))
}

/// The entry point: parses, applies, prints; exit code 0, or 2 on an error.
pub(crate) fn main(args: Vec<String>) -> ExitCode {
    let options = match parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}\nSHARED OPTIONS:\n{}", adopt_cli::SHARED_USAGE);
            return ExitCode::SUCCESS;
        }
        Err(error) => return crate::fail(&error),
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => crate::fail(&error),
    }
}

/// A function the attribute went on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Annotated {
    file: String,
    line: usize,
    name: String,
    /// The attribute as written.
    attr: String,
    /// Whether it needed an escape hatch (`keep`, `#[keep]`, `drops = false`).
    hatch: bool,
}

/// A function left as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Untouched {
    file: String,
    line: usize,
    name: String,
    why: String,
}

/// One file to change: its path relative to the crate, and its text before and after.
#[derive(Debug)]
struct FileEdit {
    rel: String,
    before: String,
    after: String,
}

/// Applies, or with `--dry-run` prints what would change.
pub(crate) fn run(options: &ApplyOptions) -> Result<()> {
    let dir = &options.copy.crate_dir;
    if !options.dry_run {
        vcs::ensure_clean(dir, options.allowed)?;
    }
    let manifest_path = dir.join("Cargo.toml");
    let manifest = read(&manifest_path)?;
    let explicit_path = options
        .copy
        .vramguard_path_given
        .then(|| options.copy.vramguard_path.clone())
        .flatten();
    let dependency =
        dependency::ensure_vramguard(&manifest, explicit_path.as_deref()).map_err(|detail| {
            Error::Manifest {
                path: manifest_path.clone(),
                detail,
            }
        })?;

    // The copy is the crate as apply leaves it: its dependency line, hence its features.
    let checked = check::run_detailed(
        &options
            .copy
            .check_options(&dependency.features, Some(dependency.text.clone())),
    )?;
    settled(&checked, options)?;
    let (annotated, untouched) = sort_decisions(&checked);

    let mut edits: Vec<FileEdit> = Vec::new();
    if dependency.text != manifest {
        edits.push(FileEdit {
            rel: "Cargo.toml".to_string(),
            before: manifest.clone(),
            after: dependency.text.clone(),
        });
    }
    for (index, file) in checked.files.iter().enumerate() {
        let sites: Vec<(&FnSite, &Annotation)> = checked
            .decisions
            .iter()
            .filter(|d| d.site.file == index)
            .filter_map(|d| Some((&d.site, d.annotation.as_ref()?)))
            .collect();
        if sites.is_empty() {
            continue;
        }
        let path = dir.join(&file.rel);
        let current = read(&path)?;
        if current != file.text {
            return Err(Error::Unsettled(format!(
                "{} changed while the check ran; run `cargo vramguard apply` again",
                path.display()
            )));
        }
        edits.push(FileEdit {
            rel: file.rel.clone(),
            before: current,
            after: render_for_user(&file.text, &sites),
        });
    }
    let mut notes = dependency.changes.clone();
    if options.track {
        track_binaries(dir, options.copy.offline, &mut edits, &mut notes)?;
    }

    print!(
        "{}",
        summary(&checked, options, &annotated, &untouched, &notes)
    );
    if options.dry_run {
        for edit in &edits {
            print!("{}", unified_diff(edit));
        }
        println!(
            "dry run: nothing written; {}",
            match edits.len() {
                0 => "nothing would change".to_string(),
                1 => "1 file would change".to_string(),
                n => format!("{n} files would change"),
            }
        );
        return Ok(());
    }
    for edit in &edits {
        let path = dir.join(&edit.rel);
        std::fs::write(&path, &edit.after).map_err(Error::io("write", &path))?;
    }
    if edits.is_empty() {
        println!("nothing to change: the crate already has what apply writes");
    } else {
        let names: Vec<&str> = edits.iter().map(|e| e.rel.as_str()).collect();
        println!("wrote {}: {}", count(edits.len(), "file"), names.join(", "));
    }
    build(options)
}

/// The check must have settled every function: otherwise what compiles is not known.
fn settled(checked: &Checked, options: &ApplyOptions) -> Result<()> {
    let outcome = &checked.outcome;
    if !outcome.converged {
        return Err(Error::Unsettled(format!(
            "the check stopped after {} rounds with errors left, so which functions compile is \
             not settled; nothing was written. Run again with a larger --max-rounds (now {})",
            outcome.rounds, options.copy.max_rounds
        )));
    }
    if let Some(error) = outcome.unmapped.first() {
        return Err(Error::Unsettled(format!(
            "the annotated copy has errors outside every annotated function (first: {}); \
             nothing was written. `cargo vramguard check {}` shows them",
            error.headline(),
            options.copy.crate_dir.display()
        )));
    }
    Ok(())
}

/// The functions the attribute goes on, and those left untouched with the reason.
fn sort_decisions(checked: &Checked) -> (Vec<Annotated>, Vec<Untouched>) {
    let mut annotated = Vec::new();
    let mut untouched = Vec::new();
    for decision in &checked.decisions {
        let site = &decision.site;
        let file = checked.files[site.file].rel.clone();
        let failure = checked
            .outcome
            .failures
            .iter()
            .find(|f| f.file == file && f.line == site.line);
        match &decision.annotation {
            Some(annotation) => annotated.push(Annotated {
                file,
                line: site.line,
                name: site.name.clone(),
                attr: user_attr(annotation),
                hatch: failure.is_some(),
            }),
            None => {
                let why = match failure {
                    Some(failure) => {
                        let error = failure
                            .error
                            .as_ref()
                            .map(|e| format!("{}\n      ", shorten(&e.headline(), 160)))
                            .unwrap_or_default();
                        format!("{error}{}", failure.fix)
                    }
                    None => "nothing compiles with the attribute".to_string(),
                };
                untouched.push(Untouched {
                    file,
                    line: site.line,
                    name: site.name.clone(),
                    why,
                });
            }
        }
    }
    (annotated, untouched)
}

/// The attribute as a user writes it: `#[vramguard::inference]`, with the `#[keep]`s noted.
fn user_attr(annotation: &Annotation) -> String {
    let attr = annotation
        .attr
        .replacen("#[::vramguard::", "#[vramguard::", 1);
    match annotation.keep_lets.len() {
        0 => attr,
        1 => format!("{attr} and #[keep] on one `let`"),
        n => format!("{attr} and #[keep] on {n} `let`s"),
    }
}

/// The file with each annotation on a line of its own above its function (and each `#[keep]`
/// above its `let`), indented as that line is; inline when the line has other tokens before.
fn render_for_user(text: &str, sites: &[(&FnSite, &Annotation)]) -> String {
    let own_line = |offset: usize, attr: &str| {
        let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
        let indent = &text[line_start..offset];
        if indent.chars().all(char::is_whitespace) {
            format!("{attr}\n{indent}")
        } else {
            format!("{attr} ")
        }
    };
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (site, annotation) in sites {
        let attr = annotation
            .attr
            .replacen("#[::vramguard::", "#[vramguard::", 1);
        inserts.push((site.offset, own_line(site.offset, &attr)));
        for &offset in &annotation.keep_lets {
            inserts.push((offset, own_line(offset, "#[keep]")));
        }
    }
    inserts.sort_by_key(|(offset, _)| *offset);
    let mut out = String::with_capacity(text.len() + inserts.len() * 32);
    let mut at = 0;
    for (offset, insert) in inserts {
        out.push_str(&text[at..offset]);
        out.push_str(&insert);
        at = offset;
    }
    out.push_str(&text[at..]);
    out
}

/// The `TrackingAllocator` line in each binary target's root file (after any annotation edit
/// of the same file).
fn track_binaries(
    dir: &Path,
    offline: bool,
    edits: &mut Vec<FileEdit>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let (_, _, all) = targets::targets(dir, offline)?;
    let bins: Vec<_> = all
        .into_iter()
        .filter(|t| t.kind == targets::Kind::Bin)
        .collect();
    if bins.is_empty() {
        notes.push("--track: the crate has no binary target; nothing to install".to_string());
    }
    for bin in bins {
        let rel = relative(&bin.src_path, dir);
        let index = match edits.iter().position(|e| e.rel == rel) {
            Some(index) => index,
            None => {
                let text = read(&bin.src_path)?;
                edits.push(FileEdit {
                    rel: rel.clone(),
                    before: text.clone(),
                    after: text,
                });
                edits.len() - 1
            }
        };
        match track::install(&edits[index].after) {
            Ok(Allocator::Missing(text)) => {
                edits[index].after = text;
                notes.push(format!(
                    "--track: {rel} (bin `{}`): the TrackingAllocator line added",
                    bin.name
                ));
            }
            Ok(Allocator::Tracking) => {}
            Ok(Allocator::Other(ty)) => notes.push(format!(
                "--track: {rel} (bin `{}`) has its own #[global_allocator] (`{ty}`), left as \
                 is; to track it, write `vramguard::TrackingAllocator<{ty}>` as its type and \
                 `vramguard::TrackingAllocator::new(…)` around its value",
                bin.name
            )),
            Err(detail) => notes.push(format!("--track: {rel}: left as is: {detail}")),
        }
        if edits[index].after == edits[index].before {
            edits.remove(index);
        }
    }
    edits.sort_by(|a, b| (a.rel != "Cargo.toml", &a.rel).cmp(&(b.rel != "Cargo.toml", &b.rel)));
    Ok(())
}

fn relative(path: &Path, dir: &Path) -> String {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let path = canonical(path);
    let dir = canonical(dir);
    path.strip_prefix(&dir)
        .unwrap_or(&path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The summary printed before the diff or the writes.
fn summary(
    checked: &Checked,
    options: &ApplyOptions,
    annotated: &[Annotated],
    untouched: &[Untouched],
    notes: &[String],
) -> String {
    let mut out = String::new();
    let outcome = &checked.outcome;
    let which = match &options.copy.fns {
        Some(pattern) => format!("functions matching `{}`", pattern.as_str()),
        None => "every function".to_string(),
    };
    let _ = writeln!(
        out,
        "cargo vramguard apply: {} {}, #[{}] on {which}",
        outcome.krate,
        outcome.version,
        options.copy.attr.name()
    );
    if annotated.is_empty() && untouched.is_empty() {
        let _ = writeln!(
            out,
            "no function to annotate: none without the attribute matches (functions that have it \
             already are left as they are)"
        );
    }
    if !annotated.is_empty() {
        let _ = writeln!(out, "annotated: {}", count(annotated.len(), "function"));
        for a in annotated {
            let form = if a.hatch {
                format!("  {} (the escape hatch the check verified)", a.attr)
            } else {
                String::new()
            };
            let _ = writeln!(out, "  {}:{}  {}{form}", a.file, a.line, a.name);
        }
    }
    if !untouched.is_empty() {
        let _ = writeln!(
            out,
            "left untouched: {} (nothing makes {} compile with the attribute)",
            count(untouched.len(), "function"),
            if untouched.len() == 1 { "it" } else { "them" }
        );
        for u in untouched {
            let _ = writeln!(out, "  {}:{}  {}\n      {}", u.file, u.line, u.name, u.why);
        }
    }
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    out
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `git diff`-style: `--- a/PATH`, `+++ b/PATH`, hunks with three lines of context.
fn unified_diff(edit: &FileEdit) -> String {
    similar::TextDiff::from_lines(&edit.before, &edit.after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{}", edit.rel), &format!("b/{}", edit.rel))
        .to_string()
}

/// `cargo build` (and with `--test`, `cargo test`) on the crate, its output shown.
fn build(options: &ApplyOptions) -> Result<()> {
    let steps: &[&str] = if options.test {
        &["build", "test"]
    } else {
        &["build"]
    };
    for step in steps {
        let mut command = Command::new(crate::cargo::cargo_program());
        command
            .arg(step)
            .arg("--manifest-path")
            .arg(options.copy.crate_dir.join("Cargo.toml"));
        if !options.copy.crate_features.is_empty() {
            command
                .arg("--features")
                .arg(options.copy.crate_features.join(","));
        }
        if options.copy.offline {
            command.arg("--offline");
        }
        let shown = format!("cargo {step}");
        println!(
            "{}",
            match *step {
                "build" => "building the crate (cargo build)…",
                _ => "running its tests (cargo test)…",
            }
        );
        let status = command.status().map_err(|source| Error::Spawn {
            command: shown.clone(),
            source,
        })?;
        if !status.success() {
            return Err(Error::Build {
                command: shown,
                detail: format!(
                    "it exited with {status} (its output is above). The changes are written: \
                     `git diff` shows them and `git checkout .` undoes them"
                ),
            });
        }
        println!("{shown}: ok");
    }
    Ok(())
}

fn read(path: &PathBuf) -> Result<String> {
    std::fs::read_to_string(path).map_err(Error::io("read", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(offset: usize) -> FnSite {
        FnSite {
            file: 0,
            name: "forward".into(),
            line: 1,
            start_line: 1,
            end_line: 1,
            offset,
            lets: Vec::new(),
        }
    }

    #[test]
    fn attributes_go_on_their_own_line_with_the_indentation_of_the_function() {
        let text = "impl M {\n    /// Doc.\n    pub fn forward(&self) {\n        let x = 1;\n    }\n    #[inline] fn g() {}\n}\n";
        let forward = text.find("pub fn").expect("forward");
        let let_x = text.find("let x").expect("let");
        let g = text.find("fn g").expect("g");
        let keep = Annotation {
            attr: "#[::vramguard::inference]".into(),
            keep_lets: vec![let_x],
        };
        let bare = Annotation {
            attr: "#[::vramguard::inference(drops = false)]".into(),
            keep_lets: Vec::new(),
        };
        let (forward, g) = (site(forward), site(g));
        let out = render_for_user(text, &[(&forward, &keep), (&g, &bare)]);
        assert_eq!(
            out,
            "impl M {\n    /// Doc.\n    #[vramguard::inference]\n    pub fn forward(&self) {\n        #[keep]\n        let x = 1;\n    }\n    #[inline] #[vramguard::inference(drops = false)] fn g() {}\n}\n"
        );
        assert_eq!(
            user_attr(&keep),
            "#[vramguard::inference] and #[keep] on one `let`"
        );
    }

    #[test]
    fn the_diff_is_unified_with_git_style_headers() {
        let edit = FileEdit {
            rel: "src/lib.rs".into(),
            before: "a\nb\n".into(),
            after: "a\nx\nb\n".into(),
        };
        assert_eq!(
            unified_diff(&edit),
            "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,2 +1,3 @@\n a\n+x\n b\n"
        );
    }

    #[test]
    fn usage_mistakes_name_the_argument() {
        let parse_strs = |args: &[&str]| parse(args.iter().map(|s| s.to_string()));
        assert!(matches!(parse_strs(&["--help"]), Ok(None)));
        match parse_strs(&["--bogus"]) {
            Err(Error::Usage(message)) => assert!(message.contains("--bogus"), "{message}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
        match parse_strs(&["--", "x"]) {
            Err(Error::Usage(message)) => assert!(message.contains("after `--`"), "{message}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }
}
