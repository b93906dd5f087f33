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
            let out = model.forward(batch);
            scores.push(out.item() + i as f32);
        };
    }
    scores
}
