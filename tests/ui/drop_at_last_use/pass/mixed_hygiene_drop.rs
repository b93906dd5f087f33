//! Once a failure of the attribute (fixed; kept as a pass case).
//!
//! A `macro_rules!` body declares its own `m` after a `DropAtLastUse` local named by the caller
//! (`$m`, spelled `m` too). The token scan cannot tell the two hygiene contexts apart: it takes
//! the caller's `$m` in the tail for the macro's `m`, so it drops `$m` after `let first =
//! $m.len();` and the tail's `$m.len()` is a use of a moved value: error[E0382]. Without the
//! attribute it compiles. (With a `Copy` local the same confusion is harmless unless the type
//! is also `DropAtLastUse`; see `copy_drop_mixed_hygiene` in `tests/drop_at_last_use/contract.rs`.)
#![deny(warnings)]

struct Mem(Vec<u8>);

impl vramguard::DropAtLastUse for Mem {}

macro_rules! mixed {
    ($name:ident, $m:ident) => {
        #[vramguard::inference]
        fn $name() -> usize {
            let $m = Mem(vec![1; 3]);
            let first = $m.0.len();
            let m = Mem(vec![1; 2]);
            println!("step");
            first + $m.0.len() * 10 + m.0.len()
        }
    };
}

mixed!(caller_and_macro_m, m);

fn main() {
    assert_eq!(caller_and_macro_m(), 35);
}
