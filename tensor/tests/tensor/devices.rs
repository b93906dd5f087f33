//! Tensors on two devices (two host allocators here; a host and a GPU in `tensor/tests/cuda/ops.rs`):
//! `to_device` copies through the target's allocator and carries gradients back, and every op
//! given operands on two devices is a typed error naming both.

use vramguard_memory::{memory, Device};
use vramguard_tensor::tensor::{Tensor, TensorError};

#[test]
fn to_device_copies_into_the_target_allocator_and_gradients_flow_back() {
    let (a, b) = (Device::isolated_host(), Device::isolated_host());
    let x = Tensor::arange(12, &a).unwrap().reshape(&[3, 4]).unwrap();
    let before = (
        memory::stats(&a).allocated_bytes,
        memory::stats(&b).allocated_bytes,
    );
    // A strided view: the copy is contiguous on the target.
    let moved = x.t().unwrap().to_device(&b).unwrap();
    assert_eq!(moved.device(), &b);
    assert!(moved.is_contiguous());
    assert_eq!(moved.to_vec().unwrap(), x.t().unwrap().to_vec().unwrap());
    // 12 f32s = 48 bytes, one 512-byte block on the target, nothing new on the source.
    assert_eq!(memory::stats(&b).allocated_bytes - before.1, 512);
    assert_eq!(memory::stats(&a).allocated_bytes, before.0);
    // Same device: no copy.
    assert!(x.to_device(&a).unwrap().shares_storage_with(&x));
    drop(moved);
    assert_eq!(memory::stats(&b).allocated_bytes, before.1);

    let leaf = x.copy().unwrap().with_requires_grad().unwrap();
    let loss = leaf
        .to_device(&b)
        .unwrap()
        .mul_scalar(3.0)
        .unwrap()
        .sum_all()
        .unwrap();
    loss.backward().unwrap();
    let g = leaf.grad().unwrap();
    assert_eq!(
        g.device(),
        &a,
        "the gradient comes back to the leaf's device"
    );
    assert_eq!(g.to_vec().unwrap(), vec![3.0; 12]);
}

#[test]
fn ops_on_two_devices_are_a_typed_error_naming_both() {
    let (a, b) = (Device::isolated_host(), Device::isolated_host());
    let x = Tensor::ones(&[2, 3], &a).unwrap();
    let y = Tensor::ones(&[2, 3], &b).unwrap();
    let w = Tensor::ones(&[3], &b).unwrap();
    let (name_a, name_b) = (format!("{a:?}"), format!("{b:?}"));
    let results: Vec<(&str, Result<Tensor, TensorError>)> = vec![
        ("add", x.add(&y)),
        ("mul", x.broadcast_mul(&y)),
        ("matmul", x.matmul(&y.t().unwrap())),
        ("layer_norm", x.layer_norm(Some(&w), None, 1e-5)),
        ("mse_loss", x.mse_loss(&y)),
        ("add_", x.add_(&y).map(|()| x.clone())),
        ("copy_", x.copy_(&y).map(|()| x.clone())),
    ];
    for (op, result) in results {
        match result {
            Err(TensorError::DeviceMismatch { lhs, rhs, .. }) => {
                assert_eq!(
                    (lhs.as_str(), rhs.as_str()),
                    (name_a.as_str(), name_b.as_str()),
                    "{op}"
                );
            }
            other => panic!("{op}: expected a device mismatch, got {other:?}"),
        }
    }
    // The message names both, and says what to do.
    let msg = x.add(&y).unwrap_err().to_string();
    assert!(
        msg.contains(&name_a) && msg.contains(&name_b) && msg.contains("move"),
        "{msg}"
    );
}
