//! A message's JSON checked in one pass over its bytes: the grammar, the
//! depth limit, and the top-level members found on the way.
//!
//! Every message through sluice is checked before anything of it is used
//! or forwarded. `serde_json`'s borrowed parse (`RawValue`) did it at about
//! 14 instructions a byte on JSON held in a text block (an escaped quote
//! every few bytes), and the depth took a pass of its own
//! ([`nests_deeper_than`](super::scan::nests_deeper_than)). Here one pass
//! does both, looking at a string eight bytes at a time.
//!
//! It answers only "valid, and these are the members". On anything else
//! the envelope parse asks `serde_json` and the depth scan as before, whose
//! errors say what is wrong and where: error texts stay what they were, and
//! a text this check refuses but `serde_json` accepts (there should be none)
//! is still read. What must never happen is the other way round: this check
//! accepting what `serde_json` refuses, or a message deeper than the limit.
//! `tests::the_check_agrees_with_serde_json` holds it to that on generated,
//! mutated and random texts.

use std::ops::Range;

/// The members of the JSON object `text` (nothing around it but
/// whitespace), each as the ranges of its key (quotes included) and of its
/// value, in order, repeated keys included; `None` if `text` is not one
/// valid JSON object whose arrays and objects nest at most `max_depth`
/// levels (the object itself being the first).
pub(crate) fn object_members(
    text: &str,
    max_depth: usize,
) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    let b = text.as_bytes();
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') || max_depth == 0 {
        return None;
    }
    let mut members = Vec::new();
    // The containers open inside the member's value, innermost last.
    let mut open: Vec<u8> = Vec::new();
    i = skip_space(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (key_end, start) = key_and_colon(b, i)?;
            let key = i..key_end;
            i = start;
            i = value(b, i, max_depth - 1, &mut open)?;
            members.push((key, start..i));
            i = skip_space(b, i);
            match *b.get(i)? {
                b',' => i = skip_space(b, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_space(b, i) == b.len()).then_some(members)
}

/// The key string at `i` (its end, just past the closing quote) and where
/// the value after its colon starts.
fn key_and_colon(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = string_end(b, i)?;
    let colon = skip_space(b, end);
    (b.get(colon) == Some(&b':')).then(|| (end, skip_space(b, colon + 1)))
}

/// The end of the valid JSON value at `i`, whose arrays and objects nest
/// at most `max_depth` levels; `open` is scratch (left empty).
fn value(b: &[u8], mut i: usize, max_depth: usize, open: &mut Vec<u8>) -> Option<usize> {
    open.clear();
    loop {
        // A value starts at `i`.
        match *b.get(i)? {
            b'"' => i = string_end(b, i)?,
            bracket @ (b'{' | b'[') => {
                if open.len() >= max_depth {
                    return None;
                }
                let close = if bracket == b'{' { b'}' } else { b']' };
                let inside = skip_space(b, i + 1);
                if b.get(inside) == Some(&close) {
                    i = inside + 1;
                } else {
                    open.push(bracket);
                    i = if bracket == b'{' {
                        key_and_colon(b, inside)?.1
                    } else {
                        inside
                    };
                    continue;
                }
            }
            b't' => i = literal(b, i, b"true")?,
            b'f' => i = literal(b, i, b"false")?,
            b'n' => i = literal(b, i, b"null")?,
            b'-' | b'0'..=b'9' => i = number_end(b, i)?,
            _ => return None,
        }
        // A value ended at `i`: close what it ends, up to the next value.
        loop {
            let Some(&inner) = open.last() else {
                return Some(i);
            };
            i = skip_space(b, i);
            match (*b.get(i)?, inner) {
                (b',', b'{') => {
                    i = key_and_colon(b, skip_space(b, i + 1))?.1;
                    break;
                }
                (b',', _) => {
                    i = skip_space(b, i + 1);
                    break;
                }
                (b'}', b'{') | (b']', b'[') => {
                    open.pop();
                    i += 1;
                }
                _ => return None,
            }
        }
    }
}

fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// The end of the number at `i`: `-`? (`0` | `[1-9][0-9]*`) (`.` digits)?
/// (`e`|`E` `+`|`-`? digits)?
fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match *b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits_end(b, i),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        i = some_digits_end(b, i + 1)?;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        i = some_digits_end(b, i)?;
    }
    Some(i)
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The end of one digit or more at `i`.
fn some_digits_end(b: &[u8], i: usize) -> Option<usize> {
    let end = digits_end(b, i);
    (end > i).then_some(end)
}

/// Just past the closing quote of the valid string whose opening quote is
/// at `quote`: no control character, every escape one JSON has.
fn string_end(b: &[u8], quote: usize) -> Option<usize> {
    let mut i = quote + 1;
    loop {
        i = string_stop(b, i)?;
        match b[i] {
            b'"' => return Some(i + 1),
            b'\\' => match *b.get(i + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = b.get(i + 2..i + 6)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            // A control character, which a string must escape.
            _ => return None,
        }
    }
}

/// The first byte at or after `from` that ends a run of a string's plain
/// characters: `"`, `\` or a control character (below 0x20), looked at
/// eight bytes at a time.
fn string_stop(b: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte below `n` (n ≤ 0x80), and maybe of bytes
    // after the first such (a borrow): the lowest bit set is exact. Bytes
    // of 0x80 and above (UTF-8 beyond ASCII) are never below.
    let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x & HIGHS;
    let mut i = from;
    while let Some(word) = b
        .get(i..i + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map(u64::from_le_bytes)
    {
        let stops = below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1)
            | below(word, 0x20);
        if stops != 0 {
            return Some(i + (stops.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::object::raw_members;
    use crate::jsonrpc::scan::nests_deeper_than;
    use proptest::prelude::*;

    /// What the envelope parse did before this check: the depth scan, then
    /// `serde_json`'s members, as ranges.
    fn serde_members(text: &str, max_depth: usize) -> Option<Vec<(Range<usize>, Range<usize>)>> {
        if nests_deeper_than(text.as_bytes(), max_depth) {
            return None;
        }
        let range = |part: &str| {
            let start = part.as_ptr() as usize - text.as_ptr() as usize;
            start..start + part.len()
        };
        raw_members(text).ok().map(|members| {
            members
                .into_iter()
                .map(|(k, v)| (range(k.get()), range(v.get())))
                .collect()
        })
    }

    fn agrees(text: &str, max_depth: usize) -> Result<(), TestCaseError> {
        let checked = object_members(text, max_depth);
        let serde = serde_members(text, max_depth);
        // Accepting what serde_json refuses is the one thing never allowed;
        // refusing what it accepts costs only a second parse, and is not
        // expected either.
        prop_assert_eq!(checked, serde, "{:?}", text);
        Ok(())
    }

    /// A JSON object of any values, written compact or spread out.
    fn object_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_map(serde_json::Value::from),
            "(\\PC|[\"\\\\/\u{0}-\u{1f}\u{7f}-\u{10ffff}]){0,12}".prop_map(serde_json::Value::from),
        ];
        let value = leaf.prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map("[a-z\"\\\\é]{0,4}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        (
            prop::collection::btree_map("[a-z\"\\\\]{0,5}", value, 0..6),
            any::<bool>(),
        )
            .prop_map(|(members, pretty)| {
                let object = serde_json::Value::Object(members.into_iter().collect());
                if pretty {
                    serde_json::to_string_pretty(&object).unwrap_or_default()
                } else {
                    object.to_string()
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Valid objects, then each with one byte changed, taken out or
        /// put in (at any place: most of them make it invalid), at depth
        /// limits around their own depth.
        #[test]
        fn the_check_agrees_with_serde_json(
            text in object_text(),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![
                Just(b'"'), Just(b'\\'), Just(b','), Just(b':'), Just(b'{'), Just(b'}'),
                Just(b'['), Just(b']'), Just(b'0'), Just(b'-'), Just(b'.'), Just(b'e'),
                Just(b'u'), Just(b' '), Just(b'\n'), Just(0x1f), Just(b'a'),
            ],
            edit in 0u8..3,
            max_depth in 1usize..8,
        ) {
            agrees(&text, 128)?;
            agrees(&text, max_depth)?;
            let mut bytes = text.clone().into_bytes();
            let at = at.index(bytes.len() + 1);
            match edit {
                0 if at < bytes.len() => bytes[at] = byte,
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, byte),
            }
            if let Ok(edited) = String::from_utf8(bytes) {
                agrees(&edited, 128)?;
                agrees(&edited, max_depth)?;
            }
        }

        /// Texts of JSON's punctuation, digits and letters, valid or not.
        #[test]
        fn any_text_is_checked_as_serde_json_reads_it(
            text in "\\{[\\[\\]{}\":, \n\t\\\\0-9.eE+\\-tfrulnsa\u{1}é]{0,60}",
            max_depth in 1usize..5,
        ) {
            agrees(&text, max_depth)?;
            agrees(&text, 128)?;
        }
    }

    #[test]
    fn members_are_found_with_their_spans() {
        let text = " { \"a\" : [1, {\"b\": null}] ,\"\\u0063\":\"x\\\"y\", \"a\":-0.5e+3 } ";
        let members: Vec<(&str, &str)> = object_members(text, 128)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (&text[k], &text[v]))
            .collect();
        assert_eq!(
            members,
            [
                ("\"a\"", "[1, {\"b\": null}]"),
                ("\"\\u0063\"", "\"x\\\"y\""),
                ("\"a\"", "-0.5e+3"),
            ]
        );
        assert_eq!(object_members("{}", 1), Some(Vec::new()));
    }

    #[test]
    fn what_is_not_one_valid_object_within_the_depth_is_refused() {
        for text in [
            "",
            "[]",
            "{",
            "{} {}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":1e}",
            "{\"a\":tru}",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":[1 2]}",
            "{\"a\":[1,]}",
            "{\"a\":{\"b\"}}",
            "{\"a\":[}",
            "{\"a\":\"unterminated}",
            "{'a':1}",
        ] {
            assert_eq!(object_members(text, 128), None, "{text:?}");
        }
        // Nesting: the object is the first level.
        assert!(object_members("{\"a\":[[1]]}", 3).is_some());
        assert_eq!(object_members("{\"a\":[[1]]}", 2), None);
        assert_eq!(object_members("{\"a\":[[]]}", 2), None);
        assert_eq!(object_members("{}", 0), None);
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(object_members(&deep, 128), None);
    }
}
