// A value dying inside an `if`/`match` is dropped in the branch that uses it, at its last use
// there, and at the start of every other branch (never in a guard); after a `let … else`.
#[vramguard::inference]
fn route(x: Tensor, mode: Mode, mask: Option<Tensor>) -> Result<Tensor> {
    let h = x.relu()?;
    let Some(mask) = mask else {
        return Err(Error::msg(format!("no mask for {:?}", x.dims())));
    };
    let g = h.gelu()?;
    let y = match mode {
        Mode::Masked if mask.rank() > 1 => {
            let m = g.broadcast_mul(&mask)?;
            m.sum_keepdim(1)?
        }
        Mode::Plain => g.exp()?,
        Mode::Masked => Tensor::zeros(8)?,
    };
    if y.rank() > 2 {
        y.flatten_all()
    } else {
        Ok(y)
    }
}
