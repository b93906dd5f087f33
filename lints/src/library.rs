//! The tensor libraries whose spelling the fixes use, and what each says about the rules
//! (whether it records autograd graphs, whether it has a switch to turn recording off).

/// A tensor library, as the user's crate names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Library {
    /// candle (`candle-core`, `candle-nn`, `candle-transformers`).
    Candle,
    /// burn (`burn`, `burn-core`, `burn-tensor`, …).
    Burn,
    /// tch, the libtorch bindings.
    Tch,
    /// dfdx.
    Dfdx,
    /// vramguard's own `Tensor`.
    Vramguard,
    /// ndarray: host arrays, no autograd.
    Ndarray,
    /// None of these, or not known (the macros do not read the crate's dependencies).
    Unknown,
}

impl Library {
    /// Every known library, in the order that breaks ties when a file uses several (ndarray
    /// last: crates often use it beside a tensor library, for host data).
    pub const KNOWN: [Library; 6] = [
        Library::Candle,
        Library::Burn,
        Library::Tch,
        Library::Dfdx,
        Library::Vramguard,
        Library::Ndarray,
    ];

    /// The library a package of this name belongs to (`candle-nn` → candle).
    pub fn of_package(package: &str) -> Option<Library> {
        let package = package.replace('_', "-");
        let library = match package.as_str() {
            "candle-core" | "candle-nn" | "candle-transformers" => Library::Candle,
            "tch" => Library::Tch,
            "dfdx" | "dfdx-core" => Library::Dfdx,
            "vramguard" => Library::Vramguard,
            "ndarray" => Library::Ndarray,
            p if p == "burn" || p.starts_with("burn-") => Library::Burn,
            _ => return None,
        };
        Some(library)
    }

    /// The library's name as users say it.
    pub fn name(self) -> &'static str {
        match self {
            Library::Candle => "candle",
            Library::Burn => "burn",
            Library::Tch => "tch",
            Library::Dfdx => "dfdx",
            Library::Vramguard => "vramguard",
            Library::Ndarray => "ndarray",
            Library::Unknown => "unknown",
        }
    }

    /// Whether the library may record an autograd graph through ordinary ops (ndarray never
    /// does; a library not known may).
    pub fn records_graphs(self) -> bool {
        self != Library::Ndarray
    }

    /// Whether the library records by default and has a switch to turn recording off (tch's
    /// `no_grad`, vramguard's `#[inference]`): only there is forgetting the switch visible in
    /// syntax. candle records only through `Var`s, burn only on an autodiff backend (whose
    /// escape is `.valid()`), dfdx only on a traced tensor.
    pub fn has_grad_switch(self) -> bool {
        matches!(self, Library::Tch | Library::Vramguard)
    }

    /// `value` turned into a host number, in the library's spelling (`None` when not known).
    pub fn number(self, value: &str) -> Option<String> {
        Some(match self {
            Library::Candle => format!("{value}.to_scalar::<f32>()?"),
            Library::Burn => format!("{value}.into_scalar()"),
            Library::Tch => format!("{value}.double_value(&[])"),
            Library::Dfdx => format!("{value}.array()"),
            Library::Vramguard => format!("{value}.to_scalar()?"),
            Library::Ndarray => format!("{value}.sum()"),
            Library::Unknown => return None,
        })
    }

    /// `value` copied to host memory, in the library's spelling (`None` for ndarray, whose
    /// arrays are host memory already, and when not known).
    pub fn host_copy(self, value: &str) -> Option<String> {
        Some(match self {
            Library::Candle => format!("{value}.to_vec1::<f32>()?"),
            Library::Burn => format!("{value}.into_data()"),
            Library::Tch => format!("Vec::<f32>::try_from(&{value})?"),
            Library::Dfdx => format!("{value}.as_vec()"),
            Library::Vramguard => format!("{value}.to_vec()?"),
            Library::Ndarray | Library::Unknown => return None,
        })
    }

    /// `value` without its autograd history (`None` where the library has none to drop, and
    /// when not known).
    pub fn detached(self, value: &str) -> Option<String> {
        match self {
            Library::Dfdx | Library::Ndarray | Library::Unknown => None,
            _ => Some(format!("{value}.detach()")),
        }
    }

    /// `code(self, value)` in backticks; for a library not known, the spelling of the common
    /// ones side by side (`` `a` in candle, `b` in burn ``).
    pub(crate) fn spelled(self, value: &str, code: fn(Library, &str) -> Option<String>) -> String {
        if let Some(text) = code(self, value) {
            return format!("`{text}`");
        }
        [Library::Candle, Library::Burn, Library::Tch]
            .into_iter()
            .filter_map(|library| {
                Some(format!("`{}` in {}", code(library, value)?, library.name()))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How code runs with grad recording off, in the library's spelling.
    pub fn no_grad(self) -> &'static str {
        match self {
            Library::Tch => "`tch::no_grad(|| ..)` (or `let _guard = tch::no_grad_guard();`)",
            Library::Vramguard => "`#[vramguard::inference]` (or `vramguard::no_grad(|| ..)`)",
            Library::Burn => "a backend without autodiff (`model.valid()`)",
            _ => "no_grad",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_map_to_their_library_and_fixes_use_its_spelling() {
        assert_eq!(Library::of_package("candle-nn"), Some(Library::Candle));
        assert_eq!(Library::of_package("burn_tensor"), Some(Library::Burn));
        assert_eq!(Library::of_package("burnish"), None);
        assert_eq!(
            Library::Candle.spelled("loss", Library::number),
            "`loss.to_scalar::<f32>()?`"
        );
        assert_eq!(
            Library::Unknown.spelled("loss", Library::number),
            "`loss.to_scalar::<f32>()?` in candle, `loss.into_scalar()` in burn, \
             `loss.double_value(&[])` in tch"
        );
        assert_eq!(Library::Ndarray.host_copy("a"), None);
        assert!(!Library::Ndarray.records_graphs());
        assert!(Library::Tch.has_grad_switch() && !Library::Candle.has_grad_switch());
    }
}
