//! `#[batch_scope]` with the shapes of issue #43 in an iteration's body: a `mut` local rewritten
//! while a borrow of it feeds the condition and the new value, a by-value item consumed as a
//! receiver in one arm of a branch nested in an `if let` after a borrow of it, and a borrow of
//! an iteration's value stored through an `if let` binding (into a body-local and an outer
//! collection), with no warning.
#![deny(warnings)]

#[derive(Debug, Clone)]
struct Buf(Vec<i64>);

impl vramguard::DropAtLastUse for Buf {}

impl Buf {
    fn dims(&self) -> &[i64] {
        &self.0
    }
    fn reshape(&self, n: i64) -> Result<Buf, String> {
        Ok(Buf(vec![n; 2]))
    }
    /// burn-style: consumes the receiver.
    fn flatten(self) -> Buf {
        Buf(self.0.into_iter().rev().collect())
    }
}

#[vramguard::batch_scope]
fn rewritten_while_borrowed(inputs: &[Buf]) -> Result<i64, String> {
    let mut total = 0;
    for input in inputs {
        let mut xs = input.clone();
        let dims = xs.dims();
        if dims.len() == 3 {
            xs = xs.reshape(dims[0] * dims[1])?;
        } else if dims.len() == 4 {
            xs = xs.reshape(dims[3])?;
        }
        total += xs.0.iter().sum::<i64>();
    }
    Ok(total)
}

#[vramguard::batch_scope]
fn consumed_in_a_nested_else(items: Vec<Buf>, weights: Option<i64>) -> i64 {
    let mut total = 0;
    for (i, labels) in items.into_iter().enumerate() {
        let shape = labels.dims();
        let y = labels.clone();
        if let Some(w) = weights {
            let w = if i % 2 == 0 {
                w * shape.len() as i64
            } else {
                w + labels.flatten().0[0]
            };
            total += w;
        }
        total += y.0.len() as i64;
    }
    total
}

#[vramguard::batch_scope]
fn stored_through_if_let(words: &[String]) -> usize {
    let mut outer: Vec<Vec<&String>> = vec![Vec::new()];
    let mut total = 0;
    for word in words {
        let local_word = word.to_uppercase();
        let mut groups: Vec<Vec<&String>> = vec![Vec::new()];
        if let Some(g) = groups.last_mut() {
            g.push(&local_word)
        }
        if let Some(g) = outer.last_mut() {
            g.push(word)
        }
        total += groups[0][0].len();
    }
    total + outer[0].len()
}

fn main() {
    let inputs = [Buf(vec![1, 2, 3]), Buf(vec![1, 2, 3, 4]), Buf(vec![5])];
    assert_eq!(rewritten_while_borrowed(&inputs), Ok(2 * 2 + 2 * 4 + 5));
    let items = vec![Buf(vec![1, 2]), Buf(vec![3, 4])];
    assert_eq!(consumed_in_a_nested_else(items, Some(10)), 20 + 14 + 4);
    let words = ["ab".to_string(), "c".to_string()];
    assert_eq!(stored_through_if_let(&words), 5);
}
