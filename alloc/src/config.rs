//! Allocator settings: a builder API and the `VRAMGUARD_ALLOC_CONF` environment variable.
//!
//! The variable holds `key:value` pairs separated by commas, like PyTorch's
//! `PYTORCH_CUDA_ALLOC_CONF`:
//!
//! ```text
//! VRAMGUARD_ALLOC_CONF=memory_limit:6GiB,max_split_size_mb:256,garbage_collection_threshold:0.8
//! ```
//!
//! | key | value | effect |
//! | --- | --- | --- |
//! | `memory_limit` | bytes, or a number with `B`/`KiB`/`MiB`/`GiB`/`KB`/`MB`/`GB` | the allocator never reserves more |
//! | `memory_fraction` | a number in (0, 1] | limit = fraction × device capacity |
//! | `max_split_size_mb` | MiB (more than 20, PyTorch's rule) | cached blocks this large or larger are never split |
//! | `garbage_collection_threshold` | a number in (0, 1) | release cached segments before reserved exceeds this fraction of the limit (or capacity) |
//! | `roundup_power2_divisions` (alias `round_up`) | 0 or 1 (off) or a power of two ≤ 64; or per size interval, `[256:1,512:2,>:8]` (MiB: up to 256 MiB 1, up to 512 MiB 2, above 8) | round sizes up to one of N steps between powers of two |
//! | `expandable_segments` | `auto` (the default), `true` or `false` | the large pool grows one mapped address range instead of adding segments. `auto`: on when the backend can map pages (host backend on Unix; CUDA on GPUs with virtual memory management that pass a self-test), fixed segments otherwise; `true`: on, an error where unsupported; `false`: fixed segments (PyTorch's default) |
//! | `preallocate` | bytes (same forms as `memory_limit`) | reserve this much once, at start |
//! | `iteration_planning` | `true` (the default) or `false` | lay out each `#[batch_scope]` iteration from the previous one's allocations (expandable segments only) |
//! | `trace_capacity` | events (0, the default, disables the trace) | length of the bounded event trace |
//! | `heap_tracking` | `true` (the default) or `false` | `false` makes `vramguard::TrackingAllocator` a plain pass-through for the whole process |
//!
//! The tracking allocator (`vramguard::heap`) reads the same variable once, at the process's
//! first allocation: `memory_limit` (or `memory_fraction` of the machine's physical memory)
//! becomes its soft limit on live heap bytes, `trace_capacity` starts its trace, and
//! `heap_tracking:false` turns it off; the other keys concern the device allocators only.

use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Name of the environment variable read by the process-wide devices.
pub const ENV_VAR: &str = "VRAMGUARD_ALLOC_CONF";

/// Default length of the event trace ring: 0, tracing is off unless asked for (a timestamp per
/// event costs about as much as the rest of a cached allocation).
pub const DEFAULT_TRACE_CAPACITY: usize = 0;

/// Keys accepted in `VRAMGUARD_ALLOC_CONF`.
pub const KNOWN_KEYS: &[&str] = &[
    "memory_limit",
    "memory_fraction",
    "max_split_size_mb",
    "garbage_collection_threshold",
    "roundup_power2_divisions",
    "round_up",
    "expandable_segments",
    "preallocate",
    "trace_capacity",
    "iteration_planning",
    "heap_tracking",
];

/// Whether the large pool uses an expandable segment (one reserved address range whose pages
/// are mapped as it grows) or fixed segments (PyTorch's default: each segment a separate
/// backend allocation). See the [crate documentation](crate) for the rules.
///
/// `with_expandable_segments(true)`/`(false)` set [`ExpandableSegments::On`]/[`Off`](ExpandableSegments::Off)
/// (`bool` converts with `into()`); [`CachingAllocator::uses_expandable_segments`](crate::CachingAllocator::uses_expandable_segments)
/// tells what an allocator actually runs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpandableSegments {
    /// The default: expandable segments where the backend can map pages
    /// ([`crate::Backend::virtual_memory`], and its self-test passes), fixed segments
    /// otherwise, without an error. A backend that offers page mapping but fails its self-test
    /// or cannot reserve the address range falls back with a `tracing` warning; the reason is
    /// kept ([`CachingAllocator::fixed_segments_reason`](crate::CachingAllocator::fixed_segments_reason)).
    #[default]
    Auto,
    /// Expandable segments, or an error when the backend cannot provide them
    /// (`expandable_segments:true`).
    On,
    /// Fixed segments only (`expandable_segments:false`).
    Off,
}

impl From<bool> for ExpandableSegments {
    /// `true` is [`ExpandableSegments::On`], `false` is [`ExpandableSegments::Off`].
    fn from(on: bool) -> Self {
        if on {
            ExpandableSegments::On
        } else {
            ExpandableSegments::Off
        }
    }
}

/// One interval of the list form of `roundup_power2_divisions`: sizes up to `up_to` bytes
/// (above the previous interval's) are rounded with `divisions` steps between powers of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RoundupInterval {
    /// Largest size of the interval in bytes (a power of two; written in MiB); `None` (`>`):
    /// every size above the previous interval.
    pub up_to: Option<usize>,
    /// Steps between consecutive powers of two (0 or 1: off).
    pub divisions: usize,
}

/// An upper bound on the bytes an allocator reserves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum MemoryLimit {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this fraction (0, 1] of the device capacity.
    Fraction(f64),
}

/// Settings of one caching allocator. Build with the chained setters or parse from
/// `VRAMGUARD_ALLOC_CONF`; [`AllocatorConfig::validate`] runs when an allocator is created.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorConfig {
    /// Upper bound on reserved bytes (`None`: the device capacity only).
    pub memory_limit: Option<MemoryLimit>,
    /// Cached blocks of at least this many bytes are not split, and serve only requests close in
    /// size (`None`: no limit, every block can be split).
    pub max_split_size: Option<usize>,
    /// Fraction of the limit (of the device capacity when no limit is set) above which cached
    /// segments are released before new ones are reserved (`None`: only on out-of-memory).
    pub garbage_collection_threshold: Option<f64>,
    /// Round sizes up to one of this many steps between consecutive powers of two (0 or 1:
    /// off, plain 512-byte rounding, as in PyTorch). Ignored when
    /// [`AllocatorConfig::roundup_power2_intervals`] is set.
    pub roundup_power2_divisions: usize,
    /// Divisions per size interval (`roundup_power2_divisions:[256:1,512:2,>:8]`), in
    /// increasing order; empty: [`AllocatorConfig::roundup_power2_divisions`] for every size.
    pub roundup_power2_intervals: Vec<RoundupInterval>,
    /// Expandable segments: the large pool is one reserved address range whose pages are mapped
    /// as it grows and unmapped (free tail) by `empty_cache`, so a large request needs no
    /// contiguous free hole among segments. Needs a backend with
    /// [`crate::Backend::virtual_memory`] (the host backend on Unix; CUDA on GPUs with
    /// virtual memory management). Default [`ExpandableSegments::Auto`]: on wherever the backend
    /// can map pages.
    pub expandable_segments: ExpandableSegments,
    /// Bytes reserved once when the allocator is created (see `vramguard::memory::reserve`).
    pub preallocate: usize,
    /// Events kept by the trace ring (0 disables tracing).
    pub trace_capacity: usize,
    /// Lay out each batch-scope iteration from the recording of the scope's previous one
    /// (offline planning made online; expandable segments only). On by default.
    pub iteration_planning: bool,
    /// Whether `vramguard::TrackingAllocator`, when it is the global allocator, tracks the
    /// heap (`heap_tracking:false` makes it a plain pass-through). Device allocators ignore it.
    pub heap_tracking: bool,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        Self {
            memory_limit: None,
            max_split_size: None,
            garbage_collection_threshold: None,
            roundup_power2_divisions: 0,
            roundup_power2_intervals: Vec::new(),
            expandable_segments: ExpandableSegments::Auto,
            preallocate: 0,
            trace_capacity: DEFAULT_TRACE_CAPACITY,
            iteration_planning: true,
            heap_tracking: true,
        }
    }
}

/// A setting that cannot be used. The message names the key and the accepted form.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A key the allocator does not know.
    #[error("unknown allocator setting `{key}` in {ENV_VAR}; known keys: {}", KNOWN_KEYS.join(", "))]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// The same setting given twice (or two spellings of one: `memory_limit` and
    /// `memory_fraction`, `roundup_power2_divisions` and `round_up`).
    #[error(
        "allocator setting `{key}` in {ENV_VAR} is given twice (also as `{earlier}`): keep one"
    )]
    Duplicate {
        /// The second key as written.
        key: String,
        /// The earlier key that sets the same thing.
        earlier: String,
    },
    /// An entry without `:`.
    #[error("malformed entry `{entry}` in {ENV_VAR}: write `key:value` pairs separated by commas, e.g. `memory_limit:4GiB,max_split_size_mb:128`")]
    Malformed {
        /// The entry as written.
        entry: String,
    },
    /// A value that does not parse or is out of range.
    #[error("bad value `{value}` for allocator setting `{key}`: expected {expected}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// The accepted form.
        expected: &'static str,
    },
}

/// An allocator that cannot be created with its settings on this backend: a bad setting, or
/// one the device cannot honour. The message says what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetupError {
    /// A setting that does not parse or is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `expandable_segments:true` on a backend that cannot map pages.
    #[error("`expandable_segments:true` is not supported: {device} cannot map pages into reserved address space (the host backend on Unix and CUDA on GPUs with virtual memory management can); set `expandable_segments:false`, or `auto` to use them only where available")]
    ExpandableUnsupported {
        /// Device name.
        device: String,
    },
    /// The `preallocate` reservation failed.
    #[error("could not preallocate {bytes} bytes: {message}; lower `preallocate`")]
    PreallocateFailed {
        /// Bytes asked for.
        bytes: usize,
        /// The out-of-memory message.
        message: String,
    },
    /// `expandable_segments:true` on a backend whose page mapping failed its self-test at
    /// allocator creation.
    #[error("`expandable_segments:true`: {device} offers virtual memory management, but its self-test failed: {reason}; set `expandable_segments:false` (fixed segments), or `auto` to fall back by itself")]
    ExpandableSelfTestFailed {
        /// Device name.
        device: String,
        /// The step of the self-test that failed, with the backend's message.
        reason: String,
    },
    /// Address space for expandable segments could not be reserved.
    #[error("could not reserve {bytes} bytes of address space for expandable segments: {message}; set `memory_limit` to reserve less, or set `expandable_segments:false` (or `auto`, which falls back to fixed segments by itself)")]
    ReserveFailed {
        /// Bytes of address space asked for.
        bytes: usize,
        /// The backend's message.
        message: String,
    },
    /// `memory_fraction` on a device whose capacity is unknown.
    #[error("`memory_fraction` needs a device with a known capacity, and {device} has none: use `memory_limit` (bytes) instead")]
    FractionWithoutCapacity {
        /// Device name.
        device: String,
    },
}

const BYTES_FORM: &str =
    "a byte count, optionally with a suffix B, KiB, MiB, GiB (or KB, MB, GB), e.g. `512MiB`";
const FRACTION_FORM: &str = "a number in (0, 1], e.g. `0.8`";
const THRESHOLD_FORM: &str = "a number strictly between 0 and 1, e.g. `0.8`";
const SPLIT_FORM: &str = "a whole number of MiB greater than 20, e.g. `256` (as in PyTorch: \
     blocks of at least the max split size serve only requests less than 20 MiB smaller, and \
     large segments are 20 MiB, so a smaller max split size would leave them unsplittable)";
const DIVISIONS_FORM: &str = "0 or 1 (off) or a power of two up to 64, e.g. `4`, or per interval \
     `[256:1,512:2,>:8]` (interval ends in MiB, powers of two, increasing; `>` for the rest)";
/// Smallest accepted max split size: more than PyTorch's 20 MiB (`kLargeBuffer`).
#[doc(hidden)]
pub const MIN_MAX_SPLIT: usize = 20 * MIB + 1;
const EXPANDABLE_FORM: &str =
    "`auto` (on where the backend can map pages; the default), `true` or `false`";
const PLANNING_FORM: &str = "`true` (the default) or `false`";
const COUNT_FORM: &str = "a whole number of events, e.g. `4096` (0 disables the trace)";

impl AllocatorConfig {
    /// Sets a memory limit in bytes.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(MemoryLimit::Bytes(bytes));
        self
    }
    /// Sets a memory limit as a fraction of the device capacity.
    pub fn with_memory_fraction(mut self, fraction: f64) -> Self {
        self.memory_limit = Some(MemoryLimit::Fraction(fraction));
        self
    }
    /// Sets the max split size in bytes.
    pub fn with_max_split_size(mut self, bytes: usize) -> Self {
        self.max_split_size = Some(bytes);
        self
    }
    /// Sets the garbage-collection threshold (fraction of the limit, or of the capacity).
    pub fn with_garbage_collection_threshold(mut self, fraction: f64) -> Self {
        self.garbage_collection_threshold = Some(fraction);
        self
    }
    /// Sets power-of-two round-up divisions for every size (0 or 1: off).
    pub fn with_roundup_power2_divisions(mut self, divisions: usize) -> Self {
        self.roundup_power2_divisions = divisions;
        self.roundup_power2_intervals.clear();
        self
    }
    /// Sets round-up divisions per size interval: `(Some(up_to_bytes), divisions)` in
    /// increasing order, optionally ending with `(None, divisions)` for every larger size.
    pub fn with_roundup_power2_intervals(
        mut self,
        intervals: impl IntoIterator<Item = (Option<usize>, usize)>,
    ) -> Self {
        self.roundup_power2_intervals = intervals
            .into_iter()
            .map(|(up_to, divisions)| RoundupInterval { up_to, divisions })
            .collect();
        self
    }

    /// The round-up divisions for a request of `bytes` (0 or 1: plain 512-byte rounding).
    #[inline]
    pub fn divisions_for(&self, bytes: usize) -> usize {
        if self.roundup_power2_intervals.is_empty() {
            return self.roundup_power2_divisions;
        }
        self.roundup_power2_intervals
            .iter()
            .find(|i| i.up_to.is_none_or(|u| bytes <= u))
            .map_or(0, |i| i.divisions)
    }
    /// Sets expandable segments: `true` ([`ExpandableSegments::On`]: an error where the backend
    /// cannot map pages), `false` ([`ExpandableSegments::Off`]: fixed segments), or an
    /// [`ExpandableSegments`] (e.g. back to [`ExpandableSegments::Auto`], the default).
    pub fn with_expandable_segments(mut self, mode: impl Into<ExpandableSegments>) -> Self {
        self.expandable_segments = mode.into();
        self
    }
    /// Bytes to reserve when the allocator is created.
    pub fn with_preallocate(mut self, bytes: usize) -> Self {
        self.preallocate = bytes;
        self
    }
    /// Turns iteration planning on (the default) or off.
    pub fn with_iteration_planning(mut self, on: bool) -> Self {
        self.iteration_planning = on;
        self
    }
    /// Length of the event trace (0 disables it).
    pub fn with_trace_capacity(mut self, events: usize) -> Self {
        self.trace_capacity = events;
        self
    }

    /// Checks the ranges of every setting; [`AllocatorConfig::parse`] runs it once after
    /// setting the fields, and allocator creation runs it for configurations built in code.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, value: String, expected| ConfigError::BadValue {
            key: key.to_string(),
            value,
            expected,
        };
        if let Some(MemoryLimit::Fraction(f)) = self.memory_limit {
            if !(f > 0.0 && f <= 1.0) {
                return Err(bad("memory_fraction", f.to_string(), FRACTION_FORM));
            }
        }
        if let Some(s) = self.max_split_size {
            if s < MIN_MAX_SPLIT {
                return Err(bad("max_split_size_mb", format!("{s} bytes"), SPLIT_FORM));
            }
        }
        if let Some(t) = self.garbage_collection_threshold {
            if !(t > 0.0 && t < 1.0) {
                return Err(bad(
                    "garbage_collection_threshold",
                    t.to_string(),
                    THRESHOLD_FORM,
                ));
            }
        }
        let divisions_ok = |d: usize| d == 0 || (d.is_power_of_two() && d <= 64);
        let d = self.roundup_power2_divisions;
        if !divisions_ok(d) {
            return Err(bad(
                "roundup_power2_divisions",
                d.to_string(),
                DIVISIONS_FORM,
            ));
        }
        let mut previous = 0;
        for (i, interval) in self.roundup_power2_intervals.iter().enumerate() {
            let last = i + 1 == self.roundup_power2_intervals.len();
            let end_ok = match interval.up_to {
                Some(u) => u.is_power_of_two() && u >= MIB && u > previous,
                None => last,
            };
            if !end_ok || !divisions_ok(interval.divisions) {
                return Err(bad(
                    "roundup_power2_divisions",
                    format!("{:?}", self.roundup_power2_intervals),
                    DIVISIONS_FORM,
                ));
            }
            previous = interval.up_to.unwrap_or(usize::MAX);
        }
        Ok(())
    }

    /// Parses `key:value,key:value` (whitespace around items is ignored; empty input gives
    /// the defaults): each value is read into its field, then [`AllocatorConfig::validate`]
    /// checks the ranges once; its errors name the key and the value as written.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut cfg = AllocatorConfig::default();
        // (setting, key as written, value as written) for each entry so far.
        let mut seen: Vec<(&str, &str, &str)> = Vec::new();
        for entry in split_entries(text)
            .into_iter()
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let Some((key, value)) = entry.split_once(':') else {
                return Err(ConfigError::Malformed {
                    entry: entry.to_string(),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            let setting = match key {
                "memory_fraction" => "memory_limit",
                "round_up" => "roundup_power2_divisions",
                k => k,
            };
            if let Some(&(_, earlier, _)) = seen.iter().find(|(s, _, _)| *s == setting) {
                return Err(ConfigError::Duplicate {
                    key: key.to_string(),
                    earlier: earlier.to_string(),
                });
            }
            if KNOWN_KEYS.contains(&key) {
                seen.push((setting, key, value));
            }
            cfg.set(key, value)?;
        }
        cfg.validate().map(|()| cfg).map_err(|e| match e {
            // Name the setting as it was written (`round_up`, `max_split_size_mb:0`).
            ConfigError::BadValue { key, expected, .. } => {
                let setting = if key == "memory_fraction" {
                    "memory_limit"
                } else {
                    &key
                };
                match seen.iter().find(|(s, _, _)| *s == setting) {
                    Some(&(_, written, value)) => ConfigError::BadValue {
                        key: written.to_string(),
                        value: value.to_string(),
                        expected,
                    },
                    None => ConfigError::BadValue {
                        key,
                        value: String::new(),
                        expected,
                    },
                }
            }
            other => other,
        })
    }

    /// Reads one `key:value` entry into its field (syntax only; ranges are `validate`'s).
    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |expected| ConfigError::BadValue {
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        match key {
            "memory_limit" => {
                let bytes = parse_bytes(value).ok_or_else(|| bad(BYTES_FORM))?;
                self.memory_limit = Some(MemoryLimit::Bytes(bytes));
            }
            "memory_fraction" => {
                let f: f64 = value.parse().map_err(|_| bad(FRACTION_FORM))?;
                self.memory_limit = Some(MemoryLimit::Fraction(f));
            }
            "max_split_size_mb" => {
                let mb: usize = value.parse().map_err(|_| bad(SPLIT_FORM))?;
                self.max_split_size = Some(mb.checked_mul(MIB).ok_or_else(|| bad(SPLIT_FORM))?);
            }
            "garbage_collection_threshold" => {
                let t: f64 = value.parse().map_err(|_| bad(THRESHOLD_FORM))?;
                self.garbage_collection_threshold = Some(t);
            }
            "roundup_power2_divisions" | "round_up" => match value.strip_prefix('[') {
                Some(list) => {
                    let list = list.strip_suffix(']').ok_or_else(|| bad(DIVISIONS_FORM))?;
                    let mut intervals = Vec::new();
                    for item in list.split(',').map(str::trim) {
                        let (end, d) = item.split_once(':').ok_or_else(|| bad(DIVISIONS_FORM))?;
                        let up_to = match end.trim() {
                            ">" => None,
                            mb => Some(
                                mb.parse::<usize>()
                                    .ok()
                                    .and_then(|mb| mb.checked_mul(MIB))
                                    .ok_or_else(|| bad(DIVISIONS_FORM))?,
                            ),
                        };
                        let divisions = d.trim().parse().map_err(|_| bad(DIVISIONS_FORM))?;
                        intervals.push(RoundupInterval { up_to, divisions });
                    }
                    self.roundup_power2_intervals = intervals;
                }
                None => {
                    self.roundup_power2_divisions =
                        value.parse().map_err(|_| bad(DIVISIONS_FORM))?;
                }
            },
            "expandable_segments" => {
                self.expandable_segments = match value {
                    "auto" | "Auto" => ExpandableSegments::Auto,
                    "true" | "True" | "1" => ExpandableSegments::On,
                    "false" | "False" | "0" => ExpandableSegments::Off,
                    _ => return Err(bad(EXPANDABLE_FORM)),
                }
            }
            "preallocate" => {
                let bytes = parse_bytes(value).ok_or_else(|| bad(BYTES_FORM))?;
                self.preallocate = usize::try_from(bytes).map_err(|_| bad(BYTES_FORM))?;
            }
            "iteration_planning" => {
                self.iteration_planning = match value {
                    "true" | "True" | "1" => true,
                    "false" | "False" | "0" => false,
                    _ => return Err(bad(PLANNING_FORM)),
                }
            }
            "trace_capacity" => {
                self.trace_capacity = value.parse().map_err(|_| bad(COUNT_FORM))?;
            }
            "heap_tracking" => {
                self.heap_tracking = match value {
                    "true" | "True" | "1" => true,
                    "false" | "False" | "0" => false,
                    _ => return Err(bad(PLANNING_FORM)),
                }
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_string(),
                })
            }
        }
        Ok(())
    }

    /// Reads [`ENV_VAR`] now; unset gives the defaults. (The process-wide devices read it once,
    /// when the first of them is created.)
    pub fn from_env() -> Result<Self, ConfigError> {
        match std::env::var(ENV_VAR) {
            Ok(text) => Self::parse(&text),
            Err(_) => Ok(Self::default()),
        }
    }

    /// The limit in bytes on a device of `capacity` bytes (`None`: unlimited).
    #[doc(hidden)]
    pub fn limit_bytes(
        &self,
        capacity: Option<usize>,
        device: &str,
    ) -> Result<Option<u64>, SetupError> {
        match self.memory_limit {
            None => Ok(None),
            Some(MemoryLimit::Bytes(b)) => Ok(Some(b)),
            Some(MemoryLimit::Fraction(f)) => match capacity {
                Some(c) => Ok(Some((c as f64 * f) as u64)),
                None => Err(SetupError::FractionWithoutCapacity {
                    device: device.to_string(),
                }),
            },
        }
    }
}

const MIB: usize = 1 << 20;

/// [`ENV_VAR`], parsed once per process for the process-wide devices (which report a bad
/// value: `Device::cuda` returns it, the host device prints it once).
#[doc(hidden)]
pub fn env_config() -> Result<AllocatorConfig, ConfigError> {
    static CONFIG: OnceLock<Result<AllocatorConfig, ConfigError>> = OnceLock::new();
    CONFIG.get_or_init(AllocatorConfig::from_env).clone()
}

/// Whether a bad [`ENV_VAR`] has been reported (on stderr or to `tracing`) in this process.
static ENV_ERROR_REPORTED: AtomicBool = AtomicBool::new(false);
/// Whether [`check_env_once`] has run.
static ENV_CHECKED: AtomicBool = AtomicBool::new(false);

/// Says once per process that [`ENV_VAR`] is unusable and that the defaults apply. Every place
/// that reads the variable reports through here, so the message appears once wherever
/// vramguard is linked: the host device, the macros' guards, batch scopes, the tracking
/// allocator.
#[doc(hidden)]
pub fn report_env_error_once(error: &ConfigError) {
    if !ENV_ERROR_REPORTED.swap(true, Ordering::Relaxed) {
        crate::diagnostics::error(&format!(
            "{ENV_VAR}: {error}; vramguard uses the default allocator settings \
             (memory::config_error() returns this error)"
        ));
    }
}

/// Reads [`ENV_VAR`] the first time it is called and reports a bad value
/// ([`report_env_error_once`]); after that, one relaxed load. The code the macros generate
/// reaches it through the no-grad guard and batch scopes, so a program that uses only the
/// macros hears about a typo too.
#[inline]
#[doc(hidden)]
pub fn check_env_once() {
    if !ENV_CHECKED.load(Ordering::Relaxed) {
        check_env_slow();
    }
}

#[cold]
fn check_env_slow() {
    ENV_CHECKED.store(true, Ordering::Relaxed);
    if let Err(e) = env_config() {
        report_env_error_once(&e);
    }
}

/// Splits `key:value,key:[a:b,c:d]` at the commas outside brackets.
fn split_entries(text: &str) -> Vec<&str> {
    let (mut entries, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth <= 0 => {
                entries.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    entries.push(&text[start..]);
    entries
}

/// Parses `123`, `123B`, `4KiB`, `1.5GiB`, `512MB` ... into bytes.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit_bytes: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "KiB" | "K" | "k" | "kib" => 1 << 10,
        "MiB" | "M" | "m" | "mib" => 1 << 20,
        "GiB" | "G" | "g" | "gib" => 1 << 30,
        "TiB" | "T" | "tib" => 1 << 40,
        "KB" | "kB" | "kb" => 1_000,
        "MB" | "mb" => 1_000_000,
        "GB" | "gb" => 1_000_000_000,
        "TB" | "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if number.is_empty() {
        return None;
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole.checked_mul(unit_bytes);
    }
    let value: f64 = number.parse().ok()?;
    let bytes = value * unit_bytes as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_key() {
        let cfg = AllocatorConfig::parse(
            " memory_limit:6GiB, max_split_size_mb:256,garbage_collection_threshold:0.8,\
             round_up:4,expandable_segments:false,preallocate:64MiB,trace_capacity:10",
        )
        .unwrap();
        assert_eq!(cfg.memory_limit, Some(MemoryLimit::Bytes(6 << 30)));
        assert_eq!(cfg.max_split_size, Some(256 << 20));
        assert_eq!(cfg.garbage_collection_threshold, Some(0.8));
        assert_eq!(cfg.roundup_power2_divisions, 4);
        assert_eq!(cfg.preallocate, 64 << 20);
        assert_eq!(cfg.trace_capacity, 10);
        assert_eq!(cfg.expandable_segments, ExpandableSegments::Off);
        assert_eq!(AllocatorConfig::default().trace_capacity, 0);
        let f = AllocatorConfig::parse("memory_fraction:0.5").unwrap();
        assert_eq!(f.memory_limit, Some(MemoryLimit::Fraction(0.5)));
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
    }

    #[test]
    fn byte_suffixes() {
        assert_eq!(parse_bytes("1024"), Some(1024));
        assert_eq!(parse_bytes("2KiB"), Some(2048));
        assert_eq!(parse_bytes("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_bytes("3MB"), Some(3_000_000));
        assert_eq!(parse_bytes("12 MiB"), Some(12 << 20));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("5XB"), None);
        assert_eq!(parse_bytes("99999999999999999999GiB"), None);
    }

    #[test]
    fn errors_name_the_key_and_the_form() {
        let e = AllocatorConfig::parse("max_split:12").unwrap_err();
        assert_eq!(
            e,
            ConfigError::UnknownKey {
                key: "max_split".into()
            }
        );
        assert!(e.to_string().contains("max_split_size_mb"), "{e}");

        let e = AllocatorConfig::parse("memory_limit:lots").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("`memory_limit`") && msg.contains("GiB"),
            "{msg}"
        );

        for bad in [
            "memory_fraction:1.5",
            "garbage_collection_threshold:1",
            "max_split_size_mb:0",
            "round_up:3",
            "expandable_segments:maybe",
            "trace_capacity:-1",
        ] {
            let e = AllocatorConfig::parse(bad).unwrap_err();
            let key = bad.split(':').next().unwrap();
            assert!(
                matches!(&e, ConfigError::BadValue { key: k, .. } if k == key),
                "{bad}: {e:?}"
            );
        }
        let e = AllocatorConfig::parse("memory_limit").unwrap_err();
        assert!(matches!(e, ConfigError::Malformed { .. }));
        for (text, key, earlier) in [
            (
                "memory_limit:1GiB, memory_limit:2GiB",
                "memory_limit",
                "memory_limit",
            ),
            (
                "memory_limit:1GiB,memory_fraction:0.5",
                "memory_fraction",
                "memory_limit",
            ),
            (
                "round_up:4,roundup_power2_divisions:8",
                "roundup_power2_divisions",
                "round_up",
            ),
            (
                "trace_capacity:1,expandable_segments:true,trace_capacity:1",
                "trace_capacity",
                "trace_capacity",
            ),
        ] {
            let e = AllocatorConfig::parse(text).unwrap_err();
            assert_eq!(
                e,
                ConfigError::Duplicate {
                    key: key.into(),
                    earlier: earlier.into()
                },
                "{text}"
            );
            assert!(e.to_string().contains(&format!("`{key}`")), "{e}");
        }
        assert_eq!(
            AllocatorConfig::parse("expandable_segments:true")
                .unwrap()
                .expandable_segments,
            ExpandableSegments::On
        );
    }

    #[test]
    fn expandable_segments_is_auto_by_default_and_parses_three_ways() {
        assert_eq!(
            AllocatorConfig::default().expandable_segments,
            ExpandableSegments::Auto
        );
        for (value, mode) in [
            ("auto", ExpandableSegments::Auto),
            ("Auto", ExpandableSegments::Auto),
            ("true", ExpandableSegments::On),
            ("1", ExpandableSegments::On),
            ("false", ExpandableSegments::Off),
            ("False", ExpandableSegments::Off),
            ("0", ExpandableSegments::Off),
        ] {
            let cfg = AllocatorConfig::parse(&format!("expandable_segments:{value}")).unwrap();
            assert_eq!(cfg.expandable_segments, mode, "{value}");
        }
        // `auto` written out equals the default; the other keys keep their defaults.
        assert_eq!(
            AllocatorConfig::parse("expandable_segments:auto").unwrap(),
            AllocatorConfig::default()
        );
        // A bad value lists every accepted form.
        let e = AllocatorConfig::parse("expandable_segments:yes").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadValue { key, value, .. }
                if key == "expandable_segments" && value == "yes"),
            "{e:?}"
        );
        let msg = e.to_string();
        for form in ["`auto`", "`true`", "`false`"] {
            assert!(msg.contains(form), "{msg}");
        }
        // The builder takes a bool or the mode itself.
        let b = AllocatorConfig::default();
        assert_eq!(
            b.clone().with_expandable_segments(true).expandable_segments,
            ExpandableSegments::On
        );
        assert_eq!(
            b.clone()
                .with_expandable_segments(false)
                .expandable_segments,
            ExpandableSegments::Off
        );
        assert_eq!(
            b.with_expandable_segments(false)
                .with_expandable_segments(ExpandableSegments::Auto)
                .expandable_segments,
            ExpandableSegments::Auto
        );
        let json = serde_json::to_value(AllocatorConfig::default()).unwrap();
        assert_eq!(json["expandable_segments"], "auto");
    }

    #[test]
    fn builder_is_validated() {
        assert!(AllocatorConfig::default()
            .with_memory_limit(1 << 30)
            .with_max_split_size(64 << 20)
            .with_garbage_collection_threshold(0.7)
            .with_roundup_power2_divisions(8)
            .validate()
            .is_ok());
        assert!(AllocatorConfig::default()
            .with_memory_fraction(0.0)
            .validate()
            .is_err());
        assert!(AllocatorConfig::default()
            .with_max_split_size(1000)
            .validate()
            .is_err());
        assert!(AllocatorConfig::default()
            .with_expandable_segments(true)
            .validate()
            .is_ok());
    }
}
