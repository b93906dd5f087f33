//! Values, views, errors and autograd rules of tensor ops; nn building blocks.

use vramguard_memory::{no_grad, Device, NoGradGuard};
use vramguard_tensor::nn::{
    Adam, Dropout, Embedding, EncoderLayer, LayerNorm, Linear, Mlp, Module, MultiHeadSelfAttention,
    Parameters, Sgd,
};
use vramguard_tensor::tensor::{Tensor, TensorError};

fn t(data: &[f32], shape: &[usize], device: &Device) -> Tensor {
    Tensor::from_slice(data, shape, device).unwrap()
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}

#[test]
fn tensors_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tensor>();
}

#[test]
fn creation_and_copy_back() {
    let d = Device::isolated_host();
    assert_eq!(
        Tensor::zeros(&[2, 2], &d).unwrap().to_vec().unwrap(),
        [0.0; 4]
    );
    assert_eq!(Tensor::ones(&[3], &d).unwrap().to_vec().unwrap(), [1.0; 3]);
    assert_eq!(
        Tensor::full(&[2], 2.5, &d).unwrap().to_vec().unwrap(),
        [2.5; 2]
    );
    assert_eq!(
        Tensor::arange(3, &d).unwrap().to_vec().unwrap(),
        [0.0, 1.0, 2.0]
    );
    let a = Tensor::randn(&[100], 0.0, 1.0, 5, &d)
        .unwrap()
        .to_vec()
        .unwrap();
    let b = Tensor::randn(&[100], 0.0, 1.0, 5, &d)
        .unwrap()
        .to_vec()
        .unwrap();
    let c = Tensor::randn(&[100], 0.0, 1.0, 6, &d)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    let u = Tensor::rand(&[1000], 2.0, 3.0, 1, &d)
        .unwrap()
        .to_vec()
        .unwrap();
    assert!(u.iter().all(|&x| (2.0..3.0).contains(&x)));
    let err = Tensor::from_slice(&[1.0, 2.0], &[3], &d).unwrap_err();
    assert!(matches!(
        err,
        TensorError::DataLength {
            len: 2,
            expected: 3,
            ..
        }
    ));
    // Every byte comes from the device's allocator.
    let s = vramguard_memory::memory::stats(&d);
    assert_eq!(s.allocated_bytes, 0);
    let x = Tensor::zeros(&[1000], &d).unwrap();
    assert_eq!(
        vramguard_memory::memory::stats(&d).allocated_bytes,
        vramguard_alloc::round_size(4000) as u64
    );
    assert_eq!(x.storage().size_in_bytes(), 4096);
}

#[test]
fn views_share_storage_and_contiguous_copies_only_when_needed() {
    let d = Device::isolated_host();
    let a = t(&[0., 1., 2., 3., 4., 5.], &[2, 3], &d);
    let at = a.t().unwrap();
    assert_eq!(at.dims(), &[3, 2]);
    assert_eq!(at.dims2().unwrap(), (3, 2));
    assert!(matches!(
        at.dims3(),
        Err(TensorError::RankMismatch {
            op: "dims3",
            expected: 3,
            ..
        })
    ));
    assert_eq!(a.unsqueeze(0).unwrap().dims3().unwrap(), (1, 2, 3));
    assert!(at.shares_storage_with(&a));
    assert!(!at.is_contiguous());
    assert_eq!(at.to_vec().unwrap(), [0., 3., 1., 4., 2., 5.]);
    let before = vramguard_memory::memory::stats(&d).allocated_bytes;
    let same = a.contiguous().unwrap();
    let r = a.reshape(&[3, 2]).unwrap();
    let n = a.narrow(1, 1, 2).unwrap();
    let p = a.unsqueeze(0).unwrap().permute(&[2, 0, 1]).unwrap();
    assert_eq!(vramguard_memory::memory::stats(&d).allocated_bytes, before);
    assert!(same.shares_storage_with(&a) && r.shares_storage_with(&a));
    assert_eq!(n.to_vec().unwrap(), [1., 2., 4., 5.]);
    assert_eq!(p.dims(), &[3, 1, 2]);
    assert_eq!(p.to_vec().unwrap(), [0., 3., 1., 4., 2., 5.]);
    let c = at.contiguous().unwrap();
    assert!(!c.shares_storage_with(&a));
    assert_eq!(c.to_vec().unwrap(), at.to_vec().unwrap());
    // Reshaping a non-contiguous view copies.
    assert_eq!(
        at.reshape(&[6]).unwrap().to_vec().unwrap(),
        [0., 3., 1., 4., 2., 5.]
    );
    // In-place through a view is visible through the base (PyTorch semantics).
    n.mul_(10.0).unwrap();
    assert_eq!(a.to_vec().unwrap(), [0., 10., 20., 3., 40., 50.]);
    let b = a.broadcast_as(&[2, 2, 3]).unwrap();
    assert_eq!(b.strides()[0], 0);
    assert!(matches!(
        b.add_(1.0),
        Err(TensorError::InvalidArgument { .. })
    ));
}

#[test]
fn arithmetic_matmul_and_reductions() {
    let d = Device::isolated_host();
    let a = t(&[1., 2., 3., 4., 5., 6.], &[2, 3], &d);
    let row = t(&[10., 20., 30.], &[3], &d);
    let col = t(&[1., 2.], &[2, 1], &d);
    close(
        &(&a + &row).unwrap().to_vec().unwrap(),
        &[11., 22., 33., 14., 25., 36.],
    );
    close(
        &(&a * &col).unwrap().to_vec().unwrap(),
        &[1., 2., 3., 8., 10., 12.],
    );
    close(
        &(&a - 1.0).unwrap().to_vec().unwrap(),
        &[0., 1., 2., 3., 4., 5.],
    );
    close(
        &(&a / 2.0).unwrap().to_vec().unwrap(),
        &[0.5, 1., 1.5, 2., 2.5, 3.],
    );
    close(
        &a.div(&row).unwrap().to_vec().unwrap(),
        &[0.1, 0.1, 0.1, 0.4, 0.25, 0.2],
    );
    // [2,3] x [3,2]
    let b = t(&[1., 0., 0., 1., 1., 1.], &[3, 2], &d);
    close(
        &a.matmul(&b).unwrap().to_vec().unwrap(),
        &[4., 5., 10., 11.],
    );
    // Transposed operands read in place.
    close(
        &a.matmul(&a.t().unwrap()).unwrap().to_vec().unwrap(),
        &[14., 32., 32., 77.],
    );
    // Batched with broadcast: [2,2,3] x [3,2].
    let stacked = t(
        &[1., 2., 3., 4., 5., 6., 1., 1., 1., 0., 0., 0.],
        &[2, 2, 3],
        &d,
    );
    close(
        &stacked.matmul(&b).unwrap().to_vec().unwrap(),
        &[4., 5., 10., 11., 2., 2., 0., 0.],
    );
    close(&a.sum(0).unwrap().to_vec().unwrap(), &[5., 7., 9.]);
    close(&a.sum_keepdim(1).unwrap().to_vec().unwrap(), &[6., 15.]);
    assert_eq!(a.sum_keepdim(1).unwrap().dims(), &[2, 1]);
    close(&a.mean(1).unwrap().to_vec().unwrap(), &[2., 5.]);
    assert_eq!(a.sum_all().unwrap().to_scalar().unwrap(), 21.0);
    assert_eq!(a.mean_all().unwrap().dims(), &[] as &[usize]);
    close(
        &a.t().unwrap().sum(1).unwrap().to_vec().unwrap(),
        &[5., 7., 9.],
    );
}

#[test]
fn activations_softmax_norm_embedding_losses() {
    let d = Device::isolated_host();
    let x = t(&[-1., 0., 2.], &[3], &d);
    close(&x.relu().unwrap().to_vec().unwrap(), &[0., 0., 2.]);
    close(
        &x.sigmoid().unwrap().to_vec().unwrap(),
        &[0.268_941_43, 0.5, 0.880_797_1],
    );
    close(
        &x.tanh().unwrap().to_vec().unwrap(),
        &[-0.761_594_2, 0., 0.964_027_6],
    );
    close(
        &x.gelu().unwrap().to_vec().unwrap(),
        &[-0.158_808, 0., 1.954_597_7],
    );
    close(
        &x.exp().unwrap().log().unwrap().to_vec().unwrap(),
        &[-1., 0., 2.],
    );
    let logits = t(&[1., 2., 3., 1., 1., 1.], &[2, 3], &d);
    let p = logits.softmax(1).unwrap().to_vec().unwrap();
    close(&p[..3], &[0.090_030_57, 0.244_728_48, 0.665_240_94]);
    close(&p[3..], &[1. / 3.; 3]);
    let lp = logits.log_softmax(1).unwrap().to_vec().unwrap();
    close(&lp, &p.iter().map(|v| v.ln()).collect::<Vec<_>>());
    let ce = logits.cross_entropy(&[2, 0]).unwrap().to_scalar().unwrap();
    assert!((ce - (-(0.665_240_94f32.ln()) + 3f32.ln()) / 2.0).abs() < 1e-5);
    let ln = logits
        .layer_norm(None, None, 0.0)
        .unwrap()
        .to_vec()
        .unwrap();
    close(&ln[..3], &[-1.224_744_9, 0., 1.224_744_9]);
    let table = t(&[0., 0., 1., 1., 2., 2.], &[3, 2], &d);
    let e = table.embedding(&[2, 0], &[2]).unwrap();
    assert_eq!(e.dims(), &[2, 2]);
    assert_eq!(e.to_vec().unwrap(), [2., 2., 0., 0.]);
    let mse = x.mse_loss(&Tensor::zeros(&[3], &d).unwrap()).unwrap();
    assert!((mse.to_scalar().unwrap() - 5.0 / 3.0).abs() < 1e-6);
}

#[test]
fn shape_errors_are_typed_and_name_both_shapes() {
    let d = Device::isolated_host();
    let a = Tensor::zeros(&[2, 3], &d).unwrap();
    let b = Tensor::zeros(&[4, 5], &d).unwrap();
    let err = (&a + &b).unwrap_err();
    assert!(matches!(err, TensorError::ShapeMismatch { op: "add", .. }));
    assert!(err.to_string().contains("[2, 3]") && err.to_string().contains("[4, 5]"));
    let err = a.matmul(&b).unwrap_err();
    assert!(
        err.to_string().contains("matmul: shapes [2, 3] and [4, 5]"),
        "{err}"
    );
    assert!(matches!(
        a.reshape(&[7]),
        Err(TensorError::ShapeMismatch { .. })
    ));
    assert!(matches!(
        a.softmax(2),
        Err(TensorError::DimOutOfRange { .. })
    ));
    assert!(matches!(
        a.narrow(1, 2, 2),
        Err(TensorError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        a.permute(&[0, 0]),
        Err(TensorError::InvalidArgument { .. })
    ));
    assert!(matches!(
        a.cross_entropy(&[0, 3]),
        Err(TensorError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        a.embedding(&[9], &[1]),
        Err(TensorError::IndexOutOfRange { .. })
    ));
    assert!(matches!(
        a.add_(&b),
        Err(TensorError::ShapeMismatch { op: "add_", .. })
    ));
    let other = Device::isolated_host();
    let c = Tensor::zeros(&[2, 3], &other).unwrap();
    assert!(matches!(&a + &c, Err(TensorError::DeviceMismatch { .. })));
}

#[test]
fn grad_mode_and_autograd_rules() {
    let d = Device::isolated_host();
    let w = Tensor::ones(&[3], &d)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let x = Tensor::ones(&[3], &d).unwrap();
    // Nothing recorded under no_grad, nor when no input requires grad.
    let y = no_grad(|| w.mul_scalar(2.0).unwrap());
    assert!(!y.requires_grad() && y.graph_node_count() == 0);
    let z = x.exp().unwrap();
    assert!(!z.requires_grad() && z.graph_node_count() == 0);
    assert!(matches!(
        z.sum_all().unwrap().backward(),
        Err(TensorError::NoGraph)
    ));
    // Backward on a non-scalar is an error.
    let v = w.mul_scalar(2.0).unwrap();
    assert!(matches!(
        v.backward(),
        Err(TensorError::BackwardOnNonScalar { .. })
    ));
    // In-place on a leaf that requires grad: error with grad on, fine under no_grad.
    let err = w.add_(1.0).unwrap_err();
    assert!(matches!(err, TensorError::InplaceOnLeaf { op: "add_" }));
    {
        let _g = NoGradGuard::new();
        w.add_(1.0).unwrap();
    }
    assert_eq!(w.to_vec().unwrap(), [2.0; 3]);
    // A second backward through a freed graph is an error.
    let loss = w.tanh().unwrap().sum_all().unwrap();
    loss.backward().unwrap();
    assert!(matches!(
        loss.backward(),
        Err(TensorError::GraphFreed { op: "sum" })
    ));
    // detach cuts the history but shares the data.
    let h = w.mul_scalar(3.0).unwrap();
    let hd = h.detach();
    assert!(h.requires_grad() && !hd.requires_grad() && hd.shares_storage_with(&h));
    // A non-leaf cannot change requires_grad.
    assert!(h.set_requires_grad(false).is_err());
    // backward on a leaf itself.
    let s = Tensor::scalar(2.0, &d)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    s.backward().unwrap();
    assert_eq!(s.grad().unwrap().to_scalar().unwrap(), 1.0);
    // In-place through a view of a tensor that requires grad is refused while recording.
    let n = h.narrow(0, 0, 1).unwrap();
    assert!(matches!(
        n.relu_(),
        Err(TensorError::InplaceNotDifferentiable { .. })
    ));
    // mul_ whose right operand needs a gradient is refused (it would overwrite what it needs).
    let m = x.mul_scalar(1.0).unwrap();
    assert!(matches!(
        m.mul_(&w),
        Err(TensorError::InplaceNotDifferentiable { .. })
    ));
    // A deep chain runs without recursion.
    let mut deep = w.clone();
    for _ in 0..20_000 {
        deep = (deep + 0.0).unwrap();
    }
    w.zero_grad();
    deep.sum_all().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), [1.0; 3]);
}

#[test]
fn nn_layers_shapes_parameters_and_modes() {
    let d = Device::isolated_host();
    let lin = Linear::new(4, 3, true, 1, &d).unwrap();
    assert_eq!(lin.num_parameters(), 15);
    let x = Tensor::randn(&[2, 5, 4], 0.0, 1.0, 2, &d).unwrap();
    assert_eq!(lin.forward(&x).unwrap().dims(), &[2, 5, 3]);
    // Linear matches x Wᵀ + b computed by hand.
    let y = no_grad(|| lin.forward(&x).unwrap());
    let manual = no_grad(|| {
        x.matmul(&lin.weight.t().unwrap().contiguous().unwrap())
            .unwrap()
            .broadcast_add(lin.bias.as_ref().unwrap())
            .unwrap()
    });
    close(&y.to_vec().unwrap(), &manual.to_vec().unwrap());
    let ln = LayerNorm::new(4, 1e-5, &d).unwrap();
    assert_eq!(ln.forward(&x).unwrap().dims(), &[2, 5, 4]);
    let emb = Embedding::new(10, 4, 3, &d).unwrap();
    assert_eq!(
        emb.forward(&[1, 2, 3, 9], &[2, 2]).unwrap().dims(),
        &[2, 2, 4]
    );
    let attn = MultiHeadSelfAttention::new(4, 2, 4, &d).unwrap();
    assert_eq!(attn.forward(&x).unwrap().dims(), &[2, 5, 4]);
    assert_eq!(attn.parameters().len(), 8);
    assert!(MultiHeadSelfAttention::new(5, 2, 0, &d).is_err());
    let layer = EncoderLayer::new(4, 2, 8, 5, &d).unwrap();
    let out = layer.forward(&x).unwrap();
    assert_eq!(out.dims(), &[2, 5, 4]);
    out.sum_all().unwrap().backward().unwrap();
    assert!(layer.parameters().iter().all(|p| p.grad().is_some()));

    let drop = Dropout::new(0.5, 9).unwrap();
    let ones = Tensor::ones(&[1000], &d).unwrap();
    let train = drop.forward(&ones).unwrap().to_vec().unwrap();
    assert!(train.iter().all(|&v| v == 0.0 || v == 2.0));
    let zeros = train.iter().filter(|&&v| v == 0.0).count();
    assert!((400..600).contains(&zeros), "{zeros}");
    let again = Dropout::new(0.5, 9)
        .unwrap()
        .forward(&ones)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(train, again, "masks are reproducible from the seed");
    drop.set_training(false);
    let eval = drop.forward(&ones).unwrap();
    assert!(eval.shares_storage_with(&ones), "identity in eval mode");
    assert!(Dropout::new(1.0, 0).is_err());
}

fn fit(mut step: impl FnMut() -> f32) -> (f32, f32) {
    let first = step();
    let mut last = first;
    for _ in 0..60 {
        last = step();
    }
    (first, last)
}

#[test]
fn optimizers_reduce_the_loss() {
    let d = Device::isolated_host();
    let x = Tensor::randn(&[64, 8], 0.0, 1.0, 1, &d).unwrap();
    let target = Tensor::randn(&[64, 2], 0.0, 1.0, 2, &d).unwrap();
    for (name, adam) in [("sgd", false), ("adam", true)] {
        let mlp = Mlp::new(8, 16, 2, vramguard_tensor::nn::Activation::Tanh, 3, &d).unwrap();
        let params = mlp.parameters();
        let before: Vec<Vec<f32>> = params.iter().map(|p| p.to_vec().unwrap()).collect();
        let mut sgd = Sgd::with_momentum(params.clone(), 0.05, 0.9);
        let mut adam_opt = Adam::new(params.clone(), 0.01);
        let (first, last) = fit(|| {
            mlp.zero_grad();
            let loss = mlp.forward(&x).unwrap().mse_loss(&target).unwrap();
            loss.backward().unwrap();
            if adam {
                adam_opt.step().unwrap();
            } else {
                sgd.step().unwrap();
            }
            loss.to_scalar().unwrap()
        });
        assert!(last < 0.8 * first, "{name}: {first} -> {last}");
        // Updated in place: same storage, new values, bumped versions.
        for (p, b) in params.iter().zip(&before) {
            assert_ne!(&p.to_vec().unwrap(), b);
            assert!(p.storage().version() > 0);
        }
    }
}

#[test]
fn clones_shared_across_threads_stay_consistent() {
    let d = Device::isolated_host();
    let a = Tensor::zeros(&[256], &d).unwrap();
    let writer = {
        let a = a.clone();
        std::thread::spawn(move || {
            let _g = NoGradGuard::new();
            for _ in 0..500 {
                a.add_(1.0).unwrap();
            }
        })
    };
    for _ in 0..200 {
        // Each read sees one consistent version: all elements equal.
        let v = (&a * 1.0).unwrap().to_vec().unwrap();
        assert!(v.iter().all(|&x| x == v[0]), "torn read");
    }
    writer.join().unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![500.0; 256]);
    assert_eq!(a.storage().version(), 500);
    // One tensor passed as several operands of one op (a single lock).
    let w = Tensor::ones(&[4], &d).unwrap();
    let x = Tensor::randn(&[2, 4], 0.0, 1.0, 1, &d).unwrap();
    assert_eq!(
        x.layer_norm(Some(&w), Some(&w), 1e-5).unwrap().dims(),
        &[2, 4]
    );
    assert_eq!(x.matmul(&x.t().unwrap()).unwrap().dims(), &[2, 2]);
    x.add_(&x).unwrap();
}

#[test]
fn shapes_whose_size_overflows_are_typed_errors() {
    let device = Device::isolated_host();
    let huge = [1usize << 62, 8];
    let invalid = |r: Result<Tensor, TensorError>| {
        assert!(
            matches!(r, Err(TensorError::InvalidArgument { .. })),
            "{r:?}"
        )
    };
    invalid(Tensor::zeros(&huge, &device));
    invalid(Tensor::from_slice(&[], &huge, &device));
    // 2^63 · 2 · 0 wraps to 0 = the element count of an empty tensor.
    let empty = Tensor::zeros(&[0], &device).unwrap();
    invalid(empty.reshape(&[1 << 63, 2, 0]));
    let one = Tensor::ones(&[1, 1], &device).unwrap();
    invalid(one.broadcast_as(&[1 << 40, 1 << 40]));
    let table = Tensor::ones(&[4, 2], &device).unwrap();
    invalid(table.embedding(&[], &[1 << 63, 2, 0]));
}

#[test]
fn reducing_a_dimension_listed_twice_is_an_error() {
    let device = Device::isolated_host();
    let x = t(&[1.0, 2.0, 3.0], &[3], &device);
    // Was silently mean / 3 (the dimension's size counted twice): 0.667 instead of 2.
    for r in [x.mean_dims(&[0, 0], false), x.sum_dims(&[0, 0], true)] {
        assert!(
            matches!(
                r,
                Err(TensorError::InvalidArgument {
                    op: "mean" | "sum",
                    ..
                })
            ),
            "{r:?}"
        );
    }
}

#[test]
fn attention_with_its_public_heads_field_set_to_zero_is_an_error() {
    let device = Device::isolated_host();
    let mut attn = MultiHeadSelfAttention::new(4, 2, 4, &device).unwrap();
    let x = Tensor::ones(&[1, 3, 4], &device).unwrap();
    for heads in [0, 3] {
        attn.heads = heads;
        let r = attn.forward(&x);
        assert!(
            matches!(
                r,
                Err(TensorError::InvalidArgument {
                    op: "attention",
                    ..
                })
            ),
            "{heads} heads: {r:?}"
        );
    }
}

#[test]
fn layer_norm_and_cross_entropy_over_an_empty_last_dimension_are_errors() {
    let device = Device::isolated_host();
    let x = Tensor::ones(&[3, 0], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let r = x.layer_norm(None, None, 1e-5);
    assert!(
        matches!(
            r,
            Err(TensorError::InvalidArgument {
                op: "layer_norm",
                ..
            })
        ),
        "{r:?}"
    );
    // Three rows without classes used to be "0 rows" and a loss of 0 for no targets.
    let r = x.cross_entropy(&[]);
    assert!(
        matches!(
            r,
            Err(TensorError::InvalidArgument {
                op: "cross_entropy",
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn writing_a_tensor_inside_its_own_with_host_slice_is_an_error_not_a_hang() {
    let device = Device::isolated_host();
    let x = t(&[1.0, 2.0], &[2], &device);
    let view = x.narrow(0, 1, 1).unwrap();
    let r = x
        .with_host_slice(|data| {
            assert_eq!(data, &[1.0, 2.0]);
            view.add_(1.0)
        })
        .unwrap();
    assert!(
        matches!(r, Err(TensorError::InvalidArgument { op: "add_", .. })),
        "{r:?}"
    );
    // Once the read has ended, the write goes through.
    view.add_(1.0).unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![1.0, 3.0]);
}
