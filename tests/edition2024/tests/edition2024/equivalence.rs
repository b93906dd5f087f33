//! The `#[inference]` pass cases and the generated corpus, compiled as edition 2024 and run:
//! the generated code must compile and behave the same on both editions.
#![allow(clippy::duplicate_mod)] // each pass case includes the shared support module itself

#[path = "../../../ui/inference/pass/adversarial.rs"]
mod adversarial;
#[path = "../../../ui/inference/pass/basics.rs"]
mod basics;
#[path = "../../../ui/inference/pass/borrows.rs"]
mod borrows;
#[path = "../../../ui/inference/pass/branches.rs"]
mod branches;
#[path = "../../../ui/inference/pass/control.rs"]
mod control;
#[path = "../../../ui/inference/pass/last_shapes.rs"]
mod last_shapes;
#[path = "../../../ui/inference/pass/macros.rs"]
mod macros;
#[path = "../../../ui/inference/pass/model.rs"]
mod model;
#[path = "../../../ui/inference/pass/placement.rs"]
mod placement;
#[path = "../../../ui/inference/pass/third_party.rs"]
mod third_party;
#[path = "../../../ui/inference/pass/tricky.rs"]
mod tricky;

#[path = "../../../ui/inference/support.rs"]
mod support;
#[rustfmt::skip]
#[path = "../../../gen/corpus_0.rs"]
mod corpus_0;
#[rustfmt::skip]
#[path = "../../../gen/corpus_1.rs"]
mod corpus_1;
#[rustfmt::skip]
#[path = "../../../gen/corpus_2.rs"]
mod corpus_2;
#[rustfmt::skip]
#[path = "../../../gen/corpus_3.rs"]
mod corpus_3;

#[test]
fn pass_cases_edition_2024() {
    adversarial::main();
    basics::main();
    borrows::main();
    branches::main();
    control::main();
    last_shapes::main();
    macros::main();
    model::main();
    placement::main();
    third_party::main();
    tricky::main();
}

#[test]
fn generated_corpus_edition_2024() {
    let mut earlier = 0;
    for (name, without, with) in [
        corpus_0::CASES,
        corpus_1::CASES,
        corpus_2::CASES,
        corpus_3::CASES,
    ]
    .concat()
    {
        for flag in [false, true] {
            let c = support::compare(
                name,
                || without(support::mk("p", 1), flag),
                || with(support::mk("p", 1), flag),
            );
            earlier += c.earlier;
        }
    }
    assert!(earlier >= 1000, "{earlier}");
}
