// `.backward()` cannot work under #[inference] (grad is off): a warning at the call, made an
// error here by `deny(deprecated)` (as `-D warnings` does). By default it never fails a build:
// the lint reads the method's name, and another type's `.backward()` may be unrelated.
#![deny(deprecated)]

struct Loss;

impl Loss {
    fn backward(&self) -> Result<(), String> {
        Ok(())
    }
}

#[vramguard::inference]
fn evaluate(loss: &Loss) -> Result<(), String> {
    loss.backward()?;
    Ok(())
}

fn main() {
    let _ = evaluate(&Loss);
}
