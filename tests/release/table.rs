//! The `Release` table: which types `#[inference]` and `#[batch_scope]` may free at their last
//! use, asked the way the generated code asks it (the autoref probe in `__private`), plus
//! compile-time bounds for the library types this crate cannot build a value of.
//!
//! Library parts run only with their feature: `cargo test --test release --features
//! candle` (or `ndarray`, `burn`, `burn-021`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};
use vramguard::{Device, Tensor};

/// The generated code's question for the value `$value`, asked as the macros ask it: is its
/// type `Release`?
macro_rules! releasable {
    ($value:expr) => {{
        #[allow(unused_imports)] // Only one of the answers applies to any given type.
        use vramguard::__private::{
            CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
        };
        (&&&vramguard::__private::Probe(&$value)).__vg_releasable()
    }};
}

/// Fails to compile unless `T: Release`: for types of which no value is built here.
#[cfg(any(feature = "burn", feature = "burn-021"))]
fn assert_release<T: vramguard::Release + ?Sized>() {}

fn tensor() -> Tensor {
    Tensor::ones(&[2, 2], &Device::isolated_host()).expect("a 2×2 tensor")
}

#[test]
fn tensors_and_std_containers_of_them_are_released() {
    assert!(releasable!(tensor()));
    assert!(releasable!(vec![tensor(), tensor()]));
    assert!(releasable!(Box::new(tensor())));
    assert!(releasable!(Some(tensor())));
    assert!(releasable!(None::<Tensor>));
    assert!(releasable!([tensor(), tensor()]));
    assert!(releasable!((tensor(), tensor())));
    assert!(releasable!((tensor(), vec![tensor()], Some(tensor()))));
    assert!(releasable!(Ok::<Tensor, Tensor>(tensor())));
    assert!(releasable!(std::collections::VecDeque::from([tensor()])));
    assert!(releasable!(vec![vec![tensor()]]));
    // A boxed slice of tensors: `Box<[Tensor]>`.
    assert!(releasable!(vec![tensor()].into_boxed_slice()));
}

#[test]
fn plain_numeric_buffers_are_released() {
    assert!(releasable!(vec![1.0f32; 4]));
    assert!(releasable!(vec![1.0f32; 4].into_boxed_slice()));
    assert!(releasable!(vec![0u8; 4]));
    assert!(releasable!(vec![0i64; 4]));
    assert!(releasable!(Some(vec![0.0f64; 4])));
}

#[test]
fn values_with_observable_drops_or_nothing_to_free_keep_their_drop_point() {
    let t = tensor();
    let mutex = Mutex::new(0);
    let guard = mutex.lock().expect("an unpoisoned lock");
    assert!(!releasable!(guard));
    drop(guard);
    let cell = RefCell::new(0);
    assert!(!releasable!(cell.borrow_mut()));
    assert!(!releasable!(Rc::new(tensor())));
    assert!(!releasable!(Arc::new(tensor())));
    assert!(!releasable!(&t));
    assert!(!releasable!(&mut tensor()));
    assert!(!releasable!(1.0f32));
    assert!(!releasable!(7usize));
    assert!(!releasable!(String::from("text")));
    assert!(!releasable!(Ok::<Tensor, std::io::Error>(tensor())));
    assert!(!releasable!(Err::<Tensor, Box<dyn std::error::Error>>(
        "e".into()
    )));
    let (sender, receiver) = mpsc::channel::<Tensor>();
    assert!(!releasable!(sender));
    assert!(!releasable!(receiver));
    let file = std::fs::File::open(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("the manifest");
    assert!(!releasable!(file));
    // A container is releasable only when what it holds is.
    assert!(!releasable!(vec![Rc::new(tensor())]));
    assert!(!releasable!((tensor(), Arc::new(tensor()))));
    assert!(!releasable!(Some(String::new())));
}

#[test]
fn the_answer_is_the_same_through_any_number_of_references_in_the_probe() {
    // The generated code probes the place itself (`Probe(&x)`), never a reference to it;
    // a local that *is* a reference is a reference type, and kept.
    let t = tensor();
    let r = &t;
    assert!(releasable!(*r));
    assert!(!releasable!(r));
}

#[cfg(feature = "candle")]
mod candle {
    use super::*;
    use candle_core::{DType, Device as CandleDevice, Tensor as CandleTensor};

    fn candle_tensor() -> CandleTensor {
        CandleTensor::zeros((2, 2), DType::F32, &CandleDevice::Cpu).expect("a 2×2 tensor")
    }

    #[test]
    fn candle_tensors_and_containers_of_them_are_released() {
        assert!(releasable!(candle_tensor()));
        assert!(releasable!(vec![candle_tensor()]));
        assert!(releasable!(Box::new(candle_tensor())));
        assert!(releasable!(Some(candle_tensor())));
        assert!(releasable!([candle_tensor(), candle_tensor()]));
        assert!(releasable!((candle_tensor(), candle_tensor())));
        assert!(releasable!(Ok::<CandleTensor, CandleTensor>(
            candle_tensor()
        )));
        // A candle result carries candle's error, which is not memory: kept as a whole.
        assert!(!releasable!(candle_tensor().sqr()));
    }

    #[test]
    fn shared_or_borrowed_candle_tensors_are_kept() {
        let t = candle_tensor();
        assert!(!releasable!(&t));
        assert!(!releasable!(Rc::new(candle_tensor())));
        assert!(!releasable!(Arc::new(candle_tensor())));
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_arrays {
    use super::*;
    use ndarray::{Array1, Array2, ArrayD, IxDyn};

    #[test]
    fn owned_arrays_are_released() {
        let a = Array2::<f32>::zeros((2, 2));
        assert!(releasable!(a));
        assert!(releasable!(Array1::<u8>::zeros(3)));
        assert!(releasable!(ArrayD::<f64>::zeros(IxDyn(&[2, 3, 4]))));
        assert!(releasable!(vec![Array2::<i32>::zeros((1, 1))]));
        // An array of releasable elements is released; of other elements, kept.
        assert!(releasable!(Array1::from_elem(2, vec![0.0f32; 3])));
        assert!(!releasable!(Array1::from_elem(2, Rc::new(0.0f32))));
        assert!(!releasable!(Array1::from_elem(2, String::new())));
    }

    #[test]
    fn views_and_shared_arrays_are_kept() {
        let mut a = Array2::<f32>::zeros((2, 2));
        assert!(!releasable!(a.view()));
        assert!(!releasable!(a.row(0)));
        assert!(!releasable!(a.view_mut()));
        let shared = a.clone().into_shared();
        assert!(!releasable!(shared));
        assert!(!releasable!(ndarray::CowArray::from(a.view())));
        assert!(!releasable!(ndarray::CowArray::from(a.clone())));
        assert!(!releasable!(&a));
    }
}

#[cfg(feature = "burn")]
mod burn {
    use super::*;
    use burn_tensor::{Bool, Int, Tensor as BurnTensor};

    // Building a burn tensor needs a backend feature, which this crate does not enable; empty
    // containers carry the type all the same (`Option<T>` is releasable exactly when `T` is).
    #[test]
    fn burn_tensors_of_every_kind_are_released() {
        assert_release::<BurnTensor<2>>();
        assert_release::<BurnTensor<4, Int>>();
        assert_release::<BurnTensor<1, Bool>>();
        assert!(releasable!(None::<BurnTensor<3>>));
        assert!(releasable!(Vec::<BurnTensor<2, Int>>::new()));
        assert!(releasable!(None::<(BurnTensor<2>, BurnTensor<2>)>));
        assert!(!releasable!(None::<Rc<BurnTensor<2>>>));
        assert!(!releasable!(None::<&BurnTensor<2>>));
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
        assert_release::<BurnTensor<B, 2>>();
        assert_release::<BurnTensor<B, 4, Int>>();
        assert_release::<BurnTensor<B, 1, Bool>>();
        assert_release::<Vec<BurnTensor<B, 2>>>();
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
    fn tch_tensors_and_containers_of_them_are_released() {
        assert!(releasable!(tch_tensor()));
        assert!(releasable!(vec![tch_tensor()]));
        assert!(releasable!(Some(tch_tensor())));
        assert!(releasable!((tch_tensor(), tch_tensor())));
        assert!(!releasable!(&tch_tensor()));
        assert!(!releasable!(Rc::new(tch_tensor())));
        // tch's fallible ops carry `TchError`, which is not memory.
        assert!(!releasable!(tch_tensor().f_sqrt()));
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
