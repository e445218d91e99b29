//! The bytes of the answers [`super::front`] writes: merged lists, upstream
//! results relayed as sent, and the results sluice made, each shaped for
//! the client's protocol era as rmcp's server shaped them (`resultType`;
//! the cache hints of 2026-07-28; no `input_required` before it).

use bytes::Bytes;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ErrorData, RequestId, ResultType, ServerJsonRpcMessage,
    ServerResult,
};

use crate::gateway::Relayed;
use crate::jsonrpc::{Id, Message, RawObject};

/// The members 2026-07-28 requires on a complete cacheable result (lists,
/// `resources/read`), with the values rmcp's server fills in when a result
/// lacks them: immediately stale, private.
const CACHE_HINTS: [(&str, &str); 2] = [("ttlMs", "0"), ("cacheScope", r#""private""#)];

/// How a result is edited for the client's era.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The client speaks the initialize era (2025-11-25): no `resultType`.
    pub legacy: bool,
    /// The result is one 2026-07-28 caches (`resources/read`): it carries
    /// `ttlMs` and `cacheScope` for such a client, and neither for an older
    /// one.
    pub cache_hints: bool,
}

/// The answer to list request `id`: the items under `key` (`tools`,
/// `prompts`, `resources`, `resourceTemplates`), each as its text; for a
/// 2026-07-28 request (not `legacy`) with the `resultType` and the cache
/// hints that version requires, as rmcp's server fills them in.
pub fn list_line(id: &Id, key: &str, items: &[String], legacy: bool) -> Bytes {
    let size: usize = items.iter().map(|t| t.len() + 1).sum();
    let mut line = Vec::with_capacity(size + id.as_json().len() + key.len() + 112);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    line.extend_from_slice(id.as_json().as_bytes());
    line.extend_from_slice(br#","result":{"#);
    if !legacy {
        line.extend_from_slice(br#""resultType":"complete","ttlMs":0,"cacheScope":"private","#);
    }
    line.push(b'"');
    line.extend_from_slice(key.as_bytes());
    line.extend_from_slice(br#"":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            line.push(b',');
        }
        line.extend_from_slice(item.as_bytes());
    }
    line.extend_from_slice(b"]}}");
    Bytes::from(line)
}

/// The line that answers request `id` with `answer`: the upstream's result
/// as it sent it when the answer carries that ([`relayed_line`]), else the
/// result `made` makes of the answer (or the error), as bytes.
pub fn line_of<R>(
    id: &Id,
    answer: Result<Relayed<R>, ErrorData>,
    shape: Shape,
    made: impl FnOnce(Relayed<R>) -> Result<ServerResult, ErrorData>,
) -> Bytes {
    if let Ok(relayed) = &answer
        && let Some(line) = relayed
            .raw
            .as_ref()
            .and_then(|raw| relayed_line(id, raw, shape))
    {
        return line;
    }
    let answer = answer.and_then(made);
    answer_line(id, answer.map_err(|e| in_era(e, shape.legacy)))
}

/// What rmcp's server makes of a call's answer: a task only for a client
/// that declared tasks, then [`for_era`].
pub fn shaped_call(
    response: CallToolResponse,
    tasks: bool,
    legacy: bool,
) -> Result<ServerResult, ErrorData> {
    if matches!(response, CallToolResponse::Task(_)) && !tasks {
        return Err(ErrorData::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ));
    }
    for_era(ServerResult::from(response), legacy)
}

/// A result sluice made, for the client's era: for the initialize era
/// (`legacy`) no `input_required` and no `resultType`; for 2026-07-28 a
/// `resultType` on a call's result and the cache hints on cacheable ones.
pub fn for_era(mut result: ServerResult, legacy: bool) -> Result<ServerResult, ErrorData> {
    if !legacy {
        if let ServerResult::CallToolResult(r) = &mut result {
            r.result_type.get_or_insert(ResultType::COMPLETE);
        }
        result.fill_missing_cache_hints();
        return Ok(result);
    }
    if matches!(result, ServerResult::InputRequiredResult(_)) {
        return Err(ErrorData::invalid_request(
            "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
            None,
        ));
    }
    result.strip_result_type_for_legacy_peer();
    Ok(result)
}

/// An error as the client's era spells it: 2026-07-28 has no
/// resource-not-found code of its own (invalid params instead).
pub fn in_era(mut error: ErrorData, legacy: bool) -> ErrorData {
    if !legacy && error.code == rmcp::model::ErrorCode::RESOURCE_NOT_FOUND {
        error.code = rmcp::model::ErrorCode::INVALID_PARAMS;
    }
    error
}

/// The line that answers the client's request `id` with an upstream's
/// result as the upstream sent it: every byte of its `result` kept, except
/// what the client's era requires (see [`Shape`]): for the initialize era
/// no `resultType` (nor cache hints); for 2026-07-28 a `resultType` (and
/// the cache hints) added where the upstream, of the older era, sent none,
/// first in the object. `None` if the upstream's response has no result to
/// relay.
pub fn relayed_line(id: &Id, upstream: &Message, shape: Shape) -> Option<Bytes> {
    let result = upstream.result()?;
    let edited;
    let result = match edited_for(result, shape)? {
        Some(text) => {
            edited = text;
            edited.as_str()
        }
        None => result,
    };
    let mut line = Vec::with_capacity(result.len() + id.as_json().len() + 32);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    line.extend_from_slice(id.as_json().as_bytes());
    line.extend_from_slice(br#","result":"#);
    line.extend_from_slice(result.as_bytes());
    line.push(b'}');
    Some(Bytes::from(line))
}

/// `result` edited for `shape`: `Some(None)` when it goes as it is,
/// `None` when it is not an object.
fn edited_for(result: &str, shape: Shape) -> Option<Option<String>> {
    // Searchers built once: building one costs more than searching a
    // small result.
    static RESULT_TYPE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""resultType""#));
    // Read as an object only if a key sluice edits may be there.
    let mentioned = shape.cache_hints || RESULT_TYPE.find(result.as_bytes()).is_some();
    let object = if mentioned {
        Some(RawObject::of_checked(result).ok()?)
    } else {
        None
    };
    if shape.legacy {
        let Some(mut object) = object else {
            return Some(None);
        };
        let mut removed = object.remove("resultType").is_some();
        if shape.cache_hints {
            for (key, _) in CACHE_HINTS {
                removed |= object.remove(key).is_some();
            }
        }
        return Some(removed.then(|| object.to_json()));
    }
    // The members the result lacks, put first, then the rest as sent.
    let has = |key: &str| object.as_ref().is_some_and(|o| o.get(key).is_some());
    let mut missing = String::new();
    if !has("resultType") {
        missing.push_str(r#""resultType":"complete","#);
    }
    // Only a complete result is cacheable.
    let complete = object
        .as_ref()
        .and_then(|o| o.get_str("resultType"))
        .is_none_or(|t| t == "complete");
    if shape.cache_hints && complete {
        for (key, value) in CACHE_HINTS {
            if !has(key) {
                missing.push_str(&format!(r#""{key}":{value},"#));
            }
        }
    }
    if missing.is_empty() {
        return Some(None);
    }
    let rest = result.trim_start().strip_prefix('{')?.trim_start();
    if rest.starts_with('}') {
        missing.pop();
    }
    Some(Some(format!("{{{missing}{rest}")))
}

/// The answer's line, with the client's id exactly as it sent it.
pub fn answer_line(id: &Id, answer: Result<ServerResult, ErrorData>) -> Bytes {
    let placeholder = RequestId::Number(0);
    let message = match answer {
        Ok(result) => ServerJsonRpcMessage::response(result, placeholder),
        Err(error) => ServerJsonRpcMessage::error(error, Some(placeholder)),
    };
    let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
    match Message::parse(Bytes::from(bytes)) {
        Ok(message) => message.with_id(id).into_bytes(),
        Err(e) => {
            // Not reachable: serde_json writes valid JSON-RPC.
            tracing::error!("an answer sluice made could not be read back: {e}");
            Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"sluice could not encode its answer"}}}}"#
            ))
        }
    }
}

/// The line that answers `tasks/get` (`id`) with `task` (a
/// `GetTaskResult` whose `result` is empty) and, as its `result`, the call's
/// result as the upstream sent it in `call` (without a `resultType` for
/// the initialize era, `legacy`): the result's members, their order and
/// spellings kept.
pub fn task_line(id: &Id, task: ServerResult, call: &Message, legacy: bool) -> Bytes {
    let made = answer_line(id, Ok(task));
    spliced_task(&made, call, legacy).unwrap_or_else(|| {
        // Not reachable: both are valid JSON objects.
        tracing::error!("a task's result could not be put in its answer");
        made
    })
}

fn spliced_task(made: &[u8], call: &Message, legacy: bool) -> Option<Bytes> {
    let made = std::str::from_utf8(made).ok()?;
    let mut message = RawObject::parse(made).ok()?;
    let mut task = RawObject::parse(message.get_parsed("result")?).ok()?;
    let sent = call.result()?;
    // 2026-07-28: as sent (sluice adds no `resultType` to a task's result).
    let shaped = if legacy {
        edited_for(
            sent,
            Shape {
                legacy,
                cache_hints: false,
            },
        )?
    } else {
        None
    };
    let result =
        serde_json::value::RawValue::from_string(shaped.unwrap_or_else(|| sent.to_owned())).ok()?;
    task.insert("result", result);
    message.insert("result", task.to_raw().ok()?);
    Some(Bytes::from(message.to_json()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(result: &str, legacy: bool, cache_hints: bool) -> String {
        let upstream = Message::parse(Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{result}}}"#
        )))
        .unwrap();
        let line = relayed_line(
            &Id::number(1),
            &upstream,
            Shape {
                legacy,
                cache_hints,
            },
        )
        .unwrap();
        let line = String::from_utf8(line.to_vec()).unwrap();
        let prefix = r#"{"jsonrpc":"2.0","id":1,"result":"#;
        assert!(line.starts_with(prefix), "{line}");
        line[prefix.len()..line.len() - 1].to_owned()
    }

    #[test]
    fn a_result_goes_as_sent_but_for_what_the_era_requires() {
        let sent = r#"{ "contents":[{"uri":"a","text":"1.50"}], "x":1e2 }"#;
        // The initialize era: nothing to remove, nothing changes.
        assert_eq!(relayed(sent, true, true), sent);
        assert_eq!(relayed(sent, true, false), sent);
        // 2026-07-28: what is missing goes first, the rest as sent.
        assert_eq!(
            relayed(sent, false, true),
            r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private","contents":[{"uri":"a","text":"1.50"}], "x":1e2 }"#
        );
        assert_eq!(
            relayed(sent, false, false),
            r#"{"resultType":"complete","contents":[{"uri":"a","text":"1.50"}], "x":1e2 }"#
        );
        assert_eq!(
            relayed("{ }", false, true),
            r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private"}"#
        );
    }

    #[test]
    fn a_2026_upstreams_members_are_kept_for_a_2026_client_and_removed_for_an_older_one() {
        let sent = r#"{"resultType":"complete","contents":[],"ttlMs":5000,"cacheScope":"public"}"#;
        assert_eq!(relayed(sent, false, true), sent);
        assert_eq!(relayed(sent, true, true), r#"{"contents":[]}"#);
        // A call's result has no cache hints to remove.
        let call = r#"{"resultType":"complete","content":[],"ttlMs":1}"#;
        assert_eq!(relayed(call, true, false), r#"{"content":[],"ttlMs":1}"#);
        // Hints only where the result is complete.
        let partial = r#"{"resultType":"input_required","inputRequests":{}}"#;
        assert_eq!(relayed(partial, false, true), partial);
        let hinted = r#"{"contents":[],"ttlMs":9}"#;
        assert_eq!(
            relayed(hinted, false, true),
            r#"{"resultType":"complete","cacheScope":"private","contents":[],"ttlMs":9}"#
        );
    }

    #[test]
    fn lists_carry_the_hints_of_2026_only() {
        let items = [r#"{"name":"a","x":1.50}"#.to_owned()];
        let legacy = list_line(&Id::number(2), "prompts", &items, true);
        assert_eq!(
            &legacy[..],
            br#"{"jsonrpc":"2.0","id":2,"result":{"prompts":[{"name":"a","x":1.50}]}}"#
        );
        let current = list_line(&Id::string("q"), "resources", &[], false);
        assert_eq!(
            &current[..],
            br#"{"jsonrpc":"2.0","id":"q","result":{"resultType":"complete","ttlMs":0,"cacheScope":"private","resources":[]}}"#
        );
    }
}
