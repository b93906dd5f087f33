//! Model weights in Hugging Face's safetensors format, by parameter name: the bodies of
//! [`Parameters::save_safetensors`](super::Parameters::save_safetensors) and
//! [`Parameters::load_safetensors`](super::Parameters::load_safetensors), and their errors.
//!
//! The file format is the `safetensors` crate's; this module owns the mapping between a
//! model's named parameters and a file's tensors: names, shapes and the dtype (F32, the only
//! one tensors have here), checked for every parameter before any is written.

use super::{Result, Tensor, TensorError};
use ::safetensors::tensor::TensorView;
use ::safetensors::{Dtype, SafeTensorError, SafeTensors};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Why weights could not be saved or loaded. Each message names the file and the tensor.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// The file could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// "read" or "write".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// The file is not a valid safetensors file (truncated, corrupt, another format).
    #[error("{} is not a valid safetensors file ({message}); check that it was written completely and as safetensors (not a PyTorch .bin/.pt pickle)", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What the safetensors reader found wrong.
        message: String,
    },
    /// A parameter of the model has no tensor of its name in the file.
    #[error("{} has no tensor `{name}` for the model's parameter of that name{hint}; the file holds {count} tensors{listing}", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The parameter's name.
        name: String,
        /// Tensors in the file.
        count: usize,
        /// A few of the file's names, for the message.
        listing: String,
        /// A name in the file that ends with this one (a checkpoint with a prefix), for the
        /// message.
        hint: String,
    },
    /// The file's tensor has another shape than the parameter.
    #[error("tensor `{name}` in {} has shape {found:?}, but the model's parameter has shape {expected:?}; the file was saved from a model of another configuration", path.display())]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// The file's tensor is not F32.
    #[error("tensor `{name}` in {} is {found}, but parameters here are F32; convert the file to float32 first (in Python: `save_file({{k: v.float() for k, v in load_file(path).items()}}, out)`)", path.display())]
    WrongDtype {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The dtype in the file, as safetensors names it (`F16`, `BF16`, ...).
        found: String,
    },
    /// Two parameters of the model have the same name, so a file cannot hold both.
    #[error("two parameters of the model are named `{name}`; give each a unique name in named_parameters()")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// Reading a parameter or writing into it failed (a device the CPU cannot address, out of
    /// memory for the staging copy).
    #[error("parameter `{name}`: {source}")]
    Tensor {
        /// The parameter's name.
        name: String,
        /// The tensor error (boxed: it carries out-of-memory figures).
        source: Box<TensorError>,
    },
}

/// What [`Parameters::load_safetensors`](super::Parameters::load_safetensors) loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedWeights {
    /// Parameters written.
    pub loaded: usize,
    /// Tensors of the file that no parameter took, sorted (e.g. a pooler or a head the model
    /// does not have: check them when the file was meant for this model).
    pub unused: Vec<String>,
}

/// Writes `params` to `path`.
pub(super) fn save(params: &[(String, Tensor)], path: &Path) -> Result<(), SafetensorsError> {
    check_unique(params)?;
    let mut bytes = Vec::with_capacity(params.len());
    for (name, t) in params {
        let values = t.to_vec().map_err(|source| SafetensorsError::Tensor {
            name: name.clone(),
            source: Box::new(source),
        })?;
        bytes.push(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        );
    }
    let mut views = Vec::with_capacity(params.len());
    for ((name, t), data) in params.iter().zip(&bytes) {
        let view = TensorView::new(Dtype::F32, t.dims().to_vec(), data)
            .map_err(|source| format_error(path, source))?;
        views.push((name.as_str(), view));
    }
    let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
    ::safetensors::serialize_to_file(views, Some(metadata), path).map_err(|e| match e {
        SafeTensorError::IoError(source) => SafetensorsError::Io {
            action: "write",
            path: path.to_owned(),
            source,
        },
        other => format_error(path, other),
    })
}

/// Copies the tensors of `path` into `params`, after checking every one.
pub(super) fn load(
    params: &[(String, Tensor)],
    path: &Path,
) -> Result<LoadedWeights, SafetensorsError> {
    check_unique(params)?;
    let bytes = std::fs::read(path).map_err(|source| SafetensorsError::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| format_error(path, e))?;
    // Check everything first, so that an error leaves the model as it was.
    let mut views = Vec::with_capacity(params.len());
    for (name, param) in params {
        let view = file.tensor(name).map_err(|_| missing(path, name, &file))?;
        if view.dtype() != Dtype::F32 {
            return Err(SafetensorsError::WrongDtype {
                path: path.to_owned(),
                name: name.clone(),
                found: format!("{:?}", view.dtype()),
            });
        }
        if view.shape() != param.dims() {
            return Err(SafetensorsError::ShapeMismatch {
                path: path.to_owned(),
                name: name.clone(),
                expected: param.dims().to_vec(),
                found: view.shape().to_vec(),
            });
        }
        views.push(view);
    }
    let _no_grad = crate::grad::NoGradGuard::new();
    for ((name, param), view) in params.iter().zip(&views) {
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Tensor::from_slice(&values, param.dims(), param.device())
            .and_then(|staged| param.copy_(&staged))
            .map_err(|source| SafetensorsError::Tensor {
                name: name.clone(),
                source: Box::new(source),
            })?;
    }
    let taken: HashSet<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
    let mut unused: Vec<String> = file
        .names()
        .into_iter()
        .filter(|n| !taken.contains(n))
        .map(str::to_owned)
        .collect();
    unused.sort();
    Ok(LoadedWeights {
        loaded: params.len(),
        unused,
    })
}

fn check_unique(params: &[(String, Tensor)]) -> Result<(), SafetensorsError> {
    let mut seen = HashSet::new();
    match params.iter().find(|(name, _)| !seen.insert(name.as_str())) {
        Some((name, _)) => Err(SafetensorsError::DuplicateName { name: name.clone() }),
        None => Ok(()),
    }
}

fn format_error(path: &Path, source: SafeTensorError) -> SafetensorsError {
    SafetensorsError::Format {
        path: path.to_owned(),
        message: source.to_string(),
    }
}

fn missing(path: &Path, name: &str, file: &SafeTensors<'_>) -> SafetensorsError {
    let mut names = file.names();
    names.sort_unstable();
    let suffix = format!(".{name}");
    let hint = names
        .iter()
        .find(|n| n.ends_with(&suffix))
        .map(|n| format!(" (the file has `{n}`: saved with a prefix?)"))
        .unwrap_or_default();
    const SHOWN: usize = 5;
    let listing = match names.len() {
        0 => String::new(),
        n if n <= SHOWN => format!(": {}", names.join(", ")),
        n => format!(": {}, ... ({} more)", names[..SHOWN].join(", "), n - SHOWN),
    };
    SafetensorsError::Missing {
        path: path.to_owned(),
        name: name.to_owned(),
        count: names.len(),
        listing,
        hint,
    }
}
