//! The gradient of every op: what each [`OpRecord`] turns the output's gradient into.

use crate::tensor::backend;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::kinds::{BinOp, ZipOp};
use crate::tensor::ops::record::{OpRecord, Saved};
use crate::tensor::Tensor;

impl OpRecord {
    /// Gradients for each input (`None` where the input gets none or needs none).
    pub(crate) fn gradients(&self, g: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        use OpRecord::*;
        let need = |i: usize| needs.get(i).copied().unwrap_or(false);
        Ok(match self {
            Add { a_shape, b_shape } => vec![
                opt(need(0), || g.sum_to_shape(a_shape))?,
                opt(need(1), || g.sum_to_shape(b_shape))?,
            ],
            Sub { a_shape, b_shape } => vec![
                opt(need(0), || g.sum_to_shape(a_shape))?,
                opt(need(1), || g.neg()?.sum_to_shape(b_shape))?,
            ],
            Mul {
                a,
                b,
                a_shape,
                b_shape,
            } => vec![
                match (need(0), b) {
                    (true, Some(b)) => Some(g.mul(b.get())?.sum_to_shape(a_shape)?),
                    _ => None,
                },
                match (need(1), a) {
                    (true, Some(a)) => Some(g.mul(a.get())?.sum_to_shape(b_shape)?),
                    _ => None,
                },
            ],
            Div {
                a,
                b,
                a_shape,
                b_shape,
            } => vec![
                opt(need(0), || g.div(b.get())?.sum_to_shape(a_shape))?,
                match (need(1), a) {
                    (true, Some(a)) => {
                        // d(a/b)/db = -a / b².
                        let bb = b.get().mul(b.get())?;
                        Some(g.mul(a.get())?.div(&bb)?.neg()?.sum_to_shape(b_shape)?)
                    }
                    _ => None,
                },
            ],
            Identity => vec![Some(g.clone())],
            MulScalar(s) => vec![Some(g.mul_scalar(*s)?)],
            MatMul {
                a,
                b,
                a_shape,
                b_shape,
            } => {
                let ga = match (need(0), b) {
                    (true, Some(b)) => {
                        let bt = b.get().transpose(b.get().rank() - 2, b.get().rank() - 1)?;
                        Some(g.matmul(&bt)?.sum_to_shape(a_shape)?)
                    }
                    _ => None,
                };
                let gb = match (need(1), a) {
                    (true, Some(a)) => Some(matmul_grad_rhs(a.get(), g, b_shape)?),
                    _ => None,
                };
                vec![ga, gb]
            }
            Relu { out } => vec![Some(g.zip_map(
                out.get(),
                "relu_backward",
                ZipOp::ReluBackward,
            )?)],
            Gelu { x } => vec![Some(g.zip_map(
                x.get(),
                "gelu_backward",
                ZipOp::GeluBackward,
            )?)],
            Tanh { out } => vec![Some(g.zip_map(
                out.get(),
                "tanh_backward",
                ZipOp::TanhBackward,
            )?)],
            Sigmoid { out } => vec![Some(g.zip_map(
                out.get(),
                "sigmoid_backward",
                ZipOp::SigmoidBackward,
            )?)],
            Exp { out } => vec![Some(g.zip_map(
                out.get(),
                "exp_backward",
                ZipOp::Bin(BinOp::Mul),
            )?)],
            Log { x } => vec![Some(g.zip_map(
                x.get(),
                "log_backward",
                ZipOp::Bin(BinOp::Div),
            )?)],
            Softmax { out, dim } => {
                // dx = y * (g - sum(g * y)).
                let y = out.get();
                let gy = g.mul(y)?;
                let s = gy.sum_keepdim(*dim)?;
                vec![Some(g.sub(&s)?.mul(y)?)]
            }
            LogSoftmax { out, dim } => {
                // dx = g - softmax * sum(g).
                let s = g.sum_keepdim(*dim)?;
                let p = out.get().exp()?;
                vec![Some(g.sub(&p.mul(&s)?)?)]
            }
            LayerNorm {
                x,
                mean,
                rstd,
                weight,
                has_bias,
            } => {
                let (gx, gw, gb) = layer_norm_backward(
                    g,
                    x.get(),
                    mean.get(),
                    rstd.get(),
                    weight.as_ref().map(Saved::get),
                    need(1),
                    *has_bias && need(2),
                )?;
                vec![if need(0) { Some(gx) } else { None }, gw, gb]
            }
            Embedding { ids, table_shape } => {
                vec![Some(embedding_backward(g, ids, table_shape)?)]
            }
            Sum {
                in_shape,
                keep_shape,
                scale,
            } => {
                let g = g.reshape(keep_shape)?.broadcast_as(in_shape)?;
                let g = if *scale == 1.0 {
                    g.contiguous()?
                } else {
                    g.mul_scalar(*scale)?
                };
                vec![Some(g)]
            }
            CrossEntropy { probs, targets } => {
                vec![Some(cross_entropy_backward(g, probs.get(), targets)?)]
            }
            Mse { diff } => {
                let n = diff.get().elem_count().max(1) as f32;
                let gd = diff.get().mul(g)?.mul_scalar(2.0 / n)?;
                let gt = if need(1) { Some(gd.neg()?) } else { None };
                vec![Some(gd), gt]
            }
            Reshape { in_shape } => vec![Some(g.reshape(in_shape)?)],
            Permute { perm } => {
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                vec![Some(g.permute(&inverse)?)]
            }
            Narrow {
                in_shape,
                dim,
                start,
            } => {
                let gi = Tensor::zeros(in_shape, g.device())?;
                gi.narrow(*dim, *start, g.dims()[*dim])?.copy_(g)?;
                vec![Some(gi)]
            }
            Expand { in_shape } => vec![Some(g.sum_to_shape(in_shape)?)],
            CopyInto { src_shape } => vec![None, Some(g.sum_to_shape(src_shape)?)],
            ToDevice { device } => vec![Some(g.to_device(device)?)],
            Zeroed => vec![None],
            StaleHistory { .. } => return Err(self.stale_error().unwrap_or(TensorError::NoGraph)),
        })
    }
}

fn opt(needed: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if needed {
        f().map(Some)
    } else {
        Ok(None)
    }
}

/// Gradient of `a · b` with respect to `b`: `aᵀ · g`, summed over broadcast batch dims. When `b`
/// is a plain matrix, the batch dims of `a` and `g` are folded into rows first, so no
/// per-batch `[k, n]` partial products are materialised.
fn matmul_grad_rhs(a: &Tensor, g: &Tensor, b_shape: &[usize]) -> Result<Tensor> {
    if b_shape.len() == 2 && a.rank() > 2 {
        let k = a.dims()[a.rank() - 1];
        let n = g.dims()[g.rank() - 1];
        let rows = a.elem_count() / k.max(1);
        let a2 = a.reshape(&[rows, k])?;
        let g2 = g.reshape(&[rows, n])?;
        return a2.transpose(0, 1)?.matmul(&g2);
    }
    let at = a.transpose(a.rank() - 2, a.rank() - 1)?;
    at.matmul(g)?.sum_to_shape(b_shape)
}

/// Gradient of layer norm: `(dx, dweight, dbias)`.
#[allow(clippy::type_complexity)]
fn layer_norm_backward(
    g: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    rstd: &Tensor,
    weight: Option<&Tensor>,
    need_w: bool,
    need_b: bool,
) -> Result<(Tensor, Option<Tensor>, Option<Tensor>)> {
    // Every input here is contiguous with its own storage (saved by the forward, or made so
    // here).
    let g = g.contiguous()?;
    let (gx, gw, gb) = backend::on(x.device(), "layer_norm_backward")?.layer_norm_backward(
        g.strided(),
        x.strided(),
        mean.strided(),
        rstd.strided(),
        weight.map(Tensor::strided),
        need_w,
        need_b,
    )?;
    Ok((gx.into(), gw.map(Tensor::from), gb.map(Tensor::from)))
}

/// Gradient of an embedding lookup with respect to the table (rows scatter-added).
fn embedding_backward(g: &Tensor, ids: &[u32], table_shape: &[usize]) -> Result<Tensor> {
    let g = g.contiguous()?;
    backend::on(g.device(), "embedding_backward")?
        .embedding_backward(g.strided(), ids, table_shape)
        .map(Tensor::from)
}

/// Gradient of mean cross-entropy: `(softmax - onehot) * g / rows`.
fn cross_entropy_backward(g: &Tensor, probs: &Tensor, targets: &[u32]) -> Result<Tensor> {
    backend::on(probs.device(), "cross_entropy_backward")?
        .cross_entropy_backward(g.strided(), probs.strided(), targets)
        .map(Tensor::from)
}
