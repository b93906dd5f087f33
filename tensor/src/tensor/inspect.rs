//! Looking at a tensor's values: `Display` (values, elided in the middle for big tensors as
//! PyTorch and candle print them, then a line with shape, dtype and device), nested `Vec`s
//! ([`Tensor::to_vec2`], [`Tensor::to_vec3`]) and the index of the largest or smallest value
//! along a dimension ([`Tensor::argmax`], [`Tensor::argmin`]).
//!
//! Everything here reads the data on the host; on a device the CPU cannot address it returns
//! [`TensorError::Unsupported`] (and `Display` prints the shape line with the reason). None of
//! it records autograd history: indices have no gradient.

use super::{Result, Tensor, TensorError};
use std::fmt;

/// Tensors with more elements than this print only their first and last [`EDGE_ITEMS`] per
/// dimension (PyTorch's `threshold`).
const SUMMARY_THRESHOLD: usize = 1000;
/// Values shown at each end of an elided dimension (PyTorch's `edgeitems`).
const EDGE_ITEMS: usize = 3;
/// Rows of values wrap at this width, as PyTorch's `linewidth`.
const LINE_WIDTH: usize = 80;
/// Indices are returned as `f32` (the only dtype), exact up to 2^24.
const LARGEST_EXACT_INDEX: usize = 1 << 24;

impl Tensor {
    /// The values of a rank-2 tensor as rows.
    ///
    /// ```
    /// # use vramguard_memory::Device;
    /// # use vramguard_tensor::Tensor;
    /// let t = Tensor::from_slice(&[1., 2., 3., 4., 5., 6.], &[2, 3], &Device::isolated_host())?;
    /// assert_eq!(t.to_vec2()?, vec![vec![1., 2., 3.], vec![4., 5., 6.]]);
    /// assert!(t.to_vec3().is_err()); // TensorError::RankMismatch
    /// # Ok::<(), vramguard_tensor::TensorError>(())
    /// ```
    pub fn to_vec2(&self) -> Result<Vec<Vec<f32>>> {
        let [rows, cols] = self.dims_n("to_vec2")?;
        Ok(split_rows(self.to_vec()?, rows, cols))
    }

    /// The values of a rank-3 tensor as matrices of rows.
    pub fn to_vec3(&self) -> Result<Vec<Vec<Vec<f32>>>> {
        let [matrices, rows, cols] = self.dims_n("to_vec3")?;
        let mut all_rows = split_rows(self.to_vec()?, matrices * rows, cols).into_iter();
        // `take` per matrix, not `chunks`: with no rows each matrix is still there, empty.
        Ok((0..matrices)
            .map(|_| all_rows.by_ref().take(rows).collect())
            .collect())
    }

    /// Index of the largest value along `dim`, removing it (PyTorch's `argmax(dim)`). The
    /// first index wins ties; a NaN counts as the largest value (it propagates, as in PyTorch).
    /// Indices are `f32` values (exact: dimensions above 2^24 are refused).
    ///
    /// ```
    /// # use vramguard_memory::Device;
    /// # use vramguard_tensor::Tensor;
    /// let t = Tensor::from_slice(&[1., 9., 3., 7., 2., 8.], &[2, 3], &Device::isolated_host())?;
    /// assert_eq!(t.argmax(1)?.to_vec()?, [1., 2.]);
    /// assert_eq!(t.argmin_keepdim(0)?.dims(), &[1, 3]);
    /// # Ok::<(), vramguard_tensor::TensorError>(())
    /// ```
    pub fn argmax(&self, dim: usize) -> Result<Tensor> {
        self.arg_reduce("argmax", dim, false, |candidate, best| candidate > best)
    }

    /// [`Tensor::argmax`], keeping `dim` as size 1.
    pub fn argmax_keepdim(&self, dim: usize) -> Result<Tensor> {
        self.arg_reduce("argmax", dim, true, |candidate, best| candidate > best)
    }

    /// Index of the smallest value along `dim`, removing it. Ties and NaNs as in
    /// [`Tensor::argmax`].
    pub fn argmin(&self, dim: usize) -> Result<Tensor> {
        self.arg_reduce("argmin", dim, false, |candidate, best| candidate < best)
    }

    /// [`Tensor::argmin`], keeping `dim` as size 1.
    pub fn argmin_keepdim(&self, dim: usize) -> Result<Tensor> {
        self.arg_reduce("argmin", dim, true, |candidate, best| candidate < best)
    }

    fn arg_reduce(
        &self,
        op: &'static str,
        dim: usize,
        keepdim: bool,
        better: fn(f32, f32) -> bool,
    ) -> Result<Tensor> {
        let size = *self
            .dims()
            .get(dim)
            .ok_or_else(|| TensorError::DimOutOfRange {
                op,
                dim,
                shape: self.dims().to_vec(),
            })?;
        if size == 0 || size > LARGEST_EXACT_INDEX {
            return Err(TensorError::InvalidArgument {
                op,
                shape: self.dims().to_vec(),
                message: format!(
                    "dimension {dim} has {size} entries; {op} needs between 1 and 2^24 \
                     (indices are exact f32 values)"
                ),
            });
        }
        if !self.device().is_host() {
            return Err(TensorError::Unsupported {
                op,
                device: format!("{:?}", self.device()),
            });
        }
        let values = self.to_vec()?;
        let inner: usize = self.dims()[dim + 1..].iter().product();
        let outer: usize = self.dims()[..dim].iter().product();
        let mut indices = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let at = |k: usize| values[(o * size + k) * inner + i];
                let mut best = 0;
                for k in 1..size {
                    let (candidate, current) = (at(k), at(best));
                    if !current.is_nan() && (candidate.is_nan() || better(candidate, current)) {
                        best = k;
                    }
                }
                indices.push(best as f32);
            }
        }
        let mut shape = self.dims().to_vec();
        if keepdim {
            shape[dim] = 1;
        } else {
            shape.remove(dim);
        }
        Tensor::from_slice(&indices, &shape, self.device())
    }
}

/// `flat` (row-major) as `rows` rows of `cols` values.
fn split_rows(flat: Vec<f32>, rows: usize, cols: usize) -> Vec<Vec<f32>> {
    if cols == 0 {
        // `chunks(0)` would panic: rows of no values are empty rows.
        return vec![Vec::new(); rows];
    }
    flat.chunks(cols).map(<[f32]>::to_vec).collect()
}

/// Which indices of a dimension are printed: all, or the first and last [`EDGE_ITEMS`] with
/// an ellipsis between.
fn shown(size: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && size > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain(std::iter::once(None))
            .chain((size - EDGE_ITEMS..size).map(Some))
            .collect()
    } else {
        (0..size).map(Some).collect()
    }
}

/// How every value of one printout is written: one style and one width for all, so columns
/// line up (PyTorch's choice: integers as `3.`, scientific when magnitudes are far apart or
/// extreme, else 4 decimals; `{:.N}` asks for N decimals).
struct NumberStyle {
    kind: NumberKind,
    precision: usize,
    width: usize,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NumberKind {
    Integer,
    Fixed,
    Scientific,
}

impl NumberStyle {
    fn for_values(values: &[f32], precision: Option<usize>) -> NumberStyle {
        let finite = || values.iter().filter(|v| v.is_finite());
        let nonzero = || finite().map(|v| v.abs()).filter(|&v| v > 0.0);
        let max = nonzero().fold(0.0f32, f32::max);
        let min = nonzero().fold(f32::INFINITY, f32::min);
        let kind = if precision.is_none() && finite().all(|v| v.fract() == 0.0) && max < 1e8 {
            NumberKind::Integer
        } else if max > 0.0 && (max >= 1e8 || min < 1e-4 || max / min > 1e3) {
            NumberKind::Scientific
        } else {
            NumberKind::Fixed
        };
        let mut style = NumberStyle {
            kind,
            precision: precision.unwrap_or(4),
            width: 0,
        };
        style.width = values
            .iter()
            .map(|&v| style.write(v).len())
            .max()
            .unwrap_or(0);
        style
    }

    fn write(&self, v: f32) -> String {
        if v.is_nan() {
            return "nan".into();
        }
        if v.is_infinite() {
            return if v > 0.0 { "inf" } else { "-inf" }.into();
        }
        match self.kind {
            NumberKind::Integer => format!("{v:.0}."),
            NumberKind::Fixed => format!("{v:.*}", self.precision),
            NumberKind::Scientific => format!("{v:.*e}", self.precision),
        }
    }

    fn write_padded(&self, v: f32) -> String {
        format!("{:>width$}", self.write(v), width = self.width)
    }
}

/// The printed values of `t` in printing order (elided ones skipped): read in place through
/// its strides where the CPU can address its storage, else from [`Tensor::to_vec`]'s copy
/// (for devices whose `to_vec` copies to the host).
fn shown_values(t: &Tensor, summarize: bool) -> Result<Vec<f32>> {
    match t.storage().read("display") {
        Ok(read) => Ok(gather(
            t.dims(),
            t.strides(),
            t.offset(),
            read.data,
            summarize,
        )),
        Err(unreadable) => match t.to_vec() {
            Ok(flat) => Ok(gather(
                t.dims(),
                &super::kinds::contiguous_strides(t.dims()),
                0,
                &flat,
                summarize,
            )),
            Err(_) => Err(unreadable),
        },
    }
}

/// The shown elements of the strided array `(shape, strides, offset)` over `data`, in order.
fn gather(
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    data: &[f32],
    summarize: bool,
) -> Vec<f32> {
    let mut out = Vec::new();
    let mut stack = vec![(0usize, offset)];
    // Depth-first over the shown indices, in order (the stack holds them reversed).
    while let Some((dim, at)) = stack.pop() {
        if dim == shape.len() {
            out.push(data[at]);
            continue;
        }
        for i in shown(shape[dim], summarize).into_iter().rev().flatten() {
            stack.push((dim + 1, at + i * strides[dim]));
        }
    }
    out
}

struct Printer<'a> {
    shape: &'a [usize],
    summarize: bool,
    style: NumberStyle,
    values: std::vec::IntoIter<f32>,
    out: String,
}

impl Printer<'_> {
    /// Writes dimension `dim` at the current position; `indent` is the column after its `[`.
    fn dimension(&mut self, dim: usize) {
        let indent = dim + 1;
        self.out.push('[');
        let picks = shown(self.shape[dim], self.summarize);
        if dim + 1 == self.shape.len() {
            let per_line = ((LINE_WIDTH.saturating_sub(indent)) / (self.style.width + 2)).max(1);
            for (n, pick) in picks.iter().enumerate() {
                if n > 0 {
                    self.out.push(',');
                    if n % per_line == 0 {
                        self.out.push('\n');
                        self.out.extend(std::iter::repeat_n(' ', indent));
                    } else {
                        self.out.push(' ');
                    }
                }
                match pick {
                    Some(_) => {
                        let v = self.values.next().unwrap_or(f32::NAN);
                        let text = self.style.write_padded(v);
                        self.out.push_str(&text);
                    }
                    None => self.out.push_str("..."),
                }
            }
        } else {
            // Between sub-blocks: a comma, one blank line per dimension below the next one (as
            // PyTorch), then the indentation.
            let blank_lines = self.shape.len() - dim - 2;
            for (n, pick) in picks.iter().enumerate() {
                if n > 0 {
                    self.out.push(',');
                    self.out.extend(std::iter::repeat_n('\n', 1 + blank_lines));
                    self.out.extend(std::iter::repeat_n(' ', indent));
                }
                match pick {
                    Some(_) => self.dimension(dim + 1),
                    None => self.out.push_str("..."),
                }
            }
        }
        self.out.push(']');
    }
}

/// The values (elided in the middle when there are more than 1000: the first and last 3 of
/// each dimension), then `Tensor[[shape], dtype, device]` with `requires_grad` or the op that
/// made it. `{:.N}` prints N decimals. A tensor whose device the CPU cannot read prints the
/// shape line and why.
///
/// ```
/// # use vramguard_memory::Device;
/// # use vramguard_tensor::Tensor;
/// let t = Tensor::from_slice(&[1.5, -2., 0.25, 4.], &[2, 2], &Device::Host)?;
/// assert_eq!(t.to_string(), "[[ 1.5000, -2.0000],\n [ 0.2500,  4.0000]]\nTensor[[2, 2], f32, Host]");
/// # Ok::<(), vramguard_tensor::TensorError>(())
/// ```
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let summarize = self.elem_count() > SUMMARY_THRESHOLD;
        match shown_values(self, summarize) {
            Ok(values) => {
                let style = NumberStyle::for_values(&values, f.precision());
                if self.rank() == 0 {
                    f.write_str(&style.write(values.first().copied().unwrap_or(f32::NAN)))?;
                } else {
                    let mut printer = Printer {
                        shape: self.dims(),
                        summarize,
                        style,
                        values: values.into_iter(),
                        out: String::new(),
                    };
                    printer.dimension(0);
                    f.write_str(&printer.out)?;
                }
            }
            Err(e) => write!(f, "[values not shown: {e}]")?,
        }
        let dtype = format!("{:?}", self.dtype()).to_lowercase();
        write!(
            f,
            "\nTensor[{:?}, {dtype}, {:?}",
            self.dims(),
            self.device()
        )?;
        if let Some(node) = self.grad_fn() {
            write!(f, ", grad_fn={}", node.name())?;
        } else if self.requires_grad() {
            f.write_str(", requires_grad")?;
        }
        f.write_str("]")
    }
}
