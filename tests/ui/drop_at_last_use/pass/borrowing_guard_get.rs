//! Once a failure of the attribute (fixed; kept as a pass case).
//!
//! A kept value with a `Drop` that borrows a local through a method the lists know as a plain
//! borrow (`get`, as in a `bb8`-style pool whose `PooledConnection<'_>` returns itself on
//! drop, or `dashmap`'s `get` guard): the analysis lets the borrow end at the borrower's last
//! use, but a kept borrower lives to the end of the scope. At the pool's last use the
//! attribute writes the statement twice and the dead `DropAtLastUse` branch moves `pool`
//! (`let pool = pool;`) while `conn` still borrows it: error[E0505]. Without the attribute it
//! compiles. (`lock`, `borrow_mut`, `enter`, … are in `GUARD_METHODS` and compile; an unknown
//! name such as `checkout` is conservatively kept and compiles.)
#![deny(warnings)]

use std::cell::Cell;

struct Pool {
    free: Cell<usize>,
}

struct Conn<'a> {
    pool: &'a Pool,
}

impl Pool {
    fn get(&self) -> Conn<'_> {
        self.free.set(self.free.get() - 1);
        Conn { pool: self }
    }
    fn free_count(&self) -> usize {
        self.free.get()
    }
}

impl Conn<'_> {
    fn query(&self, x: usize) -> usize {
        x * 2
    }
}

impl Drop for Conn<'_> {
    fn drop(&mut self) {
        self.pool.free.set(self.pool.free.get() + 1);
    }
}

fn log(line: String) {
    let _ = line;
}

#[vramguard::inference]
fn pooled() -> usize {
    let mut acc = 0;
    let pool = Pool { free: Cell::new(2) };
    let conn = pool.get();
    acc += conn.query(3);
    log(format!("free connections: {}", pool.free_count()));
    log(String::from("end"));
    acc
}

fn main() {
    assert_eq!(pooled(), 6);
}
