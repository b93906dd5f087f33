//! The generated-program test of the drop contract (issue #9): random functions (fixed
//! seed, see `tests/gen/kept_generator.rs`) that mix droppable `Mem` values with kept values —
//! `Rc` clones, `RefCell` borrows, span guards (named and `_`), pooled connections, handles
//! with `Copy` ids — and log observations of the kept values. Each function is compiled plain,
//! under `#[inference]` and under `#[batch_scope]`; each annotated run must return the same
//! value, log every non-`free` event identically and in the same order, and free no `Mem`
//! later than the plain run. Across the corpus, many frees must happen strictly earlier.

#[path = "../gen/kept_generator.rs"]
mod kept_generator;

#[path = "../gen/golden.rs"]
mod golden;

use crate::support::Mem;
// The generated modules name the support module `super::super::drop_support`.
use crate::support as drop_support;

/// `(name, plain, #[inference], #[batch_scope])`.
pub type Case = (
    &'static str,
    fn(Mem, bool) -> i64,
    fn(Mem, bool) -> i64,
    fn(Mem, bool) -> i64,
);

#[rustfmt::skip]
#[path = "../gen/kept_corpus_0.rs"]
mod kept_corpus_0;
#[rustfmt::skip]
#[path = "../gen/kept_corpus_1.rs"]
mod kept_corpus_1;

#[test]
fn kept_corpus_is_current() {
    let (files, counts) = kept_generator::generate();
    println!("{counts:?}");
    golden::check_or_bless(files);
}

#[test]
fn generated_kept_values_keep_their_place_and_mem_is_freed_earlier() {
    let cases = [kept_corpus_0::CASES, kept_corpus_1::CASES].concat();
    let (_, counts) = kept_generator::generate();
    assert_eq!(cases.len(), counts.functions);
    assert!(counts.kept >= 700, "{counts:?}");
    let (mut inference_earlier, mut scoped_earlier, mut kept_events) = (0, 0, 0);
    let mut functions_with_earlier = 0;
    for (name, plain, inference, scoped) in &cases {
        let mut any = false;
        for flag in [false, true] {
            let c = crate::support::compare(
                &format!("{name}({flag}) #[inference]"),
                || plain(Mem::new("p", 1), flag),
                || inference(Mem::new("p", 1), flag),
            );
            inference_earlier += c.earlier;
            kept_events += c.kept;
            any |= c.earlier > 0;
            let c = crate::support::compare(
                &format!("{name}({flag}) #[batch_scope]"),
                || plain(Mem::new("p", 1), flag),
                || scoped(Mem::new("p", 1), flag),
            );
            scoped_earlier += c.earlier;
        }
        functions_with_earlier += usize::from(any);
    }
    println!(
        "{counts:?}: {kept_events} kept events checked in place; {functions_with_earlier} \
         functions with an earlier free under #[inference]; earlier frees: {inference_earlier} \
         (#[inference]), {scoped_earlier} (#[batch_scope])"
    );
    assert!(
        functions_with_earlier >= counts.functions / 2,
        "{functions_with_earlier}"
    );
    assert!(inference_earlier >= 200, "{inference_earlier}");
    assert!(scoped_earlier >= 20, "{scoped_earlier}");
}
