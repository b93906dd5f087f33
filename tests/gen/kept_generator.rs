//! Writes random functions (fixed seed) that mix droppable values (`Mem`, `Vec<Mem>`, a
//! by-value `Mem` parameter) with kept values: `Rc` clones whose count is read later, `RefCell`
//! borrows used once before `try_borrow`, named and `_` span guards, pooled connections whose
//! pool is read later, handles whose `Copy` id is queried later, `Copy` locals. Statements that
//! observe the kept values (`Rc::strong_count`, `try_borrow`, the pool's free count, the
//! registry) are logged, so a kept value dropped at its last use changes the log.
//!
//! Every function is emitted three times: `without::kN` (plain), `with::kN`
//! (`#[vramguard::inference]`) and `scoped::kN` (`#[vramguard::batch_scope]`, which frees inside
//! loop bodies), with a table of all three. The files are checked in (`tests/gen/kept_*.rs`);
//! `kept_corpus_is_current` in `tests/drop_at_last_use/generated.rs` regenerates them in memory and fails
//! if they differ (`VG_BLESS=1` rewrites them).

/// Functions in the corpus.
pub const FUNCTIONS: usize = 150;
/// Files the corpus is split into.
pub const FILES: usize = 2;
/// The fixed seed.
pub const SEED: u64 = 0x5eed_2026_0009;

// The seeded generator both corpus generators draw from.
#[path = "rng.rs"]
mod rng;
use rng::Rng;

/// What the corpus contains (also written into each file's header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub functions: usize,
    /// Kept values created (each `let` of a non-`DropAtLastUse` value that has an observable drop
    /// or an observable count).
    pub kept: usize,
    /// Statements that observe kept values.
    pub observations: usize,
    /// `Mem` / `Vec<Mem>` locals created.
    pub droppable: usize,
}

struct Function {
    lines: Vec<String>,
    /// `Mem` locals usable here (not moved).
    live: Vec<String>,
    /// `Copy` handle ids usable here.
    ids: Vec<String>,
    counter: usize,
    indent: usize,
    counts: Counts,
    /// Also closures, `?`, async blocks and more macros (the at-scale run; the checked-in
    /// corpus is written without them, so it stays as it was).
    extended: bool,
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
    /// A small `usize` expression reading some live values.
    fn size(&self, rng: &mut Rng) -> String {
        let mut parts = vec![format!("{}", 1 + rng.below(4))];
        for _ in 0..rng.below(3) {
            if let Some(v) = self.pick(rng) {
                parts.push(format!("{v}.len()"));
            }
        }
        parts.join(" + ")
    }
    fn observe(&mut self, rng: &mut Rng) {
        self.counts.observations += 1;
        let s = self.fresh("o");
        let mut parts = vec![
            "Rc::strong_count(&shared)".to_string(),
            "cell.try_borrow().is_ok()".to_string(),
            "pool.free_count()".to_string(),
        ];
        if let Some(id) =
            (!self.ids.is_empty()).then(|| self.ids[rng.below(self.ids.len())].clone())
        {
            parts.push(format!("registry.is_open({id})"));
        }
        let holes = vec!["{:?}"; parts.len()].join(" ");
        self.line(format!(
            "ev(format!(\"{s} {holes}\", {}));",
            parts.join(", ")
        ));
    }
}

fn statement(f: &mut Function, rng: &mut Rng, depth: usize) {
    if f.extended && rng.chance(25) {
        extended_statement(f, rng);
        return;
    }
    match rng.below(20) {
        // a new droppable value
        0..=2 => {
            let name = f.fresh("v");
            let e = f.size(rng);
            f.line(format!("let {name} = Mem::new(\"{name}\", {e});"));
            f.live.push(name);
            f.counts.droppable += 1;
        }
        // shadowing
        3 => {
            if let Some(v) = f.pick(rng) {
                let e = f.size(rng);
                f.line(format!("let {v} = Mem::new(\"{v}\", {v}.len() + {e});"));
                f.counts.droppable += 1;
            }
        }
        // moved into a function
        4 => {
            if let Some(v) = f.pick(rng) {
                let name = f.fresh("m");
                f.line(format!("let {name} = eat({v}, \"{name}\");"));
                f.live.retain(|x| *x != v);
                f.live.push(name);
                f.counts.droppable += 1;
            }
        }
        // borrows, vectors and kept values (none moves a live value)
        choice @ 5..=12 => simple(f, rng, choice),
        // an observation of the kept values
        13 | 14 => f.observe(rng),
        // branches
        15 if depth < 2 => {
            f.line(if rng.chance(50) {
                "if flag {".to_string()
            } else {
                "if acc % 2 == 0 {".to_string()
            });
            f.indent += 1;
            let (live, ids) = (f.live.clone(), f.ids.clone());
            for _ in 0..1 + rng.below(3) {
                statement(f, rng, depth + 1);
            }
            f.observe(rng);
            let moved: Vec<String> = live
                .iter()
                .filter(|x| !f.live.contains(x))
                .cloned()
                .collect();
            f.live = live;
            f.ids = ids;
            f.indent -= 1;
            f.line("} else {");
            f.indent += 1;
            let e = f.size(rng);
            f.line(format!("acc -= ({e}) as i64;"));
            f.indent -= 1;
            f.line("}");
            f.live.retain(|x| !moved.contains(x));
        }
        // loops with per-iteration values (freed per iteration under `#[batch_scope]`)
        16 | 17 if depth < 2 => emit_loop(f, rng),
        // an early return
        18 => {
            let limit = 20 + rng.below(60);
            f.line(format!("if flag && acc > {limit} {{ return acc; }}"));
        }
        // a `Copy` local read later
        _ => {
            if let Some(v) = f.pick(rng) {
                let n = f.fresh("n");
                f.line(format!("let {n} = {v}.len() as i64;"));
                f.line(format!("ev(format!(\"{n} {{}}\", {n}));"));
                f.line(format!("acc += {n};"));
            }
        }
    }
}

/// A loop with per-iteration values (freed per iteration under `#[batch_scope]`).
fn emit_loop(f: &mut Function, rng: &mut Rng) {
    let i = f.fresh("i");
    f.line(format!("for {i} in 0..2usize {{"));
    f.indent += 1;
    let (live, ids) = (f.live.clone(), f.ids.clone());
    let l = f.fresh("l");
    let e = f.size(rng);
    f.line(format!("let {l} = Mem::new(\"{l}\", {i} + {e});"));
    f.counts.droppable += 1;
    f.live.push(l.clone());
    // Nothing moves an outer value inside the loop body (that would not compile).
    for _ in 0..1 + rng.below(3) {
        match rng.below(5) {
            0 => f.observe(rng),
            _ => {
                let which = 5 + rng.below(8);
                simple(f, rng, which);
            }
        }
    }
    f.line(format!(
        "ev(format!(\"iteration {{}} {{}}\", {i}, {l}.len()));"
    ));
    f.observe(rng);
    f.live = live;
    f.ids = ids;
    f.indent -= 1;
    f.line("}");
}

/// The statements that move no live value: a borrow, a vector of `Mem`, and the kept values.
fn simple(f: &mut Function, rng: &mut Rng, which: usize) {
    match which {
        5 => {
            if let Some(v) = f.pick(rng) {
                let r = f.fresh("r");
                let s = f.fresh("s");
                f.line(format!("let {r} = &{v};"));
                f.line(format!("ev(\"{s}\");"));
                f.line(format!("acc += {r}.len() as i64;"));
            }
        }
        6 => {
            let name = f.fresh("vs");
            f.line(format!(
                "let {name} = vec![Mem::new(\"{name}a\", 1), Mem::new(\"{name}b\", 2)];"
            ));
            f.line(format!("acc += {name}.len() as i64;"));
            f.counts.droppable += 1;
        }
        7 => {
            let name = f.fresh("rc");
            f.line(format!("let {name} = Rc::clone(&shared);"));
            f.line(format!("acc += {name}.len() as i64;"));
            f.counts.kept += 1;
        }
        8 => {
            let name = f.fresh("b");
            f.line(format!("let {name} = cell.try_borrow_mut();"));
            f.line(format!("acc += i64::from({name}.is_ok());"));
            f.counts.kept += 1;
        }
        9 => {
            let name = f.fresh("g");
            let e = f.size(rng);
            f.line(format!("let {name} = span.enter();"));
            f.line(format!("{name}.record({e});"));
            f.counts.kept += 1;
        }
        10 => {
            let name = f.fresh("_g");
            f.line(format!("let {name} = span.enter();"));
            f.counts.kept += 1;
        }
        11 => {
            let name = f.fresh("c");
            let e = f.size(rng);
            f.line(format!("let {name} = pool.checkout();"));
            f.line(format!("acc += {name}.query({e}) as i64;"));
            f.counts.kept += 1;
        }
        _ => {
            let name = f.fresh("h");
            let id = f.fresh("id");
            f.line(format!("let {name} = registry.open();"));
            f.line(format!("let {id} = {name}.id;"));
            f.ids.push(id);
            f.counts.kept += 1;
        }
    }
}

/// A statement of the extended corpus: a closure that borrows or takes a `Mem`, `?` inside a
/// closure, an async block polled by `block_on` (suspended once or not), macros reading a
/// `Mem`, or one of the shapes of issue #43 ([`last_shapes`]).
fn extended_statement(f: &mut Function, rng: &mut Rng) {
    let Some(v) = f.pick(rng) else {
        return;
    };
    let n = f.fresh("x");
    match rng.below(10) {
        6..=9 => last_shapes(f, rng, &v, &n),
        0 => {
            f.line(format!("let {n} = |x: i64| x + {v}.len() as i64;"));
            f.line(format!("acc += {n}({});", rng.below(5)));
        }
        1 if v != "p" => {
            // The closure takes the value: it is freed with the closure.
            f.line(format!("let {n} = move || {v}.len() as i64;"));
            f.live.retain(|l| *l != v);
            f.line(format!("acc += {n}();"));
        }
        2 => {
            f.line(format!(
                "let {n} = (|| -> Result<i64, String> {{ let t = i64::try_from({v}.len()).map_err(|e| e.to_string())?; let u: i64 = \"{}\".parse::<i64>().map_err(|e| e.to_string())?; Ok(t + u) }})();",
                rng.below(9)
            ));
            f.line(format!("ev(format!(\"{n} {{:?}}\", {n}.is_ok()));"));
            f.line(format!("acc += {n}.unwrap_or(-1);"));
        }
        3 => {
            let wait = if rng.chance(50) {
                "pending_once().await; "
            } else {
                ""
            };
            f.line(format!(
                "acc += block_on(async {{ {wait}{v}.len() as i64 }});"
            ));
        }
        4 => {
            f.line(format!(
                "assert!({v}.len() < 1_000_000, \"{v} is {{}}\", {v}.len());"
            ));
            f.line(format!(
                "acc += vec![{v}.len() as i64, {}].iter().sum::<i64>();",
                rng.below(4)
            ));
        }
        _ => {
            f.line(format!("let {n} = matches!({v}.len(), 0..=3);"));
            f.line(format!("ev(format!(\"{n} {{}}\", {n}));"));
        }
    }
}

/// The shapes of issue #43: a `mut` value rewritten while a reference into it (`dims()`) feeds
/// the condition and the new value; a value borrowed, then moved only in one arm of a branch
/// nested in an `if let`; a borrow pushed through an `if let` binding (`groups.last_mut()`); a
/// view constructor borrowing a value. Each with a variation (`if`, `match`, `else if` two and
/// three deep, a loop around it, a method chain).
fn last_shapes(f: &mut Function, rng: &mut Rng, v: &str, n: &str) {
    let variation = rng.below(5);
    match rng.below(4) {
        0 => {
            let d = f.fresh("d");
            let e = f.size(rng);
            f.line(format!("let mut {n} = Mem::new(\"{n}\", {e});"));
            f.counts.droppable += 1;
            if variation == 3 {
                // A loop around it: the borrow is taken anew in each iteration.
                let i = f.fresh("i");
                f.line(format!("for {i} in 0..2usize {{"));
                f.line(format!("    let {d} = {n}.dims();"));
                f.line(format!(
                    "    if {d}[0] > {i} + 2 {{ {n} = Mem::new(\"{n}r\", {d}[0] - 1); }}"
                ));
                f.line("}");
            } else {
                f.line(format!("let {d} = {n}.dims();"));
                f.line(match variation {
                    0 => format!("if {d}[0] > 2 {{ {n} = Mem::new(\"{n}r\", {d}[0] - 1); }}"),
                    1 => format!(
                        "match {d}[0] {{ 0..=2 => ev(\"{n} small\"), k => {n} = Mem::new(\"{n}r\", k + {d}.len()), }}"
                    ),
                    2 => format!(
                        "if {d}[0] > 4 {{ {n} = Mem::new(\"{n}r\", {d}[0] / 2); }} else if {d}[0] > 2 {{ {n} = Mem::new(\"{n}s\", {d}[0] - 1); }}"
                    ),
                    _ => format!(
                        "if {d}[0] > 5 {{ {n} = Mem::new(\"{n}r\", {d}[0] / 2); }} else if {d}[0] > 3 {{ {n} = {n}.gelu().softmax({d}[0]); }} else if flag {{ {n} = Mem::new(\"{n}t\", {d}[0] + 1); }}"
                    ),
                });
            }
            f.line(format!("acc += {n}.len() as i64;"));
            f.live.push(n.to_string());
        }
        1 => {
            // The by-value parameter when it is still live.
            let v = if f.live.iter().any(|l| l == "p") {
                "p"
            } else {
                v
            };
            let (y, s, w) = (f.fresh("y"), f.fresh("s"), f.fresh("w"));
            let m = f.fresh("m");
            let k = 1 + rng.below(4);
            f.line(format!("let {y} = {v}.len();"));
            f.line(format!("let {s} = {v}.dims();"));
            let moved = format!("eat({v}, \"{m}\")");
            let body = match variation {
                0 => format!(
                    "let {w} = if flag {{ {w} + {s}[0] }} else {{ {moved}.len() + {w} }};"
                ),
                1 => format!(
                    "let {w} = match acc % 3 {{ 0 => {w} + {s}[0], 1 => {w}, _ => {moved}.len() + {w} }};"
                ),
                2 => format!(
                    "let {w} = if flag {{ {w} + {s}[0] }} else if acc % 2 == 0 {{ {moved}.gelu().len() + {w} }} else {{ {w} }};"
                ),
                3 => format!(
                    "let {w} = if flag {{ {w} + {s}[0] }} else if acc % 3 == 0 {{ {w} * 2 }} else if acc % 3 == 1 {{ {moved}.len() + {w} }} else {{ {w} + {s}.len() }};"
                ),
                _ => format!(
                    "let {w} = if acc % 2 == 0 {{ {w} + {s}[0] }} else {{ {moved}.softmax({s_len}).gelu().len() + {w} }};",
                    s_len = k
                ),
            };
            f.line(format!(
                "if let Some({w}) = (acc % 5 != 0).then_some({k}usize) {{"
            ));
            f.line(format!("    {body}"));
            f.line(format!("    acc += {w} as i64;"));
            f.line("}");
            f.line(format!("acc += {y} as i64;"));
            // Moved on some paths: not used again.
            f.live.retain(|l| l != v);
        }
        2 => {
            let (g, h) = (f.fresh("g"), f.fresh("h"));
            f.line(format!("let mut {g}: Vec<Vec<&Mem>> = vec![Vec::new()];"));
            f.line(format!(
                "if let Some({h}) = {g}.last_mut() {{ {h}.push(&{v}) }}"
            ));
            f.line(format!("ev(format!(\"{g} {{}}\", {g}[0].len()));"));
            f.line(format!("acc += {g}[0][0].len() as i64;"));
        }
        _ => {
            let r = f.fresh("r");
            f.line(format!(
                "let {r} = View::from_slice(&{v}, {});",
                1 + rng.below(3)
            ));
            f.line(format!("ev(format!(\"{r} {{}}\", {r}.len()));"));
            f.line(format!("acc += {r}.len() as i64;"));
        }
    }
}

fn function(index: usize, rng: &mut Rng, extended: bool) -> (Vec<String>, Counts) {
    let mut f = Function {
        lines: Vec::new(),
        live: vec!["p".to_string()],
        ids: Vec::new(),
        counter: 0,
        indent: 1,
        counts: Counts::default(),
        extended,
    };
    f.line("let mut acc: i64 = 0;");
    f.line("let shared = Rc::new(Mem::new(\"shared\", 1));");
    f.line("let cell = RefCell::new(0i64);");
    f.line("let pool = Pool::new(64);");
    f.line("let registry = Registry::default();");
    f.line("let span = Span::new(\"span\");");
    for _ in 0..5 + rng.below(12) {
        statement(&mut f, rng, 0);
    }
    // `#[batch_scope]` needs a loop.
    if !f.lines.iter().any(|l| l.trim_start().starts_with("for ")) {
        emit_loop(&mut f, rng);
    }
    f.observe(rng);
    let mut tail = vec!["acc".to_string()];
    for v in f.live.clone() {
        if rng.chance(30) {
            tail.push(format!("{v}.len() as i64"));
        }
    }
    f.line(tail.join(" + "));
    let mut out = vec![format!("pub fn k{index}(p: Mem, flag: bool) -> i64 {{")];
    out.extend(f.lines);
    out.push("}".to_string());
    f.counts.functions = 1;
    (out, f.counts)
}

/// The corpus files `(file name, contents)` and what they contain.
pub fn generate() -> (Vec<(String, String)>, Counts) {
    generate_with(SEED, FUNCTIONS, FILES, false)
}

/// `function_count` functions from `seed` in `file_count` files; `extended`: with the statements of
/// [`extended_statement`] too.
pub fn generate_with(
    seed: u64,
    function_count: usize,
    file_count: usize,
    extended: bool,
) -> (Vec<(String, String)>, Counts) {
    let mut rng = Rng(seed);
    let per_file = function_count.div_ceil(file_count);
    let mut files = Vec::new();
    let mut total = Counts::default();
    for file in 0..file_count {
        let range = file * per_file..((file + 1) * per_file).min(function_count);
        let mut counts = Counts::default();
        let functions: Vec<(usize, Vec<String>)> = range
            .clone()
            .map(|i| {
                let (lines, c) = function(i, &mut rng, extended);
                counts.functions += c.functions;
                counts.kept += c.kept;
                counts.observations += c.observations;
                counts.droppable += c.droppable;
                (i, lines)
            })
            .collect();
        total.functions += counts.functions;
        total.kept += counts.kept;
        total.observations += counts.observations;
        total.droppable += counts.droppable;
        let mut text = String::new();
        text.push_str(
            "// @generated by tests/gen/kept_generator.rs: do not edit (VG_BLESS=1 rewrites it).\n",
        );
        text.push_str(&format!(
            "// {} functions, {} kept values, {} observations of them, {} droppable locals.\n",
            counts.functions, counts.kept, counts.observations, counts.droppable
        ));
        text.push_str("#![allow(unused_variables, unused_mut, unused_assignments, unused_imports, dead_code, deprecated)]\n");
        text.push_str("#![allow(clippy::all)]\n\n");
        for (module, attr) in [
            ("without", ""),
            ("with", "#[vramguard::inference]\n"),
            ("scoped", "#[vramguard::batch_scope]\n"),
        ] {
            let more = if extended {
                "block_on, pending_once, View, "
            } else {
                ""
            };
            text.push_str(&format!(
                "pub mod {module} {{\n    use super::super::drop_support::{{{more}eat, ev, Mem, Pool, Registry, Span}};\n    use std::cell::RefCell;\n    use std::rc::Rc;\n\n"
            ));
            for (_, lines) in &functions {
                if !attr.is_empty() {
                    text.push_str(&format!("    {attr}"));
                }
                for line in lines {
                    text.push_str(&format!("    {line}\n"));
                }
                text.push('\n');
            }
            text.push_str("}\n\n");
        }
        text.push_str(
            "/// `(name, without, with #[inference], with #[batch_scope])` for every function.\n",
        );
        text.push_str("pub const CASES: &[super::Case] = &[\n");
        for (i, _) in &functions {
            text.push_str(&format!(
                "    (\"k{i}\", without::k{i}, with::k{i}, scoped::k{i}),\n"
            ));
        }
        text.push_str("];\n");
        files.push((format!("kept_corpus_{file}.rs"), text));
    }
    (files, total)
}
