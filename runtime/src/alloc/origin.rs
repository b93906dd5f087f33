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
//! The origin of a live block is kept compactly ([`BlockOrigin`]: the call site interned once
//! per allocator in a [`Sites`] table, and the shape when there is one) and turned back into an
//! [`AllocOrigin`] only where it is shown: the out-of-memory error's largest live allocations,
//! snapshots, and the trace's alloc and free events while the trace is recording.

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
pub(crate) const RAW_OP: &str = "allocate";

impl AllocOrigin {
    /// An origin at `location` for op `op`.
    pub(crate) fn at(location: &'static Location<'static>, op: &'static str) -> Self {
        AllocOrigin {
            file: location.file(),
            line: location.line(),
            column: location.column(),
            op,
            shape: None,
        }
    }

    /// The origin of an allocation requested at `location` (the caller of the allocation
    /// function) by `op`: the thread's outermost op frame if one is open, else `location`.
    pub(crate) fn current(location: &'static Location<'static>, op: &'static str) -> Self {
        match OP_FRAME.try_with(Cell::get).ok().flatten() {
            Some(frame) => AllocOrigin::at(frame.location, frame.op),
            None => AllocOrigin::at(location, op),
        }
    }

    /// `file:line`.
    pub fn source_line(&self) -> String {
        format!("{}:{}", self.file, self.line)
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
/// `'static` strings, so comparing two is a few integer comparisons. Two copies of one string
/// at different addresses make two entries that read the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SiteKey {
    file: (usize, usize),
    line: u32,
    column: u32,
    op: (usize, usize),
}

impl SiteKey {
    #[inline]
    fn of(origin: &AllocOrigin) -> SiteKey {
        SiteKey {
            file: (origin.file.as_ptr() as usize, origin.file.len()),
            line: origin.line,
            column: origin.column,
            op: (origin.op.as_ptr() as usize, origin.op.len()),
        }
    }

    /// Slot in [`Sites::recent`].
    #[inline]
    fn recent_slot(&self) -> usize {
        let mix =
            self.file.0 ^ (self.line as usize).wrapping_mul(0x9e37_79b9) ^ self.column as usize;
        (mix ^ (mix >> 7)) % RECENT_SITES
    }
}

/// Entries of [`Sites::recent`].
const RECENT_SITES: usize = 64;

/// No site (a free block, a spare slot).
const NO_SITE: u32 = u32::MAX;

/// The call sites of one allocator's blocks, each interned once: a block keeps a `u32`.
#[derive(Default)]
pub(crate) struct Sites {
    /// Site id → its file, line, column and op.
    table: Vec<(&'static str, u32, u32, &'static str)>,
    ids: HashMap<SiteKey, u32>,
    /// A direct-mapped cache in front of `ids`: a loop allocates from a few sites over and
    /// over, and one comparison is cheaper than hashing.
    recent: Vec<Option<(SiteKey, u32)>>,
}

impl Sites {
    /// The id of `origin`'s call site, interned on first sight.
    #[inline]
    pub(crate) fn intern(&mut self, origin: &AllocOrigin) -> u32 {
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
    fn intern_slow(&mut self, key: SiteKey, slot: usize, origin: &AllocOrigin) -> u32 {
        let next = self.table.len() as u32;
        let id = *self.ids.entry(key).or_insert(next);
        if id == next {
            self.table
                .push((origin.file, origin.line, origin.column, origin.op));
        }
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT_SITES];
        }
        self.recent[slot] = Some((key, id));
        id
    }

    /// The origin a block kept, as shown (`None` for a block without one).
    pub(crate) fn origin(&self, block: &BlockOrigin) -> Option<AllocOrigin> {
        let &(file, line, column, op) = self.table.get(block.site as usize)?;
        Some(AllocOrigin {
            file,
            line,
            column,
            op,
            shape: block.shape.clone(),
        })
    }
}

/// The origin a live block keeps: its interned call site ([`Sites`]) and its tensor's shape.
#[derive(Debug, Clone)]
pub(crate) struct BlockOrigin {
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
    /// `origin` kept compactly, its site interned in `sites`.
    #[inline]
    pub(crate) fn new(sites: &mut Sites, origin: AllocOrigin) -> Self {
        BlockOrigin {
            site: sites.intern(&origin),
            shape: origin.shape,
        }
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
pub(crate) fn enter_op(op: &'static str) -> OpFrameGuard {
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
pub(crate) struct OpFrameGuard {
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

    /// Many sites (more than the recent-site cache holds, so entries collide and are evicted),
    /// interned in an interleaved order: one id per site, and every block's origin reads back
    /// exactly, shape included.
    #[test]
    fn interned_sites_read_back_as_the_origins_they_came_from() {
        let mut sites = Sites::default();
        let ops: [&'static str; 2] = ["allocate", "matmul"];
        let origins: Vec<AllocOrigin> = (0..300u32)
            .map(|i| AllocOrigin {
                file: if i % 3 == 0 { "src/a.rs" } else { "src/b.rs" },
                line: i / 2,
                column: i % 7,
                op: ops[(i % 2) as usize],
                shape: (i % 5 == 0).then(|| Arc::from(vec![i as usize, 8])),
            })
            .collect();
        let mut ids = HashMap::new();
        for round in 0..3 {
            for (i, origin) in origins.iter().enumerate().rev().skip(round) {
                let block = BlockOrigin::new(&mut sites, origin.clone());
                assert_eq!(sites.origin(&block).as_ref(), Some(origin));
                assert_eq!(*ids.entry(i).or_insert(block.site), block.site, "{origin}");
            }
        }
        let distinct: std::collections::HashSet<u32> = ids.values().copied().collect();
        assert_eq!(distinct.len(), origins.len(), "one id per site");
        assert_eq!(sites.origin(&BlockOrigin::default()), None);
    }
}
