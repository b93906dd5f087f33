//! The fake's settings, read once from the environment (see the crate documentation for each
//! variable), and the failure-injection rules of `FAKE_CUDA_FAIL`.

use crate::errors::{self, CuResult};

/// The granularity of device memory: virtual-memory mappings, physical pages, pool chunks.
pub const GRANULE: usize = 2 << 20;

/// The settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Device memory in bytes (`FAKE_CUDA_MEMORY`, default 48 GiB).
    pub memory: usize,
    /// Run queued work at once (`FAKE_CUDA_EAGER=1`) instead of when something waits for it.
    pub eager: bool,
    /// Queries of an unfinished event (or stream) after which one more operation of its stream
    /// runs (`FAKE_CUDA_POLL_STEPS`, default 100): polling loops make progress.
    pub poll_steps: u32,
    /// Operations a stream may hold queued before its oldest runs (`FAKE_CUDA_QUEUE_LIMIT`,
    /// default 4096).
    pub queue_limit: usize,
    /// Shared libraries holding the kernels' host builds (`FAKE_CUDA_HOST_KERNELS`, `:`-separated).
    pub host_kernels: Vec<String>,
    /// Report every call on stderr (`FAKE_CUDA_LOG=1`).
    pub log: bool,
    /// Leaks at exit fail the process (`FAKE_CUDA_STRICT=1`).
    pub strict: bool,
    /// Whether the device reports virtual memory management (`FAKE_CUDA_VMM=0` turns it off).
    pub vmm: bool,
    /// Whether the device reports memory pools (`FAKE_CUDA_POOLS=0` turns them off).
    pub pools: bool,
    /// Calls to fail (`FAKE_CUDA_FAIL`).
    pub failures: Vec<FailRule>,
}

/// One rule of `FAKE_CUDA_FAIL`: `NAME:N[+][:ERROR]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailRule {
    /// The function, with or without its `_v2` suffix (`cuMemCreate`, `cuMemAlloc`).
    pub function: String,
    /// The first call (counting from 1) that fails.
    pub from: u64,
    /// Whether every later call fails too (`N+`), or only call `N`.
    pub onwards: bool,
    /// The error returned (default `CUDA_ERROR_OUT_OF_MEMORY` for calls that allocate,
    /// `CUDA_ERROR_UNKNOWN` otherwise).
    pub error: Option<CuResult>,
}

impl FailRule {
    /// Whether the `count`-th call (from 1) of `function` fails.
    pub fn matches(&self, function: &str, count: u64) -> bool {
        let base = function.strip_suffix("_v2").unwrap_or(function);
        (self.function == function || self.function == base)
            && if self.onwards {
                count >= self.from
            } else {
                count == self.from
            }
    }
}

/// Bytes from `48GiB`, `512MiB`, `1024` (bytes), `8G`.
pub fn parse_bytes(text: &str) -> Option<usize> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits.parse().ok()?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" | "k" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return None,
    };
    n.checked_mul(1usize << shift)
}

/// The rules of `FAKE_CUDA_FAIL` (`cuMemCreate:3,cuEventRecord:1+:CUDA_ERROR_LAUNCH_FAILED`).
pub fn parse_failures(text: &str) -> Result<Vec<FailRule>, String> {
    let mut rules = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let function = parts.next().unwrap_or_default().to_string();
        let count = parts
            .next()
            .ok_or_else(|| format!("`{item}`: expected NAME:N[+][:ERROR]"))?;
        let (count, onwards) = match count.strip_suffix('+') {
            Some(c) => (c, true),
            None => (count, false),
        };
        let from: u64 = count
            .parse()
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| format!("`{item}`: the call number must be 1 or more"))?;
        let error = match parts.next() {
            Some(e) => Some(errors::code(e).ok_or_else(|| format!("`{item}`: unknown error {e}"))?),
            None => None,
        };
        if parts.next().is_some() || function.is_empty() {
            return Err(format!("`{item}`: expected NAME:N[+][:ERROR]"));
        }
        rules.push(FailRule {
            function,
            from,
            onwards,
            error,
        });
    }
    Ok(rules)
}

fn flag(name: &str, default: bool) -> bool {
    match std::env::var(name) {
        Ok(v) => v == "1" || v.eq_ignore_ascii_case("true"),
        Err(_) => default,
    }
}

impl Config {
    /// The settings of this process; a malformed variable is reported on stderr and its
    /// default used.
    pub fn from_env() -> Config {
        let number = |name: &str, default: usize| -> usize {
            match std::env::var(name) {
                Ok(v) => v.parse().unwrap_or_else(|_| {
                    eprintln!("fake cuda: {name}={v} is not a number; using {default}");
                    default
                }),
                Err(_) => default,
            }
        };
        let memory = match std::env::var("FAKE_CUDA_MEMORY") {
            Ok(v) => match parse_bytes(&v) {
                Some(b) if b >= GRANULE => b / GRANULE * GRANULE,
                _ => {
                    eprintln!(
                        "fake cuda: FAKE_CUDA_MEMORY={v} is not a size like 48GiB; using 48GiB"
                    );
                    48 << 30
                }
            },
            Err(_) => 48 << 30,
        };
        let failures = match std::env::var("FAKE_CUDA_FAIL") {
            Ok(v) => parse_failures(&v).unwrap_or_else(|e| {
                eprintln!("fake cuda: FAKE_CUDA_FAIL: {e}; no failure injected");
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        Config {
            memory,
            eager: flag("FAKE_CUDA_EAGER", false),
            poll_steps: number("FAKE_CUDA_POLL_STEPS", 100).max(1) as u32,
            queue_limit: number("FAKE_CUDA_QUEUE_LIMIT", 4096).max(1),
            host_kernels: std::env::var("FAKE_CUDA_HOST_KERNELS")
                .map(|v| {
                    v.split(':')
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            log: flag("FAKE_CUDA_LOG", false),
            strict: flag("FAKE_CUDA_STRICT", false),
            vmm: flag("FAKE_CUDA_VMM", true),
            pools: flag("FAKE_CUDA_POOLS", true),
            failures,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_their_units() {
        assert_eq!(parse_bytes("48GiB"), Some(48 << 30));
        assert_eq!(parse_bytes("512MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("8G"), Some(8 << 30));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("3 parsecs"), None);
    }

    #[test]
    fn failure_rules_parse_and_match_with_or_without_the_version_suffix() {
        let rules =
            parse_failures("cuMemCreate:3, cuMemAlloc:2+:CUDA_ERROR_INVALID_VALUE").unwrap();
        assert_eq!(rules.len(), 2);
        assert!(rules[0].matches("cuMemCreate", 3));
        assert!(!rules[0].matches("cuMemCreate", 4));
        assert!(rules[1].matches("cuMemAlloc_v2", 2) && rules[1].matches("cuMemAlloc_v2", 9));
        assert!(!rules[1].matches("cuMemAlloc_v2", 1));
        assert_eq!(rules[1].error, Some(errors::INVALID_VALUE));
        for bad in [
            "cuMemCreate",
            "cuMemCreate:0",
            "cuMemCreate:x",
            ":1",
            "a:1:NOPE",
            "a:1:1:1",
        ] {
            assert!(parse_failures(bad).is_err(), "{bad}");
        }
    }
}
