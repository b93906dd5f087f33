fn drain(model: &mut Model, mut queue: Queue) -> usize {
    let mut steps = 0;
    while let Some(batch) = queue.pop() {
        let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
            ::core::concat!(::core::module_path!(), "::", "drain", ":", ::core::line!()),
            ::vramguard::__private::ScopeOptions::new().warn_after_growing(2u32),
        );
        {
            #[allow(unused_imports)]
            use ::vramguard::__private::{
                CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
                PlainAtLastUse as _, Probe as __VgProbe, release as __vg_release,
                last_use as __vg_last_use, Dying as __VgDying,
            };
            let out = model.forward(&batch);
            if (&&&__VgProbe(&batch)).__vg_releasable() {
                __vg_release(batch);
            }
            model.record(out);
        };
    }
    loop {
        let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
            ::core::concat!(::core::module_path!(), "::", "drain", ":", ::core::line!()),
            ::vramguard::__private::ScopeOptions::new().warn_after_growing(2u32),
        );
        {
            let probe = model.probe();
            steps += 1;
            if probe.done() {
                break;
            }
        };
    }
    steps
}
