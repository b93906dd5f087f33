//! Reverse-mode autograd: the engine that walks the graph the ops recorded (see
//! `ops::record`) and the gradient formula of every op ([`grads`]).
//!
//! OpRecord runs under no-grad, visits each node once after every node that feeds it, and
//! frees each node's saved tensors as soon as the node has run, like PyTorch without
//! `retain_graph`.

mod grads;

use super::error::{Result, TensorError};
use super::ops::record::{history_of, Edge, Node};
use super::Tensor;
use crate::grad::NoGradGuard;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
            Some(g) if needs.contains(&true) => bw.gradients(g, &needs)?,
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

impl Tensor {
    /// Computes gradients of this single-element tensor with respect to every leaf that
    /// requires grad, accumulating into their [`Tensor::grad`]. Runs under no-grad and frees
    /// the graph's saved tensors as it goes.
    #[track_caller]
    pub fn backward(&self) -> Result<()> {
        let _origin = crate::alloc::enter_op("backward");
        run_backward(self, None)
    }

    /// Like [`Tensor::backward`], but accumulates gradients only into `inputs` (leaves that
    /// require grad, such as one optimizer's parameters), like PyTorch's
    /// `backward(inputs=...)`: gradients that flow only to other leaves are never computed,
    /// and other leaves' [`Tensor::grad`] are left as they were. The whole graph is consumed
    /// (its saved tensors freed) either way.
    ///
    /// In a GAN's generator step, `g_loss.backward_for(&generator_params)` does not fill the
    /// discriminator's gradients, which `backward` would (and keep alive until they are zeroed).
    #[track_caller]
    pub fn backward_for(&self, inputs: &[Tensor]) -> Result<()> {
        let _origin = crate::alloc::enter_op("backward_for");
        run_backward(self, Some(inputs))
    }

    /// Number of recorded ops this tensor's value depends on (0 when nothing was recorded).
    pub fn graph_node_count(&self) -> usize {
        graph_node_count(self)
    }
}
