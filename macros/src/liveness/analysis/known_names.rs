//! The built-in name lists of the alias analysis.
//!
//! The transform has no types, so whether the result of a call may borrow one of its inputs is
//! decided from the callee's *name*. These lists cover the standard library and the common Rust
//! tensor libraries (candle, burn, tch, dfdx, vramguard's own `Tensor`). Users extend them per
//! function with `#[inference(owned(a, b), borrows(c))]`. Anything not listed gets the
//! conservative default: its result may borrow (or own) its receiver.

use crate::common::NameList;

/// Methods whose result owns its data: it borrows neither the receiver nor the arguments.
/// Mostly tensor operations returning `Tensor` / `Result<Tensor>`, and std methods returning
/// plain values.
pub(crate) static OWNED_METHODS: NameList = NameList::new(&[
    // tensor arithmetic and linear algebra
    "matmul",
    "broadcast_matmul",
    "bmm",
    "mm",
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "pow",
    "powf",
    "broadcast_add",
    "broadcast_sub",
    "broadcast_mul",
    "broadcast_div",
    "broadcast_maximum",
    "broadcast_minimum",
    "broadcast_pow",
    "maximum",
    "minimum",
    "affine",
    "addmm",
    "baddbmm",
    "scalar_add",
    "scalar_sub",
    "scalar_mul",
    "scalar_div",
    "add_scalar",
    "mul_scalar",
    "sub_scalar",
    "div_scalar",
    "neg",
    "recip",
    "abs",
    "sqr",
    "sqrt",
    "rsqrt",
    "exp",
    "log",
    "ln",
    "log1p",
    "expm1",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "relu6",
    "gelu",
    "gelu_erf",
    "silu",
    "swiglu",
    "elu",
    "leaky_relu",
    "softplus",
    "mish",
    "erf",
    "floor",
    "ceil",
    "round",
    "sign",
    "clamp",
    "clip",
    "softmax",
    "log_softmax",
    "softmax_last_dim",
    "layer_norm",
    "rms_norm",
    "batch_norm",
    "group_norm",
    "normalize",
    "dropout",
    "embedding",
    "conv1d",
    "conv2d",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "upsample_nearest2d",
    "interpolate",
    "rope",
    "rope_i",
    "rotary_emb",
    // reductions and comparisons
    "sum",
    "sum_keepdim",
    "sum_all",
    "sum_dim",
    "mean",
    "mean_keepdim",
    "mean_all",
    "mean_dim",
    "max",
    "max_keepdim",
    "max_all",
    "max_dim",
    "min",
    "min_keepdim",
    "min_all",
    "min_dim",
    "argmax",
    "argmax_keepdim",
    "argmin",
    "argmin_keepdim",
    "var",
    "var_keepdim",
    "std",
    "norm",
    "cumsum",
    "prod",
    "ge",
    "gt",
    "le",
    "lt",
    "eq",
    "ne",
    "equal",
    "lower_equal",
    "greater_equal",
    "mask_fill",
    "masked_fill",
    "where_cond",
    "where_",
    // shape manipulation (views share storage through an `Arc`: still owned values)
    "reshape",
    "transpose",
    "permute",
    "contiguous",
    "squeeze",
    "unsqueeze",
    "flatten",
    "flatten_all",
    "flatten_from",
    "flatten_to",
    "expand",
    "broadcast_as",
    "broadcast_left",
    "broadcast_right",
    "repeat",
    "index_select",
    "gather",
    "scatter_add",
    "index_add",
    "pad_with_zeros",
    "pad_with_same",
    "swap_dims",
    "get_on_dim",
    "tril",
    "triu",
    "to_dtype",
    "to_device",
    "to_kind",
    "detach",
    "copy",
    "zeros_like",
    "ones_like",
    "rand_like",
    "randn_like",
    "full_like",
    "log_sum_exp",
    "broadcast_lt",
    "broadcast_le",
    "broadcast_gt",
    "broadcast_ge",
    "broadcast_eq",
    "broadcast_ne",
    "flip",
    "roll",
    "sort_last_dim",
    "arg_sort_last_dim",
    "powf_scalar",
    "powi_scalar",
    "clamp_min",
    "clamp_max",
    "shallow_clone",
    "topk",
    "scale",
    "cross_entropy",
    "mse_loss",
    "nll_loss",
    "linear",
    "softmax_dim",
    "add_bias",
    "masked_softmax",
    "gelu_tanh",
    "exp2",
    // modules
    "forward_t",
    "forward_train",
    "apply",
    "apply_t",
    "call",
    // values out of tensors and std owned results
    "to_string",
    "to_vec0",
    "to_vec1",
    "to_vec2",
    "to_vec3",
    "to_scalar",
    "into_scalar",
    "item",
    "len",
    "is_empty",
    "dims0",
    "dims1",
    "dims2",
    "dims3",
    "dims4",
    "dims5",
    "dim",
    "rank",
    "elem_count",
    "numel",
    "size",
    "dtype",
    "is_contiguous",
    "count",
    "contains",
    "starts_with",
    "ends_with",
    "is_some",
    "is_none",
    "is_ok",
    "is_err",
    "format",
    "fmt",
    "partial_cmp",
    "cmp",
    "hash",
    "parse",
    "to_lowercase",
    "to_uppercase",
    "repeat_interleave",
    "abs_diff",
    // ndarray's eager maps: a new array of the closure's results (or the receiver's own,
    // consumed), never a view of the receiver.
    "mapv",
    "mapv_into",
    "mapv_into_any",
]);

/// Methods whose result borrows the receiver's storage (accessors returning references,
/// iterators, lock guards, raw pointers).
pub(crate) static BORROW_METHODS: NameList = NameList::new(&[
    "dims",
    "shape",
    "stride",
    "strides",
    "layout",
    "device",
    "storage",
    "storage_mut",
    "storage_and_layout",
    "as_ref",
    "as_mut",
    "as_slice",
    "as_mut_slice",
    "as_str",
    "as_bytes",
    "as_path",
    "as_os_str",
    "as_deref",
    "as_deref_mut",
    "as_ptr",
    "as_mut_ptr",
    "as_raw",
    "as_raw_mut",
    "borrow",
    "borrow_mut",
    "deref",
    "deref_mut",
    "iter",
    "iter_mut",
    "chars",
    "char_indices",
    "bytes",
    "lines",
    "split",
    "split_whitespace",
    "split_at",
    "split_at_mut",
    "splitn",
    "rsplit",
    "windows",
    "chunks",
    "chunks_exact",
    "chunks_mut",
    "keys",
    "values",
    "values_mut",
    "get",
    "get_mut",
    "get_unchecked",
    "first",
    "last",
    "first_mut",
    "last_mut",
    "trim",
    "trim_start",
    "trim_end",
    "strip_prefix",
    "strip_suffix",
    "lock",
    "read",
    "write",
    "try_lock",
    "try_read",
    "try_write",
    "drain",
    "entry",
    "peek",
    "vars",
    "data",
    "as_view",
    "view_ref",
    "named_parameters",
    "parameters",
    "weight",
    "bias",
    // An AST node's `kind()` is `&Kind` (tch's is an owned `Kind`, which borrowing costs
    // nothing: it is no memory).
    "kind",
]);

/// Tensor operations (owned results) that are also `Iterator` methods yielding the iterator's
/// items, which may be references (`v.iter().max()`, `nested.iter().flatten()`): treated as
/// pass-through, which costs a tensor nothing (its value borrows nothing).
pub(crate) static ITEM_METHODS: NameList = NameList::new(&["max", "min", "flatten"]);

/// Of the borrowing methods, those std also defines on a by-value `self` (`Iterator::last`,
/// `BufRead::lines`, `BufRead::split`, `Read::bytes`): called directly on a local they may move
/// it, so a binding of their result keeps the local to the end of its scope.
/// Also `data`: candle-nn's `VarMap::data` borrows, a builder's `data(self)` consumes.
pub(crate) static MAYBE_CONSUMING_METHODS: NameList =
    NameList::new(&["last", "lines", "split", "bytes", "data"]);

/// Of the borrowing methods, those returning a guard or another value whose drop still uses
/// the borrow (`Ref`, `MutexGuard`, `Drain`): the receiver must outlive the guard's drop.
pub(crate) static GUARD_METHODS: NameList = NameList::new(&[
    // `get` is `Option<&T>` in std but a guard in connection pools and concurrent maps.
    "get",
    "get_mut",
    "entry",
    "lock",
    "try_lock",
    "read",
    "write",
    "try_read",
    "try_write",
    "borrow",
    "borrow_mut",
    "try_borrow",
    "try_borrow_mut",
    "drain",
    "enter",
    "splice",
]);

/// Of the borrowing methods, those returning a plain reference into the receiver (not an
/// iterator, an `Option<&T>` or a guard): reading through the result yields what the receiver
/// holds, never the receiver's storage.
pub(crate) static REFERENCE_METHODS: NameList = NameList::new(&[
    "dims",
    "shape",
    "stride",
    "strides",
    "layout",
    "device",
    "storage",
    "as_ref",
    "as_mut",
    "as_slice",
    "as_mut_slice",
    "as_str",
    "as_bytes",
    "as_path",
    "as_os_str",
    "borrow",
    "borrow_mut",
    "deref",
    "deref_mut",
    "weight",
    "bias",
    "get_unchecked",
    "get_unchecked_mut",
    "kind",
]);

/// Methods whose result carries the receiver's *value* (and the values of their arguments):
/// `unwrap`, `?`-like adapters, iterator adapters, `into_*` conversions.
pub(crate) static PASSTHROUGH_METHODS: NameList = NameList::new(&[
    "unwrap",
    "expect",
    "unwrap_or",
    "unwrap_or_else",
    "unwrap_or_default",
    "unwrap_unchecked",
    "ok",
    "err",
    "ok_or",
    "ok_or_else",
    "map_err",
    "context",
    "with_context",
    "into",
    "into_iter",
    "into_inner",
    "into_boxed_slice",
    "into_owned",
    "map",
    "filter",
    "filter_map",
    "flat_map",
    "enumerate",
    "zip",
    "chain",
    "rev",
    "skip",
    "take",
    "step_by",
    "peekable",
    "cloned",
    "copied",
    "collect",
    "and_then",
    "or_else",
    "or",
    "and",
    "inspect",
    "take_while",
    "skip_while",
    "cycle",
    "fuse",
    "by_ref",
    "then",
    "then_some",
]);

/// Methods that own their result in one library and borrow the receiver in another: candle's
/// `t`, `narrow`, `i`, `chunk`, `forward` (owned `Result<Tensor>`), ndarray's `view`, `t`,
/// `slice` and scraper's `select` (views), a model's `forward` returning `Prediction<'_>`.
/// Read safely: the result may borrow the receiver, unless the code shows it owns its data
/// (the call is followed by `?`, which only fallible tensor ops are).
pub(crate) static AMBIGUOUS_METHODS: NameList = NameList::new(&[
    "t", "view", "slice", "narrow", "i", "chunk", "select", "forward",
]);

/// Methods that copy what the receiver holds (`held.clone()` of a `Vec<&T>` holds the same
/// borrows): the result holds whatever the receiver's value holds, never the receiver itself.
pub(crate) static VALUE_COPYING_METHODS: NameList = NameList::new(&["clone", "to_vec", "to_owned"]);

/// Associated functions of owned types whose result may borrow their arguments
/// (`String::from_utf8_lossy(&buf)` is a `Cow`, `HashMap::from([("w", &w)])`).
pub(crate) static BORROWING_CONSTRUCTORS: NameList =
    NameList::new(&["from_utf8_lossy", "from", "from_iter"]);

/// Methods with owned results whose receiver is only borrowed (`&self` in std and in the
/// tensor libraries): the statement that calls them on a local does not move it.
pub(crate) static BORROWING_RECEIVER_METHODS: NameList = NameList::new(&[
    "len",
    "is_empty",
    "clone",
    "to_vec",
    "to_string",
    "to_owned",
    "contains",
    "starts_with",
    "ends_with",
    "dims0",
    "dims1",
    "dims2",
    "dims3",
    "dims4",
    "dims5",
    "rank",
    "elem_count",
    "dtype",
    "is_contiguous",
    "to_vec0",
    "to_vec1",
    "to_vec2",
    "to_vec3",
    "to_scalar",
]);

/// Methods that consume an iterator (or read a value) into a result that holds none of the
/// closures passed along the way (`v.iter().map(|a| a + 1).collect()`).
pub(crate) static CLOSURE_FREE_RESULTS: NameList = NameList::new(&[
    // ndarray's eager maps: a new (or the same) array of the closure's results.
    "mapv",
    "mapv_into",
    "mapv_into_any",
    "collect",
    "sum",
    "product",
    "count",
    "fold",
    "try_fold",
    "for_each",
    "try_for_each",
    "any",
    "all",
    "position",
    "len",
    "is_empty",
    "to_vec",
    "to_string",
    "to_owned",
    "join",
    "unzip",
    "partition",
    "max_by",
    "min_by",
    "max_by_key",
    "min_by_key",
    "reduce",
    "is_some",
    "is_none",
    "is_ok",
    "is_err",
    "contains",
]);

/// Methods whose result type is usually decided by a later use (`let n = s.parse()?;`).
pub(crate) static TYPE_DEFERRING_METHODS: NameList = NameList::new(&[
    "collect",
    "parse",
    "into",
    "try_into",
    "sum",
    "product",
    "unwrap_or_default",
]);

/// Generic std containers: `Vec::new()` and the like get their element type from later uses.
pub(crate) static GENERIC_CONTAINERS: NameList = NameList::new(&[
    "Vec",
    "VecDeque",
    "HashMap",
    "HashSet",
    "BTreeMap",
    "BTreeSet",
    "BinaryHeap",
    "LinkedList",
    "Option",
]);

/// Traits whose constructors get `Self` from the use of their result (`Default::default()`).
pub(crate) static CONVERSION_TRAITS: NameList = NameList::new(&[
    "Default",
    "From",
    "TryFrom",
    "Into",
    "TryInto",
    "FromIterator",
    "FromStr",
]);

/// Methods returning a raw pointer into the receiver: the local is then never dropped early.
pub(crate) static RAW_POINTER_METHODS: NameList = NameList::new(&[
    "as_ptr",
    "as_mut_ptr",
    "as_raw",
    "as_raw_mut",
    "data_ptr",
    "device_ptr",
    "device_ptr_mut",
    "as_ptr_range",
    "as_mut_ptr_range",
    "into_raw",
    "leak",
]);

/// Methods that may store their arguments inside the receiver (`v.push(&x)`).
pub(crate) static STORING_METHODS: NameList = NameList::new(&[
    "push",
    "push_back",
    "push_front",
    "push_str",
    "insert",
    "extend",
    "extend_from_slice",
    "append",
    "set",
    "replace",
    "get_or_insert",
    "get_or_insert_with",
    "or_insert",
    "or_insert_with",
    "send",
    "store",
]);

/// Methods that write through their receiver (besides [`STORING_METHODS`] and any `*_mut`
/// method): a borrow of the receiver taken before the call cannot be used after it.
pub(crate) static MUTATING_METHODS: NameList = NameList::new(&[
    "pop",
    "pop_back",
    "pop_front",
    "remove",
    "swap_remove",
    "clear",
    "truncate",
    "retain",
    "sort",
    "sort_by",
    "sort_by_key",
    "sort_unstable",
    "sort_unstable_by",
    "sort_unstable_by_key",
    "dedup",
    "reverse",
    "resize",
    "fill",
    "swap",
]);

/// Whether a method named `name` writes through its receiver (see [`MUTATING_METHODS`]).
pub(crate) fn is_mutating_method(name: &str) -> bool {
    STORING_METHODS.contains(name) || MUTATING_METHODS.contains(name) || name.ends_with("_mut")
}

/// Free functions (last path segment) whose result owns its data.
pub(crate) static OWNED_FUNCTIONS: NameList = NameList::new(&[
    "softmax",
    "log_softmax",
    "softmax_last_dim",
    "sigmoid",
    "silu",
    "gelu",
    "relu",
    "tanh",
    "layer_norm",
    "rms_norm",
    "dropout",
    "linear",
    "linear_no_bias",
    "embedding",
    "conv1d",
    "conv2d",
    "cat",
    "stack",
    "concat",
    "zeros",
    "ones",
    "full",
    "arange",
    "rand",
    "randn",
    "from_vec",
    "from_iter",
    "cross_entropy",
    "mse",
    "nll",
    "binary_cross_entropy_with_logit",
    "masked_fill",
    "matmul",
    "scaled_dot_product_attention",
    "size_of",
    "format",
    "to_string",
    "default",
]);

/// Types (second-to-last path segment) whose associated functions return owned values,
/// e.g. `Tensor::cat(&[&a, &b], 0)` or `Tensor::zeros(..)`.
pub(crate) static OWNED_TYPES: NameList =
    NameList::new(&["Tensor", "String", "Vec", "HashMap", "BTreeMap"]);

/// Macros whose result owns its data (or is `()`), and whose arguments are only borrowed.
pub(crate) static FORMAT_MACROS: NameList = NameList::new(&[
    "format",
    "print",
    "println",
    "eprint",
    "eprintln",
    "write",
    "writeln",
    "panic",
    "format_args",
    "unreachable",
    "todo",
    "unimplemented",
    "trace",
    "debug",
    "info",
    "warn",
    "error",
    "event",
    "anyhow",
    "bail",
    "eyre",
    "assert",
    "assert_eq",
    "assert_ne",
    "debug_assert",
    "debug_assert_eq",
    "debug_assert_ne",
    "ensure",
]);

/// Macros that build a container holding their arguments' values.
pub(crate) static CONTAINER_MACROS: NameList = NameList::new(&["vec", "dbg"]);

/// Macros known to produce a value and to declare no binding visible to the caller: a
/// statement made of one of these can be wrapped in a block.
pub(crate) fn is_known_macro(name: &str) -> bool {
    FORMAT_MACROS.contains(name)
        || CONTAINER_MACROS.contains(name)
        || matches!(name, "matches" | "assert_matches" | "concat" | "stringify")
}

/// The last segment of a macro's path (`println` for `std::println!`).
pub(crate) fn macro_name(mac: &syn::Macro) -> String {
    mac.path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default()
}

/// The arguments of a container macro (`vec![a, b]`, `vec![elem; n]`).
pub(super) fn container_args(mac: &syn::Macro) -> Option<Vec<syn::Expr>> {
    let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
    if let Ok(args) = parser.parse2(mac.tokens.clone()) {
        return Some(args.into_iter().collect());
    }
    // `vec![elem; n]`
    let repeat = |input: syn::parse::ParseStream<'_>| {
        let elem: syn::Expr = input.parse()?;
        let _: syn::Token![;] = input.parse()?;
        let count: syn::Expr = input.parse()?;
        Ok(vec![elem, count])
    };
    repeat.parse2(mac.tokens.clone()).ok()
}

use syn::parse::Parser;

use super::Env;

/// The lists as extended by the attribute's `owned(..)` and `borrows(..)` options.
impl Env<'_> {
    /// A method whose result owns its data (listed, or named in `owned(..)`), unless the user
    /// declared it borrowing.
    pub(super) fn is_owned_method(&self, name: &str) -> bool {
        self.owned.iter().any(|n| n == name)
            || (OWNED_METHODS.contains(name) && !self.is_user_borrow(name))
    }

    /// Owned in one library, a view of the receiver in another (and not listed by the user).
    pub(super) fn is_ambiguous(&self, name: &str) -> bool {
        AMBIGUOUS_METHODS.contains(name) && !self.owned.iter().any(|n| n == name)
    }

    /// Named in `borrows(..)`.
    pub(super) fn is_user_borrow(&self, name: &str) -> bool {
        self.borrows.iter().any(|n| n == name)
    }

    /// A borrowing name that std also defines on a by-value `self` (and the user did not list).
    pub(super) fn maybe_consumes(&self, name: &str) -> bool {
        MAYBE_CONSUMING_METHODS.contains(name) && !self.is_user_borrow(name)
    }

    /// A method whose result borrows the receiver (listed, or named in `borrows(..)`).
    pub(super) fn is_borrow_method(&self, name: &str) -> bool {
        self.is_user_borrow(name) || BORROW_METHODS.contains(name)
    }
}
