#[vramguard::inference]
struct Config {
    hidden: usize,
}

fn main() {
    let _ = Config { hidden: 1 }.hidden;
}
