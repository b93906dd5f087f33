//! The lints: stable names, one-line explanations, short labels, and the fix in the spelling
//! of the user's tensor library.

use crate::library::Library;

/// A vramguard lint. The names are stable: users write them in `#[vramguard::allow(..)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lint {
    /// `.backward()` inside `#[inference]`, where nothing was recorded.
    BackwardInInference,
    /// A collection declared outside a loop that grows with a value of each iteration.
    AccumulatesAcrossIterations,
    /// A running total of per-iteration results (`total = (total + loss)?`).
    GraphAcrossIterations,
    /// An in-place op on an activation of the iteration with grad recording on.
    InplaceOnActivation,
    /// `empty_cache()` while values that hold memory are used after it.
    EmptyCacheIsNotFree,
    /// An evaluation function that runs the model with grad recording on.
    EvalWithoutNoGrad,
}

impl Lint {
    /// Every lint, in the order of the documentation.
    pub const ALL: [Lint; 6] = [
        Lint::BackwardInInference,
        Lint::AccumulatesAcrossIterations,
        Lint::GraphAcrossIterations,
        Lint::InplaceOnActivation,
        Lint::EmptyCacheIsNotFree,
        Lint::EvalWithoutNoGrad,
    ];

    /// The stable name (`accumulates_across_iterations`).
    pub fn name(self) -> &'static str {
        match self {
            Lint::BackwardInInference => "backward_in_inference",
            Lint::AccumulatesAcrossIterations => "accumulates_across_iterations",
            Lint::GraphAcrossIterations => "graph_across_iterations",
            Lint::InplaceOnActivation => "inplace_on_activation",
            Lint::EmptyCacheIsNotFree => "empty_cache_is_not_free",
            Lint::EvalWithoutNoGrad => "eval_without_no_grad",
        }
    }

    /// The lint of a stable name.
    pub fn from_name(name: &str) -> Option<Lint> {
        Lint::ALL.into_iter().find(|lint| lint.name() == name)
    }

    /// Why the code wastes (or cannot use) memory, in one line.
    pub fn explanation(self) -> &'static str {
        match self {
            Lint::BackwardInInference => {
                "grad recording is off under #[inference], so there is no graph to run backward on"
            }
            Lint::AccumulatesAcrossIterations => {
                "a collection declared outside the loop keeps a value of every iteration alive, \
                 so memory grows with the number of iterations"
            }
            Lint::GraphAcrossIterations => {
                "adding a per-iteration result to a value declared outside the loop chains every \
                 iteration's autograd graph (and the activations it saved) into it"
            }
            Lint::InplaceOnActivation => {
                "an in-place op on an activation overwrites what autograd saved for backward, so \
                 backward fails (or computes wrong gradients)"
            }
            Lint::EmptyCacheIsNotFree => {
                "empty_cache() only returns cached blocks nobody holds; it frees nothing that a \
                 live value still holds"
            }
            Lint::EvalWithoutNoGrad => {
                "with grad recording on, every op of the forward pass keeps its inputs for a \
                 backward pass that evaluation never runs"
            }
        }
    }

    /// A few words under the carets.
    pub fn label(self) -> &'static str {
        match self {
            Lint::BackwardInInference => "nothing was recorded for this backward",
            Lint::AccumulatesAcrossIterations => "grows by one value per iteration",
            Lint::GraphAcrossIterations => "chains this iteration's graph into the total",
            Lint::InplaceOnActivation => "overwrites a value autograd may have saved",
            Lint::EmptyCacheIsNotFree => "frees nothing that is still in use",
            Lint::EvalWithoutNoGrad => "runs the model with grad recording on",
        }
    }

    /// The usual fix, in one line, in the spelling of `library`; `value` is the value the
    /// finding is about (`feat` in `results.push(feat)`), when it names one.
    pub fn fix(self, library: Library, value: Option<&str>) -> String {
        let v = value.unwrap_or("x");
        match self {
            Lint::BackwardInInference => {
                "train outside #[inference] (e.g. in a #[batch_scope] training loop)".to_string()
            }
            Lint::AccumulatesAcrossIterations => {
                let number = library.spelled(v, Library::number);
                match library.host_copy(v) {
                    Some(copy) => format!(
                        "keep a number ({number}) or a host copy (`{copy}`), or consume the value \
                         inside the iteration"
                    ),
                    None => format!(
                        "keep a number ({number}), or consume the value inside the iteration"
                    ),
                }
            }
            Lint::GraphAcrossIterations => {
                let number = library.spelled(v, Library::number);
                match library.detached(v) {
                    Some(detached) => {
                        format!("accumulate a number ({number}) or a detached value (`{detached}`)")
                    }
                    None if library == Library::Unknown => format!(
                        "accumulate a number ({number}) or a detached value (`{v}.detach()`)"
                    ),
                    None => format!("accumulate a number ({number})"),
                }
            }
            Lint::InplaceOnActivation => format!(
                "use the out-of-place form (`let h = h.relu()`), or run the code under {}",
                library.no_grad()
            ),
            Lint::EmptyCacheIsNotFree => {
                "drop the values first (`drop(x)`), or call empty_cache() after their last use"
                    .to_string()
            }
            Lint::EvalWithoutNoGrad => format!("run it under {}", library.no_grad()),
        }
    }
}
