// The one analysis limit: a method whose explicit lifetimes tie its result to an `&` argument.
// Elision would tie it to `self`, so the transform assumes `r` does not borrow `x`. The mistake
// is a compile error, never a dangling reference; `keep(x)` fixes it.
struct Picker;

impl Picker {
    fn pick<'a>(&self, x: &'a String) -> &'a str {
        x.as_str()
    }
}

#[vramguard::inference]
fn forward(picker: &Picker) -> usize {
    let x = String::from("hidden");
    let r = picker.pick(&x);
    println!("step");
    r.len()
}

#[vramguard::inference(keep(x))]
fn fixed(picker: &Picker) -> usize {
    let x = String::from("hidden");
    let r = picker.pick(&x);
    println!("step");
    r.len()
}

fn main() {
    forward(&Picker);
    fixed(&Picker);
}
