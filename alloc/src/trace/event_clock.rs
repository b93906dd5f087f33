//! Timestamps of the allocator's trace events, cheap to take and converted to nanoseconds only
//! when the trace is read.
//!
//! A recording allocator stamps two events per alloc+free pair: each call reads the clock
//! before it takes its lock and stamps its event under it, never earlier than the stamp before.
//! Where the kernel keeps time with the CPU's time-stamp counter (x86_64 Linux, an invariant
//! TSC, the `tsc` clocksource: the counter then runs at a constant rate and agrees across
//! cores), an event stores the counter itself (`rdtsc`, cheaper than `clock_gettime`: see
//! `docs/perf-notes.md`, "The recording pair: counter stamps, compact ring events"). The trace is converted when it is read, from two readings of both
//! clocks, one when the ring was created and one at the conversion, as PyTorch's allocator does
//! with its approximate clock (`c10::ApproximateClockToUnixTimeConverter`). Elsewhere a stamp is
//! the monotonic clock in nanoseconds and the conversion only subtracts the origin.

use super::monotonic_ns;

/// The stamp source of one trace ring, with the reading the conversion starts from.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct EventClock {
    /// Stamps are time-stamp counter ticks (else monotonic nanoseconds).
    counter: bool,
    /// Both clocks read together when the ring was created.
    start: Reading,
    /// The latest stamp handed out: stamps never go backwards, even across cores.
    last: u64,
    /// Nanoseconds on the monotonic clock that read as time 0 (the allocator's creation).
    origin_ns: u64,
}

/// A stamp and the monotonic clock's time at it (see [`Reading::now`]).
#[derive(Debug, Clone, Copy)]
struct Reading {
    stamp: u64,
    ns: u64,
}

impl EventClock {
    /// A clock whose converted times count from `origin_ns` on the monotonic clock.
    #[doc(hidden)]
    pub fn new(origin_ns: u64) -> Self {
        Self::with_source(counter_keeps_time(), origin_ns)
    }

    fn with_source(counter: bool, origin_ns: u64) -> Self {
        let start = Reading::now(counter);
        EventClock {
            counter,
            start,
            last: start.stamp,
            origin_ns,
        }
    }

    /// The stamp of an event happening now.
    #[inline]
    #[doc(hidden)]
    pub fn stamp(&mut self) -> u64 {
        self.stamp_read(raw_stamp(self.counter))
    }

    /// The stamp of an event whose call read [`read_stamp`] earlier (before it took the lock
    /// this is called under): the later of that reading and the latest stamp handed out, so
    /// stamps never go backwards and stay inside the call. A stamp handed out earlier was
    /// taken before the lock was released to this call, so before the call ends.
    #[inline]
    #[doc(hidden)]
    pub fn stamp_read(&mut self, read: u64) -> u64 {
        let stamp = read.max(self.last);
        self.last = stamp;
        stamp
    }

    /// A converter of this clock's stamps to nanoseconds since the origin, as of now.
    #[doc(hidden)]
    pub fn converter(&self) -> StampConverter {
        StampConverter {
            clock: *self,
            now: Reading::now(self.counter),
        }
    }
}

/// Converts stamps of one [`EventClock`] to nanoseconds since its origin: by the counter's rate
/// between the ring's creation and the conversion, so a stamp taken between the two readings
/// lands between their times.
#[doc(hidden)]
pub struct StampConverter {
    clock: EventClock,
    now: Reading,
}

impl StampConverter {
    /// Nanoseconds since the origin at which `stamp` was taken.
    #[doc(hidden)]
    pub fn nanos(&self, stamp: u64) -> u64 {
        let start = self.clock.start;
        let ns = if self.clock.counter {
            let ticks = self.now.stamp.saturating_sub(start.stamp);
            let elapsed = stamp.min(self.now.stamp).saturating_sub(start.stamp);
            let span = self.now.ns.saturating_sub(start.ns);
            match ticks {
                0 => start.ns,
                _ => start.ns + (elapsed as u128 * span as u128 / ticks as u128) as u64,
            }
        } else {
            stamp
        };
        ns.saturating_sub(self.clock.origin_ns)
    }
}

impl Reading {
    /// Both clocks now: the counter read between two reads of the monotonic clock, whose
    /// midpoint is its time. Of three tries the one with the narrowest bracket counts, so a
    /// thread preempted between the reads does not skew the conversion.
    fn now(counter: bool) -> Self {
        if !counter {
            let ns = monotonic_ns();
            return Reading { stamp: ns, ns };
        }
        let bracketed = || {
            let before = monotonic_ns();
            let stamp = read_counter();
            let width = monotonic_ns().saturating_sub(before);
            let ns = before + width / 2;
            (width, Reading { stamp, ns })
        };
        let (mut narrowest, mut reading) = bracketed();
        for _ in 0..2 {
            let (width, next) = bracketed();
            if width < narrowest {
                (narrowest, reading) = (width, next);
            }
        }
        reading
    }
}

/// A reading for `stamp_read`, from the source every allocator's clock uses.
#[inline]
#[doc(hidden)]
pub fn read_stamp() -> u64 {
    raw_stamp(counter_keeps_time())
}

#[inline]
fn raw_stamp(counter: bool) -> u64 {
    if counter {
        read_counter()
    } else {
        monotonic_ns()
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline]
fn read_counter() -> u64 {
    // SAFETY: `rdtsc` reads a register: it has no preconditions and cannot fault on x86_64
    // (only a kernel setting, CR4.TSD, could forbid it, and then Linux would not run on `tsc`).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
#[inline]
fn read_counter() -> u64 {
    monotonic_ns()
}

/// Whether the time-stamp counter can stamp events: checked once per process.
fn counter_keeps_time() -> bool {
    static COUNTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COUNTER.get_or_init(detect_counter)
}

/// An invariant counter (CPUID 0x8000_0007, EDX bit 8: constant rate in every power state)
/// that the kernel also trusts as its clocksource (it checked the cores agree).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect_counter() -> bool {
    use core::arch::x86_64::__cpuid;
    // `__cpuid` is safe to call on current compilers and was `unsafe` on older ones.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 0x8000_0000 says which extended leaves
    // exist before 0x8000_0007 is asked.
    let invariant = unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && (__cpuid(0x8000_0007).edx >> 8) & 1 == 1
    };
    invariant
        && std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .is_ok_and(|source| source.trim() == "tsc")
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect_counter() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Either source: stamps never go backwards, and converted times lie between the origin
    /// and the conversion, in stamp order.
    fn converts_in_order(counter: bool) {
        let origin = monotonic_ns();
        let mut clock = EventClock::with_source(counter, origin);
        let stamps: Vec<u64> = (0..1000)
            .map(|i| {
                if i % 100 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                clock.stamp()
            })
            .collect();
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
        let converter = clock.converter();
        let since_origin = monotonic_ns() - origin;
        let times: Vec<u64> = stamps.iter().map(|&s| converter.nanos(s)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert!(
            times.iter().all(|&t| t <= since_origin),
            "{since_origin}: {times:?}"
        );
        // Ten sleeps of at least 50 µs happened between the first stamp and the last.
        let spread = times[999] - times[0];
        assert!(
            spread >= 9 * 50_000,
            "{spread} ns between the first and last stamp"
        );
    }

    /// Whether this machine stamps with the counter (else the counter's tests say they skip).
    fn counter_here() -> bool {
        let here = counter_keeps_time();
        if !here {
            eprintln!("no invariant time-stamp counter kept by the kernel here: skipped");
        }
        here
    }

    #[test]
    fn monotonic_stamps_convert_in_order() {
        converts_in_order(false);
    }

    #[test]
    fn counter_stamps_convert_in_order() {
        if !counter_here() {
            return;
        }
        converts_in_order(true);
    }

    /// A stamp converts to a time between the monotonic clock's reads before and after it, to
    /// within the conversion's error (a few microseconds at most; 5 ms allowed, so that a
    /// loaded machine preempting this thread cannot fail it, while a wrong rate would be off
    /// by tens of milliseconds over these 100 ms).
    #[test]
    fn counter_stamp_matches_the_monotonic_clock() {
        if !counter_here() {
            return;
        }
        let mut clock = EventClock::with_source(true, 0);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = monotonic_ns();
        let stamp = clock.stamp();
        let after = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let converted = clock.converter().nanos(stamp);
        let allowed = 5_000_000;
        assert!(
            converted + allowed >= before && converted <= after + allowed,
            "{converted} ns, read between {before} and {after} ns"
        );
    }

    #[test]
    fn nothing_elapsed_converts_to_the_start() {
        let clock = EventClock::with_source(true, 0);
        let converter = StampConverter {
            clock,
            now: clock.start,
        };
        assert_eq!(converter.nanos(clock.start.stamp), clock.start.ns);
    }
}
