// A local used in a loop is freed after the loop; branches and `let … else`.
#[vramguard::inference(keep(cache))]
fn decode(tokens: Vec<u32>, cache: Cache, mode: Mode) -> Option<usize> {
    let table = build_table();
    let mut total = 0;
    for t in &tokens {
        let row = table.row(*t);
        total += row.len();
    }
    let Some(first) = tokens.first() else {
        return None;
    };
    let label = match mode {
        Mode::Fast => format!("fast {first}"),
        Mode::Exact => format!("exact {first:>8}"),
    };
    println!("{label} {total}");
    cache.store(total);
    Some(total)
}
