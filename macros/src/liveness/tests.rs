//! Unit tests of the drop-at-last-use rewrite on source text.

use super::*;
use analysis::Source;
use proc_macro2::{TokenStream, TokenTree};
use quote::quote;
use syn::Stmt;

/// Rewrites the body of `fn` source and returns it pretty-printed, with the report.
pub(crate) fn rewrite(source: &str, optimistic: bool) -> (String, DropReport) {
    let mut function: syn::ItemFn = syn::parse_str(source).expect("test source parses");
    let mut options = DropOptions::new(syn::parse_quote!(::vramguard));
    options.optimistic = optimistic;
    options.scalars = scalar_params(&function.sig);
    options.try_owns = !returns_option(&function.sig);
    let params = params_of(&function.sig);
    let report = insert_drops(&mut function.block, &params, &options);
    let file: syn::File = syn::parse_quote!(#function);
    (prettyplease::unparse(&file), report)
}

#[test]
fn debug_print() {
    if let Ok(path) = std::env::var("VG_DEBUG_SOURCE") {
        let source = std::fs::read_to_string(path).unwrap();
        let (text, report) = rewrite(&source, false);
        println!("{text}\n{report:?}");
    }
}

/// Every `fn` (also inside modules and `impl` blocks) of a file.
fn functions_of(source: &str) -> Vec<syn::ItemFn> {
    struct Collect(Vec<syn::ItemFn>);
    impl<'ast> syn::visit::Visit<'ast> for Collect {
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            self.0.push(f.clone());
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            self.0.push(syn::ItemFn {
                attrs: Vec::new(),
                vis: syn::Visibility::Inherited,
                modifiers: Default::default(),
                sig: f.sig.clone(),
                block: Box::new(f.block.clone()),
            });
        }
    }
    let file: syn::File = syn::parse_str(source).expect("source parses");
    let mut collect = Collect(Vec::new());
    syn::visit::Visit::visit_file(&mut collect, &file);
    collect.0
}

fn totals(functions: &[syn::ItemFn], optimistic: bool) -> DropReport {
    let mut total = DropReport::default();
    for function in functions {
        let mut block = (*function.block).clone();
        let mut options = DropOptions::new(syn::parse_quote!(::vramguard));
        options.optimistic = optimistic;
        let report = insert_drops(&mut block, &params_of(&function.sig), &options);
        total.candidates += report.candidates;
        total.dropped_early += report.dropped_early;
        total.moved_at_last_use += report.moved_at_last_use;
    }
    total
}

/// What the conservative default (unknown calls may borrow) gives up, measured on the generated
/// corpus and the golden model inputs: bindings dropped early with the default vs. if every
/// unknown call were known to return an owned value. Printed; the figures go in the docs.
#[test]
fn conservative_default_cost() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut corpus = Vec::new();
    for i in 0..4 {
        let path = root.join(format!("tests/gen/corpus_{i}.rs"));
        if let Ok(text) = std::fs::read_to_string(path) {
            // Only the annotated copies (`with`), once each.
            let functions = functions_of(&text);
            let half = functions.len() / 2;
            corpus.extend(functions.into_iter().take(half));
        }
    }
    let mut models = Vec::new();
    for entry in std::fs::read_dir(root.join("tests/expand"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.ends_with(".rs") && !name.ends_with(".expanded.rs") {
            models.extend(functions_of(
                &std::fs::read_to_string(entry.path()).unwrap(),
            ));
        }
    }
    for (label, functions) in [
        ("generated corpus", &corpus),
        ("golden model inputs", &models),
    ] {
        let default = totals(functions, false);
        let optimistic = totals(functions, true);
        println!(
            "{label}: {} functions, {} non-guard bindings used after declaration; dropped \
             early: {} with the conservative default, {} if every unknown call returned an owned \
             value; moved by their last use (nothing to drop): {}",
            functions.len(),
            default.candidates,
            default.dropped_early,
            optimistic.dropped_early,
            default.moved_at_last_use
        );
        assert!(optimistic.dropped_early >= default.dropped_early);
    }
    assert!(corpus.len() >= 500 || corpus.is_empty());
}

#[test]
fn drops_follow_the_rules() {
    let (text, report) = rewrite(
        "fn f(a: T, n: usize) -> T {
            let _guard = span.enter();
            let unused_guard = lock.lock();
            let b = a.matmul(&w)?;
            let d = b.dims();
            let c = b.relu()?;
            let e = d[0] + n;
            let x = make();
            let y = x.mystery();
            let z = c.exp()?;
            let out = z.add(&y)?;
            out
        }",
        false,
    );
    // `a` moves into its last statement; `b` is dropped after `d`'s last use; guards,
    // the primitive parameter, `d` (a reference, by the accessor that returns it), and `x`
    // (an unknown method on it may have borrowed it while `y` lives) are left alone; `out`
    // is the tail.
    assert!(text.contains("let a = __vg_last_use(a);"), "{text}");
    assert!(text.contains("__vg_drop(b);"), "{text}");
    for kept in ["_guard", "unused_guard", "x", "n", "d"] {
        for form in [
            format!("last_use({kept})"),
            format!("__vg_drop({kept})"),
            format!("__VgProbe(&{kept})"),
        ] {
            assert!(!text.contains(&form), "{form} in {text}");
        }
    }
    assert_eq!(
        report.dropped,
        ["a@0", "b@0", "c@0", "y@0", "z@0"].map(String::from)
    );
}

/// The size of the generated code: the statements written twice and the probes, over the
/// generated corpus. Each statement is written at most twice per nesting level, so the output
/// stays a small multiple of the input; the figure is printed for the docs, and the bound
/// catches a rule that starts duplicating (or probing) far more than it did.
#[test]
fn generated_size_stays_linear() {
    fn tokens(stream: TokenStream) -> usize {
        stream
            .into_iter()
            .map(|t| match t {
                TokenTree::Group(g) => 2 + tokens(g.stream()),
                _ => 1,
            })
            .sum()
    }
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut corpus = Vec::new();
    for i in 0..4 {
        let path = root.join(format!("tests/gen/corpus_{i}.rs"));
        let text = std::fs::read_to_string(path).expect("the generated corpus is checked in");
        let functions = functions_of(&text);
        let half = functions.len() / 2;
        corpus.extend(functions.into_iter().take(half));
    }
    let (mut input, mut output, mut probes, mut written_twice) = (0, 0, 0, 0);
    for function in &corpus {
        let mut block = (*function.block).clone();
        input += tokens(quote!(#block));
        insert_drops(
            &mut block,
            &params_of(&function.sig),
            &DropOptions::new(syn::parse_quote!(::vramguard)),
        );
        let text = quote!(#block).to_string();
        probes += text.matches("__VgProbe :: of").count();
        written_twice += text.matches("__vg_last_use (").count();
        output += tokens(quote!(#block));
    }
    let ratio = output as f64 / input as f64;
    println!(
        "generated corpus: {} functions, {input} tokens in, {output} out ({ratio:.2}x), \
         {probes} probes, {written_twice} bindings moved into a statement written twice",
        corpus.len()
    );
    assert_eq!(corpus.len(), 520);
    assert!(ratio < 2.0, "generated code grew to {ratio:.2}x its input");
}

#[test]
fn locals_not_droppable_by_their_syntax_get_no_probe() {
    let (text, _) = rewrite(
        "fn f(a: T, n: usize) -> usize {
            let count = 3;
            let view = &a;
            let width = n as u32;
            let big = n > 2 && count < 9;
            let span = 0..n;
            let name: &str = \"x\";
            let held = (a.relu()?);
            let total = view.len() + width as usize + usize::from(big) + span.len() + name.len() + count;
            g(&held);
            total
        }",
        false,
    );
    for plain in ["count", "view", "width", "big", "span", "name"] {
        assert!(
            !text.contains(&format!("__VgProbe(&{plain})")),
            "{plain} probed: {text}"
        );
    }
    // A parenthesised call is not plain: its value may be `DropAtLastUse`.
    assert!(text.contains("__VgProbe(&held)"), "{text}");
}

/// Numbers by their syntax (issue #19, compile time): sizes, arithmetic on numbers, number
/// methods on numbers, primitive parameters, `for` variables over a range of numbers, seen in
/// nested blocks too. None is probed, and no statement is written twice for one. What might be
/// a tensor is probed as before: an operator on a reference or on an unknown local, a name a
/// nested `let` or a closure parameter shadows.
#[test]
fn numbers_by_their_syntax_get_no_probe_even_in_nested_blocks() {
    let (text, _) = rewrite(
        "fn f(x: T, xs: T, eps: f64, heads: usize) -> T {
            let (b, t, c) = x.dims3()?;
            let rows = b * t;
            let last = x.dim(2)? - 1;
            let kshape = x.dims();
            let width = x.dims()[1];
            let scale = (eps * 2.0).sqrt();
            let limit = (rows + 1).min(c);
            let sum = &x + &x;
            let other = xs + 1;
            let mut acc = x.zeros_like()?;
            for h in 0..heads {
                let off = h * width + last;
                let s = off as f64 * scale;
                let scaled = x.affine(s, 0.0)?;
                acc = acc.add(&scaled)?;
                let rows = acc.clone();
                let kept = rows.relu()?;
                g(&kept);
                let f = |limit: T| limit.relu();
                g(&f(x.clone()));
            }
            g(&kshape);
            g(&sum);
            g(&other);
            h(rows, limit, c, last, width, acc)
        }",
        false,
    );
    for number in ["b", "t", "last", "width", "scale", "limit", "off", "s"] {
        for form in ["__VgProbe(&{})", "__vg_last_use({})"] {
            let probe = form.replace("{}", number);
            assert!(!text.contains(&probe), "{number} probed: {text}");
        }
    }
    for maybe_tensor in ["sum", "other", "scaled", "kept"] {
        assert!(
            text.contains(&format!("__VgProbe(&{maybe_tensor})")),
            "{maybe_tensor} not probed: {text}"
        );
    }
    // The loop's `rows` shadows the number with a tensor (a clone): that one is probed.
    assert!(text.contains("__VgProbe(&rows)"), "{text}");
}

/// Statements that move a value on every path get no second copy for it (issue #19, compile
/// time: a second copy of a statement with a closure makes every generic the closure reaches
/// compile twice): a consuming receiver ahead of closures and blocks, a `for` over a range, a
/// value a closure created unconditionally takes. A value whose type one `match` or `if` arm
/// shows to be a reference is never probed. What is moved only inside a branch, a loop body,
/// a macro or the right side of `&&` is still written twice.
#[test]
fn values_the_statement_itself_moves_get_no_second_copy() {
    let (text, _) = rewrite(
        "fn f(vars: Vec<T>, x: T, y: T, w: T, z: T, u: T, n: usize, flag: bool, l: L, src: S) -> R {
            let src = match l.offsets() {
                None => bail!(\"not contiguous\"),
                Some((a, b)) => &src[a..b],
            };
            let picked = if flag { &w } else { &z };
            let kept = vars.into_iter().filter(|v| v.ok()).map(|v| { let k = v.k(); k }).collect::<Vec<_>>();
            step();
            let take = move || y.relu();
            step();
            let parts = src.par_chunks(n).for_each(|c| c.fill(1.0));
            step();
            let seen = picked.len();
            step();
            let maybe = if flag { x.relu()? } else { zero() };
            step();
            let both = flag && u.ok();
            step();
            g(kept, take, parts, maybe, both, seen)
        }",
        false,
    );
    for moved in ["vars", "y", "src", "picked"] {
        for form in ["__VgProbe(&{})", "__vg_last_use({})"] {
            let probe = form.replace("{}", moved);
            assert!(!text.contains(&probe), "{moved} probed: {text}");
        }
    }
    // Moved only inside a branch, or borrowed on the right of `&&`: probed as before.
    for maybe_moved in ["x", "u"] {
        assert!(
            text.contains(&format!("__VgProbe(&{maybe_moved})")),
            "{maybe_moved} not probed: {text}"
        );
    }
}

/// A borrow carried through a name that an inner `let` shadows (`let a = a;`) reaches the
/// collection it is stored in: each binding holds what the earlier one held, resolved when it
/// is bound (see `analysis::mentions::Scanner::substitute_bound`).
#[test]
fn a_store_through_a_shadowed_inner_binding_keeps_its_origin() {
    let stmt: Stmt = syn::parse_quote! {
        {
            let a = &x;
            let a = a;
            sink.push(a);
        }
    };
    let local_macros = BTreeMap::new();
    let env = analysis::Env {
        owned: &[],
        borrows: &[],
        local_macros: &local_macros,
        optimistic: false,
        try_owns: true,
    };
    let facts = env.scan_stmt(&stmt);
    let stored: Vec<&Source> = facts
        .stores
        .iter()
        .filter(|(target, _)| target == "sink")
        .flat_map(|(_, sources)| sources)
        .collect();
    assert!(
        stored
            .iter()
            .any(|s| matches!(s, Source::Storage(name, ..) if name == "x")),
        "`sink` does not hold the borrow of `x`: {:?}",
        facts.stores
    );
}

/// Where the first drop probe of `name` is, and where `marker` is, in `text`.
fn first_probe_and(text: &str, name: &str, marker: &str) -> (usize, usize) {
    let probe = text
        .find(&format!("__VgProbe(&{name})"))
        .unwrap_or_else(|| panic!("no probe of {name}: {text}"));
    let marker = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker}: {text}"));
    (probe, marker)
}

#[test]
fn a_value_dying_in_one_branch_is_dropped_at_the_other_branch_s_start() {
    let (text, report) = rewrite(
        "fn f(c: bool) -> usize {
            let x = mk();
            let n = if c { let k = x.len(); first(k) } else { second() };
            n
        }",
        false,
    );
    assert_eq!(report.dropped, ["x@0"]);
    let (probe_at, second) = first_probe_and(&text, "x", "second()");
    let (_, first) = first_probe_and(&text, "x", "first(k)");
    // Once in each branch: after `let k` in the first, before `second()` in the other.
    assert_eq!(text.matches("__vg_drop(x)").count(), 2, "{text}");
    assert!(probe_at < first && text[first..].contains("__VgProbe(&x)"));
    assert!(text[first..second].contains("__vg_drop(x)"), "{text}");
}

#[test]
fn a_guard_is_never_a_drop_point() {
    let (text, _) = rewrite(
        "fn f(k: u32) -> usize {
            let x = mk();
            let n = match k { 0 if x.len() > 3 => zero(), 1 => one(), _ => other() };
            n
        }",
        false,
    );
    // The guard reads `x` unchanged; each arm's body starts with the drop.
    assert!(text.contains("0 if x.len() > 3 => {"), "{text}");
    assert_eq!(text.matches("__vg_drop(x)").count(), 3, "{text}");
    for body in ["zero()", "one()", "other()"] {
        let at = text.find(body).unwrap_or_else(|| panic!("{body}: {text}"));
        let arm = text[..at]
            .rfind("=> {")
            .unwrap_or_else(|| panic!("{body}: {text}"));
        assert!(text[arm..at].contains("__vg_drop(x)"), "{body}: {text}");
    }
}

/// Shapes whose branches cannot drop `x`: it is dropped at the whole statement (one probe,
/// after it or moving `x` into it), as before.
#[test]
fn branches_that_cannot_drop_a_value_leave_it_after_the_statement() {
    let shapes = [
        // A pattern binds the name: the arm's `x` is another value.
        "let n = match k { Some(x) => x.len(), None => { let m = x.len(); done(); m } };",
        // The scrutinee's guard lives through the arms.
        "let n = match x.lock().unwrap().len() { 0 => 1, _ => { done(); 2 } };",
        // An `if let` scrutinee that borrows `x`.
        "let n = if let Some(v) = x.first() { v.len() } else { done(); 0 };",
        // The statement's value borrows `x`.
        "let n = if k.is_some() { x.first() } else { done(); None };",
        // The condition may move `x`.
        "let n = if x.into_flag() { 1 } else { done(); 0 };",
    ];
    for shape in shapes {
        let (text, _) = rewrite(
            &format!(
                "fn f(k: Option<T>) -> usize {{
                    let x = mk();
                    {shape}
                    after(&n);
                    0
                }}"
            ),
            false,
        );
        // Dropped inside the branches, it would be probed in each of them.
        assert!(
            text.matches("__VgProbe(&x)").count() <= 1,
            "dropped inside a branch of `{shape}`:\n{text}"
        );
    }
}

/// `n` values declared before `n` nested `if`s, value `i` used at depth `i`: dropped at the
/// start of every `else` it is dead in, that would be `n²/2` drops. Each branch pays for its
/// start drops with its own statements (`plan::branches`), so the output stays linear.
#[test]
fn drops_inside_nested_branches_stay_linear() {
    const DEPTH: usize = 40;
    let mut source = String::from("fn deep(c: &[bool]) -> usize {\n");
    for i in 0..DEPTH {
        source += &format!("let a{i} = mk({i});\n");
    }
    for i in 0..DEPTH {
        source += &format!("if c[{i}] {{ let k{i} = a{i}.len(); work(k{i});\n");
    }
    source += "0\n";
    for i in (0..DEPTH).rev() {
        source += &format!("}} else {{ other({i}); 1 }}\n");
    }
    source += "}\n";
    let input = token_count(source.parse().expect("the input is tokens"));
    let (text, report) = rewrite(&source, false);
    let drops = text.matches("__vg_drop(").count();
    // The first levels still drop inside their branches.
    assert!(text.contains("other(0);"), "{text}");
    let first_else = text.find("other(0);").unwrap_or(0);
    assert!(
        text[..first_else].rfind("__vg_drop(a1)").is_some(),
        "`a1` is not dropped in the first `else`"
    );
    assert!(report.dropped_early >= 6, "{report:?}");
    // Each of the 40 `else`s (2 statements) pays for at most 6 drops; each value is dropped
    // at most once more where it is used.
    assert!(drops <= DEPTH * 6 + DEPTH, "{drops} drops");
    let output = token_count(text.parse().expect("the output is tokens"));
    assert!(
        output < 3 * input,
        "the output grew to {output} tokens from {input}"
    );
}

fn token_count(stream: TokenStream) -> usize {
    stream
        .into_iter()
        .map(|t| match t {
            TokenTree::Group(g) => 2 + token_count(g.stream()),
            _ => 1,
        })
        .sum()
}

#[test]
fn stores_back_and_forth_in_a_loop_do_not_multiply_borrows() {
    // Each store copies what its source holds into its target (`a.push(b[0].clone())`); the
    // next copies it back. Without the edges' and the resolved sources' duplicates dropped, the
    // borrow list doubled at each of these 40 stores (smartcore's SVD, 300 lines of `U.set(..)`
    // in one loop, took the macro past 20 GB); with them, `a` and `b` borrow `x` and `y` once.
    let mut source = String::from(
        "fn f(x: T, y: T, n: usize) -> usize {\n    let mut a = vec![&x];\n    \
         let mut b = vec![&y];\n    for _ in 0..n {\n",
    );
    for i in 0..40 {
        source.push_str(if i % 2 == 0 {
            "        a.push(b[0].clone());\n"
        } else {
            "        b.push(a[0].clone());\n"
        });
    }
    source.push_str(
        "    }\n    let c = a.len() + b.len();\n    let z = make();\n    c + z.len()\n}\n",
    );
    let (text, report) = rewrite(&source, false);
    // `x` and `y` live while the vectors that borrow them do, and are dropped after them.
    let order: Vec<usize> = [
        "__vg_drop(b)",
        "__vg_drop(a)",
        "__vg_drop(y)",
        "__vg_drop(x)",
    ]
    .iter()
    .map(|r| text.find(r).unwrap_or_else(|| panic!("{r} in {text}")))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(
        report.dropped,
        ["x@0", "y@0", "a@0", "b@0"].map(String::from)
    );
}
