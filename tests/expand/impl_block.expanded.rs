impl Module for Mlp {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let __vg_no_grad = vg::__private::inference_guard();
        #[allow(unused_imports)]
        use vg::__private::{
            CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
            PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
            last_use as __vg_last_use, Dying as __VgDying,
        };
        let h = self.up.forward(xs)?;
        let h = if !(&&&__VgProbe(&h)).__vg_movable() {
            h.relu()?
        } else {
            #[allow(unused_mut, unused_variables)]
            let h = __vg_last_use(h);
            let __vg_value = __VgDying(h).relu_receiver().relu()?;
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
        let __vg_no_grad = vg::__private::inference_guard();
        #[allow(unused_imports)]
        use vg::__private::{
            CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
            PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
            last_use as __vg_last_use, Dying as __VgDying,
        };
        let h = (xs + &extra)?;
        if !(&&&__VgProbe(&h)).__vg_movable() {
            extra = h.sqr()?;
        } else {
            #[allow(unused_mut, unused_variables)]
            let h = __vg_last_use(h);
            extra = h.sqr()?;
        }
        let out = self.down.forward(&extra)?;
        if (&&&__VgProbe(&extra)).__vg_droppable() {
            __vg_drop(extra);
        }
        Ok(out)
    }
}
