//! SEP-2243's standard headers on a request a client POSTs to `/mcp`:
//! `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` must say what the body says,
//! since proxies and load balancers route on them without reading the body.
//!
//! The rules and texts are those of rmcp 3.9.0's Streamable HTTP server
//! (its `validate_standard_headers` and `validate_request_headers`), which
//! served sluice's clients before; `Mcp-Param-*`, which that server never
//! checked for sluice (it had no tool schemas to check them against), are
//! checked too, against the schema the tool's upstream listed:
//!
//! - Only a request or a notification that names version 2026-07-28 or
//!   later in `MCP-Protocol-Version` is checked (the version is compared as
//!   text, as rmcp does).
//! - `initialize` may go without `Mcp-Method` (a client sends the headers
//!   only once the version is agreed), but one it sends must be a single
//!   `initialize`.
//! - Anything else needs a single `Mcp-Method` equal to its method, and a
//!   single `Mcp-Name` equal to what it names (`params.name`, `params.uri` or
//!   `params.taskId`, by method), the latter maybe `=?base64?…?=`.
//! - A `tools/call` whose tool's input schema marks arguments with
//!   `x-mcp-header` needs an `Mcp-Param-<header>` for each such argument it
//!   passes (and none for one it does not), equal to the argument's text.
//!
//! Every header named here is a singleton: a duplicate is refused, even one
//! equal to the first, because an intermediary that resolves duplicates
//! otherwise would route on a value the request never dispatches.

use base64::Engine as _;
use http::HeaderMap;
use serde_json::Value;

use crate::jsonrpc::{Kind, Message};

/// The first protocol version whose requests must carry the headers.
const STANDARD_HEADERS: &str = "2026-07-28";

/// What wraps a header value that could not travel bare.
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// Why the request's SEP-2243 headers do not say what its body says (the
/// caller answers HTTP 400 with JSON-RPC error -32020 and this text); Ok
/// when they do or when its version does not require them.
///
/// `tool_schema` gives the input schema of a tool by the name the client
/// calls it; without one, a call's `Mcp-Param-*` headers are not checked.
pub fn check(
    headers: &HeaderMap,
    message: &Message,
    tool_schema: impl Fn(&str) -> Option<Value>,
) -> Result<(), String> {
    // A version that is not text is no version: nothing is required.
    let required = headers
        .get("mcp-protocol-version")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|version| version >= STANDARD_HEADERS);
    if !required || !matches!(message.kind(), Kind::Request | Kind::Notification) {
        return Ok(());
    }
    let Some(method) = message.method() else {
        return Ok(());
    };
    if message.kind() == Kind::Request && method == "initialize" {
        return check_initialize(headers);
    }

    match single(headers, "Mcp-Method")? {
        None => return Err("missing required Mcp-Method header".to_owned()),
        Some(value) if value != method => {
            return Err(format!(
                "Mcp-Method header `{value}` does not match body method `{method}`"
            ));
        }
        Some(_) => {}
    }

    // Only the methods that name something have more to check; what they
    // name is found in their params' text, which is never decoded whole (a
    // call's arguments are any size).
    let Some(key) = name_key(method) else {
        return Ok(());
    };
    let params = message.params().unwrap_or("{}");
    let string = |path: &[&str]| {
        crate::jsonrpc::object::value_at(params, path).and_then(crate::jsonrpc::object::unquote)
    };

    if let Some(expected) = string(&[key]) {
        let Some(raw) = single(headers, "Mcp-Name")? else {
            return Err(format!("missing required Mcp-Name header for `{method}`"));
        };
        let decoded =
            decoded(raw).ok_or_else(|| "Mcp-Name header is not valid Base64".to_owned())?;
        if decoded != expected {
            return Err(format!(
                "Mcp-Name header `{decoded}` does not match body value `{expected}`"
            ));
        }
    }

    if method != "tools/call" {
        return Ok(());
    }
    let Some(schema) = string(&["name"]).and_then(|name| tool_schema(&name)) else {
        return Ok(());
    };
    let mut arguments = crate::param_headers::MarkedArguments::new(
        crate::jsonrpc::object::value_at(params, &["arguments"]),
    );
    for (path, header) in crate::param_headers::annotated(&schema, usize::MAX) {
        let property = path.join(".");
        let name = format!("Mcp-Param-{header}");
        let sent = single(headers, &name)?;
        let passed = arguments.text_at(&path);
        match (sent, passed) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(format!(
                    "unexpected {name} header for absent or null `{property}`"
                ));
            }
            (None, Some(_)) => return Err(format!("missing {name} header for `{property}`")),
            (Some(raw), Some(expected)) => {
                let decoded =
                    decoded(raw).ok_or_else(|| format!("{name} header is not valid Base64"))?;
                if decoded != expected {
                    return Err(format!(
                        "{name} header `{decoded}` does not match body value `{expected}`"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `initialize`'s `Mcp-Method`, if sent, must be one `initialize`: every
/// value is looked at, so that a contradicting second one cannot hide
/// behind a right first one, and one that is not text is refused rather
/// than taken for absent.
fn check_initialize(headers: &HeaderMap) -> Result<(), String> {
    let mut values = headers.get_all("mcp-method").iter();
    let Some(first) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err(
            "multiple Mcp-Method header values supplied; initialize requires exactly one"
                .to_owned(),
        );
    }
    if first.as_bytes() != b"initialize" {
        return Err(format!(
            "Mcp-Method header `{}` does not match body method `initialize`",
            String::from_utf8_lossy(first.as_bytes())
        ));
    }
    Ok(())
}

/// The one value of header `name`, as text; `None` when absent. Refused
/// when it comes more than once or is not text. A `name` that is no valid
/// header name (from an odd `x-mcp-header`) is simply never present.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!("duplicate {name} header"));
    }
    value
        .to_str()
        .map(Some)
        .map_err(|_| format!("{name} header contains invalid characters"))
}

/// A header value as the client meant it: unwrapped from `=?base64?…?=`
/// if so wrapped; `None` when the wrapping holds no Base64 of UTF-8 text.
fn decoded(value: &str) -> Option<String> {
    let Some(inner) = value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|rest| rest.strip_suffix(BASE64_SUFFIX))
    else {
        return Some(value.to_owned());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(inner)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Which member of its params holds what a request names (its
/// `Mcp-Name`), by method; the name counts only when it is a string.
fn name_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        // Tasks (SEP-2663): lets intermediaries route polling to the
        // instance holding the task.
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NEW: &str = "2026-07-28";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            // Appended, so that a repeated name stays a duplicate.
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn request(method: &str, params: Value) -> Message {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        Message::parse(body.to_string().into()).unwrap()
    }

    fn no_schema(_: &str) -> Option<Value> {
        None
    }

    /// Deploys somewhere: `location.region` goes in `Mcp-Param-Region`,
    /// `replicas` in `Mcp-Param-Replicas`.
    fn deploy_schema(name: &str) -> Option<Value> {
        (name == "deploy").then(|| {
            json!({
                "type": "object",
                "properties": {
                    "location": {
                        "type": "object",
                        "properties": {
                            "region": {"type": "string", "x-mcp-header": "Region"}
                        }
                    },
                    "replicas": {"type": "integer", "x-mcp-header": "Replicas"},
                    "image": {"type": "string"}
                }
            })
        })
    }

    fn deploy(arguments: Value) -> Message {
        request(
            "tools/call",
            json!({"name": "deploy", "arguments": arguments}),
        )
    }

    fn call_headers(extra: &[(&str, &str)]) -> HeaderMap {
        let mut pairs = vec![
            ("mcp-protocol-version", NEW),
            ("mcp-method", "tools/call"),
            ("mcp-name", "deploy"),
        ];
        pairs.extend_from_slice(extra);
        headers(&pairs)
    }

    #[test]
    fn only_versions_that_require_the_headers_are_checked() {
        let call = request("tools/call", json!({"name": "echo"}));
        assert_eq!(check(&headers(&[]), &call, no_schema), Ok(()));
        let old = headers(&[("mcp-protocol-version", "2025-11-25")]);
        assert_eq!(check(&old, &call, no_schema), Ok(()));
        let new = headers(&[("mcp-protocol-version", NEW)]);
        assert_eq!(
            check(&new, &call, no_schema),
            Err("missing required Mcp-Method header".to_owned())
        );
        // Compared as text: a later version is checked too.
        let later = headers(&[("mcp-protocol-version", "2027-01-01")]);
        assert!(check(&later, &call, no_schema).is_err());
    }

    #[test]
    fn answers_are_not_checked() {
        let answer = Message::parse(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.into()).unwrap();
        let new = headers(&[("mcp-protocol-version", NEW)]);
        assert_eq!(check(&new, &answer, no_schema), Ok(()));
    }

    #[test]
    fn notifications_are_checked() {
        let note =
            Message::parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into())
                .unwrap();
        let new = headers(&[("mcp-protocol-version", NEW)]);
        assert_eq!(
            check(&new, &note, no_schema),
            Err("missing required Mcp-Method header".to_owned())
        );
        let said = headers(&[
            ("mcp-protocol-version", NEW),
            ("mcp-method", "notifications/initialized"),
        ]);
        assert_eq!(check(&said, &note, no_schema), Ok(()));
    }

    #[test]
    fn initialize_may_omit_its_method_but_not_contradict_it() {
        let init = request("initialize", json!({}));
        let absent = headers(&[("mcp-protocol-version", NEW)]);
        assert_eq!(check(&absent, &init, no_schema), Ok(()));
        let right = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "initialize")]);
        assert_eq!(check(&right, &init, no_schema), Ok(()));
        let wrong = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "tools/list")]);
        assert_eq!(
            check(&wrong, &init, no_schema),
            Err(
                "Mcp-Method header `tools/list` does not match body method `initialize`".to_owned()
            )
        );
        let twice = headers(&[
            ("mcp-protocol-version", NEW),
            ("mcp-method", "initialize"),
            ("mcp-method", "initialize"),
        ]);
        assert_eq!(
            check(&twice, &init, no_schema),
            Err(
                "multiple Mcp-Method header values supplied; initialize requires exactly one"
                    .to_owned()
            )
        );
        let mut binary = headers(&[("mcp-protocol-version", NEW)]);
        binary.append(
            "mcp-method",
            http::HeaderValue::from_bytes(b"initialize\xff").unwrap(),
        );
        assert!(check(&binary, &init, no_schema).is_err());
    }

    #[test]
    fn the_method_header_is_required_and_must_match() {
        let list = request("tools/list", json!({}));
        let missing = headers(&[("mcp-protocol-version", NEW)]);
        assert_eq!(
            check(&missing, &list, no_schema),
            Err("missing required Mcp-Method header".to_owned())
        );
        let wrong = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "tools/call")]);
        assert_eq!(
            check(&wrong, &list, no_schema),
            Err(
                "Mcp-Method header `tools/call` does not match body method `tools/list`".to_owned()
            )
        );
        let right = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "tools/list")]);
        assert_eq!(check(&right, &list, no_schema), Ok(()));
    }

    #[test]
    fn a_duplicate_header_is_refused_even_when_equal() {
        let list = request("tools/list", json!({}));
        let twice = headers(&[
            ("mcp-protocol-version", NEW),
            ("mcp-method", "tools/list"),
            ("mcp-method", "tools/list"),
        ]);
        assert_eq!(
            check(&twice, &list, no_schema),
            Err("duplicate Mcp-Method header".to_owned())
        );
        let call = request("tools/call", json!({"name": "echo"}));
        let names = headers(&[
            ("mcp-protocol-version", NEW),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
            ("mcp-name", "other"),
        ]);
        assert_eq!(
            check(&names, &call, no_schema),
            Err("duplicate Mcp-Name header".to_owned())
        );
    }

    #[test]
    fn a_header_that_is_not_text_is_refused() {
        let list = request("tools/list", json!({}));
        let mut binary = headers(&[("mcp-protocol-version", NEW)]);
        binary.append(
            "mcp-method",
            http::HeaderValue::from_bytes(b"tools/list\xff").unwrap(),
        );
        assert_eq!(
            check(&binary, &list, no_schema),
            Err("Mcp-Method header contains invalid characters".to_owned())
        );
    }

    #[test]
    fn the_name_comes_from_name_uri_or_task_id_by_method() {
        let cases = [
            ("tools/call", json!({"name": "echo"}), "echo"),
            ("prompts/get", json!({"name": "greet"}), "greet"),
            ("resources/read", json!({"uri": "file:///a"}), "file:///a"),
            (
                "resources/subscribe",
                json!({"uri": "file:///b"}),
                "file:///b",
            ),
            (
                "resources/unsubscribe",
                json!({"uri": "file:///c"}),
                "file:///c",
            ),
            ("tasks/get", json!({"taskId": "t-1"}), "t-1"),
            ("tasks/update", json!({"taskId": "t-2"}), "t-2"),
            ("tasks/cancel", json!({"taskId": "t-3"}), "t-3"),
        ];
        for (method, params, name) in cases {
            let message = request(method, params);
            let without = headers(&[("mcp-protocol-version", NEW), ("mcp-method", method)]);
            assert_eq!(
                check(&without, &message, no_schema),
                Err(format!("missing required Mcp-Name header for `{method}`")),
                "{method}"
            );
            let with = headers(&[
                ("mcp-protocol-version", NEW),
                ("mcp-method", method),
                ("mcp-name", name),
            ]);
            assert_eq!(check(&with, &message, no_schema), Ok(()), "{method}");
            let wrong = headers(&[
                ("mcp-protocol-version", NEW),
                ("mcp-method", method),
                ("mcp-name", "else"),
            ]);
            assert_eq!(
                check(&wrong, &message, no_schema),
                Err(format!(
                    "Mcp-Name header `else` does not match body value `{name}`"
                )),
                "{method}"
            );
        }
    }

    #[test]
    fn a_name_that_is_not_a_string_or_not_named_needs_no_header() {
        let numeric = request("tasks/get", json!({"taskId": 7}));
        let method_only = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "tasks/get")]);
        assert_eq!(check(&method_only, &numeric, no_schema), Ok(()));
        // `tools/list` names nothing, so a name is not required.
        let list = request("tools/list", json!({"name": "echo"}));
        let listing = headers(&[("mcp-protocol-version", NEW), ("mcp-method", "tools/list")]);
        assert_eq!(check(&listing, &list, no_schema), Ok(()));
    }

    #[test]
    fn a_name_may_come_wrapped_in_base64() {
        let read = request("resources/read", json!({"uri": "file:///café"}));
        let pairs = |name: &'static str| {
            headers(&[
                ("mcp-protocol-version", NEW),
                ("mcp-method", "resources/read"),
                ("mcp-name", name),
            ])
        };
        // "file:///café" in Base64.
        assert_eq!(
            check(&pairs("=?base64?ZmlsZTovLy9jYWbDqQ==?="), &read, no_schema),
            Ok(())
        );
        // "file:///cafe".
        assert_eq!(
            check(&pairs("=?base64?ZmlsZTovLy9jYWZl?="), &read, no_schema),
            Err(
                "Mcp-Name header `file:///cafe` does not match body value `file:///café`"
                    .to_owned()
            )
        );
        assert_eq!(
            check(&pairs("=?base64?!!not base64!!?="), &read, no_schema),
            Err("Mcp-Name header is not valid Base64".to_owned())
        );
    }

    #[test]
    fn param_headers_follow_the_nested_annotated_argument() {
        let passed = deploy(json!({"location": {"region": "eu"}, "image": "app:1"}));
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-region", "eu")]),
                &passed,
                deploy_schema
            ),
            Ok(())
        );
        assert_eq!(
            check(&call_headers(&[]), &passed, deploy_schema),
            Err("missing Mcp-Param-Region header for `location.region`".to_owned())
        );
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-region", "us")]),
                &passed,
                deploy_schema
            ),
            Err("Mcp-Param-Region header `us` does not match body value `eu`".to_owned())
        );
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-region", "=?base64?ZXU=?=")]),
                &passed,
                deploy_schema
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-region", "eu"), ("mcp-param-region", "eu")]),
                &passed,
                deploy_schema
            ),
            Err("duplicate Mcp-Param-Region header".to_owned())
        );
    }

    #[test]
    fn an_absent_argument_takes_no_param_header() {
        let without = deploy(json!({"image": "app:1"}));
        assert_eq!(check(&call_headers(&[]), &without, deploy_schema), Ok(()));
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-region", "eu")]),
                &without,
                deploy_schema
            ),
            Err(
                "unexpected Mcp-Param-Region header for absent or null `location.region`"
                    .to_owned()
            )
        );
        // Null, or a name at the wrong depth, is absent too.
        let null = deploy(json!({"location": {"region": null}}));
        assert_eq!(check(&call_headers(&[]), &null, deploy_schema), Ok(()));
        let shallow = deploy(json!({"region": "eu"}));
        assert_eq!(check(&call_headers(&[]), &shallow, deploy_schema), Ok(()));
        // So is a call without arguments.
        let bare = request("tools/call", json!({"name": "deploy"}));
        assert_eq!(check(&call_headers(&[]), &bare, deploy_schema), Ok(()));
    }

    #[test]
    fn a_number_argument_is_compared_as_json_writes_it() {
        let scaled = deploy(json!({"replicas": 42}));
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-replicas", "42")]),
                &scaled,
                deploy_schema
            ),
            Ok(())
        );
        assert_eq!(
            check(
                &call_headers(&[("mcp-param-replicas", "042")]),
                &scaled,
                deploy_schema
            ),
            Err("Mcp-Param-Replicas header `042` does not match body value `42`".to_owned())
        );
        assert_eq!(
            check(&call_headers(&[]), &scaled, deploy_schema),
            Err("missing Mcp-Param-Replicas header for `replicas`".to_owned())
        );
    }

    #[test]
    fn param_headers_are_checked_only_with_a_schema() {
        let passed = deploy(json!({"location": {"region": "eu"}}));
        assert_eq!(check(&call_headers(&[]), &passed, no_schema), Ok(()));
        // Another tool's schema is not asked for.
        let other = request(
            "tools/call",
            json!({"name": "other", "arguments": {"location": {"region": "eu"}}}),
        );
        let headers = headers(&[
            ("mcp-protocol-version", NEW),
            ("mcp-method", "tools/call"),
            ("mcp-name", "other"),
        ]);
        assert_eq!(check(&headers, &other, deploy_schema), Ok(()));
    }

    /// The arguments are walked as text, not decoded: a value is found
    /// beside 4 MB of small values, written as sent (`1.50` is the header's
    /// text as a number reads it, `1.5`), and a repeated key read as its
    /// last, as `serde_json` reads it.
    #[test]
    fn param_headers_are_found_in_the_arguments_text() {
        let values = format!("[{}0]", "0,".repeat(2 << 20));
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"deploy","arguments":{{"image":{values},"location":{{"region":"us","region":"eu"}},"replicas":1.50}}}}}}"#
        );
        let call = Message::parse(text.into()).unwrap();
        let sent = [("mcp-param-region", "eu"), ("mcp-param-replicas", "1.5")];
        assert_eq!(check(&call_headers(&sent), &call, deploy_schema), Ok(()));
        let wrong = [("mcp-param-region", "us"), ("mcp-param-replicas", "1.5")];
        assert_eq!(
            check(&call_headers(&wrong), &call, deploy_schema),
            Err("Mcp-Param-Region header `us` does not match body value `eu`".to_owned())
        );
    }
}
