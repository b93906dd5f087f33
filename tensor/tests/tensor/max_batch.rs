//! The largest-batch search with vramguard's tensors: a `TensorError` out of memory means "does
//! not fit", any other ends the search, and a boxed one is found through its source.

use vramguard_memory::memory::{MaxBatchError, MaxBatchSearch, MaybeOutOfMemory};
use vramguard_memory::Device;
use vramguard_tensor::{Tensor, TensorError};

const MIB: usize = 1 << 20;

#[test]
fn errors_other_than_out_of_memory_end_the_search() {
    let device = Device::host_with_capacity(256 * MIB);
    let err = MaxBatchSearch::new(256 * MIB as u64)
        .on_run(|_| {})
        .run(&device, |b| {
            if b > 2 {
                return Err(TensorError::InvalidArgument {
                    op: "model",
                    shape: vec![b],
                    message: "batches above 2 are refused".into(),
                });
            }
            Tensor::zeros(&[b, MIB], &device)
        })
        .unwrap_err();
    match err {
        MaxBatchError::Run { batch, source } => {
            assert!(batch > 2);
            assert!(!source.is_out_of_memory());
        }
        other => panic!("expected MaxBatchError::Run, got {other}"),
    }
}

#[test]
fn tensor_closures_and_boxed_errors_count_out_of_memory_as_not_fitting() {
    let device = Device::host_with_capacity(64 * MIB);
    let found = MaxBatchSearch::new(64 * MIB as u64)
        .on_run(|_| {})
        .run(&device, |b| -> Result<_, Box<dyn std::error::Error>> {
            let t = Tensor::zeros(&[b, MIB / 2], &device)?;
            Ok(t)
        })
        .expect("out of memory is not an error of the search");
    // 2 MiB per item in 64 MiB of 2 MiB pages.
    assert_eq!(found.batch, 32);
    assert!(found.run_count() <= 4, "{found}");
}
