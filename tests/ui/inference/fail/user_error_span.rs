// An error in user code inside an annotated function points at the user's code.
#[vramguard::inference]
fn forward(x: Vec<f32>) -> usize {
    let doubled: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
    let count: u32 = doubled.len();
    let _unused = x;
    count as usize
}

fn main() {
    forward(Vec::new());
}
