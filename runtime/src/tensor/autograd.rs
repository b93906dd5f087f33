//! Reverse-mode autograd: graph nodes, saved tensors with version checks, and the engine.
//!
//! A node is created only when grad mode is on and an input requires grad. It keeps exactly
//! what its backward formula needs ([`Saved`] tensors share storage with the forward values, so
//! they cost no copy, but they keep that storage alive until backward runs or the graph is
//! dropped). Backward frees each node's saved tensors as soon as the node has run, like PyTorch
//! without `retain_graph`.

use super::kinds::{BinOp, ZipOp};
use super::{Result, Tensor, TensorError};
use crate::grad::NoGradGuard;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// A tensor kept for backward, with the storage version it had when saved.
pub(crate) struct Saved {
    tensor: Tensor,
    version: u64,
    what: &'static str,
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

    fn check(&self, op: &'static str) -> Result<()> {
        let now = self.tensor.storage().version();
        if now != self.version {
            return Err(TensorError::SavedTensorModified {
                op,
                what: self.what,
                by: self.tensor.storage().last_writer(),
                saved: self.version,
                now,
            });
        }
        Ok(())
    }

    pub(crate) fn get(&self) -> &Tensor {
        &self.tensor
    }
}

/// The backward formula of one op and what it saved.
pub(crate) enum Backward {
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

impl Backward {
    fn saved(&self) -> Vec<&Saved> {
        use Backward::*;
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

    fn stale_error(&self) -> Option<TensorError> {
        match *self {
            Backward::StaleHistory { of, by, saved, now } => {
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

    /// Gradients for each input (`None` where the input gets none or needs none).
    fn run(&self, g: &Tensor, needs: &[bool]) -> Result<Vec<Option<Tensor>>> {
        use Backward::*;
        let need = |i: usize| needs.get(i).copied().unwrap_or(false);
        Ok(match self {
            Add { a_shape, b_shape } => vec![
                opt(need(0), || g.sum_to_shape(a_shape))?,
                opt(need(1), || g.sum_to_shape(b_shape))?,
            ],
            Sub { a_shape, b_shape } => vec![
                opt(need(0), || g.sum_to_shape(a_shape))?,
                opt(need(1), || g.neg()?.sum_to_shape(b_shape))?,
            ],
            Mul {
                a,
                b,
                a_shape,
                b_shape,
            } => vec![
                match (need(0), b) {
                    (true, Some(b)) => Some(g.mul(b.get())?.sum_to_shape(a_shape)?),
                    _ => None,
                },
                match (need(1), a) {
                    (true, Some(a)) => Some(g.mul(a.get())?.sum_to_shape(b_shape)?),
                    _ => None,
                },
            ],
            Div {
                a,
                b,
                a_shape,
                b_shape,
            } => vec![
                opt(need(0), || g.div(b.get())?.sum_to_shape(a_shape))?,
                match (need(1), a) {
                    (true, Some(a)) => {
                        // d(a/b)/db = -a / b².
                        let bb = b.get().mul(b.get())?;
                        Some(g.mul(a.get())?.div(&bb)?.neg()?.sum_to_shape(b_shape)?)
                    }
                    _ => None,
                },
            ],
            Identity => vec![Some(g.clone())],
            MulScalar(s) => vec![Some(g.mul_scalar(*s)?)],
            MatMul {
                a,
                b,
                a_shape,
                b_shape,
            } => {
                let ga = match (need(0), b) {
                    (true, Some(b)) => {
                        let bt = b.get().transpose(b.get().rank() - 2, b.get().rank() - 1)?;
                        Some(g.matmul(&bt)?.sum_to_shape(a_shape)?)
                    }
                    _ => None,
                };
                let gb = match (need(1), a) {
                    (true, Some(a)) => Some(matmul_grad_rhs(a.get(), g, b_shape)?),
                    _ => None,
                };
                vec![ga, gb]
            }
            Relu { out } => vec![Some(g.zip_map(
                out.get(),
                "relu_backward",
                ZipOp::ReluBackward,
            )?)],
            Gelu { x } => vec![Some(g.zip_map(
                x.get(),
                "gelu_backward",
                ZipOp::GeluBackward,
            )?)],
            Tanh { out } => vec![Some(g.zip_map(
                out.get(),
                "tanh_backward",
                ZipOp::TanhBackward,
            )?)],
            Sigmoid { out } => vec![Some(g.zip_map(
                out.get(),
                "sigmoid_backward",
                ZipOp::SigmoidBackward,
            )?)],
            Exp { out } => vec![Some(g.zip_map(
                out.get(),
                "exp_backward",
                ZipOp::Bin(BinOp::Mul),
            )?)],
            Log { x } => vec![Some(g.zip_map(
                x.get(),
                "log_backward",
                ZipOp::Bin(BinOp::Div),
            )?)],
            Softmax { out, dim } => {
                // dx = y * (g - sum(g * y)).
                let y = out.get();
                let gy = g.mul(y)?;
                let s = gy.sum_keepdim(*dim)?;
                vec![Some(g.sub(&s)?.mul(y)?)]
            }
            LogSoftmax { out, dim } => {
                // dx = g - softmax * sum(g).
                let s = g.sum_keepdim(*dim)?;
                let p = out.get().exp()?;
                vec![Some(g.sub(&p.mul(&s)?)?)]
            }
            LayerNorm {
                x,
                mean,
                rstd,
                weight,
                has_bias,
            } => {
                let (gx, gw, gb) = super::ops::layer_norm_backward(
                    g,
                    x.get(),
                    mean.get(),
                    rstd.get(),
                    weight.as_ref().map(Saved::get),
                    need(1),
                    *has_bias && need(2),
                )?;
                vec![if need(0) { Some(gx) } else { None }, gw, gb]
            }
            Embedding { ids, table_shape } => {
                vec![Some(super::ops::embedding_backward(g, ids, table_shape)?)]
            }
            Sum {
                in_shape,
                keep_shape,
                scale,
            } => {
                let g = g.reshape(keep_shape)?.broadcast_as(in_shape)?;
                let g = if *scale == 1.0 {
                    g.contiguous()?
                } else {
                    g.mul_scalar(*scale)?
                };
                vec![Some(g)]
            }
            CrossEntropy { probs, targets } => {
                vec![Some(super::ops::cross_entropy_backward(
                    g,
                    probs.get(),
                    targets,
                )?)]
            }
            Mse { diff } => {
                let n = diff.get().elem_count().max(1) as f32;
                let gd = diff.get().mul(g)?.mul_scalar(2.0 / n)?;
                let gt = if need(1) { Some(gd.neg()?) } else { None };
                vec![Some(gd), gt]
            }
            Reshape { in_shape } => vec![Some(g.reshape(in_shape)?)],
            Permute { perm } => {
                let mut inverse = vec![0; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inverse[p] = i;
                }
                vec![Some(g.permute(&inverse)?)]
            }
            Narrow {
                in_shape,
                dim,
                start,
            } => {
                let gi = Tensor::zeros(in_shape, g.device())?;
                gi.narrow(*dim, *start, g.dims()[*dim])?.copy_(g)?;
                vec![Some(gi)]
            }
            Expand { in_shape } => vec![Some(g.sum_to_shape(in_shape)?)],
            CopyInto { src_shape } => vec![None, Some(g.sum_to_shape(src_shape)?)],
            ToDevice { device } => vec![Some(g.to_device(device)?)],
            Zeroed => vec![None],
            StaleHistory { .. } => return Err(self.stale_error().unwrap_or(TensorError::NoGraph)),
        })
    }
}

fn opt(needed: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    if needed {
        f().map(Some)
    } else {
        Ok(None)
    }
}

/// Gradient of `a · b` with respect to `b`: `aᵀ · g`, summed over broadcast batch dims. When `b`
/// is a plain matrix, the batch dims of `a` and `g` are folded into rows first, so no
/// per-batch `[k, n]` partial products are materialised.
fn matmul_grad_rhs(a: &Tensor, g: &Tensor, b_shape: &[usize]) -> Result<Tensor> {
    if b_shape.len() == 2 && a.rank() > 2 {
        let k = a.dims()[a.rank() - 1];
        let n = g.dims()[g.rank() - 1];
        let rows = a.elem_count() / k.max(1);
        let a2 = a.reshape(&[rows, k])?;
        let g2 = g.reshape(&[rows, n])?;
        return a2.transpose(0, 1)?.matmul(&g2);
    }
    let at = a.transpose(a.rank() - 2, a.rank() - 1)?;
    at.matmul(g)?.sum_to_shape(b_shape)
}

pub(crate) enum Edge {
    Leaf(Tensor),
    Node(Arc<Node>),
}

/// One recorded op.
pub(crate) struct Node {
    name: &'static str,
    edges: Vec<Option<Edge>>,
    state: Mutex<Option<Backward>>,
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
fn history_of(t: &Tensor) -> Option<Arc<Node>> {
    let node = t.grad_fn();
    if !t.has_stale_history() {
        return node;
    }
    let storage = t.storage();
    Some(Arc::new(Node {
        name: "stale history",
        edges: Vec::new(),
        state: Mutex::new(Some(Backward::StaleHistory {
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
    make: impl FnOnce() -> Backward,
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

/// Records the in-place op `name` on `target` (`inputs` starts with it); when recorded, other
/// handles on the target's storage become stale (their history no longer matches the values).
pub(crate) fn record_inplace(
    target: &Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    make: impl FnOnce() -> Backward,
) {
    let edges = edges(inputs);
    if edges.is_some() {
        target.note_history_rewrite();
    }
    attach(target, name, edges, make)
}

/// Records `out = name(inputs)` if grad mode is on and an input requires grad. For in-place
/// ops, `out` is the target and `inputs` starts with it (its history before the op).
pub(crate) fn record(
    out: &Tensor,
    name: &'static str,
    inputs: &[&Tensor],
    make: impl FnOnce() -> Backward,
) {
    attach(out, name, edges(inputs), make)
}

fn key(node: &Arc<Node>) -> usize {
    Arc::as_ptr(node) as usize
}

/// Number of graph nodes reachable from `t` (for tests and diagnostics).
pub(crate) fn graph_node_count(t: &Tensor) -> usize {
    collect(t.grad_fn()).0.len()
}

/// Reachable nodes (in discovery order) and, per node, how many edges point at it.
fn collect(root: Option<Arc<Node>>) -> (Vec<Arc<Node>>, HashMap<usize, usize>) {
    let mut nodes = Vec::new();
    let mut deps: HashMap<usize, usize> = HashMap::new();
    let Some(root) = root else {
        return (nodes, deps);
    };
    deps.insert(key(&root), 0);
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        for edge in node.edges.iter().flatten() {
            if let Edge::Node(child) = edge {
                let k = key(child);
                match deps.get_mut(&k) {
                    Some(count) => *count += 1,
                    None => {
                        deps.insert(k, 1);
                        stack.push(Arc::clone(child));
                    }
                }
            }
        }
        nodes.push(node);
    }
    (nodes, deps)
}

/// Adds `g` into a leaf's `.grad`, in place when one exists (it is private to the leaf).
fn accumulate_leaf(leaf: &Tensor, g: Tensor) -> Result<()> {
    let mut slot = leaf.0.grad.lock().unwrap_or_else(|e| e.into_inner());
    match slot.as_ref() {
        Some(existing) => existing.add_(&g)?,
        None => {
            let mut g = g;
            // Keep the gradient private: one buffer may be the gradient of several inputs.
            if !g.is_exclusively_owned() {
                g = g.copy()?;
            }
            g.storage()
                .held_as_grad
                .store(true, std::sync::atomic::Ordering::Relaxed);
            *slot = Some(g.detach());
        }
    }
    Ok(())
}

/// Whether `leaf` is one of `inputs` (the same tensor, not merely the same storage).
fn is_input(leaf: &Tensor, inputs: Option<&[Tensor]>) -> bool {
    inputs.is_none_or(|inputs| inputs.iter().any(|t| Arc::ptr_eq(&t.0, &leaf.0)))
}

/// Keys of the nodes from which some path of edges reaches one of `inputs`.
fn nodes_reaching(nodes: &[Arc<Node>], inputs: &[Tensor]) -> HashSet<usize> {
    let mut parents: HashMap<usize, Vec<&Arc<Node>>> = HashMap::new();
    let mut reaching = HashSet::new();
    let mut stack = Vec::new();
    for node in nodes {
        for edge in node.edges.iter().flatten() {
            match edge {
                Edge::Node(child) => parents.entry(key(child)).or_default().push(node),
                Edge::Leaf(leaf) => {
                    if is_input(leaf, Some(inputs)) && reaching.insert(key(node)) {
                        stack.push(key(node));
                    }
                }
            }
        }
    }
    // Walk up from the nodes with an input leaf: everything above them reaches it too.
    while let Some(k) = stack.pop() {
        for parent in parents.get(&k).into_iter().flatten() {
            if reaching.insert(key(parent)) {
                stack.push(key(parent));
            }
        }
    }
    reaching
}

/// Runs backward from a single-element tensor, into every leaf that requires grad, or only
/// into `inputs` when given.
pub(crate) fn run_backward(root: &Tensor, inputs: Option<&[Tensor]>) -> Result<()> {
    if root.elem_count() != 1 {
        return Err(TensorError::BackwardOnNonScalar {
            shape: root.dims().to_vec(),
        });
    }
    if let Some(inputs) = inputs {
        if inputs.is_empty() {
            return Err(TensorError::BackwardForNothing);
        }
        if let Some(index) = inputs
            .iter()
            .position(|t| !t.is_leaf() || !t.requires_grad())
        {
            return Err(TensorError::BackwardForNotALeaf {
                index,
                shape: inputs[index].dims().to_vec(),
            });
        }
    }
    let _no_grad = NoGradGuard::new();
    let Some(root_node) = history_of(root) else {
        if root.requires_grad() {
            if !is_input(root, inputs) {
                return Ok(());
            }
            let seed = Tensor::ones(root.dims(), root.device())?;
            return accumulate_leaf(root, seed);
        }
        return Err(TensorError::NoGraph);
    };
    let seed = Tensor::ones(root.dims(), root.device())?;
    let (nodes, mut deps) = collect(Some(Arc::clone(&root_node)));
    let reaching = inputs.map(|inputs| nodes_reaching(&nodes, inputs));
    let edge_needed = |edge: &Option<Edge>| match edge {
        None => false,
        Some(Edge::Leaf(leaf)) => is_input(leaf, inputs),
        Some(Edge::Node(child)) => reaching.as_ref().is_none_or(|r| r.contains(&key(child))),
    };
    // Check every saved tensor before touching any gradient, so a failure leaves none half-done.
    for node in &nodes {
        let state = node.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(bw) = state.as_ref() else {
            return Err(TensorError::GraphFreed { op: node.name });
        };
        for saved in bw.saved() {
            saved.check(node.name)?;
        }
        if let Some(err) = bw.stale_error() {
            return Err(err);
        }
    }
    let mut grads: HashMap<usize, Tensor> = HashMap::new();
    grads.insert(key(&root_node), seed);
    let mut ready = vec![root_node];
    while let Some(node) = ready.pop() {
        let g = grads.remove(&key(&node));
        let bw = node
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or(TensorError::GraphFreed { op: node.name })?;
        let needs: Vec<bool> = node.edges.iter().map(edge_needed).collect();
        let input_grads = match &g {
            // Formulas with one input compute it unasked: skip nodes whose edges all lead
            // away from the inputs.
            Some(g) if needs.contains(&true) => bw.run(g, &needs)?,
            _ => Vec::new(),
        };
        // Saved tensors are released here, before the inputs' nodes run.
        drop(bw);
        drop(g);
        let mut input_grads = input_grads.into_iter();
        for (edge, &needed) in node.edges.iter().zip(&needs) {
            let ig = input_grads.next().flatten().filter(|_| needed);
            let Some(edge) = edge else { continue };
            match edge {
                Edge::Leaf(leaf) => {
                    if let Some(ig) = ig {
                        accumulate_leaf(leaf, ig)?;
                    }
                }
                Edge::Node(child) => {
                    let k = key(child);
                    if let Some(ig) = ig {
                        let sum = match grads.remove(&k) {
                            Some(existing) => (existing + &ig)?,
                            None => ig,
                        };
                        grads.insert(k, sum);
                    }
                    if let Some(count) = deps.get_mut(&k) {
                        *count -= 1;
                        if *count == 0 {
                            ready.push(Arc::clone(child));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
