//! The driver's result codes the fake returns, their names (`cuGetErrorName`), and [`Fail`], a
//! failed call: its code and, for a breach of the driver's rules, the sentence printed on
//! stderr.
//!
//! The codes are the values of `CUresult` in CUDA 12's `cuda.h`; a name is looked up by
//! `FAKE_CUDA_FAIL` (failure injection) as well.

use std::ffi::CStr;

/// `CUresult`: a driver call's status.
pub type CuResult = u32;

/// Success.
pub const SUCCESS: CuResult = 0;
/// A bad argument (size, alignment, handle, range).
pub const INVALID_VALUE: CuResult = 1;
/// The device has not the memory asked for.
pub const OUT_OF_MEMORY: CuResult = 2;
/// Called before `cuInit`.
pub const NOT_INITIALIZED: CuResult = 3;
/// No device with that ordinal.
pub const INVALID_DEVICE: CuResult = 101;
/// The image is not PTX the fake can read.
pub const INVALID_IMAGE: CuResult = 200;
/// No context current (or a released one).
pub const INVALID_CONTEXT: CuResult = 201;
/// PTX the fake cannot parse.
pub const INVALID_PTX: CuResult = 218;
/// A file (`cuModuleLoad`) could not be read.
pub const FILE_NOT_FOUND: CuResult = 301;
/// An unknown or destroyed handle.
pub const INVALID_HANDLE: CuResult = 400;
/// A name not found (a kernel without a host build).
pub const NOT_FOUND: CuResult = 500;
/// Queued work not finished yet.
pub const NOT_READY: CuResult = 600;
/// A kernel, copy or memset touched memory it may not: sticky, as on a GPU.
pub const ILLEGAL_ADDRESS: CuResult = 700;
/// A launch larger than the device allows.
pub const LAUNCH_OUT_OF_RESOURCES: CuResult = 701;
/// A launch failed for another reason.
pub const LAUNCH_FAILED: CuResult = 719;
/// Something the fake does not model.
pub const NOT_SUPPORTED: CuResult = 801;
/// Anything else.
pub const UNKNOWN: CuResult = 999;

/// Every code with its name, NUL-terminated for `cuGetErrorName`.
const NAMES: &[(CuResult, &CStr)] = &[
    (0, c"CUDA_SUCCESS"),
    (1, c"CUDA_ERROR_INVALID_VALUE"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED"),
    (4, c"CUDA_ERROR_DEINITIALIZED"),
    (34, c"CUDA_ERROR_STUB_LIBRARY"),
    (100, c"CUDA_ERROR_NO_DEVICE"),
    (101, c"CUDA_ERROR_INVALID_DEVICE"),
    (200, c"CUDA_ERROR_INVALID_IMAGE"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT"),
    (202, c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, c"CUDA_ERROR_MAP_FAILED"),
    (206, c"CUDA_ERROR_UNMAP_FAILED"),
    (208, c"CUDA_ERROR_ALREADY_MAPPED"),
    (209, c"CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (211, c"CUDA_ERROR_NOT_MAPPED"),
    (218, c"CUDA_ERROR_INVALID_PTX"),
    (300, c"CUDA_ERROR_INVALID_SOURCE"),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND"),
    (304, c"CUDA_ERROR_OPERATING_SYSTEM"),
    (400, c"CUDA_ERROR_INVALID_HANDLE"),
    (401, c"CUDA_ERROR_ILLEGAL_STATE"),
    (500, c"CUDA_ERROR_NOT_FOUND"),
    (600, c"CUDA_ERROR_NOT_READY"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, c"CUDA_ERROR_LAUNCH_TIMEOUT"),
    (709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, c"CUDA_ERROR_ASSERT"),
    (715, c"CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, c"CUDA_ERROR_MISALIGNED_ADDRESS"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED"),
    (800, c"CUDA_ERROR_NOT_PERMITTED"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED"),
    (909, c"CUDA_ERROR_TIMEOUT"),
    (999, c"CUDA_ERROR_UNKNOWN"),
];

/// The name of `code` (`CUDA_ERROR_OUT_OF_MEMORY`), if it is one the fake knows.
pub fn name(code: CuResult) -> Option<&'static CStr> {
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// The name of `code` as text, or its number.
pub fn name_or_number(code: CuResult) -> String {
    name(code).map_or_else(|| code.to_string(), |n| n.to_string_lossy().into_owned())
}

/// The code named `text` (`CUDA_ERROR_OUT_OF_MEMORY`, or a number).
pub fn code(text: &str) -> Option<CuResult> {
    if let Ok(n) = text.parse::<CuResult>() {
        return Some(n);
    }
    NAMES
        .iter()
        .find(|(_, n)| n.to_bytes() == text.as_bytes())
        .map(|(c, _)| *c)
}

/// A failed driver call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    /// What the call returns.
    pub code: CuResult,
    /// For a breach of the driver's rules (or something the fake does not model): what was
    /// wrong, printed on stderr as `fake cuda: CALL: MESSAGE`. `None` for an ordinary outcome
    /// (out of memory, not ready).
    pub message: Option<String>,
}

impl Fail {
    /// An ordinary failure, nothing printed.
    pub fn quiet(code: CuResult) -> Fail {
        Fail {
            code,
            message: None,
        }
    }

    /// A breach of the rules: printed.
    pub fn loud(code: CuResult, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: Some(message.into()),
        }
    }
}

/// What a driver function's body returns.
pub type CallResult = Result<(), Fail>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        assert_eq!(code("CUDA_ERROR_ILLEGAL_ADDRESS"), Some(ILLEGAL_ADDRESS));
        assert_eq!(code("2"), Some(OUT_OF_MEMORY));
        assert_eq!(code("CUDA_ERROR_NOPE"), None);
        assert_eq!(name_or_number(NOT_READY), "CUDA_ERROR_NOT_READY");
        assert_eq!(name_or_number(12345), "12345");
        for (c, n) in NAMES {
            assert_eq!(code(n.to_str().unwrap()), Some(*c));
        }
    }
}
