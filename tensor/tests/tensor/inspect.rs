//! Looking at tensors: `Display` with values (elided in the middle for big tensors), nested
//! vectors, argmax/argmin along a dimension, and device errors converting into `TensorError`.

use vramguard_memory::Device;
use vramguard_tensor::tensor::{Tensor, TensorError};

fn t(data: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_slice(data, shape, &Device::Host).unwrap()
}

fn arange(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::arange(n, &Device::Host)
        .unwrap()
        .reshape(shape)
        .unwrap()
}

#[test]
fn small_tensors_print_every_value_aligned_with_a_shape_line() {
    let x = t(&[1.5, -2.0, 0.25, 4.0], &[2, 2]);
    assert_eq!(
        x.to_string(),
        "[[ 1.5000, -2.0000],\n [ 0.2500,  4.0000]]\nTensor[[2, 2], f32, Host]"
    );
    let y = t(&[1.5, -2.0, 0.75, 4.0], &[2, 2]);
    assert_eq!(
        format!("{y:.1}"),
        "[[ 1.5, -2.0],\n [ 0.8,  4.0]]\nTensor[[2, 2], f32, Host]"
    );
    assert_eq!(
        t(&[3.0], &[]).to_string(),
        "3.\nTensor[[], f32, Host]",
        "a scalar prints its value alone"
    );
}

#[test]
fn integral_values_print_as_integers_and_rank_3_blocks_are_separated_by_a_blank_line() {
    assert_eq!(
        arange(&[2, 2, 3]).to_string(),
        "[[[ 0.,  1.,  2.],\n  [ 3.,  4.,  5.]],\n\n [[ 6.,  7.,  8.],\n  [ 9., 10., 11.]]]\n\
         Tensor[[2, 2, 3], f32, Host]"
    );
}

#[test]
fn far_apart_magnitudes_print_in_scientific_notation() {
    let text = t(&[1e-6, 2.5, 3e5], &[3]).to_string();
    assert!(
        text.starts_with("[1.0000e-6,  2.5000e0,  3.0000e5]"),
        "{text}"
    );
    let text = t(&[f32::NAN, f32::NEG_INFINITY, 1.0], &[3]).to_string();
    assert!(text.starts_with("[ nan, -inf,   1.]"), "{text}");
}

#[test]
fn big_tensors_show_the_first_and_last_three_per_dimension() {
    let x = arange(&[100, 100]);
    let text = x.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "[[   0.,    1.,    2., ...,   97.,   98.,   99.],",
            " [ 100.,  101.,  102., ...,  197.,  198.,  199.],",
            " [ 200.,  201.,  202., ...,  297.,  298.,  299.],",
            " ...,",
            " [9700., 9701., 9702., ..., 9797., 9798., 9799.],",
            " [9800., 9801., 9802., ..., 9897., 9898., 9899.],",
            " [9900., 9901., 9902., ..., 9997., 9998., 9999.]]",
            "Tensor[[100, 100], f32, Host]",
        ]
    );
    // A thousand elements or fewer print whole, wrapped at 80 columns.
    let text = arange(&[1000]).to_string();
    assert!(!text.contains("..."));
    assert!(text.contains(" 999.]"));
    assert!(text.lines().all(|l| l.len() <= 80), "{text}");
}

#[test]
fn views_print_in_logical_order() {
    let x = arange(&[2, 3]).t().unwrap();
    assert_eq!(
        x.to_string(),
        "[[0., 3.],\n [1., 4.],\n [2., 5.]]\nTensor[[3, 2], f32, Host]"
    );
    let empty = Tensor::zeros(&[2, 0], &Device::Host).unwrap();
    assert_eq!(empty.to_string(), "[[],\n []]\nTensor[[2, 0], f32, Host]");
}

#[test]
fn the_shape_line_names_requires_grad_or_the_op_that_made_the_tensor() {
    let w = t(&[1.0, 2.0], &[2]).with_requires_grad().unwrap();
    assert!(w
        .to_string()
        .ends_with("Tensor[[2], f32, Host, requires_grad]"));
    let y = w.mul_scalar(2.0).unwrap();
    let text = y.to_string();
    assert!(
        text.starts_with("[2., 4.]\nTensor[[2], f32, Host, grad_fn="),
        "{text}"
    );
}

#[test]
fn to_vec2_and_to_vec3_nest_the_values_and_check_the_rank() {
    let x = arange(&[2, 3]);
    assert_eq!(
        x.to_vec2().unwrap(),
        vec![vec![0., 1., 2.], vec![3., 4., 5.]]
    );
    assert_eq!(
        x.t().unwrap().to_vec2().unwrap(),
        vec![vec![0., 3.], vec![1., 4.], vec![2., 5.]]
    );
    let y = arange(&[2, 2, 2]);
    assert_eq!(
        y.to_vec3().unwrap(),
        vec![
            vec![vec![0., 1.], vec![2., 3.]],
            vec![vec![4., 5.], vec![6., 7.]]
        ]
    );
    match x.to_vec3() {
        Err(TensorError::RankMismatch {
            op: "to_vec3",
            expected: 3,
            shape,
        }) => assert_eq!(shape, [2, 3]),
        other => panic!("expected RankMismatch, got {other:?}"),
    }
    let err = y.to_vec2().unwrap_err();
    assert_eq!(
        err.to_string(),
        "to_vec2: expected a tensor of rank 2, found shape [2, 2, 2] (rank 3); reshape or index it first"
    );
    let empty_rows = Tensor::zeros(&[3, 0], &Device::Host).unwrap();
    assert_eq!(empty_rows.to_vec2().unwrap(), vec![Vec::<f32>::new(); 3]);
    let no_rows = Tensor::zeros(&[2, 0, 4], &Device::Host).unwrap();
    assert_eq!(no_rows.to_vec3().unwrap(), vec![Vec::<Vec<f32>>::new(); 2]);
}

#[test]
fn argmax_and_argmin_along_a_dimension_mirror_sum_and_sum_keepdim() {
    let x = t(&[1., 9., 3., 7., 2., 8.], &[2, 3]);
    assert_eq!(x.argmax(1).unwrap().to_vec().unwrap(), [1., 2.]);
    assert_eq!(x.argmax(1).unwrap().dims(), x.sum(1).unwrap().dims());
    assert_eq!(x.argmax(0).unwrap().to_vec().unwrap(), [1., 0., 1.]);
    assert_eq!(x.argmin(1).unwrap().to_vec().unwrap(), [0., 1.]);
    assert_eq!(x.argmin(0).unwrap().to_vec().unwrap(), [0., 1., 0.]);
    let kept = x.argmax_keepdim(0).unwrap();
    assert_eq!(kept.dims(), &[1, 3]);
    assert_eq!(kept.dims(), x.sum_keepdim(0).unwrap().dims());
    assert_eq!(x.argmin_keepdim(1).unwrap().dims(), &[2, 1]);
    // Through a view's strides.
    assert_eq!(
        x.t().unwrap().argmax(0).unwrap().to_vec().unwrap(),
        [1., 2.]
    );
    // Middle dimension of a rank-3 tensor.
    let y = t(&[0., 5., 1., 1., 9., 0., 2., 2.], &[2, 2, 2]);
    assert_eq!(y.argmax(1).unwrap().to_vec().unwrap(), [1., 0., 0., 1.]);
    assert!(!x.argmax(1).unwrap().requires_grad());
}

#[test]
fn ties_take_the_first_index_and_nan_wins_as_in_pytorch() {
    let x = t(&[2., 5., 5., 1., 1.], &[5]);
    assert_eq!(x.argmax(0).unwrap().to_vec().unwrap(), [1.]);
    assert_eq!(x.argmin(0).unwrap().to_vec().unwrap(), [3.]);
    let n = t(&[2., f32::NAN, 7., f32::NAN], &[4]);
    assert_eq!(n.argmax(0).unwrap().to_vec().unwrap(), [1.]);
    assert_eq!(n.argmin(0).unwrap().to_vec().unwrap(), [1.]);
}

#[test]
fn argmax_errors_are_typed() {
    let x = arange(&[2, 3]);
    assert!(matches!(
        x.argmax(2),
        Err(TensorError::DimOutOfRange {
            op: "argmax",
            dim: 2,
            ..
        })
    ));
    let empty = Tensor::zeros(&[2, 0], &Device::Host).unwrap();
    assert!(matches!(
        empty.argmin(1),
        Err(TensorError::InvalidArgument { op: "argmin", .. })
    ));
}

#[test]
fn device_errors_convert_into_tensor_errors() {
    // No machine has 1000 GPUs: with a driver this is NoDevice, without one NoDriver; both
    // come through `?` in a function returning TensorError.
    fn on_gpu_1000() -> Result<Tensor, TensorError> {
        let device = Device::cuda(1000)?;
        Tensor::zeros(&[1], &device)
    }
    let err = on_gpu_1000().unwrap_err();
    assert!(matches!(err, TensorError::Device(_)), "{err:?}");
    let device_message = Device::cuda(1000).err().map(|e| e.to_string());
    assert_eq!(
        Some(err.to_string()),
        device_message,
        "the message is the device's"
    );
}
