fn forward(&self, xs: &Tensor) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let _enter = self.span.enter();
    let xs = self.fc1.forward(xs)?;
    let xs = if !(&&&__VgProbe(&xs)).__vg_movable() {
        xs.gelu()?
    } else {
        #[allow(unused_mut, unused_variables)]
        let xs = __vg_last_use(xs);
        let __vg_value = __VgDying(xs).gelu_receiver().gelu()?;
        __vg_value
    };
    let xs = {
        let __vg_value = self.fc2.forward(&xs)?;
        if (&&&__VgProbe(&xs)).__vg_droppable() {
            __vg_drop(xs);
        }
        __vg_value
    };
    let xs = {
        let __vg_value = (&xs + &self.residual)?;
        if (&&&__VgProbe(&xs)).__vg_droppable() {
            __vg_drop(xs);
        }
        __vg_value
    };
    Ok(xs)
}
