//! Consuming forms that complete the set the attributes call at a tensor's last use: `log`,
//! `affine`, softmax and layer norm along the last dimension.
//!
//! Each reuses the tensor's buffer under the conditions of the [module docs](super) (uniquely
//! owned handle and storage, exactly the tensor's contiguous data, not a leaf that requires
//! grad), and also only when autograd would not need the overwritten input (an op recorded
//! with grad mode on whose backward saves its input computes out of place). Otherwise each
//! computes out of place, exactly as the borrowing form. The values are bit-identical to the
//! borrowing form's either way: the in-place kernels do the same arithmetic in the same order.

use super::autograd::{attach, edges, should_record, Backward, Saved};
use super::backend::{self, MapOp};
use super::ops::{check_dim, same_device, Unary};
use super::{Result, Tensor};

impl Tensor {
    /// Consuming [`Tensor::log`] (reuses the buffer unless backward needs the input).
    #[track_caller]
    pub fn into_log(self) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_log");
        self.unary_owned(Unary::Log)
    }

    /// Consuming [`Tensor::affine`]: `self * mul + add`, in `self`'s buffer when nothing else
    /// can observe it.
    #[track_caller]
    pub fn into_affine(mut self, mul: f32, add: f32) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("into_affine");
        if !self.is_exclusively_owned() {
            return self.affine(mul, add);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.affine(mul, add),
        };
        let out = Tensor::from_parts(storage, layout, false);
        backend::map_inplace(&out, "affine", MapOp::Affine(mul, add))?;
        attach(&out, "affine", edges, || Backward::MulScalar(mul));
        Ok(out)
    }

    /// Consuming [`Tensor::softmax`]. In place only along the last dimension of a tensor on a
    /// host device (each row is contiguous there); any other case computes out of place.
    #[track_caller]
    pub fn into_softmax(mut self, dim: usize) -> Result<Tensor> {
        const OP: &str = "softmax";
        let _origin = crate::alloc::enter_op("into_softmax");
        check_dim(OP, &self, dim)?;
        let last = self.rank() - 1;
        if dim != last || !self.device().is_host() || !self.is_exclusively_owned() {
            return self.softmax(dim);
        }
        let edges = edges(&[&self]);
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.softmax(dim),
        };
        let out = Tensor::from_parts(storage, layout, false);
        let len = out.dims()[last];
        {
            let write = out.storage().write(OP)?;
            // `chunks_exact_mut(0)` would panic; a row of no elements has nothing to normalise.
            if len > 0 {
                for row in write.data.chunks_exact_mut(len) {
                    softmax_row(row);
                }
            }
        }
        attach(&out, OP, edges, || Backward::Softmax {
            out: Saved::new(&out, "output"),
            dim,
        });
        Ok(out)
    }

    /// Consuming [`Tensor::layer_norm`] (over the last dimension). In place on a host device
    /// when nothing records a gradient through it (backward needs the input); any other case
    /// computes out of place.
    #[track_caller]
    pub fn into_layer_norm(
        mut self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        const OP: &str = "layer_norm";
        let _origin = crate::alloc::enter_op("into_layer_norm");
        let mut inputs = vec![&self];
        inputs.extend(weight);
        inputs.extend(bias);
        let recording = should_record(&inputs);
        let d = self.dims().last().copied().unwrap_or(0);
        let params_fit = [weight, bias]
            .into_iter()
            .flatten()
            .all(|p| p.dims() == [d] && same_device(OP, &self, p).is_ok());
        // Every argument error is the borrowing form's to report.
        if recording
            || d == 0
            || !params_fit
            || !self.device().is_host()
            || !self.is_exclusively_owned()
        {
            return self.layer_norm(weight, bias, eps);
        }
        let (w, b) = (
            weight.map(Tensor::contiguous).transpose()?,
            bias.map(Tensor::contiguous).transpose()?,
        );
        let (storage, layout) = match self.into_buffer() {
            Ok(parts) => parts,
            Err(this) => return this.layer_norm(weight, bias, eps),
        };
        let out = Tensor::from_parts(storage, layout, false);
        // The parameters' storages cannot be `out`'s (it is uniquely owned): the read locks on
        // them and the write lock on it never wait on each other.
        let w_read = w.as_ref().map(|w| w.storage().read(OP)).transpose()?;
        let b_read = b.as_ref().map(|b| b.storage().read(OP)).transpose()?;
        let w_data = window(OP, w.as_ref(), w_read.as_ref().map(|r| r.data), d)?;
        let b_data = window(OP, b.as_ref(), b_read.as_ref().map(|r| r.data), d)?;
        {
            let write = out.storage().write(OP)?;
            for row in write.data.chunks_exact_mut(d) {
                layer_norm_row(row, w_data, b_data, eps);
            }
        }
        drop((w_read, b_read));
        Ok(out)
    }
}

/// The `d` elements of contiguous `t` in its storage's `data`.
fn window<'a>(
    op: &'static str,
    t: Option<&Tensor>,
    data: Option<&'a [f32]>,
    d: usize,
) -> Result<Option<&'a [f32]>> {
    match (t, data) {
        (Some(t), Some(data)) => data
            .get(t.offset()..t.offset() + d)
            .map(Some)
            .ok_or_else(|| {
                super::unreachable_error(op, "a parameter's window lies outside its storage")
            }),
        _ => Ok(None),
    }
}

/// Softmax of one contiguous row in place: the host kernel's arithmetic, in its order.
fn softmax_row(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        let e = (*v - max).exp();
        *v = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

/// Layer norm of one row in place: the host kernel's arithmetic, in its order (each output
/// element reads only its own input element once the row's statistics are known).
fn layer_norm_row(row: &mut [f32], weight: Option<&[f32]>, bias: Option<&[f32]>, eps: f32) {
    let d = row.len() as f32;
    let mean = row.iter().sum::<f32>() / d;
    let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d;
    let rstd = 1.0 / (var + eps).sqrt();
    for (j, v) in row.iter_mut().enumerate() {
        let mut y = (*v - mean) * rstd;
        if let Some(w) = weight {
            y *= w[j];
        }
        if let Some(b) = bias {
            y += b[j];
        }
        *v = y;
    }
}
