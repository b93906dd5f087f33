// Option names that are paths, a missing `,`, a missing value, and an unknown option on a loop
// marker: each error names the option as written, at its own span.
#[vramguard::batch_scope(scope::label = "eval")]
fn path_as_option_name() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(strict every = 2)]
fn missing_comma() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope(label)]
fn label_without_value() {
    for _ in 0..1 {}
}

#[vramguard::batch_scope]
fn unknown_marker_option() {
    #[batch_scope(lable = "eval")]
    for _ in 0..1 {}
}

fn main() {}
