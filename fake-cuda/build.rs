//! Compiles `src/trampoline.c`: the loop that runs a kernel's host build over its grid and the
//! signal handler that turns the kernel's fault into a CUDA error (a `siglongjmp` that only
//! skips C and C++ frames, which Rust code must never do).

fn main() {
    println!("cargo:rerun-if-changed=src/trampoline.c");
    cc::Build::new()
        .file("src/trampoline.c")
        .flag_if_supported("-std=gnu11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .opt_level(2)
        .compile("fake_cuda_trampoline");
}
