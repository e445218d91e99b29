//! What the unit tests share.

/// A pseudo-random draw in `0..n` (a 64-bit LCG from `seed`): the same
/// sequence on every run, so that a test made of random inputs fails the
/// same way each time it fails.
pub(crate) fn pseudo_random(mut seed: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize % n
    }
}
