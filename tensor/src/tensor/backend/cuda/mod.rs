//! The CUDA backend ([`Cuda`]): [`super::TensorBackend`] as launches of the kernels in
//! `tensor/kernels/*.cu` (compiled by NVRTC once per context and cached) and cuBLAS GEMMs, all
//! queued on the device's stream (the context's default stream), on memory from the device's
//! caching allocator.
//!
//! Everything here talks to the device through [`Launcher`](launch::Launcher):
//! [`DeviceLauncher`] is the real one; the tests drive the same code with a launcher that runs
//! the kernel sources compiled for the host (see `scripts/kernels-check.sh`), so the argument
//! marshalling and the kernels' indexing are checked without a GPU.
//!
//! | file | owns |
//! | --- | --- |
//! | `kernels.rs` | the kernel sources, the kernel list, the launch argument blocks |
//! | `compile.rs` | NVRTC compilation, or a prebuilt PTX file |
//! | `launch.rs` | [`Launcher`](launch::Launcher) and the real one, [`DeviceLauncher`] |
//! | `primitives.rs` | [`Cuda`]: every primitive of the contract as launches |

mod compile;
mod kernels;
mod launch;
mod primitives;

#[cfg(test)]
pub(crate) use compile::{compile, compile_all, ptx_header};
#[cfg(test)]
pub(crate) use kernels::{Gemm, Kernel, VgArgs, KERNEL_COMMON, KERNEL_SOURCES};
pub(crate) use launch::DeviceLauncher;
#[cfg(test)]
pub(crate) use launch::Launcher;
pub(crate) use primitives::Cuda;
