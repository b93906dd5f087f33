//! `#[inference]` run and compared: the pass cases and a generated corpus computing the same
//! with and without the attribute (`equivalence`, `generated`), in place at last use
//! (`inplace`), exact bytes (`memory`) and a drop inside a branch (`branches`).

mod branches;
mod equivalence;
mod generated;
mod inplace;
mod memory;
