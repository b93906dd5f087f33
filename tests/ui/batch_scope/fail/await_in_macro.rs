// `.await` inside a macro's arguments is an await in the loop body too; an `async` block
// inside a macro is not.
#[vramguard::batch_scope]
async fn awaits_in_a_macro() {
    for i in 0..1 {
        let spawned = vec![async move { std::future::ready(i).await }];
        drop(spawned);
        println!("{}", std::future::ready(i).await);
    }
}

fn main() {}
