// One diagnostic per mistake (issue #19): a type error inside each statement shape the
// transform still rewrites is reported once, at the user's code, as without the attribute. The
// shape of each function is checked to be rewritten by the macros' unit test
// `one_diagnostic_cases_are_rewritten` (the `// rewritten:` line names what its expansion holds).
use std::ops::Add;
use vramguard::tensor::Result;
use vramguard::Tensor;

/// Activations; `size` is a method the macro does not know, so a statement calling it on a
/// dying value may move it and is written twice.
struct Act(Vec<f32>);

impl Act {
    fn size(&self) -> usize {
        self.0.len()
    }
}

/// A type with a `mapv` and a `gelu` of its own (by value), not `DropAtLastUse`.
struct Lookalike;

impl Lookalike {
    fn mapv(self, f: impl Fn(f32) -> f32) -> f32 {
        f(1.0)
    }
    fn gelu(self) -> Lookalike {
        self
    }
}

// rewritten: __vg_drop
#[vramguard::inference]
fn borrowed_then_dropped(x: Vec<f32>) -> usize {
    let n: u32 = x.len();
    let k = 1;
    k + n as usize
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn written_twice(x: Act) -> usize {
    let n: u32 = x.size();
    let k = 1;
    k + n as usize
}

// rewritten: __vg_drop
#[vramguard::inference]
fn shadowed(x: Vec<f32>) -> usize {
    let x: u8 = x.len();
    let k = 1;
    k + x as usize
}

// rewritten: gelu_receiver
#[vramguard::inference]
fn in_place_result(x: Tensor) -> Result<usize> {
    let y: Vec<f32> = x.gelu()?;
    let k = 1;
    Ok(k + y.len())
}

// rewritten: broadcast_add_receiver
#[vramguard::inference]
fn in_place_argument(x: Tensor) -> Result<usize> {
    let y = x.broadcast_add(&3u8)?;
    let k = 1;
    Ok(k + y.rank())
}

// rewritten: add_receiver
#[vramguard::inference]
fn in_place_operator_in_scope(x: Tensor, v: Vec<u8>) -> Result<usize> {
    let y = x.add(v)?;
    let k = 1;
    Ok(k + y.rank())
}

// rewritten: gelu_receiver
#[vramguard::inference]
fn receiver_of_another_type(x: Lookalike) -> usize {
    let y: u8 = x.gelu();
    let k = 1;
    k + y as usize
}

// rewritten: mapv_receiver
#[vramguard::inference]
fn mapv_closure(x: Lookalike) -> f32 {
    let y = x.mapv(|v| v + "one");
    let k = 1.0;
    k + y
}

// rewritten: __vg_drop
#[vramguard::inference]
fn in_a_branch(x: Act, pick: u8) -> usize {
    let y = if pick == 0 {
        0
    } else if pick == 1 {
        let n: u32 = x.size();
        n as usize
    } else {
        2
    };
    let k = 1;
    k + y
}

// rewritten: __vg_drop
#[vramguard::inference]
fn in_a_guarded_match_arm(x: Vec<f32>, pick: Option<u8>) -> usize {
    let y = match pick {
        Some(v) if v > 1 => {
            let n: u32 = x.len();
            n as usize
        }
        _ => 0,
    };
    let k = 1;
    k + y
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn question_mark_in_a_branch(x: Act, c: bool) -> std::result::Result<usize, String> {
    let y = if c {
        let n: u32 = Ok::<usize, String>(x.size())?;
        n as usize
    } else {
        0
    };
    let k = 1;
    Ok(k + y)
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn loop_in_a_branch(x: Act, c: bool) -> usize {
    let y = if c {
        let mut t = 0;
        for _ in 0..2 {
            t += 1;
        }
        let n: u32 = x.size();
        n as usize + t
    } else {
        0
    };
    let k = 1;
    k + y
}

// rewritten: __vg_drop
#[vramguard::inference]
fn let_else(x: Act, c: Option<u8>) -> usize {
    let Some(v) = c else {
        let n: u32 = x.size();
        return n as usize;
    };
    let k = 1;
    k + v as usize
}

// rewritten: __vg_last_use
#[vramguard::inference]
fn branch_value(x: Act, c: bool) -> u32 {
    if c {
        let n = x.size();
        n
    } else {
        0
    }
}

// rewritten: __vg_last_use
#[vramguard::inference]
async fn in_an_async_fn(x: Act) -> usize {
    let n: u32 = x.size();
    let k = std::future::ready(1).await;
    k + n as usize
}

fn main() {}
