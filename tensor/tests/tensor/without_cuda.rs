//! A build without the `cuda` feature (`cargo test -p vramguard-tensor --no-default-features`):
//! `Device::cuda` still exists and returns a typed error that says how to turn the backend on,
//! and host tensors work as in every build.
#![cfg(not(feature = "cuda"))]

use vramguard_memory::device::DeviceError;
use vramguard_memory::Device;
use vramguard_tensor::{Tensor, TensorError};

#[test]
fn opening_a_gpu_names_the_feature_to_enable() {
    for ordinal in [0, 3] {
        let err = Device::cuda(ordinal).unwrap_err();
        assert!(
            matches!(err, DeviceError::CudaFeatureDisabled { ordinal: o } if o == ordinal),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains(&format!("device {ordinal}")), "{message}");
        assert!(
            message.contains(r#"vramguard = { version = "0.1", features = ["cuda"] }"#),
            "the Cargo.toml line: {message}"
        );
    }
    let with_config = Device::cuda_with_config(1, Default::default()).unwrap_err();
    assert!(
        matches!(with_config, DeviceError::CudaFeatureDisabled { ordinal: 1 }),
        "{with_config:?}"
    );
}

#[test]
fn the_error_reaches_tensor_code_through_question_mark() -> Result<(), TensorError> {
    fn on_gpu() -> Result<Tensor, TensorError> {
        let device = Device::cuda(0)?;
        Tensor::zeros(&[1], &device)
    }
    assert!(matches!(
        on_gpu(),
        Err(TensorError::Device(DeviceError::CudaFeatureDisabled {
            ordinal: 0
        }))
    ));
    // The host backend is all there is, and it computes.
    let device = Device::isolated_host();
    let ones = Tensor::ones(&[2, 3], &device)?;
    let x = ones.add(&ones)?;
    assert!(!device.is_cuda());
    assert_eq!(x.to_vec()?, vec![2.0; 6]);
    Ok(())
}
