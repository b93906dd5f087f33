//! Compiles `src/trampoline.c`: the loop that runs a kernel's host build over its grid and the
//! signal handler that turns the kernel's fault into a CUDA error (a `siglongjmp` that only
//! skips C and C++ frames, which Rust code must never do). Also builds `tests/kernels.c` into
//! a shared library for the crate's own tests (`FAKE_CUDA_TEST_KERNELS`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/trampoline.c");
    println!("cargo:rerun-if-changed=tests/kernels.c");
    cc::Build::new()
        .file("src/trampoline.c")
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .opt_level(2)
        .compile("fake_cuda_trampoline");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out.join("libfake_cuda_test_kernels.so");
    let compiler = cc::Build::new().get_compiler();
    let status = Command::new(compiler.path())
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&library)
        .arg("tests/kernels.c")
        .status()
        .expect("running the C compiler for tests/kernels.c");
    assert!(status.success(), "compiling tests/kernels.c failed");
    println!(
        "cargo:rustc-env=FAKE_CUDA_TEST_KERNELS={}",
        library.display()
    );
}
