//! The order in which float `reduce`s combine their elements.
//!
//! XLA:CPU does not fold a reduction left to right: its vectorized kernels
//! keep several partial accumulators and combine them as a tree, so the
//! rounding error of a 33M-element f32 sum stays near a few ulp (a
//! sequential fold loses ~10% there). We fold the same way, in a fixed order
//! that depends only on the length (never on the thread count): blocks of
//! [`BLOCK`] elements are folded into [`LANES`] strided accumulators, the
//! lanes are combined pairwise, and blocks are combined pairwise.

/// Partial accumulators per block (one 256-bit vector of f32).
pub(crate) const LANES: usize = 8;
/// Elements folded by one set of lane accumulators before the tree takes over.
pub(crate) const BLOCK: usize = 256;
/// Below this many elements a subtree is folded on the calling thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Folds `v` with `f` in tree order; `None` when `v` is empty.
pub(crate) fn tree_fold<F, G>(v: &[F], f: G) -> Option<F>
where
    F: Copy + Send + Sync,
    G: Fn(F, F) -> F + Copy + Send + Sync,
{
    if v.is_empty() {
        return None;
    }
    Some(fold_nonempty(v, f))
}

/// `init` combined with the tree fold of `v` (just `init` when `v` is empty).
pub(crate) fn tree_fold_init<F, G>(init: F, v: &[F], f: G) -> F
where
    F: Copy + Send + Sync,
    G: Fn(F, F) -> F + Copy + Send + Sync,
{
    match tree_fold(v, f) {
        Some(t) => f(init, t),
        None => init,
    }
}

fn fold_nonempty<F, G>(v: &[F], f: G) -> F
where
    F: Copy + Send + Sync,
    G: Fn(F, F) -> F + Copy + Send + Sync,
{
    if v.len() <= BLOCK {
        return fold_block(v, f);
    }
    // Split on a block boundary so that the tree's shape depends on the length only.
    let blocks = v.len().div_ceil(BLOCK);
    let (lo, hi) = v.split_at(blocks / 2 * BLOCK);
    let (a, b) = if v.len() >= PARALLEL_MIN {
        rayon::join(|| fold_nonempty(lo, f), || fold_nonempty(hi, f))
    } else {
        (fold_nonempty(lo, f), fold_nonempty(hi, f))
    };
    f(a, b)
}

/// One block: element `i` goes to lane `i % LANES`, then the lanes pairwise.
fn fold_block<F, G>(v: &[F], f: G) -> F
where
    F: Copy,
    G: Fn(F, F) -> F + Copy,
{
    let (head, rest) = v.split_at(v.len().min(LANES));
    let mut acc = [head[0]; LANES];
    acc[..head.len()].copy_from_slice(head);
    let live = head.len();
    let mut chunks = rest.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = f(*a, x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(chunks.remainder()) {
        *a = f(*a, x);
    }
    // Combine only the lanes that received an element.
    let mut width = live;
    while width > 1 {
        let half = width.div_ceil(2);
        for j in 0..width / 2 {
            acc[j] = f(acc[j], acc[j + half]);
        }
        width = half;
    }
    acc[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_every_element_once() {
        for n in [1usize, 2, 7, 8, 9, 255, 256, 257, 1000, 70_000] {
            let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            let want = (n * (n + 1) / 2) as f64;
            assert_eq!(tree_fold(&v, |a, b| a + b), Some(want), "n={n}");
        }
        assert_eq!(tree_fold::<f32, _>(&[], |a, b| a + b), None);
        assert_eq!(tree_fold_init(5.0f32, &[], |a, b| a + b), 5.0);
    }

    #[test]
    fn large_f32_sum_stays_within_a_few_ulp() {
        // 1M copies of 0.1: a sequential f32 fold drifts by ~1%.
        let v = vec![0.1f32; 1 << 20];
        let got = tree_fold(&v, |a, b| a + b).unwrap_or(0.0) as f64;
        let exact = 0.1f32 as f64 * (1u64 << 20) as f64;
        assert!(((got - exact) / exact).abs() < 1e-6, "{got} vs {exact}");
        let seq = v.iter().fold(0.0f32, |a, &b| a + b) as f64;
        assert!(
            ((seq - exact) / exact).abs() > 1e-4,
            "sequential fold is accurate: {seq}"
        );
    }

    #[test]
    fn order_does_not_depend_on_the_thread_count() {
        let v: Vec<f32> = (0..300_000u32).map(|i| (i as f32 * 0.37).sin()).collect();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build();
        let four = rayon::ThreadPoolBuilder::new().num_threads(4).build();
        if let (Ok(one), Ok(four)) = (one, four) {
            let a = one.install(|| tree_fold(&v, |a, b| a + b));
            let b = four.install(|| tree_fold(&v, |a, b| a + b));
            assert_eq!(a.map(f32::to_bits), b.map(f32::to_bits));
        }
    }
}
