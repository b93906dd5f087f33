//! The caching allocator through the runtime's public API, one module per concern: the default
//! settings, fragmentation and its remedies, warm-up and bucketing, iteration planning, where
//! each allocation was made, the snapshot PyTorch's `_memory_viz` reads, a model of the rules
//! checked against random operation sequences, threads, the allocator at scale with injected
//! faults, and `VRAMGUARD_ALLOC_CONF` (each case of which runs in a child process: `conf`).
//!
//! `scale` also runs in release on its own in CI (`cargo test --release -p vramguard-tensor
//! --test alloc -- scale:: --nocapture`).

mod conf;
mod default;
mod faulty;
mod fragmentation;
mod memory_viz;
mod model;
mod origins;
mod planning;
mod refusal;
mod scale;
mod stress;
mod warmup;
