//! JSON checked against its grammar in one pass over its bytes, with
//! nothing built: a message's (its depth limited, its top-level members
//! found on the way: [`object_members`]) and a stored document's
//! ([`is_json`]).
//!
//! Every message through sluice is checked before anything of it is used
//! or forwarded, and every JSON result stored is checked before it is
//! indexed as JSON. `serde_json`'s parses (`RawValue`, `IgnoredAny`) took
//! about 14 instructions a byte on JSON held in a text block (an escaped
//! quote every few bytes), and a message's depth took a pass of its own.
//! Here strings are read eight bytes at a time, and depth is counted on the
//! way.
//!
//! It answers only "valid" (and where the members are). On anything else
//! the caller asks `serde_json` (and the message depth scan) as before,
//! whose errors say what is wrong and where: error texts stay what they
//! were, and a text this check refuses but `serde_json` accepts (there
//! should be none) is still read. What must never happen is the other way
//! round: this check accepting what `serde_json` refuses, or a message
//! deeper than its limit. `tests::a_value_is_json_when_serde_json_reads_it`
//! here and `jsonrpc::check::tests` in the `sluice` crate hold it to that
//! on generated, mutated and random texts.

use std::ops::Range;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::limits::ALONE_BYTES;
use crate::scan::{first_flagged, second_part_at, string_stops, word_at};

/// The members of the JSON object `text` (nothing around it but
/// whitespace), each as the ranges of its key (quotes included) and of its
/// value, in order, repeated keys included; `None` if `text` is not one
/// valid JSON object whose arrays and objects nest at most `max_depth`
/// levels (the object itself being the first).
pub fn object_members(text: &str, max_depth: usize) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    object_members_reporting(text, max_depth, &mut ())
}

/// [`object_members`], telling `structure` what the text is made of as it
/// is read (see [`Structure::long_string`]: the envelope parse keeps a
/// large text block unescaped).
pub fn object_members_reporting(
    text: &str,
    max_depth: usize,
    structure: &mut impl Structure,
) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    let b = text.as_bytes();
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') || max_depth == 0 {
        return None;
    }
    // A message's envelope has a handful of members: one allocation.
    let mut members = Vec::with_capacity(8);
    // The containers open inside the member's value, innermost last.
    let mut open: Vec<u8> = Vec::new();
    i = skip_space(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let (key_end, start) = key_and_colon(b, i, structure)?;
            let key = i..key_end;
            i = start;
            i = value(b, i, max_depth - 1, &mut open, structure)?;
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

/// Whether `text` is one valid JSON value, with nothing around it but
/// whitespace, however deep it nests (as `serde_json` reads it into
/// `IgnoredAny`, which has no depth limit).
pub fn is_json(text: &str) -> bool {
    is_json_reporting(text, &mut ())
}

/// [`is_json`], telling `structure` what the text is made of as it is
/// read: a document is checked and indexed in the same pass
/// ([`crate::scan::checked_minified_and_indexed`]). What it is told of a
/// text that is not JSON, up to where the check stopped, means nothing.
pub(crate) fn is_json_reporting(text: &str, structure: &mut impl Structure) -> bool {
    let b = text.as_bytes();
    let start = space(b, 0, structure);
    value(b, start, usize::MAX, &mut Vec::new(), structure)
        .is_some_and(|end| space(b, end, structure) == b.len())
}

/// What [`is_json_reporting`] and [`object_members_reporting`] tell of a
/// value as they check it, in the order of the text: the structure a
/// document's index is made of. Every method does nothing unless
/// implemented (`()` implements none, for the plain check).
pub trait Structure {
    /// Whitespace outside strings, from `start` to `end`.
    #[inline(always)]
    fn space(&mut self, _start: usize, _end: usize) {}
    /// A value of any kind starts at `at` (a container's is then opened).
    #[inline(always)]
    fn value(&mut self, _at: usize) {}
    /// An object member's key: its literal, quotes included.
    #[inline(always)]
    fn key(&mut self, _literal: Range<usize>) {}
    /// The array or object whose bracket (`[` or `{`) is at `at` opens.
    #[inline(always)]
    fn open(&mut self, _at: usize, _bracket: u8) {}
    /// The innermost open container closes with the bracket at `at`.
    #[inline(always)]
    fn close(&mut self, _at: usize) {}
    /// A comma at `at` between the items or members of the innermost
    /// open container.
    #[inline(always)]
    fn comma(&mut self, _at: usize) {}
    /// The string whose opening quote is at `quote` is still going
    /// [`ALONE_BYTES`] in, checked up to `at` (a place between escapes):
    /// the index just past its closing quote if all of it is valid, `None`
    /// if not. By default the rest is checked (on two threads where it is
    /// long); a structure may read the whole string another way that
    /// checks it as well: the envelope parse unescapes a large text block
    /// as it checks it and keeps it, one read where a check and then an
    /// unescape made two.
    fn long_string(&mut self, b: &[u8], quote: usize, at: usize) -> Option<usize> {
        let _ = quote;
        long_string_end(b, at)
    }
}

impl Structure for () {}

/// The first index at or after `i` that is not JSON whitespace, telling
/// `structure` of the whitespace skipped.
#[inline(always)]
fn space(b: &[u8], i: usize, structure: &mut impl Structure) -> usize {
    let end = skip_space(b, i);
    if end > i {
        structure.space(i, end);
    }
    end
}

/// The key string at `i` (its end, just past the closing quote) and where
/// the value after its colon starts.
fn key_and_colon(b: &[u8], i: usize, structure: &mut impl Structure) -> Option<(usize, usize)> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = string_end(b, i, structure)?;
    structure.key(i..end);
    let colon = space(b, end, structure);
    (b.get(colon) == Some(&b':')).then(|| (end, space(b, colon + 1, structure)))
}

/// The end of the valid JSON value at `i`, whose arrays and objects nest
/// at most `max_depth` levels; `open` is scratch (left empty). What it is
/// made of is told to `structure` on the way.
fn value(
    b: &[u8],
    mut i: usize,
    max_depth: usize,
    open: &mut Vec<u8>,
    structure: &mut impl Structure,
) -> Option<usize> {
    open.clear();
    loop {
        // A value starts at `i`.
        structure.value(i);
        match *b.get(i)? {
            b'"' => i = string_end(b, i, structure)?,
            bracket @ (b'{' | b'[') => {
                if open.len() >= max_depth {
                    return None;
                }
                structure.open(i, bracket);
                let close = if bracket == b'{' { b'}' } else { b']' };
                let inside = space(b, i + 1, structure);
                if b.get(inside) == Some(&close) {
                    structure.close(inside);
                    i = inside + 1;
                } else {
                    open.push(bracket);
                    i = if bracket == b'{' {
                        key_and_colon(b, inside, structure)?.1
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
            i = space(b, i, structure);
            match (*b.get(i)?, inner) {
                (b',', b'{') => {
                    structure.comma(i);
                    i = key_and_colon(b, space(b, i + 1, structure), structure)?.1;
                    break;
                }
                (b',', _) => {
                    structure.comma(i);
                    i = space(b, i + 1, structure);
                    break;
                }
                (b'}', b'{') | (b']', b'[') => {
                    structure.close(i);
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
///
/// A string still going after [`ALONE_BYTES`], in a text with more than
/// 256 KB left (a large result's text block), is checked in two parts at
/// once, as `jsonrpc::walk` unescapes it: the rest of the text is cut in
/// the middle where an escape starts ([`second_part_at`]), and a second
/// thread checks from there to the closing quote while this one reaches
/// the cut. The answer is the one-thread reading's wherever the cut falls:
/// if this thread does not stop exactly at the cut (the string ended
/// before it, or the text is no string there), the second thread's work
/// is stopped and dropped.
fn string_end(b: &[u8], quote: usize, structure: &mut impl Structure) -> Option<usize> {
    let alone_until = quote.saturating_add(1 + ALONE_BYTES);
    let mut i = quote + 1;
    loop {
        i = string_stop(b, i)?;
        match b[i] {
            b'"' => return Some(i + 1),
            b'\\' => {
                i = escape_end(b, i)?;
                if i >= alone_until {
                    return structure.long_string(b, quote, i);
                }
            }
            // A control character, which a string must escape.
            _ => return None,
        }
    }
}

/// Just past the valid escape whose backslash is at `i`.
#[inline(always)]
fn escape_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => {
            let hex = b.get(i + 2..i + 6)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(i + 6)
        }
        _ => None,
    }
}

/// [`string_end`] for a string still going at `i` (between escapes),
/// past [`ALONE_BYTES`].
#[cold]
fn long_string_end(b: &[u8], i: usize) -> Option<usize> {
    match second_part_at(b, i) {
        Some(cut) => in_two_parts(b, i, cut),
        None => rest_of_string(b, i),
    }
}

/// The end of a string read on from `i` (not inside an escape), the part
/// from `cut` on read on a second thread. Wherever `cut` is, the end is
/// the one-thread reading's: the second part counts only if the first
/// stops exactly at the cut, between escapes.
fn in_two_parts(b: &[u8], i: usize, cut: usize) -> Option<usize> {
    let stop = AtomicBool::new(false);
    let (first, second) = crate::parallel::both(
        true,
        || {
            let first = string_part(b, i, cut, None);
            if first != Some(Part::Paused(cut)) {
                stop.store(true, Ordering::Relaxed);
            }
            first
        },
        || string_part(b, cut, usize::MAX, Some(&stop)),
    );
    match first? {
        Part::Ended(end) => Some(end),
        Part::Paused(at) if at == cut => match second? {
            Part::Ended(end) => Some(end),
            Part::Paused(_) => None,
        },
        Part::Paused(at) => rest_of_string(b, at),
    }
}

/// The end of a string read on from `i` (not inside an escape).
fn rest_of_string(b: &[u8], i: usize) -> Option<usize> {
    match string_part(b, i, usize::MAX, None)? {
        Part::Ended(end) => Some(end),
        Part::Paused(_) => None,
    }
}

/// Where [`string_part`] got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The closing quote: the index just past it.
    Ended(usize),
    /// At or past where it was told to pause, at a place between escapes
    /// (from which reading on gives what reading through would have).
    Paused(usize),
}

/// How often (in bytes read) a part checked on a second thread looks
/// whether it is still wanted.
const STOP_CHECK_BYTES: usize = 16 << 10;

/// Checks a string's characters from `i` (not inside an escape) to its
/// closing quote, pausing at the first place between escapes at or past
/// `pause`. `None` for a control character, an escape JSON does not have,
/// no closing quote, or when `stop` is set.
fn string_part(b: &[u8], mut i: usize, pause: usize, stop: Option<&AtomicBool>) -> Option<Part> {
    // One comparison per escape: the next place where it pauses or looks
    // at `stop`.
    let mut next = i;
    loop {
        if i >= next {
            if i >= pause {
                return Some(Part::Paused(i));
            }
            if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
                return None;
            }
            next = pause.min(i + STOP_CHECK_BYTES);
        }
        i = string_stop(b, i)?;
        match b[i] {
            b'\\' if i >= pause => return Some(Part::Paused(i)),
            b'\\' => i = escape_end(b, i)?,
            b'"' => return Some(Part::Ended(i + 1)),
            // A control character, which a string must escape.
            _ => return None,
        }
    }
}

/// The first byte at or after `from` that ends a run of a string's plain
/// characters: `"`, `\` or a control character (below 0x20), looked at
/// eight bytes at a time.
fn string_stop(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while let Some(word) = word_at(b, i) {
        let stops = string_stops(word);
        if stops != 0 {
            return Some(i + first_flagged(stops));
        }
        i += 8;
    }
    b.get(i..)?
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|p| i + p)
}

/// The index of the first byte at or after `i` that is not JSON
/// whitespace (or the length).
pub(crate) fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_string_is_checked_in_two_parts_as_in_one_wherever_it_is_cut() {
        // Every cut, between escapes or not (inside one, inside a
        // character), of valid and broken strings.
        for text in crate::scan::strings_to_cut::short() {
            let (b, alone) = (text.as_bytes(), rest_of_string(text.as_bytes(), 1));
            for cut in 1..=b.len() {
                assert_eq!(in_two_parts(b, 1, cut), alone, "{text:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_long_string_is_checked_in_two_parts_as_in_one_wherever_the_cut_falls() {
        for (text, tail) in crate::scan::strings_to_cut::long() {
            let b = text.as_bytes();
            let end = string_end(b, 0, &mut ());
            assert_eq!(end, Some(text.len() - tail.len()), "{}", text.len());
            assert_eq!(end, rest_of_string(b, 1), "{}", text.len());
        }
        // Broken in the first part, in the second, at the end, or not
        // ended: refused, as one thread refuses it.
        let body = r#"ab\\\"cd"#.repeat(100_000);
        for broken in [
            format!(r#""\q{body}{body}""#),
            format!(r#""{body}{body}\q""#),
            format!("\"{body}\u{1}{body}\""),
            format!(r#""{body}{body}\u12""#),
            format!(r#""{body}{body}"#),
        ] {
            assert_eq!(string_end(broken.as_bytes(), 0, &mut ()), None);
            assert_eq!(rest_of_string(broken.as_bytes(), 1), None);
        }
        // A long string that ends before the cut, in a longer text whose
        // rest is no string (the second part's work is dropped).
        let long = r#"x\\\"y"#.repeat(20_000);
        let after = r#","k":"v\"w","#.repeat(100_000);
        let text = format!("\"{long}\"{after}");
        assert_eq!(
            string_end(text.as_bytes(), 0, &mut ()),
            Some(long.len() + 2)
        );
        // And in a message: found, and its members.
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"{body}"}}]}}}}"#
        );
        assert_eq!(object_members(&message, 64).map(|m| m.len()), Some(3));
        assert!(is_json(&format!("[\"{body}\",\"{body}\"]")));
    }

    /// The check says what `serde_json` says; told to an index
    /// ([`crate::scan::checked_minified_and_indexed`]), it is the same
    /// check, and the index of valid JSON is the one its scan makes.
    fn agrees(text: &str) -> Result<(), TestCaseError> {
        let serde = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        prop_assert_eq!(is_json(text), serde, "{:?}", text);
        for keep in [2, usize::MAX] {
            let indexed = crate::scan::checked_minified_and_indexed(text, keep);
            let expected = serde.then(|| crate::scan::minified_and_indexed(text, keep));
            prop_assert_eq!(indexed, expected, "{:?}", text);
        }
        Ok(())
    }

    /// A JSON value of any kind, written compact or spread out.
    fn value_text() -> impl Strategy<Value = String> {
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
        (value, any::<bool>()).prop_map(|(value, pretty)| {
            if pretty {
                serde_json::to_string_pretty(&value).unwrap_or_default()
            } else {
                value.to_string()
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Valid values, then each with one byte changed, taken out or put
        /// in (at any place: most of them make it invalid).
        #[test]
        fn a_value_is_json_when_serde_json_reads_it(
            text in value_text(),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![
                Just(b'"'), Just(b'\\'), Just(b','), Just(b':'), Just(b'{'), Just(b'}'),
                Just(b'['), Just(b']'), Just(b'0'), Just(b'-'), Just(b'.'), Just(b'e'),
                Just(b'u'), Just(b' '), Just(b'\n'), Just(0x1f), Just(b'a'),
            ],
            edit in 0u8..3,
        ) {
            agrees(&text)?;
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
                agrees(&edited)?;
            }
        }

        /// Texts of JSON's punctuation, digits and letters, valid or not.
        #[test]
        fn any_text_is_json_as_serde_json_reads_it(
            text in "[\\[\\]{}\":, \n\t\\\\0-9.eE+\\-tfrulnsa\u{1}é]{0,40}",
        ) {
            agrees(&text)?;
        }
    }

    #[test]
    fn any_value_however_deep_is_json_and_nothing_else() {
        for text in [
            "1",
            " -0.5e+3 ",
            "\"a\\u00e9\"",
            "[]",
            "{}",
            "null",
            "[{\"a\":[true,false]}]",
        ] {
            assert!(is_json(text), "{text:?}");
            let indexed = crate::scan::checked_minified_and_indexed(text, 3);
            assert_eq!(indexed, Some(crate::scan::minified_and_indexed(text, 3)));
        }
        for text in [
            "",
            " ",
            "1 2",
            "[1,]",
            "{\"a\"}",
            "01",
            "\"\u{1}\"",
            "tru",
            "[",
            "nul",
        ] {
            assert!(!is_json(text), "{text:?}");
            assert_eq!(crate::scan::checked_minified_and_indexed(text, 3), None);
        }
        let deep = format!("{}1{}", "[".repeat(500_000), "]".repeat(500_000));
        assert!(is_json(&deep));
        assert!(!is_json(&deep[1..]));
        let indexed = crate::scan::checked_minified_and_indexed(&deep, 3).unwrap();
        assert_eq!(indexed, crate::scan::minified_and_indexed(&deep, 3));
        assert!(crate::scan::checked_minified_and_indexed(&deep[1..], 3).is_none());
    }
}
