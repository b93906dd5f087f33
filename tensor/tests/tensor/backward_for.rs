//! `Tensor::backward_for` (gradients for chosen leaves only) and the optimizers'
//! `backward_step`, in behaviour and exact bytes.

use vramguard_alloc::round_size;
use vramguard_memory::memory::{reset_peak_stats, stats};
use vramguard_memory::Device;
use vramguard_tensor::nn::{Adam, Linear, Module, Parameters, Sgd};
use vramguard_tensor::tensor::{Tensor, TensorError};

fn bytes(shape: &[usize]) -> u64 {
    round_size(shape.iter().product::<usize>() * 4) as u64
}

fn param_bytes(layer: &Linear) -> u64 {
    layer.parameters().iter().map(|p| bytes(p.dims())).sum()
}

const B: usize = 2;
const IN: usize = 256;
const H: usize = 128;

/// A generator-then-critic chain, the shape of a GAN's generator step.
struct Chain {
    generator: Linear,
    critic: Linear,
    x: Tensor,
}

impl Chain {
    fn new(device: &Device) -> Chain {
        Chain {
            generator: Linear::new(IN, H, true, 1, device).unwrap(),
            critic: Linear::new(H, 1, true, 2, device).unwrap(),
            x: Tensor::randn(&[B, IN], 0.0, 1.0, 3, device).unwrap(),
        }
    }

    fn loss(&self) -> Tensor {
        let h = self.generator.forward(&self.x).unwrap();
        self.critic.forward(&h).unwrap().sum_all().unwrap()
    }
}

fn grads(layer: &Linear) -> Vec<Option<Vec<f32>>> {
    layer
        .parameters()
        .iter()
        .map(|p| p.grad().map(|g| g.to_vec().unwrap()))
        .collect()
}

#[test]
fn only_the_given_leaves_get_gradients_equal_to_full_backward() {
    let (dev_all, dev_for) = (Device::isolated_host(), Device::isolated_host());
    let (all, only) = (Chain::new(&dev_all), Chain::new(&dev_for));

    let base = stats(&dev_all).allocated_bytes;
    assert_eq!(base, stats(&dev_for).allocated_bytes);
    reset_peak_stats(&dev_all);
    reset_peak_stats(&dev_for);

    all.loss().backward().unwrap();
    only.loss()
        .backward_for(&only.generator.parameters())
        .unwrap();

    // Bit-identical gradients for the generator; none computed for the critic.
    assert_eq!(grads(&all.generator), grads(&only.generator));
    assert!(grads(&only.critic).iter().all(Option::is_none));
    assert!(grads(&all.critic).iter().all(Option::is_some));

    // The graph is gone in both; what remains is exactly the gradients each stored.
    let (s_all, s_for) = (stats(&dev_all), stats(&dev_for));
    assert_eq!(
        s_all.allocated_bytes - base,
        param_bytes(&all.generator) + param_bytes(&all.critic)
    );
    assert_eq!(s_for.allocated_bytes - base, param_bytes(&only.generator));
    // Both peak while the generator's weight gradient ([H, IN], the largest buffer) is made;
    // at that point full backward also holds the critic's finished gradients.
    assert_eq!(
        s_all.peak_allocated_bytes - s_for.peak_allocated_bytes,
        param_bytes(&all.critic)
    );
}

#[test]
fn the_graph_is_consumed_and_other_gradients_are_left_alone() {
    let device = Device::isolated_host();
    let chain = Chain::new(&device);
    // An earlier gradient of the critic's survives a generator-only backward untouched.
    chain.loss().backward().unwrap();
    let critic_before = grads(&chain.critic);
    chain
        .generator
        .parameters()
        .iter()
        .for_each(Tensor::zero_grad);

    let loss = chain.loss();
    loss.backward_for(&chain.generator.parameters()).unwrap();
    assert_eq!(grads(&chain.critic), critic_before);
    // The part of the graph that led only to the critic was freed too.
    assert!(matches!(
        loss.backward(),
        Err(TensorError::GraphFreed { .. })
    ));
}

#[test]
fn bad_inputs_are_typed_errors_that_touch_nothing() {
    let device = Device::isolated_host();
    let chain = Chain::new(&device);
    let loss = chain.loss();

    assert!(matches!(
        loss.backward_for(&[]),
        Err(TensorError::BackwardForNothing)
    ));
    let h = chain.generator.forward(&chain.x).unwrap(); // computed: not a leaf
    let mut inputs = chain.generator.parameters();
    inputs.push(h);
    match loss.backward_for(&inputs) {
        Err(TensorError::BackwardForNotALeaf { index, shape }) => {
            assert_eq!((index, shape), (2, vec![B, H]));
        }
        other => panic!("expected BackwardForNotALeaf, got {other:?}"),
    }
    let constant = Tensor::ones(&[3], &device).unwrap(); // a leaf without requires_grad
    let err = loss.backward_for(&[constant]).unwrap_err();
    assert!(matches!(
        err,
        TensorError::BackwardForNotALeaf { index: 0, .. }
    ));
    assert!(err.to_string().contains("pass parameters"), "{err}");

    // Nothing ran: the graph is intact and no gradient was stored.
    assert!(grads(&chain.generator).iter().all(Option::is_none));
    loss.backward_for(&chain.generator.parameters()).unwrap();
    assert!(grads(&chain.generator).iter().all(Option::is_some));
}

#[test]
fn a_leaf_root_gets_its_seed_only_when_asked_for() {
    let device = Device::isolated_host();
    let w = Tensor::ones(&[1], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let other = Tensor::ones(&[1], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    w.backward_for(std::slice::from_ref(&other)).unwrap();
    assert!(w.grad().is_none() && other.grad().is_none());
    w.backward_for(std::slice::from_ref(&w)).unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![1.0]);
}

/// Weights of a chain after `steps` updates of the generator by `update`.
fn train_generator(update: impl Fn(&mut Adam, &Tensor), steps: usize) -> (Vec<f32>, u64) {
    let device = Device::isolated_host();
    let chain = Chain::new(&device);
    let mut opt = Adam::new(chain.generator.parameters(), 1e-2);
    for _ in 0..steps {
        update(&mut opt, &chain.loss());
    }
    let weights = chain.generator.parameters()[0].to_vec().unwrap();
    (weights, stats(&device).allocated_bytes)
}

#[test]
fn backward_step_updates_exactly_like_zero_grad_backward_step_and_frees_the_gradients() {
    let (classic, classic_bytes) = train_generator(
        |opt, loss| {
            opt.zero_grad();
            loss.backward().unwrap();
            opt.step().unwrap();
        },
        3,
    );
    let (consuming, consuming_bytes) =
        train_generator(|opt, loss| opt.backward_step(loss).unwrap(), 3);
    assert_eq!(classic, consuming);
    // The classic form still holds the generator's and the critic's gradients; the consuming
    // form holds none.
    let device = Device::isolated_host();
    let chain = Chain::new(&device);
    assert_eq!(
        classic_bytes - consuming_bytes,
        param_bytes(&chain.generator) + param_bytes(&chain.critic)
    );
}

#[test]
fn backward_step_adds_to_gradients_already_accumulated() {
    let run = |consuming: bool| {
        let device = Device::isolated_host();
        let chain = Chain::new(&device);
        let mut opt = Sgd::new(chain.generator.parameters(), 0.1);
        chain
            .loss()
            .backward_for(&chain.generator.parameters())
            .unwrap(); // micro-batch 1
        if consuming {
            opt.backward_step(&chain.loss()).unwrap(); // micro-batch 2, step, free
            assert!(grads(&chain.generator).iter().all(Option::is_none));
        } else {
            chain.loss().backward().unwrap();
            opt.step().unwrap();
        }
        chain.generator.parameters()[1].to_vec().unwrap()
    };
    assert_eq!(run(true), run(false));
}
