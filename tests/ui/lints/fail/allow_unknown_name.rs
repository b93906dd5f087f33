#[vramguard::batch_scope]
#[vramguard::allow(accumulate_across_iterations)]
fn misspelled_on_fn(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        total += i;
    }
    total
}

#[vramguard::batch_scope]
fn misspelled_on_statement(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        #[vramguard::allow(graph_accross_iterations, nonsense)]
        let _ = total;
        total += i;
    }
    total
}

#[vramguard::allow()]
fn nothing_allowed() {}

fn main() {
    let _ = (misspelled_on_fn(1), misspelled_on_statement(1));
    nothing_allowed();
}
