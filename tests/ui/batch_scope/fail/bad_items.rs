#[vramguard::batch_scope]
struct NotAFunction;

#[vramguard::batch_scope]
const fn constant() -> u32 {
    let mut n = 0;
    while n < 3 {
        n += 1;
    }
    n
}

#[vramguard::batch_scope]
fn no_loops() -> u32 {
    1
}

fn main() {}
