//! Pressure handlers: callbacks that free memory when a request cannot be served even after the
//! cache was released (a KV cache that evicts, a pool of reusable buffers). This module owns the
//! registry and the rule that a handler's own allocations do not run the handlers again; when
//! they run is the allocator's business.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

type Handler = Arc<dyn Fn(usize) -> usize + Send + Sync>;

/// Identifies a registered pressure handler, for
/// [`CachingAllocator::remove_pressure_handler`](super::CachingAllocator::remove_pressure_handler).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PressureHandlerId(u64);

thread_local! {
    /// Set while this thread runs pressure handlers, so a handler that allocates does not
    /// recurse into the handlers.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// The handlers of one allocator.
#[derive(Default)]
#[doc(hidden)]
pub struct PressureHandlers {
    handlers: RwLock<Vec<(PressureHandlerId, Handler)>>,
    next: AtomicU64,
}

impl PressureHandlers {
    pub fn add(
        &self,
        handler: impl Fn(usize) -> usize + Send + Sync + 'static,
    ) -> PressureHandlerId {
        let id = PressureHandlerId(self.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, Arc::new(handler)));
        id
    }

    pub fn remove(&self, id: PressureHandlerId) -> bool {
        let mut hs = self.handlers.write().unwrap_or_else(|e| e.into_inner());
        let before = hs.len();
        hs.retain(|(h, _)| *h != id);
        hs.len() != before
    }

    /// Runs every handler for a request of `size` bytes and returns the bytes they freed; 0
    /// without running any when called from inside a handler. The caller must not hold the
    /// allocator's lock.
    pub fn run(&self, size: usize) -> usize {
        if IN_HANDLER.with(Cell::get) {
            return 0;
        }
        let handlers: Vec<Handler> = self
            .handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, h)| Arc::clone(h))
            .collect();
        if handlers.is_empty() {
            return 0;
        }
        IN_HANDLER.with(|f| f.set(true));
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_HANDLER.with(|f| f.set(false));
            }
        }
        let _reset = Reset;
        let mut freed = 0usize;
        for h in handlers {
            freed = freed.saturating_add(h(size));
        }
        freed
    }

    /// Whether this thread is running pressure handlers now.
    pub fn in_handler() -> bool {
        IN_HANDLER.with(Cell::get)
    }
}
