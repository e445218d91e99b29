//! What of a client's request sluice decodes into a tree, and how much.
//!
//! A request is read as an envelope; its params are decoded where sluice
//! routes on them or answers them itself. A tree of JSON (`serde_json`'s
//! values, rmcp's model) costs many times its text when the text is many
//! small values: 16 MB of `[0,0,…]` decoded made sluice hold 1.3 GB. So
//! what a client sends as payload is kept as text (a tool's or a prompt's
//! arguments, see [`crate::gateway::NamedParams`]; a resource's URI is one
//! string), and what sluice decodes is bounded here, before it is read:
//! a request's `_meta` (read for its progress token and the keys that
//! describe a client) to [`META_MAX`], and the params of the requests that
//! are small by nature (`initialize`, completions, subscriptions, lists,
//! tasks…) to [`DECODED_PARAMS_MAX`]. Both are far above what clients send.

use rmcp::model::ErrorData;

use crate::jsonrpc::{Message, RawObject};

/// The largest `_meta` of a client's request that sluice reads, in bytes.
pub const META_MAX: usize = 64 * 1024;

/// The largest params sluice reads whole (every request's but
/// `tools/call`'s, `prompts/get`'s and `resources/read`'s), in bytes.
pub const DECODED_PARAMS_MAX: usize = 1024 * 1024;

/// The methods whose payload sluice keeps as text: their params may be as
/// large as a message may be (`[limits] max_message_mb`).
const PAYLOAD_KEPT_AS_TEXT: [&str; 3] = ["tools/call", "prompts/get", "resources/read"];

/// Why sluice will not read the params of `message`, a request for
/// `method`; `None` when it reads them (always, for params of at most
/// [`META_MAX`] bytes: nothing is looked at again).
pub(super) fn params_fault(message: &Message, method: &str) -> Option<ErrorData> {
    let params = message.params().filter(|p| p.len() > META_MAX)?;
    if !PAYLOAD_KEPT_AS_TEXT.contains(&method) && params.len() > DECODED_PARAMS_MAX {
        return Some(ErrorData::invalid_params(
            format!(
                "the params of `{method}` are {} bytes: sluice reads at most {DECODED_PARAMS_MAX} \
                 for this method, whose params are small by nature; send the request without \
                 what makes them this large",
                params.len()
            ),
            None,
        ));
    }
    // Not an object, or not JSON: refused where the params are read.
    let meta = RawObject::of_checked(params).ok()?.get_parsed("_meta")?;
    (meta.len() > META_MAX).then(|| {
        ErrorData::invalid_params(
            format!(
                "the request's `_meta` is {} bytes: sluice reads at most {META_MAX} of it \
                 (metadata such as a progress token); send data in the params themselves",
                meta.len()
            ),
            None,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(method: &str, params: &str) -> Option<String> {
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        let message = Message::parse(line.into_bytes().into()).unwrap();
        params_fault(&message, method).map(|e| e.message.to_string())
    }

    #[test]
    fn only_a_large_meta_or_large_params_of_a_small_request_are_refused() {
        let values = |bytes: usize| format!("[{}0]", "0,".repeat(bytes / 2));
        // Payloads kept as text may be as large as a message.
        let arguments = format!(r#"{{"name":"t","arguments":{{"xs":{}}}}}"#, values(3 << 20));
        assert_eq!(fault("tools/call", &arguments), None);
        assert_eq!(fault("prompts/get", &arguments), None);
        let uri = format!(r#"{{"uri":"data:,{}"}}"#, "a".repeat(3 << 20));
        assert_eq!(fault("resources/read", &uri), None);
        // A `_meta` is read: bounded for every method.
        let meta = format!(r#"{{"name":"t","_meta":{{"x":{}}}}}"#, values(META_MAX + 2));
        let refused = fault("tools/call", &meta).unwrap();
        assert!(
            refused.contains("`_meta` is 65") && refused.contains("at most 65536"),
            "{refused}"
        );
        let small_meta = format!(
            r#"{{"name":"t","_meta":{{"x":{}}},"arguments":{}}}"#,
            values(1000),
            values(META_MAX)
        );
        assert_eq!(fault("tools/call", &small_meta), None);
        // Params decoded whole: bounded.
        let capabilities = format!(
            r#"{{"capabilities":{{"experimental":{{"x":{}}}}}}}"#,
            values(2 << 20)
        );
        let refused = fault("initialize", &capabilities).unwrap();
        assert!(
            refused.contains("params of `initialize` are") && refused.contains("at most 1048576"),
            "{refused}"
        );
        assert!(fault("completion/complete", &capabilities).is_some());
        assert_eq!(
            fault("initialize", &format!(r#"{{"x":{}}}"#, values(META_MAX))),
            None
        );
        // Small params are not looked at.
        assert_eq!(fault("initialize", r#"{"_meta":5}"#), None);
    }
}
