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

use crate::check::Structure;
use crate::format::quoted_cut;

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
    while let Some(at) = quote_or_backslash(b, i) {
        if b[at] == b'\\' {
            i = at + 2;
        } else {
            return at + 1;
        }
    }
    b.len()
}

/// Where the first `"` or `\` at or after `from` is: where a string read
/// from `from` ends or has an escape. `None` if there is none (or `from`
/// is past the end).
///
/// JSON held in a text block has a `\"` every few bytes (each key's and
/// each string's quotes escaped), and most strings of a compact document
/// are short: the first 32 bytes are looked at eight at a time, a word's
/// bytes compared at once, before `memchr2` (whose setup costs more than a
/// short run does) takes a longer run. On such text it finds the stops in
/// about half the time `memchr2` alone does; on a long plain run, in the
/// same time.
#[inline]
pub fn quote_or_backslash(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    for _ in 0..4 {
        let Some(word) = word_at(b, i) else {
            break;
        };
        let stops = bytes_equal(word, b'"') | bytes_equal(word, b'\\');
        if stops != 0 {
            return Some(i + first_flagged(stops));
        }
        i += 8;
    }
    memchr::memchr2(b'"', b'\\', b.get(i..)?).map(|p| i + p)
}

/// A place at or after `p` where a string's text can be cut in two, each
/// part read alone (checked, or unescaped): the first escape that starts there or later, or
/// just past one. A backslash after any other byte starts an escape, and
/// the backslashes in a row after it pair up. Never at a `\u` escape, which
/// may be the second half of a surrogate pair read as one character. `None`
/// if no such place follows. (Past the string's end the place is
/// meaningless: the first part then ends before it, and the second is
/// dropped.)
///
/// It looks no further than [`CUT_WINDOW`] from `p`, and no further back
/// than that over a run of backslashes: a text built so that no place is
/// near (one long plain run, or backslashes for megabytes) gets `None`, and
/// is read on one thread, rather than costing a scan of the rest for each
/// long string in it.
pub fn cut_near(b: &[u8], p: usize) -> Option<usize> {
    let window_end = p.saturating_add(CUT_WINDOW).min(b.len());
    let mut from = p;
    loop {
        let q = from + memchr::memchr(b'\\', b.get(from..window_end)?)?;
        let back = q.saturating_sub(CUT_WINDOW);
        let run_start = match b[back..q].iter().rposition(|&c| c != b'\\') {
            Some(before) => back + before + 1,
            None if back == 0 => 0,
            None => return None,
        };
        if (q - run_start) % 2 == 1 {
            // `q` is the second backslash of an escaped backslash.
            return Some(q + 1);
        }
        if b.get(q + 1) != Some(&b'u') {
            return Some(q);
        }
        from = q + 6;
    }
}

/// Where to cut a long string still being read at `i` (between escapes)
/// so that a second thread reads from there on: near the middle of the
/// rest of the text ([`cut_near`]), if more than
/// [`BLOCKING_BYTES`](crate::limits::BLOCKING_BYTES) is left (less is not
/// worth a thread). The one rule of `check`'s and the gateway's walk's
/// two-part readers.
pub fn second_part_at(b: &[u8], i: usize) -> Option<usize> {
    let rest = b.len().checked_sub(i)?;
    if rest <= crate::limits::BLOCKING_BYTES {
        return None;
    }
    cut_near(b, i + rest / 2)
}

/// How far from where it is asked [`cut_near`] looks for a place to cut.
pub const CUT_WINDOW: usize = 64 << 10;

/// Test texts for the readers of strings cut in two (`check` here, the
/// gateway's `jsonrpc::walk`): JSON strings from their opening quote, made
/// of a pattern that holds every kind of escape, backslashes in a row,
/// surrogate pairs and lone halves, and characters of 1 to 4 bytes. Short
/// ones to cut at every byte: one whole and followed by more, and broken
/// ones (a bad escape, a short `\u`, a control character, no closing
/// quote).
#[doc(hidden)]
pub mod strings_to_cut {
    /// The pattern.
    pub const PATTERN: &str = r#"ab\"c\\\\\\d\/é\n\ud83d\ude00\u00e9\ud800x\\\\\\\\\\\"€\t🦀 "#;

    /// Short strings, whole and broken.
    pub fn short() -> [String; 5] {
        let body = PATTERN.repeat(6);
        [
            format!("\"{body}\",\"after\""),
            format!("\"{body}\\q{body}\""),
            format!("\"{body}\\u12\""),
            format!("\"{body}\u{1}\""),
            format!("\"{body}"),
        ]
    }

    /// Strings of ~400 KB, each with a filler after the pattern that
    /// moves a cut in the middle of what follows their first 64 KB by half
    /// its length, across the whole pattern; each with what follows it.
    pub fn long() -> impl Iterator<Item = (String, &'static str)> {
        let body = PATTERN.repeat(400_000 / PATTERN.len());
        (0..2 * PATTERN.len()).map(move |shift| {
            let tail = [r#","more":"x\"y"}"#, ""][shift % 2];
            let filler = "f".repeat(shift);
            (format!("\"{body}{filler}\"{tail}"), tail)
        })
    }
}

// Eight bytes at a time (SWAR): the searches for a string's stops here and
// in the grammar check (`check.rs`) look at a word's bytes at once.

/// The eight bytes of `b` at `i` as one word (little-endian: the first
/// byte lowest), if eight are left.
#[inline]
pub fn word_at(b: &[u8], i: usize) -> Option<u64> {
    b.get(i..i + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .map(u64::from_le_bytes)
}

const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of each byte of `word` below `n` (at most 0x80), and maybe
/// of bytes after the first such (a borrow carries up): the lowest bit set
/// is exact, which is all [`first_flagged`] reads. Bytes of 0x80 and above
/// are never below.
#[inline]
pub fn bytes_below(word: u64, n: u8) -> u64 {
    word.wrapping_sub(ONES * u64::from(n)) & !word & (ONES << 7)
}

/// [`bytes_below`]'s flags for the bytes of `word` equal to `byte`.
#[inline]
pub fn bytes_equal(word: u64, byte: u8) -> u64 {
    bytes_below(word ^ (ONES * u64::from(byte)), 1)
}

/// [`bytes_below`]'s flags for the bytes of `word` that end a run of a
/// string's plain characters: `"`, `\` or a control character (below
/// 0x20, which a string must escape). The check of a string and the
/// unescape that checks a long one as it reads it stop at the same bytes.
#[inline]
pub fn string_stops(word: u64) -> u64 {
    bytes_equal(word, b'"') | bytes_equal(word, b'\\') | bytes_below(word, 0x20)
}

/// Where in its word the first byte flagged in `flags` (not 0) is.
#[inline]
pub fn first_flagged(flags: u64) -> usize {
    (flags.trailing_zeros() / 8) as usize
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
    /// [`visit_strings`]: the length of the pointer built before this
    /// container's own token.
    prefix_len: usize,
    /// [`minified_and_indexed`]: where this array's item starts begin in
    /// the stack of them.
    starts_from: usize,
}

/// How deep an array may be nested (counting every container around it)
/// to be named by [`largest_arrays`]: deeper ones are paged through the
/// arrays around them, and their pointers (`/0/0/0/…`) would fill a summary.
pub const NAMED_DEPTH: usize = 64;

/// The `keep` largest arrays of compact JSON `doc`, largest first (ties:
/// the earlier one first), among those nested at most [`NAMED_DEPTH`] deep.
///
/// Linear in `doc` however deep it nests: sizes are compared in one pass,
/// and pointers are built in a second one for the arrays kept only (at most
/// `keep`, each at most [`NAMED_DEPTH`] tokens).
pub fn largest_arrays(doc: &str, keep: usize) -> Vec<ArraySpan> {
    if keep == 0 {
        return Vec::new();
    }
    minified_with_largest_arrays(doc, keep).1
}

/// [`minify`] and [`largest_arrays`] of the result, in one pass over
/// `json` (any whitespace): the compact text (borrowed when `json` already
/// is) and its `keep` largest arrays, their ranges in the compact text.
///
/// A stored document is minified and indexed once, while its client waits
/// for the answer: one pass instead of two (a compact 1 MB document cost
/// ~9 M instructions to find that it had nothing to take out, with two
/// `memchr` searches per string, before the arrays were scanned).
pub fn minified_with_largest_arrays(json: &str, keep: usize) -> (Cow<'_, str>, Vec<ArraySpan>) {
    let (compact, arrays) = minified_and_indexed(json, keep);
    (compact, arrays.into_iter().map(|(span, _)| span).collect())
}

/// A JSON text indexed ([`minified_and_indexed`]): the compact text
/// (borrowed when the text already was), and the largest arrays, each with
/// where its items start.
pub type Indexed<'a> = (Cow<'a, str>, Vec<(ArraySpan, Vec<u64>)>);

/// [`minified_with_largest_arrays`], and where each item of each array
/// kept starts in the compact text (as [`item_starts`] gives them), found
/// in the same pass: the items of a stored document's bulk array are what
/// its overview and its first page plan read first, and splitting it again
/// would read it all a second time.
///
/// Each item start is copied once at most (when its own array closes, if
/// that array is among the largest so far), so the pass stays linear; the
/// starts held meanwhile are those of the arrays still open. The outermost
/// array's are taken whole, not copied: a bulk array of a hundred million
/// tiny items is held once, not twice, at its peak.
pub fn minified_and_indexed(json: &str, keep: usize) -> Indexed<'_> {
    let b = json.as_bytes();
    let mut index = Indexer::new(json, keep);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                if index.expects_key() {
                    index.key(i..end);
                } else {
                    index.value(i);
                }
                i = end;
                continue;
            }
            c if is_space(c) => index.space(i, i + 1),
            open @ (b'[' | b'{') => {
                index.value(i);
                index.open(i, open);
            }
            b']' | b'}' => index.close(i),
            b',' => index.comma(i),
            b':' => {}
            _ => index.value(i),
        }
        i += 1;
    }
    index.finish()
}

/// [`minified_and_indexed`] of `json` if it is one valid JSON value (as
/// [`crate::check::is_json`] decides), `None` if it is not: checked and
/// indexed in one pass, where a check and then the scan read it twice (a
/// stored result's document is read by both; ~9 M instructions of the
/// check's for a megabyte of records, beside the scan's ~11 M).
pub fn checked_minified_and_indexed(json: &str, keep: usize) -> Option<Indexed<'_>> {
    let mut index = Indexer::new(json, keep);
    crate::check::is_json_reporting(json, &mut index).then(|| index.finish())
}

/// The index [`minified_and_indexed`] makes, told the text's structure in
/// order: by its own scan of text assumed valid, or by the check that
/// reads a document's grammar ([`checked_minified_and_indexed`]).
struct Indexer<'a> {
    /// The text indexed.
    json: &'a str,
    /// How many of the largest arrays to keep.
    keep: usize,
    /// The compact text, made once a byte must be taken out: what is
    /// copied so far, and where the input not yet copied starts.
    out: Option<Vec<u8>>,
    flushed: usize,
    /// Bytes taken out so far: an input offset less this is the offset in
    /// the compact text.
    removed: usize,
    stack: Vec<Frame>,
    /// Kept so far: bytes, items, item starts; largest first.
    found: Vec<(Range<usize>, usize, Vec<u64>)>,
    /// Where the items of each open array (that may be kept) start, the
    /// innermost's last: each frame's from its `starts_from` on.
    later_starts: Vec<u64>,
}

impl<'a> Indexer<'a> {
    fn new(json: &'a str, keep: usize) -> Self {
        Indexer {
            json,
            keep,
            out: None,
            flushed: 0,
            removed: 0,
            stack: Vec::new(),
            found: Vec::new(),
            later_starts: Vec::new(),
        }
    }

    /// Whether the next string is an object member's key.
    fn expects_key(&self) -> bool {
        self.stack
            .last()
            .is_some_and(|top| !top.array && top.expect_key)
    }

    /// The compact text (`json` less the whitespace taken out) and the
    /// arrays kept, their pointers found in it.
    fn finish(self) -> Indexed<'a> {
        let json = self.json;
        let compact = match self.out {
            None => Cow::Borrowed(json),
            Some(mut out) => {
                out.extend_from_slice(&json.as_bytes()[self.flushed..]);
                // Only ASCII whitespace was taken out: still UTF-8.
                Cow::Owned(String::from_utf8(out).unwrap_or_default())
            }
        };
        let found = self.found;
        let mut starts: Vec<usize> = found.iter().map(|(r, _, _)| r.start).collect();
        starts.sort_unstable();
        let pointers = pointers_at(&compact, &starts);
        let arrays = found
            .into_iter()
            .map(|(range, items, item_starts)| {
                let at = starts.binary_search(&range.start).unwrap_or_default();
                let span = ArraySpan {
                    pointer: pointers.get(at).cloned().unwrap_or_default(),
                    range,
                    items,
                };
                (span, item_starts)
            })
            .collect();
        (compact, arrays)
    }
}

impl Structure for Indexer<'_> {
    #[inline(always)]
    fn space(&mut self, start: usize, end: usize) {
        let b = self.json.as_bytes();
        let out = self.out.get_or_insert_with(|| Vec::with_capacity(b.len()));
        out.extend_from_slice(&b[self.flushed..start]);
        self.flushed = end;
        self.removed += end - start;
    }

    #[inline(always)]
    fn value(&mut self, _at: usize) {
        if let Some(top) = self.stack.last_mut() {
            top.empty = false;
        }
    }

    #[inline(always)]
    fn key(&mut self, literal: Range<usize>) {
        if let Some(top) = self.stack.last_mut() {
            top.empty = false;
            top.key = literal.start - self.removed..literal.end - self.removed;
            top.expect_key = false;
        }
    }

    fn open(&mut self, at: usize, bracket: u8) {
        let mut frame = Frame::open(bracket, at - self.removed, 0);
        frame.starts_from = self.later_starts.len();
        // An array that may be kept: where its first item would start
        // (dropped at its close if it has none).
        if bracket == b'[' && self.stack.len() < NAMED_DEPTH && self.keep > 0 {
            self.later_starts.push(frame.start as u64 + 1);
        }
        self.stack.push(frame);
    }

    fn close(&mut self, at: usize) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        // (In invalid text an object may close with `]`: it is kept as
        // arrays are, without starts; an array closed by `}` is not kept,
        // and its starts go with it, so none is ever copied twice.)
        if self.json.as_bytes()[at] == b']' && self.stack.len() < NAMED_DEPTH && self.keep > 0 {
            let range = frame.start..at - self.removed + 1;
            let bytes = range.len();
            let small = self.found.len() >= self.keep
                && self
                    .found
                    .last()
                    .is_some_and(|(last, _, _)| last.len() >= bytes);
            if !small {
                let items = if frame.empty { 0 } else { frame.commas + 1 };
                let starts = if !(frame.array && items > 0) {
                    Vec::new()
                } else if frame.starts_from == 0 {
                    // The outermost array with starts (the bulk, usually):
                    // taken, not copied, so a huge one is held once.
                    std::mem::take(&mut self.later_starts)
                } else {
                    self.later_starts[frame.starts_from..].to_vec()
                };
                let at = self.found.partition_point(|(f, _, _)| f.len() >= bytes);
                self.found.insert(at, (range, items, starts));
                self.found.truncate(self.keep);
            }
        }
        self.later_starts.truncate(frame.starts_from);
    }

    #[inline(always)]
    fn comma(&mut self, at: usize) {
        let depth = self.stack.len();
        if let Some(top) = self.stack.last_mut() {
            top.commas += 1;
            top.expect_key = !top.array;
            // An array deeper than NAMED_DEPTH is never kept.
            if top.array && depth <= NAMED_DEPTH && self.keep > 0 {
                // Compact: the next item starts just after the comma.
                self.later_starts.push((at - self.removed + 1) as u64);
            }
        }
    }
}

impl Frame {
    fn open(open: u8, start: usize, prefix_len: usize) -> Self {
        Frame {
            array: open == b'[',
            start,
            commas: 0,
            empty: true,
            key: 0..0,
            expect_key: open == b'{',
            prefix_len,
            starts_from: 0,
        }
    }
}

/// The pointers of the containers that open at `starts` (sorted), in one
/// pass over `doc`.
fn pointers_at(doc: &str, starts: &[usize]) -> Vec<String> {
    let b = doc.as_bytes();
    let mut pointers = Vec::with_capacity(starts.len());
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < b.len() && pointers.len() < starts.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                if let Some(top) = stack.last_mut()
                    && !top.array
                    && top.expect_key
                {
                    top.key = i..end;
                    top.expect_key = false;
                }
                i = end;
                continue;
            }
            open @ (b'[' | b'{') => {
                if starts.get(pointers.len()) == Some(&i) {
                    pointers.push(pointer_of(doc, &stack));
                }
                stack.push(Frame::open(open, i, 0));
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
    pointers
}

/// The pointer of the value being scanned inside `stack`.
fn pointer_of(doc: &str, stack: &[Frame]) -> String {
    let mut pointer = String::new();
    for frame in stack {
        push_child_token(doc, frame, &mut pointer);
    }
    pointer
}

/// Appends `/` and the token of `frame`'s current child to `pointer`.
fn push_child_token(doc: &str, frame: &Frame, pointer: &mut String) {
    pointer.push('/');
    if frame.array {
        pointer.push_str(&frame.commas.to_string());
    } else {
        escape_token(&unquote(&doc[frame.key.clone()]), pointer);
    }
}

/// The text of a JSON string literal (quotes included).
fn unquote(literal: &str) -> Cow<'_, str> {
    // A text cut inside a string has no closing quote (and may end inside a
    // character): it falls to the parse below, which refuses it.
    let inner = literal
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'));
    if let Some(inner) = inner
        && !literal.contains('\\')
    {
        Cow::Borrowed(inner)
    } else {
        Cow::Owned(serde_json::from_str::<String>(literal).unwrap_or_default())
    }
}

/// Calls `visit` for every string of compact JSON `doc` (keys and values)
/// with its literal's bytes (quotes included), whether it is a key, and a
/// function that builds its JSON Pointer (the member's, for a key). Stops
/// when `visit` returns `false`.
///
/// The pointer of the container being scanned is kept as it goes (one
/// token appended when a container opens, cut when it closes): building a
/// string's pointer costs its length, not a walk of the whole nesting.
pub fn visit_strings(
    doc: &str,
    mut visit: impl FnMut(std::ops::Range<usize>, bool, &dyn Fn() -> String) -> bool,
) {
    let b = doc.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    // The pointer of the container on top of `stack`.
    let mut prefix = String::new();
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
                let pointer = || {
                    let mut pointer = prefix.clone();
                    if let Some(top) = stack.last() {
                        push_child_token(doc, top, &mut pointer);
                    }
                    pointer
                };
                if !visit(i..end, key, &pointer) {
                    return;
                }
                i = end;
                continue;
            }
            open @ (b'[' | b'{') => {
                let prefix_len = prefix.len();
                if let Some(top) = stack.last() {
                    push_child_token(doc, top, &mut prefix);
                }
                stack.push(Frame::open(open, i, prefix_len));
            }
            b']' | b'}' => {
                if let Some(frame) = stack.pop() {
                    prefix.truncate(frame.prefix_len);
                }
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

/// The end (exclusive) of the array or object whose opening bracket is at
/// `start` (whitespace anywhere), or the text's length when it does not
/// end. Assumes valid JSON; never panics on other text.
pub fn container_end(b: &[u8], start: usize) -> usize {
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
                depth = depth.saturating_sub(1);
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

/// Where some values of a document end, told without reading them: the
/// end (exclusive) of the value starting at an offset, or `None` when it
/// is not known. A document's index knows where its largest arrays and its
/// root end ([`crate::document::Document`]); a wrong answer gives
/// meaningless offsets, never a panic, as any invalid input does here.
pub type KnownEnds<'a> = &'a dyn Fn(usize) -> Option<usize>;

/// The end (exclusive) of the value starting at `start`, as `known` tells
/// it (within `b`), else scanned.
fn skip_value(b: &[u8], start: usize, known: KnownEnds<'_>) -> usize {
    match known(start) {
        Some(end) if end > start && end <= b.len() => end,
        _ => value_end(b, start),
    }
}

/// The end (exclusive) of the value starting at `start`.
fn value_end(b: &[u8], start: usize) -> usize {
    match b.get(start) {
        Some(b'"') => string_end(b, start),
        Some(b'[' | b'{') => container_end(b, start),
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

/// The members of `text`, a JSON object that is known to be valid (a
/// part of a message whose whole text was checked: [`crate::check`]), as
/// the ranges of each key (quotes included) and of its value, in order,
/// repeated keys included: what [`crate::check::object_members`] gives for
/// it, found without validating anything (strings are skipped to their
/// closing quote, containers to their closing bracket). `None` if it does
/// not begin (after whitespace) with `{`.
///
/// On text that is not valid JSON it never panics and reads each byte a
/// bounded number of times; the ranges it gives then lie within `text`, on
/// character boundaries, but mean nothing.
pub fn object_members_of_valid(text: &str) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    use crate::check::skip_space;
    let b = text.as_bytes();
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    i = skip_space(b, i + 1);
    while b.get(i) == Some(&b'"') {
        let key_end = string_end(b, i);
        // Past the colon.
        let start = skip_space(b, skip_space(b, key_end) + 1).min(b.len());
        let end = match b.get(start) {
            Some(b'"') => string_end(b, start),
            Some(b'[' | b'{') => container_end(b, start),
            // A number or a literal: up to what ends it.
            Some(_) => (start..b.len())
                .find(|&j| matches!(b[j], b',' | b'}' | b']') || is_space(b[j]))
                .unwrap_or(b.len()),
            None => start,
        };
        // Every offset here is after an ASCII byte, at a non-space byte
        // after one, or the end: a character boundary, checked anyway.
        if ![key_end, start, end]
            .iter()
            .all(|&at| text.is_char_boundary(at))
        {
            break;
        }
        members.push((i..key_end, start..end));
        i = skip_space(b, end);
        if b.get(i) != Some(&b',') {
            break;
        }
        i = skip_space(b, i + 1);
    }
    Some(members)
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

/// The start offsets of the children (items, or members if `object`) in
/// `run`: the bytes of some consecutive children of a compact container,
/// from where the first starts to where the last ends, and nothing else.
pub fn child_starts(run: &str, object: bool) -> Vec<u64> {
    let b = run.as_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i < b.len() {
        starts.push(i as u64);
        i = if object {
            value_end(b, string_end(b, i) + 1)
        } else {
            value_end(b, i)
        };
        if i >= b.len() || b[i] != b',' {
            break;
        }
        i += 1;
    }
    starts
}

/// The start offsets of the members of the compact object at `object`
/// (from `{` to `}`): member `i` (`"key":value`) spans
/// `starts[i]..starts[i + 1] - 1`; the last one ends before the closing `}`.
pub fn member_starts(doc: &str, object: Range<usize>) -> Vec<u64> {
    member_starts_knowing(doc, object, &|_| None)
}

/// [`member_starts`], skipping the values whose ends `known` tells at once
/// (an object whose bulk is one large array: its members are found
/// without reading that array).
pub fn member_starts_knowing(doc: &str, object: Range<usize>, known: KnownEnds<'_>) -> Vec<u64> {
    let b = doc.as_bytes();
    let mut starts = Vec::new();
    let mut i = object.start + 1;
    let end = object.end.saturating_sub(1);
    while i < end && b[i] == b'"' {
        starts.push(i as u64);
        // The key, its colon (compact JSON: no space), then the value.
        i = skip_value(b, string_end(b, i) + 1, known);
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

/// Why a JSON Pointer does not lead to a value. Messages quote the pointer
/// cut to a few dozen characters (it comes from a client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// Not a pointer: it must be empty or start with `/`.
    #[error(
        "`{}` is not a JSON Pointer: use \"\" for the whole document or a path such as \"/rows\" or \"/tree/0/children\"",
        quoted_cut(.0)
    )]
    Syntax(String),
    /// A `~` not followed by `0` or `1` (RFC 6901 has only `~0` and `~1`).
    #[error(
        "`{}` is not a JSON Pointer: `~` must be written `~0`, and `/` inside a key `~1` (RFC 6901)",
        quoted_cut(.0)
    )]
    Escape(String),
    /// An array index not written as RFC 6901 writes one (`+0`, `00`, ` 1`,
    /// `-1`): each item has one spelling, so that each path has one.
    #[error(
        "`{}` is not a canonical JSON Pointer: `{}` is not an array index as RFC 6901 writes one (digits only, no sign, no space, no leading zero){}",
        quoted_cut(.pointer), quoted_cut(.token), match .canonical {
            Some(canonical) => format!(": write `{}`", quoted_cut(canonical)),
            None => ": items are numbered from 0 (`/0` is the first)".to_owned(),
        }
    )]
    NotCanonical {
        /// The whole pointer.
        pointer: String,
        /// The step written wrong.
        token: String,
        /// The pointer written canonically, when the step is a number.
        canonical: Option<String>,
    },
    /// A step names a member or index that does not exist.
    #[error(
        "`{}` does not exist: `{}` is not found in the value at `{}`",
        quoted_cut(.pointer), quoted_cut(.missing), quoted_cut(.parent)
    )]
    Missing {
        /// The whole pointer.
        pointer: String,
        /// The part that exists.
        parent: String,
        /// The step that does not.
        missing: String,
    },
}

/// A JSON Pointer token as the key or index it names (`~1` → `/`, `~0` →
/// `~`); `None` when a `~` is followed by anything else.
fn unescape_strict(token: &str) -> Option<Cow<'_, str>> {
    if !token.contains('~') {
        return Some(Cow::Borrowed(token));
    }
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

/// How a token reads as an array index.
enum Index {
    /// Canonical: the index (`None` when too large to exist).
    Canonical(Option<usize>),
    /// A number written otherwise: its canonical spelling, if not negative.
    NotCanonical(Option<String>),
    /// Not a number at all.
    NotANumber,
}

/// Reads `token` as an array index: canonical only when `0` or digits
/// without a leading zero (RFC 6901).
fn array_index(token: &str) -> Index {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    if digits(token) && (token == "0" || !token.starts_with('0')) {
        return Index::Canonical(token.parse().ok());
    }
    let trimmed = token.trim();
    let (negative, unsigned) = match trimmed.as_bytes().first() {
        Some(b'+') => (false, &trimmed[1..]),
        Some(b'-') => (true, &trimmed[1..]),
        _ => (false, trimmed),
    };
    if !digits(unsigned) {
        return Index::NotANumber;
    }
    let stripped = unsigned.trim_start_matches('0');
    let canonical = if stripped.is_empty() { "0" } else { stripped };
    if negative && canonical != "0" {
        Index::NotCanonical(None)
    } else {
        Index::NotCanonical(Some(canonical.to_owned()))
    }
}

/// The bytes of the value at JSON Pointer `pointer` in compact `doc`.
///
/// Linear in `doc` and `pointer` however deep the pointer goes: each step
/// skips only the siblings before the value it names (bytes never scanned
/// again), and only the last value's end is looked for.
pub fn resolve(doc: &str, pointer: &str) -> Result<Range<usize>, PointerError> {
    resolve_knowing(doc, pointer, &|_| None)
}

/// [`resolve`], skipping the values whose ends `known` tells at once (a
/// document's index knows its largest arrays': the pointer past one of
/// them, or to one, reads none of its bytes).
pub fn resolve_knowing(
    doc: &str,
    pointer: &str,
    known: KnownEnds<'_>,
) -> Result<Range<usize>, PointerError> {
    let b = doc.as_bytes();
    if pointer.is_empty() {
        return Ok(0..skip_value(b, 0, known));
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::Syntax(pointer.to_owned()));
    };
    let mut start = 0;
    // How much of `pointer` leads to `start`.
    let mut walked = 0;
    for raw in rest.split('/') {
        let token = unescape_strict(raw).ok_or_else(|| PointerError::Escape(pointer.to_owned()))?;
        let found = match b.get(start) {
            Some(b'{') => member_start(doc, start, &token, known),
            Some(b'[') => match array_index(&token) {
                Index::Canonical(n) => n.and_then(|n| nth_item_start(b, start, n, known)),
                Index::NotCanonical(canonical) => {
                    return Err(PointerError::NotCanonical {
                        pointer: pointer.to_owned(),
                        token: token.into_owned(),
                        canonical: canonical.map(|c| {
                            format!(
                                "{}/{c}{}",
                                &pointer[..walked],
                                &pointer[walked + 1 + raw.len()..]
                            )
                        }),
                    });
                }
                Index::NotANumber => None,
            },
            _ => None,
        };
        start = found.ok_or_else(|| PointerError::Missing {
            pointer: pointer.to_owned(),
            parent: pointer[..walked].to_owned(),
            missing: token.clone().into_owned(),
        })?;
        walked += 1 + raw.len();
    }
    Ok(start..skip_value(b, start, known))
}

/// Where the value of member `name` of the object starting at `object`
/// starts.
fn member_start(doc: &str, object: usize, name: &str, known: KnownEnds<'_>) -> Option<usize> {
    let b = doc.as_bytes();
    let mut i = object + 1;
    while b.get(i) == Some(&b'"') {
        let key_end = string_end(b, i);
        let value_start = key_end + 1;
        if unquote(&doc[i..key_end]) == name {
            return Some(value_start);
        }
        let end = skip_value(b, value_start, known);
        if b.get(end) != Some(&b',') {
            return None;
        }
        i = end + 1;
    }
    None
}

/// Where item `n` of the array starting at `array` starts.
fn nth_item_start(b: &[u8], array: usize, n: usize, known: KnownEnds<'_>) -> Option<usize> {
    let mut i = array + 1;
    if matches!(b.get(i), None | Some(b']')) {
        return None;
    }
    for _ in 0..n {
        let end = skip_value(b, i, known);
        if b.get(end) != Some(&b',') {
            return None;
        }
        i = end + 1;
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_is_found_near_or_not_at_all() {
        // Between escapes: at an escape's start, just past an escaped
        // backslash, never at a `\u`.
        let text = br#"abc\ndef\\\\x\u00e9y\"z"#;
        assert_eq!(cut_near(text, 0), Some(3));
        assert_eq!(cut_near(text, 4), Some(8));
        assert_eq!(cut_near(text, 11), Some(12));
        assert_eq!(cut_near(text, 13), Some(20));
        assert_eq!(cut_near(text, 21), None);
        // Nothing within the window: no cut, however far the text goes on.
        let plain = [b"x".repeat(CUT_WINDOW + 10), br#"\n"#.to_vec()].concat();
        assert_eq!(cut_near(&plain, 0), None);
        assert_eq!(cut_near(&plain, 20), Some(CUT_WINDOW + 10));
        // Inside a run of backslashes longer than the window: its parity
        // is not looked for.
        let run = [b"x".to_vec(), b"\\".repeat(3 * CUT_WINDOW), b"y".to_vec()].concat();
        assert_eq!(cut_near(&run, 2 * CUT_WINDOW), None);
        assert_eq!(cut_near(&run, 1), Some(1));
        assert_eq!(cut_near(&run, 2), Some(3));
    }

    #[test]
    fn a_second_part_starts_near_the_middle_of_a_long_rest_only() {
        let text = br#"ab\"cd"#.repeat(100_000);
        // 600 KB left: cut near the middle, where an escape starts.
        let cut = second_part_at(&text, 0).unwrap();
        assert!((300_000..300_006).contains(&cut), "{cut}");
        assert_eq!(text[cut], b'\\');
        // 256 KB or less left, or none: read on one thread.
        let near_end = text.len() - crate::limits::BLOCKING_BYTES;
        assert_eq!(second_part_at(&text, near_end), None);
        assert!(second_part_at(&text, near_end - 1).is_some());
        assert_eq!(second_part_at(&text, text.len() + 1), None);
    }

    #[test]
    fn minify_keeps_strings_and_borrows_compact_text() {
        let pretty = "{\n  \"a b\": [1, 2,\t3],\n  \"s\": \"x \\\" y\\\\\"\n}\n";
        assert_eq!(minify(pretty), r#"{"a b":[1,2,3],"s":"x \" y\\"}"#);
        assert!(matches!(minify(r#"{"a":1}"#), Cow::Borrowed(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// The one pass gives what minifying and then scanning the compact
        /// text gives, on JSON with whitespace anywhere (and on any text).
        #[test]
        fn minifying_and_finding_arrays_at_once_is_minifying_then_finding_them(
            text in "[\\[\\]{}\":, \n\t\\\\a1é]{0,160}",
            keep in 1usize..4,
        ) {
            let (compact, arrays) = minified_with_largest_arrays(&text, keep);
            proptest::prop_assert_eq!(&compact, &minify(&text));
            let (again, scanned) = minified_with_largest_arrays(&compact, keep);
            proptest::prop_assert!(matches!(again, Cow::Borrowed(_)));
            proptest::prop_assert_eq!(&arrays, &scanned);
            // With the item starts: the same arrays, a start per item, each
            // inside its array (on any text; tests/fuzz/scan.rs checks them
            // against `item_starts` on valid JSON).
            let (indexed, with_starts) = minified_and_indexed(&text, keep);
            proptest::prop_assert_eq!(&indexed, &compact);
            for ((span, starts), plain) in with_starts.iter().zip(&arrays) {
                proptest::prop_assert_eq!(span, plain);
                // (`[` closed by `}`, or `{` by `]`, in invalid text:
                // no starts for what opened as an object.)
                let array = compact.as_bytes()[span.range.start] == b'[';
                proptest::prop_assert_eq!(starts.len(), if array { span.items } else { 0 });
                proptest::prop_assert!(starts.iter().all(|&s| span.range.contains(&(s as usize))));
            }
            proptest::prop_assert_eq!(with_starts.len(), arrays.len());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// The word-at-a-time search finds what a byte-by-byte one does,
        /// from every offset (runs around the 8-byte words and the 32 bytes
        /// looked at before `memchr2`; any byte beside the two it seeks).
        #[test]
        fn quotes_and_backslashes_are_found_as_a_byte_scan_finds_them(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    8 => proptest::prelude::Just(b'a'),
                    1 => proptest::prelude::Just(b'"'),
                    1 => proptest::prelude::Just(b'\\'),
                    1 => proptest::prelude::any::<u8>(),
                ],
                0..120,
            ),
        ) {
            for from in 0..=bytes.len() + 2 {
                let scanned = bytes
                    .iter()
                    .enumerate()
                    .skip(from)
                    .find(|(_, c)| matches!(c, b'"' | b'\\'))
                    .map(|(i, _)| i);
                proptest::prop_assert_eq!(quote_or_backslash(&bytes, from), scanned, "from {}", from);
            }
        }
    }

    #[test]
    fn arrays_found_in_pretty_json_are_those_of_its_compact_text() {
        let pretty = "[ [ ], {\n  \"rows\" : [ 1 ,\t2 , [ 3 ] ] } , \" [ \" ]";
        let (compact, arrays) = minified_with_largest_arrays(pretty, 3);
        assert_eq!(compact, r#"[[],{"rows":[1,2,[3]]}," [ "]"#);
        let found: Vec<_> = arrays
            .iter()
            .map(|a| (a.pointer.as_str(), &compact[a.range.clone()], a.items))
            .collect();
        assert_eq!(
            found,
            [
                ("", &compact[..], 3),
                ("/1/rows", "[1,2,[3]]", 3),
                ("/1/rows/2", "[3]", 1),
            ]
        );
        assert_eq!(largest_arrays(&compact, 3), arrays);
        assert!(largest_arrays(&compact, 0).is_empty());
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
            Err(PointerError::NotCanonical { .. })
        ));
        assert!(matches!(at("a"), Err(PointerError::Syntax(_))));
    }

    #[test]
    fn array_indexes_have_one_spelling() {
        let doc = r#"{"a":[10,[20,21]],"~2":1}"#;
        let at = |p: &str| resolve(doc, p).map(|r| &doc[r]);
        assert_eq!(at("/a/1/1"), Ok("21"));
        let canonical = |p: &str| match resolve(doc, p) {
            Err(PointerError::NotCanonical { canonical, .. }) => canonical,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(canonical("/a/+0").as_deref(), Some("/a/0"));
        assert_eq!(canonical("/a/00").as_deref(), Some("/a/0"));
        // The first step written wrong is named (what follows is not
        // known to be an array yet).
        assert_eq!(canonical("/a/ 1/01").as_deref(), Some("/a/1/01"));
        assert_eq!(canonical("/a/1/+01").as_deref(), Some("/a/1/1"));
        assert_eq!(canonical("/a/-1"), None);
        let message = resolve(doc, "/a/+0").unwrap_err().to_string();
        assert!(message.contains("write `/a/0`"), "{message}");
        // Not a number: simply not there; `-` (past the end) neither.
        assert!(matches!(at("/a/x"), Err(PointerError::Missing { .. })));
        assert!(matches!(at("/a/-"), Err(PointerError::Missing { .. })));
        // `~` escapes only `~` and `/`: `~2` is no spelling of the key `~2`.
        assert!(matches!(at("/~2"), Err(PointerError::Escape(_))));
        assert_eq!(at("/~02"), Ok("1"));
    }

    #[test]
    fn pointer_errors_quote_a_long_pointer_cut() {
        let pointer = format!("/{}", "x".repeat(1 << 20));
        let message = resolve("{}", &pointer).unwrap_err().to_string();
        assert!(message.len() < 400, "{}", message.len());
        assert!(message.contains("(1,048,577 bytes)"), "{message}");
    }

    /// `[[[…]]]`, `depth` arrays deep around `inner`.
    fn nested(depth: usize, inner: &str) -> String {
        format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn deep_nesting_is_scanned_in_one_pass() {
        // 1 MB of nesting: every array is larger than the one inside it,
        // so each would be kept in turn. Quadratic pointer building took
        // over a minute for 200 KB.
        let doc = nested(500_000, r#""leaf""#);
        let found = largest_arrays(&doc, 12);
        assert_eq!(found.len(), 12);
        assert_eq!(found[0].pointer, "");
        assert_eq!(found[1].pointer, "/0");
        assert_eq!(found[11].pointer, "/0".repeat(11));
        // Only arrays up to the naming depth are named.
        let deepest = largest_arrays(&nested(NAMED_DEPTH + 10, "1"), 1000);
        assert_eq!(deepest.len(), NAMED_DEPTH);
        assert_eq!(
            deepest.last().unwrap().pointer,
            "/0".repeat(NAMED_DEPTH - 1)
        );
        // Every string's pointer, however deep: built as the scan goes.
        let doc = nested(100_000, &vec![r#""s""#; 1000].join(","));
        let mut strings = 0;
        let mut last = String::new();
        visit_strings(&doc, |_, _, pointer| {
            strings += 1;
            last = pointer();
            true
        });
        assert_eq!(strings, 1000);
        assert_eq!(last, format!("{}/999", "/0".repeat(99_999)));
        // A pointer as deep as the document resolves in one pass too.
        let deep = "/0".repeat(499_999);
        let doc = nested(500_000, r#""leaf""#);
        assert_eq!(&doc[resolve(&doc, &deep).unwrap()], r#"["leaf"]"#);
    }
}
