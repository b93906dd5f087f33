#![deny(deprecated)]

use vramguard::scope;

struct Trainer {
    steps: usize,
}

impl Trainer {
    #[vramguard::batch_scope]
    fn run(&mut self) -> usize {
        for _ in 0..3 {
            self.steps += 1;
        }
        self.steps
    }
}

#[vramguard::batch_scope(strict, warn_after = 4, every = 10)]
fn every_kind_of_loop<T: Clone>(items: Vec<T>) -> usize {
    let mut n = 0;
    for item in items.clone() {
        let _copy = item.clone();
        n += 1;
    }
    let mut stack = items;
    while let Some(_item) = stack.pop() {
        n += 1;
    }
    let found = 'search: loop {
        for i in 0.. {
            if i == 3 {
                break 'search i;
            }
        }
    };
    let closure = || {
        let mut m = 0;
        while m < 2 {
            m += 1;
        }
        m
    };
    n + found + closure()
}

#[vramguard::batch_scope]
fn marked(n: usize) -> (usize, bool) {
    let mut outer = 0;
    for _ in 0..n {
        outer += 1;
    }
    let mut scoped = false;
    #[batch_scope(label = "placements::marked", strict)]
    for _ in 0..n {
        scoped = scope::current_label().as_deref() == Some("placements::marked");
    }
    (outer, scoped)
}

#[vramguard::batch_scope(crate = ::vramguard)]
async fn async_without_await_in_the_loop(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        total += i;
    }
    std::future::ready(total).await
}

fn main() {
    assert_eq!(Trainer { steps: 0 }.run(), 3);
    assert_eq!(every_kind_of_loop(vec![1, 2]), 9);
    assert_eq!(marked(2), (2, true));
    let _ = async_without_await_in_the_loop(3);
}
