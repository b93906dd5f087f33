// Enabled once the lints module implements `backward_in_inference` (see the lints issue).
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
