//! Writes random functions over the logging type `T` (fixed seed): straight-line code,
//! branches, loops, shadowing, borrows, moves, closures, format macros, guards. Every function
//! is emitted twice, `with::fN` (annotated) and `without::fN` (plain), and a table of both.
//!
//! The generated files are checked in (`tests/gen/corpus_*.rs`); the test
//! `generated_corpus_is_current` regenerates them in memory and fails if they differ
//! (`VG_BLESS=1` rewrites them).

/// Functions in the corpus.
pub const FUNCTIONS: usize = 520;
/// Files the corpus is split into (each compiled once, as modules of one test crate).
pub const FILES: usize = 4;
/// The fixed seed.
pub const SEED: u64 = 0x5eed_2026_0001;

// The seeded generator both corpus generators draw from.
#[path = "rng.rs"]
mod rng;
use rng::Rng;

/// One function under construction.
struct Function {
    lines: Vec<String>,
    /// Owned `T` locals currently usable (not moved).
    live: Vec<String>,
    counter: usize,
    indent: usize,
}

impl Function {
    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }
    fn line(&mut self, text: impl Into<String>) {
        let pad = "    ".repeat(self.indent);
        self.lines.push(format!("{pad}{}", text.into()));
    }
    fn pick(&self, rng: &mut Rng) -> Option<String> {
        (!self.live.is_empty()).then(|| self.live[rng.below(self.live.len())].clone())
    }
    /// An `i64` expression reading some live values.
    fn expr(&self, rng: &mut Rng) -> String {
        let mut parts = vec![format!("{}", rng.below(7) as i64 - 3)];
        for _ in 0..rng.below(3) {
            if let Some(v) = self.pick(rng) {
                parts.push(format!("{v}.v"));
            }
        }
        parts.join(" + ")
    }
}

fn statement(f: &mut Function, rng: &mut Rng, depth: usize) {
    let choice = rng.below(19);
    match choice {
        // new value
        0..=2 => {
            let name = f.fresh("v");
            let e = f.expr(rng);
            f.line(format!("let {name} = mk(\"{name}\", {e});"));
            f.live.push(name);
        }
        // shadowing: `let x = f(&x)` style
        3 | 4 => {
            if let Some(v) = f.pick(rng) {
                let e = f.expr(rng);
                f.line(format!("let {v} = mk(\"{v}\", {v}.v + {e});"));
            }
        }
        // known owned method with a borrowed argument
        5 => {
            if let (Some(a), Some(b)) = (f.pick(rng), f.pick(rng)) {
                let name = f.fresh("w");
                f.line(format!("let {name} = {a}.forward(&{b});"));
                f.line(format!("let {name} = mk(\"{name}\", {name}.v);"));
                f.live.push(name);
            }
        }
        // a reference, a step, maybe a shadowing of the borrowed name, then a use
        6 => {
            if let Some(v) = f.pick(rng) {
                let r = f.fresh("r");
                let s = f.fresh("s");
                if rng.chance(50) {
                    f.line(format!("let {r} = &{v};"));
                } else {
                    f.line(format!("let {r} = {v}.dims();"));
                }
                f.line(format!("step(\"{s}\");"));
                let read = if f.lines[f.lines.len() - 2].contains("dims()") {
                    format!("*{r}")
                } else {
                    format!("{r}.v")
                };
                if rng.chance(30) {
                    let e = f.expr(rng);
                    f.line(format!("let {v} = mk(\"{v}\", {e});"));
                }
                f.line(format!("acc += {read};"));
            }
        }
        // move into a function (the value is gone afterwards)
        7 => {
            if let Some(v) = f.pick(rng) {
                let name = f.fresh("m");
                f.line(format!("let {name} = consume({v}, \"{name}\");"));
                f.live.retain(|x| *x != v);
                f.live.push(name);
            }
        }
        // format macros with inline and width captures
        8 => {
            if let (Some(a), Some(b)) = (f.pick(rng), f.pick(rng)) {
                let s = f.fresh("text");
                match rng.below(3) {
                    0 => f.line(format!("let {s} = format!(\"{{{a}}}-{{}}\", {b}.v);")),
                    1 => f.line(format!(
                        "let {s} = format!(\"[{{:>width$}}]\", {a}.v, width = 4);"
                    )),
                    _ => {
                        f.line("let width = 6usize;");
                        f.line(format!(
                            "let {s} = format!(\"[{{{a}:>width$}}] {{:?}}\", {b}.v);"
                        ));
                    }
                }
                f.line(format!("acc += {s}.len() as i64;"));
            }
        }
        // branches with inner locals
        9 | 10 if depth < 2 => {
            let v = f.pick(rng);
            f.line(if rng.chance(50) {
                "if flag {".to_string()
            } else {
                "if acc % 2 == 0 {".to_string()
            });
            f.indent += 1;
            let saved = f.live.clone();
            for _ in 0..1 + rng.below(3) {
                statement(f, rng, depth + 1);
            }
            if let Some(v) = &v {
                if f.live.contains(v) {
                    f.line(format!("acc += {v}.v;"));
                }
            }
            let moved: Vec<String> = saved
                .iter()
                .filter(|x| !f.live.contains(x))
                .cloned()
                .collect();
            f.live = saved;
            f.indent -= 1;
            f.line("} else {");
            f.indent += 1;
            let e = f.expr(rng);
            f.line(format!("acc -= {e};"));
            f.indent -= 1;
            f.line("}");
            // A value moved in one branch is gone afterwards.
            f.live.retain(|x| !moved.contains(x));
        }
        // loops using outer values, with inner locals
        11 if depth < 2 => {
            let i = f.fresh("i");
            f.line(format!("for {i} in 0..3i64 {{"));
            f.indent += 1;
            let saved = f.live.clone();
            let l = f.fresh("l");
            let e = f.expr(rng);
            f.line(format!("let {l} = mk(\"{l}\", {i} + {e});"));
            f.live.push(l.clone());
            if rng.chance(50) {
                f.line(format!("if {l}.v > 40 {{ continue; }}"));
            }
            let e = f.expr(rng);
            f.line(format!("acc += {e};"));
            f.live = saved;
            f.indent -= 1;
            f.line("}");
        }
        // match
        12 if depth < 2 => {
            let name = f.fresh("k");
            let a = f.expr(rng);
            let b = f.expr(rng);
            f.line(format!("let {name} = match acc.rem_euclid(3) {{"));
            f.line(format!("    0 => mk(\"{name}\", {a}),"));
            f.line(format!(
                "    1 => {{ let t = mk(\"{name}t\", {b}); mk(\"{name}\", t.v * 2) }}"
            ));
            f.line(format!("    _ => mk(\"{name}\", -1),"));
            f.line("};");
            f.live.push(name);
        }
        // closures
        13 => {
            if let Some(v) = f.pick(rng) {
                let c = f.fresh("c");
                if rng.chance(50) {
                    f.line(format!("let {c} = |k: i64| {v}.v + k;"));
                    f.line(format!("acc += {c}(1) + {c}(2);"));
                } else {
                    let n = f.fresh("n");
                    f.line(format!("let {n} = {v}.v;"));
                    f.line(format!("let {c} = move |k: i64| {n} * k;"));
                    f.line(format!("acc += {c}(3);"));
                }
            }
        }
        // guards
        14 => {
            let g = f.fresh("_g");
            f.line(format!("let {g} = guard(\"{g}\");"));
        }
        // steps (anchors)
        15 => {
            let s = f.fresh("s");
            f.line(format!("step(\"{s}\");"));
        }
        // early return
        16 => {
            let limit = 50 + rng.below(200);
            f.line(format!("if flag && acc > {limit} {{ return acc; }}"));
        }
        // tuple moves (a field moved out)
        17 => {
            let p = f.fresh("p");
            f.line(format!("let {p} = (mk(\"{p}a\", 1), mk(\"{p}b\", 2));"));
            let q = f.fresh("q");
            f.line(format!("let {q} = {p}.0;"));
            f.line(format!("acc += {q}.v + {p}.1.v;"));
        }
        // an unknown method that might borrow (the conservative default)
        _ => {
            if let Some(v) = f.pick(rng) {
                let n = f.fresh("name");
                f.line(format!("let {n} = {v}.peek_name();"));
                f.line(format!("acc += {n}.len() as i64;"));
            }
        }
    }
}

fn function(index: usize, rng: &mut Rng) -> Vec<String> {
    let mut f = Function {
        lines: Vec::new(),
        live: vec!["p".to_string()],
        counter: 0,
        indent: 1,
    };
    f.line("let mut acc: i64 = 0;");
    for _ in 0..4 + rng.below(12) {
        statement(&mut f, rng, 0);
    }
    let mut tail = vec!["acc".to_string()];
    for v in f.live.clone() {
        if rng.chance(30) {
            tail.push(format!("{v}.v"));
        }
    }
    f.line(tail.join(" + "));
    let mut out = vec![format!("pub fn f{index}(p: T, flag: bool) -> i64 {{")];
    out.extend(f.lines);
    out.push("}".to_string());
    out
}

/// The corpus files: `(file name, contents)`.
pub fn generate() -> Vec<(String, String)> {
    let mut rng = Rng(SEED);
    let per_file = FUNCTIONS.div_ceil(FILES);
    let mut files = Vec::new();
    for file in 0..FILES {
        let range = file * per_file..((file + 1) * per_file).min(FUNCTIONS);
        let functions: Vec<(usize, Vec<String>)> =
            range.clone().map(|i| (i, function(i, &mut rng))).collect();
        let mut text = String::new();
        text.push_str(
            "// @generated by tests/gen/generator.rs: do not edit (VG_BLESS=1 rewrites it).\n",
        );
        text.push_str("#![allow(unused_variables, unused_mut, unused_assignments, unused_imports, dead_code)]\n");
        text.push_str("#![allow(clippy::all)]\n\n");
        for (module, attr) in [("with", "#[vramguard::inference]\n"), ("without", "")] {
            text.push_str(&format!("pub mod {module} {{\n    use super::super::support::{{consume, guard, mk, step, T}};\n\n"));
            for (_, lines) in &functions {
                text.push_str(&format!("    {attr}"));
                for line in lines {
                    text.push_str(&format!("    {line}\n"));
                }
                text.push('\n');
            }
            text.push_str("}\n\n");
        }
        text.push_str("/// `(name, without, with)` for every function of this file.\n");
        text.push_str("pub const CASES: &[(&str, fn(super::support::T, bool) -> i64, fn(super::support::T, bool) -> i64)] = &[\n");
        for (i, _) in &functions {
            text.push_str(&format!("    (\"f{i}\", without::f{i}, with::f{i}),\n"));
        }
        text.push_str("];\n");
        files.push((format!("corpus_{file}.rs"), text));
    }
    files
}
