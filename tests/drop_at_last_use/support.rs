//! Shared by `tests/drop_at_last_use/contract.rs` and `tests/drop_at_last_use/generated.rs`: an
//! ordered event log, a droppable logging buffer (`Mem`), the kept values of the contract (guards,
//! handles, files, directories, pools, transactions, observers, writers, …) whose drops log too,
//! and the comparison of a run with the attribute against a run without it.
//!
//! The rule (issue #9): the results are equal; every event other than `free …` is the same and
//! in the same order; `free …` events (drops of `Mem`, a `vramguard::DropAtLastUse` type) are the
//! same set and each happens no later, counted in other events passed, than without the
//! attribute.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Logs an event (every event but `free …` must keep its place).
pub fn ev(event: impl Into<String>) {
    let event = event.into();
    assert!(!is_free(&event), "`free …` is reserved for `Mem`: {event}");
    LOG.with(|l| l.borrow_mut().push(event));
}

fn log_free(name: &str) {
    LOG.with(|l| l.borrow_mut().push(format!("free {name}")));
}

/// The events logged so far, taken (the log is then empty).
pub fn take_log() -> Vec<String> {
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// A buffer that stands for a tensor: `vramguard::DropAtLastUse`, so the attributes may free it at
/// its last use; its drop logs `free <name>`.
#[derive(Debug)]
pub struct Mem {
    name: String,
    data: Vec<u8>,
    /// Its size as a one-dimensional shape (for `dims`).
    shape: [usize; 1],
}

impl vramguard::DropAtLastUse for Mem {}

impl Mem {
    pub fn new(name: impl Into<String>, bytes: usize) -> Mem {
        Mem {
            name: name.into(),
            data: vec![1; bytes],
            shape: [bytes],
        }
    }
    /// An owned `usize` (`len` is known not to borrow).
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// A reference into the value, as a tensor's `dims()` (issue #43's shapes).
    pub fn dims(&self) -> &[usize] {
        &self.shape
    }
    /// Named like a consuming form of vramguard's tensor (issue #21): at its last use the
    /// attributes route the call through `Dying`'s fallback, which must call this, unchanged.
    pub fn gelu(&self) -> Mem {
        ev(format!("gelu {}", self.name));
        Mem::new(format!("gelu({})", self.name), self.len())
    }
    /// As `gelu`, with an argument.
    pub fn broadcast_add(&self, rhs: &Mem) -> Mem {
        ev(format!("broadcast_add {} {}", self.name, rhs.name));
        Mem::new(
            format!("{}+{}", self.name, rhs.name),
            self.len() + rhs.len(),
        )
    }
    /// As `gelu`, with a value argument.
    pub fn softmax(&self, dim: usize) -> Mem {
        ev(format!("softmax {} {dim}", self.name));
        Mem::new(format!("softmax({})", self.name), self.len())
    }
}

/// A view borrowing a `Mem` (ndarray's `ArrayView::from_shape`, issue #43).
pub struct View<'a> {
    data: &'a [u8],
}

impl<'a> View<'a> {
    /// The first `rows` bytes of `m` (all of them if it has fewer).
    pub fn from_slice(m: &'a Mem, rows: usize) -> View<'a> {
        View {
            data: &m.data[..rows.min(m.data.len())],
        }
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Consumes a value (it is freed inside) and returns a new one named `name`.
pub fn eat(m: Mem, name: &'static str) -> Mem {
    Mem::new(name, m.len() + 1)
}

impl Drop for Mem {
    fn drop(&mut self) {
        log_free(&self.name);
    }
}

/// How a run with the attribute compared with the run without it.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// `free` events that happened strictly earlier with the attribute.
    pub earlier: usize,
    /// `free` events in the run.
    pub frees: usize,
    /// Other events (kept in place) in the run.
    pub kept: usize,
    pub without: Vec<String>,
    pub with: Vec<String>,
}

fn is_free(event: &str) -> bool {
    event.starts_with("free ")
}

/// Runs `without`, then `with`, and checks the contract; panics with both logs on a breach.
pub fn compare<R: PartialEq + fmt::Debug>(
    name: &str,
    without: impl FnOnce() -> R,
    with: impl FnOnce() -> R,
) -> Outcome {
    take_log();
    let expected = without();
    let without_log = take_log();
    let actual = with();
    let with_log = take_log();
    let logs = format!("\nwithout: {without_log:?}\nwith:    {with_log:?}");
    assert_eq!(expected, actual, "{name}: results differ{logs}");
    let kept = |log: &[String]| {
        log.iter()
            .filter(|e| !is_free(e))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        kept(&without_log),
        kept(&with_log),
        "{name}: a kept value's drop or another effect moved{logs}"
    );
    // Each `free` (k-th occurrence of equal events) at the number of other events before it.
    let positions = |log: &[String]| {
        let mut seen = std::collections::HashMap::<&str, usize>::new();
        let mut passed = 0;
        let mut out = Vec::new();
        for event in log {
            if is_free(event) {
                let k = seen.entry(event).or_default();
                out.push(((event.clone(), *k), passed));
                *k += 1;
            } else {
                passed += 1;
            }
        }
        out.sort();
        out
    };
    let (a, b) = (positions(&without_log), positions(&with_log));
    assert_eq!(
        a.iter().map(|(e, _)| e).collect::<Vec<_>>(),
        b.iter().map(|(e, _)| e).collect::<Vec<_>>(),
        "{name}: different `free` events{logs}"
    );
    let mut earlier = 0;
    for ((event, pa), (_, pb)) in a.iter().zip(&b) {
        assert!(
            pb <= pa,
            "{name}: `{}` happened later with the attribute{logs}",
            event.0
        );
        earlier += usize::from(pb < pa);
    }
    Outcome {
        earlier,
        frees: a.len(),
        kept: kept(&without_log).len(),
        without: without_log,
        with: with_log,
    }
}

/// A future that is pending once (logging `pending`), then ready.
pub struct PendingOnce(bool);

/// `pending_once().await` suspends the caller once.
pub fn pending_once() -> PendingOnce {
    PendingOnce(false)
}

impl Future for PendingOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            ev("pending");
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Polls a future to completion with a no-op waker, logging each poll after the first.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut context = Context::from_waker(std::task::Waker::noop());
    let mut polls = 0;
    loop {
        if polls > 0 {
            ev(format!("poll {polls}"));
        }
        polls += 1;
        if let Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return value;
        }
    }
}

/// A unique name under the system's temporary directory for this process.
pub fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("vg-contract-{}-{tag}", std::process::id()))
}

// ---------------------------------------------------------------------------------------------
// Kept values: none of these is `DropAtLastUse`; every drop logs.

/// A span whose `enter()` returns a guard that logs `exit` when it ends (like `tracing`).
pub struct Span {
    name: String,
}

impl Span {
    pub fn new(name: impl Into<String>) -> Span {
        Span { name: name.into() }
    }
    pub fn enter(&self) -> Entered<'_> {
        ev(format!("enter {}", self.name));
        Entered { span: self }
    }
}

pub struct Entered<'a> {
    span: &'a Span,
}

impl Entered<'_> {
    pub fn record(&self, value: usize) {
        ev(format!("record {} {value}", self.span.name));
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        ev(format!("exit {}", self.span.name));
    }
}

/// Sets an environment variable; restores the old value on drop.
pub struct EnvGuard {
    key: String,
    old: Option<String>,
}

impl EnvGuard {
    pub fn set(key: &str, value: &str) -> EnvGuard {
        let old = std::env::var(key).ok();
        std::env::set_var(key, value);
        ev(format!("set {key}={value}"));
        EnvGuard {
            key: key.to_owned(),
            old,
        }
    }
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl Drop for EnvGuard {
    fn drop(&mut self) {
        match &self.old {
            Some(old) => std::env::set_var(&self.key, old),
            None => std::env::remove_var(&self.key),
        }
        ev(format!("restore {}", self.key));
    }
}

/// The current value of an environment variable.
pub fn env_value(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| "<unset>".to_owned())
}

/// A lock file: created on `create`, deleted on drop.
pub struct LockFile {
    path: PathBuf,
}

impl LockFile {
    pub fn create(path: &Path) -> LockFile {
        std::fs::write(path, b"locked").expect("lock file");
        ev("lock file created");
        LockFile {
            path: path.to_owned(),
        }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        ev("lock file removed");
    }
}

/// A temporary directory: created on `new`, removed (with its contents) on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let path = temp_path(tag);
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        ev("dir created");
        TempDir { path }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        ev("dir removed");
    }
}

/// A pool of connections; a `Conn` goes back to it on drop.
pub struct Pool {
    free: Cell<usize>,
}

impl Pool {
    pub fn new(size: usize) -> Pool {
        Pool {
            free: Cell::new(size),
        }
    }
    pub fn get(&self) -> Conn<'_> {
        assert!(self.free.get() > 0, "pool exhausted");
        self.free.set(self.free.get() - 1);
        ev("conn taken");
        Conn { pool: self }
    }
    /// `get` under a name the macro's lists do not know (see `pending/borrowing_guard_get.rs`:
    /// with `get`, a known borrowing method, a later statement that moves `pool` in the
    /// attribute's dead branch does not compile).
    pub fn checkout(&self) -> Conn<'_> {
        self.get()
    }
    pub fn free_count(&self) -> usize {
        self.free.get()
    }
}

pub struct Conn<'a> {
    pool: &'a Pool,
}

impl Conn<'_> {
    pub fn query(&self, x: usize) -> usize {
        ev(format!("query {x}"));
        x * 2
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        self.pool.free.set(self.pool.free.get() + 1);
        ev("conn returned");
    }
}

/// A table whose transactions write through and roll back on drop unless committed.
#[derive(Default)]
pub struct Db {
    rows: RefCell<Vec<usize>>,
}

impl Db {
    pub fn begin(&self) -> Tx<'_> {
        ev("begin");
        Tx {
            db: self,
            written: Cell::new(0),
        }
    }
    pub fn count(&self) -> usize {
        self.rows.borrow().len()
    }
}

pub struct Tx<'a> {
    db: &'a Db,
    written: Cell<usize>,
}

impl Tx<'_> {
    pub fn insert(&self, row: usize) {
        self.db.rows.borrow_mut().push(row);
        self.written.set(self.written.get() + 1);
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        let mut rows = self.db.rows.borrow_mut();
        let keep = rows.len() - self.written.get();
        rows.truncate(keep);
        ev(format!("rollback {}", self.written.get()));
    }
}

/// A value whose clone logs (shows whether `Rc::make_mut` had to clone).
#[derive(Debug, PartialEq)]
pub struct Logged(pub i64);

impl Clone for Logged {
    fn clone(&self) -> Self {
        ev(format!("clone {}", self.0));
        Logged(self.0)
    }
}

/// A subject that holds its observers weakly.
#[derive(Default)]
pub struct Subject {
    observers: RefCell<Vec<Weak<Observer>>>,
}

impl Subject {
    pub fn register(&self, observer: &Rc<Observer>) {
        self.observers.borrow_mut().push(Rc::downgrade(observer));
    }
    /// Delivers an event to the observers still alive; returns how many got it.
    pub fn notify(&self, event: &str) -> usize {
        let live: Vec<Rc<Observer>> = self
            .observers
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for observer in &live {
            observer.seen.set(observer.seen.get() + 1);
            ev(format!("{} saw {event}", observer.name));
        }
        live.len()
    }
}

pub struct Observer {
    name: String,
    seen: Cell<usize>,
}

impl Observer {
    pub fn new(name: impl Into<String>) -> Rc<Observer> {
        Rc::new(Observer {
            name: name.into(),
            seen: Cell::new(0),
        })
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        ev(format!(
            "observer {} gone after {}",
            self.name,
            self.seen.get()
        ));
    }
}

/// A registry of open handles; a `Handle` closes itself on drop.
#[derive(Default)]
pub struct Registry {
    open: RefCell<BTreeSet<u32>>,
    next: Cell<u32>,
}

impl Registry {
    pub fn open(&self) -> Handle<'_> {
        let id = self.next.get();
        self.next.set(id + 1);
        self.open.borrow_mut().insert(id);
        ev(format!("open {id}"));
        Handle { id, registry: self }
    }
    pub fn is_open(&self, id: u32) -> bool {
        self.open.borrow().contains(&id)
    }
}

pub struct Handle<'a> {
    pub id: u32,
    registry: &'a Registry,
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        self.registry.open.borrow_mut().remove(&self.id);
        ev(format!("close {}", self.id));
    }
}

/// A writer into a shared buffer (logs each write it receives).
pub struct SharedBuf(pub Rc<RefCell<Vec<u8>>>);

impl std::io::Write for SharedBuf {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        ev(format!("sink got {}", bytes.len()));
        self.0.borrow_mut().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
