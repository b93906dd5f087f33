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
                CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
                PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
                last_use as __vg_last_use, Dying as __VgDying,
            };
            let out = model.forward(&batch);
            if (&&&__VgProbe(&batch)).__vg_droppable() {
                __vg_drop(batch);
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
