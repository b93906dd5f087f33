//! `#[vramguard(..)]` on a type deriving `Release` takes only `crate = path`.
use vramguard::{Release, Tensor};

#[derive(Release)]
#[vramguard(krate = vramguard)]
struct Misspelled {
    t: Tensor,
}

#[derive(Release)]
#[vramguard(crate = "vramguard")]
struct Quoted {
    t: Tensor,
}

fn main() {}
