fn decode(tokens: Vec<u32>, cache: Cache, mode: Mode) -> Option<usize> {
    let __vg_no_grad = ::vramguard::__private::NoGradGuard::new();
    let __vg_library_no_grad = ::vramguard::__private::library_no_grad();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, ReleaseAtLastUse as _,
    };
    let table = build_table();
    let mut total = 0;
    if (&&&::vramguard::__private::Probe::of(&table)).__vg_movable() {
        #[allow(unused_mut, unused_variables)]
        let table = ::vramguard::__private::last_use(table);
        for t in &tokens {
            let row = table.row(*t);
            total += row.len();
        }
    } else {
        for t in &tokens {
            let row = table.row(*t);
            total += row.len();
        }
    }
    let Some(first) = tokens.first() else {
        return None;
    };
    let label = match mode {
        Mode::Fast => format!("fast {first}"),
        Mode::Exact => format!("exact {first:>8}"),
    };
    if (&&&::vramguard::__private::Probe::of(&first)).__vg_releasable() {
        ::vramguard::__private::release(first);
    }
    if (&&&::vramguard::__private::Probe::of(&tokens)).__vg_releasable() {
        ::vramguard::__private::release(tokens);
    }
    println!("{label} {total}");
    if (&&&::vramguard::__private::Probe::of(&label)).__vg_releasable() {
        ::vramguard::__private::release(label);
    }
    cache.store(total);
    Some(total)
}
