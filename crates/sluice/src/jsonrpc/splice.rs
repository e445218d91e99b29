//! Edits to a message's raw text that keep every other byte.
//!
//! sluice changes little in the messages it forwards: the id of a request
//! it sends upstream (its own number) and of the answer it hands back (the
//! client's id), and the progress token of a call. Rather than re-encoding
//! the message, the new text is spliced into the byte range of the old, so
//! the result differs from the input only there. Changing an id needs no
//! parse at all: the spans after it just move.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use super::message::{Id, Kind, Member, Message, MessageError};
use super::object::RawObject;
use super::span_in;

/// Why a set of edits could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpliceError {
    /// An edit reaches past the end of the text, or ends before it starts.
    #[error("an edit covers bytes {start}..{end} of a text of {len} bytes")]
    OutOfBounds {
        /// Where the edit starts.
        start: usize,
        /// Where it ends.
        end: usize,
        /// The text's length.
        len: usize,
    },
    /// Two edits cover the same bytes.
    #[error("two edits overlap at byte {at}")]
    Overlap {
        /// Where the second starts.
        at: usize,
    },
}

/// `raw` with each range replaced by its text. The edits may come in any
/// order; insertions at the same place (empty ranges) go in the order given.
/// Every byte outside the ranges is kept.
pub fn splice(raw: &[u8], edits: &[(Range<usize>, &str)]) -> Result<Vec<u8>, SpliceError> {
    let mut order: Vec<&(Range<usize>, &str)> = edits.iter().collect();
    order.sort_by_key(|(range, _)| (range.start, range.end));
    let mut len = raw.len();
    let mut end = 0;
    for (range, text) in &order {
        if range.start > range.end || range.end > raw.len() {
            return Err(SpliceError::OutOfBounds {
                start: range.start,
                end: range.end,
                len: raw.len(),
            });
        }
        if range.start < end {
            return Err(SpliceError::Overlap { at: range.start });
        }
        end = range.end;
        len = len - range.len() + text.len();
    }
    let mut out = Vec::with_capacity(len);
    let mut at = 0;
    for (range, text) in order {
        out.extend_from_slice(&raw[at..range.start]);
        out.extend_from_slice(text.as_bytes());
        at = range.end;
    }
    out.extend_from_slice(&raw[at..]);
    Ok(out)
}

/// `span` once `len` bytes at `at` became `new_len` bytes, for a span that
/// does not contain the edit (it lies wholly before or after it).
fn moved(
    span: Option<Range<usize>>,
    at: usize,
    len: usize,
    new_len: usize,
) -> Option<Range<usize>> {
    span.map(|span| {
        if span.start >= at + len {
            span.start - len + new_len..span.end - len + new_len
        } else {
            span
        }
    })
}

impl Message {
    /// The message with its id replaced by `id` (or, for a notification,
    /// inserted as its first member, which makes it a request). Every other
    /// byte is kept; nothing is parsed again.
    pub fn with_id(&self, id: &Id) -> Message {
        let whole = self.as_str();
        let mut spans = self.spans();
        let (at, len, text) = match self.span(Member::Id) {
            Some(span) => (span.start, span.len(), id.as_json().to_owned()),
            // After the opening brace; the message has members ("jsonrpc").
            None => (1, 0, format!("\"id\":{id},")),
        };
        let mut out = String::with_capacity(whole.len() - len + text.len());
        out.push_str(&whole[..at]);
        out.push_str(&text);
        out.push_str(&whole[at + len..]);
        for span in &mut spans[1..] {
            *span = moved(span.take(), at, len, text.len());
        }
        let id_start = if len == 0 { at + "\"id\":".len() } else { at };
        spans[0] = Some(id_start..id_start + id.as_json().len());
        let mut message = self.with_text(out, spans);
        if self.kind() == Kind::Notification {
            message.set_kind(Kind::Request);
        }
        message
    }

    /// The message with `params._meta.progressToken` set to `token`:
    /// replaced where there is one, else inserted into `_meta` (into
    /// `params`, into the message) as needed. A `_meta` that is not an
    /// object is replaced. Every other byte is kept; the result is parsed
    /// again (one pass). sluice itself sets the token while it makes a
    /// request, before the one parse ([`params_with_progress_token`]); this
    /// is that edit on a message already made (the fuzz suite checks it on
    /// every message it generates).
    pub fn with_progress_token(&self, token: &Id) -> Result<Message, MessageError> {
        match (self.span(Member::Params), self.params()) {
            (Some(span), Some(params)) => {
                let params = params_with_progress_token(params, token)?;
                self.edit(&[(span, &params)])
            }
            _ => {
                let (range, text) = before_close(0..self.as_bytes().len(), false, |out| {
                    out.push_str("\"params\":{\"_meta\":{");
                    push_members(out, &[("progressToken", token.as_json())]);
                    out.push_str("}}");
                });
                self.edit(&[(range, &text)])
            }
        }
    }

    /// A `notifications/progress` with `params.progressToken` set to
    /// `token` (the client's, where the upstream has sluice's); every other
    /// byte kept. An error if the params have no token to replace.
    pub fn with_notified_progress_token(&self, token: &Id) -> Result<Message, MessageError> {
        let (Some(span), Some(params)) = (self.span(Member::Params), self.params()) else {
            return Err(MessageError::NotJsonRpc {
                reason: "a progress notification without params".to_owned(),
            });
        };
        let object = RawObject::of_checked(params).map_err(|e| MessageError::NotJsonRpc {
            reason: format!("params could not be read: {e}"),
        })?;
        let old = object
            .get_parsed("progressToken")
            .ok_or_else(|| MessageError::NotJsonRpc {
                reason: "a progress notification without a progressToken".to_owned(),
            })?;
        let range = shift(span_in(params, old), span.start);
        self.edit(&[(range, token.as_json())])
    }

    /// The response with `result` (JSON text) in place of its result, every
    /// other byte as it was (parsed again: `result` is checked).
    pub fn with_result(&self, result: &str) -> Result<Message, MessageError> {
        let span = self
            .span(Member::Result)
            .ok_or_else(|| MessageError::NotJsonRpc {
                reason: "a message without a result has none to replace".to_owned(),
            })?;
        self.edit(&[(span, result)])
    }

    /// The message with `edits` spliced into its bytes (see [`splice`]),
    /// parsed again: for edits that may change the envelope.
    pub fn edit(&self, edits: &[(Range<usize>, &str)]) -> Result<Message, MessageError> {
        let out = splice(self.as_bytes(), edits).map_err(|e| MessageError::NotJsonRpc {
            reason: format!("an edit could not be made: {e}"),
        })?;
        Message::parse(Bytes::from(out))
    }
}

/// A request's `params` (an object's text) with `_meta.progressToken` set
/// to `token`, as [`Message::with_progress_token`] sets it; every other byte
/// kept. For a request being made, so that it is parsed once, with its
/// token.
pub fn params_with_progress_token(params: &str, token: &Id) -> Result<String, MessageError> {
    params_with_meta(params, &[("progressToken", token.as_json())]).map(Cow::into_owned)
}

/// A request's `params` (an object's text) with each of `members` (a key,
/// and its value as JSON text) set in `params._meta`: its value replaced
/// where the key is there, else the member added at the end of `_meta`
/// (made where there is none; a `_meta` that is not an object is
/// replaced). Every other byte is kept; with nothing to set, the text is
/// not even copied. This is how sluice adds what a request carries for it
/// (its progress token; for an upstream of 2026-07-28, the client context
/// and log level) to the client's text. `params` must be valid JSON (a
/// parsed message's, or made of such with edits that keep them valid, as
/// [`Message::request`] takes them): they are not checked again.
pub fn params_with_meta<'a>(
    params: &'a str,
    members: &[(&str, &str)],
) -> Result<Cow<'a, str>, MessageError> {
    if members.is_empty() {
        return Ok(Cow::Borrowed(params));
    }
    if !params.starts_with('{') {
        return Err(MessageError::NotJsonRpc {
            reason: "params is not an object, so it has no _meta to carry what sluice adds"
                .to_owned(),
        });
    }
    debug_assert!(
        sluice_core::check::is_json(params),
        "params_with_meta takes valid params: {params}"
    );
    // No member can be `_meta` when neither its name nor a `\u` escape
    // (the only other way to write it) is in the text: the members go in a
    // new `_meta` before the closing brace, the params not read into
    // members (a call's, once sluice took the client's progress token out,
    // usually have no `_meta`). Written at once, into a string of the size
    // it takes.
    if !params.contains("_meta") && !params.contains("\\u") {
        let object = params.trim_end();
        if let Some(inner) = object.strip_suffix('}') {
            let close = object.len() - 1;
            let added: usize = members.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
            let mut out = String::with_capacity(params.len() + added + 12);
            out.push_str(&params[..close]);
            if !inner[1..].trim().is_empty() {
                out.push(',');
            }
            out.push_str("\"_meta\":{");
            push_members(&mut out, members);
            out.push('}');
            out.push_str(&params[close..]);
            return Ok(Cow::Owned(out));
        }
    }
    let object = RawObject::parse(params).map_err(|e| MessageError::NotJsonRpc {
        reason: format!("params could not be read: {e}"),
    })?;
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    match object.get_parsed("_meta") {
        Some(meta) if meta.starts_with('{') => {
            let meta_span = span_in(params, meta);
            let present = RawObject::parse(meta).map_err(|e| MessageError::NotJsonRpc {
                reason: format!("params._meta could not be read: {e}"),
            })?;
            let mut added = Vec::new();
            for member in members {
                match present.get_parsed(member.0) {
                    Some(old) => edits.push((
                        shift(span_in(meta, old), meta_span.start),
                        member.1.to_owned(),
                    )),
                    None => added.push(member),
                }
            }
            if !added.is_empty() {
                edits.push(before_close(meta_span, present.is_empty(), |out| {
                    push_members(out, added)
                }));
            }
        }
        Some(meta) => {
            let mut object = String::from("{");
            push_members(&mut object, members);
            object.push('}');
            edits.push((span_in(params, meta), object));
        }
        None => edits.push(before_close(0..params.len(), object.is_empty(), |out| {
            out.push_str("\"_meta\":{");
            push_members(out, members);
            out.push('}');
        })),
    }
    let edits: Vec<(Range<usize>, &str)> = edits
        .iter()
        .map(|(range, text)| (range.clone(), text.as_str()))
        .collect();
    let out = splice(params.as_bytes(), &edits).map_err(|e| MessageError::NotJsonRpc {
        reason: format!("an edit could not be made: {e}"),
    })?;
    Ok(Cow::Owned(
        String::from_utf8(out).expect("UTF-8 spliced into UTF-8 at member bounds"),
    ))
}

fn shift(range: Range<usize>, by: usize) -> Range<usize> {
    range.start + by..range.end + by
}

/// The insertion of what `member` writes as the last member of the object
/// at `object` (its closing brace is its last byte).
fn before_close(
    object: Range<usize>,
    empty: bool,
    member: impl FnOnce(&mut String),
) -> (Range<usize>, String) {
    let close = object.end - 1;
    let mut text = String::new();
    if !empty {
        text.push(',');
    }
    member(&mut text);
    (close..close, text)
}

/// Writes `members` as the members of a JSON object (`"key":value`, comma
/// separated). Written in place, not formatted: a request's progress token
/// goes this way.
fn push_members<'m>(out: &mut String, members: impl IntoIterator<Item = &'m (&'m str, &'m str)>) {
    for (i, (key, value)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            out.push('"');
            out.push_str(key);
            out.push('"');
        } else {
            out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        }
        out.push(':');
        out.push_str(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Message {
        Message::parse(Bytes::copy_from_slice(text.as_bytes())).unwrap()
    }

    fn text(message: &Message) -> &str {
        std::str::from_utf8(message.as_bytes()).unwrap()
    }

    /// The spans of `message` are those a fresh parse finds.
    fn spans_hold(message: &Message) {
        let fresh = Message::parse(message.as_bytes().clone()).unwrap();
        assert_eq!(message.spans(), fresh.spans(), "{}", text(message));
        assert_eq!(message.kind(), fresh.kind());
        assert_eq!(message.method(), fresh.method());
    }

    #[test]
    fn splice_replaces_only_the_ranges() {
        assert_eq!(
            splice(b"0123456789", &[(7..8, "seven"), (1..3, ""), (5..5, "+")]).unwrap(),
            b"034+56seven89"
        );
        assert_eq!(
            splice(b"ab", &[(1..1, "x"), (1..1, "y")]).unwrap(),
            b"axyb",
            "insertions at one place keep their order"
        );
        assert_eq!(
            splice(b"abc", &[(0..2, "x"), (1..3, "y")]),
            Err(SpliceError::Overlap { at: 1 })
        );
        assert!(matches!(
            splice(b"abc", &[(2..4, "x")]),
            Err(SpliceError::OutOfBounds { .. })
        ));
    }

    #[test]
    fn an_id_is_replaced_in_place_and_the_spans_move() {
        let m = parse(r#"{"jsonrpc":"2.0", "id" : "client-1" ,"result":{"n":1.50,"x-trace":"t"}}"#);
        let upstream = m.with_id(&Id::number(7));
        assert_eq!(
            text(&upstream),
            r#"{"jsonrpc":"2.0", "id" : 7 ,"result":{"n":1.50,"x-trace":"t"}}"#
        );
        spans_hold(&upstream);
        let back = upstream.with_id(&m.id().unwrap());
        assert_eq!(back.as_bytes(), m.as_bytes(), "and back, byte for byte");
        spans_hold(&back);

        let last = parse(r#"{"jsonrpc":"2.0","method":"ping","id":12}"#).with_id(&Id::string("é"));
        assert_eq!(text(&last), r#"{"jsonrpc":"2.0","method":"ping","id":"é"}"#);
        spans_hold(&last);
    }

    #[test]
    fn an_id_given_to_a_notification_makes_it_a_request() {
        let m = parse(r#"{"jsonrpc":"2.0","method":"a\/b","params":{}}"#).with_id(&Id::number(1));
        assert_eq!(
            text(&m),
            r#"{"id":1,"jsonrpc":"2.0","method":"a\/b","params":{}}"#
        );
        assert_eq!(m.kind(), Kind::Request);
        spans_hold(&m);
    }

    #[test]
    fn a_progress_token_is_set_wherever_it_belongs() {
        let token = Id::string("up-1");
        let cases = [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":5,"x":1}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":"up-1","x":1}}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"x":1.50}}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"x":1.50,"progressToken":"up-1"}}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta": { } }}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta": { "progressToken":"up-1"} }}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":"up-1"}}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"up-1"}}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":null}}"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"up-1"}}}"#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"ping" }"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"ping" ,"params":{"_meta":{"progressToken":"up-1"}}}"#,
            ),
        ];
        for (before, after) in cases {
            let m = parse(before).with_progress_token(&token).unwrap();
            assert_eq!(text(&m), after);
            assert_eq!(m.routing().unwrap().progress_token, Some(token.clone()));
            // A request being made gets its params so edited before it is
            // parsed: the same params.
            if let Some(params) = parse(before).params() {
                assert_eq!(
                    params_with_progress_token(params, &token).unwrap(),
                    parse(after).params().unwrap()
                );
            }
        }
        let array = parse(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":[]}"#);
        assert!(array.with_progress_token(&token).is_err());
        assert!(params_with_progress_token("[]", &token).is_err());
        // Params that are not JSON are never given: a parsed message's
        // (debug builds check it).
    }

    /// A 2026-07-28 upstream's request: the client context, the log level
    /// and the token set in the client's `_meta` at once, each replacing
    /// the client's value of its key or added after its members; the rest
    /// of the text (`1.50`, `-0`, an escape, spacing) as sent.
    #[test]
    fn several_members_are_set_in_meta_at_once_and_nothing_else_moves() {
        let members = [
            ("io.modelcontextprotocol/protocolVersion", r#""2026-07-28""#),
            ("io.modelcontextprotocol/clientInfo", r#"{"name":"sluice"}"#),
            ("progressToken", "7"),
        ];
        let cases = [
            (
                r#"{"name":"a","arguments":{"n":1.50,"s":"caf\u00e9"},"_meta":{"x":-0,"io.modelcontextprotocol/protocolVersion":"2025-11-25", "progressToken":"p"}}"#,
                r#"{"name":"a","arguments":{"n":1.50,"s":"caf\u00e9"},"_meta":{"x":-0,"io.modelcontextprotocol/protocolVersion":"2026-07-28", "progressToken":7,"io.modelcontextprotocol/clientInfo":{"name":"sluice"}}}"#,
            ),
            (
                r#"{"name":"a","x-p":1e2}"#,
                r#"{"name":"a","x-p":1e2,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
            (
                r#"{"_meta":"odd"}"#,
                r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
            (
                r#"{"_meta":{}}"#,
                r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
            // No `_meta` (nothing that could name one: the params are not
            // read), empty or with spacing before the brace.
            (
                "{ }",
                r#"{ "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
            (
                "{\"a\":[1] \n}",
                "{\"a\":[1] \n,\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientInfo\":{\"name\":\"sluice\"},\"progressToken\":7}}",
            ),
            // `_meta` written with an escape is `_meta`; the name in a
            // value is not.
            (
                r#"{"\u005fmeta":{"x":1}}"#,
                r#"{"\u005fmeta":{"x":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
            (
                r#"{"note":"_meta"}"#,
                r#"{"note":"_meta","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"sluice"},"progressToken":7}}"#,
            ),
        ];
        for (before, after) in cases {
            assert_eq!(params_with_meta(before, &members).unwrap(), after);
        }
        // Nothing to set: the text as it is.
        for params in [r#"{"_meta":{"a":1}}"#, r#"{"a":1}"#, "[1]"] {
            assert!(matches!(params_with_meta(params, &[]), Ok(Cow::Borrowed(p)) if p == params));
        }
        assert!(params_with_meta("[1]", &members).is_err());
    }

    #[test]
    fn a_progress_notification_gets_the_clients_token_and_keeps_every_other_byte() {
        let sent = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken": 17 ,"progress":1.50,"x-p":"\u00e9"}}"#;
        let message = Message::parse(Bytes::from_static(sent)).unwrap();
        let relayed = message
            .with_notified_progress_token(&Id::string("client-token"))
            .unwrap();
        assert_eq!(
            relayed.as_bytes().as_ref(),
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken": "client-token" ,"progress":1.50,"x-p":"\u00e9"}}"#
        );
        let without = Message::parse(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
        ))
        .unwrap();
        assert!(
            without
                .with_notified_progress_token(&Id::number(1))
                .is_err()
        );
    }
}
