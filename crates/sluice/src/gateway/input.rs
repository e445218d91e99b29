//! Bridging the two ways a server asks its client for input.
//!
//! A 2026-07-28 upstream answers a call with `input_required` (the requests
//! it needs answered, and a state to echo back); a client that negotiated
//! an older version cannot read that, and expects server→client requests
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`) instead.
//! For such a client sluice asks each request itself, then repeats the call
//! with the answers, as the newer protocol prescribes.

use std::time::Duration;

use rmcp::model::{ErrorData, InputRequest, InputRequiredResult, InputResponses, ServerRequest};

use crate::caller::Caller;

/// Rounds of `input_required` answered before giving up on a call.
pub const MAX_ROUNDS: usize = 8;

/// The largest answer of the client's that sluice decodes to put in a
/// retried call, in bytes. Decoded into a tree, JSON of many small values
/// costs many times its text; an answer (a completion's text, a form's
/// fields, a list of roots) is far smaller.
pub const ANSWER_MAX: usize = 1 << 20;

/// Whether sluice must answer `input_required` for this caller.
pub fn must_bridge(caller: &Caller) -> bool {
    caller.era.is_legacy() && caller.link.is_some()
}

/// Asks the caller's client every request of `result`; returns what to
/// send on the retry (`inputResponses`, `requestState`).
pub async fn fulfil(
    result: InputRequiredResult,
    caller: &Caller,
    round: usize,
) -> Result<(Option<InputResponses>, Option<String>), ErrorData> {
    let requests = result.input_requests.unwrap_or_default();
    if requests.is_empty() {
        if result.request_state.is_none() {
            return Err(ErrorData::internal_error(
                "the upstream asked for input but named no request and no state",
                None,
            ));
        }
        // State-only rounds: the server is still working; back off a little.
        let millis = (50u64 << round.min(3)).min(250);
        tokio::time::sleep(Duration::from_millis(millis)).await;
        return Ok((None, result.request_state));
    }
    let answers = futures::future::try_join_all(
        requests
            .into_iter()
            .map(|(key, request)| async move { ask(request, caller).await.map(|a| (key, a)) }),
    )
    .await?;
    Ok((Some(answers.into_iter().collect()), result.request_state))
}

async fn ask(request: InputRequest, caller: &Caller) -> Result<serde_json::Value, ErrorData> {
    let request = match request {
        InputRequest::CreateMessage(r) => ServerRequest::CreateMessageRequest(r),
        InputRequest::Elicitation(r) => ServerRequest::ElicitRequest(r),
        InputRequest::ListRoots(r) => ServerRequest::ListRootsRequest(r),
        _ => {
            return Err(ErrorData::internal_error(
                "the upstream asked for a kind of input sluice does not know",
                None,
            ));
        }
    };
    ask_through_link(&request, caller).await
}

/// [`ask`]: the request under an id of the link's, on the connection (or
/// the call's stream).
async fn ask_through_link(
    request: &ServerRequest,
    caller: &Caller,
) -> Result<serde_json::Value, ErrorData> {
    let Some(link) = &caller.link else {
        return Err(ErrorData::internal_error("no client to ask", None));
    };
    let message = rmcp::model::ServerJsonRpcMessage::request(
        request.clone(),
        rmcp::model::RequestId::Number(0),
    );
    let bytes = serde_json::to_vec(&message).expect("rmcp's messages serialize");
    let request = crate::jsonrpc::Message::parse(bytes::Bytes::from(bytes))
        .map_err(|e| ErrorData::internal_error(format!("asking the client failed: {e}"), None))?;
    let answer = match (&caller.stream, link.writes()) {
        (Some(stream), false) if caller.stream_asks => {
            link.ask_on(stream, &request, &caller.ct).await
        }
        _ => link.ask(&request, &caller.ct).await,
    }
    .map_err(|e| ErrorData::internal_error(format!("the client did not answer: {e}"), None))?;
    if let Some(result) = answer.result() {
        if result.len() > ANSWER_MAX {
            return Err(ErrorData::invalid_params(
                format!(
                    "the client's answer is {} bytes: sluice decodes at most {ANSWER_MAX} of an \
                     answer it passes on to an upstream of 2026-07-28 itself",
                    result.len()
                ),
                None,
            ));
        }
        return serde_json::from_str(result)
            .map_err(|e| ErrorData::internal_error(format!("the client's answer: {e}"), None));
    }
    let error = answer
        .error()
        .and_then(|e| serde_json::from_str::<ErrorData>(e).ok())
        .unwrap_or_else(|| {
            ErrorData::internal_error("the client's answer could not be read", None)
        });
    Err(error)
}
