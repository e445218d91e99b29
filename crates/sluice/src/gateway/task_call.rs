//! Tools that must be called as MCP tasks (SEP-1686, protocol 2025-11-25,
//! `execution.taskSupport: "required"`): sluice calls them as tasks and
//! polls, so that every client sees an ordinary call, or an operation; the
//! task's result reaches it as the upstream sent it (`tasks/result`), but
//! for the `_meta` key that ties it to the upstream's task.
//!
//! rmcp models only the later tasks extension (SEP-2663) and drops a listed
//! tool's `execution`, so such a tool is recognised by its refusal of a
//! plain call (SEP-1686 prescribes `-32601`; the TypeScript SDK puts it in
//! an error result), and remembered from then on.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestMethod, ClientRequest, ConstString as _, CustomRequest, ServerResult,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::call::Fetched;
use super::forwarding::Request;
use super::{Caller, Gateway};
use crate::jsonrpc::{Message, RawObject};
use crate::upstream::rpc::Decoded;
use crate::upstream::{CallError, Upstream};

/// How long sluice asks the upstream to keep a task (SEP-1686 `ttl`).
const TASK_TTL_MS: u64 = 3_600_000;
/// Polling interval when the upstream suggests none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Bounds on the upstream's suggested polling interval.
const POLL_BOUNDS: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));
/// The `_meta` key that ties a result to the upstream's task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// How long a `tasks/cancel` may take after the client gave up.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Whether `answer` is an upstream's refusal of a plain call to a tool that
/// must be called as a task.
pub(super) fn refused_without_task(answer: &Result<ServerResult, CallError>) -> bool {
    match answer {
        Err(CallError::Upstream(e)) => {
            e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
                && e.message.to_lowercase().contains("task")
        }
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => r
            .content
            .iter()
            .any(|c| c.as_text().is_some_and(|t| says_task(&t.text))),
        _ => false,
    }
}

/// Whether an error result's `text` is a refusal of a plain call to a tool
/// that needs a task. An error *result* could be the tool's own failure:
/// only the words of a refusal count, lest a tool that ran be run again.
pub(super) fn says_task(text: &str) -> bool {
    let text = text.to_lowercase();
    text.contains("task augmentation") || (text.contains("-32601") && text.contains("tasksupport"))
}

/// The response `sent` (a task's result) without the `_meta` key that ties
/// it to the upstream's task (and without `_meta` if nothing else is in
/// it), every other member as sent; `None` if its result is not an
/// object.
fn without_related_task(sent: &Message) -> Option<Message> {
    let mut result = crate::jsonrpc::RawObject::parse(sent.result()?).ok()?;
    let mut emptied = false;
    let removed = result.edit_path(&["_meta"], |meta| {
        let removed = meta.remove(RELATED_TASK).is_some();
        emptied = meta.is_empty();
        removed
    });
    // A `_meta` that is not an object holds no key to take out.
    if !matches!(removed, Ok(Some(true))) {
        return Some(sent.clone());
    }
    if emptied {
        result.remove("_meta");
    }
    sent.with_result(&result.to_json()).ok()
}

/// The JSON of an upstream's answer, whichever of rmcp's types it parsed as.
fn raw(result: &ServerResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

fn custom(method: &str, params: Value) -> ClientRequest {
    ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)))
}

/// The upstream's suggested polling interval, within [`POLL_BOUNDS`].
fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .or_else(|| task.get("pollIntervalMs"))
        .and_then(Value::as_u64)
        .map_or(DEFAULT_POLL, Duration::from_millis)
        .clamp(POLL_BOUNDS.0, POLL_BOUNDS.1)
}

impl Gateway {
    /// Calls a tool as an upstream task: creates it, polls `tasks/get`
    /// (keeping its status message as the call's partial result), and
    /// answers with `tasks/result` once it ends: as the upstream sent it,
    /// but for the `_meta` key that ties it to the upstream's task (decoded
    /// only if that key cannot be taken out of its bytes). The caller's
    /// cancellation cancels the task.
    pub(super) async fn call_as_task(
        &self,
        upstream: &Arc<Upstream>,
        params: super::NamedParams,
        caller: &Caller,
        exposed: &str,
    ) -> Fetched {
        match self.task_call(upstream, params, caller, exposed).await {
            Ok(fetched) => fetched,
            Err(e) => Fetched::decoded(Err(e), None),
        }
    }

    async fn task_call(
        &self,
        upstream: &Arc<Upstream>,
        params: super::NamedParams,
        caller: &Caller,
        exposed: &str,
    ) -> Result<Fetched, CallError> {
        // The client's params as a plain call forwards them, with `task`
        // added to their text: the arguments are never decoded (a tree of
        // them costs many times their size, and respells their numbers).
        // Made only where there is no text to edit.
        let text = super::call::upstream_params(caller, &params, exposed).and_then(|text| {
            let mut params = RawObject::of_checked(&text).ok()?;
            params
                .insert_value("task", &json!({"ttl": TASK_TTL_MS}))
                .ok()?;
            Some(params.to_json())
        });
        let request = Request::text_or(CallToolRequestMethod::VALUE, text.as_deref(), || {
            let mut made = serde_json::to_value(params.to_rmcp()).unwrap_or_else(|_| json!({}));
            made["task"] = json!({"ttl": TASK_TTL_MS});
            custom("tools/call", made)
        });
        let created = self
            .send_as(upstream, request, caller)
            .await
            .and_then(|answer| super::forwarding::for_caller(upstream, answer, caller))?
            .0;
        let created = raw(&created);
        let Some(task) = created.get("task").filter(|t| t.is_object()) else {
            // An upstream may still answer at once: that is the result.
            return match created.get("content") {
                Some(_) => serde_json::from_value(created)
                    .map(|result| Fetched::decoded(Ok(ServerResult::CallToolResult(result)), None))
                    .map_err(|e| CallError::Unavailable(format!("upstream `{}` answered a task call with a result sluice cannot read: {e}", upstream.name()))),
                None => Err(CallError::Unavailable(format!(
                    "upstream `{}` refused `{}` without a task, but answered the task call without one: {created}",
                    upstream.name(),
                    params.name
                ))),
            };
        };
        let Some(id) = task
            .get("taskId")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(CallError::Unavailable(format!(
                "upstream `{}` made a task without a `taskId`: {task}",
                upstream.name()
            )));
        };
        tracing::debug!(upstream = upstream.name(), task = %id, tool = %params.name, "called as a task");
        let mut status = task.clone();
        loop {
            if let (Some(partial), Some(message)) = (
                &caller.partial,
                status.get("statusMessage").and_then(Value::as_str),
            ) {
                partial.status(message);
            }
            match status.get("status").and_then(Value::as_str) {
                Some("completed" | "failed") => {
                    let answer = self
                        .task_answer(upstream, "tasks/result", &id, &caller.ct)
                        .await?;
                    // The upstream's task is sluice's business: its id means
                    // nothing to the client.
                    if let Some(sent) = without_related_task(&answer.raw) {
                        return Ok(Fetched::Sent(Decoded::sent(sent)));
                    }
                    let mut answer = upstream.decoded(answer).map(|(result, _)| result);
                    if let Ok(ServerResult::CallToolResult(result)) = &mut answer
                        && let Some(meta) = result.meta.as_mut()
                    {
                        meta.remove(RELATED_TASK);
                        if meta.is_empty() {
                            result.meta = None;
                        }
                    }
                    return Ok(Fetched::decoded(answer, None));
                }
                Some("cancelled") => {
                    return Err(CallError::Unavailable(format!(
                        "upstream `{}` cancelled its task for `{}`{}",
                        upstream.name(),
                        params.name,
                        status
                            .get("statusMessage")
                            .and_then(Value::as_str)
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    )));
                }
                Some("working") => {}
                other => {
                    self.cancel_upstream_task(upstream, &id).await;
                    return Err(CallError::Unavailable(format!(
                        "upstream `{}`'s task for `{}` is {}, which sluice cannot follow: it was cancelled",
                        upstream.name(),
                        params.name,
                        other.unwrap_or("without a status")
                    )));
                }
            }
            tokio::select! {
                () = tokio::time::sleep(poll_interval(&status)) => {}
                () = caller.ct.cancelled() => {
                    self.cancel_upstream_task(upstream, &id).await;
                    return Err(CallError::Cancelled);
                }
            }
            status = match self
                .task_request(upstream, "tasks/get", &id, &caller.ct)
                .await
            {
                Ok(answer) => raw(&answer),
                Err(CallError::Cancelled) => {
                    self.cancel_upstream_task(upstream, &id).await;
                    return Err(CallError::Cancelled);
                }
                Err(e) => return Err(e),
            };
        }
    }

    /// `method` (`tasks/get`, `tasks/cancel`) about task `id`, decoded.
    async fn task_request(
        &self,
        upstream: &Upstream,
        method: &str,
        id: &str,
        ct: &CancellationToken,
    ) -> Result<ServerResult, CallError> {
        self.task_answer(upstream, method, id, ct)
            .await
            .and_then(|answer| upstream.decoded(answer))
            .map(|(result, _)| result)
    }

    /// `method` about task `id`, its answer as the upstream sent it.
    async fn task_answer(
        &self,
        upstream: &Upstream,
        method: &str,
        id: &str,
        ct: &CancellationToken,
    ) -> Result<Decoded, CallError> {
        upstream
            .send(
                custom(method, json!({"taskId": id})),
                false,
                || crate::upstream::rpc::ForClient::NONE,
                ct,
                |_| Vec::new(),
            )
            .await
    }

    /// Asks the upstream to cancel task `id`; failures are only logged.
    async fn cancel_upstream_task(&self, upstream: &Upstream, id: &str) {
        let ct = CancellationToken::new();
        let cancel = self.task_request(upstream, "tasks/cancel", id, &ct);
        match tokio::time::timeout(CANCEL_WAIT, cancel).await {
            Ok(Ok(_)) => tracing::debug!(upstream = upstream.name(), task = id, "task cancelled"),
            Ok(Err(e)) => {
                tracing::warn!(
                    upstream = upstream.name(),
                    task = id,
                    "tasks/cancel failed: {e}"
                )
            }
            Err(_) => {
                ct.cancel();
                tracing::warn!(
                    upstream = upstream.name(),
                    task = id,
                    "tasks/cancel got no answer in 5 s"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, ErrorData};

    use super::*;

    fn error_result(text: &str) -> Result<ServerResult, CallError> {
        Ok(ServerResult::CallToolResult(CallToolResult::error(vec![
            ContentBlock::text(text),
        ])))
    }

    fn rpc_error(code: ErrorCode, message: &str) -> Result<ServerResult, CallError> {
        Err(CallError::Upstream(ErrorData::new(
            code,
            message.to_owned(),
            None,
        )))
    }

    #[test]
    fn only_a_refusal_for_want_of_a_task_counts() {
        // server-everything (TypeScript SDK), and a JSON-RPC error as SEP-1686 says.
        assert!(refused_without_task(&error_result(
            "MCP error -32601: Tool simulate-research-query requires task augmentation (taskSupport: 'required')"
        )));
        assert!(refused_without_task(&rpc_error(
            ErrorCode::METHOD_NOT_FOUND,
            "Tool research must be called as a task"
        )));
        // A tool's own failure that mentions tasks, other errors, successes.
        assert!(!refused_without_task(&error_result(
            "task 17 failed: MCP error -32601 from the tracker"
        )));
        assert!(!refused_without_task(&rpc_error(
            ErrorCode::INVALID_PARAMS,
            "Tool research must be called as a task"
        )));
        assert!(!refused_without_task(&rpc_error(
            ErrorCode::METHOD_NOT_FOUND,
            "Method not found"
        )));
        assert!(!refused_without_task(&Ok(ServerResult::CallToolResult(
            CallToolResult::success(vec![ContentBlock::text("requires task augmentation")])
        ))));
    }

    #[test]
    fn the_upstreams_poll_interval_is_kept_within_bounds() {
        assert_eq!(
            poll_interval(&json!({"pollInterval": 1000})),
            Duration::from_secs(1)
        );
        assert_eq!(
            poll_interval(&json!({"pollIntervalMs": 250})),
            Duration::from_millis(250)
        );
        assert_eq!(poll_interval(&json!({"pollInterval": 1})), POLL_BOUNDS.0);
        assert_eq!(
            poll_interval(&json!({"pollInterval": 600000})),
            POLL_BOUNDS.1
        );
        assert_eq!(poll_interval(&json!({})), DEFAULT_POLL);
    }
}
