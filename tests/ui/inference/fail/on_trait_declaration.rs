#[vramguard::inference]
trait Module {
    fn forward(&self, x: f32) -> f32;
}

fn main() {}
