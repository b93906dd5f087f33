//! The embedding lookup: rows of a table picked by ids.

use super::record::{record, OpRecord};
use crate::tensor::backend;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::kinds::checked_numel;
use crate::tensor::Tensor;

impl Tensor {
    /// Rows of the table `self` (`[vocab, dim]`) picked by `ids`, which has shape `ids_shape`;
    /// the result has shape `ids_shape + [dim]`.
    #[track_caller]
    pub fn embedding(&self, ids: &[u32], ids_shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("embedding");
        const OP: &str = "embedding";
        if self.rank() != 2 {
            return Err(TensorError::InvalidArgument {
                op: OP,
                shape: self.dims().to_vec(),
                message: "the table must have shape [vocab, dim]".into(),
            });
        }
        let expected = checked_numel(OP, ids_shape)?;
        if ids.len() != expected {
            return Err(TensorError::DataLength {
                op: OP,
                len: ids.len(),
                shape: ids_shape.to_vec(),
                expected,
            });
        }
        let (vocab, d) = (self.dims()[0], self.dims()[1]);
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(TensorError::IndexOutOfRange {
                op: OP,
                index: bad as usize,
                size: vocab,
            });
        }
        let mut out_shape = ids_shape.to_vec();
        out_shape.push(d);
        let out = Tensor::from(backend::on(self.device(), OP)?.embedding(
            self.strided(),
            ids,
            &out_shape,
        )?);
        record(&out, OP, &[self], || OpRecord::Embedding {
            ids: ids.to_vec(),
            table_shape: self.dims().to_vec(),
        });
        Ok(out)
    }
}
