//! Doubling then bisection: the reference every largest-batch finder in the examples is checked
//! against.

/// The largest batch for which `fits` holds, by doubling from 1 and then bisecting (the
/// reference the finder is checked against), and how many times `fits` ran. Stops doubling at
/// `cap`.
pub fn bisection<E>(
    cap: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<(usize, usize), E> {
    let mut runs = 0;
    let mut probe = |batch: usize| {
        runs += 1;
        fits(batch)
    };
    let (mut good, mut bad) = (0usize, None::<usize>);
    let mut batch = 1;
    while batch <= cap {
        if probe(batch)? {
            good = batch;
            batch *= 2;
        } else {
            bad = Some(batch);
            break;
        }
    }
    if let Some(mut bad) = bad {
        while bad - good > 1 {
            let mid = good + (bad - good) / 2;
            if probe(mid)? {
                good = mid;
            } else {
                bad = mid;
            }
        }
    }
    Ok((good, runs))
}
