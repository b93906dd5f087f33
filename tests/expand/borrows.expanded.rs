fn attention(q: Tensor, k: Tensor, scale: f64) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let dims = q.dims();
    let kt = if !(&&&__VgProbe(&k)).__vg_movable() {
        k.t()?
    } else {
        #[allow(unused_mut, unused_variables)]
        let k = __vg_last_use(k);
        let __vg_value = k.t()?;
        __vg_value
    };
    let scores = q.matmul(&kt)?;
    if (&&&__VgProbe(&kt)).__vg_droppable() {
        __vg_drop(kt);
    }
    let scores = {
        let __vg_value = (&scores * scale)?;
        if (&&&__VgProbe(&scores)).__vg_droppable() {
            __vg_drop(scores);
        }
        __vg_value
    };
    let n = dims[0];
    if (&&&__VgProbe(&q)).__vg_droppable() {
        __vg_drop(q);
    }
    let probs = softmax(&scores)?;
    if (&&&__VgProbe(&scores)).__vg_droppable() {
        __vg_drop(scores);
    }
    probs.narrow(0, 0, n)
}
