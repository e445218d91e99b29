//! Two reads of one large input made at once.
//!
//! Storing a large result reads it several times over (checked, indexed,
//! sampled for its tokens, planned into pages, summed up); some of those
//! reads need nothing from each other. [`both`] makes two of them at once
//! when the input is large enough for a second thread to pay.

/// `first()` and `second()`: when `at_once`, on the two threads kept for
/// such reads (rayon's pool, started on first use), at once when the other
/// thread is free, else one after the other here. A panic in either is
/// passed on once both ended.
pub fn both<A, B>(
    at_once: bool,
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
) -> (A, B)
where
    A: Send,
    B: Send,
{
    if !at_once {
        let a = first();
        return (a, second());
    }
    rayon_core::join(first, second)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_give_their_results_at_once_or_in_turn_and_a_panic_is_passed_on() {
        for at_once in [true, false] {
            let text = "shared by both".to_owned();
            let (a, b) = both(at_once, || text.len(), || text.to_uppercase());
            assert_eq!((a, b.as_str()), (14, "SHARED BY BOTH"));
            let panicked = std::panic::catch_unwind(|| {
                both(at_once, || 1, || -> u8 { panic!("the second failed") })
            });
            assert!(panicked.is_err());
        }
    }
}
