//! Debug-build notices at drop points, for the two ways `#[inference]` and `#[batch_scope]`
//! can free nothing without any other sign: a tensor of a supported library that is kept because
//! the facade's feature for that library is off (or it is another version of the library), and a
//! candle tensor that still records candle's graph, dropped with grad mode off.
//!
//! Each is one line on stderr, in the format of the runtime's other stderr warnings
//! (`warning: vramguard: …`), printed once (per type, for the first; once per process, for the
//! second). Release builds never call into this module: the probe's methods test
//! `cfg!(debug_assertions)` first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::drop_at_last_use::DropAtLastUse;

/// A library whose tensors are `DropAtLastUse` behind a feature of this crate.
struct Library {
    /// The feature's name, as written in `Cargo.toml`.
    feature: &'static str,
    /// The crate and version the feature supports, as a user would say it.
    supported: &'static str,
    /// Whether this build of vramguard has the feature on.
    enabled: bool,
}

const CANDLE: Library = Library {
    feature: "candle",
    supported: "candle-core 0.11",
    enabled: cfg!(feature = "candle"),
};
const NDARRAY: Library = Library {
    feature: "ndarray",
    supported: "ndarray 0.17",
    enabled: cfg!(feature = "ndarray"),
};
const BURN: Library = Library {
    feature: "burn",
    supported: "burn-tensor 0.22",
    enabled: cfg!(feature = "burn"),
};
const BURN_021: Library = Library {
    feature: "burn-021",
    supported: "burn-tensor 0.21",
    enabled: cfg!(feature = "burn-021"),
};
const TCH: Library = Library {
    feature: "tch",
    supported: "tch 0.26",
    enabled: cfg!(feature = "tch"),
};

/// The std containers that are `DropAtLastUse` when their element is, as `type_name` spells them
/// (prefix, suffix). `Result`, tuples, `Rc`/`Arc` and references are not here: a `Result` with
/// a library's error and a tuple with a number are kept with the feature on too, and a shared or
/// borrowed tensor is always kept.
const CONTAINERS: [&str; 4] = [
    "alloc::vec::Vec<",
    "alloc::boxed::Box<",
    "core::option::Option<",
    "alloc::collections::vec_deque::VecDeque<",
];

/// The element types of an owned ndarray array that make it `DropAtLastUse` with the feature on.
const NUMBERS: [&str; 14] = [
    "f32", "f64", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128",
    "usize",
];

/// The library whose tensor `type_name` is (or holds in `Vec`, `Box`, `Option`, `VecDeque`,
/// arrays and slices), if it is one that a feature of this crate makes `DropAtLastUse`. Only string
/// prefix and suffix tests: this runs at every drop point of a kept value in debug builds.
fn library_tensor(type_name: &str) -> Option<&'static Library> {
    let mut name = type_name;
    loop {
        if let Some(element) = CONTAINERS
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix)?.strip_suffix('>'))
        {
            name = element;
        } else if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
            // `[T; N]` or `[T]`; the length is last, after any `;` inside `T`.
            name = match inner.rsplit_once("; ") {
                Some((element, length)) if length.bytes().all(|b| b.is_ascii_digit()) => element,
                _ => inner,
            };
        } else {
            break;
        }
    }
    match name {
        "candle_core::tensor::Tensor" => Some(&CANDLE),
        "tch::wrappers::tensor::Tensor" => Some(&TCH),
        _ => {
            if let Some(arguments) = name.strip_prefix("burn_tensor::tensor::api::base::Tensor<") {
                // 0.22 is `Tensor<D, K>` (a rank first); 0.21 and before, `Tensor<B, D, K>`.
                if arguments.starts_with(|c: char| c.is_ascii_digit()) {
                    Some(&BURN)
                } else {
                    Some(&BURN_021)
                }
            } else {
                let element = name
                    .strip_prefix("ndarray::ArrayBase<ndarray::data_repr::OwnedRepr<")?
                    .split_once('>')?
                    .0;
                NUMBERS.contains(&element).then_some(&NDARRAY)
            }
        }
    }
}

/// The notice for a kept value of type `type_name`, if it is a supported library's tensor (or
/// a container of them) that the library's feature would drop.
fn kept_tensor_message(type_name: &str) -> Option<String> {
    let library = library_tensor(type_name)?;
    let feature = library.feature;
    let supported = library.supported;
    Some(if library.enabled {
        format!(
            "`{type_name}` is kept to the end of its scope, not freed at its last use, although \
             vramguard's `{feature}` feature is on: that feature supports {supported} only, and \
             this tensor comes from another version (`cargo tree --duplicates` shows both); \
             depend on {supported}, or, if the value reached #[inference]/#[batch_scope] as a \
             generic parameter `T`, bound it by `T: vramguard::DropAtLastUse`"
        )
    } else {
        format!(
            "`{type_name}` is kept to the end of its scope, not freed at its last use: \
             vramguard's `{feature}` feature ({supported}) is off; in Cargo.toml, add it: \
             vramguard = {{ version = \"{version}\", features = [\"{feature}\"] }}",
            version = env!("CARGO_PKG_VERSION"),
        )
    })
}

/// The types already noticed by [`kept_tensor`] (a handful at most).
static KEPT_NOTICED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// At a drop point of a value of type `type_name` that is kept: one line on stderr the first
/// time a supported library's tensor type is kept only for want of the feature (or because it
/// is another version of the library). The lock is taken only for those types.
pub(crate) fn kept_tensor(type_name: &'static str) {
    let Some(message) = kept_tensor_message(type_name) else {
        return;
    };
    // A poisoned list is still a list: a panic elsewhere must not silence the notice.
    let mut noticed = KEPT_NOTICED.lock().unwrap_or_else(PoisonError::into_inner);
    if noticed.contains(&type_name) {
        return;
    }
    noticed.push(type_name);
    drop(noticed);
    eprintln!("warning: vramguard: {message}");
}

/// Whether [`dropped_with_graph`] has printed its notice.
static GRAPH_NOTICED: AtomicBool = AtomicBool::new(false);

/// What the graph notice says.
const GRAPH_MESSAGE: &str = "a candle tensor that records candle's graph \
    (`Tensor::track_op()`: a `Var`, or computed from one) was dropped at its last use with grad \
    mode off (#[inference]), which frees nothing: every tensor computed from it holds it in its \
    graph. For inference, load the weights as plain tensors \
    (`VarBuilder::from_mmaped_safetensors`, not a `VarMap`) or use `var.as_tensor().detach()`; \
    see the docs of `vramguard::DropAtLastUse`";

/// At a drop point of a `DropAtLastUse` value: one line on stderr, once per process, the first
/// time a value holding a candle tensor that records candle's graph is dropped with grad mode
/// off (under `#[inference]`; a training loop under `#[batch_scope]` has grad mode on and
/// records on purpose).
pub(crate) fn dropped_with_graph<T: DropAtLastUse + ?Sized>(value: &T) {
    if GRAPH_NOTICED.load(Ordering::Relaxed)
        || vramguard_memory::grad::is_grad_enabled()
        || !value.__vg_records_graph()
    {
        return;
    }
    if !GRAPH_NOTICED.swap(true, Ordering::Relaxed) {
        eprintln!("warning: vramguard: {GRAPH_MESSAGE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_of_each_supported_library_are_recognised_by_their_type_name() {
        let cases = [
            ("candle_core::tensor::Tensor", "candle"),
            ("tch::wrappers::tensor::Tensor", "tch"),
            (
                "burn_tensor::tensor::api::base::Tensor<2, burn_tensor::tensor::kind::Float>",
                "burn",
            ),
            (
                "burn_tensor::tensor::api::base::Tensor<burn_ndarray::backend::NdArray, 2, \
                 burn_tensor::tensor::kind::Float>",
                "burn-021",
            ),
            (
                "ndarray::ArrayBase<ndarray::data_repr::OwnedRepr<f32>, \
                 ndarray::dimension::dim::Dim<[usize; 2]>, f32>",
                "ndarray",
            ),
        ];
        for (type_name, feature) in cases {
            let library = library_tensor(type_name).map(|library| library.feature);
            assert_eq!(library, Some(feature), "{type_name}");
        }
    }

    #[test]
    #[cfg(any(
        feature = "candle",
        feature = "ndarray",
        feature = "burn",
        feature = "tch"
    ))]
    fn the_real_type_names_of_the_libraries_built_in_are_recognised() {
        use core::any::type_name;
        let mut real: Vec<(&str, &str)> = Vec::new();
        #[cfg(feature = "candle")]
        real.extend([
            (type_name::<candle_core::Tensor>(), "candle"),
            (type_name::<Option<Vec<candle_core::Tensor>>>(), "candle"),
        ]);
        #[cfg(feature = "ndarray")]
        real.extend([
            (type_name::<ndarray::Array2<f32>>(), "ndarray"),
            (type_name::<Box<[ndarray::Array1<u8>]>>(), "ndarray"),
        ]);
        #[cfg(feature = "burn")]
        real.push((type_name::<burn_tensor::Tensor<2>>(), "burn"));
        #[cfg(feature = "tch")]
        real.push((type_name::<tch::Tensor>(), "tch"));
        for (type_name, feature) in real {
            let library = library_tensor(type_name).map(|library| library.feature);
            assert_eq!(library, Some(feature), "{type_name}");
        }
        #[cfg(feature = "ndarray")]
        for view in [
            type_name::<ndarray::ArrayView2<'static, f32>>(),
            type_name::<ndarray::ArcArray2<f32>>(),
        ] {
            assert!(library_tensor(view).is_none(), "{view}");
        }
    }

    #[test]
    fn std_containers_of_tensors_are_recognised_and_shared_or_borrowed_ones_are_not() {
        for type_name in [
            "alloc::vec::Vec<candle_core::tensor::Tensor>",
            "core::option::Option<alloc::boxed::Box<candle_core::tensor::Tensor>>",
            "alloc::collections::vec_deque::VecDeque<candle_core::tensor::Tensor>",
            "[candle_core::tensor::Tensor; 4]",
            "alloc::boxed::Box<[candle_core::tensor::Tensor]>",
            "alloc::vec::Vec<[ndarray::ArrayBase<ndarray::data_repr::OwnedRepr<u8>, \
             ndarray::dimension::dim::Dim<[usize; 1]>, u8>; 3]>",
        ] {
            assert!(library_tensor(type_name).is_some(), "{type_name}");
        }
        for type_name in [
            "&candle_core::tensor::Tensor",
            "alloc::rc::Rc<candle_core::tensor::Tensor>",
            "alloc::sync::Arc<candle_core::tensor::Tensor>",
            "alloc::vec::Vec<&candle_core::tensor::Tensor>",
            "core::result::Result<candle_core::tensor::Tensor, candle_core::error::Error>",
            "(candle_core::tensor::Tensor, usize)",
            "ndarray::ArrayBase<ndarray::data_repr::OwnedRepr<alloc::string::String>, \
             ndarray::dimension::dim::Dim<[usize; 1]>, alloc::string::String>",
            "ndarray::ArrayBase<ndarray::ViewRepr<&f32>, ndarray::dimension::dim::Dim<[usize; \
             1]>, f32>",
            "candle_core::tensor::TensorId",
            "usize",
            "[usize; 2]",
        ] {
            assert!(library_tensor(type_name).is_none(), "{type_name}");
        }
    }

    #[test]
    fn the_message_names_the_type_and_the_feature_or_says_another_version() {
        let message = kept_tensor_message("alloc::vec::Vec<candle_core::tensor::Tensor>")
            .expect("a candle container");
        assert!(
            message.starts_with("`alloc::vec::Vec<candle_core::tensor::Tensor>` is kept"),
            "{message}"
        );
        if cfg!(feature = "candle") {
            assert!(
                message.contains("supports candle-core 0.11 only"),
                "{message}"
            );
        } else {
            assert!(
                message.contains(&format!(
                    "vramguard = {{ version = \"{}\", features = [\"candle\"] }}",
                    env!("CARGO_PKG_VERSION")
                )),
                "{message}"
            );
        }
        assert_eq!(kept_tensor_message("alloc::string::String"), None);
    }
}
