//! Where each allocation was made ([`AllocOrigin`]): the caller's source line, the tensor op (or
//! `Device::allocate`) that allocated, and the tensor's shape.
//!
//! Tensor constructors and ops are `#[track_caller]` and open an op frame ([`enter_op`]) on
//! their first line; the outermost frame of the thread names the op and the line the user
//! called it from, so an op that calls other ops (softmax calling exp, backward calling
//! matmul) attributes everything it allocates to the user's call. The tensor allocation helper
//! adds the shape. Without a frame (raw `Device::allocate`, `CachingAllocator::allocate`), the
//! caller of the allocation function is the origin.
//!
//! On the way to the allocator an origin travels as a [`RequestOrigin`] (the caller's
//! `&'static Location`, the op's name, the shape: no file, line or column read). The origin of
//! a live block is kept compactly ([`BlockOrigin`]: the call site interned once per allocator in
//! a [`Sites`] table, and the shape when there is one) and turned back into an [`AllocOrigin`]
//! only where it is shown: the out-of-memory error's largest live allocations, snapshots, and
//! the trace's alloc and free events while the trace is recording.

use serde::Serialize;
use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::Arc;

/// Where an allocation was made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AllocOrigin {
    /// Source file of the call that allocated: the user's call of the outermost tensor
    /// constructor or op (they are `#[track_caller]`), or of `Device::allocate`.
    pub file: &'static str,
    /// Line in [`AllocOrigin::file`].
    pub line: u32,
    /// Column in [`AllocOrigin::file`].
    pub column: u32,
    /// The op the user called (`"matmul"`, `"zeros"`, `"backward"`, ...), or `"allocate"` for a
    /// raw allocation.
    pub op: &'static str,
    /// Shape of the tensor the memory was allocated for (`None` for a raw allocation).
    #[serde(serialize_with = "serialize_shape")]
    pub shape: Option<Arc<[usize]>>,
}

fn serialize_shape<S: serde::Serializer>(
    shape: &Option<Arc<[usize]>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match shape {
        Some(dims) => s.collect_seq(dims.iter()),
        None => s.serialize_none(),
    }
}

/// The op name of raw allocations (no tensor op frame).
#[doc(hidden)]
pub const RAW_OP: &str = "allocate";

impl AllocOrigin {
    /// `file:line`.
    pub fn source_line(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The origin of a request, as the allocator receives it: the call site by reference (the
/// compiler's `'static` [`Location`], and the op's name) and the tensor's shape.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct RequestOrigin {
    location: &'static Location<'static>,
    op: &'static str,
    /// Shape of the tensor the memory is for (`None` for a raw allocation).
    pub shape: Option<Arc<[usize]>>,
}

impl RequestOrigin {
    /// The origin of an allocation requested at `location` (the caller of the allocation
    /// function) by `op`: the thread's outermost op frame if one is open, else `location`.
    #[inline]
    #[doc(hidden)]
    pub fn current(location: &'static Location<'static>, op: &'static str) -> Self {
        let (location, op) = match OP_FRAME.try_with(Cell::get).ok().flatten() {
            Some(frame) => (frame.location, frame.op),
            None => (location, op),
        };
        RequestOrigin {
            location,
            op,
            shape: None,
        }
    }

    /// The origin as shown.
    #[cfg(test)]
    #[doc(hidden)]
    pub fn shown(&self) -> AllocOrigin {
        AllocOrigin {
            file: self.location.file(),
            line: self.location.line(),
            column: self.location.column(),
            op: self.op,
            shape: self.shape.clone(),
        }
    }
}

impl std::fmt::Display for AllocOrigin {
    /// `src/model.rs:42 (matmul [8, 512, 768])`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} ({}", self.file, self.line, self.op)?;
        if let Some(shape) = &self.shape {
            write!(f, " {shape:?}")?;
        }
        f.write_str(")")
    }
}

/// The call site of an origin (all of it but the shape), by identity: the addresses of its
/// `'static` location and op name, so comparing two is three integer comparisons. Two copies
/// of one location or name at different addresses make two entries that read the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SiteKey {
    location: usize,
    op: (usize, usize),
}

impl SiteKey {
    #[inline]
    fn of(origin: &RequestOrigin) -> SiteKey {
        SiteKey {
            location: origin.location as *const Location<'static> as usize,
            op: (origin.op.as_ptr() as usize, origin.op.len()),
        }
    }

    /// Slot in [`Sites::recent`].
    #[inline]
    fn recent_slot(&self) -> usize {
        let mix = self.location ^ self.op.0.wrapping_mul(0x9e37_79b9);
        (mix ^ (mix >> 7)) % RECENT_SITES
    }
}

/// Entries of [`Sites::recent`].
const RECENT_SITES: usize = 64;

/// No site (a free block, a spare slot).
const NO_SITE: u32 = u32::MAX;

/// The call sites of one allocator's blocks, each interned once: a block keeps a `u32`.
#[derive(Default)]
#[doc(hidden)]
pub struct Sites {
    /// Site id → its location and op.
    table: Vec<(&'static Location<'static>, &'static str)>,
    ids: HashMap<SiteKey, u32>,
    /// A direct-mapped cache in front of `ids`: a loop allocates from a few sites over and
    /// over, and one comparison is cheaper than hashing.
    recent: Vec<Option<(SiteKey, u32)>>,
}

impl Sites {
    /// The id of `origin`'s call site, interned on first sight.
    #[inline]
    #[doc(hidden)]
    pub fn intern(&mut self, origin: &RequestOrigin) -> u32 {
        let key = SiteKey::of(origin);
        let slot = key.recent_slot();
        if let Some(Some((k, id))) = self.recent.get(slot) {
            if *k == key {
                return *id;
            }
        }
        self.intern_slow(key, slot, origin)
    }

    #[cold]
    fn intern_slow(&mut self, key: SiteKey, slot: usize, origin: &RequestOrigin) -> u32 {
        let next = self.table.len() as u32;
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            self.table.push((origin.location, origin.op));
        }
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT_SITES];
        }
        self.recent[slot] = Some((key, id));
        id
    }

    /// The origin a block kept, as shown (`None` for a block without one).
    #[doc(hidden)]
    pub fn origin(&self, block: &BlockOrigin) -> Option<AllocOrigin> {
        let &(location, op) = self.table.get(block.site as usize)?;
        Some(AllocOrigin {
            file: location.file(),
            line: location.line(),
            column: location.column(),
            op,
            shape: block.shape.clone(),
        })
    }
}

/// The origin a live block keeps: its interned call site ([`Sites`]) and its tensor's shape.
#[derive(Debug, Clone)]
#[doc(hidden)]
pub struct BlockOrigin {
    site: u32,
    shape: Option<Arc<[usize]>>,
}

impl Default for BlockOrigin {
    fn default() -> Self {
        BlockOrigin {
            site: NO_SITE,
            shape: None,
        }
    }
}

impl BlockOrigin {
    /// Keeps `origin` compactly in place of what `self` kept, its site interned in `sites`.
    /// Field by field: a whole new value was built on the stack and copied, and the copy's
    /// 8-byte load of the 4-byte site just stored there waited for that store to reach the
    /// cache (a store cannot be forwarded to a wider load).
    #[inline(always)]
    #[doc(hidden)]
    pub fn set(&mut self, sites: &mut Sites, origin: &mut RequestOrigin) {
        self.site = sites.intern(origin);
        self.shape = origin.shape.take();
    }
}

#[derive(Clone, Copy)]
struct OpFrame {
    op: &'static str,
    location: &'static Location<'static>,
}

thread_local! {
    /// The outermost tensor op running on this thread.
    static OP_FRAME: Cell<Option<OpFrame>> = const { Cell::new(None) };
}

/// Opens the op frame of tensor op `op` called from the caller's caller (the op itself is
/// `#[track_caller]`), unless one is already open; closed when the guard drops.
#[track_caller]
#[inline]
#[doc(hidden)]
pub fn enter_op(op: &'static str) -> OpFrameGuard {
    let location = Location::caller();
    let opened = OP_FRAME
        .try_with(|frame| {
            if frame.get().is_some() {
                return false;
            }
            frame.set(Some(OpFrame { op, location }));
            true
        })
        .unwrap_or(false);
    OpFrameGuard {
        opened,
        _not_send: PhantomData,
    }
}

/// Closes the op frame [`enter_op`] opened, if it opened one.
#[must_use = "the op frame closes when the guard drops"]
#[doc(hidden)]
pub struct OpFrameGuard {
    opened: bool,
    _not_send: PhantomData<*const ()>,
}

impl Drop for OpFrameGuard {
    #[inline]
    fn drop(&mut self) {
        if self.opened {
            let _ = OP_FRAME.try_with(|frame| frame.set(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many sites (more than the recent-site cache holds, so entries collide and are evicted):
    /// three source locations, each with 100 op names, interned in an interleaved order. One
    /// id per site, and every block's origin reads back exactly, shape included.
    #[test]
    fn interned_sites_read_back_as_the_origins_they_came_from() {
        let mut sites = Sites::default();
        let locations = [Location::caller(), Location::caller(), Location::caller()];
        let ops: Vec<&'static str> = (0..100)
            .map(|i| &*Box::leak(format!("op{i}").into_boxed_str()))
            .collect();
        let origins: Vec<RequestOrigin> = (0..300usize)
            .map(|i| RequestOrigin {
                location: locations[i % 3],
                op: ops[i / 3],
                shape: (i % 5 == 0).then(|| Arc::from(vec![i, 8])),
            })
            .collect();
        let mut ids = HashMap::new();
        for round in 0..3 {
            for (i, origin) in origins.iter().enumerate().rev().skip(round) {
                let mut block = BlockOrigin::default();
                block.set(&mut sites, &mut origin.clone());
                let shown = origin.shown();
                assert_eq!(sites.origin(&block).as_ref(), Some(&shown));
                assert_eq!(*ids.entry(i).or_insert(block.site), block.site, "{shown}");
            }
        }
        let distinct: std::collections::HashSet<u32> = ids.values().copied().collect();
        assert_eq!(distinct.len(), origins.len(), "one id per site");
        assert_eq!(sites.origin(&BlockOrigin::default()), None);
    }
}
