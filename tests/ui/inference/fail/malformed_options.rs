#[vramguard::inference(keep = x)]
fn a(x: Vec<f32>) -> usize {
    x.len()
}

#[vramguard::inference(drops = 3)]
fn b() {}

#[vramguard::inference(drops)]
fn c() {}

#[vramguard::inference(crate = 5)]
fn d() {}

#[vramguard::inference(keep(x), keep(y))]
fn e(x: Vec<f32>, y: Vec<f32>) -> usize {
    x.len() + y.len()
}

#[vramguard::inference(keep(a::b))]
fn f() {}

#[vramguard::inference(owned("matmul"))]
fn g() {}

#[vramguard::inference(keep(x) drops = false)]
fn h(x: Vec<f32>) -> usize {
    x.len()
}

fn main() {
    a(Vec::new());
    b();
    c();
    d();
    e(Vec::new(), Vec::new());
    f();
    g();
    h(Vec::new());
}
