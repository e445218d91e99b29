//! Walks JSON text that the envelope parse has already checked: the members
//! of an object, the items of an array, and a string's text, found by byte
//! scans instead of a second parse.
//!
//! [`Message::parse`](super::Message::parse) checks a whole message against
//! JSON's grammar once. Reading a tool's result out of it again with
//! `serde_json` checked the same bytes again, twice for a text block (once
//! to skip it as a raw value, once to unescape it): a 1 MB result that is
//! JSON inside a text block (an escape every few bytes) cost ~33 M
//! instructions that way. Here the result is walked once: a value is
//! skipped by finding its end (a string's closing quote with
//! [`quote_or_backslash`], brackets counted outside strings), a value read is walked into where it
//! lies, and a wanted string is unescaped while its end is found.
//!
//! The text is assumed to be valid JSON. On text that is not, nothing here
//! panics or loops: the answers are only meaningless, or `None` where an
//! escape cannot be read.

use std::borrow::Cow;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::scan::string_end;
use sluice_core::limits::ALONE_BYTES;
use sluice_core::scan::{first_flagged, quote_or_backslash, second_part_at, string_stops, word_at};

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// The first index at or after `i` that is not JSON whitespace.
fn skip_space(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|&c| is_space(c)) {
        i += 1;
    }
    i
}

/// The index just past the value that starts at `start` (no whitespace
/// before it): a string's closing quote, a container's closing bracket, or
/// the end of a number or literal.
fn value_end(b: &[u8], start: usize) -> usize {
    match b.get(start) {
        Some(b'"') => string_end(b, start).unwrap_or(b.len()),
        Some(b'[' | b'{') => sluice_core::scan::container_end(b, start),
        Some(_) => {
            let mut i = start;
            while b
                .get(i)
                .is_some_and(|&c| !matches!(c, b',' | b']' | b'}') && !is_space(c))
            {
                i += 1;
            }
            i.max(start + 1).min(b.len())
        }
        None => b.len(),
    }
}

/// A walk into the object `text` (its whole text, `{` to `}`), at its
/// first member; `None` when `text` is not an object.
pub fn members(text: &str) -> Option<Walker<'_>> {
    members_kept(text, Kept::NONE)
}

/// [`members`], the strings `kept` unescaped while `text` was checked
/// taken where the walk reads them ([`Walker::string`]) instead of
/// unescaped again.
pub fn members_kept<'a>(text: &'a str, kept: Kept<'a>) -> Option<Walker<'a>> {
    let mut walker = Walker {
        text,
        at: 0,
        done: false,
        kept,
    };
    walker.enter(b'{').then_some(walker)
}

/// The long strings of a message unescaped while its envelope was checked
/// ([`Keeping`]): each by where its opening quote and its end are in the
/// message's text, with its text. A string is taken once, by the walk that
/// reads it; a walk that finds none unescapes from the bytes as ever.
/// Kept in the order of the text (the check reads it from the start), so
/// a string is found by a binary search: a message of thousands of long
/// strings costs no quadratic lookup.
#[derive(Debug, Default)]
pub struct KeptTexts(Mutex<Vec<(usize, usize, Option<String>)>>);

impl KeptTexts {
    /// The text of the string whose opening quote is at `quote`, and the
    /// index just past it, if it was kept and not taken yet.
    fn take(&self, quote: usize) -> Option<(usize, String)> {
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let at = kept.binary_search_by_key(&quote, |(q, _, _)| *q).ok()?;
        let (_, end, text) = &mut kept[at];
        Some((*end, text.take()?))
    }

    /// How many bytes of text are kept (not taken yet).
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter()
            .flat_map(|(_, _, text)| text.as_ref())
            .map(String::len)
            .sum()
    }
}

/// The kept texts of the message a walked text is part of, and where that
/// text starts in it; [`Kept::NONE`] for none.
#[derive(Debug, Clone, Copy)]
pub struct Kept<'a> {
    texts: Option<&'a KeptTexts>,
    base: usize,
}

impl<'a> Kept<'a> {
    /// No kept texts.
    pub const NONE: Kept<'static> = Kept {
        texts: None,
        base: 0,
    };

    /// The texts kept of a message whose walked part starts at `base`.
    pub fn of(texts: Option<&'a KeptTexts>, base: usize) -> Self {
        Self { texts, base }
    }

    /// The string whose opening quote is at `quote` in the walked text:
    /// the index just past it there, and its text.
    fn take(&self, quote: usize) -> Option<(usize, String)> {
        let (end, text) = self.texts?.take(self.base + quote)?;
        Some((end.checked_sub(self.base)?, text))
    }
}

/// What the envelope check is told to do with a long string
/// ([`sluice_core::check::Structure::long_string`]): unescape it, which
/// checks it as well, and keep its text. A large result's text block is
/// then read once (~13 instructions a byte for JSON held in it) where a
/// check (~8) and then the unescape read it twice.
#[derive(Debug, Default)]
pub struct Keeping {
    /// Each kept string's quote, end and text.
    pub(crate) kept: Vec<(usize, usize, String)>,
}

impl sluice_core::check::Structure for Keeping {
    fn long_string(&mut self, b: &[u8], quote: usize, _at: usize) -> Option<usize> {
        let (end, text) = checked_unescape(b, quote)?;
        if let Some(text) = text {
            self.kept.push((quote, end, text));
        }
        Some(end)
    }
}

impl Keeping {
    /// What was kept, to go with the message.
    pub fn into_texts(self) -> Option<KeptTexts> {
        if self.kept.is_empty() {
            return None;
        }
        debug_assert!(self.kept.windows(2).all(|pair| pair[0].1 <= pair[1].0));
        let kept = self.kept.into_iter();
        let kept = kept.map(|(quote, end, text)| (quote, end, Some(text)));
        Some(KeptTexts(Mutex::new(kept.collect())))
    }
}

/// A walk through JSON text, one value after another, in one pass: into
/// objects and arrays ([`Walker::enter`]), from member to member
/// ([`Walker::key`]) or item to item ([`Walker::item`]), over a value
/// ([`Walker::value`]) or through a string ([`Walker::string`]). A value
/// walked into is not also skipped: a content block is read where it lies,
/// inside the content array, inside the result.
#[derive(Debug, Clone)]
pub struct Walker<'a> {
    text: &'a str,
    /// Where the walk is.
    at: usize,
    /// Set on text that is not JSON: the walk ends.
    done: bool,
    /// Strings unescaped already.
    kept: Kept<'a>,
}

impl<'a> Walker<'a> {
    /// Where the walk is: after [`Walker::key`], where the member's value
    /// starts; after [`Walker::item`], where the item starts; after either
    /// found the end, just past the closing bracket.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The first byte of the value at the position.
    pub fn peek(&self) -> Option<u8> {
        let b = self.text.as_bytes();
        b.get(skip_space(b, self.at)).copied()
    }

    /// Moves into the object or array (`open` is `{` or `[`) at the
    /// position; `false`, without moving, when another value is there.
    pub fn enter(&mut self, open: u8) -> bool {
        let b = self.text.as_bytes();
        let i = skip_space(b, self.at);
        if self.done || b.get(i) != Some(&open) {
            return false;
        }
        self.at = i + 1;
        true
    }

    /// The next member's key literal (quotes included, as sent) of the
    /// object walked into, the position then at its value, which the
    /// caller reads or skips next; `None` past the closing brace.
    pub fn key(&mut self) -> Option<&'a str> {
        if self.done {
            return None;
        }
        let b = self.text.as_bytes();
        let i = self.after_comma();
        if b.get(i) == Some(&b'}') {
            self.at = i + 1;
            return None;
        }
        let colon = match b.get(i) {
            Some(b'"') => string_end(b, i).map(|end| (end, skip_space(b, end))),
            _ => None,
        };
        let Some((key_end, colon)) = colon.filter(|&(_, colon)| b.get(colon) == Some(&b':')) else {
            self.done = true;
            return None;
        };
        self.at = skip_space(b, colon + 1);
        self.text.get(i..key_end)
    }

    /// The next member of the object walked into whose key is one of
    /// `wanted` (literals, quotes included, without escapes; a key sent
    /// with escapes is compared as the key it spells): its index there,
    /// the position then at its value; members not wanted are skipped.
    /// `Some(Err(Repeated))` when a wanted key comes a second time (`seen`
    /// keeps which came); `None` past the closing brace.
    pub fn wanted(
        &mut self,
        wanted: &[&str],
        seen: &mut [bool],
    ) -> Option<Result<usize, Repeated>> {
        loop {
            let literal = self.key()?;
            // A key spelled with escapes (`"\u0063ontent"`) is the key it
            // spells, as any JSON reader takes it: else an upstream could
            // hide its content from the budget that way.
            let key = match literal.contains('\\') {
                false => Cow::Borrowed(literal),
                true => match string_at(literal, 0) {
                    Some((_, key)) => Cow::Owned(format!("\"{key}\"")),
                    None => Cow::Borrowed(literal),
                },
            };
            let Some(i) = wanted.iter().position(|w| *w == key) else {
                self.value();
                continue;
            };
            let twice = seen.get_mut(i).map(|seen| std::mem::replace(seen, true));
            return Some(if twice == Some(true) {
                Err(Repeated)
            } else {
                Ok(i)
            });
        }
    }

    /// Moves to the next item of the array walked into: `true` when there
    /// is one (the position then at it, which the caller reads or skips
    /// next), `false` past the closing bracket.
    pub fn item(&mut self) -> bool {
        if self.done {
            return false;
        }
        let b = self.text.as_bytes();
        let i = self.after_comma();
        match b.get(i) {
            Some(b']') => {
                self.at = i + 1;
                false
            }
            None => {
                self.done = true;
                false
            }
            Some(_) => {
                self.at = i;
                true
            }
        }
    }

    /// Where the next member or item (or the closing bracket) starts: past
    /// whitespace, the comma after the last one, and whitespace again.
    fn after_comma(&self) -> usize {
        let b = self.text.as_bytes();
        let i = skip_space(b, self.at);
        match b.get(i) {
            Some(b',') => skip_space(b, i + 1),
            _ => i,
        }
    }

    /// The text of the value at the position, which the walk moves past.
    pub fn value(&mut self) -> &'a str {
        let b = self.text.as_bytes();
        let start = skip_space(b, self.at);
        let end = value_end(b, start);
        self.at = end;
        self.text.get(start..end).unwrap_or_default()
    }

    /// The value at the position, read as a string (unescaped, in the same
    /// pass that finds its end), which the walk moves past; `None` when it
    /// is a string with an escape that cannot be read.
    pub fn string(&mut self) -> Option<StringValue<'a>> {
        if self.peek() != Some(b'"') {
            return Some(match self.value() {
                "null" => StringValue::Null,
                _ => StringValue::Other,
            });
        }
        let quote = skip_space(self.text.as_bytes(), self.at);
        let (end, text) = match self.kept.take(quote) {
            Some((end, text)) => (end, Cow::Owned(text)),
            None => string_at(self.text, quote)?,
        };
        self.at = end;
        Some(StringValue::Text(text))
    }
}

/// A wanted member came twice ([`Walker::wanted`]): which one counts is
/// unclear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated;

/// A value read as a string ([`Walker::string`]).
#[derive(Debug, PartialEq, Eq)]
pub enum StringValue<'a> {
    /// A string, unescaped.
    Text(Cow<'a, str>),
    /// `null`.
    Null,
    /// Any other value (skipped).
    Other,
}

/// The string whose opening quote is at `quote` in `text`: the index just
/// past its closing quote, and its text unescaped (borrowed when it has no
/// escape), found in one pass. A lone UTF-16 surrogate escape (`\ud800`,
/// which JavaScript writes for half a pair) reads as U+FFFD, as no Rust
/// string can hold it. `None` for an escape that cannot be read, or a
/// string that does not end.
///
/// A string still going after [`ALONE_BYTES`], in a text with more than
/// 256 KB left (a large result's text block, JSON inside it with an escape
/// every few bytes), is unescaped in two parts at once: the rest of the
/// text is cut in the middle, where an escape starts
/// ([`second_part_at`]), and a
/// second thread unescapes from there to the closing quote while this one
/// reaches the cut. If the string ends before the cut, the second thread's
/// work (on what follows the string) is stopped and dropped: it never does
/// more than this one.
pub fn string_at(text: &str, quote: usize) -> Option<(usize, Cow<'_, str>)> {
    let b = text.as_bytes();
    let start = quote + 1;
    let at = quote_or_backslash(b, start)?;
    if b[at] == b'"' {
        return Some((at + 1, Cow::Borrowed(text.get(start..at)?)));
    }
    unescaped_from(b, start, at).map(|(end, text)| (end, Cow::Owned(text)))
}

/// [`string_at`] of a string not yet checked, in bytes known to be UTF-8:
/// `None` also for a control character in it (which JSON's grammar
/// refuses, as [`sluice_core::check`] does); the text `None` when it has
/// no escape (it is the bytes as they are).
pub fn checked_unescape(b: &[u8], quote: usize) -> Option<(usize, Option<String>)> {
    let start = quote + 1;
    let at = quote_or_backslash(b, start)?;
    if has_control(&b[start..at]) {
        return None;
    }
    if b[at] == b'"' {
        return Some((at + 1, None));
    }
    unescaped_from(b, start, at).map(|(end, text)| (end, Some(text)))
}

/// Whether `run` holds a control character (below 0x20). Counted, not
/// searched for, so that it vectorizes.
fn has_control(run: &[u8]) -> bool {
    run.iter().filter(|&&c| c < 0x20).count() > 0
}

/// The string whose text starts at `start` unescaped, its first escape at
/// `at`: the index just past its closing quote, and its text.
fn unescaped_from(b: &[u8], start: usize, at: usize) -> Option<(usize, String)> {
    let mut out = Vec::with_capacity((at - start) * 2 + 64);
    out.extend_from_slice(&b[start..at]);
    let i = match unescape(b, at, at + ALONE_BYTES, &mut out, None)? {
        Unescaped::Ended(end) => return Some((end, String::from_utf8(out).ok()?)),
        Unescaped::Paused(i) => i,
    };
    match second_part_at(b, i) {
        Some(cut) => in_two_parts(b, i, cut, out),
        None => read_on(b, i, out),
    }
}

/// The rest of a string unescaped from `i` (between escapes) after `out`:
/// the index just past its closing quote, and its whole text.
fn read_on(b: &[u8], i: usize, mut out: Vec<u8>) -> Option<(usize, String)> {
    match unescape(b, i, usize::MAX, &mut out, None)? {
        Unescaped::Ended(end) => Some((end, String::from_utf8(out).ok()?)),
        Unescaped::Paused(_) => None,
    }
}

/// [`read_on`], the part from `cut` on unescaped on a second thread.
/// Wherever `cut` is, the answer is the one-thread reading's: the second
/// part counts only if the first stops exactly at the cut, between
/// escapes; if it does not (the string ended before it, or the cut is not
/// between escapes), the second thread is stopped and its work dropped.
fn in_two_parts(b: &[u8], i: usize, cut: usize, mut out: Vec<u8>) -> Option<(usize, String)> {
    // Room for the rest of the string at once (unescaped, a text is never
    // longer than as sent), and for the second part's from the cut: no
    // part is copied into a larger buffer as it grows, the second joins
    // the first without moving it, and each thread touches the fresh pages
    // it fills while the other works (a megabyte's were touched after
    // both, in the copies: 0.2-0.3 ms of the 1.9 ms this took). What a
    // string that ends early leaves unused is given back ([`fitted`]).
    out.reserve(b.len() - i);
    let stop = AtomicBool::new(false);
    let (first, second) = sluice_core::parallel::both(
        true,
        || {
            let first = unescape(b, i, cut, &mut out, None);
            if !matches!(first, Some(Unescaped::Paused(at)) if at == cut) {
                stop.store(true, Ordering::Relaxed);
            }
            // Each thread checks its own part's UTF-8.
            first.map(|step| (step, String::from_utf8(std::mem::take(&mut out))))
        },
        || {
            let mut rest = Vec::with_capacity(b.len() - cut);
            let step = unescape(b, cut, usize::MAX, &mut rest, Some(&stop))?;
            Some((step, String::from_utf8(rest)))
        },
    );
    match first? {
        (Unescaped::Ended(end), head) => Some((end, fitted(head.ok()?))),
        (Unescaped::Paused(at), head) if at == cut => {
            let (Unescaped::Ended(end), tail) = second? else {
                return None;
            };
            match (head, tail) {
                (Ok(mut head), Ok(tail)) => {
                    head.push_str(&tail);
                    Some((end, head))
                }
                // A cut inside a character: the parts' bytes are the
                // whole's all the same.
                (head, tail) => {
                    let mut bytes = bytes_of(head);
                    bytes.extend_from_slice(&bytes_of(tail));
                    Some((end, String::from_utf8(bytes).ok()?))
                }
            }
        }
        (Unescaped::Paused(at), head) => {
            read_on(b, at, bytes_of(head)).map(|(end, text)| (end, fitted(text)))
        }
    }
}

/// `text` in no more room than twice its length: a string that ended long
/// before the text it was read from gives back the room reserved for the
/// rest (copying only itself, which is short beside it).
fn fitted(mut text: String) -> String {
    if text.capacity() / 2 > text.len() {
        text.shrink_to_fit();
    }
    text
}

/// The bytes a UTF-8 check was given back.
fn bytes_of(checked: Result<String, std::string::FromUtf8Error>) -> Vec<u8> {
    checked.map_or_else(|e| e.into_bytes(), String::into_bytes)
}

/// Where [`unescape`] got to.
enum Unescaped {
    /// The closing quote: the index just past it.
    Ended(usize),
    /// Where it paused, at or past where it was told to, between escapes:
    /// everything before it is in the output.
    Paused(usize),
}

/// Unescapes a string's text into `out` from `i` (not inside an escape)
/// to the closing quote, pausing at the first place between escapes at or
/// past `pause`. `None` for an escape that cannot be read or a string that
/// does not end, or when `stop` is set.
///
/// JSON held in a text block has an escape every few bytes, so the plain
/// runs between them are short: eight bytes are read as one word, and
/// copied whole to `out` (the bytes past the first `"` or `\` are taken
/// back), where copying each run on its own cost a call per escape. A run
/// longer than a word is found and copied as one.
fn unescape(
    b: &[u8],
    mut i: usize,
    pause: usize,
    out: &mut Vec<u8>,
    stop: Option<&AtomicBool>,
) -> Option<Unescaped> {
    // Bytes, not a `String`: what is copied between escapes ends before an
    // ASCII `"` or `\`, so it is whole characters, and what an escape stands
    // for is pushed encoded; one check of the whole at the end.
    let words_until = pause.min(b.len());
    loop {
        // The plain run up to the next stop (or the pause, or the end).
        if let Some(word) = word_at(b, i).filter(|_| i + 8 <= words_until) {
            let stops = string_stops(word);
            out.extend_from_slice(&word.to_le_bytes());
            if stops != 0 {
                let plain = first_flagged(stops);
                out.truncate(out.len() - 8 + plain);
                i += plain;
            } else {
                // A longer run (prose with a `\n` now and then): found by
                // `memchr2` and copied at once.
                i += 8;
                let run_end = plain_run_end(b, i, words_until)?;
                out.extend_from_slice(&b[i..run_end]);
                i = run_end;
            }
        }
        if i >= pause {
            return Some(Unescaped::Paused(i));
        }
        match *b.get(i)? {
            b'"' => return Some(Unescaped::Ended(i + 1)),
            b'\\' => {
                match b.get(i + 1) {
                    // The escapes of JSON held in a text block, pushed as
                    // they are.
                    Some(&c @ (b'"' | b'\\' | b'/')) => {
                        out.push(c);
                        i += 2;
                    }
                    _ => {
                        let (c, len) = escape_at(b, i)?;
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        i += len;
                    }
                }
                if stop.is_some_and(|stop| stop.load(Ordering::Relaxed)) {
                    return None;
                }
            }
            // A control character, which a string must escape.
            c if c < 0x20 => return None,
            // Fewer than eight bytes before the pause or the end.
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
}

/// Where the run of a string's plain characters from `i` ends: at the
/// next `"` or `\`, or at `until`; `None` if a control character (which a
/// string must escape) comes first. Its first 64 bytes are looked at eight
/// at a time (JSON held in a text block has short runs), the rest found by
/// `memchr2` and then counted for control characters (prose's long runs),
/// each of which vectorizes.
fn plain_run_end(b: &[u8], mut i: usize, until: usize) -> Option<usize> {
    let words_end = until.min(i.saturating_add(64));
    while i + 8 <= words_end {
        let word = word_at(b, i)?;
        let stops = string_stops(word);
        if stops != 0 {
            let at = i + first_flagged(stops);
            return (b[at] >= 0x20).then_some(at);
        }
        i += 8;
    }
    let run_end = quote_or_backslash(b, i).map_or(until, |stop| stop.min(until));
    (!has_control(&b[i..run_end])).then_some(run_end)
}

/// The character the escape at `at` (its backslash) stands for, and the
/// escape's length in bytes.
fn escape_at(b: &[u8], at: usize) -> Option<(char, usize)> {
    let c = match *b.get(at + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex4(b, at + 2)?;
            if (0xD800..0xDC00).contains(&unit)
                && b.get(at + 6..at + 8) == Some(b"\\u")
                && let Some(low) = hex4(b, at + 8).filter(|low| (0xDC00..0xE000).contains(low))
            {
                let c = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                return Some((char::from_u32(c)?, 12));
            }
            return Some((char::from_u32(unit).unwrap_or('\u{FFFD}'), 6));
        }
        _ => return None,
    };
    Some((c, 2))
}

/// The four hex digits at `at`, as a number.
fn hex4(b: &[u8], at: usize) -> Option<u32> {
    let digits = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
    if !digits.bytes().all(|d| d.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each member's key and value, walked over.
    fn pairs(text: &str) -> Vec<(&str, &str)> {
        let mut walker = members(text).unwrap();
        let mut pairs = Vec::new();
        while let Some(key) = walker.key() {
            pairs.push((key, walker.value()));
        }
        pairs
    }

    /// Each item, walked over.
    fn items(text: &str) -> Option<Vec<&str>> {
        let mut walker = Walker {
            text,
            at: 0,
            done: false,
            kept: Kept::NONE,
        };
        if !walker.enter(b'[') {
            return None;
        }
        let mut items = Vec::new();
        while walker.item() {
            items.push(walker.value());
        }
        Some(items)
    }

    #[test]
    fn members_and_items_are_found_with_any_whitespace_and_kept_as_sent() {
        let text = " { \"a\" : [ 1.50 , {\"b\":\"]}\\\"\"} , -0 ] ,\n\"c\":true,\"d\" :null , \"e\":\"x\" } ";
        let found = pairs(text);
        assert_eq!(
            found,
            [
                ("\"a\"", "[ 1.50 , {\"b\":\"]}\\\"\"} , -0 ]"),
                ("\"c\"", "true"),
                ("\"d\"", "null"),
                ("\"e\"", "\"x\""),
            ]
        );
        let inner = items(found[0].1).unwrap();
        assert_eq!(inner, ["1.50", "{\"b\":\"]}\\\"\"}", "-0"]);
        assert_eq!(items("[ ]").unwrap().len(), 0);
        assert_eq!(pairs("{}").len(), 0);
        assert!(members("[1]").is_none() && items("{}").is_none());
    }

    #[test]
    fn a_value_walked_into_is_read_in_place_and_the_walk_goes_on_after_it() {
        let text = r#"{"content" : [ {"type":"text","text":"a\"b"} , {"n":[1]} ], "k":"v"}"#;
        let mut walker = members(text).unwrap();
        assert_eq!(walker.key(), Some("\"content\""));
        let start = walker.position();
        assert!(walker.enter(b'['));
        let mut blocks = Vec::new();
        while walker.item() {
            let at = walker.position();
            assert!(walker.enter(b'{'));
            let mut keys = Vec::new();
            while let Some(key) = walker.key() {
                keys.push(key);
                let _ = walker.string();
            }
            blocks.push((&text[at..walker.position()], keys));
        }
        assert_eq!(
            &text[start..walker.position()],
            r#"[ {"type":"text","text":"a\"b"} , {"n":[1]} ]"#
        );
        assert_eq!(
            blocks[0],
            (
                r#"{"type":"text","text":"a\"b"}"#,
                vec!["\"type\"", "\"text\""]
            )
        );
        assert_eq!(blocks[1], (r#"{"n":[1]}"#, vec!["\"n\""]));
        assert_eq!(walker.key(), Some("\"k\""));
        assert_eq!(walker.value(), "\"v\"");
        assert_eq!(walker.key(), None);
    }

    #[test]
    fn a_string_is_unescaped_as_serde_json_reads_it_and_borrowed_without_escapes() {
        for literal in [
            r#""plain héllo""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""caf\u00e9 \ud83d\ude00 \u0000""#,
            r#""\\u00e9 is not an escape""#,
        ] {
            let (end, text) = string_at(literal, 0).unwrap();
            assert_eq!(end, literal.len());
            assert_eq!(text, serde_json::from_str::<String>(literal).unwrap());
        }
        assert!(matches!(
            string_at(r#""plain" tail"#, 0),
            Some((7, Cow::Borrowed("plain")))
        ));
        // Half a pair reads as U+FFFD, whatever follows it.
        for (literal, read) in [
            (r#""a\ud800b""#, "a\u{FFFD}b"),
            (r#""\udc00\ud83d""#, "\u{FFFD}\u{FFFD}"),
            (r#""\ud800\u0041""#, "\u{FFFD}A"),
        ] {
            assert_eq!(string_at(literal, 0).unwrap().1, read);
        }
        // An escape that cannot be read, or no end.
        for bad in [r#""\u12""#, r#""\x""#, r#""open"#, r#""\"#] {
            assert!(string_at(bad, 0).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_members_string_value_is_read_and_any_other_value_skipped() {
        let mut m = members(r#"{"t":"a\nb","n":[1,"x"],"z":null,"k":"v"}"#).unwrap();
        assert_eq!(m.key(), Some("\"t\""));
        assert_eq!(
            m.string(),
            Some(StringValue::Text(Cow::Owned("a\nb".to_owned())))
        );
        assert_eq!(m.key(), Some("\"n\""));
        assert_eq!(m.string(), Some(StringValue::Other));
        assert_eq!(m.key(), Some("\"z\""));
        assert_eq!(m.string(), Some(StringValue::Null));
        assert_eq!(m.key(), Some("\"k\""));
        assert_eq!(m.value(), "\"v\"");
        assert_eq!(m.key(), None);
    }

    /// The one-thread reading of the string at `quote`, to hold the
    /// two-part one to.
    fn unescaped_alone(text: &str, quote: usize) -> Option<(usize, String)> {
        let b = text.as_bytes();
        let mut out = Vec::new();
        match unescape(b, quote + 1, usize::MAX, &mut out, None)? {
            Unescaped::Ended(end) => Some((end, String::from_utf8(out).ok()?)),
            Unescaped::Paused(_) => None,
        }
    }

    #[test]
    fn a_string_is_read_in_two_parts_as_in_one_wherever_it_is_cut() {
        // Every cut, between escapes or not (inside one, inside a
        // character), of valid and broken strings.
        for text in sluice_core::scan::strings_to_cut::short() {
            let alone = unescaped_alone(&text, 0);
            for cut in 1..=text.len() {
                let two = in_two_parts(text.as_bytes(), 1, cut, Vec::new());
                assert_eq!(two, alone, "{text:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn a_long_string_is_read_in_two_parts_as_in_one_wherever_the_cut_falls() {
        for (text, tail) in sluice_core::scan::strings_to_cut::long() {
            let (end, read) = string_at(&text, 0).unwrap();
            let alone = unescaped_alone(&text, 0).unwrap();
            assert_eq!(
                (end, read.as_ref()),
                (alone.0, alone.1.as_str()),
                "{}",
                text.len()
            );
            assert_eq!(end, text.len() - tail.len());
        }
        // Without lone surrogates, what serde_json reads.
        let body = r#"{\"id\":\"SKU-1\",\"n\":\"a\\\\b\\u00e9\"},"#.repeat(40_000);
        let text = format!("\"[{body}]\"");
        let (_, read) = string_at(&text, 0).unwrap();
        assert_eq!(read, serde_json::from_str::<String>(&text).unwrap());
    }

    #[test]
    fn a_long_string_that_ends_before_the_cut_or_is_broken_is_read_as_in_one() {
        // Ends after 100 KB, in a text of 1 MB: the second part, past the
        // string's end, is dropped.
        let long = r#"x\\\"y"#.repeat(20_000);
        let after = r#","k":"v\"w","#.repeat(100_000);
        let text = format!("\"{long}\"{after}");
        let (end, read) = string_at(&text, 0).unwrap();
        assert_eq!(end, long.len() + 2);
        assert_eq!(read, r#"x\"y"#.repeat(20_000));
        // The room reserved for the rest of the text is given back.
        let Cow::Owned(read) = read else {
            panic!("an unescaped string is owned")
        };
        assert!(
            read.capacity() <= 2 * read.len(),
            "{} bytes kept for {}",
            read.capacity(),
            read.len()
        );
        // A bad escape in either part, or no closing quote: no string.
        let body = r#"ab\\\"cd"#.repeat(200_000);
        for broken in [
            format!(r#""\q{body}""#),
            format!(r#""{body}\q""#),
            format!(r#""{body}"#),
        ] {
            assert_eq!(string_at(&broken, 0), None);
        }
    }

    /// Whether JSON's grammar takes `literal` as one string, by the check
    /// the envelope parse makes otherwise.
    fn checked(literal: &str) -> bool {
        sluice_core::check::is_json(literal) && literal.starts_with('"')
    }

    #[test]
    fn a_string_unescaped_unchecked_is_refused_as_the_check_refuses_it() {
        let body = r#"{\"id\":\"SKU-1\",\"n\":\"a\\\\b\u00e9\"},"#.repeat(30_000);
        let run = "plain text without a stop ".repeat(3_000);
        let mut literals = vec![
            "\"plain\"".to_owned(),
            r#""a\"b\\c\u00e9 \ud800""#.to_owned(),
            format!("\"[{body}]\""),
            format!("\"{run}\\n{run}\""),
        ];
        // Each broken: a control character before the first escape, after
        // one, in a long run, in the second part of a long string; an
        // escape JSON does not have; no closing quote.
        literals.extend([
            "\"a\u{1}b\"".to_owned(),
            "\"a\\nb\tc\"".to_owned(),
            format!("\"{run}\\n{run}\n{run}\""),
            format!("\"[{body}\u{1f}{body}]\""),
            format!("\"{body}\\q\""),
            format!("\"{body}"),
        ]);
        for literal in &literals {
            let read = checked_unescape(literal.as_bytes(), 0);
            assert_eq!(read.is_some(), checked(literal), "{}", literal.len());
            if let Some((end, text)) = read {
                assert_eq!(end, literal.len());
                let (_, walked) = string_at(literal, 0).unwrap();
                assert_eq!(
                    text.as_deref().unwrap_or(literal.get(1..end - 1).unwrap()),
                    walked
                );
            }
        }
    }

    /// Every text of one to `most` of `pieces`, shortest first.
    fn every_text_of(pieces: &[&str], most: usize) -> Vec<String> {
        let mut texts = Vec::new();
        let mut longest = vec![String::new()];
        for _ in 0..most {
            longest = longest
                .iter()
                .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
                .collect();
            texts.extend(longest.iter().cloned());
        }
        texts
    }

    #[test]
    fn any_short_string_is_unescaped_unchecked_only_where_the_check_takes_it() {
        let pieces = ["a", "\\", "\"", "n", "u", "0", "\u{1}", "\t", "é"];
        for body in every_text_of(&pieces, 5) {
            let literal = format!("\"{body}\"");
            let read = checked_unescape(literal.as_bytes(), 0);
            let ended = read.as_ref().is_some_and(|(end, _)| *end == literal.len());
            assert_eq!(ended, checked(&literal), "{literal:?}");
        }
    }

    #[test]
    fn any_text_is_walked_without_panicking() {
        let pieces = [
            "{", "}", "[", "]", "\"", "\\", ":", ",", " ", "a", "1", "\\u", "é",
        ];
        for text in &every_text_of(&pieces, 4) {
            if let Some(mut m) = members(text) {
                while m.key().is_some() {
                    if !m.enter(b'[') {
                        let _ = m.string();
                        continue;
                    }
                    while m.item() {
                        let _ = m.value();
                    }
                }
            }
            let _ = items(text);
            for quote in text.match_indices('"').map(|(i, _)| i) {
                let _ = string_at(text, quote);
            }
        }
    }
}
