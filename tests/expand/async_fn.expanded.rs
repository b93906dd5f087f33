async fn generate(model: &Model, prompt: Tensor) -> Result<Tensor> {
    ::vramguard::__private::no_grad_future(
            ::vramguard::__private::with_library_no_grad(async move {
                let __vg_return: Result<Tensor> = {
                    #[allow(unused_imports)]
                    use ::vramguard::__private::{
                        CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
                    };
                    let hidden = model.encode(&prompt).await?;
                    if (&&&::vramguard::__private::Probe::of(&prompt)).__vg_releasable()
                    {
                        ::vramguard::__private::release(prompt);
                    }
                    let logits = model.head.forward(&hidden)?;
                    if (&&&::vramguard::__private::Probe::of(&hidden)).__vg_releasable()
                    {
                        ::vramguard::__private::release(hidden);
                    }
                    let next = if (&&&::vramguard::__private::Probe::of(&logits))
                        .__vg_movable()
                    {
                        #[allow(unused_mut, unused_variables)]
                        let logits = ::vramguard::__private::last_use(logits);
                        let __vg_value = logits.argmax(1)?;
                        __vg_value
                    } else {
                        logits.argmax(1)?
                    };
                    Ok(next)
                };
                __vg_return
            }),
        )
        .await
}
