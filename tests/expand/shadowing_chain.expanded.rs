fn forward(&self, xs: &Tensor) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::NoGradGuard::new();
    let _enter = self.span.enter();
    let xs = self.fc1.forward(xs)?;
    let xs = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let xs = xs;
        let __vg_value = xs.gelu()?;
        __vg_value
    };
    let xs = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let xs = xs;
        let __vg_value = self.fc2.forward(&xs)?;
        __vg_value
    };
    let xs = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let xs = xs;
        let __vg_value = (&xs + &self.residual)?;
        __vg_value
    };
    Ok(xs)
}
