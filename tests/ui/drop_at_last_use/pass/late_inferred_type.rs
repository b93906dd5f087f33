//! Once a failure of the attribute (fixed; kept as a pass case).
//!
//! A local whose type is inferred only at (or after) its last use, from an initializer that
//! the macro's syntactic `type_deferred` list does not recognise. The probe placed before the
//! statement sees `Option<Vec<?T>>` / `Box<Vec<?T>>` / `?T` / `Vec<?T>`; method resolution
//! picks `DroppableAtLastUse` while `?T: DropAtLastUse` is still ambiguous, and once `?T = String`
//! the obligation fails: error[E0277]: `String` is not `vramguard::DropAtLastUse`. Without the
//! attribute every function compiles.
#![deny(warnings)]

fn count(o: Option<Vec<String>>) -> usize {
    o.map_or(0, |v| v.len())
}
fn count_box(o: Box<Vec<String>>) -> usize {
    o.len()
}
fn take_string(s: String) -> usize {
    s.len()
}
fn take_vec(v: Vec<String>) -> usize {
    v.len()
}
fn make<T: Default>() -> T {
    T::default()
}

#[vramguard::inference]
fn some_vec_new() -> usize {
    let o = Some(Vec::new());
    let n = count(o);
    let m = n + 1;
    m
}

#[vramguard::inference]
fn box_vec_new() -> usize {
    let o = Box::new(Vec::new());
    let n = count_box(o);
    let m = n + 1;
    m
}

#[vramguard::inference]
fn generic_constructor() -> usize {
    let s = make();
    let n = take_string(s);
    let m = n + 1;
    m
}

#[vramguard::inference]
fn turbofish_placeholder() -> usize {
    let v = Vec::<_>::new();
    let n = take_vec(v);
    let m = n + 1;
    m
}

fn main() {
    assert_eq!(some_vec_new(), 1);
    assert_eq!(box_vec_new(), 1);
    assert_eq!(generic_constructor(), 1);
    assert_eq!(turbofish_placeholder(), 1);
}
