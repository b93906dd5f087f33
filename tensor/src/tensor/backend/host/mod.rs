//! The host backend ([`Host`]): [`TensorBackend`] over slices of host memory (strided loops and
//! `matrixmultiply`'s GEMM, in [`kernels`]).

mod kernels;

use super::super::error::{unreachable_error, Result, TensorError};
use super::super::kinds::{
    broadcast_strides, checked_numel, contiguous_strides, gelu, gelu_derivative, sigmoid, AdamStep,
    BinOp, MapOp, MatmulShape, ZipOp,
};
use super::super::storage::{ReadSet, Storage, Strided, StridedRef};
use super::TensorBackend;
use crate::Device;
use std::sync::Arc;

/// Runs `$run` with `$g` bound to the host function of the [`MapOp`] `$f`, a closure of its own
/// type in each arm, so every loop is compiled for one function (no per-element dispatch).
macro_rules! with_map_fn {
    ($f:expr, |$g:ident| $run:expr) => {
        match $f {
            MapOp::Copy => {
                let $g = |x: f32| x;
                $run
            }
            MapOp::Scalar(BinOp::Add, s) => {
                let $g = move |x: f32| x + s;
                $run
            }
            MapOp::Scalar(BinOp::Sub, s) => {
                let $g = move |x: f32| x - s;
                $run
            }
            MapOp::Scalar(BinOp::Mul, s) => {
                let $g = move |x: f32| x * s;
                $run
            }
            MapOp::Scalar(BinOp::Div, s) => {
                let $g = move |x: f32| x / s;
                $run
            }
            MapOp::Affine(mul, add) => {
                let $g = move |x: f32| x * mul + add;
                $run
            }
            MapOp::Relu => {
                let $g = |x: f32| x.max(0.0);
                $run
            }
            MapOp::Gelu => {
                let $g = gelu;
                $run
            }
            MapOp::Tanh => {
                let $g = f32::tanh;
                $run
            }
            MapOp::Sigmoid => {
                let $g = sigmoid;
                $run
            }
            MapOp::Exp => {
                let $g = f32::exp;
                $run
            }
            MapOp::Log => {
                let $g = f32::ln;
                $run
            }
            MapOp::Neg => {
                let $g = |x: f32| -x;
                $run
            }
            MapOp::Fill(v) => {
                let $g = move |_: f32| v;
                $run
            }
        }
    };
}

/// As `with_map_fn`, for a [`ZipOp`].
macro_rules! with_zip_fn {
    ($f:expr, |$g:ident| $run:expr) => {
        match $f {
            ZipOp::Bin(BinOp::Add) => {
                let $g = |a: f32, b: f32| a + b;
                $run
            }
            ZipOp::Bin(BinOp::Sub) => {
                let $g = |a: f32, b: f32| a - b;
                $run
            }
            ZipOp::Bin(BinOp::Mul) => {
                let $g = |a: f32, b: f32| a * b;
                $run
            }
            ZipOp::Bin(BinOp::Div) => {
                let $g = |a: f32, b: f32| a / b;
                $run
            }
            ZipOp::Second => {
                let $g = |_: f32, b: f32| b;
                $run
            }
            ZipOp::ReluBackward => {
                let $g = |g: f32, o: f32| if o > 0.0 { g } else { 0.0 };
                $run
            }
            ZipOp::GeluBackward => {
                let $g = |g: f32, x: f32| g * gelu_derivative(x);
                $run
            }
            ZipOp::TanhBackward => {
                let $g = |g: f32, o: f32| g * (1.0 - o * o);
                $run
            }
            ZipOp::SigmoidBackward => {
                let $g = |g: f32, o: f32| g * o * (1.0 - o);
                $run
            }
        }
    };
}

/// A new contiguous tensor whose elements `fill` writes (it must write every one).
#[track_caller]
pub(crate) fn alloc_with(
    device: &Device,
    shape: &[usize],
    op: &'static str,
    fill: impl FnOnce(&mut [f32]) -> Result<()>,
) -> Result<Strided> {
    let numel = checked_numel(op, shape)?;
    let mut storage = Storage::new(device, numel, shape, op)?;
    let slot = Arc::get_mut(&mut storage)
        .ok_or_else(|| unreachable_error(op, "fresh storage is shared"))?;
    fill(slot.fresh_mut(op)?)?;
    Ok(Strided::contiguous(storage, shape))
}

/// A single-element tensor of shape `[]` (as `Tensor::scalar` makes it: a `full`).
#[track_caller]
fn scalar(device: &Device, value: f32) -> Result<Strided> {
    let _origin = crate::alloc::enter_op("scalar");
    alloc_with(device, &[], "full", |d| {
        d.fill(value);
        Ok(())
    })
}

/// The value of a single-element tensor (as `Tensor::to_scalar` reads it).
fn to_scalar(t: StridedRef<'_>) -> Result<f32> {
    if t.elem_count() != 1 {
        return Err(TensorError::InvalidArgument {
            op: "to_scalar",
            shape: t.dims().to_vec(),
            message: "needs exactly one element; reduce first".into(),
        });
    }
    Ok(Host.to_vec(t, "to_vec")?[0])
}

/// The host backend: every primitive over slices of host memory, on host-addressable devices.
/// Zero-sized, so [`super::on`] boxes it without allocating.
pub(crate) struct Host;

impl TensorBackend for Host {
    fn map(&self, src: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<Strided> {
        let read = src.storage().read(op)?;
        alloc_with(src.device(), src.dims(), op, |out| {
            let so = contiguous_strides(src.dims());
            with_map_fn!(f, |g| kernels::unary(
                src.dims(),
                out,
                &so,
                read.data,
                src.strides(),
                src.offset(),
                g,
            ));
            Ok(())
        })
    }

    fn map_inplace(&self, dst: StridedRef<'_>, op: &'static str, f: MapOp) -> Result<()> {
        let w = dst.storage().write(op)?;
        with_map_fn!(f, |g| kernels::inplace_unary(
            dst.dims(),
            w.data,
            dst.strides(),
            dst.offset(),
            g
        ));
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
        let sa = broadcast_strides(a.dims(), a.strides(), shape);
        let sb = broadcast_strides(b.dims(), b.strides(), shape);
        let reads = ReadSet::new(op, &[a, b])?;
        let (da, db) = (reads.storage_of(a), reads.storage_of(b));
        alloc_with(a.device(), shape, op, |out| {
            let so = contiguous_strides(shape);
            with_zip_fn!(f, |g| kernels::binary(
                shape,
                out,
                &so,
                da,
                &sa,
                a.offset(),
                db,
                &sb,
                b.offset(),
                g,
            ));
            Ok(())
        })
    }

    fn zip_inplace(
        &self,
        dst: StridedRef<'_>,
        src: StridedRef<'_>,
        op: &'static str,
        f: ZipOp,
    ) -> Result<()> {
        let ss = broadcast_strides(src.dims(), src.strides(), dst.dims());
        let (dst_s, src_s) = (dst.storage(), src.storage());
        // Address order, so that concurrent readers and writers cannot deadlock.
        let (w, r) = if Arc::as_ptr(dst_s) < Arc::as_ptr(src_s) {
            let w = dst_s.write(op)?;
            (w, src_s.read(op)?)
        } else {
            let r = src_s.read(op)?;
            (dst_s.write(op)?, r)
        };
        with_zip_fn!(f, |g| kernels::inplace_binary(
            dst.dims(),
            w.data,
            dst.strides(),
            dst.offset(),
            r.data,
            &ss,
            src.offset(),
            g,
        ));
        Ok(())
    }

    fn matmul(&self, a: StridedRef<'_>, b: StridedRef<'_>, shape: &MatmulShape) -> Result<Strided> {
        const OP: &str = "matmul";
        let MatmulShape { batch, m, k, n } = shape;
        let (m, k, n) = (*m, *k, *n);
        let (ra, rb) = (a.rank(), b.rank());
        let (sa, sb) = (a.strides(), b.strides());
        let reads = ReadSet::new(OP, &[a, b])?;
        let (da, db) = (reads.storage_of(a), reads.storage_of(b));
        alloc_with(a.device(), &shape.out_shape(), OP, |c| {
            if c.is_empty() {
                return Ok(());
            }
            if k == 0 {
                // An empty sum: the product is all zeros.
                c.fill(0.0);
                return Ok(());
            }
            let (rsa, csa) = (sa[ra - 2], sa[ra - 1]);
            let (rsb, csb) = (sb[rb - 2], sb[rb - 1]);
            // A plain matrix on the right and foldable batch dims on the left: one GEMM with all
            // rows stacked (the Linear-layer case).
            let foldable =
                rb == 2 && ra > 2 && (0..ra - 2).all(|i| sa[i] == sa[i + 1] * a.dims()[i + 1]);
            if foldable || batch.iter().product::<usize>() == 1 && ra == 2 && rb == 2 {
                let rows = a.elem_count() / k;
                // SAFETY: `da` and `db` are the whole storages of the operands, whose layouts
                // address only elements inside them; `c` is a fresh rows×n buffer.
                unsafe {
                    kernels::gemm(
                        rows,
                        k,
                        n,
                        da.as_ptr().add(a.offset()),
                        rsa,
                        csa,
                        db.as_ptr().add(b.offset()),
                        rsb,
                        csb,
                        c.as_mut_ptr(),
                        n,
                        1,
                    )
                };
                return Ok(());
            }
            let bsa = broadcast_strides(&a.dims()[..ra - 2], &sa[..ra - 2], batch);
            let bsb = broadcast_strides(&b.dims()[..rb - 2], &sb[..rb - 2], batch);
            let bso: Vec<usize> = contiguous_strides(batch)
                .iter()
                .map(|s| s * m * n)
                .collect();
            let c_ptr = c.as_mut_ptr();
            kernels::for_each_index(
                batch,
                [&bso, &bsa, &bsb],
                [0, a.offset(), b.offset()],
                |[oc, oa, ob]| {
                    // SAFETY: as above; each batch writes its own m×n block of `c`.
                    unsafe {
                        kernels::gemm(
                            m,
                            k,
                            n,
                            da.as_ptr().add(oa),
                            rsa,
                            csa,
                            db.as_ptr().add(ob),
                            rsb,
                            csb,
                            c_ptr.add(oc),
                            n,
                            1,
                        )
                    }
                },
            );
            Ok(())
        })
    }

    fn softmax(
        &self,
        x: StridedRef<'_>,
        dim: usize,
        log: bool,
        op: &'static str,
    ) -> Result<Strided> {
        let shape = x.dims().to_vec();
        let len = shape[dim];
        let mut lanes = shape.clone();
        lanes[dim] = 1;
        let so = contiguous_strides(&shape);
        let (sx, xs) = (x.strides()[dim], so[dim]);
        let read = x.storage().read(op)?;
        alloc_with(x.device(), &shape, op, |out| {
            kernels::for_each_index(&lanes, [&so, x.strides()], [0, x.offset()], |[o, ix]| {
                let v = |i: usize| read.data[ix + i * sx];
                let max = (0..len).map(v).fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0.0f32;
                for i in 0..len {
                    let e = (v(i) - max).exp();
                    out[o + i * xs] = e;
                    sum += e;
                }
                if log {
                    let lse = sum.ln();
                    for i in 0..len {
                        out[o + i * xs] = v(i) - max - lse;
                    }
                } else {
                    let inv = 1.0 / sum;
                    for i in 0..len {
                        out[o + i * xs] *= inv;
                    }
                }
            });
            Ok(())
        })
    }

    /// Softmax along the last dimension of `x` (which covers its whole contiguous storage), written
    /// into `x`: each row with the arithmetic of [`Self::softmax`], in its order.
    fn softmax_last_dim_inplace(&self, x: StridedRef<'_>, op: &'static str) -> Result<()> {
        let len = x.dims().last().copied().unwrap_or(0);
        let write = x.storage().write(op)?;
        // `chunks_exact_mut(0)` would panic; a row of no elements has nothing to normalise.
        if len > 0 {
            for row in write.data.chunks_exact_mut(len) {
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
        }
        Ok(())
    }

    /// Layer norm of `x` (which covers its whole contiguous storage) over its last dimension,
    /// written into `x`: each row with the arithmetic of [`Self::layer_norm`], in its order (an
    /// output element reads only its own input element once the row's statistics are known).
    /// `weight` and `bias` are contiguous, of the last dimension's size, and do not share `x`'s
    /// storage.
    fn layer_norm_inplace(
        &self,
        x: StridedRef<'_>,
        weight: Option<StridedRef<'_>>,
        bias: Option<StridedRef<'_>>,
        eps: f32,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        let d = x.dims().last().copied().unwrap_or(0);
        if d == 0 {
            return Ok(());
        }
        let params: Vec<StridedRef<'_>> = weight.into_iter().chain(bias).collect();
        let reads = ReadSet::new(OP, &params)?;
        let wd = weight.map(|w| reads.contiguous_data(w));
        let bd = bias.map(|b| reads.contiguous_data(b));
        if wd.is_some_and(|w| w.len() != d) || bd.is_some_and(|b| b.len() != d) {
            return Err(unreachable_error(
                OP,
                "a parameter is not of the last dimension's size",
            ));
        }
        let write = x.storage().write(OP)?;
        let n = d as f32;
        for row in write.data.chunks_exact_mut(d) {
            let mean = row.iter().sum::<f32>() / n;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
            let rstd = 1.0 / (var + eps).sqrt();
            for (j, v) in row.iter_mut().enumerate() {
                let mut y = (*v - mean) * rstd;
                if let Some(w) = wd {
                    y *= w[j];
                }
                if let Some(b) = bd {
                    y += b[j];
                }
                *v = y;
            }
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
        let d = x.dims()[x.rank() - 1];
        let rows = x.elem_count() / d.max(1);
        let row_shape = &x.dims()[..x.rank() - 1];
        let mut operands = vec![x];
        operands.extend(weight);
        operands.extend(bias);
        let reads = ReadSet::new(OP, &operands)?;
        let xd = reads.contiguous_data(x);
        let wd = weight.map(|w| reads.contiguous_data(w));
        let bd = bias.map(|b| reads.contiguous_data(b));
        // Per-row (mean, 1/std) when asked for: host scratch of 8 bytes per row, copied into
        // allocator tensors below.
        let mut row_stats: Vec<(f32, f32)> = Vec::new();
        let out = alloc_with(x.device(), x.dims(), OP, |out| {
            for r in 0..rows {
                let row = &xd[r * d..(r + 1) * d];
                let mean = row.iter().sum::<f32>() / d as f32;
                let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                let rstd = 1.0 / (var + eps).sqrt();
                let o = &mut out[r * d..(r + 1) * d];
                for j in 0..d {
                    let mut y = (row[j] - mean) * rstd;
                    if let Some(w) = wd {
                        y *= w[j];
                    }
                    if let Some(b) = bd {
                        y += b[j];
                    }
                    o[j] = y;
                }
                if stats {
                    row_stats.push((mean, rstd));
                }
            }
            Ok(())
        })?;
        drop(reads);
        if !stats {
            return Ok((out, None));
        }
        let column = |pick: fn(&(f32, f32)) -> f32| {
            alloc_with(x.device(), row_shape, OP, |m| {
                for (m, s) in m.iter_mut().zip(&row_stats) {
                    *m = pick(s);
                }
                Ok(())
            })
        };
        let mean = column(|s| s.0)?;
        let rstd = column(|s| s.1)?;
        Ok((out, Some((mean, rstd))))
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
        let d = x.dims()[x.rank() - 1];
        let rows = x.elem_count() / d.max(1);
        let mut operands = vec![g, x, mean, rstd];
        operands.extend(weight);
        let reads = ReadSet::new(OP, &operands)?;
        let gv = reads.contiguous_data(g);
        let xv = reads.contiguous_data(x);
        let mv = reads.contiguous_data(mean);
        let rv = reads.contiguous_data(rstd);
        let wv = weight.map(|w| reads.contiguous_data(w));
        // Scratch of one row's size (host memory, O(features)): the weight and bias gradients.
        let mut gw = vec![0.0f32; if need_w { d } else { 0 }];
        let mut gb = vec![0.0f32; if need_b { d } else { 0 }];
        let gx = alloc_with(x.device(), x.dims(), OP, |out| {
            for r in 0..rows {
                let (m, rs) = (mv[r], rv[r]);
                let xr = &xv[r * d..(r + 1) * d];
                let grow = &gv[r * d..(r + 1) * d];
                let mut sum_gy = 0.0f32;
                let mut sum_gy_xhat = 0.0f32;
                for j in 0..d {
                    let xhat = (xr[j] - m) * rs;
                    let gy = grow[j] * wv.map_or(1.0, |w| w[j]);
                    sum_gy += gy;
                    sum_gy_xhat += gy * xhat;
                    if need_w {
                        gw[j] += grow[j] * xhat;
                    }
                    if need_b {
                        gb[j] += grow[j];
                    }
                }
                let (mg, mgx) = (sum_gy / d as f32, sum_gy_xhat / d as f32);
                for j in 0..d {
                    let xhat = (xr[j] - m) * rs;
                    let gy = grow[j] * wv.map_or(1.0, |w| w[j]);
                    out[r * d + j] = rs * (gy - mg - xhat * mgx);
                }
            }
            Ok(())
        })?;
        drop(reads);
        let vector = |v: &[f32]| {
            alloc_with(x.device(), &[d], OP, |o| {
                o.copy_from_slice(v);
                Ok(())
            })
        };
        let gw = need_w.then(|| vector(&gw)).transpose()?;
        let gb = need_b.then(|| vector(&gb)).transpose()?;
        Ok((gx, gw, gb))
    }

    fn embedding(
        &self,
        table: StridedRef<'_>,
        ids: &[u32],
        out_shape: &[usize],
    ) -> Result<Strided> {
        const OP: &str = "embedding";
        let d = table.dims()[1];
        let (rs, cs) = (table.strides()[0], table.strides()[1]);
        let read = table.storage().read(OP)?;
        alloc_with(table.device(), out_shape, OP, |out| {
            for (r, &id) in ids.iter().enumerate() {
                let base = table.offset() + id as usize * rs;
                for j in 0..d {
                    out[r * d + j] = read.data[base + j * cs];
                }
            }
            Ok(())
        })
    }

    fn embedding_backward(
        &self,
        g: StridedRef<'_>,
        ids: &[u32],
        table_shape: &[usize],
    ) -> Result<Strided> {
        const OP: &str = "embedding_backward";
        let d = table_shape[1];
        let gr = g.storage().read(OP)?;
        let gv = &gr.data[g.offset()..g.offset() + g.elem_count()];
        alloc_with(g.device(), table_shape, OP, |out| {
            out.fill(0.0);
            for (r, &id) in ids.iter().enumerate() {
                let row = &mut out[id as usize * d..(id as usize + 1) * d];
                for (o, v) in row.iter_mut().zip(&gv[r * d..(r + 1) * d]) {
                    *o += v;
                }
            }
            Ok(())
        })
    }

    fn reduce(
        &self,
        x: StridedRef<'_>,
        // Read from `keep_shape` instead: its reduced dims have size 1 (stride 0 below).
        _dims: &[usize],
        keep_shape: &[usize],
        scale: f32,
        op: &'static str,
    ) -> Result<Strided> {
        let out_strides = broadcast_strides(keep_shape, &contiguous_strides(keep_shape), x.dims());
        let read = x.storage().read(op)?;
        alloc_with(x.device(), keep_shape, op, |out| {
            out.fill(0.0);
            kernels::for_each_index(
                x.dims(),
                [&out_strides, x.strides()],
                [0, x.offset()],
                |[o, i]| out[o] += read.data[i],
            );
            if scale != 1.0 {
                for v in out.iter_mut() {
                    *v *= scale;
                }
            }
            Ok(())
        })
    }

    fn cross_entropy(&self, logp: StridedRef<'_>, targets: &[u32]) -> Result<Strided> {
        const OP: &str = "cross_entropy";
        let c = logp.dims()[logp.rank() - 1];
        let rows = targets.len();
        let loss = {
            let lp = logp.storage().read(OP)?;
            -targets
                .iter()
                .enumerate()
                .map(|(r, &t)| lp.data[r * c + t as usize])
                .sum::<f32>()
                / rows.max(1) as f32
        };
        scalar(logp.device(), loss)
    }

    fn cross_entropy_backward(
        &self,
        g: StridedRef<'_>,
        probs: StridedRef<'_>,
        targets: &[u32],
    ) -> Result<Strided> {
        const OP: &str = "cross_entropy_backward";
        let c = probs.dims()[probs.rank() - 1];
        let scale = to_scalar(g)? / targets.len().max(1) as f32;
        let p = probs.storage().read(OP)?;
        let off = probs.offset();
        alloc_with(probs.device(), probs.dims(), OP, |out| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = p.data[off + i] * scale;
            }
            for (r, &t) in targets.iter().enumerate() {
                out[r * c + t as usize] -= scale;
            }
            Ok(())
        })
    }

    fn mean_square(&self, diff: StridedRef<'_>, op: &'static str) -> Result<Strided> {
        let n = diff.elem_count().max(1) as f32;
        let loss = {
            let r = diff.storage().read(op)?;
            r.data[..diff.elem_count()]
                .iter()
                .map(|d| d * d)
                .sum::<f32>()
                / n
        };
        scalar(diff.device(), loss)
    }

    fn to_vec(&self, t: StridedRef<'_>, op: &'static str) -> Result<Vec<f32>> {
        let read = t.storage().read(op)?;
        let mut out = Vec::with_capacity(t.elem_count());
        kernels::for_each_row(
            t.dims(),
            [t.strides()],
            [t.offset()],
            |[base], n, [stride]| {
                for i in 0..n {
                    out.push(read.data[base + i * stride]);
                }
            },
        );
        Ok(out)
    }

    fn upload(
        &self,
        device: &Device,
        shape: &[usize],
        op: &'static str,
        data: &[f32],
    ) -> Result<Strided> {
        alloc_with(device, shape, op, |d| {
            d.copy_from_slice(data);
            Ok(())
        })
    }

    fn full(&self, device: &Device, shape: &[usize], value: f32) -> Result<Strided> {
        alloc_with(device, shape, "full", |d| {
            d.fill(value);
            Ok(())
        })
    }

    fn adam_step(&self, state: [StridedRef<'_>; 4], hyper: &AdamStep) -> Result<()> {
        const OP: &str = "Adam::step";
        let [p, g, m, v] = state;
        let &AdamStep {
            lr,
            beta1: b1,
            beta2: b2,
            eps,
            bias1: c1,
            bias2: c2,
        } = hyper;
        let pw = p.storage().write(OP)?;
        let gr = g.storage().read(OP)?;
        let mw = m.storage().write(OP)?;
        let vw = v.storage().write(OP)?;
        let n = p.elem_count();
        let (po, go) = (p.offset(), g.offset());
        let pd = &mut pw.data[po..po + n];
        let gd = &gr.data[go..go + n];
        for i in 0..n {
            let gi = gd[i];
            let mi = b1 * mw.data[i] + (1.0 - b1) * gi;
            let vi = b2 * vw.data[i] + (1.0 - b2) * gi * gi;
            mw.data[i] = mi;
            vw.data[i] = vi;
            pd[i] -= lr * (mi / c1) / ((vi / c2).sqrt() + eps);
        }
        Ok(())
    }
}
