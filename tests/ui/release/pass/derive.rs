//! `#[derive(vramguard::Release)]`: a struct of tensors, a tuple struct, an enum, a generic
//! struct releasable only when its parameter is (shown with the probe the attributes use), an
//! existing `where` clause, and `#[vramguard(crate = path)]` with the facade renamed.
#![deny(warnings)]

extern crate vramguard as vg;

use std::rc::Rc;

use vramguard::{Device, Release, Tensor};

/// The question `#[inference]` asks at a release point: is the value's type `Release`?
macro_rules! releasable {
    ($value:expr) => {{
        #[allow(unused_imports)]
        use vramguard::__private::*;
        (&&&Probe(&$value)).__vg_releasable()
    }};
}

#[derive(Release)]
struct Activations {
    hidden: Tensor,
    cache: Vec<Tensor>,
    mask: Option<Vec<f32>>,
    heads: [Tensor; 2],
    pair: (Tensor, Box<[f64]>),
}

#[derive(Release)]
struct Logits(Tensor, Vec<u8>);

#[derive(Release)]
enum Cached {
    Empty,
    One(Tensor),
    Many { items: Vec<Tensor>, scores: Vec<f64> },
}

#[derive(Release)]
struct Pair<T> {
    first: T,
    second: T,
}

#[derive(Release)]
struct Bounded<T: Clone>
where
    T: Default,
{
    value: Vec<T>,
}

#[derive(Release)]
struct Nested {
    inner: Pair<Logits>,
    result: Result<Tensor, Vec<f32>>,
}

#[derive(vg::Release)]
#[vramguard(crate = vg)]
struct Renamed {
    tensor: vg::Tensor,
    more: Vec<vg::Tensor>,
}

fn is_release<T: Release + ?Sized>() {}

fn main() {
    is_release::<Activations>();
    is_release::<Logits>();
    is_release::<Cached>();
    is_release::<Pair<Tensor>>();
    is_release::<Bounded<f32>>();
    is_release::<Nested>();
    is_release::<Renamed>();

    let dev = Device::host();
    let t = || Tensor::zeros(&[2], &dev).unwrap();
    let activations = Activations {
        hidden: t(),
        cache: vec![t()],
        mask: None,
        heads: [t(), t()],
        pair: (t(), vec![1.0].into_boxed_slice()),
    };
    assert!(releasable!(activations));
    assert!(releasable!(Logits(t(), vec![1])));
    assert!(releasable!(Cached::Empty));
    assert!(releasable!(Cached::Many {
        items: vec![t()],
        scores: vec![0.5],
    }));
    assert!(releasable!(Renamed {
        tensor: t(),
        more: Vec::new(),
    }));

    // Generic: releasable exactly when the parameter is.
    let tensors = Pair {
        first: t(),
        second: t(),
    };
    assert!(releasable!(tensors));
    let shared = Pair {
        first: Rc::new(1u8),
        second: Rc::new(2u8),
    };
    assert!(!releasable!(shared));
    // `Copy` fields are not `Release` (a released `Copy` value would be a copy).
    let numbers = Pair { first: 1u32, second: 2 };
    assert!(!releasable!(numbers));
    let buffers = Pair {
        first: vec![1.0f32],
        second: vec![2.0],
    };
    assert!(releasable!(buffers));
    assert!(releasable!(Bounded { value: vec![0u8] }));
    assert!(!releasable!(Bounded {
        value: vec![String::new()]
    }));
    let _ = (
        activations.hidden,
        tensors.first,
        shared.first,
        numbers.first,
        buffers.first,
    );
}
