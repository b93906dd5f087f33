//! `#[derive(vramguard::DropAtLastUse)]`: a struct of tensors, a tuple struct, an enum, a generic
//! struct droppable only when its parameter is (shown with the probe the attributes use), an
//! existing `where` clause, and `#[vramguard(crate = path)]` with the facade renamed.
#![deny(warnings)]

extern crate vramguard as vg;

use std::rc::Rc;

use vramguard::{Device, DropAtLastUse, Tensor};

/// The question `#[inference]` asks at a drop point: is the value's type `DropAtLastUse`?
macro_rules! droppable {
    ($value:expr) => {{
        #[allow(unused_imports)]
        use vramguard::__private::*;
        (&&&Probe(&$value)).__vg_droppable()
    }};
}

#[derive(DropAtLastUse)]
struct Activations {
    hidden: Tensor,
    cache: Vec<Tensor>,
    mask: Option<Vec<f32>>,
    heads: [Tensor; 2],
    pair: (Tensor, Box<[f64]>),
}

#[derive(DropAtLastUse)]
struct Logits(Tensor, Vec<u8>);

#[derive(DropAtLastUse)]
enum Cached {
    Empty,
    One(Tensor),
    Many { items: Vec<Tensor>, scores: Vec<f64> },
}

#[derive(DropAtLastUse)]
struct Pair<T> {
    first: T,
    second: T,
}

#[derive(DropAtLastUse)]
struct Bounded<T: Clone>
where
    T: Default,
{
    value: Vec<T>,
}

#[derive(DropAtLastUse)]
struct Nested {
    inner: Pair<Logits>,
    result: Result<Tensor, Vec<f32>>,
}

#[derive(vg::DropAtLastUse)]
#[vramguard(crate = vg)]
struct Renamed {
    tensor: vg::Tensor,
    more: Vec<vg::Tensor>,
}

fn is_droppable<T: DropAtLastUse + ?Sized>() {}

fn main() {
    is_droppable::<Activations>();
    is_droppable::<Logits>();
    is_droppable::<Cached>();
    is_droppable::<Pair<Tensor>>();
    is_droppable::<Bounded<f32>>();
    is_droppable::<Nested>();
    is_droppable::<Renamed>();

    let dev = Device::host();
    let t = || Tensor::zeros(&[2], &dev).unwrap();
    let activations = Activations {
        hidden: t(),
        cache: vec![t()],
        mask: None,
        heads: [t(), t()],
        pair: (t(), vec![1.0].into_boxed_slice()),
    };
    assert!(droppable!(activations));
    assert!(droppable!(Logits(t(), vec![1])));
    assert!(droppable!(Cached::Empty));
    assert!(droppable!(Cached::Many {
        items: vec![t()],
        scores: vec![0.5],
    }));
    assert!(droppable!(Renamed {
        tensor: t(),
        more: Vec::new(),
    }));

    // Generic: droppable exactly when the parameter is.
    let tensors = Pair {
        first: t(),
        second: t(),
    };
    assert!(droppable!(tensors));
    let shared = Pair {
        first: Rc::new(1u8),
        second: Rc::new(2u8),
    };
    assert!(!droppable!(shared));
    // `Copy` fields are not `DropAtLastUse` (a dropped `Copy` value would be a copy).
    let numbers = Pair { first: 1u32, second: 2 };
    assert!(!droppable!(numbers));
    let buffers = Pair {
        first: vec![1.0f32],
        second: vec![2.0],
    };
    assert!(droppable!(buffers));
    assert!(droppable!(Bounded { value: vec![0u8] }));
    assert!(!droppable!(Bounded {
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
