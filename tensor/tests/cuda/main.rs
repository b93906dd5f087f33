//! The CUDA half, on a GPU (or the fake driver): the device and its segments (`device`), the
//! allocator against the driver's own figures (`allocator`), the tensor ops against the host
//! backend (`ops`), the driver's pool feeding batch scopes (`pool`); and, on the sources, the
//! rule for making a context current (`context_rule`). Without a driver each test prints why it
//! skips. `cuda_fault` is a binary of its own: its kernel fault poisons the context.

mod allocator;
mod context_rule;
mod device;
mod gpu;
mod ops;
mod pool;
