async fn generate(model: &Model, prompt: Tensor) -> Result<Tensor> {
    ::vramguard::__private::no_grad_future(
            ::vramguard::__private::with_library_no_grad(async move {
                let model = model;
                let prompt = prompt;
                let __vg_return: Result<Tensor> = {
                    #[allow(unused_imports)]
                    use ::vramguard::__private::{
                        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
                        PlainAtLastUse as _, Probe as __VgProbe,
                        drop_at_last_use as __vg_drop, last_use as __vg_last_use,
                        Dying as __VgDying,
                    };
                    let hidden = model.encode(&prompt).await?;
                    if (&&&__VgProbe(&prompt)).__vg_droppable() {
                        __vg_drop(prompt);
                    }
                    let logits = model.head.forward(&hidden)?;
                    if (&&&__VgProbe(&hidden)).__vg_droppable() {
                        __vg_drop(hidden);
                    }
                    let next = if !(&&&__VgProbe(&logits)).__vg_movable() {
                        logits.argmax(1)?
                    } else {
                        #[allow(unused_mut, unused_variables)]
                        let logits = __vg_last_use(logits);
                        let __vg_value = logits.argmax(1)?;
                        __vg_value
                    };
                    Ok(next)
                };
                __vg_return
            }),
        )
        .await
}
