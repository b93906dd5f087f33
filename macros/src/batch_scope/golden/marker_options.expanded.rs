fn train(model: &mut Model, epochs: usize, data: &[Batch]) {
    for epoch in 0..epochs {
        for batch in data {
            let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
                "step",
                ::vramguard::__private::ScopeOptions::new()
                    .strict(true)
                    .warn_after_growing(5u32)
                    .empty_cache_every(2u32)
                    .warnings(::vramguard::__private::WarningOutput::Tracing),
            );
            {
                let loss = model.step(batch);
                loss.backward();
            };
        }
        while model.needs_eval(epoch) {
            let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
                ::core::concat!(
                    ::core::module_path!(), "::", "train", ":", ::core::line!()
                ),
                ::vramguard::__private::ScopeOptions::new()
                    .strict(true)
                    .empty_cache_every(4u32)
                    .warnings(::vramguard::__private::WarningOutput::Stderr),
            );
            {
                model.evaluate();
            };
        }
    }
}
