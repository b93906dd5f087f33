fn decode(tokens: Vec<u32>, cache: Cache, mode: Mode) -> Option<usize> {
    let __vg_no_grad = ::vramguard::__private::NoGradGuard::new();
    let table = build_table();
    let mut total = 0;
    {
        #[allow(unused_variables, clippy::redundant_locals)]
        let table = table;
        for t in &tokens {
            let row = table.row(*t);
            total += row.len();
        }
    }
    let Some(first) = tokens.first() else {
        return None;
    };
    let label = {
        #[allow(unused_variables, clippy::redundant_locals)]
        let first = first;
        let __vg_value = match mode {
            Mode::Fast => format!("fast {first}"),
            Mode::Exact => format!("exact {first:>8}"),
        };
        __vg_value
    };
    ::vramguard::__private::release(tokens);
    {
        #[allow(unused_variables, clippy::redundant_locals)]
        let label = label;
        println!("{label} {total}");
    }
    cache.store(total);
    Some(total)
}
