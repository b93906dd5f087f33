async fn generate(model: &Model, prompt: Tensor) -> Result<Tensor> {
    ::vramguard::__private::no_grad_future(async move {
            let __vg_return: Result<Tensor> = {
                let hidden = {
                    #[allow(unused_variables, clippy::redundant_locals)]
                    let prompt = prompt;
                    let __vg_value = model.encode(&prompt).await?;
                    __vg_value
                };
                let logits = {
                    #[allow(unused_variables, clippy::redundant_locals)]
                    let hidden = hidden;
                    let __vg_value = model.head.forward(&hidden)?;
                    __vg_value
                };
                let next = {
                    #[allow(unused_variables, clippy::redundant_locals)]
                    let logits = logits;
                    let __vg_value = logits.argmax(1)?;
                    __vg_value
                };
                Ok(next)
            };
            __vg_return
        })
        .await
}
