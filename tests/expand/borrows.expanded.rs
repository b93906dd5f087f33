fn attention(q: Tensor, k: Tensor, scale: f64) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::NoGradGuard::new();
    let __vg_library_no_grad = ::vramguard::__private::library_no_grad();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
    };
    let dims = q.dims();
    let kt = if (&&&::vramguard::__private::Probe::of(&k)).__vg_movable() {
        #[allow(unused_mut, unused_variables)]
        let k = ::vramguard::__private::last_use(k);
        let __vg_value = k.t()?;
        __vg_value
    } else {
        k.t()?
    };
    let scores = q.matmul(&kt)?;
    if (&&&::vramguard::__private::Probe::of(&kt)).__vg_releasable() {
        ::vramguard::__private::release(kt);
    }
    let scores = {
        let __vg_value = (&scores * scale)?;
        if (&&&::vramguard::__private::Probe::of(&scores)).__vg_releasable() {
            ::vramguard::__private::release(scores);
        }
        __vg_value
    };
    let n = dims[0];
    if (&&&::vramguard::__private::Probe::of(&dims)).__vg_releasable() {
        ::vramguard::__private::release(dims);
    }
    if (&&&::vramguard::__private::Probe::of(&q)).__vg_releasable() {
        ::vramguard::__private::release(q);
    }
    let probs = softmax(&scores)?;
    if (&&&::vramguard::__private::Probe::of(&scores)).__vg_releasable() {
        ::vramguard::__private::release(scores);
    }
    probs.narrow(0, 0, n)
}
