trait Module {
    #[vramguard::inference]
    fn forward(&self, x: f32) -> f32;
}

fn main() {}
