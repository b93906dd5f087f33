//! A union cannot derive `DropAtLastUse`: which field is alive is not known.
use vramguard::DropAtLastUse;

#[derive(DropAtLastUse)]
union Bits {
    float: f32,
    int: u32,
}

fn main() {}
