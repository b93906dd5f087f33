//! The matrix product, with broadcast batch dimensions.

use super::record::{record, OpRecord, Saved};
use super::same_device;
use crate::tensor::backend;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::kinds::{broadcast_shape, MatmulShape};
use crate::tensor::Tensor;

impl Tensor {
    /// Matrix product over the last two dimensions, with broadcast batch dimensions
    /// (`[.., m, k] · [.., k, n] -> [.., m, n]`). Transposed views are read in place (strided
    /// GEMM, no copy).
    #[track_caller]
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("matmul");
        const OP: &str = "matmul";
        same_device(OP, self, rhs)?;
        let mismatch = |reason: String| TensorError::ShapeMismatch {
            op: OP,
            lhs: self.dims().to_vec(),
            rhs: rhs.dims().to_vec(),
            reason,
        };
        let (ra, rb) = (self.rank(), rhs.rank());
        if ra < 2 || rb < 2 {
            return Err(mismatch(
                "both operands need at least 2 dimensions; unsqueeze vectors first".into(),
            ));
        }
        let (m, k) = (self.dims()[ra - 2], self.dims()[ra - 1]);
        let (k2, n) = (rhs.dims()[rb - 2], rhs.dims()[rb - 1]);
        if k != k2 {
            return Err(mismatch(format!(
                "inner dimensions differ ({k} vs {k2}); the left's last dimension must equal the right's second-to-last"
            )));
        }
        let batch = broadcast_shape(OP, &self.dims()[..ra - 2], &rhs.dims()[..rb - 2])
            .map_err(|_| mismatch("batch dimensions do not broadcast".into()))?;
        let out = Tensor::from(backend::on(self.device(), OP)?.matmul(
            self.strided(),
            rhs.strided(),
            &MatmulShape { batch, m, k, n },
        )?);
        record(&out, OP, &[self, rhs], || OpRecord::MatMul {
            a: rhs
                .requires_grad()
                .then(|| Saved::new(self, "left operand")),
            b: self
                .requires_grad()
                .then(|| Saved::new(rhs, "right operand")),
            a_shape: self.dims().to_vec(),
            b_shape: rhs.dims().to_vec(),
        });
        Ok(out)
    }
}
