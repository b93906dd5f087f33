fn train(model: &mut Model, data: &[Batch]) -> Result<f32, Error> {
    let mut total = 0.0;
    for batch in data {
        let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
            ::core::concat!(::core::module_path!(), "::", "train", ":", ::core::line!()),
            ::vramguard::__private::ScopeOptions::new()
                .strict(true)
                .empty_cache_every(10u32),
        );
        {
            #[allow(unused_imports)]
            use ::vramguard::__private::{
                CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
                PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
                last_use as __vg_last_use, Dying as __VgDying,
            };
            let loss = model.step(batch)?;
            if !(&&&__VgProbe(&loss)).__vg_movable() {
                total += loss.item();
            } else {
                #[allow(unused_mut, unused_variables)]
                let loss = __vg_last_use(loss);
                total += loss.item();
            }
            if total > 10.0 {
                continue;
            }
        };
    }
    let mut n = 0;
    while n < 3 {
        let __vramguard_scope = ::vramguard::__private::BatchScope::enter_with(
            ::core::concat!(::core::module_path!(), "::", "train", ":", ::core::line!()),
            ::vramguard::__private::ScopeOptions::new()
                .strict(true)
                .empty_cache_every(10u32),
        );
        {
            n += 1;
        };
    }
    Ok(total)
}
