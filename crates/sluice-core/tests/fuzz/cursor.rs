//! Cursors (`sluice_core::cursor`): what a client hands back to get the
//! next page. A sealed cursor opens to exactly what was sealed; any other
//! string (altered, cut, extended, sealed under another key, of the other
//! kind, or garbage) is refused with an error.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use sluice_core::budget::Budget;
use sluice_core::cursor::{Cursor, CursorError, CursorKey, SearchCursor};
use sluice_core::pager::Position;
use sluice_core::search::Query;

use crate::corpus::{self, config};
use crate::regressions;

fn budget() -> impl Strategy<Value = Budget> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<Option<u32>>(),
        any::<f32>(),
    )
        .prop_map(|(max_tokens, max_chars, max_lines, token_factor)| Budget {
            max_tokens,
            max_chars,
            // A cursor writes "no limit" as 0.
            max_lines: max_lines.filter(|&l| l > 0),
            token_factor,
        })
}

/// Handles and paths of any length and content (a handle is sluice's own,
/// `h_` and 22 characters, but the format must not depend on it).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "h_[A-Za-z0-9_-]{22}",
        ".{0,40}",
        (0usize..700).prop_map(|n| "é".repeat(n / 2) + &"x".repeat(n % 2)),
    ]
}

fn page_cursor() -> impl Strategy<Value = Cursor> {
    (
        text(),
        prop::option::of(text()),
        budget(),
        any::<[u64; 4]>(),
    )
        .prop_map(|(handle, path, budget, [seg, unit, byte, char])| Cursor {
            handle,
            path,
            budget,
            at: Position {
                seg,
                unit,
                byte,
                char,
            },
        })
}

fn search_cursor() -> impl Strategy<Value = SearchCursor> {
    (
        text(),
        (text(), any::<bool>(), any::<bool>()),
        any::<(u8, u8, u32)>(),
        budget(),
        any::<u64>(),
    )
        .prop_map(
            |(
                handle,
                (pattern, regex, case_sensitive),
                (before, after, max_matches),
                budget,
                start,
            )| {
                SearchCursor {
                    handle,
                    query: Query {
                        pattern,
                        regex,
                        case_sensitive,
                    },
                    before,
                    after,
                    max_matches,
                    budget,
                    start,
                }
            },
        )
}

/// A budget's fields, the factor by its bits (NaN is a possible f32).
fn budget_bits(b: &Budget) -> (u32, u32, Option<u32>, u32) {
    (
        b.max_tokens,
        b.max_chars,
        b.max_lines,
        b.token_factor.to_bits(),
    )
}

/// Strings one edit away from `sealed`: a bit of its body flipped (the
/// first byte, the last, and those `flips` choose), cut short, extended,
/// its prefix changed.
fn altered(sealed: &str, flips: &[(prop::sample::Index, u8)]) -> Vec<String> {
    let (prefix, body) = sealed.split_at(3);
    let bytes = URL_SAFE_NO_PAD
        .decode(body)
        .expect("a sealed cursor is base64");
    let mut out = Vec::new();
    let ends = [(0, 0), (bytes.len() - 1, 7)];
    let chosen = flips.iter().map(|(at, bit)| (at.index(bytes.len()), *bit));
    for (i, bit) in ends.into_iter().chain(chosen) {
        let mut flipped = bytes.clone();
        flipped[i] ^= 1 << (bit % 8);
        out.push(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(&flipped)));
    }
    for n in [0, 1, bytes.len() / 2, bytes.len().saturating_sub(1)] {
        out.push(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(&bytes[..n])));
    }
    let mut longer = bytes.clone();
    longer.push(0);
    out.push(format!("{prefix}{}", URL_SAFE_NO_PAD.encode(&longer)));
    out.push(format!("{sealed}A"));
    out.push(sealed[..sealed.len() - 1].to_owned());
    out.push(sealed.to_uppercase());
    out.push(format!(" {sealed}"));
    out.push(format!("{sealed}\n"));
    out.push(format!("x{}", &sealed[1..]));
    out.retain(|s| s != sealed);
    out
}

#[test]
fn seed_strings_are_refused_without_panic() {
    let key = CursorKey::from_bytes([7; 32]);
    let mut tried = 0;
    for (name, bytes) in corpus::seeds("cursor") {
        for line in String::from_utf8_lossy(&bytes).lines() {
            assert!(key.open(line).is_err(), "seed {name}: `{line}` opened");
            assert!(
                key.open_search(line).is_err(),
                "seed {name}: `{line}` opened"
            );
            tried += 1;
        }
    }
    assert!(tried >= 10);
}

proptest! {
    #![proptest_config(config(regressions!("cursor"), 256))]

    #[test]
    fn page_cursors_open_to_what_was_sealed_and_nothing_else(
        cursor in page_cursor(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 16),
    ) {
        let key = CursorKey::random();
        let sealed = key.seal(&cursor);
        prop_assert!(sealed.starts_with("c1_"));
        let opened = key.open(&sealed).map_err(|e| TestCaseError::fail(format!("{e}: {cursor:?}")))?;
        prop_assert_eq!(&opened.handle, &cursor.handle);
        prop_assert_eq!(&opened.path, &cursor.path);
        prop_assert_eq!(budget_bits(&opened.budget), budget_bits(&cursor.budget));
        prop_assert_eq!(&opened.at, &cursor.at);
        for other in altered(&sealed, &flips) {
            prop_assert!(key.open(&other).is_err(), "altered `{}` opened", other);
        }
        prop_assert_eq!(CursorKey::random().open(&sealed), Err(CursorError::Forged));
        prop_assert_eq!(key.open_search(&sealed), Err(CursorError::Malformed));
    }

    #[test]
    fn search_cursors_open_to_what_was_sealed_and_nothing_else(
        cursor in search_cursor(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 16),
    ) {
        let key = CursorKey::random();
        let sealed = key.seal_search(&cursor);
        prop_assert!(sealed.starts_with("s2_"));
        let opened = key.open_search(&sealed).map_err(|e| TestCaseError::fail(format!("{e}: {cursor:?}")))?;
        prop_assert_eq!(&opened.handle, &cursor.handle);
        prop_assert_eq!(&opened.query, &cursor.query);
        prop_assert_eq!(
            (opened.before, opened.after, opened.max_matches, opened.start),
            (cursor.before, cursor.after, cursor.max_matches, cursor.start)
        );
        prop_assert_eq!(budget_bits(&opened.budget), budget_bits(&cursor.budget));
        for other in altered(&sealed, &flips) {
            prop_assert!(key.open_search(&other).is_err(), "altered `{}` opened", other);
        }
        prop_assert_eq!(CursorKey::random().open_search(&sealed), Err(CursorError::Forged));
        prop_assert_eq!(key.open(&sealed), Err(CursorError::Malformed));
    }

    #[test]
    fn arbitrary_strings_never_open(
        text in prop_oneof![
            ".{0,64}",
            "(c1_|s2_)[A-Za-z0-9_-]{0,200}",
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| format!("c1_{}", URL_SAFE_NO_PAD.encode(b))),
            prop::collection::vec(any::<u8>(), 0..200)
                .prop_map(|b| format!("s2_{}", URL_SAFE_NO_PAD.encode(b))),
        ],
    ) {
        let key = CursorKey::random();
        prop_assert!(key.open(&text).is_err());
        prop_assert!(key.open_search(&text).is_err());
    }
}
