fn scaled(a: Array2<f32>, row: &Tensor) -> (Array2<f32>, usize) {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let b = if !(&&&__VgProbe(&a)).__vg_movable() {
        a.mapv(|v| v * 2.0)
    } else {
        #[allow(unused_mut, unused_variables)]
        let a = __vg_last_use(a);
        let __vg_value = __VgDying(a).mapv_receiver().mapv(|v| v * 2.0);
        __vg_value
    };
    let c = if !(&&&__VgProbe(&b)).__vg_movable() {
        b.mapv(|v| v + 1.0)
    } else {
        #[allow(unused_mut, unused_variables)]
        let b = __vg_last_use(b);
        let __vg_value = __VgDying(b).mapv_receiver().mapv(|v| v + 1.0);
        __vg_value
    };
    let h = Tensor::ones(&[2, 3], row.device())?;
    let h = if !(&&&__VgProbe(&h)).__vg_movable() {
        h.broadcast_add(row)?.softmax(1)?
    } else {
        #[allow(unused_mut, unused_variables)]
        let h = __vg_last_use(h);
        let __vg_value = __VgDying(h)
            .broadcast_add_receiver()
            .broadcast_add(row)?
            .softmax(1)?;
        __vg_value
    };
    let h = if !(&&&__VgProbe(&h)).__vg_movable() {
        h.layer_norm(None, None, 1e-5)?
    } else {
        #[allow(unused_mut, unused_variables)]
        let h = __vg_last_use(h);
        let __vg_value = __VgDying(h)
            .layer_norm_receiver()
            .layer_norm(None, None, 1e-5)?;
        __vg_value
    };
    let n = c.len() + h.elem_count();
    if (&&&__VgProbe(&h)).__vg_droppable() {
        __vg_drop(h);
    }
    (c, n)
}
