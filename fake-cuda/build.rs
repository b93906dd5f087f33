//! Compiles `src/trampoline.c`: the loop that runs a kernel's host build over its grid and the
//! signal handler that turns the kernel's fault into a CUDA error (a `siglongjmp` that only
//! skips C and C++ frames, which Rust code must never do). Also builds `tests/kernels.c` into
//! a shared library for the crate's own tests (`FAKE_CUDA_TEST_KERNELS`), and
//! `tests/injection.c` into their injection library (`FAKE_CUDA_TEST_INJECTION`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=src/trampoline.c");
    println!("cargo:rerun-if-changed=tests/kernels.c");
    println!("cargo:rerun-if-changed=tests/injection.c");
    cc::Build::new()
        .file("src/trampoline.c")
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .opt_level(2)
        .compile("fake_cuda_trampoline");

    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let compiler = cc::Build::new().get_compiler();
    for (source, file, variable) in [
        (
            "tests/kernels.c",
            "libfake_cuda_test_kernels.so",
            "FAKE_CUDA_TEST_KERNELS",
        ),
        (
            "tests/injection.c",
            "libfake_cuda_test_injection.so",
            "FAKE_CUDA_TEST_INJECTION",
        ),
    ] {
        let library = out.join(file);
        let status = Command::new(compiler.path())
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&library)
            .arg(source)
            .status()
            .expect("running the C compiler for the tests' libraries");
        assert!(status.success(), "compiling {source} failed");
        println!("cargo:rustc-env={variable}={}", library.display());
    }
}
