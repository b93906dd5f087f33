// The one analysis limit: a fallible method (followed by `?`) whose explicit lifetimes tie its
// result to an `&` argument. A fallible op's result is taken to be owned (as tensor ops' are),
// so the transform assumes `r` does not borrow `x`. The mistake is a compile error, never a
// dangling reference; `keep(x)` fixes it. (Without `?`, such a result is taken to borrow its
// `&` arguments: see `output_borrows_an_argument` in `pass/third_party.rs`.)
struct Picker;

impl Picker {
    fn pick<'a>(&self, x: &'a String) -> Result<&'a str, String> {
        Ok(x.as_str())
    }
}

#[vramguard::inference]
fn forward(picker: &Picker) -> Result<usize, String> {
    let x = String::from("hidden");
    let r = picker.pick(&x)?;
    println!("step");
    Ok(r.len())
}

#[vramguard::inference(keep(x))]
fn fixed(picker: &Picker) -> Result<usize, String> {
    let x = String::from("hidden");
    let r = picker.pick(&x)?;
    println!("step");
    Ok(r.len())
}

fn main() {
    let _ = forward(&Picker);
    let _ = fixed(&Picker);
}
