//! The params of `tools/call` and `prompts/get` as the gateway reads them:
//! the arguments kept as the text the client sent.
//!
//! sluice reads in a call's arguments only its own (`_timeout_s`,
//! `_fresh`), and forwards the rest as sent; a prompt's it only forwards.
//! Decoded into a tree (`serde_json`'s map, as rmcp's params hold them),
//! arguments of many small values cost many times their text: 64 MB of
//! `[0,0,…]` made sluice hold 6 GB while the call ran. As text they cost
//! their size once; they are decoded only where a tree is needed: a
//! built-in tool's arguments (bounded, [`NamedParams::builtin_arguments`]),
//! a cached call's key (bounded, [`CACHED_ARGUMENTS_MAX`]), and a request
//! sluice must make rather than forward (a task, a bridged round, no
//! client text to forward).

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, GetPromptRequestParams, InputResponses, JsonObject, RequestMetaObject,
};
use serde::Deserialize as _;
use serde_json::Value;
use serde_json::value::RawValue;

use bytestring::ByteString;

use crate::jsonrpc::{Message, RawObject};

/// The most arguments one of sluice's own tools takes (it has at most 8).
pub const BUILTIN_ARGUMENTS_MAX: usize = 64;

/// The most bytes of arrays and objects in arguments sluice decodes (one
/// of its own tools', a cached call's for its key): a string decodes to
/// its own size, arrays and objects of small values to many times theirs.
pub const STRUCTURED_MAX: usize = 64 * 1024;

/// The largest arguments of a call sluice caches, with at most
/// [`STRUCTURED_MAX`] bytes of arrays and objects: a larger call goes to its
/// upstream each time (its key would be its arguments, decoded and written
/// again in canonical form).
pub const CACHED_ARGUMENTS_MAX: usize = 1 << 20;

/// A `tools/call`'s or a `prompts/get`'s params (their members are the
/// same): what rmcp's `CallToolRequestParams` and `GetPromptRequestParams`
/// read, the arguments as their raw JSON text (an object, or absent), a
/// slice of the client's message (not a copy).
#[derive(Debug, Clone)]
pub struct NamedParams {
    /// The request's `_meta`.
    pub meta: Option<RequestMetaObject>,
    /// The tool's or the prompt's name.
    pub name: Cow<'static, str>,
    arguments: Option<ByteString>,
    /// The client's answers to an `input_required` result (2026-07-28).
    pub input_responses: Option<InputResponses>,
    /// The state echoed from an `input_required` result (2026-07-28).
    pub request_state: Option<String>,
}

/// [`NamedParams`] as read from the params' text, the arguments borrowed.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sent<'a> {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
    name: Cow<'static, str>,
    #[serde(default, borrow, deserialize_with = "object_text")]
    arguments: Option<&'a RawValue>,
    #[serde(default)]
    input_responses: Option<InputResponses>,
    #[serde(default)]
    request_state: Option<String>,
}

/// `arguments`: `null` or absent as none, an object as its text, anything
/// else refused as the typed params refuse it.
fn object_text<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    use serde::de::{Error as _, Unexpected};
    let raw = Option::<&'de RawValue>::deserialize(deserializer)?;
    let Some(text) = raw.map(RawValue::get) else {
        return Ok(raw);
    };
    if text.starts_with('{') {
        return Ok(raw);
    }
    // Said as serde says it of the typed params (an array not read; any
    // other value is one scalar, cheap to decode).
    if text.starts_with('[') {
        return Err(D::Error::invalid_type(Unexpected::Seq, &"a map"));
    }
    let scalar: Value = serde_json::from_str(text).map_err(D::Error::custom)?;
    let unexpected = match &scalar {
        Value::String(s) => Unexpected::Str(s),
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (_, Some(i), _) => Unexpected::Signed(i),
            (_, _, Some(f)) => Unexpected::Float(f),
            _ => Unexpected::Other("a number"),
        },
        _ => Unexpected::Other(crate::jsonrpc::message::json_type(text)),
    };
    Err(D::Error::invalid_type(unexpected, &"a map"))
}

impl NamedParams {
    /// The params of `message`, a `tools/call` or a `prompts/get`; `None`
    /// when it has none or they do not read as such (see
    /// [`NamedParams::why_unread`]).
    pub fn of(message: &Message) -> Option<NamedParams> {
        let params = message.params()?;
        Self::walked(message, params).or_else(|| Self::decoded(message, params))
    }

    /// [`NamedParams::of`] by `serde_json`.
    fn decoded(message: &Message, params: &str) -> Option<NamedParams> {
        let sent: Sent<'_> = serde_json::from_str(params).ok()?;
        Some(NamedParams {
            meta: sent.meta,
            name: sent.name,
            arguments: sent.arguments.map(|raw| message.slice(raw.get())),
            input_responses: sent.input_responses,
            request_state: sent.request_state,
        })
    }

    /// [`NamedParams::of`] for the params nearly every call sends (a name
    /// without escapes, the arguments an object or `null`, a `_meta`),
    /// found by walking the text the message's parse checked, where
    /// `serde_json` would check it again (a third of the work of taking a
    /// small call); `None` for anything else, which `serde_json` reads
    /// (or refuses) as ever. What it gives is what `serde_json` gives.
    fn walked(message: &Message, params: &str) -> Option<NamedParams> {
        const WANTED: [&str; 5] = [
            "\"name\"",
            "\"arguments\"",
            "\"_meta\"",
            "\"inputResponses\"",
            "\"requestState\"",
        ];
        let mut walker = crate::jsonrpc::walk::members(params)?;
        let mut seen = [false; WANTED.len()];
        let (mut name, mut arguments, mut meta) = (None, None, None);
        while let Some(key) = walker.key() {
            // A key with an escape (serde refuses a lone surrogate in one,
            // even of a member it ignores): left to serde.
            if key.contains('\\') {
                return None;
            }
            let Some(slot) = WANTED.iter().position(|wanted| *wanted == key) else {
                walker.value();
                continue;
            };
            // Twice: serde refuses it.
            if std::mem::replace(&mut seen[slot], true) {
                return None;
            }
            match slot {
                0 => {
                    // A name with an escape (a lone surrogate among them,
                    // which serde refuses) or not a string: left to serde.
                    let text = walker.value().strip_prefix('"')?.strip_suffix('"')?;
                    if text.contains('\\') {
                        return None;
                    }
                    name = Some(text);
                }
                1 => match walker.value() {
                    "null" => {}
                    object if object.starts_with('{') => arguments = Some(object),
                    // Refused, in serde's words (`why_unread`).
                    _ => return None,
                },
                2 => {
                    meta = serde_json::from_str::<Option<RequestMetaObject>>(walker.value()).ok()?
                }
                // An answer to `input_required`: rare, and typed.
                _ => return None,
            }
        }
        Some(NamedParams {
            meta,
            name: Cow::Owned(name?.to_owned()),
            arguments: arguments.map(|text| message.slice(text)),
            input_responses: None,
            request_state: None,
        })
    }

    /// Why `params` do not read as a `tools/call`'s or a `prompts/get`'s.
    pub fn why_unread(params: &str) -> Option<serde_json::Error> {
        serde_json::from_str::<Sent<'_>>(params).err()
    }

    /// The arguments' text as the client sent it (sluice's own taken out,
    /// see [`NamedParams::take_argument`]).
    pub fn arguments_text(&self) -> Option<&str> {
        self.arguments.as_deref()
    }

    /// The arguments' size in bytes, as text.
    pub fn arguments_len(&self) -> usize {
        self.arguments_text().map_or(0, str::len)
    }

    /// The arguments decoded: a tree of their size several times over, made
    /// only where one is needed (see the module's comment).
    pub fn arguments(&self) -> Option<JsonObject> {
        // Read as an object once already: decoding it again cannot fail.
        self.arguments_text()
            .and_then(|text| serde_json::from_str(text).ok())
    }

    /// The arguments of one of sluice's own tools, decoded, within
    /// [`BUILTIN_ARGUMENTS_MAX`] arguments and [`STRUCTURED_MAX`]
    /// bytes of arrays and objects; else why not, for the model. Strings of
    /// any length are taken (a tool says what it does with one too long).
    pub fn builtin_arguments(&self) -> Result<Option<JsonObject>, String> {
        let tool = &self.name;
        let (count, structured) = self.shape().map_err(|e| e.to_string())?;
        if count > BUILTIN_ARGUMENTS_MAX {
            return Err(format!(
                "`{tool}` was called with {count} arguments: sluice's own tools take at most \
                 {BUILTIN_ARGUMENTS_MAX} (see the tool's input schema)"
            ));
        }
        if structured > STRUCTURED_MAX {
            return Err(format!(
                "the arguments of `{tool}` hold {structured} bytes of arrays and objects: \
                 sluice's own tools take strings, numbers and booleans, with at most \
                 {STRUCTURED_MAX} bytes of arrays and objects (see the tool's input schema)"
            ));
        }
        Ok(self.arguments())
    }

    /// Whether a cached call's key may be made of these arguments (decoded):
    /// at most [`CACHED_ARGUMENTS_MAX`] bytes, [`STRUCTURED_MAX`] of them
    /// arrays and objects.
    pub fn keyable(&self) -> bool {
        self.arguments_len() <= CACHED_ARGUMENTS_MAX
            && self
                .shape()
                .is_ok_and(|(_, structured)| structured <= STRUCTURED_MAX)
    }

    /// How many top-level arguments there are, and how many bytes of
    /// arrays and objects they hold (every nested one is inside a
    /// top-level one); `(0, 0)` without arguments.
    fn shape(&self) -> Result<(usize, usize), serde_json::Error> {
        let Some(text) = self.arguments_text() else {
            return Ok((0, 0));
        };
        let members = RawObject::of_checked(text)?;
        let structured = members
            .iter()
            .map(|(_, value)| value)
            .filter(|value| value.starts_with(['{', '[']))
            .map(str::len)
            .sum();
        Ok((members.len(), structured))
    }

    /// Whether a top-level argument is named `key`.
    pub fn has_argument(&self, key: &str) -> bool {
        self.arguments_text()
            .filter(|text| may_name(text, key))
            .and_then(|text| RawObject::of_checked(text).ok())
            .is_some_and(|arguments| arguments.get(key).is_some())
    }

    /// Takes the top-level argument `key` out (every member of that name),
    /// and gives its value (the last one's, as `serde_json` reads it). The
    /// text is read only if it may name the key, and written again only if
    /// it does.
    pub fn take_argument(&mut self, key: &str) -> Option<Value> {
        let text = self.arguments_text().filter(|text| may_name(text, key))?;
        let mut arguments = RawObject::of_checked(text).ok()?;
        let value = serde_json::from_str(&arguments.remove(key)?).ok();
        let edited = ByteString::from(arguments.to_json());
        self.arguments = Some(edited);
        value
    }

    /// The same params as a prompt's, in rmcp's model (their arguments
    /// decoded), for a request sluice makes rather than forwards.
    pub fn to_prompt(&self) -> GetPromptRequestParams {
        let CallToolRequestParams {
            meta,
            name,
            arguments,
            input_responses,
            request_state,
            ..
        } = self.to_rmcp();
        let mut params = GetPromptRequestParams::new(name);
        (params.meta, params.arguments) = (meta, arguments);
        (params.input_responses, params.request_state) = (input_responses, request_state);
        params
    }

    /// The same params as a tool call's, in rmcp's model (their arguments
    /// decoded), for a request sluice makes rather than forwards.
    pub fn to_rmcp(&self) -> CallToolRequestParams {
        let mut params = CallToolRequestParams::new(self.name.clone());
        params.meta = self.meta.clone();
        params.arguments = self.arguments();
        params.input_responses = self.input_responses.clone();
        params.request_state = self.request_state.clone();
        params
    }
}

/// Whether an object's text may have a member `key`: it names it, or
/// writes something with an escape, which could spell it.
fn may_name(text: &str, key: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), key.as_bytes()).is_some() || text.contains('\\')
}

impl From<CallToolRequestParams> for NamedParams {
    fn from(params: CallToolRequestParams) -> NamedParams {
        NamedParams {
            meta: params.meta,
            name: params.name,
            // A map of `Value`s always writes as JSON.
            arguments: params
                .arguments
                .and_then(|a| serde_json::to_string(&a).ok())
                .map(ByteString::from),
            input_responses: params.input_responses,
            request_state: params.request_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<NamedParams, serde_json::Error> {
        if let Some(error) = NamedParams::why_unread(text) {
            return Err(error);
        }
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{text}}}"#);
        Ok(NamedParams::of(&Message::parse(line.into_bytes().into()).unwrap()).unwrap())
    }

    /// The walk gives what serde gives, for the params nearly every call
    /// sends (which it reads) and for those it leaves to serde: escapes in
    /// a key or the name (a lone surrogate, which serde refuses), a member
    /// twice, arguments not an object, `_meta` of every kind, answers to
    /// `input_required`, unknown members, params not an object.
    #[test]
    fn the_walk_reads_what_serde_reads() {
        let walked = [
            r#"{"name":"echo","arguments":{"text":"hello"}}"#,
            r#"{"arguments":{"b":1.50,"a":[1e2,-0,"\ud800"]}, "name" : "t"}"#,
            r#"{"name":"t","arguments":null,"_meta":{"progressToken":7}}"#,
            r#"{"_meta":null,"name":"é t","x-vendor":{"a":["}"]},"arguments":{}}"#,
            r#"{"name":"t","_meta":{"progressToken":"p","io.x/y":{"z":[1]}}}"#,
            r#"{"name":"t","ignored":"\ud800"}"#,
            r#"{"name":"t","_meta":{"progressToken":true}}"#,
        ];
        let left_to_serde = [
            r#"{"name":"t\u0041","arguments":{}}"#,
            r#"{"name":"\ud800"}"#,
            r#"{"n\u0061me":"t"}"#,
            r#"{"name":"t","\ud800":1}"#,
            r#"{"name":"t","name":"u"}"#,
            r#"{"name":"t","arguments":{},"arguments":{}}"#,
            r#"{"name":"t","arguments":[0,0]}"#,
            r#"{"name":"t","arguments":"x"}"#,
            r#"{"name":"t","_meta":[1]}"#,
            r#"{"name":"t","inputResponses":{"a":{"action":"cancel"}},"requestState":"s"}"#,
            r#"{"name":"t","requestState":null}"#,
            r#"{"name":7}"#,
            r#"{"name":null}"#,
            r#"{"arguments":{}}"#,
            r#"{}"#,
            r#"["t"]"#,
            r#"[null,"t"]"#,
        ];
        for (params, walks) in walked
            .iter()
            .map(|p| (p, true))
            .chain(left_to_serde.iter().map(|p| (p, false)))
        {
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            let message = Message::parse(line.into_bytes().into()).unwrap();
            let sent = message.params().unwrap();
            let by_walk = NamedParams::walked(&message, sent);
            let by_serde = NamedParams::decoded(&message, sent);
            assert_eq!(by_walk.is_some(), walks, "{params}: {by_walk:?}");
            if walks {
                assert_eq!(format!("{by_walk:?}"), format!("{by_serde:?}"), "{params}");
            }
            assert_eq!(
                format!("{:?}", NamedParams::of(&message)),
                format!("{by_serde:?}"),
                "{params}"
            );
        }
    }

    /// The same over params made at random (a fixed seed) from the members
    /// and values that tell the walk and serde apart: wherever the walk
    /// reads params, it gives what serde gives.
    #[test]
    fn the_walk_reads_what_serde_reads_in_params_made_at_random() {
        const KEYS: [&str; 9] = [
            r#""name""#,
            r#""arguments""#,
            r#""_meta""#,
            r#""inputResponses""#,
            r#""requestState""#,
            r#""x-other""#,
            r#""n\u0061me""#,
            r#""\ud800""#,
            r#""Name""#,
        ];
        const VALUES: [&str; 14] = [
            r#""echo""#,
            r#""t\u0041""#,
            r#""\ud800""#,
            r#""é \"q\"""#,
            "null",
            "7",
            "true",
            "[0,{}]",
            "{}",
            r#"{"text":"a\nb","n":[1.50,-0]}"#,
            r#"{"progressToken":"p"}"#,
            r#"{"a":{"action":"cancel"}}"#,
            r#"{"\ud800":1}"#,
            r#"[null,"t"]"#,
        ];
        let mut next = crate::test_support::pseudo_random(0x5eed);
        let mut walked = 0;
        for _ in 0..4000 {
            // Half begin with a plain name, as nearly every call does.
            let mut members: Vec<String> = (0..next(2))
                .map(|_| r#""name":"echo""#.to_owned())
                .collect();
            members.extend(
                (0..next(4))
                    .map(|_| format!("{}:{}", KEYS[next(KEYS.len())], VALUES[next(VALUES.len())])),
            );
            let params = format!("{{{}}}", members.join(","));
            let line =
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            let message = Message::parse(line.into_bytes().into()).unwrap();
            let sent = message.params().unwrap();
            let by_serde = NamedParams::decoded(&message, sent);
            if let Some(by_walk) = NamedParams::walked(&message, sent) {
                walked += 1;
                assert_eq!(
                    format!("{:?}", Some(by_walk)),
                    format!("{by_serde:?}"),
                    "{params}"
                );
            }
            assert_eq!(
                format!("{:?}", NamedParams::of(&message)),
                format!("{by_serde:?}"),
                "{params}"
            );
        }
        // The walk is not a path never taken.
        assert!(walked > 400, "{walked}");
    }

    #[test]
    fn arguments_are_kept_as_sent_and_only_an_object_is_taken() {
        let params = read(r#"{"name":"t","arguments":{"b":1.50, "a":[1e2,-0]}}"#).unwrap();
        assert_eq!(params.arguments_text(), Some(r#"{"b":1.50, "a":[1e2,-0]}"#));
        assert_eq!(params.name, "t");
        assert!(
            read(r#"{"name":"t","arguments":null}"#)
                .unwrap()
                .arguments_text()
                .is_none()
        );
        assert!(read(r#"{"name":"t"}"#).unwrap().arguments_text().is_none());
        for refused in [r#"[0,0]"#, r#""x""#, "1", "true"] {
            let error = read(&format!(r#"{{"name":"t","arguments":{refused}}}"#)).unwrap_err();
            assert!(
                error.to_string().contains("expected a map"),
                "{refused}: {error}"
            );
        }
        // What the typed params refuse, this refuses too.
        assert!(read(r#"{"arguments":{}}"#).is_err());
        assert!(read(r#"{"name":"t","arguments":{"a":}}"#).is_err());
    }

    #[test]
    fn an_argument_taken_out_leaves_the_others_as_sent() {
        let mut params =
            read(r#"{"name":"t","arguments":{"x":1.50,"_timeout_s":5,"y":[1e2],"_timeout_s":7}}"#)
                .unwrap();
        assert!(params.has_argument("_timeout_s"));
        assert_eq!(
            params.take_argument("_timeout_s"),
            Some(serde_json::json!(7))
        );
        assert_eq!(params.arguments_text(), Some(r#"{"x":1.50,"y":[1e2]}"#));
        assert!(!params.has_argument("_timeout_s"));
        assert_eq!(params.take_argument("_timeout_s"), None);
        // Written with an escape, the key is still found.
        let mut escaped = read(r#"{"name":"t","arguments":{"\u005ffresh":true}}"#).unwrap();
        assert_eq!(escaped.take_argument("_fresh"), Some(Value::Bool(true)));
        assert_eq!(escaped.arguments_text(), Some("{}"));
        // A value that names the key is not the key.
        let named = read(r#"{"name":"t","arguments":{"q":"_fresh"}}"#).unwrap();
        assert!(!named.has_argument("_fresh"));
    }

    #[test]
    fn a_builtin_tools_arguments_are_decoded_only_within_bounds() {
        let with = |arguments: &str| {
            read(&format!(
                r#"{{"name":"sluice_read","arguments":{arguments}}}"#
            ))
            .unwrap()
            .builtin_arguments()
        };
        // A long string is taken: it decodes to its own size.
        let long = format!(r#"{{"handle":"{}","page":2}}"#, "a".repeat(3 << 20));
        assert_eq!(with(&long).unwrap().unwrap()["page"], 2);
        assert_eq!(with("null").unwrap(), None);
        let many: Vec<String> = (0..=BUILTIN_ARGUMENTS_MAX)
            .map(|i| format!(r#""a{i}":0"#))
            .collect();
        let refused = with(&format!("{{{}}}", many.join(","))).unwrap_err();
        assert!(
            refused.contains("65 arguments") && refused.contains("at most 64"),
            "{refused}"
        );
        let values = format!("[{}0]", "0,".repeat(STRUCTURED_MAX / 2));
        let refused = with(&format!(r#"{{"handle":"h","path":{values}}}"#)).unwrap_err();
        assert!(
            refused.contains("65539 bytes of arrays and objects"),
            "{refused}"
        );
        let small = format!(r#"{{"handle":"h","x":{}}}"#, "[0,0]");
        assert!(with(&small).unwrap().is_some());
    }

    #[test]
    fn rmcps_params_and_these_read_the_same_call() {
        let text = r#"{"name":"t","arguments":{"a":{"b":[1,"x",null]}},"requestState":"s","_meta":{"k":1}}"#;
        let ours = read(text).unwrap();
        let theirs: CallToolRequestParams = serde_json::from_str(text).unwrap();
        assert_eq!(ours.to_rmcp(), theirs);
        let back = NamedParams::from(theirs.clone());
        assert_eq!(back.to_rmcp(), theirs);
        assert_eq!(back.request_state.as_deref(), Some("s"));
        let prompt: GetPromptRequestParams = serde_json::from_str(text).unwrap();
        assert_eq!(ours.to_prompt(), prompt);
    }
}
