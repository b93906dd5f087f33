fn route(x: Tensor, mode: Mode, mask: Option<Tensor>) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let h = x.relu()?;
    let Some(mask) = mask else {
        return Err(Error::msg(format!("no mask for {:?}", x.dims())));
    };
    if (&&&__VgProbe(&x)).__vg_droppable() {
        __vg_drop(x);
    }
    let g = if !(&&&__VgProbe(&h)).__vg_movable() {
        h.gelu()?
    } else {
        #[allow(unused_mut, unused_variables)]
        let h = __vg_last_use(h);
        let __vg_value = __VgDying(h).gelu_receiver().gelu()?;
        __vg_value
    };
    let y = match mode {
        Mode::Masked if mask.rank() > 1 => {
            let m = if !(&&&__VgProbe(&g)).__vg_movable() {
                g.broadcast_mul(&mask)?
            } else {
                #[allow(unused_mut, unused_variables)]
                let g = __vg_last_use(g);
                let __vg_value = __VgDying(g)
                    .broadcast_mul_receiver()
                    .broadcast_mul(&mask)?;
                __vg_value
            };
            if (&&&__VgProbe(&mask)).__vg_droppable() {
                __vg_drop(mask);
            }
            m.sum_keepdim(1)?
        }
        Mode::Plain => {
            if (&&&__VgProbe(&mask)).__vg_droppable() {
                __vg_drop(mask);
            }
            if !(&&&__VgProbe(&g)).__vg_movable() {
                g.exp()?
            } else {
                #[allow(unused_mut, unused_variables)]
                let g = __vg_last_use(g);
                let __vg_value = __VgDying(g).exp_receiver().exp()?;
                __vg_value
            }
        }
        Mode::Masked => {
            if (&&&__VgProbe(&g)).__vg_droppable() {
                __vg_drop(g);
            }
            if (&&&__VgProbe(&mask)).__vg_droppable() {
                __vg_drop(mask);
            }
            Tensor::zeros(8)?
        }
    };
    if y.rank() > 2 { y.flatten_all() } else { Ok(y) }
}
