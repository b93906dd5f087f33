//! Unit tests, one per rule of the allocator. Byte counts come from the allocator's statistics.
//!
//! The rules of fixed segments (segment sizes, splitting, coalescing, max split size, garbage
//! collection, the out-of-memory causes) are tested on allocators configured with
//! `expandable_segments:false` ([`fixed`], [`fixed_config`]): since expandable segments became
//! the default wherever the backend maps pages, the large pool of a default host allocator is
//! one expandable segment, tested by the `expandable_*` and `auto_*` tests.
//!
//! One file per rule: `rounding`, `best_fit`, `garbage_collection`, `out_of_memory`,
//! `cache_tools`, `statistics`, `trace`, `expandable`, `ownership`; `backend_faults` drives a
//! fake backend whose calls fail on demand.

mod backend_faults;
mod best_fit;
mod cache_tools;
mod expandable;
mod garbage_collection;
mod out_of_memory;
mod ownership;
mod rounding;
mod statistics;
mod trace;

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn alloc(cap: Option<usize>, cfg: AllocatorConfig) -> CachingAllocator<HostBackend> {
    let backend = match cap {
        Some(c) => HostBackend::with_capacity(c),
        None => HostBackend::new(),
    };
    CachingAllocator::with_config(backend, cfg).unwrap()
}

/// PyTorch's default before expandable segments: every segment a backend allocation.
fn fixed_config() -> AllocatorConfig {
    AllocatorConfig::default().with_expandable_segments(false)
}

/// An unbounded host allocator with fixed segments.
fn fixed() -> CachingAllocator<HostBackend> {
    alloc(None, fixed_config())
}

/// A tag on this thread's label while the guard lives: what `vramguard_memory::scope::tag`
/// pushes (the scope sits above this crate).
fn tag(name: impl AsRef<str>) -> impl Drop {
    struct Restore(Option<TraceLabel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::trace::restore_label(self.0.take());
        }
    }
    Restore(crate::trace::push_label(Arc::from(name.as_ref()), None))
}

fn check(a: &CachingAllocator<HostBackend>) {
    a.check_invariants().unwrap();
}
