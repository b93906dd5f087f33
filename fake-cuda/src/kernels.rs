//! Modules and kernels: `cuModuleLoadData` reads the PTX's entries (`ptx`), `cuModuleGetFunction`
//! finds the kernel's host build, and a launch runs it over its grid through `trampoline.c`.
//!
//! Host builds are shared libraries named by `FAKE_CUDA_HOST_KERNELS` (`:`-separated): CUDA
//! sources compiled for the host with `tensor/kernels/host_shim.h`, which defines the built-in
//! indices and exports `vg_host_set_index(grid, block, block_idx, thread_idx)`. A kernel named
//! `NAME` in the PTX is the symbol `NAME` of the first library that has it, run with that
//! library's `vg_host_set_index` before each thread.
//!
//! Supported kernel signatures (anything else is refused at launch with a message):
//!
//! - up to six integer or pointer parameters (`.u8`..`.u64`, `.s*`, `.b*` scalars), passed in
//!   integer registers (zero- or sign-extended);
//! - exactly one by-value struct (`.align A .b8 name[N]`) of more than 16 and at most 4096
//!   bytes with `A` at most 8, passed in memory as the System V ABI passes such a struct (the
//!   runtime's `VgArgs`).
//!
//! Grids and blocks are one-dimensional (the shim's indices are); threads run serially, block
//! by block, so kernels must not rely on `__syncthreads` or shared memory (the runtime's do
//! not: every work item is independent).

use crate::errors::{self, Fail};
use crate::ptx::{Entry, ParamKind};
use std::ffi::{c_void, CStr, CString};

/// A loaded host library.
#[derive(Debug)]
pub struct HostLibrary {
    /// Its path.
    pub path: String,
    handle: *mut c_void,
    set_index: *mut c_void,
}

/// A module.
#[derive(Debug)]
pub struct Module {
    /// Its kernels.
    pub entries: Vec<Entry>,
    /// `cuModuleUnload` was called.
    pub unloaded: bool,
}

/// A kernel of a module, resolved to its host build.
#[derive(Debug, Clone)]
pub struct Function {
    /// The module it came from.
    pub module: u64,
    /// Its signature.
    pub entry: Entry,
    /// The host function.
    pub host: *mut c_void,
    /// Its library's `vg_host_set_index`.
    pub set_index: *mut c_void,
}

/// A launch ready to run: `struct fc_launch` of `trampoline.c`, plus what it points to.
#[derive(Debug)]
pub struct Launch {
    /// The kernel's name.
    pub name: String,
    function: *mut c_void,
    set_index: *mut c_void,
    grid: u32,
    block: u32,
    integers: [u64; 6],
    /// The struct parameter's bytes (empty for integer parameters).
    blob: Vec<u8>,
}

// SAFETY: the pointers are functions of libraries loaded for the whole process.
unsafe impl Send for Launch {}

#[repr(C)]
struct FcLaunch {
    function: *mut c_void,
    set_index: *mut c_void,
    grid: u32,
    block: u32,
    kind: i32,
    integers: [u64; 6],
    blob: *const c_void,
    blob_size: usize,
}

extern "C" {
    fn fc_install_fault_handler() -> i32;
    fn fc_run_kernel(
        launch: *const FcLaunch,
        fault_addr: *mut usize,
        fault_signal: *mut i32,
        fault_block: *mut u32,
        fault_thread: *mut u32,
    ) -> i32;
}

/// Installs the fault handler of `trampoline.c` (once, at `cuInit`).
pub fn install_fault_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: installs a SIGSEGV/SIGBUS handler that chains to the previous one.
        if unsafe { fc_install_fault_handler() } != 0 {
            eprintln!("fake cuda: installing the kernel fault handler failed: faults will crash");
        }
    });
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local message or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: a NUL-terminated message owned by libc.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Loads the libraries of `FAKE_CUDA_HOST_KERNELS`.
pub fn load_libraries(paths: &[String]) -> Result<Vec<HostLibrary>, String> {
    let mut out = Vec::new();
    for path in paths {
        let c = CString::new(path.as_str()).map_err(|_| format!("{path}: a NUL in the path"))?;
        // SAFETY: loads a library of kernels compiled for the host; kept for the process.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {path}: {}", dl_error()));
        }
        // SAFETY: a symbol lookup in the library just loaded.
        let set_index = unsafe { libc::dlsym(handle, c"vg_host_set_index".as_ptr()) };
        if set_index.is_null() {
            return Err(format!(
                "{path} has no vg_host_set_index: compile it with -include tensor/kernels/host_shim.h"
            ));
        }
        out.push(HostLibrary {
            path: path.clone(),
            handle,
            set_index,
        });
    }
    Ok(out)
}

/// The host build of `entry`, from the first library that exports its name.
pub fn resolve(libraries: &[HostLibrary], module: u64, entry: &Entry) -> Result<Function, Fail> {
    let name = CString::new(entry.name.as_str())
        .map_err(|_| Fail::loud(errors::INVALID_VALUE, "a kernel name with a NUL"))?;
    for lib in libraries {
        // SAFETY: a symbol lookup in a loaded library.
        let host = unsafe { libc::dlsym(lib.handle, name.as_ptr()) };
        if !host.is_null() {
            return Ok(Function {
                module,
                entry: entry.clone(),
                host,
                set_index: lib.set_index,
            });
        }
    }
    let searched: Vec<&str> = libraries.iter().map(|l| l.path.as_str()).collect();
    Err(Fail::loud(
        errors::NOT_FOUND,
        format!(
            "kernel {} has no host build in FAKE_CUDA_HOST_KERNELS ({}): compile its source with \
             tensor/kernels/host_shim.h into one of those libraries",
            entry.name,
            if searched.is_empty() {
                "unset".to_string()
            } else {
                searched.join(":")
            }
        ),
    ))
}

/// Marshals `cuLaunchKernel`'s `kernelParams` for `function`'s signature.
///
/// # Safety
/// `params` holds one valid pointer per parameter, each to a value of the parameter's size.
pub unsafe fn prepare(
    function: &Function,
    grid: u32,
    block: u32,
    params: *mut *mut c_void,
) -> Result<Launch, Fail> {
    let entry = &function.entry;
    let unsupported = |why: String| {
        Err(Fail::loud(
            errors::NOT_SUPPORTED,
            format!(
                "kernel {}: {why} (see the fake's supported signatures)",
                entry.name
            ),
        ))
    };
    if !entry.params.is_empty() && params.is_null() {
        return Err(Fail::loud(
            errors::INVALID_VALUE,
            format!(
                "kernel {} takes {} parameters; kernelParams is null",
                entry.name,
                entry.params.len()
            ),
        ));
    }
    let mut integers = [0u64; 6];
    let mut blob = Vec::new();
    let structs = entry
        .params
        .iter()
        .filter(|p| matches!(p, ParamKind::Bytes { .. }))
        .count();
    if structs > 0 && entry.params.len() > 1 {
        return unsupported("a struct parameter beside others".into());
    }
    if entry.params.len() > 6 {
        return unsupported(format!("{} parameters (at most 6)", entry.params.len()));
    }
    for (i, kind) in entry.params.iter().enumerate() {
        // SAFETY: per the contract, one pointer per parameter.
        let value = unsafe { *params.add(i) } as *const u8;
        if value.is_null() {
            return Err(Fail::loud(
                errors::INVALID_VALUE,
                format!("kernel {}: parameter {i} is a null pointer", entry.name),
            ));
        }
        match *kind {
            ParamKind::Integer { bytes, signed } => {
                // SAFETY: the caller's value has the parameter's size.
                let raw = unsafe { std::slice::from_raw_parts(value, bytes) };
                let mut word = [0u8; 8];
                word[..bytes].copy_from_slice(raw);
                let unsigned = u64::from_le_bytes(word);
                integers[i] = if signed && bytes < 8 {
                    let shift = 64 - 8 * bytes as u32;
                    (((unsigned << shift) as i64) >> shift) as u64
                } else {
                    unsigned
                };
            }
            ParamKind::Float { .. } => return unsupported("a floating-point parameter".into()),
            ParamKind::Bytes { bytes, align } => {
                if bytes <= 16 || bytes > 4096 || align > 8 {
                    return unsupported(format!(
                        "a struct of {bytes} bytes aligned to {align} (more than 16 and at most \
                         4096 bytes, aligned to at most 8)"
                    ));
                }
                // SAFETY: the caller's value has the parameter's size.
                blob = unsafe { std::slice::from_raw_parts(value, bytes) }.to_vec();
            }
        }
    }
    Ok(Launch {
        name: entry.name.clone(),
        function: function.host,
        set_index: function.set_index,
        grid,
        block,
        integers,
        blob,
    })
}

/// Runs a launch over its grid. `Err` describes a fault.
pub fn run(launch: &Launch) -> Result<(), String> {
    let l = FcLaunch {
        function: launch.function,
        set_index: launch.set_index,
        grid: launch.grid,
        block: launch.block,
        kind: i32::from(!launch.blob.is_empty()),
        integers: launch.integers,
        blob: launch.blob.as_ptr().cast(),
        blob_size: launch.blob.len(),
    };
    let (mut addr, mut signal, mut block, mut thread) = (0usize, 0i32, 0u32, 0u32);
    // SAFETY: the function and set_index come from a loaded host library and match the
    // marshalled parameters (checked against the PTX signature); a fault returns here.
    let status = unsafe { fc_run_kernel(&l, &mut addr, &mut signal, &mut block, &mut thread) };
    match status {
        0 => Ok(()),
        1 => {
            Err(format!(
            "kernel {} faulted at {addr:#x} ({}, block {block} thread {thread} of a grid of {} \
             blocks of {} threads): the memory there is not accessible to the device (never \
             allocated, freed, unmapped, or mapped without cuMemSetAccess)",
            launch.name,
            if signal == libc::SIGBUS { "SIGBUS" } else { "SIGSEGV" },
            launch.grid,
            launch.block
        ))
        }
        _ => Err(format!(
            "kernel {}: its parameters could not be passed",
            launch.name
        )),
    }
}
