//! Two reads of one large input made at once.
//!
//! Storing a large result reads it several times over (checked, indexed,
//! sampled for its tokens, planned into pages, summed up); some of those
//! reads need nothing from each other. [`both`] makes two of them at once
//! when the input is large enough for a second thread to pay.

/// `first()` and `second()`: when `at_once`, `first` here while `second`
/// is made on a thread kept for such reads (rayon's pool, started on first
/// use), as soon as one is free; else one after the other here. A panic in
/// either is passed on once both ended.
///
/// `first` runs on the caller's thread, not handed to the pool with
/// `second` (`rayon_core::join`, called from outside the pool, hands both
/// over and puts the caller to sleep until they end): one thread fewer to
/// wake and to wait for at each pair of reads a large result's storing
/// makes (its text's two halves unescaped, its document checked while
/// indexed, made while its tokens are sampled, its overview and first page
/// plan).
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
    let mut made = None;
    let a = rayon_core::in_place_scope(|scope| {
        scope.spawn(|_| made = Some(second()));
        first()
    });
    (a, made.expect("the scope ends once what it spawned has"))
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
            // The first failing: passed on once the second ended (made on
            // another thread, it was under way).
            let second_ended = std::sync::atomic::AtomicBool::new(false);
            let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                both(
                    at_once,
                    || -> u8 { panic!("the first failed") },
                    || second_ended.store(true, std::sync::atomic::Ordering::SeqCst),
                )
            }));
            assert!(panicked.is_err());
            assert_eq!(
                second_ended.load(std::sync::atomic::Ordering::SeqCst),
                at_once
            );
        }
    }
}
