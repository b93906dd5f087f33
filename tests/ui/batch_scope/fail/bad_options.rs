#[vramguard::batch_scope(lable = "typo")]
fn unknown_option() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(every = 0)]
fn zero_every() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(strict, strict)]
fn twice() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(label = 3)]
fn label_not_a_string() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(label = "one")]
fn label_on_two_loops() {
    for _ in 0..1 {}
    for _ in 0..1 {}
}

#[vramguard::batch_scope(warnings = "loud")]
fn unknown_warning_output() {
    for _ in 0..1 {}
}

fn main() {}
