//! Searching a stored document: a literal or a regular expression over the
//! strings of a JSON document (keys and values, each with its JSON Pointer)
//! or over the lines of a text.
//!
//! Over a text, matching is per line, as grep's: `^` and `$` anchor at each
//! line's start and end (before `\r\n` too), and no match spans lines (a
//! pattern that could only match across a line break matches nothing). Over
//! JSON, `^` and `$` anchor at the start and end of each string.
//!
//! Regular expressions are the `regex` crate's: no backtracking, so no
//! pattern takes more than linear time, and compiled programs are bounded
//! in size. A search runs over the whole document once; its hits are kept
//! (up to [`HITS_KEPT`]) so that its pages are served without searching again.

use std::ops::Range;

use regex::{Regex, RegexBuilder};
use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Repetition,
};

use crate::budget::{Budget, count_chars, floor_boundary};
use crate::document::{Document, Kind};
use crate::format::group;
use crate::scan;

/// The most hits a search keeps (the total is counted beyond).
pub const HITS_KEPT: usize = 100_000;
/// The most bytes of JSON Pointers the kept hits of a search hold (deep
/// documents have long pointers): past it, hits are counted, not kept.
pub const HIT_POINTER_BYTES: usize = 4 << 20;
/// The longest pattern, in bytes: compiling a longer one could take
/// seconds and gigabytes before the regex crate's size limit refuses it.
pub const MAX_PATTERN_BYTES: usize = 8 << 10;
/// The most context lines before, or after, a text hit.
pub const MAX_CONTEXT: usize = 10;
/// Characters of a value or line shown around a match.
pub const SNIPPET_CHARS: usize = 200;

/// What to look for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// The pattern.
    pub pattern: String,
    /// Whether `pattern` is a regular expression (else a literal).
    pub regex: bool,
    /// Whether case matters.
    pub case_sensitive: bool,
}

/// Why a search cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SearchError {
    /// Nothing to look for.
    #[error("the pattern is empty: give the text to look for")]
    Empty,
    /// Not a valid regular expression, or one too large.
    #[error("invalid regular expression: {0}")]
    Invalid(String),
    /// Longer than [`MAX_PATTERN_BYTES`].
    #[error(
        "the pattern is {} long, over the limit of {} (8 KiB): search for a shorter part of it",
        crate::format::bytes(*.0 as u64),
        crate::format::bytes(MAX_PATTERN_BYTES as u64)
    )]
    TooLong(usize),
}

/// A query compiled for one kind of document.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// Text: multi-line, CRLF-aware, unable to match a line break. JSON:
    /// as written (`^`/`$` at the ends of each string).
    regex: Regex,
    /// JSON: a literal without quotes or backslashes matches a string
    /// exactly where it matches the string's raw text (when that has no
    /// escapes), and never across a string's quotes.
    raw_literal: bool,
}

impl Matcher {
    /// Compiles `query` for documents of `kind` (bounded: 1 MiB of
    /// program, 8 MiB of lazy DFA).
    pub fn new(query: &Query, kind: Kind) -> Result<Self, SearchError> {
        if query.pattern.is_empty() {
            return Err(SearchError::Empty);
        }
        if query.pattern.len() > MAX_PATTERN_BYTES {
            return Err(SearchError::TooLong(query.pattern.len()));
        }
        let pattern = if query.regex {
            query.pattern.clone()
        } else {
            regex::escape(&query.pattern)
        };
        let invalid =
            |e: &dyn std::fmt::Display| SearchError::Invalid(e.to_string().replace('\n', " "));
        let (pattern, case_insensitive) = match kind {
            Kind::Text => {
                // Parsed with grep's line semantics, stripped of every way
                // to match `\n`, and printed back (case folding included):
                // a match then never leaves its line, so a search is one
                // linear pass however the pattern is written.
                let hir = regex_syntax::ParserBuilder::new()
                    .case_insensitive(!query.case_sensitive)
                    .multi_line(true)
                    .crlf(true)
                    .build()
                    .parse(&pattern)
                    .map_err(|e| invalid(&e))?;
                (within_lines(hir).to_string(), false)
            }
            Kind::Json | Kind::Blocks => (pattern, !query.case_sensitive),
        };
        let regex = RegexBuilder::new(&pattern)
            .case_insensitive(case_insensitive)
            .size_limit(1 << 20)
            .dfa_size_limit(8 << 20)
            .build()
            .map_err(|e| invalid(&e))?;
        Ok(Self {
            regex,
            raw_literal: kind != Kind::Text && !query.regex && !query.pattern.contains(['"', '\\']),
        })
    }
}

/// `hir` unable to match `\n`: classes lose it, and a literal holding one
/// can never match. (Recursion depth is bounded by the parser's nest limit.)
fn within_lines(hir: Hir) -> Hir {
    match hir.into_kind() {
        HirKind::Literal(literal) if literal.0.contains(&b'\n') => Hir::fail(),
        HirKind::Literal(literal) => Hir::literal(literal.0),
        HirKind::Class(Class::Unicode(mut class)) => {
            class.difference(&ClassUnicode::new([ClassUnicodeRange::new('\n', '\n')]));
            Hir::class(Class::Unicode(class))
        }
        HirKind::Class(Class::Bytes(mut class)) => {
            class.difference(&ClassBytes::new([ClassBytesRange::new(b'\n', b'\n')]));
            Hir::class(Class::Bytes(class))
        }
        HirKind::Empty => Hir::empty(),
        HirKind::Look(look) => Hir::look(look),
        HirKind::Repetition(repetition) => Hir::repetition(Repetition {
            sub: Box::new(within_lines(*repetition.sub)),
            ..repetition
        }),
        HirKind::Capture(capture) => Hir::capture(Capture {
            sub: Box::new(within_lines(*capture.sub)),
            ..capture
        }),
        HirKind::Concat(subs) => Hir::concat(subs.into_iter().map(within_lines).collect()),
        HirKind::Alternation(subs) => {
            Hir::alternation(subs.into_iter().map(within_lines).collect())
        }
    }
}

/// One match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hit {
    /// A string of a JSON document.
    Json {
        /// Its JSON Pointer (the member's, for a key).
        pointer: String,
        /// Whether the match is in a key.
        key: bool,
        /// The string literal's bytes in the document.
        literal: Range<usize>,
    },
    /// A line of a text (0-based).
    Line(u64),
}

/// The hits of one search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hits {
    /// The hits kept, in document order.
    pub hits: Vec<Hit>,
    /// All hits, kept or not.
    pub total: u64,
}

/// Searches `doc` with `matcher` (compiled for its kind): strings of JSON
/// (one hit per matching string), lines of text (one hit per matching line).
pub fn search(doc: &Document, matcher: &Matcher) -> Hits {
    let re = &matcher.regex;
    let text = doc.text_str();
    let mut hits = Vec::new();
    let mut total = 0u64;
    match doc.kind() {
        Kind::Text => {
            let starts = doc.line_starts();
            let mut line = 0;
            // One pass: the regex cannot match `\n`, so each search stops
            // within the line where its match starts; the next resumes at
            // the following line.
            while line < starts.len() {
                let Some(m) = re.find_at(text, starts[line] as usize) else {
                    break;
                };
                line += starts[line..].partition_point(|&s| s as usize <= m.start()) - 1;
                let (from, end) = line_bounds(text, starts, line);
                // A match that takes the `\r` of a `\r\n` (or starts past
                // the last line) is not within the line: try the line alone.
                if m.end() <= end || re.is_match_at(&text[..end], from) {
                    total += 1;
                    if hits.len() < HITS_KEPT {
                        hits.push(Hit::Line(line as u64));
                    }
                }
                line += 1;
            }
        }
        Kind::Json | Kind::Blocks => {
            // Where the pattern occurs in the raw text, in order: for a
            // plain literal, a string without escapes matches exactly when
            // one of these falls inside it (no unescaping, no regex call).
            let mut pointer_bytes = 0;
            let mut raw = matcher
                .raw_literal
                .then(|| re.find_iter(text).map(|m| m.start()).peekable());
            scan::visit_strings(text, |range, key, pointer| {
                let literal = &text[range.clone()];
                let matched = match &mut raw {
                    Some(raw) if memchr::memchr(b'\\', literal.as_bytes()).is_none() => {
                        while raw.next_if(|&s| s < range.start).is_some() {}
                        raw.peek().is_some_and(|&s| s < range.end)
                    }
                    _ => re.is_match(&scan::string_text(literal)),
                };
                if matched {
                    total += 1;
                    if hits.len() < HITS_KEPT && pointer_bytes < HIT_POINTER_BYTES {
                        let pointer = pointer();
                        pointer_bytes += pointer.len();
                        hits.push(Hit::Json {
                            pointer,
                            key,
                            literal: range,
                        });
                    }
                }
                true
            });
        }
    }
    Hits { hits, total }
}

/// One page of hits, rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitPage {
    /// The hits, one per line (JSON: `{"path":…,"value":…}`; text:
    /// `N:line` with `N-line` context and `--` between groups).
    pub data: String,
    /// The first hit shown.
    pub start: usize,
    /// Past the last hit shown.
    pub end: usize,
}

/// Renders hits from `start` while they fit `budget` (at least one, cut to
/// fit if need be), text hits with `before` and `after` lines of context.
pub fn page(
    doc: &Document,
    hits: &Hits,
    matcher: &Matcher,
    start: usize,
    before: usize,
    after: usize,
    budget: &Budget,
) -> HitPage {
    let mut data = String::new();
    let mut end = start;
    let mut last_line_shown: Option<u64> = None;
    while end < hits.hits.len() {
        let mut piece = String::new();
        match &hits.hits[end] {
            Hit::Json {
                pointer,
                key,
                literal,
            } => {
                let value = scan::string_text(&doc.text_str()[literal.clone()]).into_owned();
                let line = if *key {
                    serde_json::json!({"path": pointer, "key": snippet(&value, matcher)})
                } else {
                    serde_json::json!({"path": pointer, "value": snippet(&value, matcher)})
                };
                piece.push_str(&line.to_string());
                piece.push('\n');
            }
            Hit::Line(line) => {
                let lines = doc.line_starts().len() as u64;
                // Lines already shown (the previous hit's) are not repeated;
                // a gap between groups is marked `--`, as grep does.
                let from = line.saturating_sub(before as u64);
                let from = last_line_shown.map_or(from, |l| from.max(l + 1));
                if last_line_shown.is_some_and(|l| from > l + 1) {
                    piece.push_str("--\n");
                }
                let to = (line + after as u64 + 1).min(lines);
                // Context after this hit stops before the next hit's line.
                let next = hits.hits.get(end + 1).and_then(|h| match h {
                    Hit::Line(n) => Some(*n),
                    Hit::Json { .. } => None,
                });
                let to = next.map_or(to, |n| to.min(n.max(*line + 1)));
                for n in from..to {
                    let text = line_text(doc, n);
                    let sep = if n == *line { ':' } else { '-' };
                    let shown = if n == *line {
                        snippet(text, matcher)
                    } else {
                        cut(text, SNIPPET_CHARS)
                    };
                    piece.push_str(&format!("{}{sep}{shown}\n", n + 1));
                }
                last_line_shown = Some(to.saturating_sub(1).max(*line));
            }
        }
        let candidate = format!("{data}{piece}");
        if end > start && !fits(&candidate, budget) {
            break;
        }
        data = candidate;
        end += 1;
    }
    if !fits(&data, budget) {
        // One hit alone over the budget (a huge line with context): cut it.
        let mut cut_at = floor_boundary(&data, budget.max_chars as usize);
        while cut_at > 0 && !fits(&data[..cut_at], budget) {
            cut_at = floor_boundary(&data, cut_at * 3 / 4);
        }
        data.truncate(cut_at);
    }
    HitPage { data, start, end }
}

fn fits(text: &str, budget: &Budget) -> bool {
    budget.fits_text(text)
}

/// Where line `n` starts, and where its text ends (before its `\n` or
/// `\r\n`).
fn line_bounds(text: &str, starts: &[u64], n: usize) -> (usize, usize) {
    let from = starts[n] as usize;
    let to = starts.get(n + 1).map_or(text.len(), |&s| s as usize);
    // One line break, `\n` or `\r\n`: a `\r` before it is the line's own.
    let line = &text[from..to];
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    (from, from + line.len())
}

fn line_text(doc: &Document, n: u64) -> &str {
    let text = doc.text_str();
    let (from, end) = line_bounds(text, doc.line_starts(), n as usize);
    &text[from..end]
}

/// `text` cut to [`SNIPPET_CHARS`] around its first match, `…` marking cuts.
fn snippet(text: &str, matcher: &Matcher) -> String {
    if count_chars(text) <= SNIPPET_CHARS {
        return text.to_owned();
    }
    let Some(m) = matcher.regex.find(text) else {
        return cut(text, SNIPPET_CHARS);
    };
    // Characters before the match: half of what the match leaves.
    let room = SNIPPET_CHARS.saturating_sub(count_chars(m.as_str())) / 2;
    let before: Vec<(usize, char)> = text[..m.start()].char_indices().collect();
    let start = before.len().checked_sub(room).map_or(0, |i| before[i].0);
    let rest = &text[start..];
    let end = rest
        .char_indices()
        .nth(SNIPPET_CHARS)
        .map_or(rest.len(), |(i, _)| i);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.push_str(&rest[..end]);
    if start + end < text.len() {
        out.push('…');
    }
    out
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// The same search with its pattern read as a regular expression, to
/// try when `query`, taken literally (the default), matched nothing and
/// its pattern has a regular expression's syntax in it: a model that
/// greps `error|warning` or `v1\.[0-9]+` means one, and "no matching
/// lines" alone would tell it there are none.
pub fn as_regex(query: &Query) -> Option<Query> {
    const SYNTAX: [char; 11] = ['|', '[', '(', '*', '+', '?', '.', '^', '$', '\\', '{'];
    (!query.regex && query.pattern.contains(SYNTAX)).then(|| Query {
        regex: true,
        ..query.clone()
    })
}

/// Why a search that matched nothing may still have missed what was
/// meant, said after "no matching …" in its header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missed {
    /// Its literal pattern, read as a regular expression (see
    /// [`as_regex`]), matches this many lines or strings.
    AsRegex(u64),
    /// Its pattern is a JSON number, `true`, `false` or `null`, which a
    /// search of JSON never matches: it reads strings only.
    Scalar(String),
}

impl Missed {
    /// [`Missed::Scalar`], if `query`'s pattern is one and the document
    /// is JSON. (At most [`crate::format::QUOTED_CHARS`] bytes: the header
    /// quotes it twice, and must fit the budget whatever the pattern.)
    pub fn scalar(query: &Query, kind: Kind) -> Option<Missed> {
        let pattern = query.pattern.trim();
        let scalar = kind != Kind::Text
            && !query.regex
            && pattern.len() <= crate::format::QUOTED_CHARS
            && matches!(
                serde_json::from_str::<serde_json::Value>(pattern),
                Ok(serde_json::Value::Number(_)
                    | serde_json::Value::Bool(_)
                    | serde_json::Value::Null)
            );
        scalar.then(|| Missed::Scalar(pattern.to_owned()))
    }

    fn say(&self, kind: Kind) -> String {
        match self {
            Missed::AsRegex(n) => format!(
                "the pattern was taken literally; as a regular expression (add \"regex\": true) it matches {}",
                if kind == Kind::Text {
                    crate::format::counted(*n, "line", "lines")
                } else {
                    crate::format::counted(*n, "string", "strings")
                }
            ),
            Missed::Scalar(value) => format!(
                "a search reads the strings of JSON (keys and values), never its numbers, true, false or null; the filter `[paths(. == {value})]` of sluice_query gives the paths of the values equal to {value}"
            ),
        }
    }
}

/// The header line of a page of hits. `missed`: for a search that
/// matched nothing, why it may have missed what was meant.
pub fn header(
    hits: &Hits,
    page: &HitPage,
    kind: Kind,
    next_call: Option<&str>,
    missed: Option<&Missed>,
) -> String {
    let what = if kind == Kind::Text {
        "matching lines"
    } else {
        "matching strings"
    };
    let mut out = if page.start == page.end {
        match missed {
            Some(missed) => format!("no {what}: {}", missed.say(kind)),
            None => format!("no {what}"),
        }
    } else {
        format!(
            "{what} {}–{} of {}",
            group(page.start as u64 + 1),
            group(page.end as u64),
            group(hits.total)
        )
    };
    if hits.total > hits.hits.len() as u64 {
        out.push_str(&format!(
            " (the first {} are kept: narrow the pattern to see the rest)",
            group(hits.hits.len() as u64)
        ));
    }
    crate::format::push_next(&mut out, next_call);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which patterns a search that found nothing retells: a JSON number,
    /// `true`, `false` or `null` over JSON (literal), and a literal with
    /// a regex's syntax as a regex.
    #[test]
    fn a_miss_is_retold_for_scalars_over_json_and_regex_syntax() {
        let query = |pattern: &str, regex: bool| Query {
            pattern: pattern.into(),
            regex,
            case_sensitive: false,
        };
        for scalar in [" 12 ", "-0.5", "1e3", "true", "false", "null"] {
            assert_eq!(
                Missed::scalar(&query(scalar, false), Kind::Json),
                Some(Missed::Scalar(scalar.trim().into())),
                "{scalar}"
            );
            assert_eq!(Missed::scalar(&query(scalar, false), Kind::Text), None);
            assert_eq!(Missed::scalar(&query(scalar, true), Kind::Json), None);
        }
        let long_number = "1".repeat(crate::format::QUOTED_CHARS + 1);
        for not_scalar in ["\"12\"", "12 apples", "[1]", "nul", "", &long_number] {
            assert_eq!(Missed::scalar(&query(not_scalar, false), Kind::Json), None);
        }
        assert_eq!(as_regex(&query("a|b", false)), Some(query("a|b", true)));
        assert_eq!(as_regex(&query("a|b", true)), None);
        assert_eq!(as_regex(&query("plain words-and #1", false)), None);
    }

    fn matcher(kind: Kind, pattern: &str, regex: bool, case_sensitive: bool) -> Matcher {
        Matcher::new(
            &Query {
                pattern: pattern.into(),
                regex,
                case_sensitive,
            },
            kind,
        )
        .unwrap()
    }

    /// A matcher for JSON documents.
    fn query(pattern: &str, regex: bool, case_sensitive: bool) -> Matcher {
        matcher(Kind::Json, pattern, regex, case_sensitive)
    }

    /// The 1-based numbers of the lines of `text` that `pattern` (a regex,
    /// case-sensitive) matches.
    fn lines_matching(text: &str, pattern: &str) -> Vec<u64> {
        let doc = Document::text(text.into());
        search(&doc, &matcher(Kind::Text, pattern, true, true))
            .hits
            .iter()
            .map(|h| match h {
                Hit::Line(n) => n + 1,
                Hit::Json { .. } => unreachable!("a text has lines"),
            })
            .collect()
    }

    #[test]
    fn json_strings_match_with_their_paths() {
        let doc =
            Document::json(r#"{"rows":[{"name":"Alpha one"},{"name":"beta"},{"alpha":1}]}"#.into())
                .unwrap();
        let hits = search(&doc, &query("alpha", false, false));
        assert_eq!(hits.total, 2);
        let page = page(
            &doc,
            &hits,
            &query("alpha", false, false),
            0,
            0,
            0,
            &Budget::default(),
        );
        assert_eq!(
            page.data,
            "{\"path\":\"/rows/0/name\",\"value\":\"Alpha one\"}\n{\"path\":\"/rows/2/alpha\",\"key\":\"alpha\"}\n"
        );
        assert_eq!(search(&doc, &query("alpha", false, true)).total, 1);
        assert_eq!(search(&doc, &query("^b.t", true, true)).total, 1);
    }

    #[test]
    fn over_json_anchors_hold_at_the_ends_of_each_string() {
        let doc = Document::json(
            r#"{"log":"ok\nE boom\nend","rows":[{"s":"E boom"},{"s":"xE boom"},{"s":"E boomx"}]}"#
                .into(),
        )
        .unwrap();
        let paths = |pattern: &str| -> Vec<String> {
            search(&doc, &query(pattern, true, true))
                .hits
                .iter()
                .map(|h| match h {
                    Hit::Json { pointer, .. } => pointer.clone(),
                    Hit::Line(_) => unreachable!("JSON has strings"),
                })
                .collect()
        };
        // `^`/`$` are the string's ends, not the ends of lines inside it.
        assert_eq!(paths("^E boom$"), ["/rows/0/s"]);
        assert_eq!(paths("^E boom"), ["/rows/0/s", "/rows/2/s"]);
        assert_eq!(paths("boom$"), ["/rows/0/s", "/rows/1/s"]);
        // Inside one string a match may still cross its `\n`.
        assert_eq!(paths(r"ok\sE"), ["/log"]);
    }

    #[test]
    fn over_text_anchors_hold_at_each_line() {
        let log = "collected 3 items\nE   assert 1 == 2\n  E not at the start\nE\tAssertionError\nFAILED t.py::test_a\n";
        assert_eq!(lines_matching(log, r"^E\s"), [2, 4]);
        assert_eq!(lines_matching(log, "^FAILED"), [5]);
        assert_eq!(lines_matching(log, r"2$"), [2]);
        assert_eq!(lines_matching(log, r"^\S+$"), Vec::<u64>::new());
        assert_eq!(lines_matching(log, r"items$"), [1]);
        // An empty line matches `^$`; the end of the text is no extra line.
        assert_eq!(lines_matching("a\n\nb\n", "^$"), [2]);
        // A match counts once per line, however many it holds.
        assert_eq!(lines_matching("aaa\nb\na\n", "a"), [1, 3]);
    }

    #[test]
    fn crlf_lines_anchor_before_their_line_break() {
        let log = "E   one\r\nok\r\nE   two\r\nlast two\r\n";
        assert_eq!(lines_matching(log, r"^E\s"), [1, 3]);
        assert_eq!(lines_matching(log, "two$"), [3, 4]);
        assert_eq!(lines_matching(log, r"^ok$"), [2]);
        // The `\r` of a line break is not part of the line.
        assert_eq!(lines_matching(log, r"two\s"), Vec::<u64>::new());
        assert_eq!(lines_matching(log, r"ok\r"), Vec::<u64>::new());
        assert_eq!(lines_matching("x y\r\nno\r\n", r"x\s"), [1]);
        // A line with a match of its own after one into the `\r` counts.
        assert_eq!(lines_matching("ab\r\nb\r\n", r"a\w\s|^b$"), [2]);
        assert_eq!(lines_matching("ab\r\n", r"a\w\s|b"), [1]);
        let doc = Document::text(log.into());
        let m = matcher(Kind::Text, "ok", false, true);
        let shown = page(&doc, &search(&doc, &m), &m, 0, 1, 0, &Budget::default());
        assert_eq!(shown.data, "1-E   one\n2:ok\n");
    }

    #[test]
    fn no_match_spans_lines() {
        let text = "a\nb\na b\n";
        // A literal holding a line break matches nothing.
        let doc = Document::text(text.into());
        let literal = matcher(Kind::Text, "a\nb", false, true);
        assert_eq!(search(&doc, &literal).total, 0);
        // `\s`, `[^x]`, `(?s).` and `\n` never take the line break.
        assert_eq!(lines_matching(text, r"a\sb"), [3]);
        assert_eq!(lines_matching(text, r"a[^x]b"), [3]);
        assert_eq!(lines_matching(text, r"(?s)a.b"), [3]);
        assert_eq!(lines_matching(text, r"a\nb"), Vec::<u64>::new());
        assert_eq!(lines_matching(text, r"a(\n|\s)*b"), [3]);
        // A match that would run on to a later line is found on its own line.
        assert_eq!(lines_matching("xa\nb\nc a\n", r"a[\s\S]*"), [1, 3]);
        // Case folding still applies.
        let m = matcher(Kind::Text, "^a B$", true, false);
        assert_eq!(search(&doc, &m).total, 1);
    }

    #[test]
    fn the_text_regex_cannot_match_a_line_break() {
        // So a search stops within the line where its match starts, and
        // resumes at the next: one pass over the text, whatever the pattern
        // (`x[\s\S]*y` could otherwise run on from every line to the end).
        for pattern in [
            r"x[\s\S]*y",
            r"x\s*y",
            r"(?s)x.*y",
            r"x\ny",
            r"x\x0Ay",
            r"x[^a]y",
            r"x\W*y",
            r"x\D*y",
            r"x[[:space:]]y",
            r"x(\r?\n|z)y",
            r"(?i)X\n+Y",
        ] {
            let json = matcher(Kind::Json, pattern, true, true);
            assert!(json.regex.is_match("x\ny"), "{pattern}");
            let text = matcher(Kind::Text, pattern, true, true);
            assert!(!text.regex.is_match("x\ny"), "{pattern}");
            assert!(!text.regex.is_match("x\r\ny"), "{pattern}");
        }
        let doc = Document::text("x\n".repeat(100_000) + "y\n");
        let total = |pattern| search(&doc, &matcher(Kind::Text, pattern, true, true)).total;
        assert_eq!(total(r"x[\s\S]*y"), 0);
        assert_eq!(total(r"^x\s*$"), 100_000);
    }

    #[test]
    fn text_hits_come_with_context_lines() {
        let text: String = (1..=20)
            .map(|i| format!("line {i}{}\n", if i % 7 == 0 { " ERROR" } else { "" }))
            .collect();
        let doc = Document::text(text);
        let m = matcher(Kind::Text, "error", false, false);
        let hits = search(&doc, &m);
        assert_eq!(hits.hits, [Hit::Line(6), Hit::Line(13)]);
        let page = page(&doc, &hits, &m, 0, 2, 2, &Budget::default());
        assert_eq!(
            page.data,
            "5-line 5\n6-line 6\n7:line 7 ERROR\n8-line 8\n9-line 9\n--\n12-line 12\n13-line 13\n14:line 14 ERROR\n15-line 15\n16-line 16\n"
        );
        assert_eq!(
            header(&hits, &page, Kind::Text, None, None),
            "matching lines 1–2 of 2 · last page"
        );
    }

    #[test]
    fn before_and_after_context_are_separate() {
        let text: String = (1..=20)
            .map(|i| format!("line {i}{}\n", if i % 7 == 0 { " ERROR" } else { "" }))
            .collect();
        let doc = Document::text(text);
        let m = matcher(Kind::Text, "error", false, false);
        let hits = search(&doc, &m);
        let shown = |before, after| page(&doc, &hits, &m, 0, before, after, &Budget::default());
        assert_eq!(
            shown(3, 0).data,
            "4-line 4\n5-line 5\n6-line 6\n7:line 7 ERROR\n--\n11-line 11\n12-line 12\n13-line 13\n14:line 14 ERROR\n"
        );
        assert_eq!(
            shown(0, 1).data,
            "7:line 7 ERROR\n8-line 8\n--\n14:line 14 ERROR\n15-line 15\n"
        );
        // Without context, hits apart are still separate groups.
        assert_eq!(shown(0, 0).data, "7:line 7 ERROR\n--\n14:line 14 ERROR\n");
        // Context near the ends of the text stops there.
        assert_eq!(shown(10, 10).data.lines().next_back(), Some("20-line 20"));
        assert!(shown(10, 10).data.starts_with("1-line 1\n"));
    }

    #[test]
    fn overlapping_groups_merge_without_repeating_lines() {
        let text: String = (1..=12)
            .map(|i| format!("{i}{}\n", if [4, 6, 11].contains(&i) { " hit" } else { "" }))
            .collect();
        let doc = Document::text(text);
        let m = matcher(Kind::Text, "hit", false, true);
        let hits = search(&doc, &m);
        let shown = |before, after| page(&doc, &hits, &m, 0, before, after, &Budget::default());
        // 4 and 6 share a group (their context touches); 11 is apart.
        assert_eq!(
            shown(1, 1).data,
            "3-3\n4:4 hit\n5-5\n6:6 hit\n7-7\n--\n10-10\n11:11 hit\n12-12\n"
        );
        // After-context of 4 reaches past 6: 6 is shown once, as a hit.
        assert_eq!(
            shown(0, 3).data,
            "4:4 hit\n5-5\n6:6 hit\n7-7\n8-8\n9-9\n--\n11:11 hit\n12-12\n"
        );
        // Adjacent groups (9 follows 8) have no separator.
        assert_eq!(
            shown(2, 2).data,
            "2-2\n3-3\n4:4 hit\n5-5\n6:6 hit\n7-7\n8-8\n9-9\n10-10\n11:11 hit\n12-12\n"
        );
    }

    #[test]
    fn pages_of_hits_stay_within_the_budget() {
        let rows: Vec<serde_json::Value> = (0..5000)
            .map(|i| serde_json::json!({"n": format!("match {i} {}", "x".repeat(100))}))
            .collect();
        let doc = Document::json(serde_json::Value::Array(rows).to_string()).unwrap();
        let m = query("match", false, true);
        let hits = search(&doc, &m);
        assert_eq!(hits.total, 5000);
        let budget = Budget {
            max_tokens: 2000,
            max_chars: 6000,
            ..Budget::default()
        };
        let mut start = 0;
        let mut pages = 0;
        while start < hits.hits.len() {
            let p = page(&doc, &hits, &m, start, 0, 0, &budget);
            assert!(fits(&p.data, &budget) && p.end > start);
            start = p.end;
            pages += 1;
        }
        assert!(pages > 50);
    }

    #[test]
    fn long_values_are_cut_around_the_match() {
        let m = query("needle", false, true);
        let text = format!("{}needle{}", "a".repeat(1000), "b".repeat(1000));
        let s = snippet(&text, &m);
        assert!(
            s.starts_with('…') && s.ends_with('…') && s.contains("needle"),
            "{s}"
        );
        assert_eq!(count_chars(&s), SNIPPET_CHARS + 2);
    }

    #[test]
    fn the_raw_prefilter_agrees_with_unescaped_matching() {
        // Escaped strings, matches in numbers and keys, overlapping text.
        let doc = Document::json(
            r#"{"caf\u00e9":"cafe caf\u00e9","n":12,"s":"x12","aaa":["aa","a"],"q":"say \"hi\""}"#
                .into(),
        )
        .unwrap();
        for (pattern, want) in [
            ("café", 2),
            ("12", 1),
            ("aa", 2),
            ("a", 6),
            ("hi", 1),
            ("say \"", 1),
        ] {
            let literal = query(pattern, false, true);
            assert!(literal.raw_literal || pattern.contains('"'), "{pattern}");
            let as_regex = query(&regex::escape(pattern), true, true);
            assert_eq!(search(&doc, &literal), search(&doc, &as_regex), "{pattern}");
            assert_eq!(search(&doc, &literal).total, want, "{pattern}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        for kind in [Kind::Json, Kind::Text] {
            let q = |p: &str| {
                Matcher::new(
                    &Query {
                        pattern: p.into(),
                        regex: true,
                        case_sensitive: true,
                    },
                    kind,
                )
            };
            assert_eq!(q("").unwrap_err(), SearchError::Empty);
            assert!(
                matches!(q("(unclosed"), Err(SearchError::Invalid(m)) if m.contains("unclosed group"))
            );
            // A regex bomb: refused by the size limit, not run for ever.
            assert!(
                matches!(q("(((a{100}){100}){100})"), Err(SearchError::Invalid(m)) if m.contains("size limit"))
            );
        }
    }
}
