#[vramguard::inference(keep(hiden))]
fn forward(hidden: Vec<f32>) -> usize {
    let scaled: Vec<f32> = hidden.iter().map(|v| v * 2.0).collect();
    scaled.len()
}

fn main() {
    forward(Vec::new());
}
