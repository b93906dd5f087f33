//! Fragmentation: "4 GB free, a 3 GB allocation fails", and the
//! remedies that make the same sequence succeed.
//!
//! ```sh
//! cargo run --release --example fragmentation
//! cargo run --release --example fragmentation -- --html fragmentation.html
//! cargo run --release --example fragmentation -- --snapshot fragmentation.pickle  # memory_viz
//! cargo run --release --example fragmentation -- --device cuda   # GPU 0, limited to 32 MiB
//! ```
//!
//! A stream of variable-length batches runs on a host device that behaves like a GPU of
//! `CAPACITY` bytes. Each batch allocates its activations (`4 × len × 1024` f32, freed at the
//! end of the batch) and keeps a 1.5 MiB summary of its output (a loop
//! that keeps `results.append(out)`). As lengths vary, every freed activation leaves a hole that the next,
//! longer batch cannot use, and the kept summaries sit between the holes: a later batch fails
//! with out-of-memory while more than enough memory is cached free. That naive pool is PyTorch's
//! default, fixed segments (each segment its own device allocation), configured explicitly
//! (`expandable_segments:false`): vramguard's own default is expandable segments wherever the
//! backend can map pages. The same stream then runs with each remedy (the first three on fixed
//! segments too):
//!
//! - **coalescing + `empty_cache`**: consume each summary (copy it out) and drop it with its
//!   batch, so freed neighbours merge back into one block; `empty_cache` between phases gives
//!   the cached segments back to the device (another model, another process);
//! - **bucketing** (`SequenceBuckets`): pad lengths to a few fixed lengths, so a freed
//!   activation's hole is exactly what the next batch of that bucket needs;
//! - **preallocation** (`Workspace`): one buffer of the largest activation, sliced per batch;
//! - **expandable segments** (the default; `expandable_segments:true` here, so a backend without
//!   page mapping is an error): the large pool is one mapped range that grows at its end, so
//!   memory is mapped only where blocks are, and free ranges merge across what would have been
//!   separate segments.
//!
//! Every number printed is exact, from `memory::stats`. `--snapshot FILE` writes the naive
//! loop's allocator state and event trace at its failure in PyTorch's snapshot format, for
//! pytorch.org/memory_viz (`memory::dump_snapshot`, called from an out-of-memory observer).

#[path = "common/fragmentation_stream.rs"]
mod stream;

use std::process::ExitCode;
use stream::{device_for, run, Remedy, BYTES_PER_TOKEN, CAPACITY, LENGTHS, MIB, SUMMARY};

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
    let mut snapshot = None;
    let mut cuda = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--html" => html = Some(args.next().ok_or("--html needs a file name")?),
            "--snapshot" => snapshot = Some(args.next().ok_or("--snapshot needs a file name")?),
            "--device" => match args.next().as_deref() {
                Some("host") => cuda = false,
                Some("cuda") => cuda = true,
                other => {
                    return Err(format!("--device takes `host` or `cuda`, got {other:?}").into())
                }
            },
            other => {
                return Err(format!(
                    "unknown argument `{other}`; accepted: --html FILE, --snapshot FILE, \
                     --device host|cuda"
                )
                .into())
            }
        }
    }
    if cuda {
        if let Err(e) = vramguard::Device::cuda(0) {
            println!("fragmentation --device cuda: no GPU to run on ({e}); nothing measured");
            return Ok(true);
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
    let mut outcomes = Vec::new();
    for remedy in Remedy::ALL {
        let device = device_for(remedy, cuda)?;
        // PyTorch's recipe: dump the snapshot from an out-of-memory observer. A pressure
        // handler runs when a request cannot be served even after the cache was released,
        // just before the error, so the file shows the pool at the failure.
        let observer = match (&snapshot, remedy) {
            (Some(path), Remedy::None) => {
                let (observed, path) = (device.clone(), path.clone());
                Some(vramguard::memory::add_pressure_handler(
                    &device,
                    move |_| {
                        if let Err(e) = vramguard::memory::dump_snapshot(&observed, &path) {
                            eprintln!("error: cannot write {path}: {e}");
                        }
                        0
                    },
                ))
            }
            _ => None,
        };
        let outcome = run(&device, remedy, html.is_some() && remedy == Remedy::None)?;
        if let Some(id) = observer {
            device.allocator().remove_pressure_handler(id);
        }
        if remedy == Remedy::None {
            match &outcome.error {
                Some(e) => println!("Naive loop, batch {}: {e}\n", outcome.batches_done),
                None => println!("Naive loop: no failure (the scenario did not fragment)\n"),
            }
            if let (Some(path), Some(_)) = (&snapshot, &outcome.error) {
                println!(
                    "wrote {path} (the naive loop at its failure, PyTorch's snapshot format)\n"
                );
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
