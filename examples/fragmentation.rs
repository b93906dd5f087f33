//! The article's fragmentation case (§4.4): "4 GB free, a 3 GB allocation fails", and the
//! remedies that make the same sequence succeed.
//!
//! ```sh
//! cargo run --release --example fragmentation
//! cargo run --release --example fragmentation -- --html fragmentation.html
//! cargo run --release --example fragmentation -- --device cuda   # GPU 0, limited to 32 MiB
//! ```
//!
//! A stream of variable-length batches runs on a host device that behaves like a GPU of
//! `CAPACITY` bytes. Each batch allocates its activations (`4 × len × 1024` f32, freed at the
//! end of the batch) and keeps a 1.5 MiB summary of its output (the article's
//! `results.append(out)`). As lengths vary, every freed activation leaves a hole that the next,
//! longer batch cannot use, and the kept summaries sit between the holes: a later batch fails
//! with out-of-memory while more than enough memory is cached free. The same stream then runs
//! with each remedy:
//!
//! - **coalescing + `empty_cache`**: consume each summary (copy it out) and drop it with its
//!   batch, so freed neighbours merge back into one block; `empty_cache` between phases gives
//!   the cached segments back to the device (another model, another process);
//! - **bucketing** (`SequenceBuckets`): pad lengths to a few fixed lengths, so a freed
//!   activation's hole is exactly what the next batch of that bucket needs;
//! - **preallocation** (`Workspace`): one buffer of the largest activation, sliced per batch;
//! - **expandable segments** (`expandable_segments:true`): the large pool is one mapped range
//!   that grows at its end, so memory is mapped only where blocks are, and free ranges merge
//!   across what would have been separate segments.
//!
//! Every number printed is exact, from `memory::stats`.

use std::process::ExitCode;
use vramguard::alloc::{AllocatorConfig, HostBackend};
use vramguard::device::Allocation;
use vramguard::memory::{self, MemoryStats, OutOfMemory, SequenceBuckets, Workspace};
use vramguard::Device;

const MIB: usize = 1 << 20;
/// The "GPU": a host device that refuses to hold more than this.
const CAPACITY: usize = 32 * MIB;
/// Activation bytes per token of a batch: 4 sequences × 1024 features × 4 bytes.
const BYTES_PER_TOKEN: usize = 4 * 1024 * 4;
/// The summary each batch keeps: 4 sequences × 96 × 1024 f32.
const SUMMARY: usize = 4 * 96 * 1024 * 4;
/// Sequence lengths of the stream (at most 512).
const LENGTHS: [usize; 9] = [336, 75, 487, 369, 286, 64, 459, 356, 445];
/// Padded lengths for the bucketing remedy.
const BUCKETS: [usize; 4] = [128, 256, 384, 512];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Remedy {
    None,
    Coalescing,
    Bucketing,
    Preallocation,
    Expandable,
}

impl Remedy {
    fn name(self) -> &'static str {
        match self {
            Remedy::None => "none (naive loop)",
            Remedy::Coalescing => "coalescing + empty_cache",
            Remedy::Bucketing => "bucketing",
            Remedy::Preallocation => "preallocation (Workspace)",
            Remedy::Expandable => "expandable segments",
        }
    }
}

/// How one run of the stream ended.
struct Outcome {
    remedy: Remedy,
    batches_done: usize,
    error: Option<OutOfMemory>,
    /// Statistics right after the last batch (or the failure), before anything is released.
    stats: MemoryStats,
    /// Bytes `empty_cache` returned after the stream (everything dropped).
    released: u64,
    /// The HTML page (timeline and segment map) right after the stream, when asked for.
    page: Option<String>,
}

/// A fresh allocator of `CAPACITY` bytes: a bounded host device, or (`--device cuda`) an
/// allocator on GPU 0 limited to `CAPACITY` by `memory_limit`.
fn device_for(remedy: Remedy, cuda: bool) -> Result<Device, Box<dyn std::error::Error>> {
    let config = AllocatorConfig::default()
        .with_expandable_segments(remedy == Remedy::Expandable)
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
fn run(device: &Device, remedy: Remedy, html: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
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
        let _label = vramguard::alloc::TraceLabelGuard::new(&format!(
            "{}: batch {i} (len {len})",
            remedy.name()
        ));
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

/// Exact bytes, with MiB for reading.
fn bytes(b: u64) -> String {
    format!("{b} ({:.2} MiB)", b as f64 / MIB as f64)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn real_main() -> Result<bool, Box<dyn std::error::Error>> {
    let mut html = None;
    let mut cuda = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--html" => html = Some(args.next().ok_or("--html needs a file name")?),
            "--device" => match args.next().as_deref() {
                Some("host") => cuda = false,
                Some("cuda") => cuda = true,
                other => {
                    return Err(format!("--device takes `host` or `cuda`, got {other:?}").into())
                }
            },
            other => {
                return Err(format!(
                    "unknown argument `{other}`; accepted: --html FILE, --device host|cuda"
                )
                .into())
            }
        }
    }
    println!(
        "Device: {} {} MiB. Stream: {} batches, lengths {:?}; activations {} KiB per \
         token, a {:.1} MiB summary kept per batch.\n",
        if cuda {
            "cuda:0 with memory_limit"
        } else {
            "host, capacity"
        },
        CAPACITY / MIB,
        LENGTHS.len(),
        LENGTHS,
        BYTES_PER_TOKEN / 1024,
        SUMMARY as f64 / MIB as f64
    );
    let remedies = [
        Remedy::None,
        Remedy::Coalescing,
        Remedy::Bucketing,
        Remedy::Preallocation,
        Remedy::Expandable,
    ];
    let mut outcomes = Vec::new();
    for remedy in remedies {
        let device = device_for(remedy, cuda)?;
        let outcome = run(&device, remedy, html.is_some() && remedy == Remedy::None)?;
        if remedy == Remedy::None {
            match &outcome.error {
                Some(e) => println!("Naive loop, batch {}: {e}\n", outcome.batches_done),
                None => println!("Naive loop: no failure (the scenario did not fragment)\n"),
            }
        }
        outcomes.push(outcome);
    }

    println!(
        "| remedy | batches | result | allocated | reserved | peak reserved | cached free | largest free block | backend allocs | OOMs | empty_cache released |"
    );
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for o in &outcomes {
        let s = &o.stats;
        println!(
            "| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            o.remedy.name(),
            o.batches_done,
            LENGTHS.len(),
            match &o.error {
                Some(e) => format!("OOM ({:?})", e.cause),
                None => "ok".into(),
            },
            bytes(s.allocated_bytes),
            bytes(s.reserved_bytes),
            bytes(s.peak_reserved_bytes),
            bytes(s.cached_free_bytes),
            bytes(s.largest_free_block),
            s.backend_allocs,
            s.num_ooms,
            bytes(o.released),
        );
    }
    println!(
        "\nStatistics are taken after the last batch (or the failure), with the kept summaries \
         still alive; `empty_cache` runs after everything is dropped."
    );

    if let (Some(path), Some(page)) = (html, outcomes[0].page.as_ref()) {
        std::fs::write(&path, page)?;
        println!("wrote {path} (the naive loop: timeline by batch, segment map at the failure)");
    }
    let naive_failed = outcomes[0]
        .error
        .as_ref()
        .is_some_and(|e| e.to_string().contains("fragmentation"));
    let remedies_ok = outcomes[1..].iter().all(|o| o.error.is_none());
    Ok(naive_failed && remedies_ok)
}
