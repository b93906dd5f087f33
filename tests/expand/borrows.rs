// A value borrowed by a later binding lives until that binding's last use.
#[vramguard::inference]
fn attention(q: Tensor, k: Tensor, scale: f64) -> Result<Tensor> {
    let dims = q.dims();
    let kt = k.t()?;
    let scores = q.matmul(&kt)?;
    let scores = (&scores * scale)?;
    let n = dims[0];
    let probs = softmax(&scores)?;
    probs.narrow(0, 0, n)
}
