//! `cargo vramguard` end to end: the real binary and real cargo runs on the fixture crates of
//! `tests/fixtures/`. `check` (`end_to_end`), `apply` and `measure` (`adopt`, on a git copy of
//! its fixture), `lint` (`lint`, nothing built). The builds share one target directory under
//! the workspace's `target/`, so vramguard and its dependencies build once (cargo's lock keeps
//! two runs from building there at once).

mod adopt;
mod end_to_end;
mod lint;
