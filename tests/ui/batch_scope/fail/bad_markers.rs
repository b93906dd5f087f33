#[vramguard::batch_scope]
fn marker_on_a_let() {
    #[batch_scope]
    let x = 1;
    for _ in 0..x {}
}

#[vramguard::batch_scope]
fn crate_on_a_marker() {
    #[batch_scope(crate = vramguard)]
    for _ in 0..1 {}
}

#[vramguard::batch_scope]
async fn awaits_in_the_loop() {
    for _ in 0..1 {
        std::future::ready(()).await;
    }
}

fn main() {}
