//! A fake cuBLAS in the same library (loaded as `libcublas.so` through a link): handles bound
//! to the fake's streams, and single-precision GEMMs (`cublasSgemm_v2`,
//! `cublasSgemmStridedBatched`) queued on the handle's stream like a kernel, computed on the
//! host by `matrixmultiply` when they run, with the operands' ranges checked as a copy's are.
//! So the cuBLAS path of the runtime's CUDA backend (handle creation, binding to the stream,
//! the strided-batched call and its arguments) runs, not only the fallback GEMM kernel.
//!
//! Only the host pointer mode is modelled (alpha and beta read at the call).

use crate::api::exports;
use crate::errors::{CallResult, Fail};
use crate::state::{driver, Driver};
use crate::streams::Work;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

/// `cublasStatus_t` values.
mod status {
    pub const NOT_INITIALIZED: u32 = 1;
    pub const INVALID_VALUE: u32 = 7;
    pub const EXECUTION_FAILED: u32 = 13;
    pub const INTERNAL_ERROR: u32 = 14;
    pub const NOT_SUPPORTED: u32 = 15;
}

/// Live handles and the stream each is bound to.
static HANDLES: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);
static NEXT: Mutex<u64> = Mutex::new(0xb1a5_0000);

fn handle_stream(handle: *mut c_void) -> Result<u64, Fail> {
    HANDLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|h| h.get(&(handle as u64)).copied())
        .ok_or_else(|| {
            Fail::loud(
                status::NOT_INITIALIZED,
                format!("{:#x} is not a cuBLAS handle", handle as u64),
            )
        })
}

/// One column-major strided-batched SGEMM, as cuBLAS defines it.
#[derive(Debug, Clone, Copy)]
pub struct GemmOp {
    transa: bool,
    transb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: u64,
    lda: usize,
    stride_a: usize,
    b: u64,
    ldb: usize,
    stride_b: usize,
    beta: f32,
    c: u64,
    ldc: usize,
    stride_c: usize,
    count: usize,
}

/// Bytes spanned by `count` matrices of `rows`×`cols` (column-major, leading dimension `ld`,
/// `stride` elements apart).
fn span(rows: usize, cols: usize, ld: usize, stride: usize, count: usize) -> usize {
    if rows == 0 || cols == 0 || count == 0 {
        return 0;
    }
    ((count - 1) * stride + (cols - 1) * ld + rows) * 4
}

impl GemmOp {
    fn operands(&self) -> [(u64, usize, bool); 3] {
        let (ar, ac) = if self.transa {
            (self.k, self.m)
        } else {
            (self.m, self.k)
        };
        let (br, bc) = if self.transb {
            (self.n, self.k)
        } else {
            (self.k, self.n)
        };
        [
            (
                self.a,
                span(ar, ac, self.lda, self.stride_a, self.count),
                false,
            ),
            (
                self.b,
                span(br, bc, self.ldb, self.stride_b, self.count),
                false,
            ),
            (
                self.c,
                span(self.m, self.n, self.ldc, self.stride_c, self.count),
                true,
            ),
        ]
    }

    /// Whether its operands may be touched now, and if not, why.
    pub fn check(&self, d: &Driver) -> Result<(), String> {
        for (addr, len, write) in self.operands() {
            d.check_access(addr, len, write)?;
        }
        Ok(())
    }

    /// Computes it (its ranges checked).
    pub fn run(&self) {
        for i in 0..self.count {
            let a = (self.a as usize + 4 * i * self.stride_a) as *const f32;
            let b = (self.b as usize + 4 * i * self.stride_b) as *const f32;
            let c = (self.c as usize + 4 * i * self.stride_c) as *mut f32;
            // op(A)(r, l): A column-major is A[r + l·lda]; transposed, A[l + r·lda].
            let (rsa, csa) = if self.transa {
                (self.lda, 1)
            } else {
                (1, self.lda)
            };
            let (rsb, csb) = if self.transb {
                (self.ldb, 1)
            } else {
                (1, self.ldb)
            };
            // SAFETY: the three ranges were checked as device memory mapped for this access;
            // the strides stay inside them (`span`).
            unsafe {
                matrixmultiply::sgemm(
                    self.m,
                    self.k,
                    self.n,
                    self.alpha,
                    a,
                    rsa as isize,
                    csa as isize,
                    b,
                    rsb as isize,
                    csb as isize,
                    self.beta,
                    c,
                    1,
                    self.ldc as isize,
                );
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn queue_gemm(
    handle: *mut c_void,
    transa: u32,
    transb: u32,
    dims: [i32; 3],
    alpha: *const f32,
    a: u64,
    lda: i32,
    stride_a: i64,
    b: u64,
    ldb: i32,
    stride_b: i64,
    beta: *const f32,
    c: u64,
    ldc: i32,
    stride_c: i64,
    count: i32,
    call: &'static str,
) -> CallResult {
    let stream = handle_stream(handle)?;
    let bad = |why: String| Err(Fail::loud(status::INVALID_VALUE, why));
    let [m, n, k] = dims;
    if m < 0 || n < 0 || k < 0 || count < 0 || stride_a < 0 || stride_b < 0 || stride_c < 0 {
        return bad(format!(
            "negative sizes or strides (m {m}, n {n}, k {k}, count {count})"
        ));
    }
    if transa > 1 || transb > 1 {
        return Err(Fail::loud(
            status::NOT_SUPPORTED,
            "only CUBLAS_OP_N and CUBLAS_OP_T are modelled",
        ));
    }
    let (transa, transb) = (transa == 1, transb == 1);
    let rows_a = if transa { k } else { m };
    let rows_b = if transb { n } else { k };
    if lda < rows_a.max(1) || ldb < rows_b.max(1) || ldc < m.max(1) {
        return bad(format!(
            "leading dimensions lda {lda}, ldb {ldb}, ldc {ldc} below the rows"
        ));
    }
    if alpha.is_null() || beta.is_null() {
        return bad("null alpha or beta".into());
    }
    // SAFETY: host pointer mode: both read now.
    let (alpha, beta) = unsafe { (*alpha, *beta) };
    let op = GemmOp {
        transa,
        transb,
        m: m as usize,
        n: n as usize,
        k: k as usize,
        alpha,
        a,
        lda: lda as usize,
        stride_a: stride_a as usize,
        b,
        ldb: ldb as usize,
        stride_b: stride_b as usize,
        beta,
        c,
        ldc: ldc as usize,
        stride_c: stride_c as usize,
        count: count as usize,
    };
    let mut d = driver()?;
    d.in_context().map_err(|e| Fail {
        code: status::EXECUTION_FAILED,
        message: e.message,
    })?;
    for (addr, len, _) in op.operands() {
        d.check_argument(addr, len).map_err(|e| Fail {
            code: status::INVALID_VALUE,
            message: e.message,
        })?;
    }
    d.enqueue(stream, call, Vec::new(), Work::Gemm(op))
        .map_err(|e| Fail {
            code: status::EXECUTION_FAILED,
            message: e.message,
        })
}

exports! {
    unknown = status::INTERNAL_ERROR;

    /// A handle on the current context's null stream.
    fn cublasCreate_v2(handle: *mut *mut c_void) {
        driver()?.in_context().map_err(|e| Fail { code: status::NOT_INITIALIZED, message: e.message })?;
        if handle.is_null() {
            return Err(Fail::loud(status::INVALID_VALUE, "a null output pointer"));
        }
        let h = {
            let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
            *next += 0x10;
            *next
        };
        HANDLES.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(h, 0);
        // SAFETY: checked non-null.
        unsafe { *handle = h as *mut c_void };
        Ok(())
    }

    /// Destroys a handle.
    fn cublasDestroy_v2(handle: *mut c_void) {
        handle_stream(handle)?;
        HANDLES.lock().unwrap_or_else(|e| e.into_inner()).as_mut().map(|h| h.remove(&(handle as u64)));
        Ok(())
    }

    /// Binds a handle to a stream of the fake.
    fn cublasSetStream_v2(handle: *mut c_void, stream: *mut c_void) {
        handle_stream(handle)?;
        let s = driver()?.stream(stream as u64).map_err(|e| Fail { code: status::INVALID_VALUE, message: e.message })?;
        HANDLES.lock().unwrap_or_else(|e| e.into_inner()).as_mut().map(|h| h.insert(handle as u64, s));
        Ok(())
    }

    /// The handle's stream.
    fn cublasGetStream_v2(handle: *mut c_void, stream: *mut *mut c_void) {
        let s = handle_stream(handle)?;
        if stream.is_null() {
            return Err(Fail::loud(status::INVALID_VALUE, "a null output pointer"));
        }
        // SAFETY: checked non-null.
        unsafe { *stream = s as *mut c_void };
        Ok(())
    }

    /// Only `CUBLAS_POINTER_MODE_HOST` (0).
    fn cublasSetPointerMode_v2(handle: *mut c_void, mode: u32) {
        handle_stream(handle)?;
        if mode != 0 {
            return Err(Fail::loud(status::NOT_SUPPORTED, "only the host pointer mode is modelled"));
        }
        Ok(())
    }

    /// Always `CUBLAS_POINTER_MODE_HOST`.
    fn cublasGetPointerMode_v2(handle: *mut c_void, mode: *mut u32) {
        handle_stream(handle)?;
        if mode.is_null() {
            return Err(Fail::loud(status::INVALID_VALUE, "a null output pointer"));
        }
        // SAFETY: checked non-null.
        unsafe { *mode = 0 };
        Ok(())
    }

    /// Queues `C = alpha·op(A)·op(B) + beta·C`.
    fn cublasSgemm_v2(
        handle: *mut c_void, transa: u32, transb: u32, m: i32, n: i32, k: i32, alpha: *const f32,
        a: *const f32, lda: i32, b: *const f32, ldb: i32, beta: *const f32, c: *mut f32, ldc: i32,
    ) {
        queue_gemm(handle, transa, transb, [m, n, k], alpha, a as u64, lda, 0, b as u64, ldb, 0, beta, c as u64, ldc, 0, 1, "cublasSgemm_v2")
    }

    /// Queues `count` GEMMs, operands `stride_*` elements apart.
    fn cublasSgemmStridedBatched(
        handle: *mut c_void, transa: u32, transb: u32, m: i32, n: i32, k: i32, alpha: *const f32,
        a: *const f32, lda: i32, stride_a: i64, b: *const f32, ldb: i32, stride_b: i64,
        beta: *const f32, c: *mut f32, ldc: i32, stride_c: i64, count: i32,
    ) {
        queue_gemm(handle, transa, transb, [m, n, k], alpha, a as u64, lda, stride_a, b as u64, ldb, stride_b, beta, c as u64, ldc, stride_c, count, "cublasSgemmStridedBatched")
    }
}

/// Handles never destroyed (for the exit report).
pub fn live_handles() -> usize {
    HANDLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map_or(0, HashMap::len)
}
