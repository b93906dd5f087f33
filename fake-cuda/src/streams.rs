//! Streams and events: work queued on a stream runs in order, after the work it depends on,
//! and (by default) only when something waits for it.
//!
//! Lazy execution is what lets the fake catch reuse across streams deterministically: a block
//! freed by one stream and reused by another without a wait is overwritten by the late work of
//! the first as soon as anything synchronises, every time, where a GPU would do so only when
//! the timing is unlucky. Queued work runs when
//!
//! - its stream, its context or an event after it is synchronised, or a synchronous copy or
//!   memset on the null stream needs it (legacy default-stream semantics, below);
//! - work queued later on another stream depends on it (`cuStreamWaitEvent`, or the legacy
//!   default stream's implicit waits) and runs;
//! - its stream holds more than `FAKE_CUDA_QUEUE_LIMIT` operations (the oldest runs);
//! - an event (or the stream) is queried `FAKE_CUDA_POLL_STEPS` times without finishing (one
//!   more operation runs), so a polling loop makes progress;
//! - `FAKE_CUDA_EAGER=1`: at once, as it is queued.
//!
//! The null stream (handle 0, also `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`) is the
//! legacy default stream: work queued on it waits for all work queued before on blocking
//! streams (created without `CU_STREAM_NON_BLOCKING`), and work queued on a blocking stream
//! waits for the null stream's. Non-blocking streams (cudarc's `new_stream`) wait for nothing
//! implicitly.

use crate::errors::{self, Fail};
use crate::kernels::Launch;
use crate::state::Driver;
use std::collections::VecDeque;
use std::time::Instant;

/// A point in a stream: the work queued before it is done when the stream's `done` count
/// reaches `seq`.
pub type Point = (u64, u64);

/// What a queued operation does.
#[derive(Debug)]
pub enum Work {
    /// A kernel launch.
    Kernel(Launch),
    /// Writes `bytes` (copied from pageable host memory at the call) to `dst`.
    Write {
        /// Device address.
        dst: u64,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Copies from page-locked host memory (read when it runs, as a GPU does).
    WriteFromHost {
        /// Device address.
        dst: u64,
        /// Host address.
        src: u64,
        /// Bytes.
        len: usize,
    },
    /// Copies device memory to page-locked host memory (written when it runs).
    ReadToHost {
        /// Host address.
        dst: u64,
        /// Device address.
        src: u64,
        /// Bytes.
        len: usize,
    },
    /// Copies device memory.
    Copy {
        /// Device address written.
        dst: u64,
        /// Device address read.
        src: u64,
        /// Bytes.
        len: usize,
    },
    /// `count` elements of `width` bytes set to `value`.
    Set {
        /// Device address.
        dst: u64,
        /// The value (its low `width` bytes).
        value: u32,
        /// 1 or 4.
        width: usize,
        /// Elements.
        count: usize,
    },
    /// A pool chunk's free (`cuMemFreeAsync`).
    FreeChunk {
        /// The chunk.
        addr: u64,
        /// The allocation it frees.
        generation: u64,
    },
    /// A timed event reached (its time is taken).
    Mark {
        /// The event.
        event: u64,
    },
    /// Nothing but its dependencies (`cuStreamWaitEvent`).
    Wait,
    /// A GEMM of the fake cuBLAS.
    Gemm(crate::blas::GemmOp),
}

/// One queued operation.
#[derive(Debug)]
pub struct Op {
    /// The call that queued it.
    pub call: &'static str,
    /// Points of other streams that must be reached first.
    pub deps: Vec<Point>,
    /// What it does.
    pub work: Work,
}

/// A stream.
#[derive(Debug)]
pub struct Stream {
    /// Synchronises with the legacy null stream (created without `CU_STREAM_NON_BLOCKING`).
    pub blocking: bool,
    /// Operations queued and not run yet.
    pub queue: VecDeque<Op>,
    /// Operations ever queued.
    pub queued: u64,
    /// Operations run (or dropped after a fault).
    pub done: u64,
    /// `cuStreamDestroy` was called (its queued work still runs).
    pub destroyed: bool,
    /// Queries since the stream last made progress.
    pub polls: u32,
}

impl Stream {
    /// An empty stream.
    pub fn new(blocking: bool) -> Stream {
        Stream {
            blocking,
            queue: VecDeque::new(),
            queued: 0,
            done: 0,
            destroyed: false,
            polls: 0,
        }
    }

    /// Drops every queued operation (after a fault).
    pub fn drop_queued(&mut self) {
        self.queue.clear();
        self.done = self.queued;
    }
}

/// An event.
#[derive(Debug)]
pub struct Event {
    /// Records timing (`CU_EVENT_DISABLE_TIMING` not given).
    pub timing: bool,
    /// Where it was last recorded.
    pub recorded: Option<Point>,
    /// When a timed event's record ran.
    pub time: Option<Instant>,
    /// Queries since it was recorded.
    pub polls: u32,
    /// `cuEventDestroy` was called.
    pub destroyed: bool,
}

/// The handles that name the null stream.
pub fn canonical_stream(handle: u64) -> u64 {
    match handle {
        1 | 2 => 0,
        h => h,
    }
}

impl Driver {
    /// The stream `handle` names, if it exists and was not destroyed.
    pub fn stream(&self, handle: u64) -> Result<u64, Fail> {
        let id = canonical_stream(handle);
        match self.streams.get(&id) {
            Some(s) if !s.destroyed => Ok(id),
            Some(_) => Err(Fail::loud(
                errors::INVALID_HANDLE,
                format!("stream {handle:#x} was destroyed"),
            )),
            None => Err(Fail::loud(
                errors::INVALID_HANDLE,
                format!("{handle:#x} is not a stream of this context"),
            )),
        }
    }

    /// The point after everything queued so far on `stream`.
    pub fn tail(&self, stream: u64) -> Point {
        (stream, self.streams[&stream].queued)
    }

    /// The implicit waits of legacy default-stream semantics for work queued on `stream`.
    fn implicit_deps(&self, stream: u64) -> Vec<Point> {
        let s = &self.streams[&stream];
        if stream == 0 {
            self.streams
                .iter()
                .filter(|(&id, b)| id != 0 && b.blocking && b.queued > b.done)
                .map(|(&id, b)| (id, b.queued))
                .collect()
        } else if s.blocking {
            let null = &self.streams[&0];
            if null.queued > null.done {
                vec![(0, null.queued)]
            } else {
                Vec::new()
            }
        } else {
            Vec::new()
        }
    }

    /// Queues `work` on `stream` (after `deps` and the stream's implicit waits); runs it at
    /// once in eager mode, or the oldest operation when the queue is over its limit.
    pub fn enqueue(
        &mut self,
        stream: u64,
        call: &'static str,
        mut deps: Vec<Point>,
        work: Work,
    ) -> Result<(), Fail> {
        deps.extend(self.implicit_deps(stream));
        let s = self.streams.get_mut(&stream).expect("a checked stream");
        s.queue.push_back(Op { call, deps, work });
        s.queued += 1;
        let (queued, waiting) = (s.queued, s.queue.len());
        if self.config.eager {
            self.run_to((stream, queued))
        } else if waiting > self.config.queue_limit {
            let done = self.streams[&stream].done;
            self.run_to((stream, done + 1))
        } else {
            Ok(())
        }
    }

    /// Whether the work before `point` is done.
    pub fn reached(&self, (stream, seq): Point) -> bool {
        self.streams.get(&stream).is_none_or(|s| s.done >= seq)
    }

    /// Runs the work queued on `point`'s stream up to it, each operation after its
    /// dependencies. A fault leaves the context's sticky error and drops the rest.
    pub fn run_to(&mut self, (stream, seq): Point) -> Result<(), Fail> {
        loop {
            if let Some(code) = self.context.sticky {
                return Err(Fail::quiet(code));
            }
            let Some(s) = self.streams.get_mut(&stream) else {
                return Ok(());
            };
            if s.done >= seq {
                return Ok(());
            }
            let Some(op) = s.queue.pop_front() else {
                return Ok(());
            };
            for &dep in &op.deps {
                self.run_to(dep)?;
            }
            let result = self.execute(op);
            let s = self.streams.get_mut(&stream).expect("the stream ran");
            // A fault already marked everything done.
            if s.done < s.queued {
                s.done += 1;
            }
            s.polls = 0;
            result?;
        }
    }

    /// Runs everything queued on every stream.
    pub fn run_all(&mut self) -> Result<(), Fail> {
        let mut ids: Vec<u64> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let tail = self.tail(id);
            self.run_to(tail)?;
        }
        Ok(())
    }

    /// What a synchronous copy or memset waits for first: the null stream and, through the
    /// legacy semantics, every blocking stream.
    pub fn run_legacy(&mut self) -> Result<(), Fail> {
        let blocking: Vec<u64> = self
            .streams
            .iter()
            .filter(|(&id, s)| id == 0 || s.blocking)
            .map(|(&id, _)| id)
            .collect();
        for id in blocking {
            let tail = self.tail(id);
            self.run_to(tail)?;
        }
        Ok(())
    }

    /// `cuStreamQuery`/`cuEventQuery` of a point not reached: counts the poll, and runs one
    /// more operation of its stream every `FAKE_CUDA_POLL_STEPS` polls. Whether it is reached
    /// now.
    pub fn poll(&mut self, point: Point) -> Result<bool, Fail> {
        if self.reached(point) {
            return Ok(true);
        }
        let steps = self.config.poll_steps;
        let s = self
            .streams
            .get_mut(&point.0)
            .expect("a stream with queued work");
        s.polls += 1;
        if s.polls >= steps {
            let next = (point.0, s.done + 1);
            self.run_to(next)?;
        }
        Ok(self.reached(point))
    }

    fn execute(&mut self, op: Op) -> Result<(), Fail> {
        let check = |d: &Driver, addr: u64, len: usize, write: bool| -> Result<(), String> {
            d.check_access(addr, len, write)
        };
        let fault =
            |d: &mut Driver, why: String| Err(d.fault(format!("{} faulted: {why}", op.call)));
        match &op.work {
            Work::Kernel(launch) => {
                self.counters.kernels += 1;
                if let Err(message) = crate::kernels::run(launch) {
                    return Err(self.fault(message));
                }
            }
            Work::Write { dst, bytes } => {
                if let Err(why) = check(self, *dst, bytes.len(), true) {
                    return fault(self, why);
                }
                // SAFETY: checked: device memory mapped read-write, `bytes.len()` long.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), *dst as *mut u8, bytes.len())
                };
            }
            Work::WriteFromHost { dst, src, len } => {
                if let Err(why) = check(self, *dst, *len, true) {
                    return fault(self, why);
                }
                // SAFETY: device side checked; the host side is page-locked memory the caller
                // keeps until the copy is done (the driver's contract for async copies).
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) };
            }
            Work::ReadToHost { dst, src, len } => {
                if let Err(why) = check(self, *src, *len, false) {
                    return fault(self, why);
                }
                // SAFETY: as above, the other way.
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) };
            }
            Work::Copy { dst, src, len } => {
                if let Err(why) =
                    check(self, *src, *len, false).and_then(|()| check(self, *dst, *len, true))
                {
                    return fault(self, why);
                }
                // SAFETY: both ranges checked (they may overlap: memmove semantics).
                unsafe { std::ptr::copy(*src as *const u8, *dst as *mut u8, *len) };
            }
            Work::Set {
                dst,
                value,
                width,
                count,
            } => {
                if let Err(why) = check(self, *dst, width * count, true) {
                    return fault(self, why);
                }
                // SAFETY: checked: `width * count` writable bytes at `dst` (the driver requires
                // `dst` aligned to `width`, checked at the call).
                unsafe {
                    if *width == 1 {
                        std::ptr::write_bytes(*dst as *mut u8, *value as u8, *count);
                    } else {
                        std::slice::from_raw_parts_mut(*dst as *mut u32, *count).fill(*value);
                    }
                }
            }
            Work::FreeChunk { addr, generation } => self.pool_free_run(*addr, *generation),
            Work::Mark { event } => {
                if let Some(e) = self.events.get_mut(event) {
                    e.time = Some(Instant::now());
                }
            }
            Work::Wait => {}
            Work::Gemm(g) => {
                if let Err(why) = g.check(self) {
                    return fault(self, why);
                }
                g.run();
            }
        }
        Ok(())
    }

    /// After a synchronisation: the pool hands back memory above its release threshold.
    pub fn synchronized(&mut self) {
        self.pool_settle();
    }
}
