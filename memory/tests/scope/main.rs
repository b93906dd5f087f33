//! Batch scopes through the runtime's public API: accounting of vramguard's devices (escapes,
//! growth, peaks, nesting), a pool outside vramguard accounted through the same interface
//! (`external`), and growth warnings through `tracing` (a subscriber per thread, so these run
//! beside the others).

mod accounting;
mod external;
mod tracing_warnings;
