// Listed ops on a local at its last use become consuming calls; `mapv` keeps its name.
#[vramguard::inference]
fn scaled(a: Array2<f32>, row: &Tensor) -> (Array2<f32>, usize) {
    let b = a.mapv(|v| v * 2.0);
    let c = b.mapv(|v| v + 1.0);
    let h = Tensor::ones(&[2, 3], row.device())?;
    let h = h.broadcast_add(row)?.softmax(1)?;
    let h = h.layer_norm(None, None, 1e-5)?;
    let n = c.len() + h.elem_count();
    (c, n)
}
