fn decode(tokens: Vec<u32>, cache: Cache, mode: Mode) -> Option<usize> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, release as __vg_release,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let table = build_table();
    let mut total = 0;
    for t in &tokens {
        let row = table.row(*t);
        total += row.len();
    }
    if (&&&__VgProbe(&table)).__vg_releasable() {
        __vg_release(table);
    }
    let Some(first) = tokens.first() else {
        return None;
    };
    let label = match mode {
        Mode::Fast => format!("fast {first}"),
        Mode::Exact => format!("exact {first:>8}"),
    };
    if (&&&__VgProbe(&first)).__vg_releasable() {
        __vg_release(first);
    }
    if (&&&__VgProbe(&tokens)).__vg_releasable() {
        __vg_release(tokens);
    }
    println!("{label} {total}");
    if (&&&__VgProbe(&label)).__vg_releasable() {
        __vg_release(label);
    }
    cache.store(total);
    Some(total)
}
