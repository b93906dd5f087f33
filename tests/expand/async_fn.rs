// `async fn`: grad mode is set around each poll, not held across `.await`.
#[vramguard::inference]
async fn generate(model: &Model, prompt: Tensor) -> Result<Tensor> {
    let hidden = model.encode(&prompt).await?;
    let logits = model.head.forward(&hidden)?;
    let next = logits.argmax(1)?;
    Ok(next)
}
