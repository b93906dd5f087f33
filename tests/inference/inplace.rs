//! In place at last use (issue #21): `#[inference]` runs a listed op on a local at its last use
//! in the local's buffer. The outputs are bit-identical to the plain function's, the peaks are
//! exact allocator statistics, and under grad mode (`#[batch_scope]` in a training loop) no
//! tensor autograd saved is ever overwritten.

use vramguard::{batch_scope, inference, memory, Device, Tensor, TensorError};

type Result<T> = std::result::Result<T, TensorError>;

const ROWS: usize = 64;
const COLS: usize = 256;
/// One `[ROWS, COLS]` buffer (a multiple of the allocator's rounding).
const BUFFER: u64 = (ROWS * COLS * 4) as u64;

/// Every op shape with a consuming form, each on the local that dies there.
macro_rules! every_op_shape {
    ($name:ident $(, #[$attr:meta])?) => {
        $(#[$attr])?
        fn $name(x: &Tensor, row: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
            let h = x.exp()?; // the input is borrowed: a new buffer
            let h = h.gelu()?; // unary
            let h = h.tanh()?;
            let h = h.broadcast_add(row)?; // broadcast right-hand side
            let h = h.mul(x)?; // same-shape right-hand side
            let h = h.add_scalar(0.5)?; // scalar
            let h = h.affine(0.25, 1.5)?;
            let h = h.log()?;
            let h = h.softmax(1)?; // along the last dimension
            let h = h.layer_norm(Some(w), Some(b), 1e-5)?;
            let h = h.sigmoid()?;
            Ok(h)
        }
    };
}

every_op_shape!(plain);
every_op_shape!(guarded_out_of_place, #[inference(inplace = false)]);
every_op_shape!(guarded, #[inference]);

struct Inputs {
    device: Device,
    x: Tensor,
    row: Tensor,
    w: Tensor,
    b: Tensor,
}

fn inputs() -> Result<Inputs> {
    let device = Device::isolated_host();
    Ok(Inputs {
        x: Tensor::randn(&[ROWS, COLS], 0.0, 1.0, 1, &device)?,
        row: Tensor::randn(&[COLS], 0.0, 1.0, 2, &device)?,
        w: Tensor::randn(&[COLS], 1.0, 0.1, 3, &device)?,
        b: Tensor::randn(&[COLS], 0.0, 0.1, 4, &device)?,
        device,
    })
}

type Forward = fn(&Tensor, &Tensor, &Tensor, &Tensor) -> Result<Tensor>;

/// Peak bytes above what was live before, and the output's bits.
fn run(inputs: &Inputs, f: Forward) -> Result<(u64, Vec<u32>)> {
    let Inputs {
        device,
        x,
        row,
        w,
        b,
        ..
    } = inputs;
    let before = memory::stats(device).allocated_bytes;
    memory::reset_peak_stats(device);
    let out = vramguard::no_grad(|| f(x, row, w, b))?;
    let peak = memory::stats(device).peak_allocated_bytes - before;
    let bits = out.to_vec()?.into_iter().map(f32::to_bits).collect();
    Ok((peak, bits))
}

#[test]
fn every_op_runs_in_the_dying_buffer_with_the_plain_bits() -> Result<()> {
    let inputs = inputs()?;
    let (peak_plain, plain_bits) = run(&inputs, plain)?;
    let (peak_out_of_place, out_of_place_bits) = run(&inputs, guarded_out_of_place)?;
    let (peak_in_place, in_place_bits) = run(&inputs, guarded)?;
    assert_eq!(out_of_place_bits, plain_bits);
    assert_eq!(in_place_bits, plain_bits);
    // Plain: the eleven results all live to the end of the function.
    assert_eq!(peak_plain, 11 * BUFFER);
    // Drops at last use: an op's input and output overlap.
    assert_eq!(peak_out_of_place, 2 * BUFFER);
    // In place: the one buffer `exp` allocated carries every later op.
    assert_eq!(peak_in_place, BUFFER);
    Ok(())
}

/// With `std::ops::Add` in scope, `h.add(t)` on two owned tensors is the operator's method; the
/// consuming form takes that right-hand side too (and an `Rhs`), with the same bits.
#[inference]
fn operator_methods(x: &Tensor, row: &Tensor) -> Result<Tensor> {
    use std::ops::Add;
    let h = x.exp()?;
    let t = x.tanh()?;
    let h = h.add(t)?;
    let h = h.sub(vramguard::Rhs::Tensor(row))?;
    let h = h.mul(vramguard::Rhs::Scalar(0.5))?;
    Ok(h)
}

#[test]
fn operator_methods_and_rhs_values_take_the_consuming_form() -> Result<()> {
    let inputs = inputs()?;
    let (x, row) = (&inputs.x, &inputs.row);
    let expected = x.exp()?.add(&x.tanh()?)?.sub(row)?.mul(0.5)?;
    let out = vramguard::no_grad(|| operator_methods(x, row))?;
    assert_eq!(out.to_vec()?, expected.to_vec()?);
    Ok(())
}

/// A local that another handle shares (a clone kept for later, a view) is computed out of
/// place, and the shared data is unchanged.
#[inference]
fn shared(x: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    let h = x.exp()?;
    let kept = h.clone();
    let view = h.narrow(0, 0, ROWS / 2)?;
    let h = h.gelu()?; // `kept` shares the storage: out of place
    let v = view.relu()?; // a view: out of place
    Ok((h, kept, v))
}

#[test]
fn a_shared_local_or_a_view_is_computed_out_of_place() -> Result<()> {
    let inputs = inputs()?;
    let (h, kept, v) = vramguard::no_grad(|| shared(&inputs.x))?;
    let exp = inputs.x.exp()?;
    assert_eq!(kept.to_vec()?, exp.to_vec()?);
    assert_eq!(h.to_vec()?, exp.gelu()?.to_vec()?);
    assert_eq!(v.to_vec()?, exp.narrow(0, 0, ROWS / 2)?.relu()?.to_vec()?);
    Ok(())
}

/// One SGD step of a two-layer model, written plainly: `tanh` saves its output, which the
/// next op (`exp`, at `t`'s last use) must not overwrite; the matmul's output, which nothing
/// saves, may take `tanh` in place.
macro_rules! training_loop {
    ($name:ident $(, #[$attr:meta])?) => {
        $(#[$attr])?
        fn $name(device: &Device, steps: usize) -> Result<(Vec<u32>, Vec<u32>)> {
            let w1 = Tensor::randn(&[8, 16], 0.0, 0.5, 11, device)?.with_requires_grad()?;
            let w2 = Tensor::randn(&[16, 1], 0.0, 0.5, 12, device)?.with_requires_grad()?;
            let mut losses = Vec::new();
            for step in 0..steps {
                let x = Tensor::randn(&[32, 8], 0.0, 1.0, 100 + step as u64, device)?;
                let h = x.matmul(&w1)?;
                let t = h.tanh()?;
                let e = t.exp()?;
                let s = e.softmax(1)?;
                let y = s.matmul(&w2)?;
                let loss = y.sum_all()?;
                losses.push(loss.to_scalar()?);
                loss.backward()?;
                vramguard::no_grad(|| -> Result<()> {
                    for w in [&w1, &w2] {
                        if let Some(g) = w.grad() {
                            w.sub_(&(g * 0.01)?)?;
                        }
                        w.zero_grad();
                    }
                    Ok(())
                })?;
            }
            let weights = [w1.to_vec()?, w2.to_vec()?].concat();
            let bits = |values: Vec<f32>| values.into_iter().map(f32::to_bits).collect();
            Ok((bits(losses), bits(weights)))
        }
    };
}

training_loop!(train_plain);
training_loop!(train_scoped, #[batch_scope]);

#[test]
fn under_grad_mode_nothing_autograd_saved_is_overwritten() -> Result<()> {
    let device = Device::isolated_host();
    assert!(vramguard::is_grad_enabled());
    // Without the runtime's checks, `exp` in `t`'s buffer would make backward fail with
    // `SavedTensorModified` (tanh saved its output); with them, the scoped loop trains exactly
    // as the plain one.
    assert_eq!(train_scoped(&device, 3)?, train_plain(&device, 3)?);
    Ok(())
}

#[test]
fn writing_a_saved_tensor_in_place_is_what_the_checks_prevent() -> Result<()> {
    // The error the attribute must never cause: `tanh`'s saved output modified in place.
    let device = Device::isolated_host();
    let w = Tensor::randn(&[8, 4], 0.0, 0.5, 11, &device)?.with_requires_grad()?;
    let x = Tensor::randn(&[2, 8], 0.0, 1.0, 12, &device)?;
    let t = x.matmul(&w)?.tanh()?;
    t.relu_()?;
    let err = t.sum_all()?.backward().unwrap_err();
    assert!(
        matches!(err, TensorError::SavedTensorModified { op: "tanh", .. }),
        "{err:?}"
    );
    Ok(())
}

#[cfg(feature = "ndarray")]
mod ndarray_arrays {
    use ndarray::{s, Array1, Array2};

    /// `mapv` at an owned array's last use maps in place when the element type stays. (The
    /// transform moves nothing into a function's last statement, hence the `let` after it.)
    #[vramguard::inference]
    fn scaled(a: Array2<f32>) -> (Array2<f32>, usize) {
        let b = a.mapv(|v| v * 2.0);
        let c = b.mapv(|v| v + 1.0);
        let n = c.len();
        (c, n)
    }

    /// Another element type: a new array, as `mapv` gives.
    #[vramguard::inference]
    fn positive(a: Array2<f32>) -> (Array2<bool>, usize) {
        let b = a.mapv(|v| v + 1.0);
        let c = b.mapv(|v| v > 1.5);
        let n = c.len();
        (c, n)
    }

    fn input() -> Array2<f32> {
        Array2::from_shape_fn((8, 16), |(i, j)| (i * 16 + j) as f32 / 64.0 - 1.0)
    }

    #[test]
    fn mapv_at_last_use_maps_in_place_with_the_same_values() {
        let a = input();
        let expected = a.mapv(|v| v * 2.0).mapv(|v| v + 1.0);
        let address = a.as_ptr();
        let (out, _) = scaled(a);
        assert_eq!(out, expected);
        assert_eq!(out.as_ptr(), address, "the buffer was not reused");

        let a = input();
        assert_eq!(positive(a.clone()).0, a.mapv(|v| v + 1.0).mapv(|v| v > 1.5));
    }

    /// Each `mapv` below compiles plain and must compile and compute the same annotated: a
    /// closure returning a borrow, one with a side effect (the order of its calls shows in the
    /// values), a float literal whose type only the fallback to `f64` decides, and elements
    /// that are not numbers.
    macro_rules! mapv_shapes {
        ($name:ident $(, #[$attr:meta])?) => {
            $(#[$attr])?
            fn $name(idx: Array1<usize>, a: Array2<f32>, z: Array1<f32>, words: Array1<String>, table: &[String])
                -> (Vec<String>, Array2<f32>, Vec<usize>, usize, Array1<String>)
            {
                let names = idx.mapv(|i| &table[i]);
                let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
                let mut calls = Vec::new();
                let b = a.mapv(|v| {
                    calls.push(calls.len());
                    v * 3.0 + calls.len() as f32
                });
                let c = z.mapv(|_| 0.1);
                let element_size = std::mem::size_of_val(&c[0]);
                let words = words.mapv(|w| w + "!");
                (names, b, calls, element_size, words)
            }
        };
    }

    mapv_shapes!(shapes_plain);
    mapv_shapes!(shapes_annotated, #[vramguard::inference]);

    fn shape_inputs(contiguous: bool) -> (Array1<usize>, Array2<f32>, Array1<f32>, Array1<String>) {
        let idx = Array1::from(vec![2, 0, 1, 1]);
        let a = input();
        // Every other column of an owned array: still owned, not contiguous.
        let a = if contiguous {
            a
        } else {
            a.slice_move(s![.., ..;2])
        };
        let words = Array1::from(vec!["a".to_string(), "b".to_string()]);
        (idx, a, Array1::zeros(3), words)
    }

    #[test]
    fn mapv_shapes_compute_as_written() {
        let table: Vec<String> = ["x", "y", "z"].iter().map(|s| s.to_string()).collect();
        for contiguous in [true, false] {
            let (idx, a, z, words) = shape_inputs(contiguous);
            let expected = shapes_plain(idx, a, z, words, &table);
            let (idx, a, z, words) = shape_inputs(contiguous);
            assert_eq!(a.as_slice_memory_order().is_some(), contiguous);
            let actual = shapes_annotated(idx, a, z, words, &table);
            assert_eq!(actual, expected, "contiguous: {contiguous}");
            assert_eq!(actual.1.strides(), expected.1.strides());
        }
        // `|_| 0.1` maps to `f64`, by the literal's fallback, as in the plain function.
        let (idx, a, z, words) = shape_inputs(true);
        assert_eq!(shapes_annotated(idx, a, z, words, &table).3, 8);
    }

    /// The in-place path: a contiguous array of numbers whose closure keeps the element type
    /// keeps its buffer; a non-contiguous one is mapped into a new array, as `mapv` does.
    #[test]
    fn mapv_maps_in_place_only_in_a_contiguous_array() {
        let a = input();
        let address = a.as_ptr();
        let (out, _) = scaled(a);
        assert_eq!(out.as_ptr(), address);

        let table: Vec<String> = Vec::new();
        let (_, a, z, _) = shape_inputs(false);
        let address = a.as_ptr();
        let b = shapes_annotated(Array1::from(vec![]), a, z, Array1::from(vec![]), &table).1;
        assert_ne!(b.as_ptr(), address);
    }
}

/// Every listed method on a type without consuming forms: each call at a local's last use gets
/// the fallback receiver (the value itself), so a name the macros list but the facade gave no
/// receiver would fail to compile here. The calls are logged; the log and the result must be
/// the plain function's.
mod every_listed_method_on_another_type {
    use std::cell::RefCell;

    thread_local! {
        static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// Not `DropAtLastUse`, not a tensor: methods named like the consuming forms.
    pub struct Plain(pub i64);

    macro_rules! methods {
        ($($name:ident($($arg:ident),*) => $value:expr;)*) => {
            impl Plain {$(
                #[allow(clippy::should_implement_trait)]
                pub fn $name(&self $(, $arg: i64)*) -> Plain {
                    LOG.with(|l| l.borrow_mut().push(stringify!($name).to_owned()));
                    let v = self.0;
                    $(let v = v + $arg;)*
                    Plain($value(v))
                }
            )*}
        };
    }

    methods! {
        relu() => |v: i64| v.max(0);
        gelu() => |v: i64| v + 1;
        tanh() => |v: i64| v - 1;
        sigmoid() => |v: i64| v * 2;
        exp() => |v: i64| v + 3;
        log() => |v: i64| v - 2;
        add(a) => |v: i64| v;
        sub(a) => |v: i64| v - 7;
        mul(a) => |v: i64| v * 3;
        div(a) => |v: i64| v / 2;
        broadcast_add(a) => |v: i64| v + 5;
        broadcast_sub(a) => |v: i64| v - 5;
        broadcast_mul(a) => |v: i64| v * 5;
        broadcast_div(a) => |v: i64| v / 5;
        add_scalar(a) => |v: i64| v + 11;
        mul_scalar(a) => |v: i64| v * 11;
        softmax(a) => |v: i64| v % 1000;
        affine(a, b) => |v: i64| v - 13;
        layer_norm(a, b, c) => |v: i64| v % 997;
    }

    impl Plain {
        pub fn mapv(&self, f: impl Fn(i64) -> i64) -> Plain {
            LOG.with(|l| l.borrow_mut().push("mapv".to_owned()));
            Plain(f(self.0))
        }
    }

    macro_rules! chain {
        ($name:ident $(, #[$attr:meta])?) => {
            $(#[$attr])?
            pub fn $name(x: Plain) -> i64 {
                let h = x.relu();
                let h = h.gelu();
                let h = h.tanh();
                let h = h.sigmoid();
                let h = h.exp();
                let h = h.log();
                let h = h.add(1);
                let h = h.sub(2);
                let h = h.mul(3);
                let h = h.div(4);
                let h = h.broadcast_add(5);
                let h = h.broadcast_sub(6);
                let h = h.broadcast_mul(7);
                let h = h.broadcast_div(8);
                let h = h.add_scalar(9);
                let h = h.mul_scalar(10);
                let h = h.softmax(11);
                let h = h.affine(12, 13);
                let h = h.layer_norm(14, 15, 16);
                let h = h.mapv(|v| v * 2);
                h.0
            }
        };
    }

    chain!(plain);
    chain!(annotated, #[vramguard::inference]);

    pub fn logged(f: fn(Plain) -> i64) -> (i64, Vec<String>) {
        LOG.with(|l| l.borrow_mut().clear());
        let value = f(Plain(17));
        (value, LOG.with(|l| std::mem::take(&mut *l.borrow_mut())))
    }
}

#[test]
fn every_listed_method_runs_as_written_on_a_type_without_consuming_forms() {
    use every_listed_method_on_another_type::{annotated, logged, plain};
    let (expected, plain_log) = logged(plain);
    let (actual, annotated_log) = logged(annotated);
    assert_eq!(actual, expected);
    assert_eq!(annotated_log, plain_log);
    assert_eq!(plain_log.len(), 20, "{plain_log:?}");
}
