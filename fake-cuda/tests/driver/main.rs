//! The fake CUDA driver's own tests, calling its exported functions directly (the library
//! linked as a crate): the rules it enforces as a real driver does (`rules`), and what it gained
//! for the GPU observer, its CUPTI callback API (`observer_support`).
//!
//! The tests share the process's one fake device (and its one CUPTI subscriber): each takes
//! [`SERIAL`] for its whole run, and the settings the fake reads once per process are set
//! before the first call, whichever test comes first ([`set_up_process`]).

use std::sync::{Mutex, Once};

mod observer_support;
mod rules;

/// Held by each test for its whole run: one test at a time on the fake device.
pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

/// Sets what the fake reads at its first call in the process: the tests' kernels' host build,
/// a 1 GiB device, and the tests' injection library.
pub(crate) fn set_up_process() {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // Read once, at the first call of the process, which comes after this.
        std::env::set_var("FAKE_CUDA_HOST_KERNELS", env!("FAKE_CUDA_TEST_KERNELS"));
        std::env::set_var("FAKE_CUDA_MEMORY", "1GiB");
        // Read at the first cuInit: the library whose entry point `observer_support` counts.
        std::env::set_var("CUDA_INJECTION64_PATH", env!("FAKE_CUDA_TEST_INJECTION"));
    });
}
