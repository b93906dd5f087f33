//! A BERT-style encoder written the way model code is written for Rust tensor libraries
//! (it follows candle-transformers' `bert.rs`): one `let` per step, shadowed names,
//! `Result` with `?`, borrows through `dims()`. Nothing here is arranged to flatter the
//! `#[inference]` transform.
//!
//! The forward pass is stamped out by [`bert_forward!`], once per variant the benchmarks
//! compare: plain (no attribute), guard only (`#[inference(drops = false)]`),
//! `#[inference(inplace = false)]` and `#[inference]`. The weights are shared.
//!
//! Each layer takes its input by value (`hidden_states = self.layer(layer, hidden_states, …)`),
//! as code written for in-place ops does (and as burn's modules do), so that the layer's input
//! can die at its last use, the residual add in `attention`. Until issue #21's second round
//! the layers borrowed it (`&hidden_states`, as candle-transformers' `bert.rs` does), and the
//! caller's loop kept it alive until the layer returned: 3 MiB more at batch 8, sequence 128,
//! at both peaks (see `inference_bench`'s docs).

#![allow(dead_code)] // Each program uses a different subset.

use vramguard::nn::{prefixed_parameters, Embedding, LayerNorm, Linear, Module, Parameters};
use vramguard::{Device, Tensor, TensorError};

pub type Result<T> = std::result::Result<T, TensorError>;

/// Model shape.
#[derive(Debug, Clone, Copy)]
pub struct BertConfig {
    pub vocab: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub layers: usize,
    pub max_positions: usize,
}

impl BertConfig {
    /// BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072 (vocabulary kept small: the
    /// embedding table is weights, not activations, and only costs load time here).
    pub fn base() -> BertConfig {
        BertConfig {
            vocab: 8192,
            hidden: 768,
            heads: 12,
            ffn: 3072,
            layers: 12,
            max_positions: 512,
        }
    }

    /// The same shape with fewer layers.
    pub fn with_layers(self, layers: usize) -> BertConfig {
        BertConfig { layers, ..self }
    }
}

/// One encoder layer's weights (names as in the Hugging Face checkpoint).
pub struct BertLayer {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    pub attention_output: Linear,
    pub attention_layer_norm: LayerNorm,
    pub intermediate: Linear,
    pub output: Linear,
    pub output_layer_norm: LayerNorm,
}

/// The encoder's weights.
pub struct BertWeights {
    pub config: BertConfig,
    pub word_embeddings: Embedding,
    pub position_embeddings: Tensor,
    pub embeddings_layer_norm: LayerNorm,
    pub layers: Vec<BertLayer>,
}

impl BertWeights {
    /// Random weights from `seed`, with `requires_grad` as given (grad-on runs record the graph).
    pub fn new(
        config: BertConfig,
        seed: u64,
        requires_grad: bool,
        device: &Device,
    ) -> Result<Self> {
        let h = config.hidden;
        let mut layers = Vec::with_capacity(config.layers);
        for i in 0..config.layers {
            let s = seed.wrapping_add(100 * i as u64 + 1);
            layers.push(BertLayer {
                query: Linear::new(h, h, true, s, device)?,
                key: Linear::new(h, h, true, s + 1, device)?,
                value: Linear::new(h, h, true, s + 2, device)?,
                attention_output: Linear::new(h, h, true, s + 3, device)?,
                attention_layer_norm: LayerNorm::new(h, 1e-12, device)?,
                intermediate: Linear::new(h, config.ffn, true, s + 4, device)?,
                output: Linear::new(config.ffn, h, true, s + 5, device)?,
                output_layer_norm: LayerNorm::new(h, 1e-12, device)?,
            });
        }
        let weights = BertWeights {
            config,
            word_embeddings: Embedding::new(config.vocab, h, seed, device)?,
            position_embeddings: Tensor::randn(
                &[config.max_positions, h],
                0.0,
                0.02,
                seed ^ 7,
                device,
            )?,
            embeddings_layer_norm: LayerNorm::new(h, 1e-12, device)?,
            layers,
        };
        for p in weights.parameters() {
            p.set_requires_grad(requires_grad)?;
        }
        Ok(weights)
    }
}

/// Names as in Hugging Face's BERT checkpoints (without the `bert.` prefix of the pre-training
/// heads), so `--weights FILE` files read like theirs.
impl Parameters for BertWeights {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v: Vec<(String, Tensor)> =
            prefixed_parameters("embeddings.word_embeddings", &self.word_embeddings).collect();
        v.push((
            "embeddings.position_embeddings.weight".to_owned(),
            self.position_embeddings.clone(),
        ));
        v.extend(prefixed_parameters(
            "embeddings.LayerNorm",
            &self.embeddings_layer_norm,
        ));
        for (i, l) in self.layers.iter().enumerate() {
            let p = format!("encoder.layer.{i}");
            for (name, module) in [
                ("attention.self.query", &l.query),
                ("attention.self.key", &l.key),
                ("attention.self.value", &l.value),
                ("attention.output.dense", &l.attention_output),
                ("intermediate.dense", &l.intermediate),
                ("output.dense", &l.output),
            ] {
                v.extend(prefixed_parameters(&format!("{p}.{name}"), module));
            }
            v.extend(prefixed_parameters(
                &format!("{p}.attention.output.LayerNorm"),
                &l.attention_layer_norm,
            ));
            v.extend(prefixed_parameters(
                &format!("{p}.output.LayerNorm"),
                &l.output_layer_norm,
            ));
        }
        v
    }
}

/// A batch of token ids and its additive attention mask (`[batch, 1, 1, seq]`, 0 or -10000).
pub struct Batch {
    pub input_ids: Vec<u32>,
    pub shape: [usize; 2],
    pub attention_mask: Tensor,
}

impl Batch {
    /// Deterministic ids; the last quarter of every other sequence is padding.
    pub fn synthetic(batch: usize, seq: usize, vocab: usize, device: &Device) -> Result<Batch> {
        let input_ids = (0..batch * seq)
            .map(|i| ((i as u64).wrapping_mul(2_654_435_761) % vocab as u64) as u32)
            .collect();
        let mask: Vec<f32> = (0..batch * seq)
            .map(|i| {
                let (b, t) = (i / seq, i % seq);
                if b % 2 == 1 && t >= seq - seq / 4 {
                    -10_000.0
                } else {
                    0.0
                }
            })
            .collect();
        Ok(Batch {
            input_ids,
            shape: [batch, seq],
            attention_mask: Tensor::from_slice(&mask, &[batch, 1, 1, seq], device)?,
        })
    }
}

/// Stamps out the forward pass with the given attributes on its `impl` block.
macro_rules! bert_forward {
    ($(#[$attr:meta])*) => {
        /// The encoder's forward pass over shared weights.
        pub struct Bert<'a>(pub &'a BertWeights);

        $(#[$attr])*
        impl Bert<'_> {
            pub fn forward(&self, batch: &Batch) -> Result<Tensor> {
                let w = self.0;
                let [_, seq_len] = batch.shape;
                let embeddings = w.word_embeddings.forward(&batch.input_ids, &batch.shape)?;
                let position_embeddings = w.position_embeddings.narrow(0, 0, seq_len)?;
                let embeddings = embeddings.broadcast_add(&position_embeddings)?;
                let embeddings = w.embeddings_layer_norm.forward(&embeddings)?;
                let mut hidden_states = embeddings;
                for layer in w.layers.iter() {
                    hidden_states = self.layer(layer, hidden_states, &batch.attention_mask)?;
                }
                Ok(hidden_states)
            }

            fn layer(&self, layer: &BertLayer, hidden_states: Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let attention_output = self.attention(layer, hidden_states, attention_mask)?;
                let intermediate_output = layer.intermediate.forward(&attention_output)?;
                let intermediate_output = intermediate_output.gelu()?;
                let layer_output = layer.output.forward(&intermediate_output)?;
                let layer_output = (layer_output + &attention_output)?;
                let layer_output = layer.output_layer_norm.forward(&layer_output)?;
                Ok(layer_output)
            }

            fn attention(&self, layer: &BertLayer, hidden_states: Tensor, attention_mask: &Tensor) -> Result<Tensor> {
                let self_outputs = self.self_attention(layer, &hidden_states, attention_mask)?;
                let attention_output = layer.attention_output.forward(&self_outputs)?;
                let attention_output = (attention_output + &hidden_states)?;
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
                let attention_scores = (attention_scores * (1.0 / (head_size as f32).sqrt()))?;
                let attention_scores = attention_scores.broadcast_add(attention_mask)?;
                let attention_probs = attention_scores.softmax(3)?;

                let context_layer = attention_probs.matmul(&value_layer)?;
                let context_layer = context_layer.transpose(1, 2)?.contiguous()?;
                let (batch_size, seq_len, _, _) = context_layer.dims4()?;
                let context_layer = context_layer.reshape(&[batch_size, seq_len, self.0.config.hidden])?;
                Ok(context_layer)
            }

            fn transpose_for_scores(&self, xs: &Tensor) -> Result<Tensor> {
                let (batch_size, seq_len, _) = xs.dims3()?;
                let heads = self.0.config.heads;
                let xs = xs.reshape(&[batch_size, seq_len, heads, self.0.config.hidden / heads])?;
                xs.transpose(1, 2)?.contiguous()
            }
        }
    };
}

/// No attribute: grad mode as the caller set it, every local alive to the end of its function.
pub mod plain {
    use super::*;
    bert_forward!();
}

/// The no-grad guard only.
pub mod guard_only {
    use super::*;
    bert_forward!(#[vramguard::inference(drops = false)]);
}

/// No-grad guard and drops at last use, every op out of place (as before issue #21).
pub mod inference {
    use super::*;
    bert_forward!(#[vramguard::inference(inplace = false)]);
}

/// The full attribute: no-grad guard, drops at last use, and ops on a local at its last use in
/// place (`gelu`, `broadcast_add`, `softmax` here).
pub mod inference_inplace {
    use super::*;
    bert_forward!(#[vramguard::inference]);
}
