//! `#[batch_scope]` drops an iteration's values inside the branches of its body (`if`,
//! `else if`, `match` with guards, `if let`, `let … else`, `?`, a nested loop), with no warning.
#![deny(warnings)]

#[derive(Debug)]
struct Buf(Vec<u8>);

impl vramguard::DropAtLastUse for Buf {}

impl Buf {
    fn new(n: usize) -> Buf {
        Buf(vec![0; n])
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn check(n: usize) -> Result<usize, String> {
    if n > 100 {
        Err(format!("{n} is too many"))
    } else {
        Ok(n)
    }
}

// `total` adds plain numbers, not tensors: no graph across iterations.
#[vramguard::batch_scope]
#[vramguard::allow(graph_across_iterations)]
fn shapes(steps: usize) -> Result<usize, String> {
    let mut total = 0;
    for i in 0..steps {
        let a = Buf::new(i + 1);
        let b = Buf::new(2);
        let mut m = Buf::new(1);
        let r = if i % 3 == 0 {
            let n = check(a.len())?;
            m.0.push(1);
            n + m.len()
        } else if i % 3 == 1 {
            let mut k = 0;
            for j in 0..2 {
                k += b.len() + j;
            }
            k
        } else {
            match a.len() {
                n if n > b.len() => n,
                n => {
                    let c = Buf::new(n);
                    c.len()
                }
            }
        };
        let Some(half) = r.checked_div(2) else {
            return Err(format!("{}", a.len()));
        };
        total += half;
        if let Some(x) = Some(i).filter(|x| *x > 1) {
            let d = Buf::new(x);
            total += d.len();
        }
    }
    Ok(total)
}

fn main() {
    assert_eq!(shapes(4), Ok(12));
}
