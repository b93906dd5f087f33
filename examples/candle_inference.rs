//! `#[vramguard::inference]` on candle code: a BERT-style encoder written with candle-core and
//! candle-nn the way candle users write it (candle-transformers' `bert.rs`: one `let` per step,
//! shadowed names, `?`), run once plain and once with the same functions under the attribute.
//!
//! ```sh
//! cargo run --release --features candle --example candle_inference
//! cargo run --release --features candle --example candle_inference -- --layers 6 --hidden 384 --batch 4 --seq 128 --json
//! ```
//!
//! What is measured: the heap peak of each forward pass above the bytes live before it (weights,
//! inputs, candle's and rayon's warmed-up caches), counted by a global allocator that wraps
//! `System` and keeps the current and peak bytes in atomics (candle's CPU matmul runs on rayon
//! threads; every thread's allocations count). Each variant runs `--reps` times, interleaved;
//! the larger peak of its runs is reported. Outputs are compared bit for bit.
//!
//! candle has no no-grad mode: the weights are plain tensors (not `Var`s), so nothing records a
//! graph in either run, and the attribute's only effect here is that each local is freed right
//! after its last use.
//!
//! Flags: `--layers N` (6), `--hidden N` (384), `--heads N` (6), `--batch N` (4), `--seq N`
//! (128), `--reps N` (2), `--quick` (2 layers, hidden 128, heads 2, batch 2, seq 32), plus the
//! shared `--json` and `--write` (which rewrites the `candle` section of BENCHMARKS.md).

#[path = "../benches/support/report.rs"]
mod report;

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::{Embedding, LayerNorm, Linear};
use report::{Args, Report, Unit};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `System`, counting the bytes currently allocated and their peak, across all threads.
struct CountingAlloc;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl CountingAlloc {
    fn grew(by: usize) {
        let now = CURRENT.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    fn shrank(by: usize) {
        CURRENT.fetch_sub(by, Ordering::Relaxed);
    }

    /// Starts a measurement: the peak restarts from the bytes live now, which it returns.
    fn reset_peak() -> usize {
        let now = CURRENT.load(Ordering::SeqCst);
        PEAK.store(now, Ordering::SeqCst);
        now
    }

    fn peak() -> usize {
        PEAK.load(Ordering::SeqCst)
    }
}

// SAFETY: every call is forwarded to `System` with the same arguments; the counters are only
// bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            Self::grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        Self::shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                Self::grew(new_size - layout.size());
            } else {
                Self::shrank(layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

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

/// The forward pass's heap peak above what was live before it, and its output.
fn measure(variant: Variant, weights: &BertWeights, batch: &Batch) -> Result<(usize, Tensor)> {
    let base = CountingAlloc::reset_peak();
    let out = forward(variant, weights, batch)?;
    Ok((CountingAlloc::peak() - base, out))
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("candle_inference failed: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let quick = args.quick;
    let layers: usize = args.value("layers").unwrap_or(if quick { 2 } else { 6 });
    let hidden: usize = args
        .value("hidden")
        .unwrap_or(if quick { 128 } else { 384 });
    let heads: usize = args.value("heads").unwrap_or(if quick { 2 } else { 6 });
    let batch_size: usize = args.value("batch").unwrap_or(if quick { 2 } else { 4 });
    let seq: usize = args.value("seq").unwrap_or(if quick { 32 } else { 128 });
    let reps: usize = args.value::<usize>("reps").unwrap_or(2).max(1);
    if layers == 0 || batch_size == 0 || seq == 0 || heads == 0 || !hidden.is_multiple_of(heads) {
        return Err("--layers, --batch, --seq and --heads must be at least 1, and --hidden a multiple of --heads".into());
    }
    let config = Config {
        vocab: 8192,
        hidden,
        heads,
        ffn: 4 * hidden,
        layers,
        max_positions: seq.max(512),
    };
    let shape = format!(
        "{layers} layers, hidden {hidden}, {heads} heads, FFN {}, batch {batch_size}, sequence {seq}",
        config.ffn
    );
    eprintln!("BERT-style encoder in candle (CPU): {shape}");

    let device = Device::Cpu;
    let weights = BertWeights::new(config, 42, &device)?;
    let batch = Batch::synthetic(batch_size, seq, config.vocab, &device)?;
    // One pass first, so rayon's pool and gemm's per-thread buffers exist before measuring.
    drop(forward(Variant::Plain, &weights, &batch)?);
    let weight_bytes = weights_bytes(&weights);

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
    let ratio = peak_annotated as f64 / peak_plain.max(1) as f64;

    let mut r = Report::new("candle");
    r.cargo_args("--features candle --example candle_inference");
    r.metric("candle_peak_bytes_plain", peak_plain as f64, Unit::Bytes);
    r.metric(
        "candle_peak_bytes_annotated",
        peak_annotated as f64,
        Unit::Bytes,
    );
    r.metric_with_target(
        "candle_peak_annotated_over_plain",
        ratio,
        Unit::Ratio,
        "≤ 0.70",
        ratio <= 0.70,
    );
    r.metric_with_target(
        "outputs_bit_identical",
        f64::from(u8::from(identical)),
        Unit::Count,
        "= 1",
        identical,
    );
    // One `[batch, seq, hidden]` f32 activation: the unit the peaks are easiest to read in.
    let activation = (batch_size * seq * hidden * 4) as f64;
    r.metric(
        "candle_peak_plain_in_activations",
        peak_plain as f64 / activation,
        Unit::Ratio,
    );
    r.metric(
        "candle_peak_annotated_in_activations",
        peak_annotated as f64 / activation,
        Unit::Ratio,
    );
    r.metric("weight_bytes", weight_bytes as f64, Unit::Bytes);
    r.note(&format!(
        "BERT-style encoder written with candle-core and candle-nn ({shape}), f32 on candle's CPU \
         device, weights random from a fixed seed as plain tensors (candle records no graph for \
         them). Peaks: heap bytes counted by a global allocator wrapping `System` (atomics, every \
         thread), above the bytes live before each forward pass (weights, inputs and warmed-up \
         rayon/gemm buffers excluded; the output is included); the larger of {reps} interleaved \
         runs per variant. `plain`: the functions without an attribute; `annotated`: the same \
         functions, stamped from one macro, under `#[vramguard::inference]`. \
         `outputs_bit_identical` = 1 when every output element has the same bits. \
         `_in_activations`: the peak over one `[batch, seq, hidden]` f32 activation. With the \
         default shape the annotated peak is 10.00 of them, the floor of this code: at the FFN's \
         GELU, its input and output (4 each), the attention output, and the layer's input that \
         the caller still holds. Without the attribute the peak is in self-attention, where \
         q, k, v, their per-head copies, the scaled, masked and softmaxed scores and the \
         context all stay alive until the function returns."
    ));
    r.finish(args);
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
