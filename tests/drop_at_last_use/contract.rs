//! The contract of issue #9: `#[vramguard::inference]` and `#[vramguard::batch_scope]` free a
//! local at its last use only if its type is `vramguard::DropAtLastUse`; every other value (guards,
//! `Rc`/`Arc`, files, directories, channels, handles, observers, writers, `Copy` values) keeps
//! the drop point and order it has without the attribute, so the program computes the same.
//!
//! Each kind of kept value is one program in three forms — an `#[inference]` fn, the same work
//! in the body of a loop under `#[batch_scope]`, and an `async fn` under `#[inference]` that
//! holds the kept value across an `.await` that is pending once — stamped `with` and `without`
//! the attributes by `cases!` (`consuming_forms` calls methods named like the consuming forms
//! of issue #21, which the attributes route through `Dying`'s fallback: the calls and their
//! order must not change). Every program also allocates `Mem` buffers (`DropAtLastUse`) around the
//! kept values, so early frees do happen: the check (see `crate::support::compare`) allows a
//! `free` to move earlier and nothing else to move, and each form must show early frees.
// The `async fn`s hold guards across an `.await` on purpose: the guard must keep its place.
#![allow(clippy::await_holding_lock, clippy::await_holding_refcell_ref)]

use crate::support::Outcome;

macro_rules! cases {
    ($($inference:meta, $batch:meta)?) => {
        #[allow(unused_imports)]
        use crate::support::{
            block_on, env_value, ev, pending_once, temp_path, Conn, Db, EnvGuard, LockFile,
            Logged, Mem, Observer, Pool, Registry, SharedBuf, Span, Subject, TempDir,
        };
        use std::cell::{Ref, RefCell};
        use std::io::Write;
        use std::rc::Rc;
        use std::sync::{mpsc, Arc, Mutex, RwLock};

        // ---- a named `MutexGuard` used once, then `try_lock` -------------------------------

        $(#[$inference])?
        pub fn mutex_guard() -> (usize, bool) {
            let m = Mutex::new(10usize);
            let a = Mem::new("a", 4);
            let g = m.lock().unwrap();
            let seen = *g + a.len();
            ev(format!("seen {seen}"));
            let locked = m.try_lock().is_err();
            ev(format!("locked {locked}"));
            let b = Mem::new("b", 2);
            let n = b.len();
            ev(format!("n {n}"));
            (seen, locked)
        }

        $(#[$batch])?
        pub fn mutex_guard_loop() -> usize {
            let m = Mutex::new(10usize);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 4);
                let mut g = m.lock().unwrap();
                *g += i;
                let seen = *g + a.len();
                ev(format!("seen {seen}"));
                let locked = m.try_lock().is_err();
                ev(format!("locked {locked}"));
                let b = Mem::new(format!("b{i}"), 2);
                let n = b.len();
                ev(format!("n {n}"));
            }
            m.into_inner().unwrap()
        }

        $(#[$inference])?
        pub async fn mutex_guard_async() -> (usize, bool) {
            let m = Mutex::new(10usize);
            let a = Mem::new("a", 4);
            let g = m.lock().unwrap();
            let seen = *g + a.len();
            ev(format!("seen {seen}"));
            pending_once().await;
            let locked = m.try_lock().is_err();
            ev(format!("locked {locked}"));
            let b = Mem::new("b", 2);
            let n = b.len();
            ev(format!("n {n}"));
            (seen, locked)
        }

        // ---- `RefCell::borrow_mut` used once, then `try_borrow` ---------------------------

        $(#[$inference])?
        pub fn refcell_borrow_mut() -> (Vec<usize>, bool, bool) {
            let c = RefCell::new(vec![1usize]);
            let a = Mem::new("a", 3);
            let mut b = c.borrow_mut();
            b.push(a.len());
            ev("pushed");
            let readable = c.try_borrow().is_ok();
            ev(format!("readable {readable}"));
            let z = Mem::new("z", 1);
            let len = z.len();
            ev(format!("len {len}"));
            let writable = c.try_borrow_mut().is_ok();
            (vec![len], readable, writable)
        }

        $(#[$batch])?
        pub fn refcell_borrow_mut_loop() -> Vec<usize> {
            let c = RefCell::new(vec![1usize]);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3 + i);
                let mut b = c.borrow_mut();
                b.push(a.len());
                ev("pushed");
                let readable = c.try_borrow().is_ok();
                ev(format!("readable {readable}"));
                let z = Mem::new(format!("z{i}"), 1);
                let len = z.len();
                ev(format!("len {len}"));
            }
            c.into_inner()
        }

        $(#[$inference])?
        pub async fn refcell_borrow_mut_async() -> (usize, bool) {
            let c = RefCell::new(vec![1usize]);
            let a = Mem::new("a", 3);
            let mut b = c.borrow_mut();
            b.push(a.len());
            ev("pushed");
            pending_once().await;
            let readable = c.try_borrow().is_ok();
            ev(format!("readable {readable}"));
            let z = Mem::new("z", 1);
            let len = z.len();
            ev(format!("len {len}"));
            (len, readable)
        }

        // ---- an `RwLock` write guard ----------------------------------------------------

        $(#[$inference])?
        pub fn rwlock_write() -> (bool, usize) {
            let lock = RwLock::new(Vec::<usize>::new());
            let a = Mem::new("a", 5);
            let mut w = lock.write().unwrap();
            w.push(a.len());
            ev("written");
            let blocked = lock.try_read().is_err();
            ev(format!("blocked {blocked}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (blocked, n)
        }

        $(#[$batch])?
        pub fn rwlock_write_loop() -> Vec<usize> {
            let lock = RwLock::new(Vec::<usize>::new());
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 5 + i);
                let mut w = lock.write().unwrap();
                w.push(a.len());
                ev("written");
                let blocked = lock.try_read().is_err();
                ev(format!("blocked {blocked}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            lock.into_inner().unwrap()
        }

        $(#[$inference])?
        pub async fn rwlock_write_async() -> (bool, usize) {
            let lock = RwLock::new(Vec::<usize>::new());
            let a = Mem::new("a", 5);
            let mut w = lock.write().unwrap();
            w.push(a.len());
            ev("written");
            pending_once().await;
            let blocked = lock.try_read().is_err();
            ev(format!("blocked {blocked}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (blocked, n)
        }

        // ---- `Ref::map` --------------------------------------------------------------------

        $(#[$inference])?
        pub fn ref_map() -> (usize, bool) {
            let c = RefCell::new(vec![7usize, 8]);
            let a = Mem::new("a", 2);
            let r = Ref::map(c.borrow(), |v| &v[1]);
            let x = *r + a.len();
            ev(format!("x {x}"));
            let writable = c.try_borrow_mut().is_ok();
            ev(format!("writable {writable}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (x, writable)
        }

        $(#[$batch])?
        pub fn ref_map_loop() -> usize {
            let c = RefCell::new(vec![7usize, 8, 9]);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 2);
                let r = Ref::map(c.borrow(), |v| &v[i]);
                let x = *r + a.len();
                ev(format!("x {x}"));
                let writable = c.try_borrow_mut().is_ok();
                ev(format!("writable {writable}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            c.into_inner().len()
        }

        $(#[$inference])?
        pub async fn ref_map_async() -> (usize, bool) {
            let c = RefCell::new(vec![7usize, 8]);
            let a = Mem::new("a", 2);
            let r = Ref::map(c.borrow(), |v| &v[1]);
            let x = *r + a.len();
            ev(format!("x {x}"));
            pending_once().await;
            let writable = c.try_borrow_mut().is_ok();
            ev(format!("writable {writable}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (x, writable)
        }

        // ---- a span-like guard, with work logged after its last use -------------------------

        // ---- ops named like consuming forms, on `DropAtLastUse` values and on a kept `Rc` ---

        $(#[$inference])?
        pub fn consuming_forms() -> usize {
            let a = Mem::new("a", 4);
            let b = Mem::new("b", 2);
            let shared = Rc::new(Mem::new("shared", 3));
            let h = a.gelu();
            let h = h.broadcast_add(&b);
            let s = shared.gelu();
            ev(format!("shared {}", Rc::strong_count(&shared)));
            let h = h.softmax(1);
            let n = h.len() + s.len();
            ev(format!("n {n}"));
            n
        }

        $(#[$batch])?
        pub fn consuming_forms_loop() -> usize {
            let shared = Rc::new(Mem::new("shared", 3));
            let mut last = 0;
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 4 + i);
                let b = Mem::new(format!("b{i}"), 2);
                let h = a.gelu();
                let h = h.broadcast_add(&b);
                let s = shared.gelu();
                ev(format!("shared {}", Rc::strong_count(&shared)));
                let h = h.softmax(i);
                let n = h.len() + s.len();
                ev(format!("n {n}"));
                last = n;
            }
            last
        }

        $(#[$inference])?
        pub async fn consuming_forms_async() -> usize {
            let a = Mem::new("a", 4);
            let b = Mem::new("b", 2);
            let shared = Rc::new(Mem::new("shared", 3));
            let h = a.gelu();
            pending_once().await;
            let h = h.broadcast_add(&b);
            let s = shared.gelu();
            ev(format!("shared {}", Rc::strong_count(&shared)));
            let h = h.softmax(1);
            pending_once().await;
            let n = h.len() + s.len();
            ev(format!("n {n}"));
            n
        }

        $(#[$inference])?
        pub fn span_guard() -> usize {
            let outer = Span::new("outer");
            let _outer = outer.enter();
            let span = Span::new("load");
            let a = Mem::new("a", 8);
            let entered = span.enter();
            entered.record(a.len());
            ev("work after the span's last use");
            let b = Mem::new("b", 2);
            let n = b.len();
            ev(format!("more work {n}"));
            n
        }

        $(#[$batch])?
        pub fn span_guard_loop() -> usize {
            let outer = Span::new("outer");
            let _outer = outer.enter();
            let mut last = 0;
            for i in 0..3usize {
                let span = Span::new(format!("step{i}"));
                let a = Mem::new(format!("a{i}"), 8);
                let entered = span.enter();
                entered.record(a.len());
                ev("work after the span's last use");
                let b = Mem::new(format!("b{i}"), 2 + i);
                let n = b.len();
                ev(format!("more work {n}"));
                last = n;
            }
            last
        }

        $(#[$inference])?
        pub async fn span_guard_async() -> usize {
            let outer = Span::new("outer");
            let _outer = outer.enter();
            let span = Span::new("load");
            let a = Mem::new("a", 8);
            let entered = span.enter();
            entered.record(a.len());
            pending_once().await;
            ev("work after the span's last use");
            let b = Mem::new("b", 2);
            let n = b.len();
            ev(format!("more work {n}"));
            n
        }

        // ---- an environment-variable guard: read the variable later ------------------------

        $(#[$inference])?
        pub fn env_guard(tag: &str) -> String {
            let key = format!("VG_CONTRACT_{tag}");
            let a = Mem::new("a", 3);
            let g = EnvGuard::set(&key, "inside");
            ev(format!("guard of {} with {}", g.key(), a.len()));
            let seen = env_value(&key);
            ev(format!("seen {seen}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            seen
        }

        $(#[$batch])?
        pub fn env_guard_loop(tag: &str) -> String {
            let key = format!("VG_CONTRACT_{tag}");
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let g = EnvGuard::set(&key, &format!("inside{i}"));
                ev(format!("guard of {} with {}", g.key(), a.len()));
                let seen = env_value(&key);
                ev(format!("seen {seen}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            env_value(&key)
        }

        $(#[$inference])?
        pub async fn env_guard_async(tag: &str) -> String {
            let key = format!("VG_CONTRACT_{tag}");
            let a = Mem::new("a", 3);
            let g = EnvGuard::set(&key, "inside");
            ev(format!("guard of {} with {}", g.key(), a.len()));
            pending_once().await;
            let seen = env_value(&key);
            ev(format!("seen {seen}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            seen
        }

        // ---- a lock file: does it exist later? -----------------------------------------------

        $(#[$inference])?
        pub fn lock_file(tag: &str) -> bool {
            let path = temp_path(tag);
            let a = Mem::new("a", 3);
            let lock = LockFile::create(&path);
            ev(format!("holding {} ({})", lock.path().exists(), a.len()));
            let exists = path.exists();
            ev(format!("exists {exists}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            exists
        }

        $(#[$batch])?
        pub fn lock_file_loop(tag: &str) -> bool {
            let path = temp_path(tag);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let lock = LockFile::create(&path);
                ev(format!("holding {} ({})", lock.path().exists(), a.len()));
                let exists = path.exists();
                ev(format!("exists {exists}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            path.exists()
        }

        $(#[$inference])?
        pub async fn lock_file_async(tag: &str) -> bool {
            let path = temp_path(tag);
            let a = Mem::new("a", 3);
            let lock = LockFile::create(&path);
            ev(format!("holding {} ({})", lock.path().exists(), a.len()));
            pending_once().await;
            let exists = path.exists();
            ev(format!("exists {exists}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            exists
        }

        // ---- a pooled connection, returned on drop: the pool's free count later -------------

        $(#[$inference])?
        pub fn pooled_connection() -> (usize, usize) {
            let pool = Pool::new(2);
            let a = Mem::new("a", 3);
            let conn = pool.get();
            let r = conn.query(a.len());
            ev(format!("result {r}"));
            let free = pool.free_count();
            ev(format!("pool has {free}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (r, free)
        }

        $(#[$batch])?
        pub fn pooled_connection_loop() -> usize {
            let pool = Pool::new(2);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3 + i);
                let conn = pool.get();
                let r = conn.query(a.len());
                ev(format!("result {r}"));
                let free = pool.free_count();
                ev(format!("pool has {free}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            pool.free_count()
        }

        $(#[$inference])?
        pub async fn pooled_connection_async() -> (usize, usize) {
            let pool = Pool::new(2);
            let a = Mem::new("a", 3);
            let conn = pool.get();
            let r = conn.query(a.len());
            ev(format!("result {r}"));
            pending_once().await;
            let free = pool.free_count();
            ev(format!("pool has {free}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (r, free)
        }

        // ---- a transaction rolled back on drop, before a count is read --------------------

        $(#[$inference])?
        pub fn transaction() -> (usize, usize) {
            let db = Db::default();
            let a = Mem::new("a", 3);
            let tx = db.begin();
            tx.insert(a.len());
            ev("inserted");
            let during = db.count();
            ev(format!("count {during}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (during, n)
        }

        $(#[$batch])?
        pub fn transaction_loop() -> usize {
            let db = Db::default();
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let tx = db.begin();
                tx.insert(a.len());
                tx.insert(i);
                ev("inserted");
                let during = db.count();
                ev(format!("count {during}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            db.count()
        }

        $(#[$inference])?
        pub async fn transaction_async() -> (usize, usize) {
            let db = Db::default();
            let a = Mem::new("a", 3);
            let tx = db.begin();
            tx.insert(a.len());
            ev("inserted");
            pending_once().await;
            let during = db.count();
            ev(format!("count {during}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (during, n)
        }

        // ---- `Rc::strong_count` ---------------------------------------------------------------

        $(#[$inference])?
        pub fn rc_strong_count() -> (usize, usize) {
            let shared = Rc::new(Mem::new("shared", 4));
            let a = Mem::new("a", 3);
            let other = Rc::clone(&shared);
            let n = other.len() + a.len();
            ev(format!("n {n}"));
            let count = Rc::strong_count(&shared);
            ev(format!("count {count}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (n, count)
        }

        $(#[$batch])?
        pub fn rc_strong_count_loop() -> usize {
            let shared = Rc::new(Mem::new("shared", 4));
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let other = Rc::clone(&shared);
                let n = other.len() + a.len();
                ev(format!("n {n}"));
                let count = Rc::strong_count(&shared);
                ev(format!("count {count}"));
                let b = Mem::new(format!("b{i}"), 1);
                let m = b.len();
                ev(format!("m {m}"));
            }
            Rc::strong_count(&shared)
        }

        $(#[$inference])?
        pub async fn rc_strong_count_async() -> (usize, usize) {
            let shared = Rc::new(Mem::new("shared", 4));
            let a = Mem::new("a", 3);
            let other = Rc::clone(&shared);
            let n = other.len() + a.len();
            ev(format!("n {n}"));
            pending_once().await;
            let count = Rc::strong_count(&shared);
            ev(format!("count {count}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (n, count)
        }

        // ---- `Arc::try_unwrap` ----------------------------------------------------------------

        $(#[$inference])?
        pub fn arc_try_unwrap() -> (usize, bool) {
            let shared = Arc::new(vec![1usize, 2, 3]);
            let a = Mem::new("a", 3);
            let other = Arc::clone(&shared);
            let sum = other.iter().sum::<usize>() + a.len();
            ev(format!("sum {sum}"));
            let unwrapped = Arc::try_unwrap(shared).is_ok();
            ev(format!("unwrapped {unwrapped}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (sum, unwrapped)
        }

        $(#[$batch])?
        pub fn arc_try_unwrap_loop() -> usize {
            let mut hits = 0;
            for i in 0..3usize {
                let shared = Arc::new(vec![1usize, 2, i]);
                let a = Mem::new(format!("a{i}"), 3);
                let other = Arc::clone(&shared);
                let sum = other.iter().sum::<usize>() + a.len();
                ev(format!("sum {sum}"));
                let unwrapped = Arc::try_unwrap(shared).is_ok();
                ev(format!("unwrapped {unwrapped}"));
                let b = Mem::new(format!("b{i}"), 1);
                let m = b.len();
                ev(format!("m {m}"));
                hits = usize::from(unwrapped) * 10 + m;
            }
            hits
        }

        $(#[$inference])?
        pub async fn arc_try_unwrap_async() -> (usize, bool) {
            let shared = Arc::new(vec![1usize, 2, 3]);
            let a = Mem::new("a", 3);
            let other = Arc::clone(&shared);
            let sum = other.iter().sum::<usize>() + a.len();
            ev(format!("sum {sum}"));
            pending_once().await;
            let unwrapped = Arc::try_unwrap(shared).is_ok();
            ev(format!("unwrapped {unwrapped}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (sum, unwrapped)
        }

        // ---- `Rc::get_mut` --------------------------------------------------------------------

        $(#[$inference])?
        pub fn rc_get_mut() -> (usize, bool) {
            let mut shared = Rc::new(5usize);
            let a = Mem::new("a", 3);
            let other = shared.clone();
            let x = *other + a.len();
            ev(format!("x {x}"));
            let unique = Rc::get_mut(&mut shared).is_some();
            ev(format!("unique {unique}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (x, unique)
        }

        $(#[$batch])?
        pub fn rc_get_mut_loop() -> usize {
            let mut shared = Rc::new(5usize);
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let other = shared.clone();
                let x = *other + a.len() + i;
                ev(format!("x {x}"));
                let unique = Rc::get_mut(&mut shared).is_some();
                ev(format!("unique {unique}"));
                let b = Mem::new(format!("b{i}"), 1);
                let m = b.len();
                ev(format!("m {m}"));
            }
            *shared
        }

        $(#[$inference])?
        pub async fn rc_get_mut_async() -> (usize, bool) {
            let mut shared = Rc::new(5usize);
            let a = Mem::new("a", 3);
            let other = shared.clone();
            let x = *other + a.len();
            ev(format!("x {x}"));
            pending_once().await;
            let unique = Rc::get_mut(&mut shared).is_some();
            ev(format!("unique {unique}"));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (x, unique)
        }

        // ---- `Rc::make_mut` (clones the value when it is shared) ---------------------------

        $(#[$inference])?
        pub fn rc_make_mut() -> (i64, i64) {
            let mut shared = Rc::new(Logged(5));
            let a = Mem::new("a", 3);
            let other = Rc::clone(&shared);
            let x = other.0 + a.len() as i64;
            ev(format!("x {x}"));
            Rc::make_mut(&mut shared).0 += 1;
            ev(format!("now {}", shared.0));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (x, shared.0)
        }

        $(#[$batch])?
        pub fn rc_make_mut_loop() -> i64 {
            let mut shared = Rc::new(Logged(5));
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let other = Rc::clone(&shared);
                let x = other.0 + a.len() as i64;
                ev(format!("x {x}"));
                Rc::make_mut(&mut shared).0 += 1;
                ev(format!("now {}", shared.0));
                let b = Mem::new(format!("b{i}"), 1);
                let m = b.len();
                ev(format!("m {m}"));
            }
            shared.0
        }

        $(#[$inference])?
        pub async fn rc_make_mut_async() -> (i64, i64) {
            let mut shared = Rc::new(Logged(5));
            let a = Mem::new("a", 3);
            let other = Rc::clone(&shared);
            let x = other.0 + a.len() as i64;
            ev(format!("x {x}"));
            pending_once().await;
            Rc::make_mut(&mut shared).0 += 1;
            ev(format!("now {}", shared.0));
            let b = Mem::new("b", 1);
            let m = b.len();
            ev(format!("m {m}"));
            (x, shared.0)
        }

        // ---- a temporary directory whose path is used after the directory's last use -------

        $(#[$inference])?
        pub fn temp_dir(tag: &str) -> (bool, bool) {
            let a = Mem::new("a", 3);
            let dir = TempDir::new(tag);
            let path = dir.path().to_owned();
            let sub = dir.path().join("sub");
            ev(format!("paths ready {}", a.len()));
            let exists = path.exists();
            ev(format!("exists {exists}"));
            let created = std::fs::create_dir(&sub).is_ok();
            ev(format!("created {created}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (exists, created)
        }

        $(#[$batch])?
        pub fn temp_dir_loop(tag: &str) -> bool {
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let dir = TempDir::new(tag);
                let path = dir.path().to_owned();
                let sub = dir.path().join(format!("sub{i}"));
                ev(format!("paths ready {}", a.len()));
                let exists = path.exists();
                ev(format!("exists {exists}"));
                let created = std::fs::create_dir(&sub).is_ok();
                ev(format!("created {created}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            temp_path(tag).exists()
        }

        $(#[$inference])?
        pub async fn temp_dir_async(tag: &str) -> (bool, bool) {
            let a = Mem::new("a", 3);
            let dir = TempDir::new(tag);
            let path = dir.path().to_owned();
            let sub = dir.path().join("sub");
            ev(format!("paths ready {}", a.len()));
            pending_once().await;
            let exists = path.exists();
            ev(format!("exists {exists}"));
            let created = std::fs::create_dir(&sub).is_ok();
            ev(format!("created {created}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (exists, created)
        }

        // ---- an observer registered through a method that stores a `Weak` -------------------

        $(#[$inference])?
        pub fn observer() -> (usize, usize) {
            let subject = Subject::default();
            let a = Mem::new("a", 3);
            let watcher = Observer::new("watcher");
            subject.register(&watcher);
            ev(format!("registered {}", a.len()));
            let first = subject.notify("one");
            let b = Mem::new("b", 1);
            let second = subject.notify("two") + b.len();
            ev(format!("delivered {first} {second}"));
            (first, second)
        }

        $(#[$batch])?
        pub fn observer_loop() -> usize {
            let subject = Subject::default();
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let watcher = Observer::new(format!("watcher{i}"));
                subject.register(&watcher);
                ev(format!("registered {}", a.len()));
                let first = subject.notify("one");
                let b = Mem::new(format!("b{i}"), 1);
                let second = subject.notify("two") + b.len();
                ev(format!("delivered {first} {second}"));
            }
            subject.notify("after")
        }

        $(#[$inference])?
        pub async fn observer_async() -> (usize, usize) {
            let subject = Subject::default();
            let a = Mem::new("a", 3);
            let watcher = Observer::new("watcher");
            subject.register(&watcher);
            ev(format!("registered {}", a.len()));
            pending_once().await;
            let first = subject.notify("one");
            let b = Mem::new("b", 1);
            let second = subject.notify("two") + b.len();
            ev(format!("delivered {first} {second}"));
            (first, second)
        }

        // ---- an mpsc channel: the sender's last use is before a `try_recv` ------------------

        $(#[$inference])?
        pub fn channel() -> (usize, String) {
            let (tx, rx) = mpsc::channel::<usize>();
            let a = Mem::new("a", 3);
            tx.send(a.len()).unwrap();
            ev("sent");
            let got = rx.recv().unwrap();
            let state = format!("{:?}", rx.try_recv());
            ev(format!("state {state}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (got, state)
        }

        $(#[$batch])?
        pub fn channel_loop() -> usize {
            let mut last = 0;
            for i in 0..3usize {
                let (tx, rx) = mpsc::channel::<usize>();
                let a = Mem::new(format!("a{i}"), 3 + i);
                tx.send(a.len()).unwrap();
                ev("sent");
                let got = rx.recv().unwrap();
                let state = format!("{:?}", rx.try_recv());
                ev(format!("state {state}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
                last = got;
            }
            last
        }

        $(#[$inference])?
        pub async fn channel_async() -> (usize, String) {
            let (tx, rx) = mpsc::channel();
            let a = Mem::new("a", 3);
            tx.send(a.len()).unwrap();
            ev("sent");
            pending_once().await;
            let got = rx.recv().unwrap();
            let state = format!("{:?}", rx.try_recv());
            ev(format!("state {state}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (got, state)
        }

        // ---- an RAII handle whose `Copy` id was copied out; the registry is queried later ----

        $(#[$inference])?
        pub fn handle_id() -> (u32, bool) {
            let registry = Registry::default();
            let a = Mem::new("a", 3);
            let handle = registry.open();
            let id = handle.id;
            ev(format!("id {id} {}", a.len()));
            let open = registry.is_open(id);
            ev(format!("open {open}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (id, open)
        }

        $(#[$batch])?
        pub fn handle_id_loop() -> bool {
            let registry = Registry::default();
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let handle = registry.open();
                let id = handle.id;
                ev(format!("id {id} {}", a.len()));
                let open = registry.is_open(id);
                ev(format!("open {open}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            registry.is_open(0)
        }

        $(#[$inference])?
        pub async fn handle_id_async() -> (u32, bool) {
            let registry = Registry::default();
            let a = Mem::new("a", 3);
            let handle = registry.open();
            let id = handle.id;
            ev(format!("id {id} {}", a.len()));
            pending_once().await;
            let open = registry.is_open(id);
            ev(format!("open {open}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (id, open)
        }

        // ---- a `BufWriter` over a shared buffer whose length is read later -------------------

        $(#[$inference])?
        pub fn buf_writer() -> (usize, usize) {
            let buf = Rc::new(RefCell::new(Vec::new()));
            let a = Mem::new("a", 3);
            let mut w = std::io::BufWriter::new(SharedBuf(Rc::clone(&buf)));
            w.write_all(&[7; 5]).unwrap();
            ev(format!("wrote {}", a.len()));
            let len = buf.borrow().len();
            ev(format!("len {len}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (len, n)
        }

        $(#[$batch])?
        pub fn buf_writer_loop() -> usize {
            let buf = Rc::new(RefCell::new(Vec::new()));
            for i in 0..3usize {
                let a = Mem::new(format!("a{i}"), 3);
                let mut w = std::io::BufWriter::new(SharedBuf(Rc::clone(&buf)));
                w.write_all(&[7; 5]).unwrap();
                ev(format!("wrote {}", a.len()));
                let len = buf.borrow().len();
                ev(format!("len {len}"));
                let b = Mem::new(format!("b{i}"), 1);
                let n = b.len();
                ev(format!("n {n}"));
            }
            let len = buf.borrow().len();
            len
        }

        $(#[$inference])?
        pub async fn buf_writer_async() -> (usize, usize) {
            let buf = Rc::new(RefCell::new(Vec::new()));
            let a = Mem::new("a", 3);
            let mut w = std::io::BufWriter::new(SharedBuf(Rc::clone(&buf)));
            w.write_all(&[7; 5]).unwrap();
            ev(format!("wrote {}", a.len()));
            pending_once().await;
            let len = buf.borrow().len();
            ev(format!("len {len}"));
            let b = Mem::new("b", 1);
            let n = b.len();
            ev(format!("n {n}"));
            (len, n)
        }
    };
}

// ---- a `Copy` accumulator with mixed hygiene: `$acc` is the caller's, `acc` the macro's ------

macro_rules! max_accumulator {
    ($module:ident, $acc:ident, $($inference:meta, $batch:meta)?) => {
        pub mod $module {
            use crate::support::{ev, pending_once, Mem};

            $(#[$inference])?
            pub fn copy_accumulator(xs: &[i64]) -> i64 {
                let a = Mem::new("a", 2);
                let mut $acc = i64::MIN;
                for &x in xs {
                    $acc = $acc.max(x);
                }
                let acc = 100 + a.len() as i64;
                ev(format!("own acc {acc}"));
                let b = Mem::new("b", 1);
                ev(format!("max {}", $acc));
                let n = b.len() as i64;
                ev(format!("n {n}"));
                $acc * 1000 + acc + n
            }

            $(#[$batch])?
            pub fn copy_accumulator_loop(xs: &[i64]) -> i64 {
                let mut $acc = i64::MIN;
                for &x in xs {
                    let m = Mem::new(format!("m{x}"), 1);
                    $acc = $acc.max(x + m.len() as i64);
                    let acc = x * 2;
                    ev(format!("own acc {acc} max {}", $acc));
                    let b = Mem::new(format!("b{x}"), 1);
                    let n = b.len();
                    ev(format!("n {n}"));
                }
                $acc
            }

            $(#[$inference])?
            pub async fn copy_accumulator_async(xs: &[i64]) -> i64 {
                let a = Mem::new("a", 2);
                let mut $acc = i64::MIN;
                for &x in xs {
                    $acc = $acc.max(x);
                }
                pending_once().await;
                let acc = 100 + a.len() as i64;
                ev(format!("own acc {acc}"));
                let b = Mem::new("b", 1);
                ev(format!("max {}", $acc));
                let n = b.len() as i64;
                ev(format!("n {n}"));
                $acc * 1000 + acc + n
            }
        }
    };
}

max_accumulator!(
    accumulator_with,
    acc,
    vramguard::inference,
    vramguard::batch_scope
);
max_accumulator!(accumulator_without, acc,);

mod with {
    cases!(vramguard::inference, vramguard::batch_scope);
}

mod without {
    cases!();
}

/// `check!(f(args) => expected)`: both versions return `expected` (the value that shows the
/// kept value was alive) and pass `compare`. `check!(async f(args) => expected)`: the same for
/// an `async fn`, polled by `block_on`.
macro_rules! check {
    ($table:ident, $f:ident ( $($arg:expr),* ) => $expected:expr) => {{
        let outcome = crate::support::compare(
            stringify!($f),
            || without::$f($($arg),*),
            || with::$f($($arg),*),
        );
        assert_eq!(without::$f($($arg),*), $expected, "{}: unexpected result", stringify!($f));
        $table.push((stringify!($f), outcome));
    }};
    ($table:ident, async $f:ident ( $($arg:expr),* ) => $expected:expr) => {{
        use crate::support::block_on;
        let outcome = crate::support::compare(
            stringify!($f),
            || block_on(without::$f($($arg),*)),
            || block_on(with::$f($($arg),*)),
        );
        assert_eq!(
            block_on(without::$f($($arg),*)),
            $expected,
            "{}: unexpected result",
            stringify!($f)
        );
        $table.push((stringify!($f), outcome));
    }};
}

/// Every program freed some `Mem` earlier with the attribute, and the table is printed.
fn summarize(form: &str, table: &[(&str, Outcome)]) {
    for (name, outcome) in table {
        println!(
            "{form} {name}: {} kept events, {} frees, {} earlier",
            outcome.kept, outcome.frees, outcome.earlier
        );
    }
    let earlier: usize = table.iter().map(|(_, o)| o.earlier).sum();
    assert!(earlier > 0, "{form}: nothing was freed earlier");
    let late: Vec<_> = table
        .iter()
        .filter(|(_, o)| o.earlier == 0)
        .map(|(name, o)| format!("{name}: {:?}", o.with))
        .collect();
    assert!(
        late.is_empty(),
        "{form}: programs with no early free:\n{}",
        late.join("\n")
    );
}

#[test]
fn inference_functions() {
    let mut table = Vec::new();
    let t = &mut table;
    check!(t, mutex_guard() => (14, true));
    check!(t, refcell_borrow_mut() => (vec![1], false, false));
    check!(t, rwlock_write() => (true, 1));
    check!(t, ref_map() => (10, false));
    check!(t, span_guard() => 2);
    check!(t, consuming_forms() => 9);
    check!(t, env_guard("FN") => "inside".to_owned());
    check!(t, lock_file("lock-fn") => true);
    check!(t, pooled_connection() => (6, 1));
    check!(t, transaction() => (1, 1));
    check!(t, rc_strong_count() => (7, 2));
    check!(t, arc_try_unwrap() => (9, false));
    check!(t, rc_get_mut() => (8, false));
    check!(t, rc_make_mut() => (8, 6));
    check!(t, temp_dir("dir-fn") => (true, true));
    check!(t, observer() => (1, 2));
    check!(t, channel() => (3, "Err(Empty)".to_owned()));
    check!(t, handle_id() => (0, true));
    check!(t, buf_writer() => (0, 1));
    let xs = [3, 9, 4];
    let outcome = crate::support::compare(
        "copy_accumulator",
        || accumulator_without::copy_accumulator(&xs),
        || accumulator_with::copy_accumulator(&xs),
    );
    assert_eq!(accumulator_without::copy_accumulator(&xs), 9103);
    t.push(("copy_accumulator", outcome));
    assert_eq!(table.len(), 20);
    summarize("#[inference] fn", &table);
}

#[test]
fn batch_scope_loops() {
    let mut table = Vec::new();
    let t = &mut table;
    check!(t, mutex_guard_loop() => 13);
    check!(t, refcell_borrow_mut_loop() => vec![1, 3, 4, 5]);
    check!(t, rwlock_write_loop() => vec![5, 6, 7]);
    check!(t, ref_map_loop() => 3);
    check!(t, span_guard_loop() => 4);
    check!(t, consuming_forms_loop() => 11);
    check!(t, env_guard_loop("LOOP") => "<unset>".to_owned());
    check!(t, lock_file_loop("lock-loop") => false);
    check!(t, pooled_connection_loop() => 2);
    check!(t, transaction_loop() => 0);
    check!(t, rc_strong_count_loop() => 1);
    check!(t, arc_try_unwrap_loop() => 1);
    check!(t, rc_get_mut_loop() => 5);
    check!(t, rc_make_mut_loop() => 8);
    check!(t, temp_dir_loop("dir-loop") => false);
    check!(t, observer_loop() => 0);
    check!(t, channel_loop() => 5);
    check!(t, handle_id_loop() => false);
    check!(t, buf_writer_loop() => 15);
    let xs = [3, 9, 4];
    let outcome = crate::support::compare(
        "copy_accumulator_loop",
        || accumulator_without::copy_accumulator_loop(&xs),
        || accumulator_with::copy_accumulator_loop(&xs),
    );
    assert_eq!(accumulator_without::copy_accumulator_loop(&xs), 10);
    t.push(("copy_accumulator_loop", outcome));
    assert_eq!(table.len(), 20);
    summarize("#[batch_scope] loop", &table);
}

#[test]
fn async_functions() {
    let mut table = Vec::new();
    let t = &mut table;
    check!(t, async mutex_guard_async() => (14, true));
    check!(t, async refcell_borrow_mut_async() => (1, false));
    check!(t, async rwlock_write_async() => (true, 1));
    check!(t, async ref_map_async() => (10, false));
    check!(t, async span_guard_async() => 2);
    check!(t, async consuming_forms_async() => 9);
    check!(t, async env_guard_async("ASYNC") => "inside".to_owned());
    check!(t, async lock_file_async("lock-async") => true);
    check!(t, async pooled_connection_async() => (6, 1));
    check!(t, async transaction_async() => (1, 1));
    check!(t, async rc_strong_count_async() => (7, 2));
    check!(t, async arc_try_unwrap_async() => (9, false));
    check!(t, async rc_get_mut_async() => (8, false));
    check!(t, async rc_make_mut_async() => (8, 6));
    check!(t, async temp_dir_async("dir-async") => (true, true));
    check!(t, async observer_async() => (1, 2));
    check!(t, async channel_async() => (3, "Err(Empty)".to_owned()));
    check!(t, async handle_id_async() => (0, true));
    check!(t, async buf_writer_async() => (0, 1));
    let xs = [3, 9, 4];
    let outcome = crate::support::compare(
        "copy_accumulator_async",
        || crate::support::block_on(accumulator_without::copy_accumulator_async(&xs)),
        || crate::support::block_on(accumulator_with::copy_accumulator_async(&xs)),
    );
    assert_eq!(
        crate::support::block_on(accumulator_without::copy_accumulator_async(&xs)),
        9103
    );
    t.push(("copy_accumulator_async", outcome));
    assert_eq!(table.len(), 20);
    summarize("#[inference] async fn", &table);
}

// ---- KNOWN FAILURE: a `Copy` type that is also `DropAtLastUse`, under mixed hygiene ---------
//
// A user may declare a `Copy` type `DropAtLastUse` (its drop frees nothing and does nothing). For a
// `mut` local the attribute asks `__vg_droppable` and, if true, moves the local into the
// statement of its (scanned) last use: for a `Copy` type that copies it, and the statement
// mutates the copy. When the scan missed a later use — here the caller's `$acc` in the tail,
// which it takes for the macro's own `acc` — the later use reads the stale original.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Acc(pub i64);

impl vramguard::DropAtLastUse for Acc {}

impl Acc {
    pub fn bump(&mut self, x: i64) {
        self.0 = self.0.max(x);
    }
}

macro_rules! copy_drop_hygiene {
    ($module:ident, $acc:ident, $($inference:meta)?) => {
        #[allow(unused_assignments)]
        pub mod $module {
            use crate::support::ev;
            use super::Acc;

            $(#[$inference])?
            pub fn by_method() -> i64 {
                let mut $acc = Acc(0);
                $acc.bump(5);
                let acc = Acc(100);
                ev("1");
                $acc.0 * 1000 + acc.0
            }

            $(#[$inference])?
            pub fn by_assignment() -> i64 {
                let mut $acc = Acc(0);
                $acc = Acc($acc.0.max(7));
                let acc = Acc(100);
                ev("1");
                $acc.0 * 1000 + acc.0
            }
        }
    };
}

copy_drop_hygiene!(copy_drop_with, acc, vramguard::inference);
copy_drop_hygiene!(copy_drop_without, acc,);

#[test]
fn copy_drop_mixed_hygiene() {
    crate::support::compare(
        "by_method",
        copy_drop_without::by_method,
        copy_drop_with::by_method,
    );
    crate::support::compare(
        "by_assignment",
        copy_drop_without::by_assignment,
        copy_drop_with::by_assignment,
    );
}

/// An `async fn`'s parameters drop at the end of its body, not when the finished future is
/// dropped: rustc's lowering rebinds each inside the future, and so does `#[inference]`. The
/// future is polled to completion and kept; the caller logs before dropping it.
mod async_parameters {
    use crate::support::{ev, pending_once, Mem};

    /// Not `DropAtLastUse`: it is dropped at its scope end, which the log shows.
    pub struct Noisy(pub &'static str);

    impl Drop for Noisy {
        fn drop(&mut self) {
            ev(format!("drop {}", self.0));
        }
    }

    macro_rules! program {
        ($($inference:meta)?) => {
            $(#[$inference])?
            pub async fn run(first: Noisy, buffer: Mem, mut count: usize, second: Noisy) -> usize {
                ev(format!("start {} {}", first.0, second.0));
                count += buffer.len();
                pending_once().await;
                let local = Noisy("local");
                ev(format!("end {}", local.0));
                count
            }
        };
    }

    pub mod without {
        use super::{ev, pending_once, Mem, Noisy};
        program!();
    }

    pub mod with {
        use super::{ev, pending_once, Mem, Noisy};
        program!(vramguard::inference);
    }

    /// Polls `future` to completion, logs, then drops it.
    pub fn poll_keep_then_drop<F: std::future::Future<Output = usize>>(future: F) -> usize {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        let value = loop {
            if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut context) {
                break value;
            }
        };
        ev("completed, future still held");
        value
    }
}

#[test]
fn async_parameters_drop_at_the_end_of_the_body_as_without_the_attribute() {
    use crate::support::Mem;
    use async_parameters::{poll_keep_then_drop, with, without, Noisy};
    let outcome = crate::support::compare(
        "async_parameters",
        || poll_keep_then_drop(without::run(Noisy("a"), Mem::new("m", 3), 1, Noisy("b"))),
        || poll_keep_then_drop(with::run(Noisy("a"), Mem::new("m", 3), 1, Noisy("b"))),
    );
    assert_eq!(
        poll_keep_then_drop(without::run(Noisy("a"), Mem::new("m", 3), 1, Noisy("b"))),
        4
    );
    let log = crate::support::take_log();
    let completed = log
        .iter()
        .position(|e| e == "completed, future still held")
        .unwrap();
    let dropped = log.iter().position(|e| e == "drop a").unwrap();
    assert!(
        dropped < completed,
        "a parameter drops inside the body: {log:?}"
    );
    println!("async parameters: {outcome:?}");
}
