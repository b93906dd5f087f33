fn decode(tokens: Vec<u32>, cache: Cache, mode: Mode) -> Option<usize> {
    let __vg_no_grad = ::vramguard::__private::inference_guard();
    #[allow(unused_imports)]
    use ::vramguard::__private::{
        CopyAtLastUse as _, KeepToScopeEnd as _, DroppableAtLastUse as _,
        PlainAtLastUse as _, Probe as __VgProbe, drop_at_last_use as __vg_drop,
        last_use as __vg_last_use, Dying as __VgDying,
    };
    let table = build_table();
    let mut total = 0;
    for t in &tokens {
        let row = table.row(*t);
        total += row.len();
    }
    if (&&&__VgProbe(&table)).__vg_droppable() {
        __vg_drop(table);
    }
    let Some(first) = tokens.first() else {
        return None;
    };
    let label = match mode {
        Mode::Fast => format!("fast {first}"),
        Mode::Exact => format!("exact {first:>8}"),
    };
    if (&&&__VgProbe(&first)).__vg_droppable() {
        __vg_drop(first);
    }
    if (&&&__VgProbe(&tokens)).__vg_droppable() {
        __vg_drop(tokens);
    }
    println!("{label} {total}");
    if (&&&__VgProbe(&label)).__vg_droppable() {
        __vg_drop(label);
    }
    cache.store(total);
    Some(total)
}
