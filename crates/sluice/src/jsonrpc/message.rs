//! One JSON-RPC message, held as the bytes it arrived as.
//!
//! [`Message::parse`] reads only the envelope: it checks the bytes are
//! UTF-8, nested no deeper than [`MAX_DEPTH`], one JSON object, and a
//! JSON-RPC 2.0 message; and it notes where the `id`, `method`, `params`,
//! `result` and `error` members lie. Their values are checked and skipped
//! in one pass over the bytes (`check`), never built into a tree, so a
//! 1 MB result costs one pass and no allocation; what that pass refuses is
//! parsed again by `serde_json` (`RawValue`), whose error says what is
//! wrong where. What
//! sluice routes on inside `params` (`name`, `uri`, `cursor`, `_meta`) is
//! read only when asked for ([`Message::routing`]).
//!
//! Forwarding a message is handing on [`Message::as_bytes`]: every member,
//! every number's spelling and every escape stays as the sender wrote them.
//!
//! The JSON is checked against its grammar, all of it, values included. A
//! lone surrogate escape (`"\ud800"`) is grammatical JSON, which JavaScript
//! and Python read, so it is accepted; `serde_json` refuses it only when it
//! builds a string from it (sluice's own edits would then fail, on that
//! message alone).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use bytestring::ByteString;
use serde_json::value::RawValue;

use super::check;
use super::object::{RawObject, raw_members, unquote};
use super::scan::nests_deeper_than;
use super::span_in;

/// The deepest nesting of arrays and objects a message may have, the
/// message object itself counted as the first level.
///
/// This is exactly what `serde_json` accepts when it builds a tree (its
/// recursion limit refuses the 128th level), and what Rust MCP SDKs such as
/// rmcp therefore accept. `serde_json`'s borrowed parse has no such limit
/// (it skips values with a heap stack), so without this check sluice would
/// forward messages that it could not later edit or store, and that a
/// Rust client could not read. A test holds this equal to `serde_json`'s
/// limit.
pub const MAX_DEPTH: usize = 127;

/// The `_meta` key in which a 2026-07-28 request names its protocol
/// version.
pub const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// [`PROTOCOL_VERSION_META`] as a key is sent, quotes included (what a
/// walk of the text compares keys with).
const PROTOCOL_VERSION_META_KEY: &str = "\"io.modelcontextprotocol/protocolVersion\"";

/// What a JSON-RPC message is, from the members it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `method` with an `id`: an answer is expected.
    Request,
    /// A `method` without an `id`: no answer.
    Notification,
    /// A `result` with the `id` of the request it answers.
    Response,
    /// An `error` with the `id` of the request it answers (`null` when the
    /// request could not be read).
    Error,
}

/// An envelope member of a message, for [`Message::span`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// `id`.
    Id,
    /// `method`.
    Method,
    /// `params`.
    Params,
    /// `result`.
    Result,
    /// `error`.
    Error,
}

/// A JSON-RPC id (or an MCP progress token, which has the same form), kept
/// as its JSON text: a number keeps its spelling (`1e2` is not `100`) and a
/// string its escapes, so an id is handed back exactly as it came. Two ids
/// are equal when their texts are.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(Arc<str>);

impl Id {
    /// The id `n`, as sluice numbers the requests it sends.
    pub fn number(n: u64) -> Id {
        // Its digits written on the stack, then kept: one allocation (one
        // for every request sluice sends), not a `String`'s too.
        Id(itoa::Buffer::new().format(n).into())
    }

    /// The id that is the JSON string `s`.
    pub fn string(s: &str) -> Id {
        // Serializing a string cannot fail.
        Id(serde_json::to_string(s).unwrap_or_default().into())
    }

    /// The id whose JSON text is `json`: a whole JSON string or number
    /// without surrounding whitespace, or `None`.
    pub fn from_json(json: &str) -> Option<Id> {
        let first = *json.as_bytes().first()?;
        let last = *json.as_bytes().last()?;
        let form_ok = matches!(first, b'"' | b'-' | b'0'..=b'9') && !last.is_ascii_whitespace();
        (form_ok && serde_json::from_str::<serde::de::IgnoredAny>(json).is_ok())
            .then(|| Id(json.into()))
    }

    /// Its JSON text, as written in a message.
    pub fn as_json(&self) -> &str {
        &self.0
    }

    /// Its value when it is a plain non-negative integer (`7`, not `7.0`,
    /// `"7"` or `1e2`), as the ids [`Id::number`] makes.
    pub fn as_u64(&self) -> Option<u64> {
        let text = &*self.0;
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    }

    /// Whether it is a JSON string (not a number).
    pub fn is_string(&self) -> bool {
        self.0.starts_with('"')
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.0)
    }
}

/// Why bytes are not a message sluice can handle. Each says what was wrong
/// in words the user (or the peer's author) can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not UTF-8 text.
    #[error(
        "the message is not UTF-8 text: byte {offset} starts an invalid sequence; \
         JSON-RPC messages must be UTF-8 JSON"
    )]
    NotUtf8 {
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// Arrays and objects nested too deep.
    #[error(
        "the message nests arrays and objects more than {limit} levels deep, \
         more than sluice (and most JSON parsers) can read; the server should \
         send flatter data"
    )]
    TooDeep {
        /// The deepest nesting accepted ([`MAX_DEPTH`]).
        limit: usize,
    },
    /// Not JSON.
    #[error("the message is not JSON: {reason} at line {line} column {column}")]
    NotJson {
        /// The line of the error (1-based).
        line: usize,
        /// The column of the error (1-based).
        column: usize,
        /// What the JSON parser found wrong.
        reason: String,
    },
    /// JSON, but not a JSON-RPC 2.0 message.
    #[error("the message is not JSON-RPC 2.0: {reason}")]
    NotJsonRpc {
        /// What is missing or wrong.
        reason: String,
    },
    /// Over the size limit.
    #[error(
        "a message of {bytes} bytes or more is over the limit of {limit} bytes; \
         raise `[limits] max_message_mb` in the configuration if messages this \
         large are expected"
    )]
    TooLarge {
        /// How many bytes of it had been read when it was refused.
        bytes: usize,
        /// The limit, in bytes.
        limit: usize,
    },
    /// A batch (a top-level array).
    #[error(
        "the message is a JSON-RPC batch (an array); MCP does not use batches: \
         send each message on its own"
    )]
    Batch,
}

impl MessageError {
    /// The error for a `serde_json` failure on a message's text.
    fn from_json(error: &serde_json::Error) -> MessageError {
        use serde_json::error::Category;
        match error.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                let text = error.to_string();
                let suffix = format!(" at line {} column {}", error.line(), error.column());
                MessageError::NotJson {
                    line: error.line(),
                    column: error.column(),
                    reason: text.strip_suffix(&suffix).unwrap_or(&text).to_owned(),
                }
            }
            Category::Data => not_json_rpc(error.to_string()),
        }
    }
}

fn not_json_rpc(reason: impl Into<String>) -> MessageError {
    MessageError::NotJsonRpc {
        reason: reason.into(),
    }
}

/// What JSON text is, in words ("a string", "an array"), from its first byte.
pub(crate) fn json_type(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// One JSON-RPC message: its bytes, and where its envelope members lie.
///
/// Cloning is cheap (the bytes are shared). Spans are byte ranges into
/// [`Message::as_bytes`], each covering a member's value exactly (no
/// surrounding whitespace).
#[derive(Clone)]
pub struct Message {
    /// Checked to be UTF-8 once, when it was received: its members are read
    /// as text without checking them again (a megabyte's check costs some
    /// 70 µs once it is out of the cache, and a call read its result
    /// several times).
    text: ByteString,
    kind: Kind,
    id: Option<Range<usize>>,
    method: Option<Range<usize>>,
    /// The method's name, when its JSON text has escapes (otherwise it is
    /// read from the bytes).
    method_unescaped: Option<Box<str>>,
    params: Option<Range<usize>>,
    result: Option<Range<usize>>,
    error: Option<Range<usize>>,
    /// The long strings of its result unescaped while it was checked,
    /// until the walk that reads them takes them.
    kept: Option<Arc<super::walk::KeptTexts>>,
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The bytes may be megabytes: shown only when short.
        let mut s = f.debug_struct("Message");
        s.field("kind", &self.kind)
            .field("id", &self.id())
            .field("method", &self.method())
            .field("len", &self.text.len());
        if self.text.len() <= 256 {
            s.field("text", &&*self.text);
        }
        s.finish()
    }
}

/// The members of a message's params that sluice routes on, borrowed from
/// the message ([`Message::routing`]). A member absent or `null` is `None`.
#[derive(Debug, Default, Clone)]
pub struct Routing<'a> {
    /// `params.name`: the tool or prompt called.
    pub name: Option<Cow<'a, str>>,
    /// `params.uri`: the resource read or subscribed to.
    pub uri: Option<Cow<'a, str>>,
    /// `params.cursor`: where a list continues.
    pub cursor: Option<Cow<'a, str>>,
    /// `params._meta.progressToken`.
    pub progress_token: Option<Id>,
    /// `params._meta["io.modelcontextprotocol/protocolVersion"]`: the
    /// version a 2026-07-28 request names, when it is a string.
    pub protocol_version: Option<Cow<'a, str>>,
    /// `params._meta`, as its raw text.
    pub meta: Option<&'a str>,
}

/// The texts of the members [`Routing`] is made of, as sent (a member
/// sent twice: its last), not yet checked for their types.
#[derive(Debug, Default, PartialEq)]
struct RoutingTexts<'a> {
    name: Option<&'a str>,
    uri: Option<&'a str>,
    cursor: Option<&'a str>,
    meta: Option<&'a str>,
    /// `_meta`'s members, when `_meta` is an object.
    progress_token: Option<&'a str>,
    protocol_version: Option<&'a str>,
}

impl<'a> RoutingTexts<'a> {
    /// Found in one walk of `params` (checked text), `_meta` walked where
    /// it lies, nothing collected (a key spelled with escapes is the key
    /// it spells, as [`super::walk::Walker::wanted`] reads it); `None` when
    /// `params` is no object.
    fn walked(params: &'a str) -> Option<RoutingTexts<'a>> {
        const WANTED: [&str; 4] = ["\"name\"", "\"uri\"", "\"cursor\"", "\"_meta\""];
        let mut texts = RoutingTexts::default();
        let mut walker = super::walk::members(params)?;
        // No member is refused for coming twice (`seen` empty): the last
        // counts, as in the members' way.
        while let Some(Ok(wanted)) = walker.wanted(&WANTED, &mut []) {
            let slot = match wanted {
                0 => &mut texts.name,
                1 => &mut texts.uri,
                2 => &mut texts.cursor,
                _ => {
                    texts.meta_walked(params, &mut walker);
                    continue;
                }
            };
            *slot = Some(walker.value());
        }
        Some(texts)
    }

    /// Reads the `_meta` at `walker`'s position: the last one counts,
    /// with its members or none.
    fn meta_walked(&mut self, params: &'a str, walker: &mut super::walk::Walker<'a>) {
        const WANTED: [&str; 2] = ["\"progressToken\"", PROTOCOL_VERSION_META_KEY];
        (self.progress_token, self.protocol_version) = (None, None);
        let start = walker.position();
        if !walker.enter(b'{') {
            self.meta = Some(walker.value());
            return;
        }
        while let Some(Ok(wanted)) = walker.wanted(&WANTED, &mut []) {
            let slot = match wanted {
                0 => &mut self.progress_token,
                _ => &mut self.protocol_version,
            };
            *slot = Some(walker.value());
        }
        self.meta = params.get(start..walker.position());
    }

    /// Found by splitting `params` (and `_meta`) into members, keys
    /// decoded: what [`RoutingTexts::walked`] leaves (params that are no
    /// object, with the error that says so).
    fn of_members(params: &'a str) -> Result<RoutingTexts<'a>, MessageError> {
        let members = RawObject::of_checked(params).map_err(|e| MessageError::from_json(&e))?;
        let mut texts = RoutingTexts {
            name: members.get_parsed("name"),
            uri: members.get_parsed("uri"),
            cursor: members.get_parsed("cursor"),
            meta: members.get_parsed("_meta"),
            ..RoutingTexts::default()
        };
        if let Some(meta) = texts.meta.filter(|meta| meta.starts_with('{')) {
            let members = RawObject::of_checked(meta).map_err(|e| MessageError::from_json(&e))?;
            texts.progress_token = members.get_parsed("progressToken");
            texts.protocol_version = members.get_parsed(PROTOCOL_VERSION_META);
        }
        Ok(texts)
    }

    /// The [`Routing`] they make: an error when one of them has the wrong
    /// type (`"name": 3`), as the request cannot be routed.
    fn routing(self) -> Result<Routing<'a>, MessageError> {
        let not_null = |text: Option<&'a str>| text.filter(|value| *value != "null");
        let string = |key: &str, text: Option<&'a str>| match not_null(text) {
            None => Ok(None),
            Some(value) => unquote(value).map(Some).ok_or_else(|| {
                not_json_rpc(format!(
                    "params.{key} is {}; it must be a string",
                    json_type(value)
                ))
            }),
        };
        let mut routing = Routing {
            name: string("name", self.name)?,
            uri: string("uri", self.uri)?,
            cursor: string("cursor", self.cursor)?,
            ..Routing::default()
        };
        if let Some(meta) = not_null(self.meta) {
            if !meta.starts_with('{') {
                return Err(not_json_rpc(format!(
                    "params._meta is {}; it must be an object",
                    json_type(meta)
                )));
            }
            if let Some(token) = not_null(self.progress_token) {
                routing.progress_token = Some(Id::from_json(token).ok_or_else(|| {
                    not_json_rpc(format!(
                        "params._meta.progressToken is {}; it must be a string or a number",
                        json_type(token)
                    ))
                })?);
            }
            routing.protocol_version = self.protocol_version.and_then(unquote);
            routing.meta = Some(meta);
        }
        Ok(routing)
    }
}

impl Message {
    /// Parses `bytes` as one JSON-RPC message; see the module doc for what
    /// is checked. A UTF-8 byte order mark and whitespace around the message
    /// are dropped (by slicing; nothing is copied).
    pub fn parse(received: Bytes) -> Result<Message, MessageError> {
        let all = ByteString::try_from(received).map_err(|e| MessageError::NotUtf8 {
            offset: e.valid_up_to(),
        })?;
        let body = all.strip_prefix('\u{feff}').unwrap_or(&all);
        let trimmed = body.trim_matches([' ', '\t', '\n', '\r']);
        Message::parse_text(all.slice_ref(trimmed))
    }

    /// The request of `method` (a name without escapes: sluice's
    /// constants) with `id` and `params`, made where it is written, not
    /// parsed back: `params` must be one valid JSON object or array (the
    /// params of a message that was parsed, or made of such with edits
    /// that keep them valid). Debug builds parse it back to hold that.
    pub fn request(id: &Id, method: &str, params: &str) -> Message {
        const HEAD: &str = r#"{"jsonrpc":"2.0","id":"#;
        let mut text = String::with_capacity(
            HEAD.len() + id.as_json().len() + method.len() + params.len() + 24,
        );
        text.push_str(HEAD);
        let id_at = text.len();
        text.push_str(id.as_json());
        let id_end = text.len();
        text.push_str(r#","method":""#);
        let method_at = text.len() - 1;
        text.push_str(method);
        text.push_str(r#"","params":"#);
        let method_end = method_at + method.len() + 2;
        let params_at = text.len();
        text.push_str(params);
        let params_end = text.len();
        text.push('}');
        let message = Message {
            text: ByteString::from(text),
            kind: Kind::Request,
            id: Some(id_at..id_end),
            method: Some(method_at..method_end),
            method_unescaped: None,
            params: Some(params_at..params_end),
            result: None,
            error: None,
            kept: None,
        };
        debug_assert!(
            !method.contains(['"', '\\']) && method.chars().all(|c| c >= ' '),
            "a method name with escapes: {method}"
        );
        debug_assert!(
            Message::parse(message.text.as_bytes().clone()).is_ok_and(|parsed| parsed.id
                == message.id
                && parsed.method == message.method
                && parsed.params == message.params
                && parsed.kind == Kind::Request),
            "made a request that does not parse as made: {message:?}"
        );
        message
    }

    /// Parses `bytes` as [`Message::parse`] does, after checking that they
    /// are at most `limit` bytes long.
    pub fn parse_within(bytes: Bytes, limit: usize) -> Result<Message, MessageError> {
        if bytes.len() > limit {
            return Err(MessageError::TooLarge {
                bytes: bytes.len(),
                limit,
            });
        }
        Message::parse(bytes)
    }

    /// The envelope parse of `whole` (without BOM or surrounding
    /// whitespace).
    fn parse_text(whole: ByteString) -> Result<Message, MessageError> {
        let text: &str = &whole;
        match text.as_bytes().first() {
            Some(b'{') => {}
            Some(b'[') => return Err(MessageError::Batch),
            _ => {
                let raw = serde_json::from_str::<&RawValue>(text)
                    .map_err(|e| MessageError::from_json(&e))?;
                return Err(not_json_rpc(format!(
                    "it is {}, and a message is a JSON object",
                    json_type(raw.get())
                )));
            }
        }
        // A long string (a large result's text block) is unescaped while it
        // is checked, and kept for the walk that reads it.
        let mut keeping = super::walk::Keeping::default();
        let members: Vec<(&str, &str)> =
            match check::object_members_reporting(text, MAX_DEPTH, &mut keeping) {
                Some(members) => members
                    .into_iter()
                    .map(|(key, value)| (&text[key], &text[value]))
                    .collect(),
                // Not valid, or too deep: the depth scan and serde_json's parse
                // say why (the same errors as ever), or read what the one-pass
                // check refused if it is valid after all.
                None => {
                    if nests_deeper_than(text.as_bytes(), MAX_DEPTH) {
                        return Err(MessageError::TooDeep { limit: MAX_DEPTH });
                    }
                    raw_members(text)
                        .map_err(|e| MessageError::from_json(&e))?
                        .into_iter()
                        .map(|(key, value)| (key.get(), value.get()))
                        .collect()
                }
            };

        let mut jsonrpc = None;
        let mut found: [Option<&str>; 5] = [None; 5];
        for (key, value) in members {
            let key = unquote(key).unwrap_or_default();
            let slot = match &*key {
                "jsonrpc" => &mut jsonrpc,
                "id" => &mut found[0],
                "method" => &mut found[1],
                "params" => &mut found[2],
                "result" => &mut found[3],
                "error" => &mut found[4],
                _ => continue,
            };
            if slot.replace(value).is_some() {
                return Err(not_json_rpc(format!(
                    "the member \"{key}\" appears twice, so which one counts is unclear"
                )));
            }
        }
        let [id, method, params, result, error] = found;

        match jsonrpc.map(unquote) {
            Some(Some(version)) if version == "2.0" => {}
            Some(_) => {
                return Err(not_json_rpc(
                    "\"jsonrpc\" must be \"2.0\" (it is not)".to_owned(),
                ));
            }
            None => return Err(not_json_rpc("the member \"jsonrpc\": \"2.0\" is missing")),
        }
        let null_id = id.is_some_and(|id| id == "null");
        if let Some(id) = id
            && !null_id
            && !matches!(id.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9'))
        {
            return Err(not_json_rpc(format!(
                "the id is {}; an id is a string or a number",
                json_type(id)
            )));
        }
        let mut method_unescaped = None;
        if let Some(method) = method {
            match unquote(method) {
                None => {
                    return Err(not_json_rpc(format!(
                        "\"method\" is {}; it must be a string",
                        json_type(method)
                    )));
                }
                Some(Cow::Owned(name)) => method_unescaped = Some(name.into_boxed_str()),
                Some(Cow::Borrowed(_)) => {}
            }
        }
        if let Some(params) = params
            && !matches!(params.as_bytes().first(), Some(b'{' | b'['))
        {
            return Err(not_json_rpc(format!(
                "\"params\" is {}; it must be an object or an array",
                json_type(params)
            )));
        }
        if let Some(error) = error
            && !error.starts_with('{')
        {
            return Err(not_json_rpc(format!(
                "\"error\" is {}; it must be an object with a code and a message",
                json_type(error)
            )));
        }
        let kind = match (
            method.is_some(),
            id.is_some(),
            result.is_some(),
            error.is_some(),
        ) {
            (true, _, true, _) | (true, _, _, true) => {
                return Err(not_json_rpc(
                    "it has a \"method\" and also a \"result\" or \"error\"; a message is \
                     a request or an answer, not both",
                ));
            }
            (_, _, true, true) => {
                return Err(not_json_rpc(
                    "it has both a \"result\" and an \"error\"; an answer has one",
                ));
            }
            (true, true, ..) if null_id => {
                return Err(not_json_rpc(
                    "a request's id is null; it must be a string or a number",
                ));
            }
            (true, true, ..) => Kind::Request,
            (true, false, ..) => Kind::Notification,
            (false, false, ..) => {
                return Err(not_json_rpc(if result.is_some() || error.is_some() {
                    "an answer without an \"id\""
                } else {
                    "it has no \"method\", \"result\" or \"error\""
                }));
            }
            (false, true, true, _) if null_id => {
                return Err(not_json_rpc(
                    "a result's id is null; it must be the id of the request it answers",
                ));
            }
            (false, true, true, _) => Kind::Response,
            (false, true, false, true) => Kind::Error,
            (false, true, false, false) => {
                return Err(not_json_rpc(
                    "it has an \"id\" but no \"method\", \"result\" or \"error\"",
                ));
            }
        };
        let span = |value: Option<&str>| value.map(|v| span_in(text, v));
        let (id, method, params, result, error) = (
            span(id),
            span(method),
            span(params),
            span(result),
            span(error),
        );
        // Kept for a result only: a request's long argument is forwarded as
        // its bytes, never read (nor held twice meanwhile).
        let kept = result
            .is_some()
            .then(|| keeping.into_texts().map(Arc::new))
            .flatten();
        Ok(Message {
            text: whole,
            kind,
            id,
            method,
            method_unescaped,
            params,
            result,
            error,
            kept,
        })
    }

    /// Whether it is a request, a notification, a response or an error.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// `part` of its text (a value in it, from [`Message::params`] or the
    /// like) as a text of its own that shares the message's bytes: no copy.
    ///
    /// # Panics
    /// If `part` is not within the message's text.
    pub fn slice(&self, part: &str) -> ByteString {
        self.text.slice_ref(part)
    }

    /// Its bytes, as received (less a BOM and surrounding whitespace), or
    /// as spliced. These are what is forwarded.
    pub fn as_bytes(&self) -> &Bytes {
        self.text.as_bytes()
    }

    /// Its text: [`Message::as_bytes`], which are UTF-8.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its bytes, taken.
    pub fn into_bytes(self) -> Bytes {
        self.text.into_bytes()
    }

    /// The byte range of a member's value in [`Message::as_bytes`].
    pub fn span(&self, member: Member) -> Option<Range<usize>> {
        match member {
            Member::Id => &self.id,
            Member::Method => &self.method,
            Member::Params => &self.params,
            Member::Result => &self.result,
            Member::Error => &self.error,
        }
        .clone()
    }

    /// The text of a span (spans fall on value boundaries, so this is
    /// never `None` for a span the message gave).
    fn text(&self, span: &Option<Range<usize>>) -> Option<&str> {
        self.text.get(span.as_ref()?.clone())
    }

    /// Its id: `None` for a notification, and for an error whose id is
    /// `null` (the request it answers could not be read).
    pub fn id(&self) -> Option<Id> {
        self.text(&self.id)
            .filter(|id| *id != "null")
            .map(|id| Id(id.into()))
    }

    /// Its method (escapes decoded), for a request or a notification.
    pub fn method(&self) -> Option<&str> {
        if let Some(name) = &self.method_unescaped {
            return Some(name);
        }
        // Without escapes the name is the text between the quotes.
        self.text(&self.method)?
            .strip_prefix('"')?
            .strip_suffix('"')
    }

    /// Its `params`, as raw JSON text (an object or an array).
    pub fn params(&self) -> Option<&str> {
        self.text(&self.params)
    }

    /// Its `result`, as raw JSON text.
    pub fn result(&self) -> Option<&str> {
        self.text(&self.result)
    }

    /// [`Message::result`], with the long strings unescaped when it was
    /// checked, for a walk of it ([`super::walk::members_kept`]).
    pub fn result_kept(&self) -> Option<(&str, super::walk::Kept<'_>)> {
        let range = self.result.as_ref()?;
        let kept = super::walk::Kept::of(self.kept.as_deref(), range.start);
        Some((self.result()?, kept))
    }

    /// Its `error`, as raw JSON text (an object).
    pub fn error(&self) -> Option<&str> {
        self.text(&self.error)
    }

    /// The request a `notifications/cancelled` names (`params.requestId`,
    /// its text kept); `None` for any other message or one without it.
    pub fn cancelled_request(&self) -> Option<Id> {
        if self.method() != Some("notifications/cancelled") {
            return None;
        }
        #[derive(serde::Deserialize)]
        struct Params<'a> {
            #[serde(borrow, rename = "requestId")]
            request_id: Option<&'a serde_json::value::RawValue>,
        }
        let params: Params<'_> = serde_json::from_str(self.params()?).ok()?;
        Id::from_json(params.request_id?.get())
    }

    /// The members of `params` that sluice routes on. Parsed on each call
    /// (one borrowed pass over `params` and `params._meta`; nothing else is
    /// read); call it once per message. An error when one of them has the
    /// wrong type (`"name": 3`): the request cannot be routed.
    pub fn routing(&self) -> Result<Routing<'_>, MessageError> {
        let Some(params) = self.params().filter(|p| p.starts_with('{')) else {
            return Ok(Routing::default());
        };
        match RoutingTexts::walked(params) {
            Some(texts) => texts.routing(),
            None => RoutingTexts::of_members(params)?.routing(),
        }
    }

    /// The message with the same spans over a new text: used by edits that
    /// know how the spans moved.
    pub(crate) fn with_text(&self, text: String, spans: [Option<Range<usize>>; 5]) -> Message {
        let [id, method, params, result, error] = spans;
        Message {
            text: ByteString::from(text),
            kind: self.kind,
            id,
            method,
            method_unescaped: self.method_unescaped.clone(),
            params,
            result,
            error,
            // (What was kept lay where the old text's strings did: the
            // walk of the new one unescapes from its bytes.)
            kept: None,
        }
    }

    /// Its spans, in [`Member`] order.
    pub(crate) fn spans(&self) -> [Option<Range<usize>>; 5] {
        [
            self.id.clone(),
            self.method.clone(),
            self.params.clone(),
            self.result.clone(),
            self.error.clone(),
        ]
    }

    /// Turns a notification into a request (its id was just inserted).
    pub(crate) fn set_kind(&mut self, kind: Kind) {
        self.kind = kind;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Message, MessageError> {
        Message::parse(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn a_results_long_text_is_unescaped_while_checked_and_read_from_what_was_kept() {
        use crate::govern::SentCall;
        // JSON held in a text block of ~300 KB (long enough to be kept).
        let body = r#"{\"id\":\"SKU-1\",\"n\":\"a\\\\b\u00e9\"},"#.repeat(10_000);
        let response = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"[{body}]"}},{{"type":"text","text":"short"}},{{"type":"text","text":"({body})"}}]}}}}"#
        );
        let message = parse(&response).unwrap();
        let whole = serde_json::from_str::<serde_json::Value>(&response).unwrap();
        let text = |at: usize| whole["result"]["content"][at]["text"].as_str().unwrap();
        let kept = message.kept.clone().expect("the text blocks were kept");
        assert_eq!(kept.bytes(), text(0).len() + text(2).len());
        // Read from what was kept (taken), and as read from the bytes.
        let (result, unescaped) = message.result_kept().unwrap();
        let read = SentCall::read_kept(result, unescaped).unwrap();
        assert_eq!(
            read.texts().collect::<Vec<_>>(),
            [text(0), "short", text(2)]
        );
        assert_eq!(kept.bytes(), 0, "taken by the walk that read them");
        let again = SentCall::read(message.result().unwrap()).unwrap();
        assert_eq!(
            again.texts().collect::<Vec<_>>(),
            [text(0), "short", text(2)]
        );
        // A request's long string is checked, not kept; a long string with
        // a control character is refused, as it was by the check alone.
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"[{body}]"}}}}}}"#
        );
        assert!(parse(&request).unwrap().kept.is_none());
        // (Past the first 64 KB, which the check reads before a string is
        // long enough to be kept.)
        let at = 1 + response.match_indices("SKU-1").nth(5_000).unwrap().0;
        let broken = format!("{}\u{1}{}", &response[..at], &response[at..]);
        assert!(parse(&broken).is_err());
        assert!(serde_json::from_str::<serde_json::Value>(&broken).is_err());
    }

    fn reason(text: &str) -> String {
        match parse(text) {
            Err(MessageError::NotJsonRpc { reason }) => reason,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// A request sluice makes is what parsing its text finds (the check
    /// that `Message::request` makes in debug builds, here on its own, so
    /// that a release-mode test run holds it too).
    #[test]
    fn a_request_made_is_the_request_its_text_parses_as() {
        for id in [
            Id::number(0),
            Id::number(u64::MAX),
            Id::string("a\"b\\c\u{1}é"),
        ] {
            for params in [
                "{}",
                "[]",
                r#"{"name":"echo","arguments":{"n":1.50,"s":"x\"}\\"},"_meta":{"progressToken":7}}"#,
                "[1,{\"a\":[]},\"]\"]",
            ] {
                let made = Message::request(&id, "tools/call", params);
                let parsed = parse(std::str::from_utf8(made.as_bytes()).unwrap()).unwrap();
                assert_eq!(made.spans(), parsed.spans(), "{id:?} {params}");
                assert_eq!(made.kind(), Kind::Request);
                assert_eq!(made.id(), Some(id.clone()));
                assert_eq!(made.method(), Some("tools/call"));
                assert_eq!(made.params(), Some(params));
            }
        }
    }

    #[test]
    fn a_request_is_read_from_its_envelope_and_kept_as_received() {
        let text = r#"{"jsonrpc":"2.0","id":1e2,"method":"tools/call","params":{"name":"echo","arguments":{"n":1.50,"x-vendor":true}}}"#;
        let m = parse(text).unwrap();
        assert_eq!(m.kind(), Kind::Request);
        assert_eq!(
            m.id().unwrap().as_json(),
            "1e2",
            "a number keeps its spelling"
        );
        assert_eq!(m.method(), Some("tools/call"));
        assert_eq!(
            m.params(),
            Some(r#"{"name":"echo","arguments":{"n":1.50,"x-vendor":true}}"#)
        );
        assert_eq!(m.result(), None);
        assert_eq!(
            &m.as_bytes()[..],
            text.as_bytes(),
            "the bytes are untouched"
        );
        assert_eq!(&text[m.span(Member::Method).unwrap()], r#""tools/call""#);
    }

    #[test]
    fn each_kind_is_told_from_its_members() {
        let kinds = [
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                Kind::Notification,
            ),
            (r#"{"jsonrpc":"2.0","id":"a","result":{}}"#, Kind::Response),
            (
                r#"{"jsonrpc":"2.0","id":"a","result":null}"#,
                Kind::Response,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m"}}"#,
                Kind::Error,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#,
                Kind::Error,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}"#,
                Kind::Request,
            ),
        ];
        for (text, kind) in kinds {
            assert_eq!(parse(text).unwrap().kind(), kind, "{text}");
        }
        let null_id = parse(r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}"#);
        assert_eq!(null_id.unwrap().id(), None, "a null id names no request");
    }

    #[test]
    fn whitespace_a_bom_and_escapes_are_handled() {
        let text = "\u{FEFF}  {\n \"jsonrpc\" : \"2.0\" ,\r\n \"\\u0069d\" : \"a\\\"b\" , \"method\":\"tools\\/list\"}\r\n";
        let m = parse(text).unwrap();
        assert_eq!(
            m.id().unwrap().as_json(),
            r#""a\"b""#,
            "a string id keeps its escapes"
        );
        assert_eq!(m.method(), Some("tools/list"), "the method is decoded");
        assert!(m.as_bytes().starts_with(b"{") && m.as_bytes().ends_with(b"}"));
    }

    #[test]
    fn what_is_not_a_message_is_refused_with_the_reason() {
        assert!(matches!(
            Message::parse(Bytes::from_static(
                b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xFF\"}"
            )),
            Err(MessageError::NotUtf8 { offset: 34 })
        ));
        // The offset is in the bytes received, a byte order mark included.
        assert!(matches!(
            Message::parse(Bytes::from_static(
                b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xFF\"}"
            )),
            Err(MessageError::NotUtf8 { offset: 37 })
        ));
        assert!(matches!(
            parse(r#"{"jsonrpc":"2.0","id":1,"result":{"#),
            Err(MessageError::NotJson { line: 1, .. })
        ));
        let not_json = parse("{\"jsonrpc\":\"2.0\",\n\"id\":1,x}").unwrap_err();
        assert_eq!(
            not_json.to_string(),
            "the message is not JSON: key must be a string at line 2 column 8"
        );
        assert_eq!(
            parse(r#"[{"jsonrpc":"2.0","method":"a"}]"#).unwrap_err(),
            MessageError::Batch
        );
        assert!(reason("42").contains("a number"));
        assert!(reason(r#"{"id":1,"method":"ping"}"#).contains("\"jsonrpc\": \"2.0\" is missing"));
        assert!(reason(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).contains("must be \"2.0\""));
        assert!(reason(r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#).contains("an array"));
        assert!(reason(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).contains("null"));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1,"method":42}"#).contains("must be a string"));
        assert!(
            reason(r#"{"jsonrpc":"2.0","id":1,"method":"a","params":3}"#)
                .contains("object or an array")
        );
        assert!(reason(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#).contains("both"));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1,"method":"a","result":1}"#).contains("not both"));
        assert!(reason(r#"{"jsonrpc":"2.0","result":1}"#).contains("without an \"id\""));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1}"#).contains("no \"method\""));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1,"error":"bad"}"#).contains("code and a message"));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1,"id":2,"result":1}"#).contains("twice"));
    }

    #[test]
    fn max_depth_is_what_serde_json_can_build() {
        let nested = |depth: usize| {
            let inner = depth - 1;
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":{}0{}}}"#,
                "[".repeat(inner),
                "]".repeat(inner)
            )
        };
        let deepest = nested(MAX_DEPTH);
        assert!(parse(&deepest).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&deepest).is_ok());
        let deeper = nested(MAX_DEPTH + 1);
        assert_eq!(
            parse(&deeper).unwrap_err(),
            MessageError::TooDeep { limit: MAX_DEPTH }
        );
        assert!(serde_json::from_str::<serde_json::Value>(&deeper).is_err());
        // A million levels: refused, not a stack overflow.
        assert!(matches!(
            parse(&nested(1_000_000)),
            Err(MessageError::TooDeep { .. })
        ));
        // A large text (a stored result's size), its nesting at the limit
        // and one past it: the same answers.
        let padded = |depth: usize| {
            let inner = depth - 2;
            let pad = "x".repeat(sluice_core::limits::BLOCKING_BYTES);
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"result":["{pad}",{}0{}]}}"#,
                "[".repeat(inner),
                "]".repeat(inner)
            )
        };
        assert!(parse(&padded(MAX_DEPTH)).is_ok());
        assert_eq!(
            parse(&padded(MAX_DEPTH + 1)).unwrap_err(),
            MessageError::TooDeep { limit: MAX_DEPTH }
        );
    }

    #[test]
    fn a_message_over_the_limit_names_the_key_that_raises_it() {
        let text = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"a"}"#);
        assert!(Message::parse_within(text.clone(), 30).is_ok());
        let error = Message::parse_within(text, 29).unwrap_err();
        assert_eq!(
            error,
            MessageError::TooLarge {
                bytes: 30,
                limit: 29
            }
        );
        assert!(error.to_string().contains("`[limits] max_message_mb`"));
    }

    #[test]
    fn routing_fields_are_read_from_params_on_demand() {
        let m = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__read","arguments":{},"_meta":{"progressToken":"t\u0031","x":1}}}"#,
        )
        .unwrap();
        let routing = m.routing().unwrap();
        assert_eq!(routing.name.as_deref(), Some("fs__read"));
        assert_eq!(routing.uri, None);
        assert_eq!(routing.progress_token.unwrap().as_json(), r#""t\u0031""#);
        assert_eq!(
            routing.meta.unwrap(),
            r#"{"progressToken":"t\u0031","x":1}"#
        );

        assert_eq!(routing.protocol_version, None);
        let m = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        )
        .unwrap();
        let routing = m.routing().unwrap();
        assert_eq!(routing.protocol_version.as_deref(), Some("2026-07-28"));

        let m = parse(r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a\"b","cursor":null}}"#).unwrap();
        let routing = m.routing().unwrap();
        assert_eq!(routing.uri.as_deref(), Some("file:///a\"b"));
        assert_eq!(routing.cursor, None, "null is absent");

        let bad =
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":3}}"#).unwrap();
        assert!(
            bad.routing()
                .unwrap_err()
                .to_string()
                .contains("params.name is a number")
        );
        let bad = parse(
            r#"{"jsonrpc":"2.0","id":1,"method":"a","params":{"_meta":{"progressToken":{}}}}"#,
        )
        .unwrap();
        assert!(bad.routing().is_err());
        let none = parse(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        let routing = none.routing().unwrap();
        assert!(
            routing.name.is_none() && routing.meta.is_none() && routing.progress_token.is_none()
        );
    }

    #[test]
    fn the_version_key_is_spelled_as_its_name() {
        assert_eq!(
            PROTOCOL_VERSION_META_KEY,
            format!("\"{PROTOCOL_VERSION_META}\"")
        );
    }

    #[test]
    fn routing_walked_finds_what_the_members_give_in_params_made_at_random() {
        // Keys sluice routes on, spelled plain and with escapes, and others;
        // values of every type, `_meta`s with what it reads, twice or not.
        const KEYS: [&str; 8] = [
            r#""name""#,
            r#""uri""#,
            r#""cursor""#,
            r#""_meta""#,
            r#""arguments""#,
            r#""n\u0061me""#,
            r#""_met\u0061""#,
            r#""x""#,
        ];
        const VALUES: [&str; 12] = [
            r#""echo""#,
            r#""a\"b\u0041""#,
            "null",
            "3",
            "[1,{}]",
            "{}",
            r#"{"progressToken":"t"}"#,
            r#"{"progressToken":7,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}"#,
            r#"{"progressToken":{},"x":[{"progressToken":1}]}"#,
            r#"{"progr\u0065ssToken":"e","io.modelcontextprotocol/protocolVersion":3}"#,
            r#"{"progressToken":"a","progressToken":null}"#,
            r#"{ "io.modelcontextprotocol/protocolVersion" : "2025-11-25" , "progressToken" : -1 }"#,
        ];
        let mut next = crate::test_support::pseudo_random(0x0007e5);
        let (mut walked, mut routed) = (0, 0);
        for _ in 0..4000 {
            let members: Vec<String> = (0..next(5))
                .map(|_| format!("{}:{}", KEYS[next(KEYS.len())], VALUES[next(VALUES.len())]))
                .collect();
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{ {} }}}}"#,
                members.join(" , ")
            );
            let message = parse(&line).unwrap();
            let params = message.params().unwrap();
            let by_members = RoutingTexts::of_members(params).unwrap();
            if let Some(by_walk) = RoutingTexts::walked(params) {
                walked += 1;
                assert_eq!(by_walk, by_members, "{params}");
            }
            // And what the routing makes of them, with its errors.
            let routing = message.routing();
            routed += usize::from(routing.is_ok());
            assert_eq!(
                format!("{routing:?}"),
                format!("{:?}", by_members.routing()),
                "{params}"
            );
        }
        assert!(
            walked > 2000 && routed > 1000,
            "{walked} walked, {routed} routed"
        );
    }

    #[test]
    fn ids_compare_by_their_text() {
        assert_eq!(Id::number(7), Id::from_json("7").unwrap());
        assert_ne!(Id::from_json("1e2"), Id::from_json("100"));
        assert_eq!(Id::number(7).as_u64(), Some(7));
        for n in [0, 1, 9, 10, 99, 100, 12_345, u64::MAX - 1, u64::MAX] {
            assert_eq!(Id::number(n).as_json(), n.to_string());
        }
        assert_eq!(Id::from_json("7.0").unwrap().as_u64(), None);
        assert_eq!(Id::string("a\"b").as_json(), r#""a\"b""#);
        for bad in ["", " 1", "1 ", "[1]", "null", "\"a", "01", "1x", "true"] {
            assert_eq!(Id::from_json(bad), None, "{bad:?}");
        }
    }
}

#[cfg(test)]
mod cancelled_tests {
    use super::*;

    fn parse(text: &str) -> Message {
        Message::parse(Bytes::from(text.to_owned())).unwrap()
    }

    #[test]
    fn a_cancellation_names_its_request_as_written() {
        let named = parse(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r\u00e9","reason":"x"}}"#,
        );
        assert_eq!(named.cancelled_request(), Id::from_json(r#""r\u00e9""#));
        let number = parse(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
        );
        assert_eq!(number.cancelled_request(), Some(Id::number(7)));
        for other in [
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"a":1}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":7}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
        ] {
            assert_eq!(parse(other).cancelled_request(), None, "{other}");
        }
    }
}
