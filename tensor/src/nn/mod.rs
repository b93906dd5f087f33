//! Neural-network building blocks on [`Tensor`]: layers, a transformer encoder layer, and
//! optimizers that update parameters in place under no-grad.
//!
//! Every layer is initialised from a seed with the crate's deterministic generator, so runs are
//! reproducible. Parameters are leaves that require grad; [`Parameters::parameters`] collects
//! them for an optimizer, [`Parameters::named_parameters`] names them (PyTorch's dotted paths,
//! `mlp.fc1.weight`), and by those names weights are saved to and loaded from safetensors
//! files ([`Parameters::save_safetensors`], [`Parameters::load_safetensors`]).

mod optim;
mod safetensors;

pub use self::safetensors::{LoadedWeights, SafetensorsError};
pub use optim::{Adam, Sgd};

use crate::tensor::{Result, Tensor, TensorError};
use crate::Device;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Something that owns trainable tensors.
pub trait Parameters {
    /// The trainable tensors (leaves that require grad) with their names, in a fixed order:
    /// PyTorch's `named_parameters()`, dotted paths such as `attention.query.weight`. Names are
    /// unique; they are the keys of safetensors files.
    fn named_parameters(&self) -> Vec<(String, Tensor)>;

    /// The trainable tensors, in the order of [`Parameters::named_parameters`].
    fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters()
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Drops every parameter's gradient.
    fn zero_grad(&self) {
        for p in self.parameters() {
            p.zero_grad();
        }
    }

    /// Total number of trainable elements.
    fn num_parameters(&self) -> usize {
        self.parameters().iter().map(Tensor::elem_count).sum()
    }

    /// Writes every parameter to a safetensors file at `path` under its name (F32, little
    /// endian, with `format: pt` metadata as PyTorch's `save_file` writes).
    fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<(), SafetensorsError>
    where
        Self: Sized,
    {
        self::safetensors::save(&self.named_parameters(), path.as_ref())
    }

    /// Copies the tensors of the safetensors file at `path` into the parameters of the same
    /// names (in place, under no-grad, as PyTorch's `load_state_dict`). Every parameter must be
    /// in the file with its shape and dtype F32, or nothing is written and the error names the
    /// tensor; tensors of the file that no parameter takes are listed in the result.
    fn load_safetensors(&self, path: impl AsRef<Path>) -> Result<LoadedWeights, SafetensorsError>
    where
        Self: Sized,
    {
        self::safetensors::load(&self.named_parameters(), path.as_ref())
    }
}

/// `(prefix.name, tensor)` for each named parameter of `module`: the names of a submodule's
/// parameters inside a model (`prefixed_parameters("fc1", &self.fc1)` gives `fc1.weight`, ...),
/// for [`Parameters::named_parameters`] of one's own models.
pub fn prefixed_parameters(
    prefix: &str,
    module: &impl Parameters,
) -> impl Iterator<Item = (String, Tensor)> {
    let prefix = prefix.to_owned();
    module
        .named_parameters()
        .into_iter()
        .map(move |(name, t)| (format!("{prefix}.{name}"), t))
}

/// A layer mapping one tensor to another (candle's `Module`).
pub trait Module: Parameters {
    /// Applies the layer.
    fn forward(&self, xs: &Tensor) -> Result<Tensor>;
}

fn param(t: Tensor) -> Result<Tensor> {
    t.with_requires_grad()
}

/// `y = x Wᵀ + b`, with `W` of shape `[out, in]` (PyTorch's layout; the transpose is a strided
/// view, not a copy).
#[derive(Debug, Clone)]
pub struct Linear {
    /// `[out_features, in_features]`.
    pub weight: Tensor,
    /// `[out_features]`, if any.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with weights uniform in ±1/√in (PyTorch's default range) from `seed`.
    pub fn new(
        in_features: usize,
        out_features: usize,
        bias: bool,
        seed: u64,
        device: &Device,
    ) -> Result<Linear> {
        let bound = 1.0 / (in_features.max(1) as f32).sqrt();
        let weight = param(Tensor::rand(
            &[out_features, in_features],
            -bound,
            bound,
            seed,
            device,
        )?)?;
        let bias = if bias {
            Some(param(Tensor::rand(
                &[out_features],
                -bound,
                bound,
                seed ^ 0xB1A5,
                device,
            )?)?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    /// A layer with the given weight `[out, in]` and optional bias `[out]`.
    pub fn from_weights(weight: Tensor, bias: Option<Tensor>) -> Linear {
        Linear { weight, bias }
    }
}

impl Parameters for Linear {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = vec![("weight".to_owned(), self.weight.clone())];
        v.extend(self.bias.iter().map(|b| ("bias".to_owned(), b.clone())));
        v
    }
}

impl Module for Linear {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Linear::forward");
        let wt = self.weight.t()?;
        let y = xs.matmul(&wt)?;
        match &self.bias {
            // `y` is fresh and unshared: the consuming add writes into it.
            Some(b) => y + b,
            None => Ok(y),
        }
    }
}

/// Layer normalisation over the last dimension with a learned scale and shift.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// Scale, `[dim]`, initialised to ones.
    pub weight: Tensor,
    /// Shift, `[dim]`, initialised to zeros.
    pub bias: Tensor,
    /// Added to the variance.
    pub eps: f32,
}

impl LayerNorm {
    /// A layer norm over `dim` features.
    pub fn new(dim: usize, eps: f32, device: &Device) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: param(Tensor::ones(&[dim], device)?)?,
            bias: param(Tensor::zeros(&[dim], device)?)?,
            eps,
        })
    }
}

impl Parameters for LayerNorm {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![
            ("weight".to_owned(), self.weight.clone()),
            ("bias".to_owned(), self.bias.clone()),
        ]
    }
}

impl Module for LayerNorm {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("LayerNorm::forward");
        xs.layer_norm(Some(&self.weight), Some(&self.bias), self.eps)
    }
}

/// A lookup table of `vocab` vectors of `dim` features.
#[derive(Debug, Clone)]
pub struct Embedding {
    /// `[vocab, dim]`, normal(0, 1) initialised.
    pub weight: Tensor,
}

impl Embedding {
    /// A table initialised from `seed`.
    pub fn new(vocab: usize, dim: usize, seed: u64, device: &Device) -> Result<Embedding> {
        Ok(Embedding {
            weight: param(Tensor::randn(&[vocab, dim], 0.0, 1.0, seed, device)?)?,
        })
    }

    /// Vectors for `ids` (shape `ids_shape`); the result has shape `ids_shape + [dim]`.
    #[track_caller]
    pub fn forward(&self, ids: &[u32], ids_shape: &[usize]) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Embedding::forward");
        self.weight.embedding(ids, ids_shape)
    }
}

impl Parameters for Embedding {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        vec![("weight".to_owned(), self.weight.clone())]
    }
}

/// Zeroes elements with probability `p` in training mode (scaling the rest by `1/(1-p)`);
/// the identity in evaluation mode. Masks are drawn from a seeded stream: each call uses the
/// next seed, so runs are reproducible.
#[derive(Debug)]
pub struct Dropout {
    p: f32,
    training: AtomicBool,
    next_seed: AtomicU64,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1)`, starting in training mode.
    pub fn new(p: f32, seed: u64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&p) {
            return Err(TensorError::InvalidArgument {
                op: "dropout",
                shape: Vec::new(),
                message: format!("probability {p} is not in [0, 1)"),
            });
        }
        Ok(Dropout {
            p,
            training: AtomicBool::new(true),
            next_seed: AtomicU64::new(seed),
        })
    }

    /// Switches between training (`true`) and evaluation (`false`) mode.
    pub fn set_training(&self, training: bool) {
        self.training.store(training, Ordering::Relaxed);
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training.load(Ordering::Relaxed)
    }
}

impl Parameters for Dropout {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        Vec::new()
    }
}

impl Module for Dropout {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Dropout::forward");
        if !self.is_training() || self.p == 0.0 {
            return Ok(xs.clone());
        }
        let seed = self.next_seed.fetch_add(1, Ordering::Relaxed);
        let keep = 1.0 - self.p;
        let scale = 1.0 / keep;
        let mut rng = crate::tensor::rng::Rng::new(seed);
        let mask = Tensor::alloc_with(xs.device(), xs.dims(), "dropout", |m| {
            for v in m.iter_mut() {
                *v = if rng.uniform() < keep { scale } else { 0.0 };
            }
            Ok(())
        })?;
        // Recorded as a multiplication: backward keeps the mask (what it needs).
        xs.mul(&mask)
    }
}

/// Two linear layers with an activation in between: `fc2(act(fc1(x)))`.
#[derive(Debug, Clone)]
pub struct Mlp {
    /// First layer, `in -> hidden`.
    pub fc1: Linear,
    /// Second layer, `hidden -> out`.
    pub fc2: Linear,
    /// Activation between them.
    pub activation: Activation,
}

/// Activation functions for [`Mlp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`.
    Relu,
    /// GELU (tanh approximation).
    Gelu,
    /// `tanh`.
    Tanh,
}

impl Activation {
    /// Applies the activation (out of place).
    #[track_caller]
    pub fn apply(self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Activation::apply");
        match self {
            Activation::Relu => xs.relu(),
            Activation::Gelu => xs.gelu(),
            Activation::Tanh => xs.tanh(),
        }
    }

    /// Applies the activation to an owned tensor, reusing its buffer when nothing else can
    /// observe it and backward does not need the input (see [`Tensor::into_relu`]).
    #[track_caller]
    pub fn apply_owned(self, xs: Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Activation::apply_owned");
        match self {
            Activation::Relu => xs.into_relu(),
            Activation::Gelu => xs.into_gelu(),
            Activation::Tanh => xs.into_tanh(),
        }
    }
}

impl Mlp {
    /// An MLP `in -> hidden -> out` initialised from `seed`.
    pub fn new(
        in_features: usize,
        hidden: usize,
        out_features: usize,
        activation: Activation,
        seed: u64,
        device: &Device,
    ) -> Result<Mlp> {
        Ok(Mlp {
            fc1: Linear::new(in_features, hidden, true, seed, device)?,
            fc2: Linear::new(hidden, out_features, true, seed.wrapping_add(1), device)?,
            activation,
        })
    }
}

impl Parameters for Mlp {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        prefixed_parameters("fc1", &self.fc1)
            .chain(prefixed_parameters("fc2", &self.fc2))
            .collect()
    }
}

impl Module for Mlp {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("Mlp::forward");
        // Consuming activation: under no-grad (or for relu/tanh, which keep their output) the
        // hidden activation is computed in the fc1 output's buffer.
        let h = self.fc1.forward(xs)?;
        let h = self.activation.apply_owned(h)?;
        self.fc2.forward(&h)
    }
}

/// Multi-head self-attention: `out(softmax(q kᵀ / √d_head) v)` per head, with an optional
/// additive mask broadcast to `[batch, heads, seq, seq]`.
#[derive(Debug, Clone)]
pub struct MultiHeadSelfAttention {
    /// Query projection.
    pub query: Linear,
    /// Key projection.
    pub key: Linear,
    /// Value projection.
    pub value: Linear,
    /// Output projection.
    pub out: Linear,
    /// Number of heads.
    pub heads: usize,
}

impl MultiHeadSelfAttention {
    /// `heads` heads over `dim` features (`dim` must be divisible by `heads`).
    pub fn new(dim: usize, heads: usize, seed: u64, device: &Device) -> Result<Self> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(TensorError::InvalidArgument {
                op: "MultiHeadSelfAttention::new",
                shape: vec![dim],
                message: format!("hidden size {dim} is not divisible by {heads} heads"),
            });
        }
        Ok(MultiHeadSelfAttention {
            query: Linear::new(dim, dim, true, seed, device)?,
            key: Linear::new(dim, dim, true, seed.wrapping_add(1), device)?,
            value: Linear::new(dim, dim, true, seed.wrapping_add(2), device)?,
            out: Linear::new(dim, dim, true, seed.wrapping_add(3), device)?,
            heads,
        })
    }

    /// Attention over `xs` of shape `[batch, seq, dim]`, with an optional additive `mask`.
    #[track_caller]
    pub fn forward_masked(&self, xs: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("MultiHeadSelfAttention::forward_masked");
        let dims = xs.dims();
        if dims.len() != 3 {
            return Err(TensorError::InvalidArgument {
                op: "attention",
                shape: dims.to_vec(),
                message: "input must have shape [batch, seq, dim]".into(),
            });
        }
        let (b, t, d) = (dims[0], dims[1], dims[2]);
        let h = self.heads;
        // `heads` is a public field: check it here too, not only in `new`.
        if h == 0 || !d.is_multiple_of(h) {
            return Err(TensorError::InvalidArgument {
                op: "attention",
                shape: dims.to_vec(),
                message: format!("hidden size {d} is not divisible by {h} heads"),
            });
        }
        let dh = d / h;
        let split =
            |x: Tensor| -> Result<Tensor> { x.reshape(&[b, t, h, dh])?.permute(&[0, 2, 1, 3]) };
        let q = split(self.query.forward(xs)?)?;
        let k = split(self.key.forward(xs)?)?;
        let v = split(self.value.forward(xs)?)?;
        let scores = q.matmul(&k.t()?)?;
        drop((q, k));
        let scores = scores * (1.0 / (dh as f32).sqrt());
        let scores = match mask {
            Some(m) => (scores? + m)?,
            None => scores?,
        };
        let probs = scores.softmax(3)?;
        drop(scores);
        let ctx = probs.matmul(&v)?;
        drop((probs, v));
        let ctx = ctx.permute(&[0, 2, 1, 3])?.reshape(&[b, t, d])?;
        self.out.forward(&ctx)
    }
}

impl Parameters for MultiHeadSelfAttention {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        prefixed_parameters("query", &self.query)
            .chain(prefixed_parameters("key", &self.key))
            .chain(prefixed_parameters("value", &self.value))
            .chain(prefixed_parameters("out", &self.out))
            .collect()
    }
}

impl Module for MultiHeadSelfAttention {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("MultiHeadSelfAttention::forward");
        self.forward_masked(xs, None)
    }
}

/// A post-norm transformer encoder layer (BERT's):
/// `x = ln1(x + attn(x)); x = ln2(x + mlp(x))`, with a GELU MLP.
#[derive(Debug, Clone)]
pub struct EncoderLayer {
    /// Self-attention.
    pub attention: MultiHeadSelfAttention,
    /// Norm after attention.
    pub ln1: LayerNorm,
    /// Feed-forward block.
    pub mlp: Mlp,
    /// Norm after the feed-forward block.
    pub ln2: LayerNorm,
}

impl EncoderLayer {
    /// A layer with `dim` features, `heads` heads and a feed-forward width of `ffn`.
    pub fn new(dim: usize, heads: usize, ffn: usize, seed: u64, device: &Device) -> Result<Self> {
        Ok(EncoderLayer {
            attention: MultiHeadSelfAttention::new(dim, heads, seed, device)?,
            ln1: LayerNorm::new(dim, 1e-12, device)?,
            mlp: Mlp::new(
                dim,
                ffn,
                dim,
                Activation::Gelu,
                seed.wrapping_add(10),
                device,
            )?,
            ln2: LayerNorm::new(dim, 1e-12, device)?,
        })
    }
}

impl Parameters for EncoderLayer {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        prefixed_parameters("attention", &self.attention)
            .chain(prefixed_parameters("ln1", &self.ln1))
            .chain(prefixed_parameters("mlp", &self.mlp))
            .chain(prefixed_parameters("ln2", &self.ln2))
            .collect()
    }
}

impl Module for EncoderLayer {
    #[track_caller]
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let _origin = crate::alloc::enter_op("EncoderLayer::forward");
        let a = self.attention.forward(xs)?;
        // `a` is owned and unshared: the residual add reuses its buffer.
        let x = self.ln1.forward(&(a + xs)?)?;
        let m = self.mlp.forward(&x)?;
        self.ln2.forward(&(m + &x)?)
    }
}
