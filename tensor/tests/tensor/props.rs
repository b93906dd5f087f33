//! Property tests: strided views and broadcasting against naive index arithmetic.

use proptest::prelude::*;
use vramguard_memory::Device;
use vramguard_tensor::tensor::Tensor;

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 1..4)
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn permute_then_contiguous_matches_index_mapping(
        shape in shape_strategy(),
        seed in 0u64..1000,
    ) {
        let device = Device::isolated_host();
        let rank = shape.len();
        // A permutation from the seed.
        let mut perm: Vec<usize> = (0..rank).collect();
        let mut s = seed;
        for i in (1..rank).rev() {
            perm.swap(i, (s % (i as u64 + 1)) as usize);
            s /= 7;
        }
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let x = Tensor::from_slice(&data, &shape, &device).unwrap();
        let p = x.permute(&perm).unwrap();
        let out = p.contiguous().unwrap().to_vec().unwrap();
        let pshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
        for (i, &v) in out.iter().enumerate() {
            let pidx = unravel(i, &pshape);
            let mut src = vec![0; rank];
            for (k, &d) in perm.iter().enumerate() {
                src[d] = pidx[k];
            }
            prop_assert_eq!(v, data[ravel(&src, &shape)]);
        }
        // Reshape of the permuted view agrees with its contiguous data.
        prop_assert_eq!(p.reshape(&[n]).unwrap().to_vec().unwrap(), out);
    }

    #[test]
    fn broadcast_sub_matches_naive(
        shape in shape_strategy(),
        mask in prop::collection::vec(any::<bool>(), 3),
        drop_lead in 0usize..2,
    ) {
        let device = Device::isolated_host();
        // rhs: some dims collapsed to 1, maybe fewer leading dims.
        let lead = drop_lead.min(shape.len() - 1);
        let rshape: Vec<usize> = shape[lead..]
            .iter()
            .enumerate()
            .map(|(i, &d)| if mask[i % 3] { 1 } else { d })
            .collect();
        let n: usize = shape.iter().product();
        let rn: usize = rshape.iter().product();
        let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..rn).map(|i| i as f32 * 3.0 + 1.0).collect();
        let ta = Tensor::from_slice(&a, &shape, &device).unwrap();
        let tb = Tensor::from_slice(&b, &rshape, &device).unwrap();
        let out = (&ta - &tb).unwrap();
        prop_assert_eq!(out.dims(), shape.as_slice());
        let out = out.to_vec().unwrap();
        for (i, &v) in out.iter().enumerate() {
            let idx = unravel(i, &shape);
            let ridx: Vec<usize> = idx[lead..]
                .iter()
                .zip(&rshape)
                .map(|(&j, &d)| if d == 1 { 0 } else { j })
                .collect();
            prop_assert_eq!(v, a[i] - b[ravel(&ridx, &rshape)]);
        }
        // The in-place form gives the same values, and the consuming form too.
        let inplace = ta.copy().unwrap();
        inplace.sub_(&tb).unwrap();
        prop_assert_eq!(inplace.to_vec().unwrap(), out.clone());
        let consumed = (ta.copy().unwrap() - &tb).unwrap();
        prop_assert_eq!(consumed.to_vec().unwrap(), out);
    }
}
