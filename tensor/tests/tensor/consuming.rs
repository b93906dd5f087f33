//! The consuming forms `into_log`, `into_affine`, `into_softmax` and `into_layer_norm` (issue
//! #21): values bit-identical to the borrowing forms, in place exactly when nothing else can
//! see the buffer (exact bytes on an isolated allocator), out of place otherwise.

use vramguard_alloc::round_size;
use vramguard_memory::memory::{reset_peak_stats, stats};
use vramguard_memory::{no_grad, Device};
use vramguard_tensor::tensor::{Tensor, TensorError};

type Result<T> = std::result::Result<T, TensorError>;

const ROWS: usize = 6;
const COLS: usize = 50;

fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_vec()?.into_iter().map(f32::to_bits).collect())
}

fn input(device: &Device, seed: u64) -> Result<Tensor> {
    // Positive values, so that `log` is defined everywhere.
    Tensor::randn(&[ROWS, COLS], 0.0, 1.0, seed, device)?.exp()
}

/// The borrowing form and the consuming form of each op.
type Pair = (
    &'static str,
    fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    fn(Tensor, &Tensor, &Tensor) -> Result<Tensor>,
);

fn pairs() -> Vec<Pair> {
    vec![
        ("log", |x, _, _| x.log(), |x, _, _| x.into_log()),
        (
            "affine",
            |x, _, _| x.affine(0.37, -1.25),
            |x, _, _| x.into_affine(0.37, -1.25),
        ),
        (
            "softmax",
            |x, _, _| x.softmax(1),
            |x, _, _| x.into_softmax(1),
        ),
        (
            "layer_norm",
            |x, w, b| x.layer_norm(Some(w), Some(b), 1e-5),
            |x, w, b| x.into_layer_norm(Some(w), Some(b), 1e-5),
        ),
        (
            "layer_norm without parameters",
            |x, _, _| x.layer_norm(None, None, 1e-5),
            |x, _, _| x.into_layer_norm(None, None, 1e-5),
        ),
    ]
}

fn params(device: &Device) -> Result<(Tensor, Tensor)> {
    Ok((
        Tensor::randn(&[COLS], 1.0, 0.1, 7, device)?,
        Tensor::randn(&[COLS], 0.0, 0.1, 8, device)?,
    ))
}

#[test]
fn an_exclusively_owned_tensor_is_written_in_place_with_the_same_bits() -> Result<()> {
    let device = Device::isolated_host();
    let (w, b) = params(&device)?;
    for (name, borrowing, consuming) in pairs() {
        let x = input(&device, 1)?;
        let expected = bits(&borrowing(&x, &w, &b)?)?;
        let before = stats(&device).allocated_bytes;
        reset_peak_stats(&device);
        let y = consuming(x, &w, &b)?;
        assert_eq!(
            stats(&device).peak_allocated_bytes,
            before,
            "{name}: the consuming form allocated"
        );
        assert_eq!(bits(&y)?, expected, "{name}: values differ");
    }
    Ok(())
}

#[test]
fn a_shared_buffer_or_a_view_is_computed_out_of_place() -> Result<()> {
    let device = Device::isolated_host();
    let (w, b) = params(&device)?;
    let out_bytes = round_size(ROWS * COLS * 4) as u64;
    for (name, borrowing, consuming) in pairs() {
        // Another handle on the storage (a clone), and a view of it.
        let x = input(&device, 2)?;
        let expected = bits(&borrowing(&x, &w, &b)?)?;
        let original = bits(&x)?;
        for (what, dying) in [("a clone", x.clone()), ("a view", x.narrow(0, 0, ROWS)?)] {
            let before = stats(&device).allocated_bytes;
            reset_peak_stats(&device);
            let y = consuming(dying, &w, &b)?;
            assert_eq!(
                stats(&device).peak_allocated_bytes - before,
                out_bytes,
                "{name} on {what}: not exactly one new buffer"
            );
            assert_eq!(bits(&y)?, expected, "{name} on {what}: values differ");
            assert_eq!(
                bits(&x)?,
                original,
                "{name} on {what}: the shared data changed"
            );
        }
    }
    Ok(())
}

#[test]
fn softmax_along_another_dimension_is_out_of_place() -> Result<()> {
    let device = Device::isolated_host();
    let x = input(&device, 3)?;
    let expected = bits(&x.softmax(0)?)?;
    let before = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let y = x.into_softmax(0)?;
    // The input is freed only after the output is written: two buffers at the peak.
    assert_eq!(
        stats(&device).peak_allocated_bytes - before,
        round_size(ROWS * COLS * 4) as u64
    );
    assert_eq!(bits(&y)?, expected);
    Ok(())
}

#[test]
fn argument_errors_are_the_borrowing_forms_errors() -> Result<()> {
    let device = Device::isolated_host();
    let x = input(&device, 4)?;
    let wrong = Tensor::ones(&[COLS + 1], &device)?;
    let err = x
        .clone()
        .into_layer_norm(Some(&wrong), None, 1e-5)
        .unwrap_err();
    assert!(
        matches!(
            err,
            TensorError::ShapeMismatch {
                op: "layer_norm",
                ..
            }
        ),
        "{err:?}"
    );
    let err = x.into_softmax(2).unwrap_err();
    assert!(
        matches!(err, TensorError::DimOutOfRange { dim: 2, .. }),
        "{err:?}"
    );
    Ok(())
}

/// Under grad mode each consuming form records the same gradient as the borrowing form, and
/// never overwrites what a backward needs: `layer_norm` (whose backward reads its input)
/// computes out of place while recording, and a tensor another op saved is shared, so it is
/// never reused.
#[test]
fn under_grad_mode_the_gradients_are_the_borrowing_forms() -> Result<()> {
    let device = Device::isolated_host();
    let (w, b) = params(&device)?;
    for (name, borrowing, consuming) in pairs() {
        let grads = |use_consuming: bool| -> Result<Vec<u32>> {
            let leaf = input(&device, 5)?.with_requires_grad()?;
            // `tanh` saves its output: the consuming form must not write into it.
            let saved = leaf.tanh()?;
            let h = if use_consuming {
                consuming(saved, &w, &b)?
            } else {
                borrowing(&saved, &w, &b)?
            };
            let loss = h.mul(&h)?.sum_all()?;
            loss.backward()?;
            let grad = leaf.grad().ok_or(TensorError::NoGraph)?;
            bits(&grad)
        };
        assert_eq!(grads(true)?, grads(false)?, "{name}: gradients differ");
    }
    // Without a saved input (the affine map's input is the matmul's output, which nothing
    // saves), the consuming form reuses the buffer while recording.
    let x = Tensor::ones(&[ROWS, COLS], &device)?;
    let m = Tensor::ones(&[COLS, COLS], &device)?.with_requires_grad()?;
    let h = x.matmul(&m)?;
    let before = stats(&device).allocated_bytes;
    reset_peak_stats(&device);
    let h = h.into_affine(0.5, 1.0)?;
    assert_eq!(stats(&device).peak_allocated_bytes, before);
    assert!(h.requires_grad());
    Ok(())
}

#[test]
fn the_consuming_forms_compute_the_same_without_grad() -> Result<()> {
    // The attribute runs them under no-grad: the same bits there too.
    let device = Device::isolated_host();
    let (w, b) = params(&device)?;
    no_grad(|| {
        for (name, borrowing, consuming) in pairs() {
            let x = input(&device, 6)?.with_requires_grad()?.detach();
            let expected = bits(&borrowing(&x, &w, &b)?)?;
            assert_eq!(bits(&consuming(x, &w, &b)?)?, expected, "{name}");
        }
        Ok(())
    })
}
