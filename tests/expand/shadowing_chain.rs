// A forward pass written with shadowed `let`s: each old value dies at the next step.
#[vramguard::inference]
fn forward(&self, xs: &Tensor) -> Result<Tensor> {
    let _enter = self.span.enter();
    let xs = self.fc1.forward(xs)?;
    let xs = xs.gelu()?;
    let xs = self.fc2.forward(&xs)?;
    let xs = (&xs + &self.residual)?;
    Ok(xs)
}
