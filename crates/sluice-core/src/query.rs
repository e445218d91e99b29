//! jq over a stored document, with jaq. This module compiles and runs a
//! filter; it has no resource limits of its own (jaq has none), so the
//! gateway runs it in a worker process with a memory limit and a clock.
//!
//! Functions that reach outside the document (`env`, `$ENV`, `input`,
//! `inputs`, `input_filename`) are not defined; `unwrap_valr`, which exits
//! the process on `halt`, is never called (`halt` ends the query with an
//! error instead).

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;

/// Names left out of the function set: what reaches outside the document.
/// (`halt`, `stderr` and `debug` stay: `halt` only ends the query here, as
/// `unwrap_valr` is never called, and the worker's stderr goes nowhere.)
const BANNED: [&str; 4] = ["env", "input", "inputs", "input_filename"];

/// Limits on what a query produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// The most outputs.
    pub max_outputs: usize,
    /// The most bytes of output (compact JSON, one value per line).
    pub max_bytes: usize,
}

/// The `[query]` settings: what one query may take, and the workers that
/// run queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuerySettings {
    /// Wall-clock time of one query (`timeout_s`, default 10 s).
    pub timeout: std::time::Duration,
    /// Memory one filter may allocate beyond its document (`max_memory_mb`,
    /// default 1024). Reading a document into jaq's values takes ~20 times
    /// its size, allowed on top (up to 24 times).
    pub max_memory_bytes: u64,
    /// Outputs of one query (`max_outputs`, default 100,000).
    pub max_outputs: usize,
    /// Bytes of output of one query (`max_output_mb`, default 64).
    pub max_output_bytes: usize,
    /// Worker processes, hence queries at once (`workers`, default 2).
    pub workers: usize,
    /// Stored bytes of the documents each worker keeps parsed for the next
    /// query (`cache_mb`, default 128; 0 parses every time). Parsed, they
    /// take ~20 times as much memory.
    pub cache_bytes: u64,
}

impl Default for QuerySettings {
    fn default() -> Self {
        Self {
            timeout: std::time::Duration::from_secs(10),
            max_memory_bytes: 1 << 30,
            max_outputs: 100_000,
            max_output_bytes: 64 << 20,
            workers: 2,
            cache_bytes: 128 << 20,
        }
    }
}

impl QuerySettings {
    /// The output limits.
    pub fn output_limits(&self) -> OutputLimits {
        OutputLimits {
            max_outputs: self.max_outputs,
            max_bytes: self.max_output_bytes,
        }
    }
}

/// Why a query failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// The filter does not parse, or names something undefined.
    #[error("{0}")]
    Compile(String),
    /// The document is not JSON.
    #[error("the stored result is not JSON: {0}")]
    Input(String),
    /// The filter raised an error at run time (its text cut by
    /// [`message_of`]).
    #[error("{FILTER_FAILED}: {0}")]
    Runtime(String),
    /// Too many outputs.
    #[error(
        "the filter produced more than {0} outputs: narrow it (e.g. `limit(100; …)`, `first(…)`, or a `select`)"
    )]
    TooManyOutputs(usize),
    /// Too much output.
    #[error("the filter's output passed {0} bytes: narrow it or `length` it")]
    TooLarge(usize),
}

/// How the message of a [`QueryError::Runtime`] begins.
pub const FILTER_FAILED: &str = "the filter failed";

/// What to add to run-time failure `why` of `filter` where jq would not
/// have failed: an assignment through a missing path, which jq creates and
/// jaq refuses (`cannot use null as iterable`, `index … out of bounds`:
/// words that do not say the path was missing).
pub fn failure_hint(filter: &str, why: &str) -> Option<&'static str> {
    let missing_path = why.contains("cannot use null as iterable") || why.contains("out of bounds");
    (missing_path && assigns(filter)).then_some(
        "jq would have created the missing path; sluice's engine (jaq) does not create paths through null or past an array's end on assignment: assign where the path exists, or make it first (`.a //= {} | .a.b = 1`, `. + {a: {b: 1}}`)",
    )
}

/// Whether `filter` may assign (`=`, `|=`, `+=`…, `setpath`): an `=` that
/// is not part of `==`, `!=`, `<=` or `>=`. (One inside a string counts
/// too: this only chooses a hint.)
fn assigns(filter: &str) -> bool {
    let bytes = filter.as_bytes();
    filter.contains("setpath")
        || bytes.iter().enumerate().any(|(i, &b)| {
            b == b'='
                && bytes.get(i + 1) != Some(&b'=')
                && !(i > 0 && matches!(bytes[i - 1], b'=' | b'!' | b'<' | b'>'))
        })
}

/// The most bytes kept of the start of a run-time error's text, and of
/// its end (see [`message_of`]).
pub const ERROR_ENDS: usize = 300;

/// The text of `error`, at most its first and its last [`ERROR_ENDS`]
/// bytes around a note of how many were left out. jaq's messages quote
/// the values a filter failed on whole (`cannot index [<the whole
/// document>] with "content"`): written out whole, such a message took
/// the document's size again under the worker's memory limit, and a cut
/// of its start lost what the filter indexed with, the part that says
/// what to mend. Never holds more than a few times [`ERROR_ENDS`].
pub fn message_of(error: &impl std::fmt::Display) -> String {
    use std::fmt::Write as _;
    let mut ends = Ends::default();
    let _ = write!(ends, "{error}");
    ends.joined()
}

/// The start and the end of a text written in pieces (see [`message_of`]).
#[derive(Default)]
struct Ends {
    head: String,
    /// Once a piece went past the head, the rest goes to the tail, so
    /// that the head stays the text's start.
    head_full: bool,
    /// The last bytes written (up to twice [`ERROR_ENDS`] between trims).
    tail: String,
    /// Every byte written.
    total: usize,
}

impl std::fmt::Write for Ends {
    fn write_str(&mut self, piece: &str) -> std::fmt::Result {
        self.total += piece.len();
        let mut rest = piece;
        if !self.head_full {
            let fits = floor_boundary(rest, ERROR_ENDS - self.head.len());
            self.head.push_str(&rest[..fits]);
            rest = &rest[fits..];
            self.head_full = !rest.is_empty();
        }
        if rest.len() >= ERROR_ENDS {
            self.tail.clear();
            rest = &rest[ceil_boundary(rest, rest.len() - ERROR_ENDS)..];
        }
        self.tail.push_str(rest);
        if self.tail.len() > 2 * ERROR_ENDS {
            let from = ceil_boundary(&self.tail, self.tail.len() - ERROR_ENDS);
            self.tail.drain(..from);
        }
        Ok(())
    }
}

impl Ends {
    fn joined(self) -> String {
        let tail =
            &self.tail[ceil_boundary(&self.tail, self.tail.len().saturating_sub(ERROR_ENDS))..];
        match self.total - self.head.len() - tail.len() {
            0 => self.head + tail,
            left_out => format!(
                "{}…({} bytes left out)…{tail}",
                self.head,
                crate::format::group(left_out as u64)
            ),
        }
    }
}

/// The largest char boundary of `text` at or below `at`.
fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The smallest char boundary of `text` at or above `at`.
fn ceil_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// A document read into jaq's values once, to run any number of filters on.
#[derive(Clone)]
pub struct Parsed(Val);

impl std::fmt::Debug for Parsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Parsed(..)")
    }
}

impl Parsed {
    /// Reads a JSON document.
    pub fn json(doc: &[u8]) -> Result<Self, QueryError> {
        jaq_json::read::parse_single(doc)
            .map(Self)
            .map_err(|e| QueryError::Input(e.to_string()))
    }

    /// Reads a text as the JSON array of its lines (`\n` or `\r\n`
    /// ended), which is how text results are queried.
    pub fn lines(text: &str) -> Self {
        Self(
            text.lines()
                .map(|line| Val::utf8_str(line.as_bytes().to_vec()))
                .collect(),
        )
    }
}

/// What a filter printed: compact JSON values, one per line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs {
    /// How many values.
    pub count: usize,
    /// The values, each on its own line (compact JSON has no raw newline).
    pub text: String,
}

impl Outputs {
    /// The values one by one.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.text.split('\n').take(self.count)
    }

    /// The values as one JSON array.
    pub fn array(&self) -> String {
        let mut array = String::with_capacity(self.text.len() + 2);
        array.push('[');
        for (i, value) in self.values().enumerate() {
            if i > 0 {
                array.push(',');
            }
            array.push_str(value);
        }
        array.push(']');
        array
    }
}

/// Compiles `filter` with jq's standard library minus [`BANNED`].
fn compile(filter: &str) -> Result<jaq_core::Filter<data::JustLut<Val>>, QueryError> {
    let defs = prelude();
    let funs = jaq_core::funs()
        .chain(jaq_std::funs())
        .chain(jaq_json::funs())
        .filter(|(name, _, _)| !BANNED.contains(name))
        .chain(selectors());
    let loader = Loader::new(defs);
    let arena = Arena::default();
    let modules = loader
        .load(
            &arena,
            File {
                code: filter,
                path: (),
            },
        )
        .map_err(|errors| QueryError::Compile(describe_load_errors(filter, errors)))?;
    Compiler::default()
        .with_funs(funs)
        .compile(modules)
        .map_err(|errors| QueryError::Compile(describe_compile_errors(filter, errors)))
}

/// The definitions every filter is compiled with: jaq's, less the type
/// selectors [`selectors`] implements, and [`jq_defs`]. Parsed once per
/// thread, not for every filter: a worker compiles each query it runs.
fn prelude() -> impl Iterator<Item = jaq_core::load::parse::Def<&'static str>> {
    thread_local! {
        static PRELUDE: Vec<jaq_core::load::parse::Def<&'static str>> = jaq_core::defs()
            .chain(jaq_std::defs().filter(|def| !SELECTORS.contains(&def.name)))
            .chain(jaq_json::defs())
            .chain(jq_defs())
            .collect();
    }
    PRELUDE.with(|defs| defs.clone()).into_iter()
}

/// What jq 1.6 defines and jaq does not (`@csv`, `@tsv`, `IN`, `INDEX`,
/// `leaf_paths`, `tostream`, `truncate_stream`), in jq over jaq's own
/// definitions (`query/defs.jq`).
fn jq_defs() -> impl Iterator<Item = jaq_core::load::parse::Def<&'static str>> {
    jaq_core::load::parse(include_str!("query/defs.jq"), |p| p.defs())
        .expect("query/defs.jq parses (held by query::tests)")
        .into_iter()
}

/// The type selectors that [`selectors`] implements natively.
const SELECTORS: [&str; 9] = [
    "values",
    "nulls",
    "booleans",
    "numbers",
    "strings",
    "arrays",
    "objects",
    "iterables",
    "scalars",
];

/// `numbers`, `strings`… as native filters, with paths and updates.
/// jaq-std defines them in jq (`def numbers: select(isnumber)`, and
/// `isnumber` is two comparisons), which made `[.. | numbers]` slower than
/// jq 1.6; natively they cost a type test.
fn selectors() -> impl Iterator<Item = jaq_core::native::Fun<data::JustLut<Val>>> {
    use jaq_core::box_iter::box_once;
    macro_rules! selector {
        ($name:literal, $pattern:pat) => {
            (
                $name,
                Box::new([]) as Box<[jaq_core::Bind]>,
                jaq_core::Native::new(|cv| match cv.1 {
                    v @ $pattern => box_once(Ok(v)),
                    _ => Box::new(core::iter::empty()),
                })
                .with_paths(|cv| match cv.1 {
                    (v @ $pattern, path) => box_once(Ok((v, path))),
                    _ => Box::new(core::iter::empty()),
                })
                .with_update(|cv, f| match cv.1 {
                    v @ $pattern => f(v),
                    v => box_once(Ok(v)),
                }),
            )
        };
    }
    [
        selector!(
            "values",
            Val::Bool(_) | Val::Num(_) | Val::TStr(_) | Val::BStr(_) | Val::Arr(_) | Val::Obj(_)
        ),
        selector!("nulls", Val::Null),
        selector!("booleans", Val::Bool(_)),
        selector!("numbers", Val::Num(_)),
        selector!("strings", Val::TStr(_) | Val::BStr(_)),
        selector!("arrays", Val::Arr(_)),
        selector!("objects", Val::Obj(_)),
        selector!("iterables", Val::Arr(_) | Val::Obj(_)),
        selector!(
            "scalars",
            Val::Null | Val::Bool(_) | Val::Num(_) | Val::TStr(_) | Val::BStr(_)
        ),
    ]
    .into_iter()
}

/// Runs `filter` over a parsed document.
pub fn run_parsed(filter: &str, doc: &Parsed, limits: OutputLimits) -> Result<Outputs, QueryError> {
    let compiled = compile(filter)?;
    let ctx = Ctx::<data::JustLut<Val>>::new(&compiled.lut, Vars::new([]));
    let mut outputs = Outputs::default();
    for out in compiled.id.run((ctx, doc.0.clone())) {
        let value = match out {
            Ok(v) => v,
            Err(exn) => match exn.get_err() {
                Ok(err) => return Err(QueryError::Runtime(message_of(&err))),
                Err(_) => return Err(QueryError::Runtime("the filter halted".into())),
            },
        };
        if outputs.count == limits.max_outputs {
            return Err(QueryError::TooManyOutputs(limits.max_outputs));
        }
        // jaq can make values JSON cannot hold: NaN and infinities become
        // what jq prints for them (null, ±1.7976931348623157e308), a
        // non-string object key is refused.
        let mut bytes = false;
        let value = match as_json(&value, &mut bytes) {
            Ok(None) => value,
            Ok(Some(fixed)) => fixed,
            Err(key) => {
                return Err(QueryError::Runtime(format!(
                    "output {} is not JSON: it has an object key that is not a string ({}); JSON keys are strings (`tostring` them)",
                    outputs.count + 1,
                    key.chars().take(80).collect::<String>()
                )));
            }
        };
        let start = outputs.text.len();
        if outputs.count > 0 {
            outputs.text.push('\n');
        }
        use std::fmt::Write;
        let _ = write!(outputs.text, "{value}");
        if outputs.text.len() > limits.max_bytes {
            return Err(QueryError::TooLarge(limits.max_bytes));
        }
        let printed = outputs.text[start..].trim_start_matches('\n');
        if bytes && serde_json::from_str::<serde::de::IgnoredAny>(printed).is_err() {
            return Err(QueryError::Runtime(format!(
                "output {} is not valid JSON ({}): it holds a byte string",
                outputs.count + 1,
                printed.chars().take(80).collect::<String>()
            )));
        }
        outputs.count += 1;
    }
    Ok(outputs)
}

/// `value` made JSON: `Ok(None)` when it is already (the usual case, no
/// copy), `Ok(Some(..))` with NaN as null and infinities (computed, or
/// literals such as `1e1000`) as ±`f64::MAX`, as jq prints them; `Err` with
/// the first object key that is not a string. Sets `bytes` when a byte
/// string leaves the printed text to be checked.
fn as_json(value: &Val, bytes: &mut bool) -> Result<Option<Val>, String> {
    use jaq_json::Num;
    let finite = |f: f64| {
        if f.is_nan() {
            Val::Null
        } else {
            Val::from(f64::MAX.copysign(f))
        }
    };
    match value {
        Val::Null | Val::Bool(_) | Val::TStr(_) => Ok(None),
        Val::Num(Num::Float(f)) => Ok((!f.is_finite()).then(|| finite(*f))),
        Val::Num(Num::Dec(d)) => Ok(d
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_infinite())
            .map(finite)),
        Val::Num(_) => Ok(None),
        Val::BStr(_) => {
            *bytes = true;
            Ok(None)
        }
        Val::Arr(items) => {
            let mut fixed: Option<Vec<Val>> = None;
            for (i, item) in items.iter().enumerate() {
                match (as_json(item, bytes)?, &mut fixed) {
                    (Some(new), None) => {
                        let mut copy = items[..i].to_vec();
                        copy.push(new);
                        fixed = Some(copy);
                    }
                    (Some(new), Some(copy)) => copy.push(new),
                    (None, Some(copy)) => copy.push(item.clone()),
                    (None, None) => {}
                }
            }
            Ok(fixed.map(|items| items.into_iter().collect()))
        }
        Val::Obj(map) => {
            let mut fixed: Option<jaq_json::Map> = None;
            for (i, (key, item)) in map.iter().enumerate() {
                if !matches!(key, Val::TStr(_)) {
                    return Err(key.to_string());
                }
                match (as_json(item, bytes)?, &mut fixed) {
                    (Some(new), None) => {
                        let mut copy: jaq_json::Map = map
                            .iter()
                            .take(i)
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        copy.insert(key.clone(), new);
                        fixed = Some(copy);
                    }
                    (Some(new), Some(copy)) => {
                        copy.insert(key.clone(), new);
                    }
                    (None, Some(copy)) => {
                        copy.insert(key.clone(), item.clone());
                    }
                    (None, None) => {}
                }
            }
            Ok(fixed.map(Val::obj))
        }
    }
}

/// Runs `filter` over the JSON `doc`; the outputs as compact JSON, one per
/// entry. (Parses the document each time: see [`Parsed`] to parse once.)
pub fn run(filter: &str, doc: &[u8], limits: OutputLimits) -> Result<Vec<String>, QueryError> {
    let parsed = Parsed::json(doc)?;
    let outputs = run_parsed(filter, &parsed, limits)?;
    Ok(outputs.values().map(str::to_owned).collect())
}

/// `filter` with a caret under byte `offset`.
fn caret(filter: &str, offset: usize) -> String {
    let offset = offset.min(filter.len());
    let line_start = filter[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = filter[offset..]
        .find('\n')
        .map_or(filter.len(), |i| offset + i);
    let column = filter[line_start..offset].chars().count();
    format!("{}\n{}^", &filter[line_start..line_end], " ".repeat(column))
}

/// The byte offset of `part` in `whole`, if it is a slice of it.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let start = part.as_ptr() as usize;
    let base = whole.as_ptr() as usize;
    (start >= base && start + part.len() <= base + whole.len()).then(|| start - base)
}

fn describe_load_errors<P>(filter: &str, errors: jaq_core::load::Errors<&str, P>) -> String {
    let mut out = Vec::new();
    for (_, error) in errors {
        match error {
            jaq_core::load::Error::Lex(errs) => {
                for (expected, found) in errs {
                    let at = offset_in(filter, found).unwrap_or(filter.len());
                    out.push(format!(
                        "syntax error: expected {}\n{}",
                        expected.as_str(),
                        caret(filter, at)
                    ));
                }
            }
            jaq_core::load::Error::Parse(errs) => {
                for (expected, found) in errs {
                    let at = offset_in(filter, found).unwrap_or(filter.len());
                    let found = if found.is_empty() {
                        "the end".to_owned()
                    } else {
                        format!("`{}`", found.chars().take(20).collect::<String>())
                    };
                    out.push(format!(
                        "syntax error: expected {}, found {found}\n{}",
                        expected.as_str(),
                        caret(filter, at)
                    ));
                }
            }
            jaq_core::load::Error::Io(errs) => {
                for (path, message) in errs {
                    out.push(format!("cannot load `{path}`: {message}"));
                }
            }
        }
    }
    out.join("\n")
}

fn describe_compile_errors<P>(filter: &str, errors: jaq_core::compile::Errors<&str, P>) -> String {
    let mut out = Vec::new();
    for (_, errs) in errors {
        for (name, undefined) in errs {
            let at = offset_in(filter, name).unwrap_or(0);
            out.push(format!(
                "undefined {}: `{name}`\n{}",
                undefined.as_str(),
                caret(filter, at)
            ));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: OutputLimits = OutputLimits {
        max_outputs: 1000,
        max_bytes: 1 << 20,
    };

    fn q(filter: &str, doc: &str) -> Result<Vec<String>, QueryError> {
        run(filter, doc.as_bytes(), LIMITS)
    }

    /// A text written in pieces of `size` bytes (cut at char boundaries),
    /// as a `Display` writes a value in many calls.
    struct InPieces<'a>(&'a str, usize);

    impl std::fmt::Display for InPieces<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            let mut rest = self.0;
            while !rest.is_empty() {
                let cut = ceil_boundary(rest, self.1.min(rest.len()));
                f.write_str(&rest[..cut])?;
                rest = &rest[cut..];
            }
            Ok(())
        }
    }

    /// A run-time error's message keeps its start and its end, says how
    /// many bytes it left out between them, and never cuts a character,
    /// however the error's text comes in pieces.
    #[test]
    fn an_error_message_keeps_its_ends_whatever_its_pieces() {
        let texts = [
            String::new(),
            "cannot index \"x\" with \"b\"".to_owned(),
            "a".repeat(ERROR_ENDS * 2),
            "a".repeat(ERROR_ENDS * 2 + 1),
            format!(
                "cannot index [\"{}\"] with \"content\"",
                "line ".repeat(60_000)
            ),
            format!("cannot index \"{}\" with 0", "é".repeat(ERROR_ENDS + 3)),
            "é€😀".repeat(500),
            // A character that does not fit the head, then one that would.
            format!("{}é{}", "a".repeat(ERROR_ENDS - 1), "b".repeat(1000)),
        ];
        for text in &texts {
            let head = floor_boundary(text, ERROR_ENDS);
            let tail = ceil_boundary(text, text.len().saturating_sub(ERROR_ENDS)).max(head);
            let expected = if tail == head {
                text.clone()
            } else {
                format!(
                    "{}…({} bytes left out)…{}",
                    &text[..head],
                    crate::format::group((tail - head) as u64),
                    &text[tail..]
                )
            };
            for size in [
                1,
                2,
                7,
                ERROR_ENDS - 1,
                ERROR_ENDS,
                ERROR_ENDS + 1,
                1000,
                usize::MAX,
            ] {
                assert_eq!(
                    message_of(&InPieces(text, size)),
                    expected,
                    "{} bytes in pieces of {size}",
                    text.len()
                );
            }
        }
    }

    /// jaq's message quotes the value a filter failed on whole: the
    /// answer keeps what the filter indexed with, at the end, within a
    /// bounded length.
    #[test]
    fn a_failure_on_a_large_value_says_what_it_indexed_with() {
        let doc = format!("[{:?}]", "line ".repeat(60_000));
        let Err(QueryError::Runtime(message)) = q(".content", &doc) else {
            panic!("indexing an array with a key fails");
        };
        assert!(message.len() < 3 * ERROR_ENDS, "{} bytes", message.len());
        assert!(
            message.starts_with("cannot index [\"line line"),
            "{message}"
        );
        assert!(message.ends_with("line \"] with \"content\""), "{message}");
        assert!(message.contains("bytes left out)"), "{message}");
        let Err(small) = q(".a.b", r#"{"a":"x"}"#) else {
            panic!("indexing a string with a key fails");
        };
        assert_eq!(
            small.to_string(),
            "the filter failed: cannot index \"x\" with \"b\""
        );
    }

    /// An assignment through a missing path fails in jaq where jq would
    /// create it: the failure says so; other failures, and comparisons,
    /// get no such hint.
    #[test]
    fn an_assignment_through_a_missing_path_is_explained() {
        let doc = r#"{"items":[{"x":1}]}"#;
        for filter in [
            ".summary.count = 5",
            ".summary.count |= 5",
            ".summary.count += 1",
            ".items[5].x = 1",
            r#"setpath(["a", "b"]; 1)"#,
        ] {
            let Err(QueryError::Runtime(why)) = q(filter, doc) else {
                panic!("{filter} creates a path in jq, not in jaq");
            };
            assert!(failure_hint(filter, &why).is_some(), "{filter}: {why}");
        }
        // The hint's way works.
        assert_eq!(
            q(".summary //= {} | .summary.count = 5 | .summary", doc).unwrap(),
            [r#"{"count":5}"#]
        );
        for (filter, why) in [
            (
                ".items[0].x == 1",
                "cannot use null as iterable (array or object)",
            ),
            (
                ".a != 1 and .b <= 2 and .c >= 3",
                "cannot use null as iterable",
            ),
            (".items[0].x = 1", "cannot index \"x\" with \"b\""),
        ] {
            assert_eq!(failure_hint(filter, why), None, "{filter}");
        }
    }

    #[test]
    fn filters_run_and_print_compact_json() {
        let doc = r#"{"rows":[{"n":"a","x":3},{"n":"b","x":9}]}"#;
        assert_eq!(q(".rows[] | .n", doc).unwrap(), ["\"a\"", "\"b\""]);
        assert_eq!(
            q("[.rows[] | select(.x > 5)]", doc).unwrap(),
            [r#"[{"n":"b","x":9}]"#]
        );
        assert_eq!(q("[.. | numbers] | add", doc).unwrap(), ["12"]);
        assert_eq!(
            q(".rows | group_by(.x > 5) | map(length)", doc).unwrap(),
            ["[1,1]"]
        );
    }

    #[test]
    fn native_type_selectors_run_give_paths_and_update() {
        let doc = r#"{"a":[1,"x",null,true,{"b":2.5}],"c":"y"}"#;
        assert_eq!(q("[.. | numbers] | add", doc).unwrap(), ["3.5"]);
        assert_eq!(
            q("[.. | strings], [.. | nulls], [.. | booleans]", doc).unwrap(),
            [r#"["x","y"]"#, "[null]", "[true]"]
        );
        assert_eq!(
            q("[.. | arrays | length], [.. | objects | length]", doc).unwrap(),
            ["[5]", "[2,1]"]
        );
        assert_eq!(
            q(
                "[.a[] | scalars], [.a[] | iterables], [.a[] | values] | length",
                doc
            )
            .unwrap(),
            ["4", "1", "4"]
        );
        assert_eq!(
            q("[path(.. | numbers)]", doc).unwrap(),
            [r#"[["a",0],["a",4,"b"]]"#]
        );
        assert_eq!(
            q("(.. | numbers) |= . * 2", doc).unwrap(),
            [r#"{"a":[2,"x",null,true,{"b":5.0}],"c":"y"}"#]
        );
        assert_eq!(q("[paths(strings)]", doc).unwrap(), [r#"[["a",1],["c"]]"#]);
        // The rest of the standard library still finds them.
        assert_eq!(q("[[1,[2]],3] | flatten", "null").unwrap(), ["[1,2,3]"]);
    }

    #[test]
    fn mistakes_say_where_and_what() {
        let err = q(".rows[] | selec(.x)", "{}").unwrap_err().to_string();
        assert!(err.starts_with("undefined filter: `selec`"), "{err}");
        assert!(err.ends_with(".rows[] | selec(.x)\n          ^"), "{err}");
        let err = q(".a | [", "{}").unwrap_err().to_string();
        assert!(err.starts_with("syntax error: expected"), "{err}");
        assert!(err.contains("^"), "{err}");
        for outside in ["env", "input", "inputs", "$ENV", "input_filename"] {
            assert!(q(outside, "{}").is_err(), "{outside} must not be defined");
        }
        assert!(matches!(
            q(".a + 1", r#"{"a":"x"}"#),
            Err(QueryError::Runtime(_))
        ));
        assert_eq!(
            q("halt", "{}"),
            Err(QueryError::Runtime("the filter halted".into()))
        );
        assert!(matches!(q(".", "not json"), Err(QueryError::Input(_))));
    }

    #[test]
    fn outputs_are_bounded_and_always_json() {
        let limits = OutputLimits {
            max_outputs: 10,
            max_bytes: 1000,
        };
        assert_eq!(
            run("range(100)", b"null", limits),
            Err(QueryError::TooManyOutputs(10))
        );
        assert_eq!(
            run("\"x\" * 2000", b"null", limits),
            Err(QueryError::TooLarge(1000))
        );
        // What jq prints for NaN and infinities; keys must be strings.
        assert_eq!(
            q(
                "[nan, 1], {a: infinite}, -infinite, 1e1000, [1, {b: [nan]}]",
                "null"
            )
            .unwrap(),
            [
                "[null,1]",
                "{\"a\":1.7976931348623157e308}",
                "-1.7976931348623157e308",
                "1.7976931348623157e308",
                "[1,{\"b\":[null]}]"
            ]
        );
        let err = q("{(1): 2}", "null").unwrap_err().to_string();
        assert!(err.contains("key that is not a string (1)"), "{err}");
    }
}
