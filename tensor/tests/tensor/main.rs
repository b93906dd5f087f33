//! Tensors through the runtime's public API, one module per concern: ops against their
//! definitions, gradients against finite differences, properties on random inputs, consuming
//! forms that reuse their buffer, memory (exact bytes of every op), devices, printing,
//! safetensors, and a build without the `cuda` feature (`without_cuda`, whose tests exist only
//! there: `cargo test -p vramguard-tensor --no-default-features --test tensor`).

mod backward_for;
mod consuming;
mod devices;
mod grad;
mod inspect;
mod max_batch;
mod memory;
mod ops;
mod props;
mod safetensors;
mod without_cuda;
