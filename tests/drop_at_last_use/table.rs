//! The `DropAtLastUse` table: which types `#[inference]` and `#[batch_scope]` may free at their
//! last use, asked the way the generated code asks it (the autoref probe in `__private`), plus
//! compile-time bounds for the library types this crate cannot build a value of.
//!
//! Library parts run only with their feature: `cargo test --test drop_at_last_use --features
//! candle` (or `ndarray`, `burn`, `burn-021`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};
use vramguard::{Device, Tensor};

/// The generated code's question for the value `$value`, asked as the macros ask it: is its
/// type `DropAtLastUse`?
macro_rules! droppable {
    ($value:expr) => {{
        #[allow(unused_imports)] // Only one of the answers applies to any given type.
        use vramguard::__private::{
            CopyAtLastUse as _, DroppableAtLastUse as _, KeepToScopeEnd as _,
        };
        (&&&vramguard::__private::Probe(&$value)).__vg_droppable()
    }};
}

/// Fails to compile unless `T: DropAtLastUse`: for types of which no value is built here.
#[cfg(any(feature = "burn", feature = "burn-021"))]
fn assert_droppable<T: vramguard::DropAtLastUse + ?Sized>() {}

fn tensor() -> Tensor {
    Tensor::ones(&[2, 2], &Device::isolated_host()).expect("a 2×2 tensor")
}

#[test]
fn tensors_and_std_containers_of_them_are_dropped_at_last_use() {
    assert!(droppable!(tensor()));
    assert!(droppable!(vec![tensor(), tensor()]));
    assert!(droppable!(Box::new(tensor())));
    assert!(droppable!(Some(tensor())));
    assert!(droppable!(None::<Tensor>));
    assert!(droppable!([tensor(), tensor()]));
    assert!(droppable!((tensor(), tensor())));
    assert!(droppable!((tensor(), vec![tensor()], Some(tensor()))));
    assert!(droppable!(Ok::<Tensor, Tensor>(tensor())));
    assert!(droppable!(std::collections::VecDeque::from([tensor()])));
    assert!(droppable!(vec![vec![tensor()]]));
    // A boxed slice of tensors: `Box<[Tensor]>`.
    assert!(droppable!(vec![tensor()].into_boxed_slice()));
}

#[test]
fn plain_numeric_buffers_are_dropped_at_last_use() {
    assert!(droppable!(vec![1.0f32; 4]));
    assert!(droppable!(vec![1.0f32; 4].into_boxed_slice()));
    assert!(droppable!(vec![0u8; 4]));
    assert!(droppable!(vec![0i64; 4]));
    assert!(droppable!(Some(vec![0.0f64; 4])));
}

#[test]
fn values_with_observable_drops_or_nothing_to_free_keep_their_drop_point() {
    let t = tensor();
    let mutex = Mutex::new(0);
    let guard = mutex.lock().expect("an unpoisoned lock");
    assert!(!droppable!(guard));
    drop(guard);
    let cell = RefCell::new(0);
    assert!(!droppable!(cell.borrow_mut()));
    assert!(!droppable!(Rc::new(tensor())));
    assert!(!droppable!(Arc::new(tensor())));
    assert!(!droppable!(&t));
    assert!(!droppable!(&mut tensor()));
    assert!(!droppable!(1.0f32));
    assert!(!droppable!(7usize));
    assert!(!droppable!(String::from("text")));
    assert!(!droppable!(Ok::<Tensor, std::io::Error>(tensor())));
    assert!(!droppable!(Err::<Tensor, Box<dyn std::error::Error>>(
        "e".into()
    )));
    let (sender, receiver) = mpsc::channel::<Tensor>();
    assert!(!droppable!(sender));
    assert!(!droppable!(receiver));
    let file = std::fs::File::open(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the manifest");
    assert!(!droppable!(file));
    // A container is droppable only when what it holds is.
    assert!(!droppable!(vec![Rc::new(tensor())]));
    assert!(!droppable!((tensor(), Arc::new(tensor()))));
    assert!(!droppable!(Some(String::new())));
}

#[test]
fn the_answer_is_the_same_through_any_number_of_references_in_the_probe() {
    // The generated code probes the place itself (`Probe(&x)`), never a reference to it;
    // a local that *is* a reference is a reference type, and kept.
    let t = tensor();
    let r = &t;
    assert!(droppable!(*r));
    assert!(!droppable!(r));
}

#[cfg(feature = "candle")]
mod candle {
    use super::*;
    use candle_core::{DType, Device as CandleDevice, Tensor as CandleTensor};

    fn candle_tensor() -> CandleTensor {
        CandleTensor::zeros((2, 2), DType::F32, &CandleDevice::Cpu).expect("a 2×2 tensor")
    }

    #[test]
    fn candle_tensors_and_containers_of_them_are_dropped_at_last_use() {
        assert!(droppable!(candle_tensor()));
        assert!(droppable!(vec![candle_tensor()]));
        assert!(droppable!(Box::new(candle_tensor())));
        assert!(droppable!(Some(candle_tensor())));
        assert!(droppable!([candle_tensor(), candle_tensor()]));
        assert!(droppable!((candle_tensor(), candle_tensor())));
        assert!(droppable!(
            Ok::<CandleTensor, CandleTensor>(candle_tensor())
        ));
        // A candle result carries candle's error, which is not memory: kept as a whole.
        assert!(!droppable!(candle_tensor().sqr()));
    }

    #[test]
    fn shared_or_borrowed_candle_tensors_are_kept() {
        let t = candle_tensor();
        assert!(!droppable!(&t));
        assert!(!droppable!(Rc::new(candle_tensor())));
        assert!(!droppable!(Arc::new(candle_tensor())));
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_arrays {
    use super::*;
    use ndarray::{Array1, Array2, ArrayD, IxDyn};

    #[test]
    fn owned_arrays_are_dropped_at_last_use() {
        let a = Array2::<f32>::zeros((2, 2));
        assert!(droppable!(a));
        assert!(droppable!(Array1::<u8>::zeros(3)));
        assert!(droppable!(ArrayD::<f64>::zeros(IxDyn(&[2, 3, 4]))));
        assert!(droppable!(vec![Array2::<i32>::zeros((1, 1))]));
        // An array of droppable elements is dropped; of other elements, kept.
        assert!(droppable!(Array1::from_elem(2, vec![0.0f32; 3])));
        assert!(!droppable!(Array1::from_elem(2, Rc::new(0.0f32))));
        assert!(!droppable!(Array1::from_elem(2, String::new())));
    }

    #[test]
    fn views_and_shared_arrays_are_kept() {
        let mut a = Array2::<f32>::zeros((2, 2));
        assert!(!droppable!(a.view()));
        assert!(!droppable!(a.row(0)));
        assert!(!droppable!(a.view_mut()));
        let shared = a.clone().into_shared();
        assert!(!droppable!(shared));
        assert!(!droppable!(ndarray::CowArray::from(a.view())));
        assert!(!droppable!(ndarray::CowArray::from(a.clone())));
        assert!(!droppable!(&a));
    }
}

#[cfg(feature = "burn")]
mod burn {
    use super::*;
    use burn_tensor::{Bool, Int, Tensor as BurnTensor};

    // Building a burn tensor needs a backend feature, which this crate does not enable; empty
    // containers carry the type all the same (`Option<T>` is droppable exactly when `T` is).
    #[test]
    fn burn_tensors_of_every_kind_are_dropped_at_last_use() {
        assert_droppable::<BurnTensor<2>>();
        assert_droppable::<BurnTensor<4, Int>>();
        assert_droppable::<BurnTensor<1, Bool>>();
        assert!(droppable!(None::<BurnTensor<3>>));
        assert!(droppable!(Vec::<BurnTensor<2, Int>>::new()));
        assert!(droppable!(None::<(BurnTensor<2>, BurnTensor<2>)>));
        assert!(!droppable!(None::<Rc<BurnTensor<2>>>));
        assert!(!droppable!(None::<&BurnTensor<2>>));
    }
}

#[cfg(feature = "burn-021")]
mod burn_021 {
    use super::*;
    use burn_tensor_021::backend::Backend;
    use burn_tensor_021::{Bool, Int, Tensor as BurnTensor};

    // burn-tensor 0.21 brings no backend of its own, so there is no concrete tensor type to
    // probe: this function compiles only if the impl covers every backend and every kind.
    #[allow(dead_code)]
    fn every_backend<B: Backend>() {
        assert_droppable::<BurnTensor<B, 2>>();
        assert_droppable::<BurnTensor<B, 4, Int>>();
        assert_droppable::<BurnTensor<B, 1, Bool>>();
        assert_droppable::<Vec<BurnTensor<B, 2>>>();
    }
}

#[cfg(feature = "tch")]
mod tch_tensors {
    use super::*;
    use tch::{Device as TchDevice, Kind, Tensor as TchTensor};

    fn tch_tensor() -> TchTensor {
        TchTensor::zeros([2, 2], (Kind::Float, TchDevice::Cpu))
    }

    #[test]
    fn tch_tensors_and_containers_of_them_are_dropped_at_last_use() {
        assert!(droppable!(tch_tensor()));
        assert!(droppable!(vec![tch_tensor()]));
        assert!(droppable!(Some(tch_tensor())));
        assert!(droppable!((tch_tensor(), tch_tensor())));
        assert!(!droppable!(&tch_tensor()));
        assert!(!droppable!(Rc::new(tch_tensor())));
        // tch's fallible ops carry `TchError`, which is not memory.
        assert!(!droppable!(tch_tensor().f_sqrt()));
    }

    #[test]
    fn library_no_grad_turns_tch_recording_off_and_restores_it() {
        let x = tch_tensor().set_requires_grad(true);
        assert!((&x * 2.0).requires_grad());
        {
            let _guard = vramguard::__private::library_no_grad();
            assert!(!(&x * 2.0).requires_grad());
        }
        assert!((&x * 2.0).requires_grad());
    }
}
