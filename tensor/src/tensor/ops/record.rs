//! What ops record for autograd: a graph node per op (its inputs' edges and an [`OpRecord`]
//! of what was done, with the tensors backward needs, [`Saved`] with their versions). Ops build
//! records; the autograd engine matches on them to compute gradients.
//!
//! A node is created only when grad mode is on and an input requires grad. It keeps exactly
//! what its backward formula needs ([`Saved`] tensors share storage with the forward values, so
//! they cost no copy, but they keep that storage alive until backward runs or the graph is
//! dropped).

use crate::tensor::error::TensorError;
use crate::tensor::Tensor;
use std::sync::{Arc, Mutex};

/// A tensor kept for backward, with the storage version it had when saved.
pub(crate) struct Saved {
    pub(crate) tensor: Tensor,
    pub(crate) version: u64,
    pub(crate) what: &'static str,
}

impl Saved {
    /// Saves `t` (detached, so that saving an op's own output makes no reference cycle).
    pub(crate) fn new(t: &Tensor, what: &'static str) -> Saved {
        Saved {
            tensor: t.detach(),
            version: t.storage().version(),
            what,
        }
    }

    pub(crate) fn get(&self) -> &Tensor {
        &self.tensor
    }
}

/// The backward formula of one op and what it saved.
pub(crate) enum OpRecord {
    Add {
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
    },
    Sub {
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
    },
    Mul {
        a: Option<Saved>,
        b: Option<Saved>,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
    },
    Div {
        a: Option<Saved>,
        b: Saved,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
    },
    /// Gradient passes through unchanged (scalar add, contiguous, in-place copy source).
    Identity,
    MulScalar(f32),
    MatMul {
        a: Option<Saved>,
        b: Option<Saved>,
        a_shape: Vec<usize>,
        b_shape: Vec<usize>,
    },
    Relu {
        out: Saved,
    },
    Gelu {
        x: Saved,
    },
    Tanh {
        out: Saved,
    },
    Sigmoid {
        out: Saved,
    },
    Exp {
        out: Saved,
    },
    Log {
        x: Saved,
    },
    Softmax {
        out: Saved,
        dim: usize,
    },
    LogSoftmax {
        out: Saved,
        dim: usize,
    },
    LayerNorm {
        x: Saved,
        mean: Saved,
        rstd: Saved,
        weight: Option<Saved>,
        has_bias: bool,
    },
    Embedding {
        ids: Vec<u32>,
        table_shape: Vec<usize>,
    },
    Sum {
        in_shape: Vec<usize>,
        keep_shape: Vec<usize>,
        scale: f32,
    },
    CrossEntropy {
        probs: Saved,
        targets: Vec<u32>,
    },
    Mse {
        diff: Saved,
    },
    Reshape {
        in_shape: Vec<usize>,
    },
    Permute {
        perm: Vec<usize>,
    },
    Narrow {
        in_shape: Vec<usize>,
        dim: usize,
        start: usize,
    },
    Expand {
        in_shape: Vec<usize>,
    },
    /// `to_device`: the gradient goes back to the source's device.
    ToDevice {
        device: crate::Device,
    },
    /// In-place `copy_`: the old value gets no gradient, the source gets it all.
    CopyInto {
        src_shape: Vec<usize>,
    },
    /// In-place `zero_`: the old value gets no gradient.
    Zeroed,
    /// Stands in for the history of a handle whose storage a recorded in-place op rewrote
    /// through another handle (see `Tensor::has_stale_history`): backward fails up front.
    StaleHistory {
        /// The handle's own op (`narrow`, `reshape`, …).
        of: &'static str,
        by: &'static str,
        saved: u64,
        now: u64,
    },
}

impl OpRecord {
    pub(crate) fn saved(&self) -> Vec<&Saved> {
        use OpRecord::*;
        match self {
            Mul { a, b, .. } | MatMul { a, b, .. } => a.iter().chain(b.iter()).collect(),
            Div { a, b, .. } => a.iter().chain(std::iter::once(b)).collect(),
            Relu { out }
            | Tanh { out }
            | Sigmoid { out }
            | Exp { out }
            | Softmax { out, .. }
            | LogSoftmax { out, .. } => vec![out],
            Gelu { x } | Log { x } => vec![x],
            LayerNorm {
                x,
                mean,
                rstd,
                weight,
                ..
            } => {
                let mut v = vec![x, mean, rstd];
                v.extend(weight.iter());
                v
            }
            CrossEntropy { probs, .. } => vec![probs],
            Mse { diff } => vec![diff],
            _ => Vec::new(),
        }
    }

    pub(crate) fn stale_error(&self) -> Option<TensorError> {
        match *self {
            OpRecord::StaleHistory { of, by, saved, now } => {
                Some(TensorError::SavedTensorModified {
                    op: of,
                    what: "storage (shared with the tensor an in-place op rewrote)",
                    by,
                    saved,
                    now,
                })
            }
            _ => None,
        }
    }
}

pub(crate) enum Edge {
    Leaf(Tensor),
    Node(Arc<Node>),
}

/// One recorded op.
pub(crate) struct Node {
    pub(crate) name: &'static str,
    pub(crate) edges: Vec<Option<Edge>>,
    pub(crate) state: Mutex<Option<OpRecord>>,
}

impl Drop for Node {
    /// Drops long chains iteratively: the default recursive drop of `Arc<Node>` edges would
    /// overflow the stack on a graph thousands of ops deep.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node>> = Vec::new();
        let take = |edges: &mut Vec<Option<Edge>>, stack: &mut Vec<Arc<Node>>| {
            for edge in edges.drain(..) {
                if let Some(Edge::Node(n)) = edge {
                    stack.push(n);
                }
            }
        };
        take(&mut self.edges, &mut stack);
        while let Some(node) = stack.pop() {
            if let Some(mut inner) = Arc::into_inner(node) {
                take(&mut inner.edges, &mut stack);
            }
        }
    }
}

impl Node {
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }
}

/// Whether an op with these inputs records a node.
pub(crate) fn should_record(inputs: &[&Tensor]) -> bool {
    crate::grad::is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// The history of `t`: its node, or a node that fails backward when `t`'s history is stale.
pub(crate) fn history_of(t: &Tensor) -> Option<Arc<Node>> {
    let node = t.grad_fn();
    if !t.has_stale_history() {
        return node;
    }
    let storage = t.storage();
    Some(Arc::new(Node {
        name: "stale history",
        edges: Vec::new(),
        state: Mutex::new(Some(OpRecord::StaleHistory {
            of: node.as_ref().map_or("a view", |n| n.name),
            by: storage.last_writer(),
            saved: t.0.history_seen.load(std::sync::atomic::Ordering::Acquire),
            now: storage.history_rewrites(),
        })),
    }))
}

fn edge_of(t: &Tensor) -> Option<Edge> {
    if let Some(node) = history_of(t) {
        Some(Edge::Node(node))
    } else if t.requires_grad() {
        Some(Edge::Leaf(t.clone()))
    } else {
        None
    }
}

/// The edges a node for an op on `inputs` would have, or `None` when nothing is recorded
/// (grad mode off, or no input requires grad).
pub(crate) fn edges(inputs: &[&Tensor]) -> Option<Vec<Option<Edge>>> {
    should_record(inputs).then(|| inputs.iter().map(|t| edge_of(t)).collect())
}

/// Makes `out` the result of a recorded op with `edges`; `make` builds the backward state and
/// is called (and so saves tensors) only when recording.
pub(crate) fn attach(
    out: &Tensor,
    name: &'static str,
    edges: Option<Vec<Option<Edge>>>,
    make: impl FnOnce() -> OpRecord,
) {
    if let Some(edges) = edges {
        let node = Node {
            name,
            edges,
            state: Mutex::new(Some(make())),
        };
        out.set_grad_fn(Some(Arc::new(node)));
    }
}

/// Records `out = name(inputs)` if grad mode is on and an input requires grad. For in-place
/// ops, `out` is the target and `inputs` starts with it (its history before the op).
pub(crate) fn record(
    out: &Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    make: impl FnOnce() -> OpRecord,
) {
    attach(out, name, edges(inputs), make)
}
