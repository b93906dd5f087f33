impl Module for Mlp {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let __vg_no_grad = vg::__private::NoGradGuard::new();
        let h = self.up.forward(xs)?;
        let h = {
            #[allow(unused_variables, clippy::redundant_locals)]
            let h = h;
            let __vg_value = h.relu()?;
            __vg_value
        };
        self.down.forward(&h)
    }
    fn forward_owned(
        &self,
        xs: Tensor,
        #[allow(unused_mut)]
        mut extra: Tensor,
    ) -> Result<Tensor> {
        let __vg_no_grad = vg::__private::NoGradGuard::new();
        let h = {
            #[allow(unused_variables, clippy::redundant_locals)]
            let xs = xs;
            let __vg_value = (xs + &extra)?;
            __vg_value
        };
        {
            #[allow(unused_variables, clippy::redundant_locals)]
            let h = h;
            extra = h.sqr()?;
        }
        let out = self.down.forward(&extra)?;
        vg::__private::release(extra);
        Ok(out)
    }
}
