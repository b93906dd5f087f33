//! A union cannot derive `Release`: which field is alive is not known.
use vramguard::Release;

#[derive(Release)]
union Bits {
    float: f32,
    int: u32,
}

fn main() {}
