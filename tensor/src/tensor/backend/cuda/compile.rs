//! Compiling the kernels: the sources as one program, NVRTC loaded at run time, or a PTX file
//! built beforehand (`VRAMGUARD_KERNELS_PTX`) checked against this build's sources.

use super::kernels::{KERNEL_COMMON, KERNEL_SOURCES};

/// Names a PTX file of the kernels built beforehand (`scripts/kernels-check.sh` writes
/// `target/kernels-ptx/vramguard_kernels.ptx`), loaded instead of compiling with NVRTC: for a
/// machine with a driver but without the runtime compiler.
pub(crate) const PTX_ENV: &str = "VRAMGUARD_KERNELS_PTX";

/// All kernel sources as one program, the module every context loads.
pub(crate) fn kernel_source() -> String {
    let mut source = String::from(KERNEL_COMMON);
    for (_, text) in KERNEL_SOURCES {
        source.push_str(text);
    }
    source
}

/// The first line of a prebuilt PTX file: names the sources it was compiled from (FNV-1a of
/// [`kernel_source`]), so a file from other sources is refused rather than launched.
pub(crate) fn ptx_header() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in kernel_source().bytes() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("// vramguard kernels {hash:016x}")
}

pub(super) fn prebuilt_ptx(path: &std::path::Path) -> Result<cudarc::nvrtc::Ptx, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {PTX_ENV}={}: {e}", path.display()))?;
    if text.lines().next() != Some(ptx_header().as_str()) {
        return Err(format!(
            "{PTX_ENV}={} was compiled from other kernel sources than this build's; rebuild it \
             with scripts/kernels-check.sh, or unset {PTX_ENV} to compile with NVRTC",
            path.display()
        ));
    }
    Ok(cudarc::nvrtc::Ptx::from_src(text))
}

/// The kernel sources compiled by NVRTC into one module (PTX).
pub(crate) fn compile_all() -> Result<cudarc::nvrtc::Ptx, String> {
    compile(&kernel_source(), "vramguard_kernels.cu")
}

/// Compiles one source with NVRTC (loaded at run time, like the driver).
pub(crate) fn compile(source: &str, name: &str) -> Result<cudarc::nvrtc::Ptx, String> {
    // Probed first: cudarc would panic otherwise.
    if !crate::driver::library_present(crate::driver::CudaLibrary::Nvrtc) {
        return Err(format!(
            "NVRTC (libnvrtc.so.12) cannot be loaded, so the kernels cannot be compiled; \
                 install the CUDA 12 runtime compiler (e.g. the PyPI wheel \
                 nvidia-cuda-nvrtc-cu12) and put its lib directory on LD_LIBRARY_PATH, or set \
                 {PTX_ENV} to the PTX file scripts/kernels-check.sh writes"
        ));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        name: Some(name.to_string()),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(source, opts)
        .map_err(|e| format!("NVRTC could not compile {name}: {e}"))
}
