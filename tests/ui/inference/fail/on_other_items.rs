#[vramguard::inference]
static WEIGHTS: [f32; 2] = [0.0, 1.0];

#[vramguard::inference]
const HIDDEN: usize = 768;

#[vramguard::inference]
type Batch = Vec<f32>;

#[vramguard::inference]
mod layers {}

#[vramguard::inference]
use std::vec::Vec as List;

#[vramguard::inference]
union Bits {
    int: u32,
    float: f32,
}

#[vramguard::inference]
extern crate std as standard;

struct Model;

#[vramguard::inference]
impl Model {
    const SIZE: usize = 1;
    const fn size() -> usize {
        Self::SIZE
    }
}

fn main() {
    let _: (Batch, List<f32>, usize, usize) = (Vec::new(), Vec::new(), HIDDEN, WEIGHTS.len());
    let _ = Model::size();
    let _ = Bits { int: 1 };
    let _ = standard::mem::size_of::<u8>();
}
