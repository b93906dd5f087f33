//! `#[vramguard::inference]` and `#[vramguard::batch_scope]` on burn code, measured with
//! vramguard's tracking allocator: the BERT-style encoder of `candle_inference`, written with
//! burn 0.22's tensor API on the `burn-ndarray` backend.
//!
//! ```sh
//! cargo run --release --features burn-ndarray --example burn_inference
//! cargo run --release --features burn-ndarray --example burn_inference -- --quick --json
//! ```
//!
//! Measured as `candle_inference` measures candle, every figure from `vramguard::TrackingAllocator`
//! installed as the global allocator: the heap peak of a forward pass plain and under
//! `#[vramguard::inference]` (outputs compared bit for bit), a `#[batch_scope(label = "eval")]`
//! loop that keeps each output (its leak, as the scope's report gives it, checked against the
//! bytes freed when the outputs are dropped), the largest batch in a RAM budget with
//! `vramguard::heap::max_batch` (checked against a plain bisection), and the tracking
//! allocator's time cost (child processes with and without
//! `VRAMGUARD_ALLOC_CONF=heap_tracking:false`).
//!
//! How the code is written matters more in burn than in candle. burn's operations take their
//! tensors by value, so a local whose last use *moves* it into an operation is freed there with
//! or without the attribute; the layers below (`Linear`, `LayerNorm`) are written that way, as
//! burn-nn's are. The encoder's own functions keep the signatures of the candle original, whose
//! helpers take `&Tensor` (as code ported from candle or PyTorch does), and clone what they are
//! given (a handle copy). The attribute could only free a local whose last use is such a
//! reference; here each of those is a view (`reshape`, `swap_dims`) that shares its buffer with
//! the local, so freeing the local early frees no bytes: the two peaks are equal, and already at
//! the floor that `#[inference]` gives the candle version (ten `[batch, seq, hidden]`
//! activations). What the toolkit adds to burn code like this is the rest: the batch scope's
//! leak report, the heap's largest batch, exact figures.
//!
//! burn 0.22 marks `burn-ndarray` deprecated (its successor for pure-Rust CPU work is
//! `burn-flex`, `Device::flex()`); it is the backend asked for here, and still the one most
//! burn code on the CPU runs on.
//!
//! Flags: `--layers N` (6), `--hidden N` (384), `--heads N` (6), `--batch N` (4), `--seq N`
//! (128), `--reps N` (2), `--eval-batches N` (6), `--budget-mib N` (160), `--time-rounds N`
//! (7), `--quick` (2 layers, hidden 128, heads 2, batch 2, seq 32, budget 24 MiB, 3 time rounds),
//! plus the shared `--json` and `--write` (which rewrites the `burn` section of BENCHMARKS.md).

#[path = "common/bisection.rs"]
mod bisection;
#[path = "common/heap_measure.rs"]
mod heap_measure;
#[path = "../benches/support/report.rs"]
mod report;

use burn_tensor::{activation, module::embedding, Device, Int, Tensor, TensorData};
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

/// A dense layer as burn-nn's `Linear`: `x · W + b`, the input taken by value.
struct Linear {
    /// `[inputs, outputs]`.
    weight: Tensor<2>,
    bias: Tensor<1>,
}

impl Linear {
    fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        input.matmul(self.weight.clone().unsqueeze()) + self.bias.clone().unsqueeze()
    }
}

/// Layer normalisation over the last dimension, as burn-nn's `LayerNorm`.
struct LayerNorm {
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
}

impl LayerNorm {
    fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        let (var, mean) = input.clone().var_mean_bias(D - 1);
        let input_normalized = input.sub(mean).div(var.add_scalar(self.epsilon).sqrt());
        input_normalized
            .mul(self.gamma.clone().unsqueeze())
            .add(self.beta.clone().unsqueeze())
    }
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

/// The encoder's weights, on a device without autodiff (nothing records a graph).
struct BertWeights {
    config: Config,
    word_embeddings: Tensor<2>,
    position_embeddings: Tensor<2>,
    embeddings_layer_norm: LayerNorm,
    layers: Vec<BertLayer>,
}

/// Deterministic weights without a random-number crate (SplitMix64, uniform in ±`scale`): the
/// same numbers as `candle_inference`'s.
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

    fn values(&mut self, count: usize, scale: f32) -> Vec<f32> {
        (0..count).map(|_| self.next() * scale).collect()
    }

    fn matrix(&mut self, rows: usize, cols: usize, scale: f32, device: &Device) -> Tensor<2> {
        Tensor::from_data(
            TensorData::new(self.values(rows * cols, scale), [rows, cols]),
            device,
        )
    }

    fn vector(&mut self, len: usize, scale: f32, offset: f32, device: &Device) -> Tensor<1> {
        let values = self.values(len, scale).into_iter().map(|v| v + offset);
        Tensor::from_data(TensorData::new(values.collect::<Vec<f32>>(), [len]), device)
    }

    fn linear(&mut self, inputs: usize, outputs: usize, device: &Device) -> Linear {
        let scale = 1.0 / (inputs as f32).sqrt();
        Linear {
            weight: self.matrix(inputs, outputs, scale, device),
            bias: self.vector(outputs, scale, 0.0, device),
        }
    }

    fn layer_norm(&mut self, hidden: usize, device: &Device) -> LayerNorm {
        LayerNorm {
            gamma: self.vector(hidden, 0.1, 1.0, device),
            beta: self.vector(hidden, 0.1, 0.0, device),
            epsilon: 1e-12,
        }
    }
}

impl BertWeights {
    fn new(config: Config, seed: u64, device: &Device) -> Self {
        let mut init = Init(seed);
        let h = config.hidden;
        let layers = (0..config.layers)
            .map(|_| BertLayer {
                query: init.linear(h, h, device),
                key: init.linear(h, h, device),
                value: init.linear(h, h, device),
                attention_output: init.linear(h, h, device),
                attention_layer_norm: init.layer_norm(h, device),
                intermediate: init.linear(h, config.ffn, device),
                output: init.linear(config.ffn, h, device),
                output_layer_norm: init.layer_norm(h, device),
            })
            .collect();
        BertWeights {
            config,
            word_embeddings: init.matrix(config.vocab, h, 0.02, device),
            position_embeddings: init.matrix(config.max_positions, h, 0.02, device),
            embeddings_layer_norm: init.layer_norm(h, device),
            layers,
        }
    }

    /// Bytes of every weight tensor (for the report; the peaks exclude them).
    fn bytes(&self) -> usize {
        let linear = |l: &Linear| l.weight.shape().num_elements() + l.bias.shape().num_elements();
        let norm = |n: &LayerNorm| n.gamma.shape().num_elements() + n.beta.shape().num_elements();
        let mut elements = self.word_embeddings.shape().num_elements()
            + self.position_embeddings.shape().num_elements()
            + norm(&self.embeddings_layer_norm);
        for l in &self.layers {
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
        elements * std::mem::size_of::<f32>()
    }
}

/// A batch of token ids (`[batch, seq]`) and its additive attention mask (`[batch, 1, 1, seq]`:
/// 0 for tokens, `f32::MIN` for padding).
struct Batch {
    input_ids: Tensor<2, Int>,
    attention_mask: Tensor<4>,
}

impl Batch {
    /// Deterministic ids; the last quarter of every other sequence is padding.
    fn synthetic(batch: usize, seq: usize, vocab: usize, device: &Device) -> Batch {
        let ids: Vec<i64> = (0..batch * seq)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % vocab as u64) as i64)
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
        Batch {
            input_ids: Tensor::from_data(TensorData::new(ids, [batch, seq]), device),
            attention_mask: Tensor::from_data(TensorData::new(mask, [batch, 1, 1, seq]), device),
        }
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
            pub fn forward(&self, input_ids: &Tensor<2, Int>, attention_mask: &Tensor<4>) -> Tensor<3> {
                let w = self.0;
                let [_, seq_len] = input_ids.dims();
                let input_embeddings = embedding(w.word_embeddings.clone(), input_ids.clone());
                let position_ids = Tensor::<1, Int>::arange(0..seq_len as i64, &input_ids.device());
                let position_embeddings =
                    embedding(w.position_embeddings.clone(), position_ids.unsqueeze::<2>());
                let embeddings = input_embeddings + position_embeddings;
                let embeddings = w.embeddings_layer_norm.forward(embeddings);
                let mut hidden_states = embeddings;
                for layer in w.layers.iter() {
                    hidden_states = self.layer(layer, &hidden_states, attention_mask);
                }
                hidden_states
            }

            fn layer(&self, layer: &BertLayer, hidden_states: &Tensor<3>, attention_mask: &Tensor<4>) -> Tensor<3> {
                let attention_output = self.attention(layer, hidden_states, attention_mask);
                let intermediate_output = layer.intermediate.forward(attention_output.clone());
                let intermediate_output = activation::gelu(intermediate_output);
                let layer_output = layer.output.forward(intermediate_output);
                let layer_output = layer_output + attention_output;
                let layer_output = layer.output_layer_norm.forward(layer_output);
                layer_output
            }

            fn attention(&self, layer: &BertLayer, hidden_states: &Tensor<3>, attention_mask: &Tensor<4>) -> Tensor<3> {
                let self_outputs = self.self_attention(layer, hidden_states, attention_mask);
                let attention_output = layer.attention_output.forward(self_outputs);
                let attention_output = attention_output + hidden_states.clone();
                let attention_output = layer.attention_layer_norm.forward(attention_output);
                attention_output
            }

            fn self_attention(&self, layer: &BertLayer, hidden_states: &Tensor<3>, attention_mask: &Tensor<4>) -> Tensor<3> {
                let query_layer = layer.query.forward(hidden_states.clone());
                let key_layer = layer.key.forward(hidden_states.clone());
                let value_layer = layer.value.forward(hidden_states.clone());

                let query_layer = self.transpose_for_scores(&query_layer);
                let key_layer = self.transpose_for_scores(&key_layer);
                let value_layer = self.transpose_for_scores(&value_layer);

                let attention_scores = query_layer.matmul(key_layer.swap_dims(2, 3));
                let head_size = self.0.config.hidden / self.0.config.heads;
                let attention_scores = attention_scores.div_scalar((head_size as f64).sqrt());
                let attention_scores = attention_scores + attention_mask.clone();
                let attention_probs = activation::softmax(attention_scores, 3);

                let context_layer = attention_probs.matmul(value_layer);
                let context_layer = context_layer.swap_dims(1, 2);
                let context_layer: Tensor<3> = context_layer.flatten(2, 3);
                context_layer
            }

            fn transpose_for_scores(&self, xs: &Tensor<3>) -> Tensor<4> {
                let [batch, seq, _] = xs.dims();
                let config = self.0.config;
                let xs = xs.clone().reshape([batch, seq, config.heads, config.hidden / config.heads]);
                xs.swap_dims(1, 2)
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

fn forward(variant: Variant, weights: &BertWeights, batch: &Batch) -> Tensor<3> {
    match variant {
        Variant::Plain => plain::Bert(weights).forward(&batch.input_ids, &batch.attention_mask),
        Variant::Annotated => {
            annotated::Bert(weights).forward(&batch.input_ids, &batch.attention_mask)
        }
    }
}

/// Runs both variants until three rounds in a row leave the heap's live bytes as they found
/// them (at most 20 rounds), so that whatever the backend creates once exists before anything
/// is measured.
fn warm_up(weights: &BertWeights, batch: &Batch) {
    let mut quiet_rounds = 0;
    for _ in 0..20 {
        let before = heap::stats().allocated_bytes;
        drop(forward(Variant::Plain, weights, batch));
        drop(forward(Variant::Annotated, weights, batch));
        quiet_rounds = if heap::stats().allocated_bytes == before {
            quiet_rounds + 1
        } else {
            0
        };
        if quiet_rounds == 3 {
            break;
        }
    }
}

/// The forward pass's heap peak above what was live before it, and its output.
fn measure(variant: Variant, weights: &BertWeights, batch: &Batch) -> (u64, Tensor<3>) {
    heap::reset_peak_stats();
    let base = heap::stats().allocated_bytes;
    let out = forward(variant, weights, batch);
    (heap::stats().peak_allocated_bytes - base, out)
}

/// The output's values, for the bit-for-bit comparison.
fn values(out: Tensor<3>) -> Result<Vec<f32>, String> {
    let data = out.into_data();
    data.as_slice::<f32>()
        .map(<[f32]>::to_vec)
        .map_err(|e| format!("reading the output back: {e:?}"))
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
    kept: &mut Vec<Tensor<3>>,
    live: &mut Vec<u64>,
) {
    for batch in batches {
        if let Some(previous) = vramguard::scope::last_report("eval") {
            live.push(previous.live_bytes);
        }
        let output = annotated::Bert(weights).forward(&batch.input_ids, &batch.attention_mask);
        kept.push(output);
    }
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
    fn parse(args: &Args) -> Result<Settings, String> {
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

/// burn's ndarray backend (deprecated in burn 0.22 in favour of burn-flex; the one asked for).
#[allow(deprecated)]
fn ndarray_device() -> Device {
    Device::ndarray()
}

fn main() {
    let args = Args::parse();
    let result = if args.rest.iter().any(|a| a == heap_measure::TIME_CHILD_FLAG) {
        time_child(&args)
    } else {
        run(&args)
    };
    if let Err(e) = result {
        eprintln!("burn_inference failed: {e}");
        std::process::exit(1);
    }
}

/// A timing child of `tracking_time_ratio`: the annotated forward pass, timed.
fn time_child(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let settings = Settings::parse(args)?;
    let device = ndarray_device();
    let weights = BertWeights::new(settings.config, 42, &device);
    let batch = Batch::synthetic(
        settings.batch_size,
        settings.seq,
        settings.config.vocab,
        &device,
    );
    heap_measure::time_child(|| {
        drop(forward(Variant::Annotated, &weights, &batch));
        Ok::<(), std::convert::Infallible>(())
    })?;
    Ok(())
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
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
    eprintln!("BERT-style encoder in burn (burn-ndarray): {shape}");

    let device = ndarray_device();
    let weights = BertWeights::new(config, 42, &device);
    let batch = Batch::synthetic(batch_size, seq, config.vocab, &device);
    warm_up(&weights, &batch);
    let weight_bytes = weights.bytes();

    eprintln!("peaks: {reps} interleaved forward passes of each variant ...");
    let (mut peak_plain, mut peak_annotated) = (0, 0);
    let (mut out_plain, mut out_annotated) = (None, None);
    for _ in 0..reps {
        let (peak, out) = measure(Variant::Plain, &weights, &batch);
        peak_plain = peak_plain.max(peak);
        out_plain = Some(values(out)?);
        let (peak, out) = measure(Variant::Annotated, &weights, &batch);
        peak_annotated = peak_annotated.max(peak);
        out_annotated = Some(values(out)?);
    }
    let identical = match (&out_plain, &out_annotated) {
        (Some(a), Some(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        }
        _ => false,
    };

    let iterations = settings.eval_batches;
    eprintln!("eval loop: {iterations} batches under #[batch_scope], every output kept ...");
    let batches: Vec<Batch> = (0..iterations)
        .map(|_| Batch::synthetic(batch_size, seq, config.vocab, &device))
        .collect();
    // Reserved up front: the Vecs' own growth is not part of the figures.
    let mut kept = Vec::with_capacity(iterations);
    let mut live = Vec::with_capacity(iterations);
    eval_keeping_outputs(&weights, &batches, &mut kept, &mut live);
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
        unscoped.push(forward(Variant::Annotated, &weights, batch));
    }
    let freed = heap_measure::bytes_held_by(unscoped);
    let freed_per_iter = freed / iterations as u64;
    let leak_exact = leak_per_iter * iterations as u64 == freed;
    drop(batches);

    let budget_mib = settings.budget_mib;
    let budget = budget_mib << 20;
    eprintln!("largest batch in {budget_mib} MiB of heap (finder, then bisection) ...");
    // The finder's answer, and the bisection's answer and run count, for one variant.
    let search = |variant: Variant| -> Result<_, Box<dyn std::error::Error>> {
        let mut run_batch = |b: usize| {
            let batch = Batch::synthetic(b, seq, config.vocab, &device);
            drop(forward(variant, &weights, &batch));
            Ok::<(), std::convert::Infallible>(())
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

    let mut r = Report::new("burn");
    r.cargo_args("--features burn-ndarray --example burn_inference");
    heap_measure::HeapMetrics {
        peak_plain,
        peak_annotated,
        peak_ratio_target: None,
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
        "BERT-style encoder written with burn 0.22's tensor API ({shape}), f32 on the \
         burn-ndarray backend (`Device::ndarray()`, no autodiff), weights random from the same \
         fixed seed as the candle example's. Layers take their input by value as burn-nn's do; \
         the encoder's functions take `&Tensor` as their candle originals do; the locals they \
         are given are viewed (`reshape`, `swap_dims`), not copied, so the attribute has no \
         bytes to free early and the peaks are equal (see the example's documentation). Every figure \
         comes from `vramguard::TrackingAllocator`, installed as the global allocator (every \
         thread's allocations, Layout sizes). Peaks: above the bytes live before each forward \
         pass (weights and inputs excluded; the output is included); the larger of {reps} \
         interleaved runs per variant. `plain`: the functions without an attribute; \
         `annotated`: the same functions, stamped from one macro, under \
         `#[vramguard::inference]`. `outputs_bit_identical` = 1 when every output element has \
         the same bits. Leak: {iterations} iterations of a `#[batch_scope(label = \"eval\")]` \
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
