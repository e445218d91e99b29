//! A structural scanner for JSON text already known to be valid.
//!
//! Stored documents are indexed by byte offsets, not parsed: a 100 MB
//! result is scanned once (strings skipped with `memchr`) to minify it, to
//! find its largest arrays, and to split one array into items. Every
//! function here assumes valid JSON (checked once with `serde_json` when
//! the document is stored) and never panics on invalid input, it only gives
//! meaningless offsets.

use std::borrow::Cow;
use std::ops::Range;

/// An array found in a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpan {
    /// Its JSON Pointer (`""` for the root).
    pub pointer: String,
    /// Its bytes, from `[` to `]` inclusive.
    pub range: Range<usize>,
    /// How many items it has.
    pub items: usize,
}

impl ArraySpan {
    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.range.len()
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// The index just after the string whose opening quote is at `quote`.
pub(crate) fn string_end(b: &[u8], quote: usize) -> usize {
    let mut i = quote + 1;
    while let Some(p) = memchr::memchr2(b'"', b'\\', &b[i.min(b.len())..]) {
        let at = i + p;
        if b[at] == b'\\' {
            i = at + 2;
        } else {
            return at + 1;
        }
    }
    b.len()
}

/// `json` without whitespace outside strings; borrowed when already compact.
pub fn minify(json: &str) -> Cow<'_, str> {
    let b = json.as_bytes();
    let mut out: Option<Vec<u8>> = None;
    let mut flushed = 0;
    let mut i = 0;
    while i < b.len() {
        let quote = memchr::memchr(b'"', &b[i..]).map_or(b.len(), |p| i + p);
        for (j, &c) in b[i..quote].iter().enumerate() {
            if is_space(c) {
                let at = i + j;
                let out = out.get_or_insert_with(|| Vec::with_capacity(b.len()));
                out.extend_from_slice(&b[flushed..at]);
                flushed = at + 1;
            }
        }
        if quote == b.len() {
            break;
        }
        i = string_end(b, quote);
    }
    match out {
        None => Cow::Borrowed(json),
        Some(mut out) => {
            out.extend_from_slice(&b[flushed..]);
            // Only ASCII whitespace was removed: still UTF-8.
            Cow::Owned(String::from_utf8(out).unwrap_or_default())
        }
    }
}

/// One open container while scanning.
struct Frame {
    array: bool,
    start: usize,
    commas: usize,
    empty: bool,
    /// For objects: the current member's key (quotes included).
    key: Range<usize>,
    /// For objects: whether the next string is a key.
    expect_key: bool,
}

/// The `keep` largest arrays of compact JSON `doc`, largest first (ties:
/// the earlier one first).
pub fn largest_arrays(doc: &str, keep: usize) -> Vec<ArraySpan> {
    let b = doc.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut found: Vec<ArraySpan> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                if let Some(top) = stack.last_mut() {
                    top.empty = false;
                    if !top.array && top.expect_key {
                        top.key = i..end;
                        top.expect_key = false;
                    }
                }
                i = end;
                continue;
            }
            open @ (b'[' | b'{') => {
                if let Some(top) = stack.last_mut() {
                    top.empty = false;
                }
                stack.push(Frame {
                    array: open == b'[',
                    start: i,
                    commas: 0,
                    empty: true,
                    key: 0..0,
                    expect_key: open == b'{',
                });
            }
            b']' => {
                if let Some(frame) = stack.pop() {
                    let bytes = i + 1 - frame.start;
                    let small = found.len() >= keep
                        && found.last().is_some_and(|last| last.bytes() >= bytes);
                    if !small && keep > 0 {
                        let span = ArraySpan {
                            pointer: pointer_of(doc, &stack),
                            range: frame.start..i + 1,
                            items: if frame.empty { 0 } else { frame.commas + 1 },
                        };
                        let at = found.partition_point(|f| f.bytes() >= bytes);
                        found.insert(at, span);
                        found.truncate(keep);
                    }
                }
            }
            b'}' => {
                stack.pop();
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.commas += 1;
                    top.expect_key = !top.array;
                }
            }
            b':' => {}
            _ => {
                if let Some(top) = stack.last_mut() {
                    top.empty = false;
                }
            }
        }
        i += 1;
    }
    found
}

/// The pointer of the value being scanned inside `stack`.
fn pointer_of(doc: &str, stack: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in stack {
        pointer.push('/');
        if frame.array {
            pointer.push_str(&frame.commas.to_string());
        } else {
            escape_token(&unquote(&doc[frame.key.clone()]), &mut pointer);
        }
    }
    pointer
}

/// The text of a JSON string literal (quotes included).
fn unquote(literal: &str) -> Cow<'_, str> {
    if literal.len() >= 2 && !literal.contains('\\') {
        Cow::Borrowed(&literal[1..literal.len() - 1])
    } else {
        Cow::Owned(serde_json::from_str::<String>(literal).unwrap_or_default())
    }
}

/// Calls `visit` for every string of compact JSON `doc` (keys and values)
/// with its literal's bytes (quotes included), whether it is a key, and a
/// function that builds its JSON Pointer (the member's, for a key). Stops
/// when `visit` returns `false`.
pub fn visit_strings(
    doc: &str,
    mut visit: impl FnMut(std::ops::Range<usize>, bool, &dyn Fn() -> String) -> bool,
) {
    let b = doc.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                let mut key = false;
                if let Some(top) = stack.last_mut() {
                    top.empty = false;
                    if !top.array && top.expect_key {
                        top.key = i..end;
                        top.expect_key = false;
                        key = true;
                    }
                }
                let pointer = || pointer_of(doc, &stack);
                if !visit(i..end, key, &pointer) {
                    return;
                }
                i = end;
                continue;
            }
            open @ (b'[' | b'{') => {
                stack.push(Frame {
                    array: open == b'[',
                    start: i,
                    commas: 0,
                    empty: true,
                    key: 0..0,
                    expect_key: open == b'{',
                });
            }
            b']' | b'}' => {
                stack.pop();
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.commas += 1;
                    top.expect_key = !top.array;
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// The text of a JSON string literal (quotes included), unescaped.
pub fn string_text(literal: &str) -> Cow<'_, str> {
    unquote(literal)
}

/// Appends `token` to a JSON Pointer, escaped (`~` → `~0`, `/` → `~1`).
pub fn escape_token(token: &str, pointer: &mut String) {
    for c in token.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// A JSON Pointer token as the key or index it names (`~1` → `/`,
/// `~0` → `~`).
pub fn unescape_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// The end (exclusive) of the value starting at `start`.
fn value_end(b: &[u8], start: usize) -> usize {
    match b.get(start) {
        Some(b'"') => string_end(b, start),
        Some(b'[' | b'{') => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i);
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return i + 1;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            b.len()
        }
        Some(_) => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b']' | b'}') {
                i += 1;
            }
            i
        }
        None => start,
    }
}

/// The start offsets of the items of the compact array at `array` (from
/// `[` to `]`). Item `i` spans `starts[i]..starts[i + 1] - 1` (the comma
/// excluded); the last one ends before the closing `]`.
pub fn item_starts(doc: &str, array: Range<usize>) -> Vec<u64> {
    let b = doc.as_bytes();
    let mut starts = Vec::new();
    let mut i = array.start + 1;
    let end = array.end.saturating_sub(1);
    if i >= end {
        return starts;
    }
    loop {
        starts.push(i as u64);
        i = value_end(b, i);
        if i >= end || b[i] != b',' {
            return starts;
        }
        i += 1;
    }
}

/// The start offsets of the members of the compact object at `object`
/// (from `{` to `}`): member `i` (`"key":value`) spans
/// `starts[i]..starts[i + 1] - 1`; the last one ends before the closing `}`.
pub fn member_starts(doc: &str, object: Range<usize>) -> Vec<u64> {
    let b = doc.as_bytes();
    let mut starts = Vec::new();
    let mut i = object.start + 1;
    let end = object.end.saturating_sub(1);
    while i < end && b[i] == b'"' {
        starts.push(i as u64);
        // The key, its colon (compact JSON: no space), then the value.
        i = value_end(b, string_end(b, i) + 1);
        if i >= end || b[i] != b',' {
            break;
        }
        i += 1;
    }
    starts
}

/// A member's key (unescaped) and the bytes of its value, from the member's
/// bytes (`"key":value`) in compact `doc`.
pub fn member_parts(doc: &str, member: Range<usize>) -> (Cow<'_, str>, Range<usize>) {
    let key_end = string_end(doc.as_bytes(), member.start).min(member.end);
    let key = unquote(&doc[member.start..key_end]);
    (key, (key_end + 1).min(member.end)..member.end)
}

/// Why a JSON Pointer does not lead to a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// Not a pointer: it must be empty or start with `/`.
    #[error(
        "`{0}` is not a JSON Pointer: use \"\" for the whole document or a path such as \"/rows\" or \"/tree/0/children\""
    )]
    Syntax(String),
    /// A step names a member or index that does not exist.
    #[error("`{pointer}` does not exist: `{missing}` is not found in the value at `{parent}`")]
    Missing {
        /// The whole pointer.
        pointer: String,
        /// The part that exists.
        parent: String,
        /// The step that does not.
        missing: String,
    },
}

/// The bytes of the value at JSON Pointer `pointer` in compact `doc`.
pub fn resolve(doc: &str, pointer: &str) -> Result<Range<usize>, PointerError> {
    let b = doc.as_bytes();
    let mut here = 0..value_end(b, 0);
    if pointer.is_empty() {
        return Ok(here);
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::Syntax(pointer.to_owned()));
    };
    let mut walked = String::new();
    for raw in rest.split('/') {
        let token = unescape_token(raw);
        let missing = || PointerError::Missing {
            pointer: pointer.to_owned(),
            parent: walked.clone(),
            missing: token.clone(),
        };
        let found = match b.get(here.start) {
            Some(b'{') => member(doc, here.clone(), &token),
            Some(b'[') => token
                .parse::<usize>()
                .ok()
                .filter(|_| token == "0" || !token.starts_with('0'))
                .and_then(|n| nth_item(b, here.clone(), n)),
            _ => None,
        };
        here = found.ok_or_else(missing)?;
        walked.push('/');
        walked.push_str(raw);
    }
    Ok(here)
}

fn member(doc: &str, object: Range<usize>, name: &str) -> Option<Range<usize>> {
    let b = doc.as_bytes();
    let mut i = object.start + 1;
    while i < object.end && b[i] == b'"' {
        let key_end = string_end(b, i);
        let key = unquote(&doc[i..key_end]);
        let value_start = key_end + 1;
        let end = value_end(b, value_start);
        if key == name {
            return Some(value_start..end);
        }
        if b.get(end) != Some(&b',') {
            return None;
        }
        i = end + 1;
    }
    None
}

fn nth_item(b: &[u8], array: Range<usize>, n: usize) -> Option<Range<usize>> {
    let mut i = array.start + 1;
    if b.get(i) == Some(&b']') {
        return None;
    }
    for k in 0.. {
        let end = value_end(b, i);
        if k == n {
            return Some(i..end);
        }
        if b.get(end) != Some(&b',') {
            return None;
        }
        i = end + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minify_keeps_strings_and_borrows_compact_text() {
        let pretty = "{\n  \"a b\": [1, 2,\t3],\n  \"s\": \"x \\\" y\\\\\"\n}\n";
        assert_eq!(minify(pretty), r#"{"a b":[1,2,3],"s":"x \" y\\"}"#);
        assert!(matches!(minify(r#"{"a":1}"#), Cow::Borrowed(_)));
    }

    #[test]
    fn largest_arrays_are_found_with_their_pointers() {
        let doc = r#"{"count":3,"rows":[{"id":1,"t":["x"]},{"id":2},{"id":3}],"a/b":[[1,2],[]]}"#;
        let found = largest_arrays(doc, 10);
        let pointers: Vec<(&str, usize)> = found
            .iter()
            .map(|a| (a.pointer.as_str(), a.items))
            .collect();
        assert_eq!(
            pointers,
            [
                ("/rows", 3),
                ("/a~1b", 2),
                ("/rows/0/t", 1),
                ("/a~1b/0", 2),
                ("/a~1b/1", 0)
            ]
        );
        assert_eq!(&doc[found[0].range.clone()][..2], "[{");
        assert_eq!(largest_arrays(doc, 1).len(), 1);
        assert_eq!(largest_arrays("[]", 4)[0].items, 0);
        assert_eq!(largest_arrays("[1]", 4)[0].items, 1);
    }

    #[test]
    fn items_split_at_top_level_commas_only() {
        let doc = r#"[{"a":"x,]"},[1,2],"s\"",3]"#;
        let starts = item_starts(doc, 0..doc.len());
        let items: Vec<&str> = starts
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let end = starts.get(i + 1).map_or(doc.len() - 1, |&n| n as usize - 1);
                &doc[s as usize..end]
            })
            .collect();
        assert_eq!(items, [r#"{"a":"x,]"}"#, "[1,2]", r#""s\"""#, "3"]);
        assert!(item_starts("[]", 0..2).is_empty());
    }

    #[test]
    fn strings_are_visited_with_their_pointers() {
        let doc = r#"{"a":["x",{"k\"":"v"}],"b":"y"}"#;
        let mut seen = Vec::new();
        visit_strings(doc, |range, key, pointer| {
            seen.push((string_text(&doc[range]).into_owned(), key, pointer()));
            true
        });
        let seen: Vec<(&str, bool, &str)> = seen
            .iter()
            .map(|(s, k, p)| (s.as_str(), *k, p.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("a", true, "/a"),
                ("x", false, "/a/0"),
                ("k\"", true, "/a/1/k\""),
                ("v", false, "/a/1/k\""),
                ("b", true, "/b"),
                ("y", false, "/b"),
            ]
        );
    }

    #[test]
    fn members_split_into_keys_and_values() {
        let doc = r#"{"a":{"x,":[1,"}"]},"b\"c":2,"d":"e"}"#;
        let starts = member_starts(doc, 0..doc.len());
        assert_eq!(starts.len(), 3);
        let member = |i: usize| {
            let end = starts.get(i + 1).map_or(doc.len() - 1, |&n| n as usize - 1);
            starts[i] as usize..end
        };
        let parts: Vec<(String, &str)> = (0..3)
            .map(|i| {
                let (key, value) = member_parts(doc, member(i));
                (key.into_owned(), &doc[value])
            })
            .collect();
        assert_eq!(
            parts,
            [
                ("a".to_owned(), r#"{"x,":[1,"}"]}"#),
                ("b\"c".to_owned(), "2"),
                ("d".to_owned(), "\"e\"")
            ]
        );
        assert!(member_starts("{}", 0..2).is_empty());
    }

    #[test]
    fn pointers_resolve_to_values() {
        let doc = r#"{"a":{"b/c":[10,{"d":"e"}]},"x~":true}"#;
        let at = |p: &str| resolve(doc, p).map(|r| &doc[r]);
        assert_eq!(at(""), Ok(doc));
        assert_eq!(at("/a/b~1c/1/d"), Ok("\"e\""));
        assert_eq!(at("/x~0"), Ok("true"));
        assert_eq!(at("/a/b~1c/0"), Ok("10"));
        assert!(matches!(at("/a/zz"), Err(PointerError::Missing { .. })));
        assert!(matches!(at("/a/b~1c/2"), Err(PointerError::Missing { .. })));
        assert!(matches!(
            at("/a/b~1c/01"),
            Err(PointerError::Missing { .. })
        ));
        assert!(matches!(at("a"), Err(PointerError::Syntax(_))));
    }
}
