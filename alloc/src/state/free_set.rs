//! [`FreeSet`]: the free blocks of one pool of one stream, ordered by (size, address) — the
//! order best fit searches. It owns the keys and their container, nothing else: which blocks
//! are free, and when, is [`super::State`]'s business.

use crate::policy::ADDR_LIMIT;
use std::collections::BTreeSet;

/// Free blocks of one pool ordered by (size, address), each key packed into one `u128`
/// (48-bit size, 48-bit address, 32-bit slot) so comparisons are single integers.
///
/// A pool usually holds few free blocks, and a cached alloc+free pair takes one lookup, two
/// removals and two insertions: in a sorted vector those are a binary search and a short move,
/// a fraction of a B-tree's node walks and rebalancing. Past [`FreeSet::TREE_ABOVE`] blocks the
/// moves would grow with the pool, so the keys move to a B-tree (and back below
/// [`FreeSet::VEC_BELOW`]; the gap keeps a pool near the bound from switching at every call).
/// Both hold the same keys in the same order: which one holds them changes no answer.
pub(super) enum FreeSet {
    Sorted(Vec<u128>),
    Tree(BTreeSet<u128>),
}

impl Default for FreeSet {
    fn default() -> Self {
        FreeSet::Sorted(Vec::new())
    }
}

impl FreeSet {
    /// More keys than this move to a B-tree.
    const TREE_ABOVE: usize = 256;
    /// Fewer keys than this move back to a sorted vector.
    const VEC_BELOW: usize = 64;

    #[inline]
    fn key(size: usize, addr: u64, slot: u32) -> u128 {
        ((size as u128) << 80) | ((addr as u128) << 32) | slot as u128
    }
    #[inline]
    fn unpack(k: u128) -> (usize, u64, u32) {
        (
            (k >> 80) as usize,
            ((k >> 32) as u64) & (ADDR_LIMIT - 1),
            k as u32,
        )
    }
    #[inline]
    pub fn insert(&mut self, size: usize, addr: u64, slot: u32) {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => {
                if let Err(at) = v.binary_search(&k) {
                    v.insert(at, k);
                }
                if v.len() > Self::TREE_ABOVE {
                    *self = FreeSet::Tree(std::mem::take(v).into_iter().collect());
                }
            }
            FreeSet::Tree(t) => {
                t.insert(k);
            }
        }
    }
    #[inline]
    pub fn remove(&mut self, size: usize, addr: u64, slot: u32) -> bool {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => match v.binary_search(&k) {
                Ok(at) => {
                    v.remove(at);
                    true
                }
                Err(_) => false,
            },
            FreeSet::Tree(t) => {
                let removed = t.remove(&k);
                if t.len() < Self::VEC_BELOW {
                    *self = FreeSet::Sorted(std::mem::take(t).into_iter().collect());
                }
                removed
            }
        }
    }
    /// Replaces block `old` (size, address, slot) by block `new`: the set afterwards is the
    /// one `remove(old)` then `insert(new)` leave, in one move of the keys between their two
    /// places instead of two (a split leaves the remainder where the taken block was, a
    /// coalescing free the merged block where a neighbour was). Returns whether `old` was held.
    #[inline(always)]
    pub fn replace(&mut self, old: (usize, u64, u32), new: (usize, u64, u32)) -> bool {
        // The pool's only free block (a pair loop's usual case): nothing to search or move.
        if let FreeSet::Sorted(v) = self {
            if let [only] = v.as_mut_slice() {
                if *only == Self::key(old.0, old.1, old.2) {
                    *only = Self::key(new.0, new.1, new.2);
                    return true;
                }
            }
        }
        self.replace_searched(old, new)
    }

    /// [`Self::replace`] past its one-block case: a search in the sorted vector, or the B-tree's
    /// removal and insertion.
    #[inline(never)]
    fn replace_searched(&mut self, old: (usize, u64, u32), new: (usize, u64, u32)) -> bool {
        let FreeSet::Sorted(v) = self else {
            let held = self.remove(old.0, old.1, old.2);
            self.insert(new.0, new.1, new.2);
            return held;
        };
        let (ko, kn) = (
            Self::key(old.0, old.1, old.2),
            Self::key(new.0, new.1, new.2),
        );
        let Ok(i) = v.binary_search(&ko) else {
            self.insert(new.0, new.1, new.2);
            return false;
        };
        if kn >= ko {
            // `new` goes after `old`'s place: the keys between move one to the left.
            let j = i + 1 + v[i + 1..].partition_point(|&k| k < kn);
            if v.get(j) == Some(&kn) {
                v.remove(i);
            } else {
                v.copy_within(i + 1..j, i);
                v[j - 1] = kn;
            }
        } else {
            let j = v[..i].partition_point(|&k| k < kn);
            if v[j] == kn {
                v.remove(i);
            } else {
                v.copy_within(j..i, j + 1);
                v[j] = kn;
            }
        }
        true
    }
    pub fn contains(&self, size: usize, addr: u64, slot: u32) -> bool {
        let k = Self::key(size, addr, slot);
        match self {
            FreeSet::Sorted(v) => v.binary_search(&k).is_ok(),
            FreeSet::Tree(t) => t.contains(&k),
        }
    }
    /// The smallest block of at least `size` bytes (lowest address among equals).
    #[inline]
    pub fn best_fit(&self, size: usize) -> Option<(usize, u64, u32)> {
        let from = Self::key(size, 0, 0);
        let k = match self {
            FreeSet::Sorted(v) => v.get(v.partition_point(|&k| k < from)),
            FreeSet::Tree(t) => t.range(from..).next(),
        };
        k.map(|&k| Self::unpack(k))
    }
    pub fn largest(&self) -> usize {
        let last = match self {
            FreeSet::Sorted(v) => v.last(),
            FreeSet::Tree(t) => t.last(),
        };
        last.map_or(0, |&k| Self::unpack(k).0)
    }
    /// The keys from `from` on, in order, whichever container holds them.
    fn keys_from(&self, from: u128) -> impl DoubleEndedIterator<Item = u128> + '_ {
        let (sorted, tree) = match self {
            FreeSet::Sorted(v) => (Some(&v[v.partition_point(|&k| k < from)..]), None),
            FreeSet::Tree(t) => (None, Some(t.range(from..))),
        };
        sorted
            .into_iter()
            .flatten()
            .chain(tree.into_iter().flatten())
            .copied()
    }
    /// Blocks from the largest down.
    pub fn descending(&self) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.keys_from(0).rev().map(Self::unpack)
    }
    /// Blocks of at least `size` bytes, smallest first.
    pub fn fitting(&self, size: usize) -> impl Iterator<Item = (usize, u64, u32)> + '_ {
        self.keys_from(Self::key(size, 0, 0)).map(Self::unpack)
    }
    pub fn len(&self) -> usize {
        match self {
            FreeSet::Sorted(v) => v.len(),
            FreeSet::Tree(t) => t.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FreeSet;
    use std::collections::BTreeSet;

    /// A set of one block (the pair loop's case, replaced without a search): the replacement
    /// is the one block afterwards; a key it does not hold is inserted beside it instead.
    #[test]
    fn replacing_the_only_block_leaves_the_new_one_alone() {
        let mut set = FreeSet::default();
        set.insert(2 << 20, 0x10_0000, 7);
        assert!(set.replace((2 << 20, 0x10_0000, 7), (1536, 0x10_0200, 9)));
        assert!(set.fitting(0).eq([(1536, 0x10_0200, 9)]));
        assert!(!set.replace((2 << 20, 0x10_0000, 7), (4096, 0x20_0000, 3)));
        assert!(set
            .fitting(0)
            .eq([(1536, 0x10_0200, 9), (4096, 0x20_0000, 3)]));
    }

    /// Random inserts, removals and replacements that cross the vector/B-tree bounds both ways:
    /// every answer equals a plain B-tree's over the same blocks.
    #[test]
    fn free_set_answers_as_a_btree_across_its_representations() {
        let mut set = FreeSet::default();
        let mut model: BTreeSet<(usize, u64, u32)> = BTreeSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut saw_tree, mut saw_vec_again) = (false, false);
        for step in 0..20_000u32 {
            // Grow for a while, then shrink, then grow again: both switches happen.
            let grow = (step / 2_000) % 2 == 0;
            let r = next();
            let size = 512 * (1 + (r % 64) as usize);
            let addr = 512 * ((r >> 8) % 4096);
            if grow == ((r >> 40) % 4 != 0) {
                set.insert(size, addr, step);
                model.insert((size, addr, step));
            } else if let Some(&(s, a, slot)) =
                model.iter().nth((r >> 20) as usize % model.len().max(1))
            {
                assert!(set.remove(s, a, slot));
                model.remove(&(s, a, slot));
                assert!(!set.remove(s, a, slot), "a removed block is gone");
            }
            if let Some(&(s, a, slot)) = model
                .iter()
                .nth((r >> 24) as usize % model.len().max(1))
                .filter(|_| (r >> 50) % 3 == 0)
            {
                // A replacement (as a split or a merge makes): larger or smaller, sometimes
                // a block the set already holds.
                let new = match (r >> 52) % 4 {
                    0 => model.iter().next().copied().unwrap_or((s, a, slot)),
                    1 => (s, a, slot),
                    _ => (512 * (1 + (r >> 54) as usize % 64), a + 512, step),
                };
                assert!(set.replace((s, a, slot), new));
                model.remove(&(s, a, slot));
                model.insert(new);
                assert!(set.fitting(0).eq(model.iter().copied()), "step {step}");
                let absent = (1 << 40, 0, u32::MAX);
                assert!(!set.replace(absent, absent), "a block never held");
                set.remove(absent.0, absent.1, absent.2);
            }
            match &set {
                FreeSet::Tree(_) => saw_tree = true,
                FreeSet::Sorted(_) if saw_tree => saw_vec_again = true,
                FreeSet::Sorted(_) => {}
            }
            assert_eq!(set.len(), model.len());
            let want = 512 * (1 + (next() % 70) as usize);
            assert_eq!(
                set.best_fit(want),
                model.range((want, 0, 0)..).next().copied(),
                "best fit for {want} at step {step}"
            );
            assert_eq!(set.largest(), model.last().map_or(0, |b| b.0));
            if step % 97 == 0 {
                assert!(set.fitting(want).eq(model.range((want, 0, 0)..).copied()));
                assert!(set.descending().eq(model.iter().rev().copied()));
                if let Some(&(s, a, slot)) = model.first() {
                    assert!(set.contains(s, a, slot));
                }
            }
        }
        assert!(
            saw_tree && saw_vec_again,
            "both representations were exercised"
        );
    }
}
