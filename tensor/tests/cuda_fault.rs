//! A kernel that faults leaves a sticky error on the context; the next allocation that needs
//! the driver must fail with that error by name (`CUDA_ERROR_ILLEGAL_ADDRESS`), not as a full
//! device. A binary of its own: the fault makes the context unusable for the whole process.
//! Without a GPU the test prints `skipped: <reason>` and passes.

#[path = "cuda/gpu.rs"]
mod gpu;

use gpu::{context, own_device, Kernels};
use vramguard_alloc::{AllocatorConfig, OomCause};

const MIB: usize = 1 << 20;

#[test]
fn cuda_a_faulting_kernels_error_is_named_in_the_next_allocations_error() {
    const TEST: &str = "cuda_a_faulting_kernels_error_is_named_in_the_next_allocations_error";
    let config = AllocatorConfig::default().with_expandable_segments(false);
    let Some(device) = own_device(TEST, config) else {
        return;
    };
    let ctx = context(&device);
    let kernels = Kernels::load(&ctx);
    let stream = ctx.default_stream();
    // Address 8: never mapped in a CUDA context.
    kernels.fault(&stream, 8);
    let waited = stream.synchronize();
    println!("{TEST}: synchronizing after the fault: {waited:?}");
    assert!(
        waited.is_err(),
        "the faulting kernel should report an error"
    );

    // A request no cached block serves: the allocator must ask the driver, which refuses.
    let e = device.allocate(64 * MIB).unwrap_err();
    println!("{TEST}: {e}");
    assert_eq!(e.cause, OomCause::BackendFailed, "{e}");
    let failure = e
        .context
        .backend_error
        .as_ref()
        .expect("the driver's failure");
    assert_eq!(failure.error, "CUDA_ERROR_ILLEGAL_ADDRESS", "{failure}");
    let text = e.to_string();
    assert!(text.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{text}");
    assert!(!text.contains("device is full"), "{text}");
}
