#[vramguard::inference(keeep(x))]
fn forward(x: Vec<f32>) -> usize {
    x.len()
}

#[vramguard::inference(no_grad = true)]
fn other() {}

fn main() {
    forward(Vec::new());
    other();
}
