//! The fragmentation scenario shared by `examples/fragmentation.rs` and
//! `tests/alloc_remedies.rs`: a stream of variable-length batches on a small device, run
//! naively and with each remedy.

#![allow(dead_code)] // Each user takes a different subset.

use vramguard::alloc::{AllocatorConfig, ExpandableSegments, HostBackend};
use vramguard::device::Allocation;
use vramguard::memory::{self, MemoryStats, OutOfMemory, SequenceBuckets, Workspace};
use vramguard::Device;

pub const MIB: usize = 1 << 20;
/// The "GPU": a host device that refuses to hold more than this.
pub const CAPACITY: usize = 32 * MIB;
/// Activation bytes per token of a batch: 4 sequences × 1024 features × 4 bytes.
pub const BYTES_PER_TOKEN: usize = 4 * 1024 * 4;
/// The summary each batch keeps: 4 sequences × 96 × 1024 f32.
pub const SUMMARY: usize = 4 * 96 * 1024 * 4;
/// Sequence lengths of the stream (at most 512).
pub const LENGTHS: [usize; 9] = [336, 75, 487, 369, 286, 64, 459, 356, 445];
/// Padded lengths for the bucketing remedy.
pub const BUCKETS: [usize; 4] = [128, 256, 384, 512];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Remedy {
    None,
    Coalescing,
    Bucketing,
    Preallocation,
    Expandable,
}

impl Remedy {
    /// Every remedy, the naive run first.
    pub const ALL: [Remedy; 5] = [
        Remedy::None,
        Remedy::Coalescing,
        Remedy::Bucketing,
        Remedy::Preallocation,
        Remedy::Expandable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Remedy::None => "none (naive loop, fixed segments)",
            Remedy::Coalescing => "coalescing + empty_cache",
            Remedy::Bucketing => "bucketing",
            Remedy::Preallocation => "preallocation (Workspace)",
            Remedy::Expandable => "expandable segments (the default)",
        }
    }
}

/// How one run of the stream ended.
pub struct Outcome {
    pub remedy: Remedy,
    pub batches_done: usize,
    pub error: Option<OutOfMemory>,
    /// Statistics right after the last batch (or the failure), before anything is released.
    pub stats: MemoryStats,
    /// Bytes `empty_cache` returned after the stream (everything dropped).
    pub released: u64,
    /// The HTML page (timeline and segment map) right after the stream, when asked for.
    pub page: Option<String>,
}

/// A fresh allocator of `CAPACITY` bytes: a bounded host device, or (`--device cuda`) an
/// allocator on GPU 0 limited to `CAPACITY` by `memory_limit`.
///
/// The naive pool and the remedies against fragmentation run on fixed segments (`expandable_segments:false`,
/// PyTorch's default), configured explicitly since this crate's default is expandable segments
/// wherever the backend maps pages; the `Expandable` remedy asks for them explicitly (`true`),
/// so on a backend without page mapping it is an error rather than a silent fixed pool.
pub fn device_for(remedy: Remedy, cuda: bool) -> Result<Device, Box<dyn std::error::Error>> {
    let expandable = if remedy == Remedy::Expandable {
        ExpandableSegments::On
    } else {
        ExpandableSegments::Off
    };
    // VRAMGUARD_ALLOC_CONF's settings, with this remedy's segments on top.
    let config = AllocatorConfig::from_env()?
        .with_expandable_segments(expandable)
        .with_trace_capacity(1 << 16);
    if cuda {
        return Ok(Device::cuda_with_config(
            0,
            config.with_memory_limit(CAPACITY as u64),
        )?);
    }
    Ok(Device::host_pool(
        HostBackend::with_capacity(CAPACITY),
        config,
    )?)
}

/// Runs the stream on `device` with `remedy`.
pub fn run(
    device: &Device,
    remedy: Remedy,
    html: bool,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let buckets = SequenceBuckets::new(&BUCKETS)?;
    let mut workspace = match remedy {
        Remedy::Preallocation => {
            let largest = LENGTHS.iter().max().copied().unwrap_or(0);
            Some(Workspace::new(device, largest * BYTES_PER_TOKEN)?)
        }
        _ => None,
    };
    let mut summaries: Vec<Allocation> = Vec::new();
    let mut error = None;
    let mut batches_done = 0;
    for (i, &len) in LENGTHS.iter().enumerate() {
        let _label = vramguard::scope::tag(format!("{}: batch {i} (len {len})", remedy.name()));
        let tokens = match remedy {
            Remedy::Bucketing => buckets.bucket_for(len)?,
            _ => len,
        };
        match batch(device, workspace.as_mut(), tokens * BYTES_PER_TOKEN)? {
            Ok(summary) => {
                batches_done += 1;
                if remedy == Remedy::Coalescing {
                    // Consumed (copied out) right away: its block merges with its free neighbours.
                    drop(summary);
                } else {
                    summaries.push(summary);
                }
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let stats = memory::stats(device);
    let page = html
        .then(|| memory::html_report(device, &format!("fragmentation example: {}", remedy.name())));
    drop(summaries);
    drop(workspace);
    let released = memory::empty_cache(device);
    Ok(Outcome {
        remedy,
        batches_done,
        error,
        stats,
        released,
        page,
    })
}

/// One batch: its activations (from the workspace when there is one) and the summary it keeps.
/// The outer error is a workspace too small for the batch (a bug in this program), the inner
/// one the allocator's out-of-memory.
fn batch(
    device: &Device,
    workspace: Option<&mut Workspace>,
    activation_bytes: usize,
) -> Result<Result<Allocation, OutOfMemory>, memory::WorkspaceError> {
    let activation = match workspace {
        Some(ws) => {
            // A view only borrows the preallocated buffer: no allocator call.
            let view = ws.view(activation_bytes)?;
            debug_assert_eq!(view.len(), activation_bytes);
            None
        }
        None => match device.allocate(activation_bytes) {
            Ok(a) => Some(a),
            Err(e) => return Ok(Err(e)),
        },
    };
    let summary = device.allocate(SUMMARY);
    drop(activation);
    Ok(summary)
}
