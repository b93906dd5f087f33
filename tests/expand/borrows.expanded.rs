fn attention(q: Tensor, k: Tensor, scale: f64) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, release as __vg_release,
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
    if (&&&__VgProbe(&kt)).__vg_releasable() {
        __vg_release(kt);
    }
    let scores = {
        let __vg_value = (&scores * scale)?;
        if (&&&__VgProbe(&scores)).__vg_releasable() {
            __vg_release(scores);
        }
        __vg_value
    };
    let n = dims[0];
    if (&&&__VgProbe(&q)).__vg_releasable() {
        __vg_release(q);
    }
    let probs = softmax(&scores)?;
    if (&&&__VgProbe(&scores)).__vg_releasable() {
        __vg_release(scores);
    }
    probs.narrow(0, 0, n)
}
