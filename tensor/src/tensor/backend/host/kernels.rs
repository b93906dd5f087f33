//! Host kernels: strided iteration and GEMM. No allocation happens here; callers hand in
//! buffers that came from the allocator.

/// Calls `f(bases, len, inner_strides)` for every innermost row of `shape`, where operand `j`
/// has element strides `strides[j]` and starts at `offsets[j]`. Adjacent dimensions that are
/// contiguous for every operand are merged first, so contiguous data is one long row.
pub(crate) fn for_each_row<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    mut f: impl FnMut([usize; N], usize, [usize; N]),
) {
    if shape.contains(&0) {
        return;
    }
    // Coalesce: drop size-1 dims, merge dim i into i+1 when stride[i] == stride[i+1]*shape[i+1].
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut strd: Vec<[usize; N]> = Vec::with_capacity(shape.len());
    for (d, &size) in shape.iter().enumerate() {
        if size == 1 {
            continue;
        }
        let s: [usize; N] = std::array::from_fn(|j| strides[j][d]);
        if let (Some(last_size), Some(last_s)) = (dims.last_mut(), strd.last_mut()) {
            if (0..N).all(|j| last_s[j] == s[j] * size) {
                *last_size *= size;
                *last_s = s;
                continue;
            }
        }
        dims.push(size);
        strd.push(s);
    }
    let Some((&inner_len, outer)) = dims.split_last() else {
        f(offsets, 1, [0; N]);
        return;
    };
    let inner_strides = strd[dims.len() - 1];
    let outer_strides = &strd[..dims.len() - 1];
    let mut index = vec![0usize; outer.len()];
    let mut bases = offsets;
    loop {
        f(bases, inner_len, inner_strides);
        // Increment the outer multi-index with carry.
        let mut d = outer.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            for j in 0..N {
                bases[j] += outer_strides[d][j];
            }
            if index[d] < outer[d] {
                break;
            }
            for j in 0..N {
                bases[j] -= outer_strides[d][j] * outer[d];
            }
            index[d] = 0;
        }
    }
}

/// Calls `f(bases)` for every element of `shape`.
pub(crate) fn for_each_index<const N: usize>(
    shape: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    mut f: impl FnMut([usize; N]),
) {
    for_each_row(shape, strides, offsets, |bases, n, inner| {
        for i in 0..n {
            f(std::array::from_fn(|j| bases[j] + i * inner[j]));
        }
    });
}

/// Element-wise `out[i] = op(a[i], b[i])` with broadcasting strides (0 on broadcast dims).
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary(
    shape: &[usize],
    out: &mut [f32],
    out_strides: &[usize],
    a: &[f32],
    a_strides: &[usize],
    a_offset: usize,
    b: &[f32],
    b_strides: &[usize],
    b_offset: usize,
    op: impl Fn(f32, f32) -> f32,
) {
    for_each_row(
        shape,
        [out_strides, a_strides, b_strides],
        [0, a_offset, b_offset],
        |[o, ia, ib], n, [so, sa, sb]| {
            if so == 1 && sa == 1 && sb == 1 {
                let (o, a, b) = (&mut out[o..o + n], &a[ia..ia + n], &b[ib..ib + n]);
                for ((o, &a), &b) in o.iter_mut().zip(a).zip(b) {
                    *o = op(a, b);
                }
            } else if so == 1 && sa == 1 && sb == 0 {
                let bv = b[ib];
                for (o, &a) in out[o..o + n].iter_mut().zip(&a[ia..ia + n]) {
                    *o = op(a, bv);
                }
            } else {
                for i in 0..n {
                    out[o + i * so] = op(a[ia + i * sa], b[ib + i * sb]);
                }
            }
        },
    );
}

/// Element-wise `out[i] = op(a[i])`.
pub(crate) fn unary(
    shape: &[usize],
    out: &mut [f32],
    out_strides: &[usize],
    a: &[f32],
    a_strides: &[usize],
    a_offset: usize,
    op: impl Fn(f32) -> f32,
) {
    for_each_row(
        shape,
        [out_strides, a_strides],
        [0, a_offset],
        |[o, ia], n, [so, sa]| {
            if so == 1 && sa == 1 {
                for (o, &a) in out[o..o + n].iter_mut().zip(&a[ia..ia + n]) {
                    *o = op(a);
                }
            } else {
                for i in 0..n {
                    out[o + i * so] = op(a[ia + i * sa]);
                }
            }
        },
    );
}

/// In place `dst[i] = op(dst[i], src[i])`, `src` broadcast into `dst`'s shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn inplace_binary(
    shape: &[usize],
    dst: &mut [f32],
    dst_strides: &[usize],
    dst_offset: usize,
    src: &[f32],
    src_strides: &[usize],
    src_offset: usize,
    op: impl Fn(f32, f32) -> f32,
) {
    for_each_row(
        shape,
        [dst_strides, src_strides],
        [dst_offset, src_offset],
        |[o, is], n, [so, ss]| {
            if so == 1 && ss == 1 {
                for (d, &s) in dst[o..o + n].iter_mut().zip(&src[is..is + n]) {
                    *d = op(*d, s);
                }
            } else {
                for i in 0..n {
                    dst[o + i * so] = op(dst[o + i * so], src[is + i * ss]);
                }
            }
        },
    );
}

/// In place `dst[i] = op(dst[i])`.
pub(crate) fn inplace_unary(
    shape: &[usize],
    dst: &mut [f32],
    dst_strides: &[usize],
    dst_offset: usize,
    op: impl Fn(f32) -> f32,
) {
    for_each_row(shape, [dst_strides], [dst_offset], |[o], n, [so]| {
        if so == 1 {
            for d in dst[o..o + n].iter_mut() {
                *d = op(*d);
            }
        } else {
            for i in 0..n {
                dst[o + i * so] = op(dst[o + i * so]);
            }
        }
    });
}

/// One GEMM: `c = a · b` with `a` m×k, `b` k×n (element strides, row then column) and `c`
/// m×n; `beta` 0 overwrites `c` (which need not be initialised), 1 accumulates.
///
/// # Safety
/// Every element addressed through the pointers and strides must be valid for the access:
/// `a` and `b` readable, `c` writable and not aliasing `a` or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: *const f32,
    rsa: usize,
    csa: usize,
    b: *const f32,
    rsb: usize,
    csb: usize,
    c: *mut f32,
    rsc: usize,
    csc: usize,
) {
    // SAFETY: forwarded contract; the strides fit in isize because they index real buffers.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a,
            rsa as isize,
            csa as isize,
            b,
            rsb as isize,
            csb as isize,
            0.0,
            c,
            rsc as isize,
            csc as isize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_cover_transposed_layout() {
        // A 2x3 tensor viewed transposed (3x2, strides [1, 3]).
        let mut seen = Vec::new();
        for_each_index(&[3, 2], [&[1, 3]], [0], |[i]| seen.push(i));
        assert_eq!(seen, vec![0, 3, 1, 4, 2, 5]);
        // Contiguous data collapses to one row.
        let mut rows = 0;
        for_each_row(&[2, 3, 4], [&[12, 4, 1]], [0], |_, n, _| {
            rows += 1;
            assert_eq!(n, 24);
        });
        assert_eq!(rows, 1);
        // Scalars are visited once.
        let mut count = 0;
        for_each_index(&[], [&[]], [5], |[i]| {
            assert_eq!(i, 5);
            count += 1
        });
        assert_eq!(count, 1);
    }
}
