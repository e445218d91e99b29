//! Fuzz targets for sluice's JSON-RPC layer (`sluice::jsonrpc`), as
//! property tests: what it reads comes from clients and upstreams.
//!
//! - The envelope parse: for any message (any members, values, key order,
//!   whitespace, number spellings and escapes), each span covers exactly
//!   its member's value as written (checked against `serde_json::Value`).
//! - Splicing: a new id or progress token changes only its span; the spans
//!   of the result are those a fresh parse finds; an id spliced back gives
//!   the original bytes.
//! - `RawObject`: an untouched object writes out byte-identical; after any
//!   inserts, removals and renames every other member keeps its raw text.
//! - `salvage_id`: finds the id of any valid message, and of one damaged
//!   before or after the id (bad UTF-8, 10,000-deep nesting, truncation);
//!   never names a wrong id; never panics on any bytes.
//! - Framing and SSE: the same frames and events for any chunking.
//! - A million levels of nesting overflow no stack anywhere.
//!
//! The framing corpus (`tests/fuzz/framing/`) runs through the envelope
//! parse first; `PROPTEST_CASES` sets how many generated cases follow (64 by
//! default); failures are kept in `tests/fuzz/regressions/jsonrpc.txt`.

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::Value;
use sluice::jsonrpc::{
    Frame, Id, Kind, LineSplitter, Member, Message, MessageError, RawObject, SseParser, salvage_id,
    splice, write_event,
};

fn config() -> Config {
    let mut config = Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fuzz/regressions/jsonrpc.txt"
        )))),
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    config
}

// ---------------------------------------------------------------------------
// Generators: JSON text as senders write it.

/// Whitespace between tokens.
fn ws() -> impl Strategy<Value = &'static str> {
    prop_oneof![6 => Just(""), 2 => Just(" "), 1 => Just("\n  "), 1 => Just("\t"), 1 => Just("\r\n")]
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "-0",
            "1.50",
            "1e2",
            "1E-7",
            "-1.5e+3",
            "0.1e3",
            "18446744073709551616",
            "123456789012345678901234567890",
            "1e300",
            "2.0",
        ])
        .prop_map(str::to_owned),
    ]
}

/// `s` with every character escaped as `\uXXXX` (surrogate pairs beyond
/// the BMP).
fn escape_all(s: &str) -> String {
    let mut out = String::from("\"");
    for unit in s.encode_utf16() {
        out.push_str(&format!("\\u{unit:04x}"));
    }
    out.push('"');
    out
}

/// A JSON string as text: plain, serialized, escaped every way.
fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z_/]{0,8}".prop_map(|s| format!("\"{s}\"")),
        2 => any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        1 => "[a-zé]{0,4}".prop_map(|s| escape_all(&s)),
        1 => Just(r#""\"\\\/\b\f\n\r\t é 😀 [{""#.to_owned()),
    ]
}

/// An object key: few names, so that duplicates and routed names occur.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b", "c", "name", "uri", "_meta", "progressToken", "x-vendor"])
            .prop_map(|k| format!("\"{k}\"")),
        1 => prop::sample::select(vec!["a", "name", "_meta", "progressToken"]).prop_map(escape_all),
    ]
}

/// Renders `[item, …]` with whitespace.
fn array_text(items: Vec<(&str, String, &str)>) -> String {
    let inner: Vec<String> = items
        .into_iter()
        .map(|(a, v, b)| format!("{a}{v}{b}"))
        .collect();
    format!("[{}]", inner.join(","))
}

/// One member as written: key, whitespace, colon, whitespace, value.
type MemberText = (String, &'static str, &'static str, String);

fn object_text(pad: &str, members: &[MemberText]) -> String {
    let inner: Vec<String> = members
        .iter()
        .map(|(k, a, b, v)| format!("{pad}{k}{a}:{b}{v}{pad}"))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn member(value: impl Strategy<Value = String>) -> impl Strategy<Value = MemberText> {
    (key(), ws(), ws(), value)
}

/// Any JSON value as text, nested a few levels.
fn json() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        3 => number(),
        3 => string(),
        1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec((ws(), inner.clone(), ws()), 0..5).prop_map(array_text),
            (ws(), prop::collection::vec(member(inner), 0..5))
                .prop_map(|(pad, members)| object_text(pad, &members)),
        ]
    })
}

/// A JSON object as text, and its members.
fn object() -> impl Strategy<Value = (String, Vec<MemberText>)> {
    (ws(), prop::collection::vec(member(json()), 0..6))
        .prop_map(|(pad, members)| (object_text(pad, &members), members))
}

/// A message: its text, its kind, and its envelope members' texts.
#[derive(Debug, Clone)]
struct Generated {
    text: String,
    kind: Kind,
    /// `(name, value text)` of the envelope members it has.
    members: Vec<(&'static str, String)>,
}

fn id_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u32>().prop_map(|n| n.to_string()),
        prop::sample::select(vec!["-1", "1e2", "1.50", "0"]).prop_map(str::to_owned),
        string(),
    ]
}

fn message() -> impl Strategy<Value = Generated> {
    let kind = prop::sample::select(vec![
        Kind::Request,
        Kind::Notification,
        Kind::Response,
        Kind::Error,
    ]);
    let params = prop_oneof![
        2 => object().prop_map(|(text, _)| Some(text)),
        1 => prop::collection::vec((ws(), json(), ws()), 0..3).prop_map(|items| Some(array_text(items))),
        1 => Just(None),
    ];
    let error =
        (any::<i32>(), string(), prop::option::of(json())).prop_map(|(code, message, data)| {
            match data {
                Some(data) => format!(r#"{{"code":{code},"message":{message},"data":{data}}}"#),
                None => format!(r#"{{"code":{code}, "message" : {message}}}"#),
            }
        });
    let extras = prop::collection::vec(
        (
            prop::sample::select(vec!["\"x-trace\"", "\"_meta\"", "\"other\""]),
            json(),
        ),
        0..3,
    );
    (
        kind,
        id_text(),
        prop::bool::weighted(0.1),
        string(),
        params,
        json(),
        error,
        extras,
        prop::collection::vec((ws(), ws(), ws()), 10),
        any::<prop::sample::Index>(),
        prop::bool::ANY,
    )
        .prop_flat_map(
            |(kind, id, null_id, method, params, result, error, extras, pads, _, escaped_id)| {
                let mut members: Vec<(&'static str, String)> = vec![("jsonrpc", "\"2.0\"".into())];
                match kind {
                    Kind::Request | Kind::Notification => {
                        if kind == Kind::Request {
                            members.push(("id", id));
                        }
                        members.push(("method", method));
                        if let Some(params) = params {
                            members.push(("params", params));
                        }
                    }
                    Kind::Response => {
                        members.push(("id", id));
                        members.push(("result", result));
                    }
                    Kind::Error => {
                        members.push(("id", if null_id { "null".into() } else { id }));
                        members.push(("error", error));
                    }
                }
                let envelope = members.clone();
                let mut all: Vec<(String, String)> = members
                    .into_iter()
                    .map(|(k, v)| {
                        let key = if k == "id" && escaped_id {
                            r#""\u0069d""#.to_owned()
                        } else {
                            format!("\"{k}\"")
                        };
                        (key, v)
                    })
                    .collect();
                all.extend(extras.into_iter().map(|(k, v)| (k.to_owned(), v)));
                (
                    Just(all).prop_shuffle(),
                    Just(envelope),
                    Just(kind),
                    Just(pads),
                )
            },
        )
        .prop_map(|(all, envelope, kind, pads)| {
            let inner: Vec<String> = all
                .iter()
                .zip(pads.iter().cycle())
                .map(|((k, v), (a, b, c))| format!("{a}{k}{b}:{c}{v}{a}"))
                .collect();
            Generated {
                text: format!("{}{{{}}}{}", pads[0].0, inner.join(","), pads[1].2),
                kind,
                members: envelope,
            }
        })
}

fn member_of(name: &str) -> Member {
    match name {
        "id" => Member::Id,
        "method" => Member::Method,
        "params" => Member::Params,
        "result" => Member::Result,
        _ => Member::Error,
    }
}

const ENVELOPE: [(&str, Member); 5] = [
    ("id", Member::Id),
    ("method", Member::Method),
    ("params", Member::Params),
    ("result", Member::Result),
    ("error", Member::Error),
];

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

// ---------------------------------------------------------------------------
// The envelope parse and splicing.

/// Checks the envelope of `generated` against what was written and what
/// `serde_json` reads; returns the parsed message.
fn check_envelope(generated: &Generated) -> Result<Message, TestCaseError> {
    let text = &generated.text;
    let message = Message::parse(Bytes::copy_from_slice(text.as_bytes()))
        .map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
    prop_assert_eq!(message.kind(), generated.kind);
    let bytes = message.as_bytes().clone();
    prop_assert_eq!(
        &bytes[..],
        text.trim_matches([' ', '\t', '\n', '\r']).as_bytes()
    );
    let whole: Value = serde_json::from_slice(&bytes).unwrap();
    for (name, member) in ENVELOPE {
        let written = generated
            .members
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v);
        let span = message.span(member);
        prop_assert_eq!(span.is_some(), written.is_some(), "{} of {}", name, text);
        if let (Some(span), Some(written)) = (span, written) {
            let raw = &bytes[span.clone()];
            prop_assert_eq!(raw, written.as_bytes(), "the span of {} is its text", name);
            prop_assert!(!is_space(raw[0]) && !is_space(raw[raw.len() - 1]));
            let value: Value = serde_json::from_slice(raw).unwrap();
            prop_assert_eq!(&value, &whole[name], "{}", name);
        }
    }
    prop_assert_eq!(message.method(), whole["method"].as_str());
    let id = message.id();
    prop_assert_eq!(
        id.as_ref().map(Id::as_json),
        generated
            .members
            .iter()
            .find(|(n, v)| *n == "id" && v != "null")
            .map(|(_, v)| v.as_str())
    );
    prop_assert_eq!(salvage_id(&bytes), id, "salvage_id agrees with the parse");
    Ok(message)
}

/// The bytes `after` differ from `before` only in one range of `before`
/// replaced: that range, and what replaced it.
fn difference<'a>(before: &'a [u8], after: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    let prefix = before.iter().zip(after).take_while(|(a, b)| a == b).count();
    let suffix = before[prefix..]
        .iter()
        .rev()
        .zip(after[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    (
        &before[prefix..before.len() - suffix],
        &after[prefix..after.len() - suffix],
    )
}

fn check_splices(message: &Message, new_id: &Id, token: &Id) -> Result<(), TestCaseError> {
    let bytes = message.as_bytes();
    // A new id: only the id's span changes; the spans are a fresh parse's.
    let spliced = message.with_id(new_id);
    let fresh = Message::parse(spliced.as_bytes().clone()).unwrap();
    for (_, member) in ENVELOPE {
        prop_assert_eq!(spliced.span(member), fresh.span(member));
    }
    prop_assert_eq!(spliced.kind(), fresh.kind());
    prop_assert_eq!(spliced.id(), Some(new_id.clone()));
    let expected = match message.span(Member::Id) {
        Some(span) => splice(bytes, &[(span, new_id.as_json())]).unwrap(),
        None => splice(bytes, &[(1..1, &format!("\"id\":{new_id},"))]).unwrap(),
    };
    prop_assert_eq!(&spliced.as_bytes()[..], &expected[..]);
    if let Some(id) = message.id() {
        let back = spliced.with_id(&id);
        prop_assert_eq!(back.as_bytes(), bytes, "spliced back");
    }

    // A progress token: the message reads as before with the token set,
    // and the bytes changed in one place, the old token (or `_meta`) at most.
    let params = message.params();
    if params.is_some_and(|p| p.starts_with('[')) {
        prop_assert!(message.with_progress_token(token).is_err());
        return Ok(());
    }
    if matches!(message.kind(), Kind::Response | Kind::Error) {
        return Ok(());
    }
    let with_token = message
        .with_progress_token(token)
        .map_err(|e| TestCaseError::fail(format!("{e}")))?;
    let mut expected: Value = serde_json::from_slice(bytes).unwrap();
    let params = expected
        .as_object_mut()
        .unwrap()
        .entry("params")
        .or_insert_with(|| serde_json::json!({}));
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert_with(|| serde_json::json!({}));
    if !meta.is_object() {
        *meta = serde_json::json!({});
    }
    meta["progressToken"] = serde_json::from_str(token.as_json()).unwrap();
    let got: Value = serde_json::from_slice(with_token.as_bytes()).unwrap();
    prop_assert_eq!(got, expected);
    // What was replaced: nothing (an insertion), the old token, or a
    // `_meta` that was not an object.
    let (removed, _) = difference(bytes, with_token.as_bytes());
    let old_meta = message
        .params()
        .and_then(|p| RawObject::parse(p).ok())
        .and_then(|p| p.get("_meta").map(|m| m.to_owned()));
    let old_token = old_meta
        .as_deref()
        .and_then(|m| RawObject::parse(m).ok())
        .and_then(|m| m.get("progressToken").map(|t| t.to_owned()));
    // Compared as bytes: an old token and a new one may share the first
    // bytes of a character (`"🕴"` and `"🕵"`), and what differs is then
    // part of one, not text.
    let within = |text: &str| text.as_bytes().windows(removed.len()).any(|w| w == removed);
    prop_assert!(
        removed.is_empty()
            || old_token.as_deref().is_some_and(within)
            || old_meta
                .as_deref()
                .is_some_and(|m| !m.starts_with('{') && within(m)),
        "only the old token or _meta was replaced: {:?} of {:?}",
        String::from_utf8_lossy(removed),
        String::from_utf8_lossy(bytes)
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn spans_cover_exactly_the_envelope_members_and_splices_change_only_them(
        generated in message(),
        new_id in id_text(),
        token in id_text(),
    ) {
        let message = check_envelope(&generated)?;
        let new_id = Id::from_json(&new_id).unwrap();
        let token = Id::from_json(&token).unwrap();
        check_splices(&message, &new_id, &token)?;
    }

    #[test]
    fn splice_keeps_every_byte_outside_the_edits(
        raw in prop::collection::vec(any::<u8>(), 0..64),
        cuts in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, "[a-z]{0,3}"), 0..4),
    ) {
        // Non-overlapping edits, given in a shuffled order.
        let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
        let mut at = 0;
        let mut positions: Vec<usize> = cuts.iter().map(|(i, _, _)| i.index(raw.len() + 1)).collect();
        positions.sort();
        for ((_, len, text), start) in cuts.iter().zip(positions) {
            let start = start.max(at);
            let end = (start + len).min(raw.len());
            edits.push((start..end, text.clone()));
            at = end.max(start);
        }
        let mut expected = Vec::new();
        let mut from = 0;
        for (range, text) in &edits {
            expected.extend_from_slice(&raw[from..range.start]);
            expected.extend_from_slice(text.as_bytes());
            from = range.end;
        }
        expected.extend_from_slice(&raw[from..]);
        edits.reverse();
        let borrowed: Vec<(std::ops::Range<usize>, &str)> =
            edits.iter().map(|(r, t)| (r.clone(), t.as_str())).collect();
        // Reversed: insertions at one place then come in the other order,
        // unless they are at distinct places.
        let distinct = borrowed.windows(2).all(|w| w[0].0 != w[1].0 || !w[0].0.is_empty());
        if distinct {
            prop_assert_eq!(splice(&raw, &borrowed).unwrap(), expected);
        }
    }

    #[test]
    fn salvage_id_finds_the_id_of_a_damaged_message_and_never_a_wrong_one(
        generated in message(),
        damage in 0usize..4,
        bad in prop::collection::vec(prop::sample::select(vec![0xC0u8, 0xC1, 0xF5, 0xF8, 0xFE, 0xFF]), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let message = check_envelope(&generated)?;
        let Some(id) = message.id() else { return Ok(()) };
        let bytes = message.as_bytes();
        let span = message.span(Member::Id).unwrap();
        // After the id's delimiter, or inside a string before it.
        let after = span.end + 1;
        let damaged: Vec<u8> = match damage {
            0 => {
                let at = after + cut.index(bytes.len() - after + 1);
                [&bytes[..at], &bad[..], &bytes[at..]].concat()
            }
            1 => {
                let at = after + cut.index(bytes.len() - after + 1);
                [&bytes[..at], &vec![b'['; 10_000][..], &bytes[at..]].concat()
            }
            2 => bytes[..after + cut.index(bytes.len() - after + 1)].to_vec(),
            _ => {
                // Bad bytes and deep (balanced) nesting in a member before
                // the id, which must be skipped.
                let prefix = br#"{"x-before":[""#;
                let mut damaged = prefix.to_vec();
                damaged.extend(&bad);
                damaged.extend(br#"",{"a":"#);
                damaged.extend(vec![b'['; 10_000]);
                damaged.extend(vec![b']'; 10_000]);
                damaged.extend(b"}],");
                damaged.extend(&bytes[1..]);
                damaged
            }
        };
        prop_assert_eq!(salvage_id(&damaged), Some(id.clone()));
        if damage != 1 && damage != 2 {
            // (Brackets may land inside a string, and a cut at the end
            // cuts nothing: those can still be messages.)
            prop_assert!(Message::parse(Bytes::from(damaged)).is_err(), "bad UTF-8 is refused");
        }

        // Cut anywhere: the true id or none, never another.
        let cut = &bytes[..cut.index(bytes.len() + 1)];
        let found = salvage_id(cut);
        prop_assert!(found.is_none() || found.as_ref() == Some(&id), "{:?} from {:?}", found, String::from_utf8_lossy(cut));
    }

    #[test]
    fn salvage_id_and_the_parse_never_panic_on_any_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        prefix in prop::sample::select(vec![&b""[..], b"{\"id\":", b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":", b"{\"id\":\""]),
    ) {
        let input = [prefix, &bytes[..]].concat();
        let salvaged = salvage_id(&input);
        if let Ok(message) = Message::parse(Bytes::from(input.clone())) {
            prop_assert!(serde_json::from_slice::<Value>(message.as_bytes()).is_ok());
            prop_assert_eq!(salvaged, message.id());
            let _ = message.routing();
        }
    }
}

// ---------------------------------------------------------------------------
// RawObject.

#[derive(Debug, Clone)]
enum Edit {
    Insert(String, String),
    Remove(String),
    Rename(String, String),
}

fn edit() -> impl Strategy<Value = Edit> {
    let name = prop::sample::select(vec!["a", "b", "name", "_meta", "new"]).prop_map(str::to_owned);
    prop_oneof![
        (name.clone(), json()).prop_map(|(k, v)| Edit::Insert(k, v)),
        name.clone().prop_map(Edit::Remove),
        (name.clone(), name).prop_map(|(a, b)| Edit::Rename(a, b)),
    ]
}

/// The model: members as (decoded key, raw value text).
fn apply(model: &mut Vec<(String, String)>, edit: &Edit) {
    let last = |model: &Vec<(String, String)>, key: &str| model.iter().rposition(|(k, _)| k == key);
    match edit {
        Edit::Insert(key, value) => match last(model, key) {
            Some(i) => model[i].1 = value.clone(),
            None => model.push((key.clone(), value.clone())),
        },
        Edit::Remove(key) => model.retain(|(k, _)| k != key),
        Edit::Rename(from, to) => {
            if let Some(renamed) = last(model, from)
                && from != to
            {
                model[renamed].0 = to.clone();
                let mut index = 0;
                model.retain(|(k, _)| {
                    let keep = index == renamed || (k != from && k != to);
                    index += 1;
                    keep
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn raw_objects_round_trip_byte_identical_and_edits_keep_other_members_raw(
        (text, members) in object(),
        edits in prop::collection::vec(edit(), 0..6),
    ) {
        let mut object = RawObject::parse(&text).unwrap();
        prop_assert_eq!(object.to_json(), text.clone(), "untouched");
        let mut model: Vec<(String, String)> = members
            .iter()
            .map(|(k, _, _, v)| (serde_json::from_str::<String>(k).unwrap(), v.clone()))
            .collect();
        let got: Vec<(String, String)> = object.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        prop_assert_eq!(&got, &model);
        for edit in &edits {
            match edit {
                Edit::Insert(key, value) => {
                    object.insert(key, serde_json::value::RawValue::from_string(value.clone()).unwrap());
                }
                Edit::Remove(key) => {
                    object.remove(key);
                }
                Edit::Rename(from, to) => {
                    object.rename(from, to);
                }
            }
            apply(&mut model, edit);
        }
        let out = object.to_json();
        let reparsed = RawObject::parse(&out).unwrap();
        let got: Vec<(String, String)> = reparsed.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        prop_assert_eq!(got, model, "{}", out);
    }
}

// ---------------------------------------------------------------------------
// Framing and SSE under any chunking.

/// `input` cut at `cuts` (indices into it, any order).
fn chunks<'a>(input: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
    at.push(0);
    at.push(input.len());
    at.sort();
    at.windows(2).map(|w| &input[w[0]..w[1]]).collect()
}

/// Frames with `bytes_seen` left out (it depends on the chunking).
fn normalized(frames: Vec<Frame>) -> Vec<Result<Bytes, Option<Id>>> {
    frames
        .into_iter()
        .map(|f| match f {
            Frame::Message(bytes) => Ok(bytes),
            Frame::TooLarge { id, .. } => Err(id),
        })
        .collect()
}

/// What the splitter should give for `input`, line by line.
fn expected_lines(input: &[u8], limit: usize) -> Vec<Result<Bytes, Option<Id>>> {
    let mut out = Vec::new();
    for line in input.split(|&b| b == b'\n') {
        let content = line.strip_suffix(b"\r").unwrap_or(line);
        if content.len() > limit {
            out.push(Err(salvage_id(&line[..limit])));
        } else if !content.trim_ascii().is_empty() {
            out.push(Ok(Bytes::copy_from_slice(content)));
        }
    }
    out
}

fn line_piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => "[ -~]{0,30}".prop_map(String::into_bytes),
        2 => (0u32..1000, 0usize..40).prop_map(|(id, pad)| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"{}"}}"#, "x".repeat(pad)).into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..20),
        1 => prop::sample::select(vec![&b"\r"[..], b"\n", b"\r\n", b"  \t", b"\xEF\xBB\xBF"]).prop_map(<[u8]>::to_vec),
    ]
}

/// An SSE stream's pieces: fields, comments, line ends of every kind.
fn sse_piece() -> impl Strategy<Value = Vec<u8>> {
    let end = prop::sample::select(vec![&b"\n"[..], b"\r", b"\r\n"]);
    prop_oneof![
        4 => ("data(: ?)?", "[ -~]{0,12}", end.clone()).prop_map(|(f, v, e)| [f.as_bytes(), v.as_bytes(), e].concat()),
        1 => ("(event|id|retry|:|x)(: ?)?", "[0-9a-z ]{0,6}", end.clone()).prop_map(|(f, v, e)| [f.as_bytes(), v.as_bytes(), e].concat()),
        2 => end.prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..10),
        1 => Just(b"\xEF\xBB\xBF".to_vec()),
        // Fields as an MCP server writes them (LF alone), and blank lines:
        // events the parser reads whole at once.
        4 => ("data|id|event|retry", "[ -~]{0,12}").prop_map(|(f, v)| format!("{f}: {v}\n").into_bytes()),
        3 => Just(b"\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn lines_split_the_same_for_any_chunking(
        pieces in prop::collection::vec(line_piece(), 0..12),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        limit in 1usize..60,
    ) {
        let input = pieces.concat();
        let mut whole = LineSplitter::new(limit);
        let mut frames = whole.feed(&input);
        frames.extend(whole.finish());
        let frames = normalized(frames);
        prop_assert_eq!(&frames, &expected_lines(&input, limit));
        let mut chunked = LineSplitter::new(limit);
        let mut got = Vec::new();
        for chunk in chunks(&input, &cuts) {
            got.extend(chunked.feed(chunk));
        }
        got.extend(chunked.finish());
        prop_assert_eq!(normalized(got), frames);
    }

    #[test]
    fn sse_events_are_the_same_for_any_chunking(
        pieces in prop::collection::vec(sse_piece(), 0..16),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        limit in 0usize..40,
    ) {
        let input = pieces.concat();
        // Every event line by line: what the quicker reading of a whole
        // event at once must give too, fed whole or in chunks.
        let mut reference = SseParser::new(limit);
        let events = reference.feed_line_by_line(&input);
        let mut whole = SseParser::new(limit);
        prop_assert_eq!(&whole.feed(&input), &events);
        let mut chunked = SseParser::new(limit);
        let mut got = Vec::new();
        for chunk in chunks(&input, &cuts) {
            got.extend(chunked.feed(chunk));
        }
        prop_assert_eq!(&got, &events);
        for parser in [&whole, &chunked] {
            prop_assert_eq!(parser.last_event_id(), reference.last_event_id());
            prop_assert_eq!(parser.retry(), reference.retry());
        }
        for event in events.iter().flatten() {
            prop_assert!(event.data.len() <= limit);
        }
    }

    #[test]
    fn written_events_parse_back_to_their_data(
        datas in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..4),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let mut stream = Vec::new();
        for (i, data) in datas.iter().enumerate() {
            write_event(&mut stream, Some("message"), Some(&i.to_string()), data);
        }
        let mut parser = SseParser::new(1 << 10);
        let mut events = Vec::new();
        for chunk in chunks(&stream, &cuts) {
            events.extend(parser.feed(chunk));
        }
        prop_assert_eq!(events.len(), datas.len());
        for ((i, data), event) in datas.iter().enumerate().zip(events) {
            let event = event.unwrap();
            // Line breaks come back as LF.
            let want = String::from_utf8_lossy(data).replace("\r\n", "\n").replace('\r', "\n");
            prop_assert_eq!(String::from_utf8_lossy(&event.data), want);
            prop_assert_eq!(event.id, Some(i.to_string()));
        }
    }
}

// ---------------------------------------------------------------------------
// Seeds and nesting.

#[test]
fn the_framing_corpus_parses_as_serde_json_reads_it() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz/framing");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let seed = std::fs::read(&path).unwrap();
        let line = seed.strip_suffix(b"\n").unwrap_or(&seed);
        let name = path.display();
        let salvaged = salvage_id(line);
        match Message::parse(Bytes::copy_from_slice(line)) {
            Ok(message) => {
                match serde_json::from_slice::<Value>(message.as_bytes()) {
                    Ok(value) => assert_eq!(value["jsonrpc"], "2.0", "{name}"),
                    // A lone surrogate (`"\ud800"`) is JSON by its grammar
                    // (JavaScript and Python read it); serde_json refuses
                    // it only when it builds a string.
                    Err(e) => assert!(e.to_string().contains("hex escape"), "{name}: {e}"),
                }
                assert_eq!(salvaged, message.id(), "{name}");
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                if let Some(id) = salvaged {
                    assert!(
                        line.windows(id.as_json().len())
                            .any(|w| w == id.as_json().as_bytes())
                    );
                }
            }
        }
        seen += 1;
    }
    assert!(seen >= 10, "the framing corpus is there");
}

#[test]
fn a_million_levels_of_nesting_overflow_no_stack() {
    const DEPTH: usize = 1_000_000;
    let mut deep = br#"{"jsonrpc":"2.0","id":5,"result":"#.to_vec();
    deep.extend(vec![b'['; DEPTH]);
    deep.extend(vec![b']'; DEPTH]);
    deep.push(b'}');
    assert_eq!(salvage_id(&deep), Some(Id::number(5)));
    assert!(matches!(
        Message::parse(Bytes::from(deep.clone())),
        Err(MessageError::TooDeep { .. })
    ));
    let text = std::str::from_utf8(&deep).unwrap();
    let object = RawObject::parse(text).unwrap();
    assert_eq!(object.to_json(), text);

    let mut splitter = LineSplitter::new(deep.len());
    let mut line = deep.clone();
    line.push(b'\n');
    assert_eq!(
        splitter.feed(&line),
        [Frame::Message(Bytes::from(deep.clone()))]
    );

    let mut sse = b"data: ".to_vec();
    sse.extend(&deep);
    sse.extend(b"\n\n");
    let events = SseParser::new(deep.len()).feed(&sse);
    assert_eq!(events.len(), 1);

    // Unbalanced: a million openings and nothing else.
    let open = vec![b'{'; DEPTH];
    assert_eq!(salvage_id(&open), None);
    assert!(Message::parse(Bytes::from(open.clone())).is_err());
    assert!(RawObject::parse(std::str::from_utf8(&open).unwrap()).is_err());
}

#[test]
fn a_kind_is_what_its_members_say() {
    // A spot check of the generator's own claim, so that the property above
    // cannot pass by generating nothing of a kind.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut kinds = std::collections::HashSet::new();
    for _ in 0..200 {
        let generated =
            proptest::strategy::ValueTree::current(&message().new_tree(&mut runner).unwrap());
        kinds.insert(format!("{:?}", generated.kind));
        assert!(generated.members.iter().any(|(n, _)| *n == "jsonrpc"));
        let _ = member_of(generated.members[1].0);
    }
    assert_eq!(kinds.len(), 4);
}
