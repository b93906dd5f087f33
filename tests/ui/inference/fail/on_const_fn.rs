#[vramguard::inference]
const fn size() -> usize {
    4
}

fn main() {
    let _ = size();
}
