//! A field whose type is not `DropAtLastUse` (an `Rc` another handle can hold, a lock guard's
//! owner, a `Copy` scalar): each is an error at that field, saying why.
use std::rc::Rc;
use std::sync::Mutex;

use vramguard::{DropAtLastUse, Tensor};

#[derive(DropAtLastUse)]
struct Shared {
    weights: Tensor,
    owners: Rc<Tensor>,
}

#[derive(DropAtLastUse)]
struct Locked(Tensor, Mutex<Vec<f32>>);

#[derive(DropAtLastUse)]
enum Step {
    Done,
    Running { activations: Vec<Tensor>, count: usize },
}

fn main() {}
