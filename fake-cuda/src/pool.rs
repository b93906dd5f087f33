//! The device's default memory pool (`cuMemAllocAsync`/`cuMemFreeAsync`), with the attributes
//! the driver documents: the release threshold (freed memory above it goes back to the device
//! at the next synchronisation), bytes used and reserved, current and high-water (a high-water
//! mark is reset by setting it to 0), and `cuMemPoolTrimTo`.
//!
//! Each allocation gets a chunk of whole 2 MiB granules of its own: "used" counts the chunks
//! handed out, "reserved" those plus the cached ones. A freed chunk is cached once its free
//! ran in stream order; until reused it is inaccessible (`PROT_NONE`), so a kernel or copy
//! that touches freed pool memory faults, which on a GPU reads whatever the next owner wrote.
//! A chunk is reused by an allocation on any stream once cached, or on the freeing stream
//! while its free is still queued (stream order makes that safe).

use crate::device_memory::{self, granules, Extent};
use crate::errors::{self, Fail};
use crate::state::{Driver, Region};

/// Where a chunk is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkState {
    /// Allocated on `stream`.
    Live {
        /// The allocating stream.
        stream: u64,
    },
    /// `cuMemFreeAsync` was called on `stream`; the free has not run yet.
    FreePending {
        /// The freeing stream.
        stream: u64,
    },
    /// Freed and cached by the pool.
    Cached,
    /// Given back to the device: address space only.
    Released,
}

/// One chunk of the pool.
#[derive(Debug)]
pub struct Chunk {
    /// Bytes of address space and pages (whole granules).
    pub len: usize,
    /// Its pages, until released.
    pub extent: Option<Extent>,
    /// Its state.
    pub state: ChunkState,
    /// Bytes the current (or last) allocation asked for.
    pub requested: usize,
    /// Incremented by every allocation, so a stale queued free is ignored.
    pub generation: u64,
}

impl Chunk {
    /// Whether an allocation holds it (not freed yet, even in stream order).
    pub fn allocated(&self) -> bool {
        matches!(self.state, ChunkState::Live { .. })
    }

    /// Whether `[addr, addr + len)` in this chunk (at `start`) may be touched by work running
    /// now.
    pub fn check(&self, start: u64, addr: u64, len: usize, what: &str) -> Result<(), String> {
        match self.state {
            ChunkState::Live { .. } | ChunkState::FreePending { .. } => {
                if addr + len as u64 > start + self.requested as u64 {
                    Err(format!(
                        "{what} of {len} bytes at {addr:#x} runs past the end of the pool \
                         allocation of {} bytes at {start:#x}",
                        self.requested
                    ))
                } else {
                    Ok(())
                }
            }
            ChunkState::Cached => Err(format!(
                "{what} of {len} bytes at {addr:#x}: the pool allocation at {start:#x} was freed \
                 (cuMemFreeAsync) and its free has run"
            )),
            ChunkState::Released => Err(format!(
                "{what} of {len} bytes at {addr:#x}: the pool allocation at {start:#x} was freed \
                 and its memory released to the device"
            )),
        }
    }
}

/// The pool's figures and settings.
#[derive(Debug)]
pub struct Pool {
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`.
    pub threshold: u64,
    /// Bytes in chunks allocated (or freed, the free still queued).
    pub used: u64,
    /// High-water mark of `used`.
    pub used_high: u64,
    /// Bytes in chunks not released.
    pub reserved: u64,
    /// High-water mark of `reserved`.
    pub reserved_high: u64,
    /// The three reuse flags (attributes 1 to 3), on by default.
    pub reuse: [i32; 3],
}

impl Default for Pool {
    fn default() -> Pool {
        Pool {
            threshold: 0,
            used: 0,
            used_high: 0,
            reserved: 0,
            reserved_high: 0,
            reuse: [1; 3],
        }
    }
}

impl Driver {
    fn chunk_mut(&mut self, addr: u64) -> Option<&mut Chunk> {
        match self.regions.get_mut(&addr) {
            Some(Region::Chunk(c)) => Some(c),
            _ => None,
        }
    }

    /// `cuMemAllocAsync` of `bytes` on `stream`.
    pub fn pool_alloc(&mut self, bytes: usize, stream: u64) -> Result<u64, Fail> {
        if bytes == 0 {
            return Err(Fail::loud(
                errors::INVALID_VALUE,
                "an allocation of 0 bytes",
            ));
        }
        let need = granules(bytes);
        self.run_pending_frees(stream, need)?;
        let reusable = self
            .regions
            .iter()
            .filter_map(|(&addr, r)| match r {
                Region::Chunk(c)
                    if c.len >= need
                        && (c.state == ChunkState::Cached
                            || c.state == ChunkState::FreePending { stream }) =>
                {
                    Some((c.len, addr))
                }
                _ => None,
            })
            .min();
        let addr = match reusable {
            Some((_, addr)) => {
                let chunk = self.chunk_mut(addr).expect("a chunk just found");
                if chunk.state == ChunkState::Cached {
                    // SAFETY: the chunk's own mapped range.
                    unsafe {
                        device_memory::protect(addr, chunk.len, libc::PROT_READ | libc::PROT_WRITE)
                    }
                    .map_err(|e| Fail::loud(errors::UNKNOWN, format!("mprotect: {e}")))?;
                    let len = chunk.len as u64;
                    self.pool.used += len;
                }
                addr
            }
            None => self.new_chunk(need)?,
        };
        let chunk = self.chunk_mut(addr).expect("the chunk allocated");
        chunk.state = ChunkState::Live { stream };
        chunk.requested = bytes;
        chunk.generation += 1;
        self.pool.used_high = self.pool.used_high.max(self.pool.used);
        Ok(addr)
    }

    fn new_chunk(&mut self, len: usize) -> Result<u64, Fail> {
        let extent = match self.physical.alloc(len) {
            Some(e) => e,
            None => {
                // The driver gives cached memory back before it reports out of memory.
                self.pool_release(0);
                self.physical
                    .alloc(len)
                    .ok_or(Fail::quiet(errors::OUT_OF_MEMORY))?
            }
        };
        let addr = match self.reserve_address_space(len, crate::config::GRANULE) {
            Ok(a) => a,
            Err(e) => {
                self.physical.free(extent);
                return Err(e);
            }
        };
        // SAFETY: `addr` was just reserved for this chunk.
        if let Err(e) = unsafe {
            self.physical
                .map_at(addr, len, extent.offset, libc::PROT_READ | libc::PROT_WRITE)
        } {
            self.physical.free(extent);
            return Err(Fail::loud(errors::UNKNOWN, format!("mmap: {e}")));
        }
        self.regions.insert(
            addr,
            Region::Chunk(Chunk {
                len,
                extent: Some(extent),
                state: ChunkState::Live { stream: 0 },
                requested: len,
                generation: 0,
            }),
        );
        self.pool.reserved += len as u64;
        self.pool.used += len as u64;
        self.pool.reserved_high = self.pool.reserved_high.max(self.pool.reserved);
        Ok(addr)
    }

    /// `cuMemFreeAsync` of `addr` on `stream`: checks it and returns the generation the
    /// queued free carries.
    pub fn pool_free_call(&mut self, addr: u64, stream: u64) -> Result<u64, Fail> {
        match self.regions.get_mut(&addr) {
            Some(Region::Chunk(c)) if c.allocated() => {
                c.state = ChunkState::FreePending { stream };
                Ok(c.generation)
            }
            Some(Region::Chunk(_)) => Err(Fail::loud(
                errors::INVALID_VALUE,
                format!("{addr:#x} was already freed (cuMemFreeAsync twice)"),
            )),
            _ => Err(Fail::loud(
                errors::INVALID_VALUE,
                format!("{addr:#x} is not the start of an allocation of cuMemAllocAsync"),
            )),
        }
    }

    /// The queued free of `addr` (allocation `generation`) runs: the chunk is cached.
    pub fn pool_free_run(&mut self, addr: u64, generation: u64) {
        let Some(chunk) = self.chunk_mut(addr) else {
            return;
        };
        if chunk.generation != generation || !matches!(chunk.state, ChunkState::FreePending { .. })
        {
            // Reused on its stream before the free ran: the free belongs to an older owner.
            return;
        }
        chunk.state = ChunkState::Cached;
        let len = chunk.len;
        // SAFETY: the chunk's own mapped range; nothing may touch it while cached.
        let _ = unsafe { device_memory::protect(addr, len, libc::PROT_NONE) };
        self.pool.used -= len as u64;
    }

    /// Gives cached chunks back to the device, largest first, until at most `keep` bytes are
    /// reserved (or none is cached). Returns the bytes released.
    pub fn pool_release(&mut self, keep: u64) -> u64 {
        let mut cached: Vec<(usize, u64)> = self
            .regions
            .iter()
            .filter_map(|(&a, r)| match r {
                Region::Chunk(c) if c.state == ChunkState::Cached => Some((c.len, a)),
                _ => None,
            })
            .collect();
        cached.sort_unstable_by(|a, b| b.cmp(a));
        let mut released = 0;
        for (len, addr) in cached {
            if self.pool.reserved <= keep {
                break;
            }
            let extent = {
                let chunk = self.chunk_mut(addr).expect("a cached chunk");
                chunk.state = ChunkState::Released;
                chunk.extent.take()
            };
            // SAFETY: the chunk's own range, inaccessible from now on.
            let _ = unsafe { device_memory::unmap_to_reservation(addr, len) };
            if let Some(e) = extent {
                self.physical.free(e);
            }
            self.pool.reserved -= len as u64;
            released += len as u64;
        }
        released
    }

    /// At a synchronisation: cached memory above the release threshold goes back.
    pub fn pool_settle(&mut self) {
        if self.pool.reserved > self.pool.threshold {
            self.pool_release(self.pool.threshold);
        }
    }
}
