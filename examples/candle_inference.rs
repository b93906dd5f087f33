//! `#[vramguard::inference]` and `#[vramguard::batch_scope]` on candle code, measured with
//! vramguard's tracking allocator: a BERT-style encoder written with candle-core and candle-nn
//! the way candle users write it (candle-transformers' `bert.rs`: one `let` per step, shadowed
//! names, `?`).
//!
//! ```sh
//! cargo run --release --features candle --example candle_inference
//! cargo run --release --features candle --example candle_inference -- --layers 6 --hidden 384 --batch 4 --seq 128 --json
//! ```
//!
//! The heap is measured by one line, the one a candle user adds to their own program:
//! `#[global_allocator] static ALLOC: vramguard::TrackingAllocator = ...::system();` (every
//! thread's allocations count: candle's CPU matmul runs on rayon threads). Four things:
//!
//! 1. **Peaks**: the forward pass run once plain and once with the same functions under
//!    `#[vramguard::inference]`; the heap peak of each above the bytes live before it (weights,
//!    inputs, candle's and rayon's warmed-up caches). Each variant runs `--reps` times,
//!    interleaved; the larger peak of its runs is reported. Outputs are compared bit for bit.
//! 2. **A leak, named**: an evaluation loop under `#[vramguard::batch_scope(label = "eval")]`
//!    that keeps every batch's output in a `Vec` (PyTorch code's
//!    `intermediate_results.append(out)`). The scope's report says how many bytes each
//!    iteration left behind; the growth of its live bytes per iteration
//!    (`leak_bytes_per_iter`) is checked against the bytes freed when a `Vec` of the same
//!    outputs is dropped, divided by the iterations (`leak_exact`).
//! 3. **The largest batch in a RAM budget** (`--budget-mib`, weights included), plain and
//!    annotated, with `vramguard::heap::max_batch`; `max_batch_exact` is 1 when its answers equal
//!    those of a plain doubling-then-bisection over the same fits-predicate.
//! 4. **What tracking costs**: the example re-runs itself as child processes, alternately with
//!    and without `VRAMGUARD_ALLOC_CONF=heap_tracking:false`, and compares their median forward
//!    times (`tracking_time_ratio`).
//!
//! candle has no no-grad mode: the weights are plain tensors (not `Var`s), so nothing records a
//! graph in either run, and the attribute's only effect here is that each local is freed right
//! after its last use.
//!
//! Flags: `--layers N` (6), `--hidden N` (384), `--heads N` (6), `--batch N` (4), `--seq N`
//! (128), `--reps N` (2), `--eval-batches N` (6), `--budget-mib N` (160), `--time-rounds N`
//! (7), `--quick` (2 layers, hidden 128, heads 2, batch 2, seq 32, budget 24 MiB, 3 time rounds),
//! plus the shared `--json` and `--write` (which rewrites the `candle` section of
//! BENCHMARKS.md).

#[path = "common/bisection.rs"]
mod bisection;
#[path = "common/heap_measure.rs"]
mod heap_measure;
#[path = "../benches/support/report.rs"]
mod report;

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear};
use report::{Args, Report};
use vramguard::heap;

// The one line a user adds: every heap allocation of the process is counted from here on.
#[global_allocator]
static ALLOC: vramguard::TrackingAllocator = vramguard::TrackingAllocator::system();

/// Model shape.
#[derive(Debug, Clone, Copy)]
struct Config {
    vocab: usize,
    hidden: usize,
    heads: usize,
    ffn: usize,
    layers: usize,
    max_positions: usize,
}

/// One encoder layer's weights (names as in the Hugging Face checkpoint).
struct BertLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_output: Linear,
    attention_layer_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_layer_norm: LayerNorm,
}

/// The encoder's weights: plain candle tensors (not `Var`s), as loaded for inference.
struct BertWeights {
    config: Config,
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    embeddings_layer_norm: LayerNorm,
    layers: Vec<BertLayer>,
}

/// Deterministic weights without a random-number crate (SplitMix64, uniform in ±`scale`).
struct Init(u64);

impl Init {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 24 random bits to [-1, 1).
        ((z >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }

    fn tensor(&mut self, rows: usize, cols: usize, scale: f32, device: &Device) -> Result<Tensor> {
        let data: Vec<f32> = (0..rows * cols).map(|_| self.next() * scale).collect();
        Tensor::from_vec(data, (rows, cols), device)
    }

    fn linear(&mut self, inputs: usize, outputs: usize, device: &Device) -> Result<Linear> {
        let scale = 1.0 / (inputs as f32).sqrt();
        let weight = self.tensor(outputs, inputs, scale, device)?;
        let bias = self.tensor(1, outputs, scale, device)?.squeeze(0)?;
        Ok(Linear::new(weight, Some(bias)))
    }

    fn layer_norm(&mut self, hidden: usize, device: &Device) -> Result<LayerNorm> {
        let weight = (self.tensor(1, hidden, 0.1, device)?.squeeze(0)? + 1.0)?;
        let bias = self.tensor(1, hidden, 0.1, device)?.squeeze(0)?;
        Ok(LayerNorm::new(weight, bias, 1e-12))
    }
}

impl BertWeights {
    fn new(config: Config, seed: u64, device: &Device) -> Result<Self> {
        let mut init = Init(seed);
        let h = config.hidden;
        let mut layers = Vec::with_capacity(config.layers);
        for _ in 0..config.layers {
            layers.push(BertLayer {
                query: init.linear(h, h, device)?,
                key: init.linear(h, h, device)?,
                value: init.linear(h, h, device)?,
                attention_output: init.linear(h, h, device)?,
                attention_layer_norm: init.layer_norm(h, device)?,
                intermediate: init.linear(h, config.ffn, device)?,
                output: init.linear(config.ffn, h, device)?,
                output_layer_norm: init.layer_norm(h, device)?,
            });
        }
        Ok(BertWeights {
            config,
            word_embeddings: Embedding::new(init.tensor(config.vocab, h, 0.02, device)?, h),
            position_embeddings: Embedding::new(
                init.tensor(config.max_positions, h, 0.02, device)?,
                h,
            ),
            embeddings_layer_norm: init.layer_norm(h, device)?,
            layers,
        })
    }
}

/// A batch of token ids (`[batch, seq]`, u32) and its additive attention mask
/// (`[batch, 1, 1, seq]`: 0 for tokens, `f32::MIN` for padding).
struct Batch {
    input_ids: Tensor,
    attention_mask: Tensor,
}

impl Batch {
    /// Deterministic ids; the last quarter of every other sequence is padding.
    fn synthetic(batch: usize, seq: usize, vocab: usize, device: &Device) -> Result<Batch> {
        let ids: Vec<u32> = (0..batch * seq)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % vocab as u64) as u32)
            .collect();
        let mask: Vec<f32> = (0..batch * seq)
            .map(|i| {
                let (b, t) = (i / seq, i % seq);
                if b % 2 == 1 && t >= seq - seq / 4 {
                    f32::MIN
                } else {
                    0.0
                }
            })
            .collect();
        Ok(Batch {
            input_ids: Tensor::from_vec(ids, (batch, seq), device)?,
            attention_mask: Tensor::from_vec(mask, (batch, 1, 1, seq), device)?,
        })
    }
}

/// Stamps out the forward pass with the given attributes on its `impl` block, so that the plain
/// and the annotated runs execute the very same code.
macro_rules! bert_forward {
    ($(#[$attr:meta])*) => {
        /// The encoder's forward pass over shared weights.
        pub struct Bert<'a>(pub &'a BertWeights);

        $(#[$attr])*
        impl Bert<'_> {
            pub fn forward(&self, input_ids: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let w = self.0;
                let (_, seq_len) = input_ids.dims2()?;
                let input_embeddings = w.word_embeddings.forward(input_ids)?;
                let position_ids = Tensor::arange(0u32, seq_len as u32, input_ids.device())?;
                let position_embeddings = w.position_embeddings.forward(&position_ids)?;
                let embeddings = input_embeddings.broadcast_add(&position_embeddings)?;
                let embeddings = w.embeddings_layer_norm.forward(&embeddings)?;
                let mut hidden_states = embeddings;
                for layer in w.layers.iter() {
                    hidden_states = self.layer(layer, &hidden_states, attention_mask)?;
                }
                Ok(hidden_states)
            }

            fn layer(&self, layer: &BertLayer, hidden_states: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let attention_output = self.attention(layer, hidden_states, attention_mask)?;
                let intermediate_output = layer.intermediate.forward(&attention_output)?;
                let intermediate_output = intermediate_output.gelu_erf()?;
                let layer_output = layer.output.forward(&intermediate_output)?;
                let layer_output = (layer_output + &attention_output)?;
                let layer_output = layer.output_layer_norm.forward(&layer_output)?;
                Ok(layer_output)
            }

            fn attention(&self, layer: &BertLayer, hidden_states: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let self_outputs = self.self_attention(layer, hidden_states, attention_mask)?;
                let attention_output = layer.attention_output.forward(&self_outputs)?;
                let attention_output = (attention_output + hidden_states)?;
                let attention_output = layer.attention_layer_norm.forward(&attention_output)?;
                Ok(attention_output)
            }

            fn self_attention(&self, layer: &BertLayer, hidden_states: &Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let query_layer = layer.query.forward(hidden_states)?;
                let key_layer = layer.key.forward(hidden_states)?;
                let value_layer = layer.value.forward(hidden_states)?;

                let query_layer = self.transpose_for_scores(&query_layer)?;
                let key_layer = self.transpose_for_scores(&key_layer)?;
                let value_layer = self.transpose_for_scores(&value_layer)?;

                let attention_scores = query_layer.matmul(&key_layer.t()?)?;
                let head_size = self.0.config.hidden / self.0.config.heads;
                let attention_scores = (attention_scores / (head_size as f64).sqrt())?;
                let attention_scores = attention_scores.broadcast_add(attention_mask)?;
                let attention_probs = candle_nn::ops::softmax_last_dim(&attention_scores)?;

                let context_layer = attention_probs.matmul(&value_layer)?;
                let context_layer = context_layer.transpose(1, 2)?.contiguous()?;
                let context_layer = context_layer.flatten_from(D::Minus2)?;
                Ok(context_layer)
            }

            fn transpose_for_scores(&self, xs: &Tensor) -> Result<Tensor> {
                let mut new_x_shape = xs.dims().to_vec();
                new_x_shape.pop();
                new_x_shape.push(self.0.config.heads);
                new_x_shape.push(self.0.config.hidden / self.0.config.heads);
                let xs = xs.reshape(new_x_shape.as_slice())?.transpose(1, 2)?;
                xs.contiguous()
            }
        }
    };
}

/// No attribute: every local alive to the end of its function.
mod plain {
    use super::*;
    bert_forward!();
}

/// `#[vramguard::inference]`: each local freed right after its last use.
mod annotated {
    use super::*;
    bert_forward!(#[vramguard::inference]);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Plain,
    Annotated,
}

fn forward(variant: Variant, weights: &BertWeights, batch: &Batch) -> Result<Tensor> {
    match variant {
        Variant::Plain => plain::Bert(weights).forward(&batch.input_ids, &batch.attention_mask),
        Variant::Annotated => {
            annotated::Bert(weights).forward(&batch.input_ids, &batch.attention_mask)
        }
    }
}

/// Runs both variants until three rounds in a row leave the heap's live bytes as they found
/// them (at most 20 rounds), so that what is created once exists before anything is measured:
/// rayon's pool, and gemm's per-thread buffers, which a rayon thread allocates the first time
/// it gets work (with small matrices, maybe only after several passes).
fn warm_up(weights: &BertWeights, batch: &Batch) -> Result<()> {
    let mut quiet_rounds = 0;
    for _ in 0..20 {
        let before = heap::stats().allocated_bytes;
        drop(forward(Variant::Plain, weights, batch)?);
        drop(forward(Variant::Annotated, weights, batch)?);
        quiet_rounds = if heap::stats().allocated_bytes == before {
            quiet_rounds + 1
        } else {
            0
        };
        if quiet_rounds == 3 {
            break;
        }
    }
    Ok(())
}

/// The forward pass's heap peak above what was live before it, and its output.
fn measure(variant: Variant, weights: &BertWeights, batch: &Batch) -> Result<(u64, Tensor)> {
    heap::reset_peak_stats();
    let base = heap::stats().allocated_bytes;
    let out = forward(variant, weights, batch)?;
    Ok((heap::stats().peak_allocated_bytes - base, out))
}

/// An evaluation loop with the classic leak: every batch's output is kept, so each
/// iteration leaves its output behind, and the scope's report says so. `live` receives each
/// finished iteration's `live_bytes` (read at the top of the next one) for the check in `run`;
/// it is reserved, so pushing to it allocates nothing.
#[vramguard::batch_scope(label = "eval", warn_after = 4)]
// The leak is what this loop is here to show: the compile-time lint that flags `kept.push` is
// silenced so that the run-time report is what names it.
#[vramguard::allow(accumulates_across_iterations)]
fn eval_keeping_outputs(
    weights: &BertWeights,
    batches: &[Batch],
    kept: &mut Vec<Tensor>,
    live: &mut Vec<u64>,
) -> Result<()> {
    for batch in batches {
        if let Some(previous) = vramguard::scope::last_report("eval") {
            live.push(previous.live_bytes);
        }
        let output = annotated::Bert(weights).forward(&batch.input_ids, &batch.attention_mask)?;
        kept.push(output);
    }
    Ok(())
}

/// Shape and measurement settings from the command line.
struct Settings {
    config: Config,
    batch_size: usize,
    seq: usize,
    reps: usize,
    eval_batches: usize,
    budget_mib: u64,
    time_rounds: usize,
}

impl Settings {
    fn parse(args: &Args) -> std::result::Result<Settings, String> {
        let quick = args.quick;
        let layers: usize = args.value("layers").unwrap_or(if quick { 2 } else { 6 });
        let hidden: usize = args
            .value("hidden")
            .unwrap_or(if quick { 128 } else { 384 });
        let heads: usize = args.value("heads").unwrap_or(if quick { 2 } else { 6 });
        let batch_size: usize = args.value("batch").unwrap_or(if quick { 2 } else { 4 });
        let seq: usize = args.value("seq").unwrap_or(if quick { 32 } else { 128 });
        if layers == 0 || batch_size == 0 || seq == 0 || heads == 0 || !hidden.is_multiple_of(heads)
        {
            return Err(
                "--layers, --batch, --seq and --heads must be at least 1, and --hidden a \
                        multiple of --heads"
                    .into(),
            );
        }
        Ok(Settings {
            config: Config {
                vocab: 8192,
                hidden,
                heads,
                ffn: 4 * hidden,
                layers,
                max_positions: seq.max(512),
            },
            batch_size,
            seq,
            reps: args.value::<usize>("reps").unwrap_or(2).max(1),
            eval_batches: args.value::<usize>("eval-batches").unwrap_or(6).max(2),
            budget_mib: args
                .value("budget-mib")
                .unwrap_or(if quick { 24 } else { 160 }),
            time_rounds: args
                .value::<usize>("time-rounds")
                .unwrap_or(if quick { 3 } else { 7 })
                .max(1),
        })
    }
}

fn main() {
    let args = Args::parse();
    let result = if args.rest.iter().any(|a| a == heap_measure::TIME_CHILD_FLAG) {
        time_child(&args)
    } else {
        run(&args)
    };
    if let Err(e) = result {
        eprintln!("candle_inference failed: {e}");
        std::process::exit(1);
    }
}

/// A timing child of `tracking_time_ratio`: the annotated forward pass, timed.
fn time_child(args: &Args) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let settings = Settings::parse(args)?;
    let device = Device::Cpu;
    let weights = BertWeights::new(settings.config, 42, &device)?;
    let batch = Batch::synthetic(
        settings.batch_size,
        settings.seq,
        settings.config.vocab,
        &device,
    )?;
    heap_measure::time_child(|| forward(Variant::Annotated, &weights, &batch).map(drop))?;
    Ok(())
}

fn run(args: &Args) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let settings = Settings::parse(args)?;
    let Settings {
        config,
        batch_size,
        seq,
        reps,
        ..
    } = settings;
    let hidden = config.hidden;
    if !heap::is_tracking() {
        return Err("the tracking allocator is off (VRAMGUARD_ALLOC_CONF has \
                    heap_tracking:false?): this example measures with it; unset that key"
            .into());
    }
    let shape = format!(
        "{} layers, hidden {hidden}, {} heads, FFN {}, batch {batch_size}, sequence {seq}",
        config.layers, config.heads, config.ffn
    );
    eprintln!("BERT-style encoder in candle (CPU): {shape}");

    let device = Device::Cpu;
    let weights = BertWeights::new(config, 42, &device)?;
    let batch = Batch::synthetic(batch_size, seq, config.vocab, &device)?;
    warm_up(&weights, &batch)?;
    let weight_bytes = weights_bytes(&weights);

    eprintln!("peaks: {reps} interleaved forward passes of each variant ...");
    let (mut peak_plain, mut peak_annotated) = (0, 0);
    let (mut out_plain, mut out_annotated) = (None, None);
    for _ in 0..reps {
        let (peak, out) = measure(Variant::Plain, &weights, &batch)?;
        peak_plain = peak_plain.max(peak);
        out_plain = Some(out.to_vec3::<f32>()?);
        drop(out);
        let (peak, out) = measure(Variant::Annotated, &weights, &batch)?;
        peak_annotated = peak_annotated.max(peak);
        out_annotated = Some(out.to_vec3::<f32>()?);
        drop(out);
    }
    let identical = match (&out_plain, &out_annotated) {
        (Some(a), Some(b)) => bitwise_equal(a, b),
        _ => false,
    };

    let iterations = settings.eval_batches;
    eprintln!("eval loop: {iterations} batches under #[batch_scope], every output kept ...");
    let batches = (0..iterations)
        .map(|_| Batch::synthetic(batch_size, seq, config.vocab, &device))
        .collect::<Result<Vec<_>>>()?;
    // Reserved up front: the Vecs' own growth is not part of the figures.
    let mut kept = Vec::with_capacity(iterations);
    let mut live = Vec::with_capacity(iterations);
    eval_keeping_outputs(&weights, &batches, &mut kept, &mut live)?;
    let report =
        vramguard::scope::last_report("eval").ok_or("the eval loop left no batch-scope report")?;
    eprintln!("{report}");
    live.push(report.live_bytes);
    drop(kept);
    // What the loop keeps per iteration: the median growth of the scope's live bytes from one
    // iteration's end to the next. (An iteration's `escaped_bytes` can also count a buffer of
    // the backend's own that a later iteration frees: with candle, a 1520-byte block of rayon's
    // job queue, allocated on the calling thread every 63 jobs; the median skips those.)
    let mut growth: Vec<i64> = live.windows(2).map(|w| w[1] as i64 - w[0] as i64).collect();
    growth.sort_unstable();
    let leak_per_iter = growth.get(growth.len() / 2).copied().unwrap_or(0).max(0) as u64;
    // The independent measure: the same outputs made outside any scope, kept in a Vec, and the
    // heap bytes freed when it is dropped (no scope bookkeeping is freed with them).
    let mut unscoped = Vec::with_capacity(iterations);
    for batch in &batches {
        unscoped.push(forward(Variant::Annotated, &weights, batch)?);
    }
    let freed = heap_measure::bytes_held_by(unscoped);
    let freed_per_iter = freed / iterations as u64;
    let leak_exact = leak_per_iter * iterations as u64 == freed;
    drop(batches);

    let budget_mib = settings.budget_mib;
    let budget = budget_mib << 20;
    eprintln!("largest batch in {budget_mib} MiB of heap (finder, then bisection) ...");
    // The finder's answer, and the bisection's answer and run count, for one variant.
    let search = |variant: Variant| -> std::result::Result<_, Box<dyn std::error::Error>> {
        let mut run_batch = |b: usize| -> Result<()> {
            let batch = Batch::synthetic(b, seq, config.vocab, &device)?;
            forward(variant, &weights, &batch).map(drop)
        };
        let finder = heap::max_batch(budget, &mut run_batch)?;
        eprintln!("  {variant:?}: {finder}");
        // Doubling stops past twice the finder's answer: were the finder low, the two would
        // still disagree.
        let cap = 2 * finder.batch.max(1) + 2;
        let (bisected, bisection_runs) =
            bisection::bisection(cap, |b| heap_measure::heap_fits(budget, b, &mut run_batch))?;
        Ok((finder, bisected, bisection_runs))
    };
    let (finder_plain, bisected_plain, bisection_runs_plain) = search(Variant::Plain)?;
    let (finder_annotated, bisected_annotated, bisection_runs_annotated) =
        search(Variant::Annotated)?;
    let max_batch_exact =
        finder_plain.batch == bisected_plain && finder_annotated.batch == bisected_annotated;
    drop((weights, batch));

    let rounds = settings.time_rounds;
    eprintln!("time: {rounds} rounds of a child process with tracking and one without ...");
    let times = heap_measure::tracking_time_ratio(rounds)?;

    let mut r = Report::new("candle");
    r.cargo_args("--features candle --example candle_inference");
    heap_measure::HeapMetrics {
        peak_plain,
        peak_annotated,
        peak_ratio_target: Some(0.70),
        identical,
        // One `[batch, seq, hidden]` f32 activation: the unit the peaks are easiest to read in.
        activation_bytes: (batch_size * seq * hidden * 4) as f64,
        weight_bytes,
        leak_per_iter,
        freed_per_iter,
        leak_exact,
        last_report: &report,
        finders: [&finder_plain, &finder_annotated],
        bisection_runs: [bisection_runs_plain, bisection_runs_annotated],
        max_batch_exact,
        times: &times,
    }
    .add_to(&mut r);
    let (min_passes, min_seconds) = (
        heap_measure::MIN_TIMED_PASSES,
        heap_measure::MIN_TIMED_SECONDS,
    );
    r.note(&format!(
        "BERT-style encoder written with candle-core and candle-nn ({shape}), f32 on candle's CPU \
         device, weights random from a fixed seed as plain tensors (candle records no graph for \
         them). Every figure comes from `vramguard::TrackingAllocator`, installed as the global \
         allocator (every thread's allocations, Layout sizes). Peaks: above the bytes live \
         before each forward pass (weights, inputs and warmed-up rayon/gemm buffers excluded; \
         the output is included); the larger of {reps} interleaved runs per variant. `plain`: \
         the functions without an attribute; `annotated`: the same functions, stamped from one \
         macro, under `#[vramguard::inference]`. `outputs_bit_identical` = 1 when every output \
         element has the same bits. `_in_activations`: the peak over one `[batch, seq, hidden]` \
         f32 activation. Leak: {iterations} iterations of a `#[batch_scope(label = \"eval\")]` \
         loop that pushes each annotated output into a reserved `Vec`; `leak_bytes_per_iter` is \
         the median growth of the scope's `live_bytes` from one iteration's report to the next; \
         `leak_escaped_bytes_last_iter` the last report's `escaped_bytes` (it \
         also counts what the backend allocates in one iteration and frees in a later one); \
         `leak_bytes_freed_per_iter` the heap bytes freed when a `Vec` of the \
         same outputs, made outside any scope, is dropped (its own buffer left out), over the \
         iterations; `leak_exact` = 1 when the two agree to the byte. \
         Max batch: the process's heap peak within {budget_mib} MiB, weights included, batch \
         size at sequence {seq}; `max_batch_runs` is the larger run count of \
         `vramguard::heap::max_batch`'s two searches, `max_batch_exact` = 1 when both answers \
         equal a doubling-then-bisection over the same predicate (its runs: \
         `max_batch_bisection_runs_*`). `tracking_time_ratio`: annotated forward time \
         (batch {batch_size}) with tracking over without (`VRAMGUARD_ALLOC_CONF=heap_tracking:false`), \
         the median over {rounds} rounds of two child processes run back to back, each child's \
         time the median of its passes (at least {min_passes}, as many as fit in \
         {min_seconds} s); `_lowest_round` and `_highest_round`: the extreme rounds, whose \
         spread is the machine's noise."
    ));
    r.finish(args);
    if !identical {
        return Err("the annotated output differs from the plain output".into());
    }
    Ok(())
}

/// Bytes of every weight tensor (for the note; the peaks exclude them).
fn weights_bytes(weights: &BertWeights) -> usize {
    let linear = |l: &Linear| l.weight().elem_count() + l.bias().map_or(0, Tensor::elem_count);
    let norm = |n: &LayerNorm| n.weight().elem_count() + n.bias().map_or(0, Tensor::elem_count);
    let mut elements = weights.word_embeddings.embeddings().elem_count()
        + weights.position_embeddings.embeddings().elem_count()
        + norm(&weights.embeddings_layer_norm);
    for l in &weights.layers {
        elements += [
            &l.query,
            &l.key,
            &l.value,
            &l.attention_output,
            &l.intermediate,
            &l.output,
        ]
        .into_iter()
        .map(linear)
        .sum::<usize>();
        elements += norm(&l.attention_layer_norm) + norm(&l.output_layer_norm);
    }
    elements * DType::F32.size_in_bytes()
}

fn bitwise_equal(a: &[Vec<Vec<f32>>], b: &[Vec<Vec<f32>>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(a, b)| {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
                })
        })
}
