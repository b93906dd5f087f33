//! `#[vramguard(..)]` on a type deriving `DropAtLastUse` takes only `crate = path`.
use vramguard::{DropAtLastUse, Tensor};

#[derive(DropAtLastUse)]
#[vramguard(krate = vramguard)]
struct Misspelled {
    t: Tensor,
}

#[derive(DropAtLastUse)]
#[vramguard(crate = "vramguard")]
struct Quoted {
    t: Tensor,
}

fn main() {}
