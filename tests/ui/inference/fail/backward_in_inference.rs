// `.backward()` cannot work under #[inference] (grad is off): a compile error at the call.
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
