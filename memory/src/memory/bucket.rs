//! `SequenceBuckets`: pad variable sequence lengths up to a few fixed lengths, so a loop over
//! variable-length batches asks the allocator for a few shapes only. Freed blocks are then
//! reused exactly by the next batch of the same bucket instead of leaving holes of every size
//! (shape bucketing: keep the shapes a loop asks for uniform).
//!
//! ```
//! use vramguard_memory::memory::SequenceBuckets;
//!
//! let buckets = SequenceBuckets::new(&[64, 128, 256, 512])?;
//! assert_eq!(buckets.bucket_for(100)?, 128);
//! assert_eq!(buckets.padding_for(100)?, 28); // pad 100 tokens with 28 to reach 128
//! let err = buckets.bucket_for(600).unwrap_err();
//! assert!(err.to_string().contains("largest bucket is 512"));
//! # Ok::<(), vramguard_memory::memory::BucketError>(())
//! ```

/// A sorted set of sequence lengths that variable-length inputs are padded up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceBuckets {
    bounds: Vec<usize>,
}

/// Bad bucket bounds, or a length past the largest bucket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// `SequenceBuckets::new` got no bounds.
    #[error("no bucket lengths given: pass the padded lengths to use, e.g. `SequenceBuckets::new(&[64, 128, 256, 512])`")]
    Empty,
    /// A bound of zero.
    #[error("bucket length 0 is not allowed: every bucket must hold at least one token")]
    Zero,
    /// Bounds not strictly increasing.
    #[error("bucket lengths must be strictly increasing, but {previous} is followed by {next}: list them in ascending order without repeats")]
    NotIncreasing {
        /// The earlier bound.
        previous: usize,
        /// The bound after it.
        next: usize,
    },
    /// A length longer than the largest bucket.
    #[error("sequence length {len} does not fit: the largest bucket is {largest}; add a bucket of at least {len} (and warm up with it), or truncate or split inputs longer than {largest}")]
    TooLong {
        /// The length asked for.
        len: usize,
        /// The largest bucket.
        largest: usize,
    },
}

impl SequenceBuckets {
    /// Buckets with these padded lengths (strictly increasing, none zero).
    pub fn new(bounds: &[usize]) -> Result<Self, BucketError> {
        if bounds.is_empty() {
            return Err(BucketError::Empty);
        }
        if bounds[0] == 0 {
            return Err(BucketError::Zero);
        }
        if let Some(w) = bounds.windows(2).find(|w| w[0] >= w[1]) {
            return Err(BucketError::NotIncreasing {
                previous: w[0],
                next: w[1],
            });
        }
        Ok(Self {
            bounds: bounds.to_vec(),
        })
    }

    /// Powers of two from `smallest` up to `largest` (both rounded up to a power of two), the
    /// usual choice: padding wastes less than half of each batch.
    pub fn powers_of_two(smallest: usize, largest: usize) -> Result<Self, BucketError> {
        if smallest == 0 {
            return Err(BucketError::Zero);
        }
        let (Some(lo), Some(hi)) = (
            smallest.checked_next_power_of_two(),
            largest.checked_next_power_of_two(),
        ) else {
            return Err(BucketError::TooLong {
                len: largest,
                largest: 1 << (usize::BITS - 1),
            });
        };
        if hi < lo {
            return Err(BucketError::NotIncreasing {
                previous: lo,
                next: hi,
            });
        }
        let bounds: Vec<usize> =
            std::iter::successors(Some(lo), |&b| (b < hi).then(|| b * 2)).collect();
        Self::new(&bounds)
    }

    /// The padded lengths, ascending.
    pub fn bounds(&self) -> &[usize] {
        &self.bounds
    }

    /// The largest bucket: the length to warm up with (see [`crate::memory::warmup`]).
    pub fn largest(&self) -> usize {
        self.bounds[self.bounds.len() - 1]
    }

    /// Index of the smallest bucket that holds `len` tokens.
    pub fn index_for(&self, len: usize) -> Result<usize, BucketError> {
        let i = self.bounds.partition_point(|&b| b < len);
        if i == self.bounds.len() {
            Err(BucketError::TooLong {
                len,
                largest: self.largest(),
            })
        } else {
            Ok(i)
        }
    }

    /// The padded length for a sequence of `len` tokens: the smallest bucket ≥ `len`.
    pub fn bucket_for(&self, len: usize) -> Result<usize, BucketError> {
        self.index_for(len).map(|i| self.bounds[i])
    }

    /// Padding tokens to append to a sequence of `len` tokens: `bucket_for(len) - len`.
    pub fn padding_for(&self, len: usize) -> Result<usize, BucketError> {
        self.bucket_for(len).map(|b| b - len)
    }

    /// The padded length for a batch: the bucket of its longest sequence (every sequence of
    /// the batch is padded to it). An empty batch gets the smallest bucket.
    pub fn bucket_for_batch(&self, lens: &[usize]) -> Result<usize, BucketError> {
        self.bucket_for(lens.iter().copied().max().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_go_to_the_smallest_bucket_that_holds_them() {
        let b = SequenceBuckets::new(&[64, 128, 256, 512]).unwrap();
        let cases = [
            (0, 64, 0),
            (1, 64, 0),
            (64, 64, 0),
            (65, 128, 1),
            (128, 128, 1),
            (129, 256, 2),
            (300, 512, 3),
            (512, 512, 3),
        ];
        for (len, bucket, index) in cases {
            assert_eq!(b.bucket_for(len), Ok(bucket), "len {len}");
            assert_eq!(b.index_for(len), Ok(index), "len {len}");
            assert_eq!(b.padding_for(len), Ok(bucket - len), "len {len}");
        }
        assert_eq!(b.largest(), 512);
        assert_eq!(b.bounds(), &[64, 128, 256, 512]);
        assert_eq!(b.bucket_for_batch(&[3, 70, 12]), Ok(128));
        assert_eq!(b.bucket_for_batch(&[]), Ok(64));
    }

    #[test]
    fn a_length_past_the_largest_bucket_is_a_typed_error_saying_what_to_do() {
        let b = SequenceBuckets::new(&[64, 128]).unwrap();
        let err = b.bucket_for(129).unwrap_err();
        assert_eq!(
            err,
            BucketError::TooLong {
                len: 129,
                largest: 128
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("largest bucket is 128"), "{msg}");
        assert!(msg.contains("add a bucket of at least 129"), "{msg}");
        assert_eq!(
            b.padding_for(1000),
            Err(BucketError::TooLong {
                len: 1000,
                largest: 128
            })
        );
        assert_eq!(
            b.bucket_for_batch(&[1, 200]),
            Err(BucketError::TooLong {
                len: 200,
                largest: 128
            })
        );
    }

    #[test]
    fn bad_bounds_are_rejected() {
        assert_eq!(SequenceBuckets::new(&[]), Err(BucketError::Empty));
        assert_eq!(SequenceBuckets::new(&[0, 8]), Err(BucketError::Zero));
        assert_eq!(
            SequenceBuckets::new(&[64, 64]),
            Err(BucketError::NotIncreasing {
                previous: 64,
                next: 64
            })
        );
        let err = SequenceBuckets::new(&[128, 64]).unwrap_err();
        assert!(err.to_string().contains("128 is followed by 64"), "{err}");
    }

    #[test]
    fn powers_of_two_cover_the_range() {
        let b = SequenceBuckets::powers_of_two(16, 500).unwrap();
        assert_eq!(b.bounds(), &[16, 32, 64, 128, 256, 512]);
        assert_eq!(SequenceBuckets::powers_of_two(8, 8).unwrap().bounds(), &[8]);
        assert_eq!(SequenceBuckets::powers_of_two(0, 8), Err(BucketError::Zero));
        assert!(matches!(
            SequenceBuckets::powers_of_two(64, 8),
            Err(BucketError::NotIncreasing { .. })
        ));
        assert!(matches!(
            SequenceBuckets::powers_of_two(1, usize::MAX),
            Err(BucketError::TooLong { .. })
        ));
    }
}
