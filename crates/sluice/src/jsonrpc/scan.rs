//! Byte scans over JSON that has not been (or could not be) parsed.
//!
//! Two questions are asked of raw bytes before, or instead of, a parse:
//!
//! - How deep does it nest? `serde_json`'s borrowed parse (`RawValue`)
//!   skips values without recursion and so has no depth limit of its own,
//!   while every typed or `Value` parse refuses the 128th level. The
//!   envelope parse checks [`nests_deeper_than`] first, so that sluice
//!   never forwards a message that it (or a Rust SDK on the other side)
//!   could not parse later.
//! - What is the id of a message that failed to parse? An answer with one
//!   bad byte, or cut short, or nested a million levels deep still names
//!   the request it answers. [`salvage_id`] finds that top-level `"id"` so
//!   that the call waiting for the answer fails at once with the reason,
//!   instead of waiting for an answer that will never be read.
//!
//! Both are one forward pass over the bytes, with no recursion and no
//! allocation beyond the id found; neither ever panics, whatever the bytes.

use super::message::Id;

/// The index just past the string whose opening quote is at `quote`, or
/// `None` when the bytes end inside it. Escapes are skipped, not checked.
pub(crate) fn string_end(bytes: &[u8], quote: usize) -> Option<usize> {
    let mut i = quote + 1;
    while i <= bytes.len() {
        let at = i + memchr::memchr2(b'"', b'\\', &bytes[i..])?;
        if bytes[at] == b'\\' {
            i = at + 2;
        } else {
            return Some(at + 1);
        }
    }
    None
}

/// Whether the arrays and objects in `json` nest more than `limit` levels
/// deep (brackets inside strings are not counted). Stops at the first level
/// past the limit; the bytes need not be valid JSON.
pub(crate) fn nests_deeper_than(json: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => match string_end(json, i) {
                Some(end) => {
                    i = end;
                    continue;
                }
                None => return false,
            },
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    false
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    i
}

/// Whether the quoted key `raw` (quotes included) names `id`, spelled plainly
/// or with escapes (`"\u0069d"`).
fn key_is_id(raw: &[u8]) -> bool {
    if raw == b"\"id\"" {
        return true;
    }
    // An escaped spelling of a two-letter key is short; a longer key is
    // not decoded at all, which keeps the scan linear.
    raw.len() <= 32
        && raw.contains(&b'\\')
        && std::str::from_utf8(raw)
            .ok()
            .and_then(|text| serde_json::from_str::<String>(text).ok())
            .is_some_and(|key| key == "id")
}

/// The index just past the value that starts at `i`: a string, a whole
/// array or object (brackets counted outside strings, not matched), or a
/// scalar up to the next delimiter. `None` when the bytes end first.
fn skip_value(bytes: &[u8], i: usize) -> Option<usize> {
    match *bytes.get(i)? {
        b'"' => string_end(bytes, i),
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < bytes.len() {
                match bytes[j] {
                    b'"' => {
                        j = string_end(bytes, j)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let end = scalar_end(bytes, i);
            (end > i).then_some(end)
        }
    }
}

/// The end of the scalar (number, `true`, `null`…) that starts at `i`.
fn scalar_end(bytes: &[u8], i: usize) -> usize {
    let mut end = i;
    while bytes
        .get(end)
        .is_some_and(|&b| !is_space(b) && !matches!(b, b',' | b'}' | b']' | b'"'))
    {
        end += 1;
    }
    end
}

/// The id whose value starts at `i`, if it is a whole string or number.
fn id_at(bytes: &[u8], i: usize) -> Option<Id> {
    let end = match *bytes.get(i)? {
        b'"' => string_end(bytes, i)?,
        b'-' | b'0'..=b'9' => {
            let end = scalar_end(bytes, i);
            // A number that runs to the end of the bytes may have been cut
            // short (`12` of `123`): only a delimiter after it proves it
            // whole. Naming the wrong call would be worse than naming none.
            bytes.get(end)?;
            end
        }
        _ => return None,
    };
    Id::from_json(std::str::from_utf8(&bytes[i..end]).ok()?)
}

/// The top-level `"id"` of `bytes`, a JSON-RPC message that may not parse:
/// invalid UTF-8 elsewhere in it, nested too deep, cut short, or too large
/// to keep. `None` when there is no such member before the damage, or its
/// value is not a whole string or number (`null`, cut inside the id).
///
/// One forward scan: members before the id are skipped by counting brackets
/// outside strings, so the cost is linear in the bytes before the id, the
/// memory constant, and nothing recurses however deep the nesting. The
/// first top-level `"id"` wins (a parse refuses messages with two).
pub fn salvage_id(bytes: &[u8]) -> Option<Id> {
    let start = if bytes.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    let mut i = skip_space(bytes, start);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_space(bytes, i);
        if bytes.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(bytes, i)?;
        let is_id = key_is_id(&bytes[i..key_end]);
        i = skip_space(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(bytes, i + 1);
        if is_id {
            return id_at(bytes, i);
        }
        i = skip_space(bytes, skip_value(bytes, i)?);
        if bytes.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(bytes: &[u8]) -> Option<String> {
        salvage_id(bytes).map(|id| id.to_string())
    }

    #[test]
    fn the_id_of_a_whole_message_is_found_wherever_it_stands() {
        assert_eq!(
            id(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id(br#"{"result":{"a":[1,{"id":5}],"s":"}]\"{"},"id":"x\"y","jsonrpc":"2.0"}"#)
                .as_deref(),
            Some(r#""x\"y""#),
            "nested ids and brackets inside strings are skipped"
        );
        assert_eq!(
            id(b"\xEF\xBB\xBF {\r\n \"id\" : -1.5e3 }").as_deref(),
            Some("-1.5e3"),
            "a BOM, whitespace and a number's spelling are kept"
        );
        assert_eq!(
            id(br#"{"\u0069d":3}"#).as_deref(),
            Some("3"),
            "an escaped key"
        );
    }

    #[test]
    fn the_id_of_a_damaged_message_is_found_when_it_comes_before_the_damage() {
        let mut bad_utf8 = br#"{"jsonrpc":"2.0","id":12,"result":{"text":""#.to_vec();
        bad_utf8.extend(b"\xFF\xFE");
        bad_utf8.extend(br#""}}"#);
        assert_eq!(id(&bad_utf8).as_deref(), Some("12"));

        let mut deep = br#"{"id":"deep","result":"#.to_vec();
        deep.extend(std::iter::repeat_n(b'[', 1_000_000));
        assert_eq!(id(&deep).as_deref(), Some(r#""deep""#));

        let mut before = br#"{"jsonrpc":"2.0","result":{"a":"#.to_vec();
        before.extend(std::iter::repeat_n(b'[', 10_000));
        before.extend(std::iter::repeat_n(b']', 10_000));
        before.extend(b"\xC0\xC1},\"id\":99}");
        assert_eq!(
            id(&before).as_deref(),
            Some("99"),
            "damage and nesting before the id are skipped"
        );
    }

    #[test]
    fn a_cut_id_is_not_guessed() {
        assert_eq!(id(br#"{"id":123"#), None, "12 of 123 must not be named");
        assert_eq!(id(br#"{"id":123,"#).as_deref(), Some("123"));
        assert_eq!(id(br#"{"id":"ab"#), None);
        assert_eq!(id(br#"{"id":null,"result":1}"#), None);
        assert_eq!(id(br#"{"id":[1],"result":1}"#), None);
        assert_eq!(id(br#"{"id":1x,"result":1}"#), None, "not a number");
        assert_eq!(id(br#"[{"id":1}]"#), None, "a batch is no message");
        assert_eq!(id(br#"{"result":{"id":1}"#), None);
    }

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(!nests_deeper_than(br#"{"a":[[1]]}"#, 3));
        assert!(nests_deeper_than(br#"{"a":[[[1]]]}"#, 3));
        assert!(!nests_deeper_than(br#"{"a":"[[[[[[","b":"\"[[[["}"#, 1));
        let deep = vec![b'['; 1_000_000];
        assert!(nests_deeper_than(&deep, 127));
    }
}
