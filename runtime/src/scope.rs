//! Batch scopes: per-iteration accounting of allocations (runtime half of `#[batch_scope]`).
//!
//! INTERIM: only the hook the allocator calls. The tensor issue builds `BatchScope` on it.

use std::sync::Arc;

/// Accounting of one active scope; the allocator reports allocations made while it is the
/// innermost scope of the current thread, and their frees.
#[derive(Debug, Default)]
pub struct ScopeTracker {}

impl ScopeTracker {
    /// Called when a block of `bytes` bytes with id `id` is allocated inside this scope.
    pub(crate) fn on_alloc(&self, _id: u64, _bytes: usize) {}
    /// Called when block `id`, allocated inside this scope, is freed.
    pub(crate) fn on_free(&self, _id: u64) {}
}

/// The innermost scope of the current thread, if any.
pub(crate) fn current_tracker() -> Option<Arc<ScopeTracker>> {
    None
}
