//! Searching a stored document: a literal or a regular expression over the
//! strings of a JSON document (keys and values, each with its JSON Pointer)
//! or over the lines of a text.
//!
//! Regular expressions are the `regex` crate's: no backtracking, so no
//! pattern takes more than linear time, and compiled programs are bounded
//! in size. A search runs over the whole document once; its hits are kept
//! (up to [`HITS_KEPT`]) so that its pages are served without searching again.

use std::ops::Range;

use regex::{Regex, RegexBuilder};

use crate::budget::{Budget, count_chars, floor_boundary};
use crate::document::{Document, Kind};
use crate::format::group;
use crate::scan;

/// The most hits a search keeps (the total is counted beyond).
pub const HITS_KEPT: usize = 100_000;
/// The most context lines around a text hit.
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
}

/// A compiled query.
#[derive(Debug, Clone)]
pub struct Matcher(Regex, bool);

impl Matcher {
    /// Compiles `query` (bounded: 1 MiB of program, 8 MiB of lazy DFA).
    pub fn new(query: &Query) -> Result<Self, SearchError> {
        if query.pattern.is_empty() {
            return Err(SearchError::Empty);
        }
        let pattern = if query.regex {
            query.pattern.clone()
        } else {
            regex::escape(&query.pattern)
        };
        RegexBuilder::new(&pattern)
            .case_insensitive(!query.case_sensitive)
            .size_limit(1 << 20)
            .dfa_size_limit(8 << 20)
            .build()
            // A literal without quotes or backslashes matches a JSON string
            // exactly where it matches the string's raw text (when that
            // has no escapes), and never across a string's quotes.
            .map(|re| Self(re, !query.regex && !query.pattern.contains(['"', '\\'])))
            .map_err(|e| SearchError::Invalid(e.to_string().replace('\n', " ")))
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

/// Searches `doc`: strings of JSON (one hit per matching string), lines of
/// text (one hit per matching line).
pub fn search(doc: &Document, matcher: &Matcher) -> Hits {
    let re = &matcher.0;
    let text = doc.text_str();
    let mut hits = Vec::new();
    let mut total = 0u64;
    match doc.kind() {
        Kind::Text => {
            let starts = doc.line_starts();
            let mut last_line = None;
            for m in re.find_iter(text) {
                let line = starts.partition_point(|&s| s as usize <= m.start()) - 1;
                if last_line == Some(line) {
                    continue;
                }
                last_line = Some(line);
                total += 1;
                if hits.len() < HITS_KEPT {
                    hits.push(Hit::Line(line as u64));
                }
            }
        }
        Kind::Json | Kind::Blocks => {
            // Where the pattern occurs in the raw text, in order: for a
            // plain literal, a string without escapes matches exactly when
            // one of these falls inside it (no unescaping, no regex call).
            let mut raw = matcher
                .1
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
                    if hits.len() < HITS_KEPT {
                        hits.push(Hit::Json {
                            pointer: pointer(),
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
/// fit if need be).
pub fn page(
    doc: &Document,
    hits: &Hits,
    matcher: &Matcher,
    start: usize,
    context: usize,
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
                let from = line.saturating_sub(context as u64);
                let from = last_line_shown.map_or(from, |l| from.max(l + 1));
                if last_line_shown.is_some_and(|l| from > l + 1)
                    || (last_line_shown.is_none() && end > start && from > 0)
                {
                    piece.push_str("--\n");
                }
                let to = (line + context as u64 + 1).min(lines);
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

fn line_text(doc: &Document, n: u64) -> &str {
    let starts = doc.line_starts();
    let text = doc.text_str();
    let a = starts[n as usize] as usize;
    let b = starts
        .get(n as usize + 1)
        .map_or(text.len(), |&s| s as usize);
    text[a..b].trim_end_matches(['\n', '\r'])
}

/// `text` cut to [`SNIPPET_CHARS`] around its first match, `…` marking cuts.
fn snippet(text: &str, matcher: &Matcher) -> String {
    if count_chars(text) <= SNIPPET_CHARS {
        return text.to_owned();
    }
    let Some(m) = matcher.0.find(text) else {
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

/// The header line of a page of hits.
pub fn header(hits: &Hits, page: &HitPage, kind: Kind, next_call: Option<&str>) -> String {
    let what = if kind == Kind::Text {
        "matching lines"
    } else {
        "matching strings"
    };
    let mut out = if page.start == page.end {
        format!("no {what}")
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

    fn query(pattern: &str, regex: bool, case_sensitive: bool) -> Matcher {
        Matcher::new(&Query {
            pattern: pattern.into(),
            regex,
            case_sensitive,
        })
        .unwrap()
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
    fn text_hits_come_with_context_lines() {
        let text: String = (1..=20)
            .map(|i| format!("line {i}{}\n", if i % 7 == 0 { " ERROR" } else { "" }))
            .collect();
        let doc = Document::text(text);
        let m = query("error", false, false);
        let hits = search(&doc, &m);
        assert_eq!(hits.hits, [Hit::Line(6), Hit::Line(13)]);
        let page = page(&doc, &hits, &m, 0, 2, &Budget::default());
        assert_eq!(
            page.data,
            "5-line 5\n6-line 6\n7:line 7 ERROR\n8-line 8\n9-line 9\n--\n12-line 12\n13-line 13\n14:line 14 ERROR\n15-line 15\n16-line 16\n"
        );
        assert_eq!(
            header(&hits, &page, Kind::Text, None),
            "matching lines 1–2 of 2 · last page"
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
            let p = page(&doc, &hits, &m, start, 0, &budget);
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
            let as_regex = query(&regex::escape(pattern), true, true);
            assert_eq!(search(&doc, &literal), search(&doc, &as_regex), "{pattern}");
            assert_eq!(search(&doc, &literal).total, want, "{pattern}");
        }
    }

    #[test]
    fn bad_patterns_are_refused() {
        let q = |p: &str| {
            Matcher::new(&Query {
                pattern: p.into(),
                regex: true,
                case_sensitive: true,
            })
        };
        assert_eq!(q("").unwrap_err(), SearchError::Empty);
        assert!(matches!(q("(unclosed"), Err(SearchError::Invalid(_))));
        // A regex bomb: refused by the size limit, not run for ever.
        assert!(
            matches!(q("(((a{100}){100}){100})"), Err(SearchError::Invalid(m)) if m.contains("size limit"))
        );
    }
}
