//! Attribute macros of [vramguard](https://docs.rs/vramguard). Use them through the facade:
//! `#[vramguard::inference]`, `#[vramguard::batch_scope]`, `#[vramguard::allow(lint)]` and
//! `#[derive(vramguard::DropAtLastUse)]`; each one's documentation below is the user's reference.
//!
//! What each does:
//! - `#[inference]`: runs a function under no-grad and drops each local of a `DropAtLastUse` type
//!   right after its last use;
//! - `#[batch_scope]`: makes each iteration of a function's loops a runtime batch scope, with
//!   the same drops inside the loop body;
//! - `#[allow(lint)]`: silences one of the memory lints that both attributes run;
//! - `#[derive(DropAtLastUse)]`: declares a type whose values those attributes may drop.
//!
//! Where each part lives (each attribute is parse → validate → expand):
//! - `inference/` and `batch_scope/`: the two attributes; `options.rs`: the option parsing
//!   they share;
//! - `liveness/`: drop at last use, shared by both; its module doc explains the technique
//!   and names the phases (`analysis/`, `plan/`, `rewrite.rs`, `emit.rs`);
//! - `lints/`: runs the memory lints (their rules are the `vramguard-lints` crate's, shared
//!   with `cargo vramguard lint`) and turns findings into warnings; `#[allow]`;
//! - `drop_at_last_use.rs`: `#[derive(DropAtLastUse)]`;
//! - `common.rs`: helpers the others share (the facade's path, errors next to the item,
//!   identifier and attribute walks).

mod batch_scope;
mod common;
mod drop_at_last_use;
mod inference;
mod lints;
mod liveness;
mod options;

use proc_macro::TokenStream;

/// Runs a function with grad recording disabled and drops each local right after its last
/// use.
///
/// In Rust a value lives until the end of its scope, and shadowing frees nothing: a forward pass
/// written one `let` per step keeps every intermediate alive until it returns. This attribute
/// makes the peak "the few values live at once" instead of "the sum of all intermediates",
/// with no other change to the code.
///
/// ```ignore
/// #[vramguard::inference]
/// fn forward(&self, xs: &Tensor) -> Result<Tensor> {
///     let _enter = self.span.enter();      // a guard: never dropped early
///     let xs = self.fc1.forward(xs)?;
///     let xs = xs.gelu()?;                 // the previous `xs` is freed here
///     let xs = self.fc2.forward(&xs)?;     // and here
///     Ok(xs)
/// }
/// ```
///
/// # Where it goes
///
/// Free functions, methods (`&self`, `&mut self`, `self`), trait impl methods, trait methods
/// with a default body, whole `impl` blocks (every non-`const` method with a body), generic
/// functions, functions returning `impl Trait`, and `async fn`. Anything else (a struct, a
/// `const fn`, an extern block, a trait declaration, a trait method without a body…) is a
/// compile error that says so.
///
/// # What it does
///
/// 1. **No grad**: the whole body runs under a no-grad guard (`NoGradGuard`), and under the
///    no-grad modes of the other libraries that have one (tch's, with the facade's `tch`
///    feature; candle and burn have none: see `vramguard::DropAtLastUse`). In an `async fn`
///    grad mode is set around each poll of the body instead (a guard must not live across
///    `.await`: the task may resume on another thread). For an `impl Trait` return, grad mode
///    covers the call, not the later use of the returned value.
/// 2. **Drops at last use, for memory only**: a local (or by-value parameter) whose *type* is
///    [`DropAtLastUse`](https://docs.rs/vramguard/latest/vramguard/trait.DropAtLastUse.html) — a
///    tensor, a container of tensors, a numeric buffer, a type deriving `DropAtLastUse` — is freed
///    right after the statement of its last use. Every other value keeps exactly the drop point and
///    the drop order it has without the attribute. The macro finds last uses from the syntax; the
///    compiler decides, from each value's type, whether it is dropped there (see below).
///    Nested blocks (branches, loop bodies, closures, async blocks) get the same treatment for
///    the locals they declare. A local declared outside a loop and used inside is freed after
///    the loop. A value whose last use is inside an `if`/`match` (an `else if` chain, a
///    `match` with guards, an `if let`) is freed inside it: in the branch that uses it, at its
///    last use there; in every other branch, at its start (never inside a condition or a
///    guard, which may run and fail before another arm). After a `let … else` whose `else`
///    uses it, it is freed after the statement (the `else` diverges).
/// 3. **In place at last use** (issue #21): where a value is moved into the statement of its
///    last use and is the receiver of a listed op there — `relu`, `gelu`, `tanh`, `sigmoid`,
///    `exp`, `log`, `add`, `sub`, `mul`, `div`, `broadcast_add`, `broadcast_sub`,
///    `broadcast_mul`, `broadcast_div`, `add_scalar`, `mul_scalar`, `softmax`, `affine`,
///    `layer_norm` with their usual argument counts, and ndarray's `mapv` — and is mentioned
///    nowhere else in the statement (nor inside a closure, loop or macro there), the call lets
///    the value's type choose a consuming form: vramguard's `Tensor` writes the result into
///    the dying value's buffer when no other handle, view or saved-for-backward copy can see it
///    (else it computes out of place, as written), an owned `ndarray` array of numbers maps
///    with `mapv_into` when the closure returns the element type and the array is contiguous
///    (else with `mapv`, as written), and every other type runs the call exactly as written. Results are
///    bit-identical. `inplace = false` turns it off. The crate docs' library table says which
///    libraries' tensors get it, why candle's and tch's cannot have it safely (storage shared
///    with handles the macro cannot see) and what burn does by itself.
/// 4. **Lints** the body (`.backward()` here is a warning: there is no graph to differentiate).
/// 5. **Notices in debug builds** (never in release builds), one `warning: vramguard:` line on
///    stderr each, for the two cases where the drops would free nothing without another sign:
///    a tensor of a supported library (or a `Vec`, `Box`, `Option`… of them) reaches a drop
///    point while the facade's feature for that library is off, or is another version of the
///    library (once per type; the line names the type and the `Cargo.toml` change); and a
///    dropped candle tensor still records candle's graph (`Tensor::track_op()`: a `Var`, or
///    computed from one), so nothing it holds is freed (once; the line says to load the
///    weights as plain tensors or `detach()` them). See `vramguard::DropAtLastUse`.
///
/// # The contract
///
/// Code that compiles without the attribute compiles with it and computes the same; the only
/// difference is that values of `DropAtLastUse` types are freed earlier. A guard (named or
/// `_`-prefixed), an `Rc`/`Arc`/`Weak`, a file, a temporary directory, a channel end, a handle,
/// a closure and every `Copy` value are not `DropAtLastUse`: their drops happen where they always
/// did, in the same order, so a lock is held, a count reads, a directory exists and a channel
/// stays open exactly as long as without the attribute.
///
/// How the type decides: at each drop point the generated code asks a probe that method
/// resolution answers from the value's type (`T: DropAtLastUse`, else keep), so a value of any
/// other type keeps its scope end and drop order. A statement that may move the value is written
/// twice, with and without the value moved in, and the type chooses; this happens at most once
/// per nesting level, so the output stays within (depth + 1) × the input.
///
/// The macro sees no types, so when it cannot show an early drop is possible it keeps the
/// value alive; every mistake it could still make is a borrow-check or move error at compile time,
/// never a dangling reference or a changed result: the rewrite only moves values and never
/// adds `unsafe` code. Such an error points at your statement; when it is a use after the
/// move, rustc quotes the signature of `__private::last_use` or `drop_at_last_use`, which names the
/// escape hatch (`keep(name)`, `#[keep]`). `cargo vramguard check` finds them all at once.
///
/// Never dropped early (they live to the end of their scope, as without the attribute):
/// - values whose type is not `DropAtLastUse` (above);
/// - guards: `_`-prefixed bindings, and bindings never used after their declaration;
/// - names in `keep(..)`, `let`s marked with the inert `#[keep]`, `let x;` declared without
///   a value;
/// - a value whose last use is the block's tail expression or its last statement (nothing to
///   gain);
/// - a value whose type a later use decides (`Vec::new()`, `Default::default()`, `None`,
///   `s.parse()`, `.collect()` without a turbofish, `x as _`) when its last use may move it:
///   the probe would run before the type is known;
/// - a value that may be moved where the statement cannot be written twice: a `let` whose
///   value may hold a closure or async block (each has a type of its own), a statement that
///   defines an item;
/// - a value a later binding may borrow while the borrow's origin may also have moved it (an
///   unknown method called on it, an unknown macro, a non-`move` closure capturing it), and
///   a value a guard borrows (`cell` after `let w = cell.borrow_mut();`: the guard's drop uses
///   the borrow);
/// - a value borrowed by a binding that outlives a redeclaration (shadowing) of its name, a
///   value a field of which may have been moved out before its last use, a value passed by
///   value (or as the receiver of a call not followed by `?`, which may take `self` by value,
///   as burn's ops do) in the statement where a borrower of it is last used (`let shape =
///   labels.dims();` then `if c { w.expand(shape) } else { labels.flatten(0, 0) }`), a value
///   whose address is taken as a raw pointer
///   (`as *const _`, `&raw`, `addr_of!`, `.as_ptr()`), a value stored into something outside
///   the block (`self.f = …`, a static);
/// - a value whose last use is an unknown statement macro (it might declare bindings) or the
///   `else` block of a `let … else`;
/// - a reference an accessor returns (`let dims = xs.dims();`, `node.kind()`, `t.as_ref()`):
///   it frees nothing, and dropping it would read the borrow after the statement of its last
///   use, which may write what it borrows (`xs = xs.reshape((dims[0] * dims[1], dims[2]))?`);
///   likewise any binding that may borrow a local which the statement of its own last use
///   moves or writes (`=`, `+=`, `&mut`, `push`, a `*_mut` method);
/// - anything inside a `const { }` block, and anything in a function that contains `unsafe`
///   code (or is an `unsafe fn`): it gets the no-grad guard only, because unsafe code may rely
///   on a value living to the end of its scope in ways no syntactic analysis sees. Move the
///   unsafe part (a kernel launch, say) into a helper function to get the drops back.
///
/// # Borrows: what keeps a value alive
///
/// A binding that may borrow a local keeps it alive until the binding's own last use: `&x`,
/// `&x[..]`, `x.field` read through such a reference, non-`move` closures capturing `x`,
/// borrows stored with `v.push(&x)`, `r = &x` or `fill(&mut out, &x)` (a free function may
/// store through a `&mut` argument), also through a name an `if let`, `match` arm or closure
/// binds (`if let Some(g) = groups.last_mut() { g.push(&x) }` stores into `groups`), what a
/// local closure returns (`get()` after
/// `let get = || &x;`), `let r = &make(&x);` and `let o = Some(&make(&x));` (temporary lifetime
/// extension), and the results of calls decided by name:
/// - **owned results** (borrow nothing): tensor operations of candle, burn, tch, dfdx and
///   vramguard (`matmul`, `broadcast_add`, `relu`, `gelu`, `softmax`, `reshape`, `transpose`,
///   `t`, `contiguous`, `narrow`, `sum_keepdim`, `forward`, `apply`, `to_dtype`, …), and std
///   methods returning plain values (`clone`, `to_vec`, `to_string`, `len`, `dims1`…`dims5`, …);
///   free functions `softmax`, `softmax_last_dim`, `layer_norm`, `linear`, `cat`, `stack`,
///   `zeros`, … and associated functions of `Tensor`, `String`, `Vec`; arithmetic and
///   comparison operators (`&a + &b`); `format!` and the other formatting macros;
/// - **borrowing results** (borrow the receiver): `dims`, `shape`, `stride`, `layout`,
///   `device`, `storage`, `storage_and_layout`, `as_ref`, `as_slice`, `as_str`, `iter`,
///   `iter_mut`, `keys`, `values`, `get`, `first`, `last`, `lines`, `split`, `chunks`,
///   `windows`, `lock`, `read`, `write`, `borrow`, `deref`, `drain`, `entry`, `peek`, `kind`
///   (an AST node's `&Kind`), …; of these, `last`, `lines`, `split`, `bytes` and `data` called
///   directly on a local may also consume it (`Iterator::last`, `BufRead::lines`, a builder's
///   `data(self)`), so a binding of their result keeps that local to the end of its scope;
/// - **pass-through** (the receiver's value flows on): `unwrap`, `expect`, `ok`, `map_err`,
///   `context`, `into`, `into_*`, `map`, `filter`, `zip`, `chain`, `collect`, `cloned`, …,
///   `max`, `min` and `flatten` (tensor ops, but also iterator methods yielding references), and
///   `?`, `.await`;
/// - **everything else** gets the conservative default: an unknown *method*'s result may
///   borrow its receiver (lifetime elision ties it to `self`, so `&` arguments are not
///   sources: `self.layer.forward_custom(&x)` frees `x`), and an unknown *free function*'s
///   result may borrow its `&` arguments (`helper(&x)` keeps `x` while the result lives).
///
/// Extend the lists per function: `#[inference(owned(my_op, helper))]` declares names whose
/// results own their data; `#[inference(borrows(view_of))]` declares methods whose result
/// borrows the receiver.
///
/// The conservative default gives up a few drops on code that calls unknown
/// borrowing-looking methods (the test `conservative_default_cost` measures how many on the
/// generated corpus). On model code that calls its own helpers
/// (`fn block(x: &Tensor) -> Result<Tensor>`), each unlisted helper keeps its input alive while
/// its output lives: list such helpers in `owned(..)`.
///
/// # Options
///
/// - `keep(a, b)`: never drop these locals early (a name that matches no local is an error);
/// - `drops = false`: only the no-grad guard (and the lints), no early drops;
/// - `inplace = false`: drops at last use, but every op computed out of place, as written;
/// - `crate = path` (or `crate = "path"`): the facade under another name, for generated paths;
/// - `owned(name, ..)`, `borrows(name, ..)`: extend the name lists (above).
///
/// Unknown or malformed options are errors that list the accepted ones.
///
/// # Limits
///
/// - A fallible method (followed by `?`) with explicit lifetimes tying its result to an `&`
///   argument (`fn pick<'a>(&self, x: &'a T) -> Result<&'a U>`): a fallible op's result is
///   taken to be owned, as tensor ops' are, so the compile error (`x` is moved while borrowed) is
///   fixed with `keep(x)`. Without `?`, a method's result is taken to borrow its `&` arguments,
///   and so is it in a function returning `Option`, whose `?` unwraps a lookup
///   (`re.find(&line)?`), not a tensor op.
/// - Values whose last use is the function's value (its tail expression) gain nothing. A value
///   that a non-`move` closure, a guard method in a `match`/`if let` scrutinee, or the
///   statement's own value may borrow is dropped after the whole `if`/`match`, not inside
///   its branches.
/// - Only `DropAtLastUse` types are freed early: your own tensor-holding structs need
///   `#[derive(vramguard::DropAtLastUse)]` (or a manual impl) to benefit.
/// - With `#[async_trait]` on the enclosing `impl`, that macro runs first and turns the method
///   into one returning a boxed future: grad mode then covers creating it, not polling it.
///
/// Compile errors in user code point at user code (the rewrite keeps spans) and are reported
/// once, as without the attribute: the two copies of a statement written twice differ only in
/// the rebinding and in-place receivers, which keep the user's spans and the methods' own
/// definitions, so rustc sees the same diagnostic twice and shows it once (the compile-fail
/// cases `one_diagnostic_*`). `cargo expand` output stays readable (see
/// `tests/expand/*.expanded.rs`).
#[proc_macro_attribute]
pub fn inference(args: TokenStream, item: TokenStream) -> TokenStream {
    inference::expand(args.into(), item.into()).into()
}

/// Makes every loop of a function (or only the loops marked `#[batch_scope]`) a per-iteration
/// batch scope: each iteration enters a runtime `BatchScope` that accounts what it allocates,
/// reports what escapes it and warns when live memory grows iteration after iteration; the
/// iteration's locals are dropped at their last use, and a listed op on one of them there
/// runs in place as under [`inference`] (never on a tensor autograd saved: with grad mode on,
/// the runtime computes out of place whenever a backward could read the buffer); and the body
/// is linted.
///
/// ```ignore
/// #[vramguard::batch_scope(strict, every = 100)]
/// fn train(model: &mut Gan, data: &Loader) -> Result<(), Error> {
///     for batch in data.batches() {          // one scope per iteration
///         let fake = model.generate(&batch)?;
///         // ...
///     }
///     Ok(())
/// }
/// ```
///
/// Options (on the function; all but `crate` also on a loop marker
/// `#[batch_scope(label = "d_step")] for ... {}`):
/// - `label = "…"`: the scope label (default: `module::fn:line` of the loop); on the function
///   only when it scopes a single loop;
/// - `strict`: panic with the report when live memory grows for `warn_after` iterations (tests);
/// - `warn_after = N`: growing iterations before a warning (default 8);
/// - `warnings = "auto" | "stderr" | "tracing"`: where the warning goes (default `"auto"`:
///   stderr, or a `tracing` warning when a subscriber is installed);
/// - `every = N`: call `empty_cache` every N iterations on the devices the scope allocated on;
/// - `crate = path`: the path of the `vramguard` crate when it is renamed.
///
/// Loops whose body contains `.await` cannot be scoped (the scope belongs to a thread); a
/// `const fn`, a non-function item, a function without loops, unknown options and markers
/// that are not on loops are compile errors. Reports: `vramguard::scope::last_report(label)`.
#[proc_macro_attribute]
pub fn batch_scope(args: TokenStream, item: TokenStream) -> TokenStream {
    batch_scope::expand(args.into(), item.into()).into()
}

/// Suppresses vramguard lints by name: `#[vramguard::allow(accumulates_across_iterations)]`
/// on a function processed by `#[inference]` or `#[batch_scope]` (either attribute order), or on
/// a statement or a `match` arm inside one. Misspelled names are errors that list the known lints:
/// `backward_in_inference`, `accumulates_across_iterations`, `graph_across_iterations`,
/// `inplace_on_activation`, `empty_cache_is_not_free`.
///
/// The warnings are rustc `deprecated` warnings carrying the lint's message, so rustc's own
/// `#[allow(deprecated)]`, `#[deny(deprecated)]` and `-D warnings` apply to them as well.
#[proc_macro_attribute]
pub fn allow(args: TokenStream, item: TokenStream) -> TokenStream {
    lints::expand_allow(args.into(), item.into()).into()
}

/// Declares a struct or enum `vramguard::DropAtLastUse` when every field is: `#[inference]` and
/// `#[batch_scope]` may then free its values at their last use.
///
/// ```ignore
/// #[derive(vramguard::DropAtLastUse)]
/// struct Activations {
///     hidden: Tensor,
///     attention: Vec<Tensor>,
/// }
/// ```
///
/// A field whose type is not `DropAtLastUse` (a guard, an `Rc`, a file…) is a compile error at that
/// field; a field of a generic type makes the implementation conditional on it. Only derive it
/// for a type whose drop frees memory and does nothing anyone can observe (see
/// `vramguard::DropAtLastUse`). `#[vramguard(crate = path)]` names the facade when it is renamed.
#[proc_macro_derive(DropAtLastUse, attributes(vramguard))]
pub fn derive_drop_at_last_use(item: TokenStream) -> TokenStream {
    drop_at_last_use::expand(item.into()).into()
}
