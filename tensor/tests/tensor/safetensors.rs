//! Saving and loading `nn` modules' weights by name in safetensors files: round trips, and the
//! typed errors for a missing, mis-shaped, wrongly typed tensor or a corrupt file (which leave
//! the model as it was).

use std::path::PathBuf;
use vramguard_memory::Device;
use vramguard_tensor::nn::{
    prefixed_parameters, Activation, EncoderLayer, Linear, Mlp, Parameters, SafetensorsError,
};
use vramguard_tensor::tensor::Tensor;

/// A fresh path in the target directory's scratch space for this test binary.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nn_safetensors");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn values(model: &impl Parameters) -> Vec<Vec<u32>> {
    model
        .parameters()
        .iter()
        .map(|p| p.to_vec().unwrap().iter().map(|v| v.to_bits()).collect())
        .collect()
}

fn encoder(seed: u64) -> EncoderLayer {
    EncoderLayer::new(16, 4, 32, seed, &Device::Host).unwrap()
}

#[test]
fn named_parameters_are_dotted_paths_in_parameter_order() {
    let layer = encoder(1);
    let names: Vec<String> = layer
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.len(), 16);
    assert_eq!(names[0], "attention.query.weight");
    assert_eq!(names[7], "attention.out.bias");
    assert_eq!(&names[8..10], ["ln1.weight", "ln1.bias"]);
    assert_eq!(names[10], "mlp.fc1.weight");
    assert_eq!(names[15], "ln2.bias");
    let by_name: Vec<Tensor> = layer
        .named_parameters()
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    for (a, b) in by_name.iter().zip(layer.parameters()) {
        assert!(a.shares_storage_with(&b));
    }
}

#[test]
fn a_saved_model_loads_into_another_bit_for_bit() {
    let path = scratch("encoder.safetensors");
    let saved = encoder(1);
    saved.save_safetensors(&path).unwrap();
    let loaded = encoder(2);
    assert_ne!(values(&saved), values(&loaded));
    let report = loaded.load_safetensors(&path).unwrap();
    assert_eq!(report.loaded, 16);
    assert!(report.unused.is_empty());
    assert_eq!(values(&saved), values(&loaded));
    // Still trainable leaves.
    assert!(loaded
        .parameters()
        .iter()
        .all(|p| p.is_leaf() && p.requires_grad()));
}

#[test]
fn the_file_is_plain_safetensors_f32_with_pytorch_metadata() {
    let path = scratch("linear.safetensors");
    let layer = Linear::new(3, 2, true, 7, &Device::Host).unwrap();
    layer.save_safetensors(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names = file.names();
    names.sort_unstable();
    assert_eq!(names, ["bias", "weight"]);
    let weight = file.tensor("weight").unwrap();
    assert_eq!(weight.dtype(), safetensors::Dtype::F32);
    assert_eq!(weight.shape(), [2, 3]);
    let first = f32::from_le_bytes(weight.data()[..4].try_into().unwrap());
    assert_eq!(first, layer.weight.to_vec().unwrap()[0]);
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(
        metadata.metadata().as_ref().and_then(|m| m.get("format")),
        Some(&"pt".to_owned())
    );
}

#[test]
fn a_missing_tensor_is_named_and_nothing_is_written() {
    let path = scratch("no_bias.safetensors");
    Linear::new(4, 3, false, 1, &Device::Host)
        .unwrap()
        .save_safetensors(&path)
        .unwrap();
    let model = Linear::new(4, 3, true, 2, &Device::Host).unwrap();
    let before = values(&model);
    match model.load_safetensors(&path) {
        Err(SafetensorsError::Missing { name, count, .. }) => {
            assert_eq!(name, "bias");
            assert_eq!(count, 1);
        }
        other => panic!("expected Missing, got {other:?}"),
    }
    assert_eq!(
        values(&model),
        before,
        "the weight, present in the file, was not written"
    );
}

#[test]
fn a_missing_tensor_saved_under_a_prefix_gets_a_hint() {
    let path = scratch("mlp.safetensors");
    Mlp::new(4, 8, 4, Activation::Relu, 1, &Device::Host)
        .unwrap()
        .save_safetensors(&path)
        .unwrap();
    let err = Linear::new(4, 8, true, 1, &Device::Host)
        .unwrap()
        .load_safetensors(&path)
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no tensor `weight`"), "{text}");
    assert!(
        text.contains("the file has `fc1.weight`: saved with a prefix?"),
        "{text}"
    );
    assert!(
        text.contains("the file holds 4 tensors: fc1.bias, fc1.weight, fc2.bias, fc2.weight"),
        "{text}"
    );
}

#[test]
fn a_mis_shaped_tensor_names_both_shapes() {
    let path = scratch("linear_4_3.safetensors");
    Linear::new(4, 3, true, 1, &Device::Host)
        .unwrap()
        .save_safetensors(&path)
        .unwrap();
    let model = Linear::new(4, 5, true, 2, &Device::Host).unwrap();
    match model.load_safetensors(&path) {
        Err(SafetensorsError::ShapeMismatch {
            name,
            expected,
            found,
            ..
        }) => {
            assert_eq!(name, "weight");
            assert_eq!(expected, [5, 4]);
            assert_eq!(found, [3, 4]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
}

#[test]
fn a_tensor_of_another_dtype_is_refused() {
    let path = scratch("f16.safetensors");
    let half = [0u8; 2 * 3 * 2];
    let weight =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F16, vec![2, 3], &half).unwrap();
    safetensors::serialize_to_file([("weight", weight)], None, &path).unwrap();
    let model = Linear::new(3, 2, false, 1, &Device::Host).unwrap();
    match model.load_safetensors(&path) {
        Err(SafetensorsError::WrongDtype { name, found, .. }) => {
            assert_eq!(name, "weight");
            assert_eq!(found, "F16");
        }
        other => panic!("expected WrongDtype, got {other:?}"),
    }
}

#[test]
fn corrupt_truncated_and_absent_files_are_typed_errors() {
    let model = Linear::new(3, 2, true, 1, &Device::Host).unwrap();
    let garbage = scratch("garbage.safetensors");
    std::fs::write(&garbage, b"this is not a safetensors file at all").unwrap();
    assert!(matches!(
        model.load_safetensors(&garbage),
        Err(SafetensorsError::Format { .. })
    ));

    let truncated = scratch("truncated.safetensors");
    model.save_safetensors(&truncated).unwrap();
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 5]).unwrap();
    let err = model.load_safetensors(&truncated).unwrap_err();
    assert!(matches!(err, SafetensorsError::Format { .. }), "{err:?}");
    assert!(err.to_string().contains("written completely"), "{err}");

    let absent = scratch("absent.safetensors");
    assert!(matches!(
        model.load_safetensors(&absent),
        Err(SafetensorsError::Io { action: "read", .. })
    ));
}

/// A model of one's own: the first layer of an MLP.
struct FirstLayer {
    fc1: Linear,
}

impl Parameters for FirstLayer {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        prefixed_parameters("fc1", &self.fc1).collect()
    }
}

#[test]
fn tensors_no_parameter_takes_are_listed() {
    let path = scratch("mlp_for_first_layer.safetensors");
    let mlp = Mlp::new(4, 8, 4, Activation::Relu, 1, &Device::Host).unwrap();
    mlp.save_safetensors(&path).unwrap();
    let model = FirstLayer {
        fc1: Linear::new(4, 8, true, 9, &Device::Host).unwrap(),
    };
    let report = model.load_safetensors(&path).unwrap();
    assert_eq!(report.loaded, 2);
    assert_eq!(report.unused, ["fc2.bias", "fc2.weight"]);
    assert_eq!(values(&model), values(&mlp.fc1));
}

/// A model whose names collide.
struct Twice {
    a: Linear,
    b: Linear,
}

impl Parameters for Twice {
    fn named_parameters(&self) -> Vec<(String, Tensor)> {
        self.a
            .named_parameters()
            .into_iter()
            .chain(self.b.named_parameters())
            .collect()
    }
}

#[test]
fn duplicate_names_are_refused_before_anything_is_written() {
    let path = scratch("twice.safetensors");
    let model = Twice {
        a: Linear::new(2, 2, false, 1, &Device::Host).unwrap(),
        b: Linear::new(2, 2, false, 2, &Device::Host).unwrap(),
    };
    match model.save_safetensors(&path) {
        Err(SafetensorsError::DuplicateName { name }) => assert_eq!(name, "weight"),
        other => panic!("expected DuplicateName, got {other:?}"),
    }
    assert!(!path.exists());
}
