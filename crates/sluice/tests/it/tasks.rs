//! MCP tasks, both ways: a client that declares the tasks extension
//! (SEP-2663) gets its slow calls as tasks and reads and cancels them with
//! `tasks/get` and `tasks/cancel`; a tool that an upstream lets run only as
//! a task (SEP-1686, server-everything's `simulate-research-query`) works
//! through sluice for every client.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, GetTaskParams,
    ProtocolVersion, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, ServiceError};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::process::Command;

use crate::support::*;

/// How a test client reaches sluice.
#[derive(Clone, Copy, Debug)]
enum Era {
    /// `initialize`, 2025-11-25.
    Handshake,
    /// `server/discover`, 2026-07-28: capabilities travel with each request.
    Stateless,
}

fn lifecycle(era: Era) -> ClientLifecycleMode {
    match era {
        Era::Handshake => ClientLifecycleMode::Initialize,
        Era::Stateless => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    }
}

fn recorder(tasks: bool) -> Recorder {
    Recorder {
        capabilities: if tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        },
        ..Recorder::default()
    }
}

/// A client of `command` (stdio) in `era`, declaring tasks or not.
async fn stdio_client(command: &[String], era: Era, tasks: bool) -> Client {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sluice");
    recorder(tasks)
        .serve_with_lifecycle(transport, lifecycle(era))
        .await
        .expect("MCP handshake")
}

/// A client of a Streamable HTTP URL in `era`, declaring tasks or not.
async fn http_client(url: &str, era: Era, tasks: bool) -> Client {
    sluice::install_tls_provider();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    recorder(tasks)
        .serve_with_lifecycle(transport, lifecycle(era))
        .await
        .expect("MCP handshake over HTTP")
}

fn params(tool: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments))
}

fn error_message(e: ServiceError) -> (i32, String) {
    match e {
        ServiceError::McpError(e) => (e.code.0, e.message.to_string()),
        other => panic!("not an MCP error: {other}"),
    }
}

/// Calls `tool`, which must answer with a task.
async fn start_task(
    client: &Client,
    tool: &str,
    arguments: Value,
) -> rmcp::model::CreateTaskResult {
    match client
        .call_tool_once(params(tool, arguments))
        .await
        .unwrap()
    {
        CallToolResponse::Task(created) => created,
        other => panic!("{tool}: not a task: {other:?}"),
    }
}

/// Polls `tasks/get` until the task leaves `working`.
async fn until_ended(client: &Client, id: &str) -> rmcp::model::GetTaskResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = client
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if got.task.status() != TaskStatus::Working {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} never ended"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A slow call becomes a task; `tasks/get` follows it to its result,
/// `tasks/cancel` stops another one upstream; bad task ids are refused.
async fn check_tasks(client: &Client, other_session: &Client, dir: &TempDir, how: &str) {
    // In time: an ordinary result.
    let quick = client
        .call_tool_once(params("echo", json!({"text": "in time", "_timeout_s": 30})))
        .await
        .unwrap();
    let CallToolResponse::Complete(quick) = quick else {
        panic!("{how}: a quick call became a task: {quick:?}")
    };
    assert_eq!(first_text(&quick), "in time", "{how}");

    // Past its timeout: a task, whose id is the operation's.
    let marker = dir.0.join(format!("done-{how}"));
    let created = start_task(
        client,
        "sleep",
        json!({"seconds": 2, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    let id = created.task.task_id.clone();
    assert!(id.starts_with("op_"), "{how}: {id}");
    assert_eq!(created.task.status, TaskStatus::Working, "{how}");
    assert_eq!(created.task.poll_interval_ms, Some(1000), "{how}");
    assert_eq!(
        created.meta.as_ref().unwrap()["sluice/operation"]["id"],
        id.as_str(),
        "{how}"
    );
    let working = client.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(working.task.status(), TaskStatus::Working, "{how}");
    let message = working.task.task.status_message.clone().unwrap_or_default();
    assert!(message.starts_with("Progress: "), "{how}: {message}");
    // Another session does not see it.
    let (code, foreign) = error_message(
        other_session
            .get_task(GetTaskParams::new(&id))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32602, "{how}: {foreign}");
    assert!(
        foreign.contains(&format!("unknown task `{id}`")),
        "{how}: {foreign}"
    );
    // The end, with the upstream's result.
    let ended = until_ended(client, &id).await;
    let TaskPayload::Completed { result } = &ended.task.payload else {
        panic!("{how}: {ended:?}")
    };
    assert_eq!(result["content"][0]["text"], "slept 2.0s", "{how}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "completed",
        "{how}"
    );
    // It is an operation too.
    let same = call(client, "sluice_result", json!({"operation": id})).await;
    assert_eq!(first_text(&same), "slept 2.0s", "{how}");

    // tasks/cancel stops the call upstream.
    let marker = dir.0.join(format!("cancelled-{how}"));
    let created = start_task(
        client,
        "sleep",
        json!({"seconds": 30, "marker": marker, "_timeout_s": 0.3}),
    )
    .await;
    let id = created.task.task_id;
    client
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .unwrap();
    let cancelled = client.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(cancelled.task.status(), TaskStatus::Cancelled, "{how}");
    wait_for_line(&marker, "cancelled", Duration::from_secs(10)).await;
    // Bad inputs: cancelling twice, unknown ids, input it never asked for.
    let (code, twice) = error_message(
        client
            .cancel_task(CancelTaskParams::new(&id))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32602, "{how}");
    assert!(
        twice.contains("already ended (cancelled)"),
        "{how}: {twice}"
    );
    let (code, unknown) = error_message(
        client
            .get_task(GetTaskParams::new("op_nope"))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32602, "{how}");
    assert!(
        unknown.contains("unknown task `op_nope`"),
        "{how}: {unknown}"
    );
    let (code, update) = error_message(
        client
            .update_task(UpdateTaskParams::new(&id, Default::default()))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32602, "{how}");
    assert!(update.contains("takes no input"), "{how}: {update}");
}

#[tokio::test]
async fn clients_that_declare_tasks_get_slow_calls_as_tasks_in_both_eras_and_transports() {
    let dir = TempDir::new("tasks-downstream");
    let sluice = HttpSluice::start(&[], &py_server()).await;
    for era in [Era::Handshake, Era::Stateless] {
        let how = format!("stdio {era:?}");
        let client = stdio_client(&via_sluice(&py_server()), era, true).await;
        let other = stdio_client(&via_sluice(&py_server()), era, true).await;
        check_tasks(&client, &other, &dir, &how).await;

        let how = format!("http {era:?}");
        let client = http_client(&sluice.url, era, true).await;
        // Stateless HTTP requests have no session: their operations are
        // reachable by id, so "another session" is tested in the
        // handshake era only.
        let other = http_client(&sluice.url, Era::Handshake, true).await;
        if let Era::Handshake = era {
            check_tasks(&client, &other, &dir, &how).await;
        } else {
            check_stateless_http_tasks(&client, &dir).await;
        }
    }
}

/// A stateless HTTP client's task: created, read, ended.
async fn check_stateless_http_tasks(client: &Client, dir: &TempDir) {
    let marker = dir.0.join("done-http-stateless");
    let created = start_task(
        client,
        "sleep",
        json!({"seconds": 1, "marker": marker, "_timeout_s": 0.3}),
    )
    .await;
    let ended = until_ended(client, &created.task.task_id).await;
    let TaskPayload::Completed { result } = &ended.task.payload else {
        panic!("{ended:?}")
    };
    assert_eq!(result["content"][0]["text"], "slept 1.0s");
}

#[tokio::test]
async fn clients_without_tasks_get_operations_and_no_task_methods() {
    let client = stdio_client(&via_sluice(&py_server()), Era::Stateless, false).await;
    let started = client
        .call_tool_once(params("sleep", json!({"seconds": 1, "_timeout_s": 0.2})))
        .await
        .unwrap();
    let CallToolResponse::Complete(started) = started else {
        panic!("a client without tasks got a task: {started:?}")
    };
    let op = meta(&started, "sluice/operation").expect("an operation");
    // The operation exists, but a client that did not declare tasks may
    // not use the task methods (-32021, missing client capability).
    let (code, message) = error_message(
        client
            .get_task(GetTaskParams::new(op["id"].as_str().unwrap()))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32021, "{message}");
}

/// `simulate-research-query` through sluice, for a client in `era`: in
/// time, past its timeout (an operation whose partial result is the task's
/// status message), and cancelled.
async fn check_research_query(client: &Client, how: &str) {
    let plain = call(
        client,
        "simulate-research-query",
        json!({"topic": "otters"}),
    )
    .await;
    assert_ne!(plain.is_error, Some(true), "{how}: {}", first_text(&plain));
    let report = first_text(&plain);
    assert!(
        report.starts_with("# Research Report: otters"),
        "{how}: {report}"
    );
    // The upstream's own task id stays with sluice.
    assert!(
        meta(&plain, "io.modelcontextprotocol/related-task").is_none(),
        "{how}"
    );

    let started = call(
        client,
        "simulate-research-query",
        json!({"topic": "beavers", "_timeout_s": 1.5}),
    )
    .await;
    let op = meta(&started, "sluice/operation").expect("an operation");
    assert_eq!(op["status"], "running", "{how}");
    // The upstream reports stages as status messages, polled every second.
    assert!(
        op["status_message"]
            .as_str()
            .is_some_and(|m| m.ends_with("...")),
        "{how}: {op}"
    );
    assert!(first_text(&started).contains("Status: "), "{how}");
    let done = call(
        client,
        "sluice_result",
        json!({"operation": op["id"], "wait_s": 30}),
    )
    .await;
    assert!(
        first_text(&done).starts_with("# Research Report: beavers"),
        "{how}: {}",
        first_text(&done)
    );
    assert_eq!(
        meta(&done, "sluice/operation").unwrap()["status"],
        "completed"
    );

    let started = call(
        client,
        "simulate-research-query",
        json!({"topic": "cancelled", "_timeout_s": 0.5}),
    )
    .await;
    let op = meta(&started, "sluice/operation").expect("an operation");
    let cancelled = call(client, "sluice_cancel", json!({"operation": op["id"]})).await;
    assert_eq!(
        meta(&cancelled, "sluice/operation").unwrap()["status"],
        "cancelled",
        "{how}"
    );
}

#[tokio::test]
async fn a_tool_that_requires_a_task_works_through_sluice_for_every_client() {
    for era in [Era::Handshake, Era::Stateless] {
        let client = stdio_client(&via_sluice(&everything()), era, false).await;
        check_research_query(&client, &format!("stdio {era:?}")).await;
    }
    let sluice = HttpSluice::start(&[], &everything()).await;
    let client = http_client(&sluice.url, Era::Stateless, false).await;
    check_research_query(&client, "http Stateless").await;
    // The upstream's tasks are sluice's: a client that declares tasks
    // itself gets its own, an operation's.
    let client = stdio_client(&via_sluice(&everything()), Era::Handshake, true).await;
    let created = start_task(
        &client,
        "simulate-research-query",
        json!({"topic": "nested", "_timeout_s": 0.5}),
    )
    .await;
    let ended = until_ended(&client, &created.task.task_id).await;
    let TaskPayload::Completed { result } = &ended.task.payload else {
        panic!("{ended:?}")
    };
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("# Research Report: nested")
    );
}

#[tokio::test]
async fn a_task_started_on_one_instance_is_followed_and_cancelled_through_another() {
    // `[store] backend = "redis"`: stateless clients of two instances.
    let redis = crate::shared::Redis::start().await;
    let dir = TempDir::new("tasks-shared");
    let config = crate::shared::py_config(&dir, &redis);
    let a = crate::shared::start(&config).await;
    let b = crate::shared::start(&config).await;
    let on_a = http_client(&a.url, Era::Stateless, true).await;
    let on_b = http_client(&b.url, Era::Stateless, true).await;

    let created = start_task(&on_a, "sleep", json!({"seconds": 2, "_timeout_s": 0.5})).await;
    let ended = until_ended(&on_b, &created.task.task_id).await;
    let TaskPayload::Completed { result } = &ended.task.payload else {
        panic!("{ended:?}")
    };
    assert_eq!(result["content"][0]["text"], "slept 2.0s");

    let marker = dir.0.join("cancelled");
    let created = start_task(
        &on_a,
        "sleep",
        json!({"seconds": 30, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    let id = created.task.task_id;
    on_b.cancel_task(CancelTaskParams::new(&id)).await.unwrap();
    wait_for_line(&marker, "cancelled", Duration::from_secs(15)).await;
    let on_a_now = on_a.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(on_a_now.task.status(), TaskStatus::Cancelled);
    let on_b_now = on_b.get_task(GetTaskParams::new(&id)).await.unwrap();
    assert_eq!(on_b_now.task.status(), TaskStatus::Cancelled);
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}
