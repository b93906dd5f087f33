// One diagnostic per mistake (issue #19): a borrow error inside each statement shape the
// transform still rewrites is reported once, at the user's code, as without the attribute (see
// `one_diagnostic_type_errors.rs`; the `// rewritten:` lines are checked the same way).
fn pair(v: Vec<f32>, w: &[f32]) -> usize {
    v.len() + w.len()
}

/// Activations; `size` is a method the macro does not know, so a statement calling it on a
/// dying value may move it and is written twice.
struct Act(Vec<f32>);

impl Act {
    fn size(&self) -> usize {
        self.0.len()
    }
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn written_twice(a: Act, x: Vec<f32>) -> usize {
    let n = a.size() + pair(x, &x);
    let k = 1;
    k + n
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn in_a_branch(a: Act, x: Vec<f32>, c: bool) -> usize {
    let y = if c { a.size() + pair(x, &x) } else { 0 };
    let k = 1;
    k + y
}

// rewritten: __vg_last_use
#[vramguard::inference]
async fn in_an_async_fn(a: Act, x: Vec<f32>) -> usize {
    let n = a.size() + pair(x, &x);
    let k = 1;
    k + n
}

// rewritten: __vg_drop
#[vramguard::inference]
fn a_borrow_outliving_a_move(x: Vec<f32>, w: Vec<f32>) -> usize {
    let first = &w[0];
    let n = x.len() + pair(w, &[]);
    let k = 1;
    k + n + *first as usize
}

fn main() {}
