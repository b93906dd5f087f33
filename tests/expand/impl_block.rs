// A whole `impl` block: every method; `crate = path` for a renamed facade.
#[vramguard::inference(crate = vg)]
impl Module for Mlp {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let h = self.up.forward(xs)?;
        let h = h.relu()?;
        self.down.forward(&h)
    }

    fn forward_owned(&self, xs: Tensor, #[allow(unused_mut)] mut extra: Tensor) -> Result<Tensor> {
        let h = (xs + &extra)?;
        extra = h.sqr()?;
        let out = self.down.forward(&extra)?;
        Ok(out)
    }
}
