//! Every differentiable op's gradient against central finite differences.

use vramguard_memory::{no_grad, Device};
use vramguard_tensor::tensor::{Result, Tensor};

/// Seeded inputs pushed at least 0.2 away from zero (keeps relu's kink and log's pole out of
/// the finite-difference stencil).
fn input(shape: &[usize], seed: u64, positive: bool, device: &Device) -> Tensor {
    let t = Tensor::randn(shape, 0.0, 1.0, seed, device).unwrap();
    let v: Vec<f32> = t
        .to_vec()
        .unwrap()
        .into_iter()
        .map(|x| {
            let x = if x >= 0.0 { x + 0.2 } else { x - 0.2 };
            if positive {
                x.abs()
            } else {
                x
            }
        })
        .collect();
    Tensor::from_slice(&v, shape, device).unwrap()
}

/// Checks d(sum(f(inputs) * w))/d(inputs) against central differences, in f64 accumulation.
/// The tolerance (2e-3 absolute + 2e-3 relative) is about 2x the worst finite-difference error
/// of these inputs (log and div near 0.2); at 1e-2 a gelu derivative with a wrong cubic
/// coefficient (off by 0.014) passed.
fn check(name: &str, shapes: &[&[usize]], positive: bool, f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    let device = Device::isolated_host();
    let inputs: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| input(s, 100 + i as u64, positive, &device))
        .collect();
    let leaves: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.copy().unwrap().with_requires_grad().unwrap())
        .collect();
    let out = f(&leaves).unwrap();
    let weights = Tensor::randn(out.dims(), 0.0, 1.0, 7, &device).unwrap();
    let loss = out.mul(&weights).unwrap().sum_all().unwrap();
    loss.backward().unwrap();
    let eval = |xs: &[Tensor]| -> f64 {
        no_grad(|| {
            let o = f(xs).unwrap();
            let o = o.to_vec().unwrap();
            let w = weights.to_vec().unwrap();
            o.iter().zip(&w).map(|(a, b)| *a as f64 * *b as f64).sum()
        })
    };
    let eps = 1e-2f32;
    for (i, x) in inputs.iter().enumerate() {
        let analytic = leaves[i]
            .grad()
            .unwrap_or_else(|| panic!("{name}: input {i} got no gradient"))
            .to_vec()
            .unwrap();
        assert_eq!(analytic.len(), x.elem_count(), "{name}: gradient shape");
        let base = x.to_vec().unwrap();
        for j in 0..base.len() {
            let at = |delta: f32| {
                let mut v = base.clone();
                v[j] += delta;
                let mut xs = inputs.clone();
                xs[i] = Tensor::from_slice(&v, x.dims(), &device).unwrap();
                eval(&xs)
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps as f64);
            let a = analytic[j] as f64;
            assert!(
                (a - numeric).abs() <= 2e-3 + 2e-3 * numeric.abs(),
                "{name}: d/d input{i}[{j}]: autograd {a}, finite differences {numeric}"
            );
        }
    }
}

#[test]
fn arithmetic_with_broadcasting() {
    check("add", &[&[2, 3], &[3]], false, |x| x[0].add(&x[1]));
    check("sub", &[&[2, 1, 3], &[4, 1]], false, |x| x[0].sub(&x[1]));
    check("mul", &[&[2, 3], &[2, 1]], false, |x| x[0].mul(&x[1]));
    check("div", &[&[2, 3], &[3]], true, |x| x[0].div(&x[1]));
    check("operators", &[&[2, 3], &[2, 3]], true, |x| {
        let y = (&x[0] * &x[1])?;
        let y = (y + &x[0])?; // consuming, reuses y's buffer
        let y = (y - 0.5)?;
        let y = (y * 2.0)?;
        let y = (&y / &x[1])?;
        -y
    });
    check("scalar", &[&[4]], false, |x| {
        x[0].add_scalar(1.5)?
            .mul_scalar(-2.0)?
            .affine(0.5, 1.0)?
            .neg()
    });
    check("rsub", &[&[3]], false, |x| 1.0 - &x[0]);
}

#[test]
fn matmul_variants() {
    check("matmul 2d", &[&[3, 4], &[4, 2]], false, |x| {
        x[0].matmul(&x[1])
    });
    check("matmul batched", &[&[2, 3, 4], &[2, 4, 2]], false, |x| {
        x[0].matmul(&x[1])
    });
    check("matmul broadcast rhs", &[&[2, 3, 4], &[4, 5]], false, |x| {
        x[0].matmul(&x[1])
    });
    check("matmul broadcast lhs", &[&[3, 4], &[2, 4, 2]], false, |x| {
        x[0].matmul(&x[1])
    });
    check("matmul transposed views", &[&[4, 3], &[2, 4]], false, |x| {
        x[0].t()?.matmul(&x[1].t()?)
    });
}

#[test]
fn activations() {
    check("relu", &[&[2, 5]], false, |x| x[0].relu());
    check("gelu", &[&[2, 5]], false, |x| x[0].gelu());
    check("tanh", &[&[2, 5]], false, |x| x[0].tanh());
    check("sigmoid", &[&[2, 5]], false, |x| x[0].sigmoid());
    check("exp", &[&[2, 5]], false, |x| x[0].exp());
    check("log", &[&[2, 5]], true, |x| x[0].log());
    check("consuming activations", &[&[2, 5]], false, |x| {
        x[0].mul_scalar(0.5)?
            .into_relu()?
            .into_tanh()?
            .into_sigmoid()?
            .into_gelu()?
            .into_exp()
    });
}

#[test]
fn softmax_family_and_norm() {
    check("softmax last", &[&[2, 4]], false, |x| x[0].softmax(1));
    check("softmax dim0", &[&[3, 2]], false, |x| x[0].softmax(0));
    check("log_softmax", &[&[2, 4]], false, |x| x[0].log_softmax(1));
    check("log_softmax on view", &[&[4, 2]], false, |x| {
        x[0].t()?.log_softmax(1)
    });
    check("layer_norm", &[&[3, 5], &[5], &[5]], false, |x| {
        x[0].layer_norm(Some(&x[1]), Some(&x[2]), 1e-5)
    });
    check("layer_norm plain", &[&[2, 4]], false, |x| {
        x[0].layer_norm(None, None, 1e-5)
    });
}

#[test]
fn reductions_and_losses() {
    check("sum dims", &[&[2, 3, 4]], false, |x| {
        x[0].sum_dims(&[0, 2], false)
    });
    check("sum keepdim", &[&[2, 3]], false, |x| x[0].sum_keepdim(1));
    check("mean", &[&[2, 3]], false, |x| x[0].mean(0));
    check("mean_all", &[&[2, 3]], false, |x| x[0].mean_all());
    check("sum_all", &[&[2, 3]], false, |x| x[0].sum_all());
    check("cross_entropy", &[&[3, 4]], false, |x| {
        x[0].cross_entropy(&[1, 0, 3])
    });
    check("mse", &[&[2, 3], &[2, 3]], false, |x| x[0].mse_loss(&x[1]));
}

#[test]
fn embedding_and_views() {
    check("embedding", &[&[5, 3]], false, |x| {
        x[0].embedding(&[4, 0, 4, 2], &[2, 2])
    });
    check("reshape", &[&[2, 6]], false, |x| {
        x[0].reshape(&[3, 4])?.tanh()
    });
    check("reshape of transposed", &[&[2, 3]], false, |x| {
        x[0].t()?.reshape(&[6])?.tanh()
    });
    check("permute", &[&[2, 3, 4]], false, |x| {
        x[0].permute(&[2, 0, 1])?.tanh()
    });
    check("narrow", &[&[4, 3]], false, |x| {
        x[0].narrow(0, 1, 2)?.tanh()
    });
    check("unsqueeze/squeeze", &[&[3]], false, |x| {
        x[0].unsqueeze(0)?.unsqueeze(2)?.squeeze(0)?.tanh()
    });
    check("broadcast_as", &[&[3, 1]], false, |x| {
        x[0].broadcast_as(&[2, 3, 4])?.tanh()
    });
    check("contiguous/copy", &[&[2, 3]], false, |x| {
        x[0].t()?.contiguous()?.copy()?.tanh()
    });
}

#[test]
fn inplace_ops_on_activations_record_gradients() {
    check("add_ tensor", &[&[2, 3], &[3]], false, |x| {
        let h = x[0].mul_scalar(1.0)?;
        h.add_(&x[1])?;
        h.tanh()
    });
    check("sub_/mul_/div_ scalar", &[&[2, 3]], false, |x| {
        let h = x[0].mul_scalar(1.0)?;
        h.sub_(0.3)?;
        h.mul_(2.0)?;
        h.div_(4.0)?;
        h.tanh()
    });
    check("mul_/div_ by constant tensor", &[&[2, 3]], false, |x| {
        let c = Tensor::from_slice(&[1.5, -2.0, 0.5], &[3], x[0].device())?;
        let h = x[0].mul_scalar(1.0)?;
        h.mul_(&c)?;
        h.div_(&c.add_scalar(3.0)?)?;
        h.exp()
    });
    check("relu_", &[&[2, 4]], false, |x| {
        let h = x[0].mul_scalar(1.0)?;
        h.relu_()?;
        Ok(h)
    });
    check("copy_", &[&[2, 3], &[3]], false, |x| {
        let h = x[0].mul_scalar(1.0)?;
        h.copy_(&x[1])?;
        h.mul(&x[0])
    });
}

#[test]
fn gradients_accumulate_and_zero_grad_clears() {
    let device = Device::isolated_host();
    let w = Tensor::from_slice(&[1.0, 2.0], &[2], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    for _ in 0..3 {
        w.mul_scalar(3.0)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
    }
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![9.0, 9.0]);
    w.zero_grad();
    assert!(w.grad().is_none());
    // x + x: both edges of one node reach the same leaf.
    (&w + &w).unwrap().sum_all().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![2.0, 2.0]);

    // zero_ on an activation: the overwritten value gets no gradient.
    let x = Tensor::from_slice(&[1.0, -2.0], &[2], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    let h = x.mul_scalar(5.0).unwrap();
    h.zero_().unwrap();
    let out = (&h + &x).unwrap().mul_scalar(3.0).unwrap();
    out.sum_all().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![3.0, 3.0]);
}

#[test]
fn recorded_inplace_on_a_base_makes_its_older_views_fail_backward() {
    use vramguard_tensor::tensor::TensorError;
    let device = Device::isolated_host();
    let x = Tensor::from_slice(&[1.0, 2.0], &[2], &device)
        .unwrap()
        .with_requires_grad()
        .unwrap();
    // The view is taken before y *= 3, used after: its value is 6x but its history says 2x,
    // so backward must refuse rather than report d/dx = 2.
    let y = x.mul_scalar(2.0).unwrap();
    let v = y.reshape(&[2, 1]).unwrap();
    y.mul_(3.0).unwrap();
    let err = v.sum_all().unwrap().backward().unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::SavedTensorModified {
                op: "reshape",
                by: "mul_",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(x.grad().is_none());

    // A view used before the in-place op, and the target itself after it, stay correct.
    let y = x.mul_scalar(2.0).unwrap();
    let before = y.narrow(0, 0, 2).unwrap().mul_scalar(5.0).unwrap();
    y.mul_(3.0).unwrap();
    let fresh_view = y.narrow(0, 1, 1).unwrap();
    let loss = (&before.sum_all().unwrap() + &fresh_view.sum_all().unwrap()).unwrap();
    loss.backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![10.0, 16.0]);
}
