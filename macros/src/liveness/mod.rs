//! Drop-at-last-use: the transform shared by `#[inference]` and `#[batch_scope]`.
//! INTERIM: the contract only; the inference issue implements it.

/// What the transform needs to know.
#[allow(dead_code)]
pub(crate) struct DropOptions {
    /// Path of the facade crate (`::vramguard` unless renamed with `crate = path`).
    pub krate: syn::Path,
    /// Locals never dropped early (`keep(a, b)`).
    pub keep: Vec<syn::Ident>,
}

/// Inserts releases of locals after their last use in `block`. `params` are by-value
/// parameters the function owns.
#[allow(dead_code)]
pub(crate) fn insert_drops(_block: &mut syn::Block, _params: &[syn::Ident], _opts: &DropOptions) {}
