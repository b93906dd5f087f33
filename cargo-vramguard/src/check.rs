//! The check itself: annotate every candidate, run `cargo check`, map each error to the
//! annotated function that contains it, try that function's escape hatch (or take the
//! attribute off), and repeat until the crate builds. Owns the per-function state machine and
//! the error → function → hatch mapping; cargo invocations are `cargo`'s, text is `annotate`'s,
//! printing is `report`'s.

use std::collections::BTreeMap;

use crate::annotate::{self, Annotation, FnSite, SourceFile};
use crate::cargo::{Cargo, Diagnostic, TestRun, TestStatus};
use crate::cli::{Attr, CheckOptions};
use crate::error::{Error, Result};
use crate::report::{Failure, Outcome, TestComparison, TestDifference};
use crate::source;
use crate::workspace;

/// What a function carries in the current round.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// The bare attribute.
    Plain,
    /// `#[inference(keep(x, y))]`: the bindings borrow errors named, one more per failed round.
    KeepNamed(Vec<String>),
    /// A `#[keep]` on the `let`s at these byte offsets (likewise accumulated).
    KeepLet(Vec<usize>),
    /// `#[inference(drops = false)]`.
    NoDrops,
    /// No attribute: nothing compiles with it.
    Removed,
}

/// One candidate function and what happened to it.
#[derive(Debug)]
struct FnState {
    site: FnSite,
    step: Step,
    /// The first error under the bare attribute.
    first_error: Option<Diagnostic>,
    /// The hatches tried, in order, and whether each failed.
    tried: Vec<(Step, bool)>,
    /// Set by an error from a vramguard lint: by design, no hatch applies.
    lint: Option<String>,
    /// The first hatch its errors called for.
    suggested: Option<Step>,
}

/// Error codes of borrow errors a `keep` fixes.
const BORROW_CODES: [&str; 4] = ["E0382", "E0505", "E0597", "E0716"];

/// Prints progress on stderr unless quiet.
fn progress(message: std::fmt::Arguments<'_>) {
    eprintln!("{message}");
}

/// What the check decided for one candidate function: the annotation it compiles with (the
/// bare attribute or an escape hatch), or `None` when nothing compiles.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    /// The function.
    pub site: FnSite,
    /// What it carries in the copy that builds.
    pub annotation: Option<Annotation>,
}

/// The check's report, with what it decided per function and the files it read (for `apply`
/// and `measure`, which write the same decisions elsewhere).
#[derive(Debug)]
pub(crate) struct Checked {
    /// The report.
    pub outcome: Outcome,
    /// One per candidate function, in file order.
    pub decisions: Vec<Decision>,
    /// The crate's source files as they were, indexed by [`FnSite::file`].
    pub files: Vec<SourceFile>,
}

/// Runs the whole check for `options`.
pub(crate) fn run(options: &CheckOptions) -> Result<Outcome> {
    Ok(run_detailed(options)?.outcome)
}

/// Runs the whole check for `options`, keeping what it decided per function.
pub(crate) fn run_detailed(options: &CheckOptions) -> Result<Checked> {
    std::fs::create_dir_all(&options.work_dir).map_err(Error::io("create", &options.work_dir))?;
    let located = source::locate(&options.source, &options.work_dir, options.offline)?;
    let copy = workspace::prepare(
        &located.dir,
        &options.work_dir,
        options.vramguard_path.as_deref(),
        &options.features,
        options.manifest.as_deref(),
    )?;
    progress(format_args!(
        "cargo-vramguard: checking {} {} (copy in {})",
        copy.name,
        copy.version,
        copy.dir.display()
    ));
    for warning in &copy.warnings {
        progress(format_args!("{warning}"));
    }
    let files = annotate::collect_files(&copy.dir, options.test)?;
    let selection = annotate::Selection {
        attr: options.attr,
        fns: options.fns.as_ref(),
        tests: options.test,
    };
    let mut skipped_files = Vec::new();
    let mut states = Vec::new();
    for (index, file) in files.iter().enumerate() {
        match annotate::find_fns(index, file, &selection) {
            Ok(sites) => states.extend(sites.into_iter().map(|site| FnState {
                site,
                step: Step::Plain,
                first_error: None,
                tried: Vec::new(),
                lint: None,
                suggested: None,
            })),
            Err(message) => {
                progress(format_args!("warning: {message}"));
                skipped_files.push(message);
            }
        }
    }
    let cargo = Cargo {
        dir: copy.dir.clone(),
        target_dir: options.target_dir.clone(),
        crate_features: options.crate_features.clone(),
        offline: options.offline,
        has_lib: copy.has_lib,
    };

    let mut rounds = 0;
    let mut unmapped: Vec<Diagnostic> = Vec::new();
    let mut converged = false;
    while rounds < options.max_rounds {
        rounds += 1;
        write_files(&copy.dir, &files, &states, options.attr)?;
        let annotated = states.iter().filter(|s| s.step != Step::Removed).count();
        progress(format_args!(
            "[round {rounds}] cargo check: {annotated} of {} functions annotated…",
            states.len()
        ));
        let outcome = cargo.check(options.test)?;
        if outcome.success {
            converged = true;
            break;
        }
        let errors = dedup(outcome.errors);
        if errors.is_empty() {
            return Err(Error::CargoOutput {
                command: "cargo check".to_string(),
                detail: format!(
                    "it failed without a compiler error:\n{}",
                    outcome.stderr_tail
                ),
            });
        }
        let mut failing: BTreeMap<usize, Vec<Diagnostic>> = BTreeMap::new();
        let mut round_unmapped = Vec::new();
        for error in errors {
            match owner_of(&error, &states, &files) {
                Some(index) => failing.entry(index).or_default().push(error),
                None => round_unmapped.push(error),
            }
        }
        if failing.is_empty() {
            // Nothing annotated explains the errors: is the crate broken by itself?
            progress(format_args!(
                "[round {rounds}] {} error(s) outside annotated functions; checking the crate \
                 without the attribute…",
                round_unmapped.len()
            ));
            write_plain(&copy.dir, &files)?;
            let baseline = cargo.check(options.test)?;
            if !baseline.success {
                let errors = dedup(baseline.errors);
                let first = errors.first().map_or_else(
                    || baseline.stderr_tail.clone(),
                    |e| match &e.location {
                        Some(l) => format!("{}:{}: {}", l.file, l.line, e.headline()),
                        None => e.headline(),
                    },
                );
                return Err(Error::BrokenWithoutAttribute {
                    count: errors.len().max(1),
                    first,
                });
            }
            // The crate builds plain: some annotated function changes what code outside it
            // sees (a signature, an auto trait). Find it by bisection.
            match bisect(&cargo, &copy.dir, &files, &mut states, options)? {
                Some(culprit) => {
                    progress(format_args!(
                        "[round {rounds}] the errors come from the attribute on `{}`",
                        states[culprit].site.name
                    ));
                    advance(&mut states[culprit], &round_unmapped, options.attr);
                    continue;
                }
                None => {
                    unmapped = round_unmapped;
                    break;
                }
            }
        }
        progress(format_args!(
            "[round {rounds}] cargo check: {}",
            match failing.len() {
                1 => "1 function fails".to_string(),
                n => format!("{n} functions fail"),
            }
        ));
        for (index, errors) in failing {
            advance(&mut states[index], &errors, options.attr);
        }
    }

    write_files(&copy.dir, &files, &states, options.attr)?;
    let tests = if options.test && converged && unmapped.is_empty() {
        Some(compare_tests(&cargo, &copy.dir, &files, &states, options)?)
    } else {
        None
    };

    let failures = states
        .iter()
        .filter(|s| s.step != Step::Plain)
        .map(|s| failure(s, &files, options.attr, converged))
        .collect();
    let decisions = states
        .iter()
        .map(|s| Decision {
            site: s.site.clone(),
            annotation: annotation(s, options.attr),
        })
        .collect();
    let outcome = Outcome {
        krate: copy.name,
        version: copy.version,
        attr: options.attr,
        features: copy.features,
        default_features: copy.default_features,
        warnings: copy.warnings,
        total: states.len(),
        compiled: states.iter().filter(|s| s.step == Step::Plain).count(),
        rounds,
        converged,
        failures,
        unmapped,
        skipped_files,
        tests,
        copy_dir: copy.dir,
    };
    Ok(Checked {
        outcome,
        decisions,
        files,
    })
}

/// Finds one annotated function whose attribute alone breaks the build, halving the set of
/// annotated functions each step (`None` when no single one does).
fn bisect(
    cargo: &Cargo,
    dir: &std::path::Path,
    files: &[SourceFile],
    states: &mut [FnState],
    options: &CheckOptions,
) -> Result<Option<usize>> {
    let mut suspects: Vec<usize> = (0..states.len())
        .filter(|&i| states[i].step != Step::Removed)
        .collect();
    let saved: Vec<Step> = states.iter().map(|s| s.step.clone()).collect();
    let fails_with = |subset: &[usize], states: &mut [FnState]| -> Result<bool> {
        for (i, state) in states.iter_mut().enumerate() {
            state.step = if subset.contains(&i) {
                saved[i].clone()
            } else {
                Step::Removed
            };
        }
        write_files(dir, files, states, options.attr)?;
        progress(format_args!(
            "[bisect] cargo check with {} function(s) annotated…",
            subset.len()
        ));
        Ok(!cargo.check(options.test)?.success)
    };
    let mut found = None;
    while suspects.len() > 1 {
        let (first, second) = suspects.split_at(suspects.len() / 2);
        let (first, second) = (first.to_vec(), second.to_vec());
        if fails_with(&first, states)? {
            suspects = first;
        } else if fails_with(&second, states)? {
            suspects = second;
        } else {
            // It takes functions from both halves together.
            suspects.clear();
        }
    }
    if let [only] = suspects[..] {
        if fails_with(&[only], states)? {
            found = Some(only);
        }
    }
    for (state, step) in states.iter_mut().zip(saved) {
        state.step = step;
    }
    Ok(found)
}

/// Runs the tests annotated, then plain, and compares per test name.
fn compare_tests(
    cargo: &Cargo,
    dir: &std::path::Path,
    files: &[SourceFile],
    states: &[FnState],
    options: &CheckOptions,
) -> Result<TestComparison> {
    progress(format_args!(
        "[tests] running the crate's tests, annotated…"
    ));
    let annotated = cargo.test(&options.skip_tests, true)?;
    progress(format_args!(
        "[tests] annotated: {} passed, {} failed; running them plain…",
        annotated.count(TestStatus::Passed),
        annotated.count(TestStatus::Failed)
    ));
    write_plain(dir, files)?;
    let plain = cargo.test(&options.skip_tests, true)?;
    // Leave the copy annotated, for inspection.
    write_files(dir, files, states, options.attr)?;
    Ok(comparison(&annotated, &plain))
}

fn comparison(annotated: &TestRun, plain: &TestRun) -> TestComparison {
    let mut differences = Vec::new();
    for (name, status) in &annotated.results {
        let before = plain.results.get(name).copied();
        if before != Some(*status) {
            differences.push(TestDifference {
                test: name.clone(),
                plain: before,
                annotated: Some(*status),
            });
        }
    }
    for (name, status) in &plain.results {
        if !annotated.results.contains_key(name) {
            differences.push(TestDifference {
                test: name.clone(),
                plain: Some(*status),
                annotated: None,
            });
        }
    }
    TestComparison {
        passed: annotated.count(TestStatus::Passed),
        failed: annotated.count(TestStatus::Failed),
        ignored: annotated.count(TestStatus::Ignored),
        plain_passed: plain.count(TestStatus::Passed),
        plain_failed: plain.count(TestStatus::Failed),
        build_error: annotated.build_error.clone().or(plain.build_error.clone()),
        differences,
    }
}

/// Same error reported twice (e.g. by the lib and its test build) counts once.
fn dedup(errors: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let mut seen = std::collections::HashSet::new();
    errors
        .into_iter()
        .filter(|e| seen.insert((e.code.clone(), e.message.clone(), e.location.clone())))
        .collect()
}

/// The innermost still-annotated function containing one of the error's locations (the
/// primary span first, then the macro call sites).
fn owner_of(error: &Diagnostic, states: &[FnState], files: &[SourceFile]) -> Option<usize> {
    error.locations.iter().find_map(|location| {
        states
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.step != Step::Removed
                    && files[s.site.file].rel == location.file
                    && (s.site.start_line..=s.site.end_line).contains(&location.line)
            })
            .min_by_key(|(_, s)| s.site.end_line - s.site.start_line)
            .map(|(index, _)| index)
    })
}

/// The binding a borrow error names: `x` in "`x` does not live long enough", the root `x` of
/// `x.0`; `None` for `self`, `*x` and other places.
fn named_binding(error: &Diagnostic) -> Option<String> {
    let start = error.message.find('`')? + 1;
    let len = error.message[start..].find('`')?;
    let place = &error.message[start..start + len];
    let root = place.split('.').next()?;
    let is_ident = root
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && root.chars().all(|c| c.is_alphanumeric() || c == '_');
    (is_ident && root != "self").then(|| root.to_string())
}

/// The name of the vramguard lint an error comes from (`vramguard::NAME: …`).
fn lint_name(error: &Diagnostic) -> Option<String> {
    let rest = error.message.strip_prefix("vramguard::")?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The `let` binding `name` closest before `line`, else the `let` whose statement holds `line`.
fn let_for(site: &FnSite, name: Option<&str>, line: usize) -> Option<usize> {
    if let Some(name) = name {
        if let Some(found) = site
            .lets
            .iter()
            .rfind(|l| l.start_line <= line && l.names.iter().any(|n| n == name))
            .or_else(|| site.lets.iter().find(|l| l.names.iter().any(|n| n == name)))
        {
            return Some(found.offset);
        }
        return None;
    }
    site.lets
        .iter()
        .rfind(|l| (l.start_line..=l.end_line).contains(&line))
        .map(|l| l.offset)
}

/// The escape hatches for `error`, in the order they are tried.
fn hatches(site: &FnSite, error: &Diagnostic, attr: Attr) -> Vec<Step> {
    let mut steps = Vec::new();
    let borrow = error
        .code
        .as_deref()
        .is_some_and(|c| BORROW_CODES.contains(&c));
    let line = error
        .locations
        .iter()
        .find(|l| (site.start_line..=site.end_line).contains(&l.line))
        .map_or(site.line, |l| l.line);
    if borrow {
        let name = named_binding(error);
        match (attr, &name) {
            (Attr::Inference, Some(name)) => steps.push(Step::KeepNamed(vec![name.clone()])),
            (Attr::BatchScope, Some(name)) => {
                if let Some(offset) = let_for(site, Some(name), line) {
                    steps.push(Step::KeepLet(vec![offset]));
                }
            }
            _ => {}
        }
        if let Some(offset) = let_for(site, None, line) {
            if !steps.iter().any(|s| matches!(s, Step::KeepLet(_))) {
                steps.push(Step::KeepLet(vec![offset]));
            }
        }
    }
    if attr == Attr::Inference {
        steps.push(Step::NoDrops);
    }
    steps.push(Step::Removed);
    steps
}

/// Adds the bindings (or `let`s) that this round's borrow errors name to a `keep` step;
/// `false` when there is nothing new to keep.
fn widen_keep(step: &mut Step, site: &FnSite, errors: &[Diagnostic], attr: Attr) -> bool {
    let borrow_errors = errors
        .iter()
        .filter(|e| e.code.as_deref().is_some_and(|c| BORROW_CODES.contains(&c)));
    let mut widened = false;
    for error in borrow_errors {
        let name = named_binding(error);
        match step {
            Step::KeepNamed(names) if attr == Attr::Inference => {
                if let Some(name) = name.filter(|n| !names.contains(n)) {
                    names.push(name);
                    widened = true;
                }
            }
            Step::KeepLet(offsets) => {
                let line = error
                    .locations
                    .iter()
                    .find(|l| (site.start_line..=site.end_line).contains(&l.line))
                    .map_or(site.line, |l| l.line);
                let offset = name
                    .as_deref()
                    .and_then(|n| let_for(site, Some(n), line))
                    .or_else(|| let_for(site, None, line));
                if let Some(offset) = offset.filter(|o| !offsets.contains(o)) {
                    offsets.push(offset);
                    widened = true;
                }
            }
            _ => {}
        }
    }
    widened
}

/// A function failed in this round: record why and move it to its next hatch.
fn advance(state: &mut FnState, errors: &[Diagnostic], attr: Attr) {
    let Some(first) = errors.first() else {
        return;
    };
    if state.step == Step::Plain {
        state.first_error = Some(first.clone());
        if let Some(lint) = errors.iter().find_map(lint_name) {
            state.lint = Some(lint);
            state.step = Step::Removed;
            return;
        }
    } else {
        // A `keep` that fixed one borrow error may uncover the next binding: keep it too.
        if widen_keep(&mut state.step, &state.site, errors, attr) {
            return;
        }
        state.tried.push((state.step.clone(), true));
    }
    let Some(error) = state.first_error.clone() else {
        state.step = Step::Removed;
        return;
    };
    let plan = hatches(&state.site, &error, attr);
    let same_kind = |s: &Step| std::mem::discriminant(s) == std::mem::discriminant(&state.step);
    let next = match plan.iter().position(same_kind) {
        Some(i) => plan.get(i + 1),
        None => plan.first(),
    };
    state.step = next.cloned().unwrap_or(Step::Removed);
    if state.suggested.is_none() {
        // Every binding this round's borrow errors name goes into the first `keep` at once.
        widen_keep(&mut state.step, &state.site, errors, attr);
        state.suggested = Some(state.step.clone());
    }
}

/// The annotation for a function's step, or `None` when it has none.
fn annotation(state: &FnState, attr: Attr) -> Option<Annotation> {
    let bare = format!("#[::vramguard::{}]", attr.name());
    let (attr_text, keep_lets) = match &state.step {
        Step::Removed => return None,
        Step::Plain => (bare, Vec::new()),
        Step::KeepNamed(names) => (
            format!("#[::vramguard::inference(keep({}))]", names.join(", ")),
            Vec::new(),
        ),
        Step::KeepLet(offsets) => (bare, offsets.clone()),
        Step::NoDrops => (
            "#[::vramguard::inference(drops = false)]".to_string(),
            Vec::new(),
        ),
    };
    Some(Annotation {
        attr: attr_text,
        keep_lets,
    })
}

/// Writes every file with the functions' current annotations.
fn write_files(
    root: &std::path::Path,
    files: &[SourceFile],
    states: &[FnState],
    attr: Attr,
) -> Result<()> {
    let annotations: Vec<Option<Annotation>> = states.iter().map(|s| annotation(s, attr)).collect();
    for (index, file) in files.iter().enumerate() {
        let text = annotate::render(
            &file.text,
            states
                .iter()
                .zip(&annotations)
                .filter(|(s, _)| s.site.file == index)
                .filter_map(|(s, a)| Some((&s.site, a.as_ref()?))),
        );
        write_if_changed(&root.join(&file.rel), &text)?;
    }
    Ok(())
}

/// Writes every file as it was.
fn write_plain(root: &std::path::Path, files: &[SourceFile]) -> Result<()> {
    for file in files {
        write_if_changed(&root.join(&file.rel), &file.text)?;
    }
    Ok(())
}

/// Unchanged files keep their modification time, so cargo's fingerprints stay valid.
fn write_if_changed(path: &std::path::Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).map_err(Error::io("write", path))
}

/// What to tell the user about a hatch step.
fn describe(step: &Step, site: &FnSite, file: &SourceFile, attr: Attr) -> String {
    let let_line = |offset: usize| {
        site.lets
            .iter()
            .find(|l| l.offset == offset)
            .map_or(site.line, |l| l.start_line)
    };
    match step {
        Step::Plain => format!("#[{}]", attr.name()),
        Step::KeepNamed(names) => format!("#[inference(keep({}))]", names.join(", ")),
        Step::KeepLet(offsets) => {
            let lines: Vec<String> = offsets
                .iter()
                .map(|o| format!("{}:{}", file.rel, let_line(*o)))
                .collect();
            format!("#[keep] on the `let` at {}", lines.join(", "))
        }
        Step::NoDrops => "#[inference(drops = false)]".to_string(),
        Step::Removed => "leave the function unannotated".to_string(),
    }
}

/// A vramguard lint rejected the function: no option makes it compile, by design.
fn lint_advice(lint: &str) -> String {
    format!(
        "leave it unannotated: the attribute rejects this code by design (lint `{lint}`; \
         #[vramguard::allow({lint})] on the function silences it)"
    )
}

fn failure(state: &FnState, files: &[SourceFile], attr: Attr, converged: bool) -> Failure {
    let file = &files[state.site.file];
    let suggested = state.suggested.clone().unwrap_or(Step::Removed);
    let (fix, verified) = match (&state.lint, &state.step) {
        (Some(lint), _) => (lint_advice(lint), converged),
        (None, Step::Removed) => (
            format!(
                "leave it unannotated (tried: {})",
                state
                    .tried
                    .iter()
                    .map(|(s, _)| describe(s, &state.site, file, attr))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            converged,
        ),
        (None, step) => (describe(step, &state.site, file, attr), converged),
    };
    let suggested = match &state.lint {
        Some(lint) => lint_advice(lint),
        None => describe(&suggested, &state.site, file, attr),
    };
    Failure {
        function: state.site.name.clone(),
        file: file.rel.clone(),
        line: state.site.line,
        error: state.first_error.clone(),
        suggested,
        fix,
        verified,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: &str, message: &str) -> Diagnostic {
        Diagnostic {
            code: Some(code.to_string()),
            message: message.to_string(),
            locations: Vec::new(),
            location: None,
            rendered: String::new(),
        }
    }

    #[test]
    fn borrow_errors_name_their_binding() {
        assert_eq!(
            named_binding(&error("E0597", "`x` does not live long enough")).as_deref(),
            Some("x")
        );
        assert_eq!(
            named_binding(&error("E0382", "use of moved value: `pair.0`")).as_deref(),
            Some("pair")
        );
        assert_eq!(
            named_binding(&error("E0505", "cannot move out of `*self`")),
            None
        );
        assert_eq!(
            named_binding(&error("E0716", "temporary value dropped while borrowed")),
            None
        );
    }

    fn state() -> FnState {
        FnState {
            site: FnSite {
                file: 0,
                name: "forward".into(),
                line: 1,
                start_line: 1,
                end_line: 9,
                offset: 0,
                lets: Vec::new(),
            },
            step: Step::Plain,
            first_error: None,
            tried: Vec::new(),
            lint: None,
            suggested: None,
        }
    }

    #[test]
    fn a_failing_function_goes_keep_then_wider_keep_then_drops_false_then_unannotated() {
        let mut state = state();
        let x = error("E0597", "`x` does not live long enough");
        let y = error("E0505", "cannot move out of `y` because it is borrowed");
        advance(&mut state, &[x.clone(), y], Attr::Inference);
        assert_eq!(state.step, Step::KeepNamed(vec!["x".into(), "y".into()]));
        assert_eq!(state.suggested, Some(state.step.clone()));
        let z = error("E0382", "use of moved value: `z`");
        advance(&mut state, &[z], Attr::Inference);
        assert_eq!(
            state.step,
            Step::KeepNamed(vec!["x".into(), "y".into(), "z".into()])
        );
        advance(&mut state, std::slice::from_ref(&x), Attr::Inference);
        assert_eq!(state.step, Step::NoDrops);
        advance(&mut state, &[x], Attr::Inference);
        assert_eq!(state.step, Step::Removed);
        assert_eq!(state.tried.len(), 2);
    }

    #[test]
    fn other_errors_go_straight_to_drops_false_and_lints_to_unannotated() {
        let mut state = state();
        advance(
            &mut state,
            &[error("E0308", "mismatched types")],
            Attr::Inference,
        );
        assert_eq!(state.step, Step::NoDrops);
        let mut state = super::tests::state();
        let lint = Diagnostic {
            code: None,
            ..error("", "vramguard::backward_in_inference: `.backward()` in `f`")
        };
        advance(&mut state, &[lint], Attr::Inference);
        assert_eq!(state.step, Step::Removed);
        assert_eq!(state.lint.as_deref(), Some("backward_in_inference"));
    }

    #[test]
    fn lint_errors_are_recognised_by_their_prefix() {
        let lint = Diagnostic {
            code: None,
            ..error("", "vramguard::backward_in_inference: `.backward()` in `f`")
        };
        assert_eq!(lint_name(&lint).as_deref(), Some("backward_in_inference"));
    }
}
