fn evaluate(model: &Model, data: &[Batch]) -> Vec<f32> {
    let mut scores = Vec::new();
    for warmup in data.iter().take(1) {
        model.warm(warmup);
    }
    for (i, batch) in data.iter().enumerate() {
        let __vramguard_scope = ::vg::__private::BatchScope::enter_with(
            "eval",
            ::vg::__private::ScopeOptions::new().warn_after_growing(3u32),
        );
        {
            #[allow(unused_imports)]
            use ::vg::__private::{
                CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
            };
            let out = if (&&&::vg::__private::Probe::of(&batch)).__vg_movable() {
                #[allow(unused_mut, unused_variables)]
                let batch = ::vg::__private::last_use(batch);
                let __vg_value = model.forward(batch);
                __vg_value
            } else {
                model.forward(batch)
            };
            scores.push(out.item() + i as f32);
        };
    }
    scores
}
