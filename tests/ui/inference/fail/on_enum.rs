#[vramguard::inference]
enum Activation {
    Gelu,
}

fn main() {
    let _ = Activation::Gelu;
}
