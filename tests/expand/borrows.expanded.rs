fn attention(q: Tensor, k: Tensor, scale: f64) -> Result<Tensor> {
    let __vg_no_grad = ::vramguard::__private::NoGradGuard::new();
    let dims = q.dims();
    let kt = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let k = k;
        let __vg_value = k.t()?;
        __vg_value
    };
    let scores = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let kt = kt;
        let __vg_value = q.matmul(&kt)?;
        __vg_value
    };
    let scores = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let scores = scores;
        let __vg_value = (&scores * scale)?;
        __vg_value
    };
    let n = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let dims = dims;
        let __vg_value = dims[0];
        __vg_value
    };
    ::vramguard::__private::release(q);
    let probs = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let scores = scores;
        let __vg_value = softmax(&scores)?;
        __vg_value
    };
    probs.narrow(0, 0, n)
}
