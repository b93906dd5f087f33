//! The process's heap, with `TrackingAllocator` as this binary's global allocator: batch scopes
//! on heap memory (`scopes`: per thread, so those tests run in parallel), and the process-wide
//! figures (`stats`: its test runs alone in a child process, since they count every thread).
//! A binary of its own because of the global allocator.

use vramguard::TrackingAllocator;

#[global_allocator]
static ALLOC: TrackingAllocator = TrackingAllocator::system();

mod scopes;
mod stats;
