//! The CUDA backend ([`Cuda`]): [`TensorBackend`] as launches on a [`Launcher`]: operands made
//! contiguous or coalesced, argument blocks filled, kernels and GEMMs queued, results read back.

use super::kernels::{Gemm, Kernel, VgArgs, MAX_RANK};
use super::launch::{backend_error, Launcher};
use crate::tensor::backend::TensorBackend;
use crate::tensor::error::{Result, TensorError};
use crate::tensor::kinds::{
    broadcast_strides, checked_numel, contiguous_strides, AdamStep, MapOp, MatmulShape, ZipOp,
};
use crate::tensor::storage::{Storage, Strided, StridedRef};
use crate::Device;
use std::sync::Arc;

fn launch<'a>(
    l: &dyn Launcher,
    op: &'static str,
    t: impl Into<StridedRef<'a>>,
    kernel: Kernel,
    items: u64,
    args: &VgArgs,
) -> Result<()> {
    l.launch(kernel, items, args)
        .map_err(|m| backend_error(op, t.into().device(), m))
}

/// Byte address of element `offset` of `t`'s storage.
fn addr<'a>(t: impl Into<StridedRef<'a>>) -> u64 {
    let t = t.into();
    element_addr(t.storage(), t.offset())
}

fn element_addr(storage: &Storage, offset: usize) -> u64 {
    storage.device_addr() + (offset * std::mem::size_of::<f32>()) as u64
}

/// A fresh contiguous tensor whose elements the caller's launches write before it is read.
#[track_caller]
fn uninit(device: &Device, shape: &[usize], op: &'static str) -> Result<Strided> {
    let numel = checked_numel(op, shape)?;
    let storage = Storage::new(device, numel, shape, op)?;
    // The kernel's write is the storage's first use, as `fresh_mut` marks it on the host.
    storage.note_use_end();
    Ok(Strided::contiguous(storage, shape))
}

/// Merges dimensions that are contiguous for every operand and drops size-1 ones, so the
/// kernels index as few dimensions as possible; fails past [`MAX_RANK`].
fn coalesce<const N: usize>(
    op: &'static str,
    shape: &[usize],
    strides: [&[usize]; N],
) -> Result<(Vec<usize>, [Vec<usize>; N])> {
    let mut dims: Vec<usize> = Vec::new();
    let mut strd: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        if let Some(last) = dims.last_mut() {
            if (0..N).all(|j| strd[j][strd[j].len() - 1] == strides[j][d] * size) {
                *last *= size;
                for j in 0..N {
                    let end = strd[j].len() - 1;
                    strd[j][end] = strides[j][d];
                }
                continue;
            }
        }
        dims.push(size);
        for j in 0..N {
            strd[j].push(strides[j][d]);
        }
    }
    if dims.len() > MAX_RANK {
        return Err(TensorError::InvalidArgument {
            op,
            shape: shape.to_vec(),
            message: format!(
                "the CUDA kernels index at most {MAX_RANK} non-contiguous dimensions; make the \
                 tensor contiguous first"
            ),
        });
    }
    Ok((dims, strd))
}

fn fill_shape(args: &mut VgArgs, dims: &[usize], strides: [&[usize]; 3]) {
    args.rank = dims.len() as u64;
    for (i, &d) in dims.iter().enumerate() {
        args.shape[i] = d as u64;
        args.out_strides[i] = strides[0][i] as u64;
        args.a_strides[i] = strides[1][i] as u64;
        args.b_strides[i] = strides[2][i] as u64;
    }
}

/// `vg_map` from `src` (layout `src_strides` from `src_addr`) into `dst` over `shape`.
#[allow(clippy::too_many_arguments)]
fn launch_map(
    l: &dyn Launcher,
    op: &'static str,
    t: StridedRef<'_>,
    shape: &[usize],
    dst: (u64, &[usize]),
    src: (u64, &[usize]),
    f: MapOp,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let (dims, [so, sa]) = coalesce(op, shape, [dst.1, src.1])?;
    let (code, s0, s1) = f.code();
    let mut args = VgArgs {
        out: dst.0,
        a: src.0,
        n: n as u64,
        op: code,
        s0,
        s1,
        ..Default::default()
    };
    fill_shape(&mut args, &dims, [&so, &sa, &sa]);
    launch(l, op, t, Kernel::Map, n as u64, &args)
}

/// `vg_zip` of `a` and `b` into `dst` over `shape`.
#[allow(clippy::too_many_arguments)]
fn launch_zip(
    l: &dyn Launcher,
    op: &'static str,
    t: StridedRef<'_>,
    shape: &[usize],
    dst: (u64, &[usize]),
    a: (u64, &[usize]),
    b: (u64, &[usize]),
    f: ZipOp,
) -> Result<()> {
    let n: usize = shape.iter().product();
    let (dims, [so, sa, sb]) = coalesce(op, shape, [dst.1, a.1, b.1])?;
    let mut args = VgArgs {
        out: dst.0,
        a: a.0,
        b: b.0,
        n: n as u64,
        op: f.code(),
        ..Default::default()
    };
    fill_shape(&mut args, &dims, [&so, &sa, &sb]);
    launch(l, op, t, Kernel::Zip, n as u64, &args)
}

/// A GEMM operand: a matrix of `rows`×`cols` per batch, in a layout cuBLAS can read.
struct Operand {
    /// The operand, or a copy of it when its own layout could not be used.
    data: Strided,
    /// Row-major (`true`: consecutive columns adjacent) or column-major.
    row_major: bool,
    ld: usize,
    /// Element stride of each batch dim (0 where it is broadcast).
    batch_strides: Vec<usize>,
}

/// `t` (`[.., rows, cols]`) as a GEMM operand over the broadcast `batch`: used in place when
/// each matrix has a unit stride (any batch strides: `matmul` loops over the batch dims that do
/// not collapse into one stride, as the host backend reads any layout in place); otherwise a
/// contiguous copy of it broadcast to the batch.
fn gemm_operand(
    backend: &Cuda,
    t: StridedRef<'_>,
    batch: &[usize],
    rows: usize,
    cols: usize,
) -> Result<Operand> {
    let r = t.rank();
    let (rs, cs) = (t.strides()[r - 2], t.strides()[r - 1]);
    let batch_strides = broadcast_strides(&t.dims()[..r - 2], &t.strides()[..r - 2], batch);
    let row_major = (cs == 1 || cols == 1).then_some(if rows == 1 { cols } else { rs });
    let col_major = (rs == 1 || rows == 1).then_some(if cols == 1 { rows } else { cs });
    if let Some(ld) = row_major.filter(|&ld| ld >= cols.max(1)) {
        return Ok(Operand {
            data: shared(t),
            row_major: true,
            ld,
            batch_strides,
        });
    }
    if let Some(ld) = col_major.filter(|&ld| ld >= rows.max(1)) {
        return Ok(Operand {
            data: shared(t),
            row_major: false,
            ld,
            batch_strides,
        });
    }
    let mut full = batch.to_vec();
    full.extend_from_slice(&[rows, cols]);
    checked_numel("broadcast_as", &full)?;
    let broadcast = t.layout.broadcast_to(&full);
    let data = contiguous(
        backend,
        StridedRef {
            storage: t.storage,
            layout: &broadcast,
        },
    )?;
    Ok(Operand {
        data,
        row_major: true,
        ld: cols.max(1),
        batch_strides: contiguous_strides(batch)
            .iter()
            .map(|s| s * rows * cols)
            .collect(),
    })
}

/// Another handle on `t`'s storage and layout, for a result that keeps it alive.
fn shared(t: StridedRef<'_>) -> Strided {
    Strided {
        storage: std::sync::Arc::clone(t.storage),
        layout: t.layout.clone(),
    }
}

/// `t` if contiguous, else a contiguous copy of it (what `Tensor::contiguous` makes, under the
/// same op name).
fn contiguous(backend: &Cuda, t: StridedRef<'_>) -> Result<Strided> {
    if t.is_contiguous() {
        return Ok(shared(t));
    }
    backend.map(t, "contiguous", MapOp::Copy)
}

/// The one stride that walks every batch in row-major order, if there is one.
fn single_stride(batch: &[usize], strides: &[usize]) -> Option<usize> {
    let mut stride: Option<usize> = None;
    let mut expected = 0usize;
    for (&d, &s) in batch.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        match stride {
            None => {
                stride = Some(s);
                expected = s * d;
            }
            Some(_) => {
                if s != expected {
                    return None;
                }
                expected = s * d;
            }
        }
    }
    Some(stride.unwrap_or(0))
}

/// `ids` in a temporary device buffer from the allocator (freed once the work is queued; the
/// block is reused only by work queued after it on the same stream).
fn upload_ids(
    l: &dyn Launcher,
    device: &Device,
    ids: &[u32],
    op: &'static str,
) -> Result<crate::device::Allocation> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_ne_bytes()).collect();
    let buffer = device.allocate(bytes.len().max(1))?;
    l.upload(buffer.addr(), &bytes)
        .map_err(|m| backend_error(op, device, m))?;
    Ok(buffer)
}

/// What `sum_rows` makes of each row's sum.
#[derive(Clone, Copy)]
enum RowSum {
    /// `scale · sum`.
    Scale(f32),
    /// `sum of squares / n`.
    MeanOfSquares(f32),
}

/// Rows longer than this are summed in chunks of this many values first.
const SUM_CHUNK: usize = 1024;

/// `out[r]` from row `r` of contiguous `src` (`rows` rows of `len`), with `vg_sum_rows`: one
/// launch when rows are short or many, else partial sums of chunks and then their sums.
fn sum_rows(
    l: &dyn Launcher,
    op: &'static str,
    src: StridedRef<'_>,
    out: StridedRef<'_>,
    (rows, len): (usize, usize),
    how: RowSum,
) -> Result<()> {
    let (square, finish, s0) = match how {
        RowSum::Scale(s) => (0, 0, s),
        RowSum::MeanOfSquares(n) => (1, 2, n),
    };
    let mut args = VgArgs {
        out: addr(out),
        a: addr(src),
        n: rows as u64,
        len: len as u64,
        inner: len as u64,
        op: square | finish,
        s0,
        ..Default::default()
    };
    if len <= 2 * SUM_CHUNK || rows >= 4096 {
        return launch(l, op, src, Kernel::SumRows, rows as u64, &args);
    }
    let chunks = len.div_ceil(SUM_CHUNK);
    let partial = uninit(src.device(), &[rows, chunks], op)?;
    let first = VgArgs {
        out: addr(&partial),
        n: (rows * chunks) as u64,
        inner: SUM_CHUNK as u64,
        op: square,
        s0: 1.0,
        ..args
    };
    launch(l, op, src, Kernel::SumRows, first.n, &first)?;
    args.a = addr(&partial);
    args.len = chunks as u64;
    args.inner = chunks as u64;
    args.op = finish;
    launch(l, op, src, Kernel::SumRows, rows as u64, &args)?;
    partial.storage().note_use_end();
    Ok(())
}

/// The bytes of an `f32` slice.
fn f32_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: `u8` has alignment 1 and every byte of an `f32` is initialised; the slice covers
    // exactly the same memory, borrowed for the same lifetime.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// The bytes of an `f32` slice, writable.
fn f32_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: any byte pattern is a valid `f32` and `u8` has alignment 1; the slice covers
    // exactly the same memory, borrowed mutably for the same lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}

/// The CUDA backend: every primitive as launches on its launcher (a device's
/// [`DeviceLauncher`](super::DeviceLauncher) from [`super::super::on`], or the checks' launcher
/// of host-compiled kernels).
pub(crate) struct Cuda {
    launcher: Arc<dyn Launcher>,
}

impl Cuda {
    /// The backend launching through `launcher`.
    pub(crate) fn new(launcher: Arc<dyn Launcher>) -> Cuda {
        Cuda { launcher }
    }
}

impl TensorBackend for Cuda {
    fn map(&self, src: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<Strided> {
        let l = &*self.launcher;
        let out = uninit(src.device(), src.dims(), op)?;
        let so = contiguous_strides(src.dims());
        launch_map(
            l,
            op,
            src,
            src.dims(),
            (addr(&out), &so),
            (addr(src), src.strides()),
            f,
        )?;
        src.storage().note_use_end();
        Ok(out)
    }

    fn map_inplace(&self, dst: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<()> {
        let l = &*self.launcher;
        let target = (addr(dst), dst.strides());
        launch_map(l, op, dst, dst.dims(), target, target, f)?;
        dst.storage().note_use_end();
        Ok(())
    }

    fn zip(
        &self,
        a: StridedRef<'_>,
        b: StridedRef<'_>,
        shape: &[usize],
        op: &'static str,
        f: ZipOp,
    ) -> Result<Strided> {
        let l = &*self.launcher;
        let sa = broadcast_strides(a.dims(), a.strides(), shape);
        let sb = broadcast_strides(b.dims(), b.strides(), shape);
        let out = uninit(a.device(), shape, op)?;
        let so = contiguous_strides(shape);
        launch_zip(
            l,
            op,
            a,
            shape,
            (addr(&out), &so),
            (addr(a), &sa),
            (addr(b), &sb),
            f,
        )?;
        a.storage().note_use_end();
        b.storage().note_use_end();
        Ok(out)
    }

    fn zip_inplace(
        &self,
        dst: StridedRef<'_>,
        src: StridedRef<'_>,
        op: &'static str,
        f: ZipOp,
    ) -> Result<()> {
        let l = &*self.launcher;
        let ss = broadcast_strides(src.dims(), src.strides(), dst.dims());
        let target = (addr(dst), dst.strides());
        launch_zip(l, op, dst, dst.dims(), target, target, (addr(src), &ss), f)?;
        dst.storage().note_use_end();
        src.storage().note_use_end();
        Ok(())
    }

    fn matmul(&self, a: StridedRef<'_>, b: StridedRef<'_>, shape: &MatmulShape) -> Result<Strided> {
        const OP: &str = "matmul";
        let l = &*self.launcher;
        let MatmulShape { batch, m, k, n } = shape;
        let (m, k, n) = (*m, *k, *n);
        let out = uninit(a.device(), &shape.out_shape(), OP)?;
        if out.elem_count() == 0 {
            return Ok(out);
        }
        if k == 0 {
            // An empty sum: the product is all zeros.
            self.map_inplace(out.as_ref(), OP, MapOp::Fill(0.0))?;
            return Ok(out);
        }
        let oa = gemm_operand(self, a, batch, m, k)?;
        let ob = gemm_operand(self, b, batch, k, n)?;
        let oc: Vec<usize> = contiguous_strides(batch)
            .iter()
            .map(|s| s * m * n)
            .collect();
        // The batch dims from `split` on collapse into one stride for every operand: one
        // strided-batched GEMM covers them; the dims before it are looped over.
        let split = (0..=batch.len())
            .find(|&s| {
                [&oa.batch_strides, &ob.batch_strides, &oc]
                    .iter()
                    .all(|strides| single_stride(&batch[s..], &strides[s..]).is_some())
            })
            .unwrap_or(batch.len());
        let inner = &batch[split..];
        let stride = |strides: &[usize]| single_stride(inner, &strides[split..]).unwrap_or(0);
        let (sa, sb, sc) = (
            stride(&oa.batch_strides),
            stride(&ob.batch_strides),
            stride(&oc),
        );
        let outer: usize = batch[..split].iter().product();
        for index in 0..outer {
            // Element offsets of this outer batch index in each operand.
            let (mut rest, mut at) = (index, [0usize; 3]);
            for d in (0..split).rev() {
                let i = rest % batch[d];
                rest /= batch[d];
                for (o, strides) in at
                    .iter_mut()
                    .zip([&oa.batch_strides, &ob.batch_strides, &oc])
                {
                    *o += i * strides[d];
                }
            }
            let bytes = |elements: usize| (elements * std::mem::size_of::<f32>()) as u64;
            // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS's A is our B and its B our A.
            // A row-major matrix read column-major is its transpose, so it needs no op; a
            // column-major one does.
            let (mut rows, mut count) = (m, inner.iter().product::<usize>());
            if oa.row_major && sb == 0 && count > 1 && sa == m * oa.ld && oa.ld == k {
                // The Linear-layer case: every batch's rows are stacked contiguously and the right
                // operand is one matrix, so one GEMM covers them all.
                rows = m * count;
                count = 1;
            }
            let gemm = Gemm {
                transa: !ob.row_major,
                transb: !oa.row_major,
                m: n,
                n: rows,
                k,
                a: addr(&ob.data) + bytes(at[1]),
                lda: ob.ld,
                stride_a: sb,
                b: addr(&oa.data) + bytes(at[0]),
                ldb: oa.ld,
                stride_b: sa,
                c: addr(&out) + bytes(at[2]),
                ldc: n,
                stride_c: if count == 1 { rows * n } else { sc },
                count,
            };
            l.gemm(&gemm)
                .map_err(|msg| backend_error(OP, a.device(), msg))?;
        }
        oa.data.storage().note_use_end();
        ob.data.storage().note_use_end();
        Ok(out)
    }

    fn softmax(
        &self,
        x: StridedRef<'_>,
        dim: usize,
        log: bool,
        op: &'static str,
    ) -> Result<Strided> {
        let l = &*self.launcher;
        let x = contiguous(self, x)?;
        let len = x.dims()[dim];
        let inner: usize = x.dims()[dim + 1..].iter().product();
        let outer: usize = x.dims()[..dim].iter().product();
        let out = uninit(x.device(), x.dims(), op)?;
        if len == 0 {
            return Ok(out);
        }
        let args = VgArgs {
            out: addr(&out),
            a: addr(&x),
            n: (outer * inner) as u64,
            len: len as u64,
            inner: inner as u64,
            op: i32::from(log),
            ..Default::default()
        };
        launch(l, op, &x, Kernel::Softmax, args.n, &args)?;
        x.storage().note_use_end();
        Ok(out)
    }

    /// Softmax along the last dimension of contiguous `x`, written into `x`: `vg_softmax` reads
    /// each element of a row before it writes it (true of softmax, not of log-softmax), so its
    /// output may be its input.
    fn softmax_last_dim_inplace(&self, x: StridedRef<'_>, op: &'static str) -> Result<()> {
        let l = &*self.launcher;
        let len = x.dims().last().copied().unwrap_or(0);
        if len == 0 || x.elem_count() == 0 {
            return Ok(());
        }
        let args = VgArgs {
            out: addr(x),
            a: addr(x),
            n: (x.elem_count() / len) as u64,
            len: len as u64,
            inner: 1,
            op: 0,
            ..Default::default()
        };
        launch(l, op, x, Kernel::Softmax, args.n, &args)?;
        x.storage().note_use_end();
        Ok(())
    }

    /// Layer norm of contiguous `x` over its last dimension, written into `x`: `vg_layer_norm`
    /// reads a row's statistics first and then each element before it writes it, so its output
    /// may be its input. `weight` and `bias` are contiguous and do not share `x`'s storage.
    fn layer_norm_inplace(
        &self,
        x: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        bias: Option<StridedRef<'_>>,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        let l = &*self.launcher;
        let d = x.dims().last().copied().unwrap_or(0);
        if d == 0 || x.elem_count() == 0 {
            return Ok(());
        }
        let rows = x.elem_count() / d;
        let args = VgArgs {
            out: addr(x),
            a: addr(x),
            b: weight.map_or(0, addr),
            c: bias.map_or(0, addr),
            n: rows as u64,
            len: d as u64,
            s0: eps,
            ..Default::default()
        };
        launch(l, OP, x, Kernel::LayerNorm, rows as u64, &args)?;
        for t in [Some(x), weight, bias].into_iter().flatten() {
            t.storage().note_use_end();
        }
        Ok(())
    }

    fn layer_norm(
        &self,
        x: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        bias: Option<StridedRef<'_>>,
        eps: f32,
        stats: bool,
    ) -> Result<(Strided, Option<(Strided, Strided)>)> {
        const OP: &str = "layer_norm";
        let l = &*self.launcher;
        let d = x.dims()[x.rank() - 1];
        let rows = x.elem_count() / d.max(1);
        let row_shape = &x.dims()[..x.rank() - 1];
        let out = uninit(x.device(), x.dims(), OP)?;
        let row_stats = if stats {
            Some((
                uninit(x.device(), row_shape, OP)?,
                uninit(x.device(), row_shape, OP)?,
            ))
        } else {
            None
        };
        let args = VgArgs {
            out: addr(&out),
            out2: row_stats.as_ref().map_or(0, |s| addr(&s.0)),
            out3: row_stats.as_ref().map_or(0, |s| addr(&s.1)),
            a: addr(x),
            b: weight.map_or(0, addr),
            c: bias.map_or(0, addr),
            n: rows as u64,
            len: d as u64,
            s0: eps,
            ..Default::default()
        };
        launch(l, OP, x, Kernel::LayerNorm, rows as u64, &args)?;
        for t in [Some(x), weight, bias].into_iter().flatten() {
            t.storage().note_use_end();
        }
        Ok((out, row_stats))
    }

    fn layer_norm_backward(
        &self,
        g: StridedRef<'_>,
        x: StridedRef<'_>,
        mean: StridedRef<'_>,
        rstd: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        need_w: bool,
        need_b: bool,
    ) -> Result<(Strided, Option<Strided>, Option<Strided>)> {
        const OP: &str = "layer_norm_backward";
        let l = &*self.launcher;
        let d = x.dims()[x.rank() - 1];
        let rows = x.elem_count() / d.max(1);
        let gx = uninit(x.device(), x.dims(), OP)?;
        let mut args = VgArgs {
            out: addr(&gx),
            a: addr(g),
            b: addr(x),
            c: addr(mean),
            d: addr(rstd),
            e: weight.map_or(0, addr),
            n: rows as u64,
            len: d as u64,
            ..Default::default()
        };
        launch(l, OP, x, Kernel::LayerNormBackwardInput, rows as u64, &args)?;
        let gw = need_w.then(|| uninit(x.device(), &[d], OP)).transpose()?;
        let gb = need_b.then(|| uninit(x.device(), &[d], OP)).transpose()?;
        if need_w || need_b {
            args.out = gw.as_ref().map_or(0, addr);
            args.out2 = gb.as_ref().map_or(0, addr);
            args.inner = rows as u64;
            launch(l, OP, x, Kernel::LayerNormBackwardParams, d as u64, &args)?;
        }
        for t in [Some(g), Some(x), Some(mean), Some(rstd), weight]
            .into_iter()
            .flatten()
        {
            t.storage().note_use_end();
        }
        Ok((gx, gw, gb))
    }

    fn embedding(
        &self,
        table: StridedRef<'_>,
        ids: &[u32],
        out_shape: &[usize],
    ) -> Result<Strided> {
        const OP: &str = "embedding";
        let l = &*self.launcher;
        let d = table.dims()[1];
        let out = uninit(table.device(), out_shape, OP)?;
        let ids_buffer = upload_ids(l, table.device(), ids, OP)?;
        let mut args = VgArgs {
            out: addr(&out),
            a: element_addr(table.storage(), 0),
            ids: ids_buffer.addr(),
            n: (ids.len() * d) as u64,
            len: d as u64,
            a_offset: table.offset() as u64,
            ..Default::default()
        };
        args.a_strides[0] = table.strides()[0] as u64;
        args.a_strides[1] = table.strides()[1] as u64;
        launch(l, OP, table, Kernel::Embedding, args.n, &args)?;
        table.storage().note_use_end();
        Ok(out)
    }

    fn embedding_backward(
        &self,
        g: StridedRef<'_>,
        ids: &[u32],
        table_shape: &[usize],
    ) -> Result<Strided> {
        const OP: &str = "embedding_backward";
        let l = &*self.launcher;
        let d = table_shape[1];
        let out = uninit(g.device(), table_shape, OP)?;
        self.map_inplace(out.as_ref(), OP, MapOp::Fill(0.0))?;
        let ids_buffer = upload_ids(l, g.device(), ids, OP)?;
        let args = VgArgs {
            out: addr(&out),
            a: addr(g),
            ids: ids_buffer.addr(),
            len: d as u64,
            inner: ids.len() as u64,
            ..Default::default()
        };
        launch(l, OP, g, Kernel::EmbeddingBackward, d as u64, &args)?;
        g.storage().note_use_end();
        Ok(out)
    }

    fn reduce(
        &self,
        x: StridedRef<'_>,
        dims: &[usize],
        keep_shape: &[usize],
        scale: f32,
        op: &'static str,
    ) -> Result<Strided> {
        let l = &*self.launcher;
        // Kept dims first, reduced dims last (each group in its order), made contiguous: each
        // output element is then one row, summed in the host backend's order (unless the row is
        // long enough to be summed in chunks).
        let kept: Vec<usize> = (0..x.rank()).filter(|d| !dims.contains(d)).collect();
        let mut perm = kept.clone();
        let mut reduced: Vec<usize> = dims.to_vec();
        reduced.sort_unstable();
        perm.extend_from_slice(&reduced);
        let rows: usize = kept.iter().map(|&d| x.dims()[d]).product();
        let len: usize = reduced.iter().map(|&d| x.dims()[d]).product();
        let permuted = x.layout.permuted(&perm);
        let lanes = contiguous(
            self,
            StridedRef {
                storage: x.storage,
                layout: &permuted,
            },
        )?;
        let out = uninit(x.device(), keep_shape, op)?;
        sum_rows(
            l,
            op,
            lanes.as_ref(),
            out.as_ref(),
            (rows, len),
            RowSum::Scale(scale),
        )?;
        lanes.storage().note_use_end();
        Ok(out)
    }

    fn cross_entropy(&self, logp: StridedRef<'_>, targets: &[u32]) -> Result<Strided> {
        const OP: &str = "cross_entropy";
        let l = &*self.launcher;
        let c = logp.dims()[logp.rank() - 1];
        let out = uninit(logp.device(), &[], OP)?;
        let ids = upload_ids(l, logp.device(), targets, OP)?;
        let args = VgArgs {
            out: addr(&out),
            a: addr(logp),
            ids: ids.addr(),
            n: 1,
            len: c as u64,
            inner: targets.len() as u64,
            ..Default::default()
        };
        launch(l, OP, logp, Kernel::CrossEntropy, 1, &args)?;
        logp.storage().note_use_end();
        Ok(out)
    }

    fn cross_entropy_backward(
        &self,
        g: StridedRef<'_>,
        probs: StridedRef<'_>,
        targets: &[u32],
    ) -> Result<Strided> {
        const OP: &str = "cross_entropy_backward";
        let l = &*self.launcher;
        let c = probs.dims()[probs.rank() - 1];
        let out = uninit(probs.device(), probs.dims(), OP)?;
        let ids = upload_ids(l, probs.device(), targets, OP)?;
        let args = VgArgs {
            out: addr(&out),
            a: addr(probs),
            b: addr(g),
            ids: ids.addr(),
            n: probs.elem_count() as u64,
            len: c as u64,
            s0: targets.len().max(1) as f32,
            ..Default::default()
        };
        launch(l, OP, probs, Kernel::CrossEntropyBackward, args.n, &args)?;
        probs.storage().note_use_end();
        g.storage().note_use_end();
        Ok(out)
    }

    fn mean_square(&self, diff: StridedRef<'_>, op: &'static str) -> Result<Strided> {
        let l = &*self.launcher;
        let out = uninit(diff.device(), &[], op)?;
        let n = diff.elem_count();
        sum_rows(
            l,
            op,
            diff,
            out.as_ref(),
            (1, n),
            RowSum::MeanOfSquares(n.max(1) as f32),
        )?;
        diff.storage().note_use_end();
        Ok(out)
    }

    fn to_vec(&self, t: StridedRef<'_>, op: &'static str) -> Result<Vec<f32>> {
        let l = &*self.launcher;
        let copy;
        let t = if t.is_contiguous() {
            t
        } else {
            copy = self.map(t, op, MapOp::Copy)?;
            copy.as_ref()
        };
        let mut out = vec![0.0f32; t.elem_count()];
        l.download(f32_bytes_mut(&mut out), addr(t))
            .map_err(|m| backend_error(op, t.device(), m))?;
        t.storage().note_use_end();
        Ok(out)
    }

    fn upload(
        &self,
        device: &Device,
        shape: &[usize],
        op: &'static str,
        data: &[f32],
    ) -> Result<Strided> {
        let l = &*self.launcher;
        let out = uninit(device, shape, op)?;
        l.upload(addr(&out), f32_bytes(data))
            .map_err(|m| backend_error(op, device, m))?;
        Ok(out)
    }

    fn full(&self, device: &Device, shape: &[usize], value: f32) -> Result<Strided> {
        let out = uninit(device, shape, "full")?;
        self.map_inplace(out.as_ref(), "full", MapOp::Fill(value))?;
        Ok(out)
    }

    fn adam_step(&self, state: [StridedRef<'_>; 4], hyper: &AdamStep) -> Result<()> {
        let l = &*self.launcher;
        let [param, grad, m, v] = state;
        let args = VgArgs {
            out: addr(param),
            out2: addr(m),
            out3: addr(v),
            a: addr(grad),
            n: param.elem_count() as u64,
            s0: hyper.lr,
            s1: hyper.beta1,
            s2: hyper.beta2,
            s3: hyper.eps,
            s4: hyper.bias1,
            s5: hyper.bias2,
            ..Default::default()
        };
        launch(l, "Adam::step", param, Kernel::Adam, args.n, &args)?;
        for t in state {
            t.storage().note_use_end();
        }
        Ok(())
    }
}
