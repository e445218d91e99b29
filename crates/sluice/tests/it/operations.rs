//! Slow calls as operations: a call still running at its timeout goes on in
//! the background; `sluice_result` and `sluice_cancel` read and stop it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

fn error_text(r: &rmcp::model::CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{}", first_text(r));
    first_text(r)
}

/// The operation of an answer.
fn operation(r: &rmcp::model::CallToolResult) -> Value {
    meta(r, "sluice/operation").unwrap_or_else(|| panic!("not an operation: {}", first_text(r)))
}

async fn check_slow_call_becomes_an_operation(client: &Client, dir: &TempDir, how: &str) {
    let marker = dir.0.join(format!("marker-{how}"));
    let started = call(
        client,
        "sleep",
        json!({"seconds": 2, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    assert_eq!(started.is_error, Some(false), "{how}");
    let op = operation(&started);
    let id = op["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("op_") && id.len() == 25, "{how}: {id}");
    assert_eq!(
        (&op["status"], &op["tool"]),
        (&json!("running"), &json!("sleep"))
    );
    let text = first_text(&started);
    assert!(
        text.contains(&format!("goes on in the background as operation {id}"))
            && text.contains(&format!(
                "sluice_result {{\"operation\":\"{id}\",\"wait_s\":60}}"
            )),
        "{how}: {text}"
    );
    // Still running: the status and what the tool reported so far.
    let now = call(client, "sluice_result", json!({"operation": id})).await;
    let status = operation(&now);
    assert_eq!(status["status"], "running", "{how}");
    assert_eq!(status["progress"]["total"], 10, "{how}: {status}");
    assert!(first_text(&now).contains("is still running"), "{how}");
    // Waiting returns as soon as it ends, with the upstream's result.
    let done = call(
        client,
        "sluice_result",
        json!({"operation": id, "wait_s": 60}),
    )
    .await;
    assert_eq!(first_text(&done), "slept 2.0s", "{how}");
    let status = operation(&done);
    assert_eq!(status["status"], "completed", "{how}");
    assert_eq!(status["progress"]["progress"], 10, "{how}: {status}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "completed",
        "{how}: the upstream ran to its end"
    );
    // A call that ends in time is answered as usual, `_timeout_s` and all.
    let quick = call(client, "echo", json!({"text": "in time", "_timeout_s": 30})).await;
    assert_eq!(first_text(&quick), "in time", "{how}");
    assert!(meta(&quick, "sluice/operation").is_none());
    // sluice_info lists the session's operations.
    let info = call(client, "sluice_info", json!({})).await;
    assert!(
        first_text(&info).contains(&format!("{id} `sleep` completed")),
        "{how}"
    );
    assert_eq!(
        meta(&info, "sluice/operations").unwrap()[0]["id"],
        id.as_str()
    );
}

#[tokio::test]
async fn a_slow_call_becomes_an_operation_whose_result_comes_later() {
    let dir = TempDir::new("operations");
    let (client, _) = connect(&via_sluice(&py_server())).await;
    // Every upstream tool takes `_timeout_s`.
    let tools = client.list_all_tools().await.unwrap();
    let sleep = tools.iter().find(|t| t.name == "sleep").unwrap();
    assert_eq!(
        sleep.input_schema["properties"]["_timeout_s"]["type"],
        "number"
    );
    check_slow_call_becomes_an_operation(&client, &dir, "stdio").await;

    let sluice = HttpSluice::start(&[], &py_server()).await;
    let (http, _) = connect_http(&sluice.url).await;
    check_slow_call_becomes_an_operation(&http, &dir, "http").await;
}

#[tokio::test]
async fn sluice_cancel_stops_an_operation_upstream() {
    let dir = TempDir::new("operations-cancel");
    let marker = dir.0.join("marker");
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let started = call(
        &client,
        "sleep",
        json!({"seconds": 30, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let cancelled = call(&client, "sluice_cancel", json!({"operation": id})).await;
    assert_eq!(operation(&cancelled)["status"], "cancelled");
    let text = first_text(&cancelled);
    assert!(
        text.contains("was cancelled after") && text.contains("Progress: "),
        "{text}"
    );
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled",
        "the upstream request was cancelled"
    );
    let later = call(
        &client,
        "sluice_result",
        json!({"operation": id, "wait_s": 1}),
    )
    .await;
    assert_eq!(operation(&later)["status"], "cancelled");
    let again = error_text(&call(&client, "sluice_cancel", json!({"operation": id})).await);
    assert!(
        again.contains("already ended (cancelled): nothing to cancel"),
        "{again}"
    );
}

#[tokio::test]
async fn bad_operation_inputs_get_clear_errors() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    for bad in [json!(-1), json!(0), json!("ten"), json!(null), json!("10")] {
        let result = call(&client, "echo", json!({"text": "x", "_timeout_s": bad})).await;
        if bad.is_null() || bad == "10" {
            // null is "not given"; "10" is 10 seconds, as some clients send it.
            assert_eq!(first_text(&result), "x");
        } else {
            let e = error_text(&result);
            assert!(e.starts_with("`_timeout_s` must be"), "{bad}: {e}");
        }
    }
    // Too large is capped, not refused.
    let huge = call(
        &client,
        "echo",
        json!({"text": "capped", "_timeout_s": 1e12}),
    )
    .await;
    assert_eq!(first_text(&huge), "capped");
    // Past what a Duration can hold (this panicked the call's task once).
    for beyond in [1e20, 1.7e308] {
        let huge = call(
            &client,
            "echo",
            json!({"text": "capped", "_timeout_s": beyond}),
        )
        .await;
        assert_eq!(first_text(&huge), "capped", "{beyond}");
    }

    let unknown = error_text(
        &call(
            &client,
            "sluice_result",
            json!({"operation": "op_AAAAAAAAAAAAAAAAAAAAAA"}),
        )
        .await,
    );
    assert!(
        unknown.starts_with("unknown operation `op_AAAAAAAAAAAAAAAAAAAAAA`"),
        "{unknown}"
    );
    let missing = error_text(&call(&client, "sluice_result", json!({})).await);
    assert!(missing.contains("missing `operation`"), "{missing}");
    let started = call(&client, "sleep", json!({"seconds": 5, "_timeout_s": 0.3})).await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let wait = error_text(
        &call(
            &client,
            "sluice_result",
            json!({"operation": id, "wait_s": 301}),
        )
        .await,
    );
    assert!(wait.contains("`wait_s` must be from 0 to 300"), "{wait}");
    let extra = error_text(
        &call(
            &client,
            "sluice_result",
            json!({"operation": id, "wait": 3}),
        )
        .await,
    );
    assert!(extra.contains("unknown argument `wait`"), "{extra}");
    // Another session does not see it.
    let (other, _) = connect(&via_sluice(&py_server())).await;
    let foreign = error_text(&call(&other, "sluice_result", json!({"operation": id})).await);
    assert!(foreign.starts_with("unknown operation"), "{foreign}");
    let foreign = error_text(&call(&other, "sluice_cancel", json!({"operation": id})).await);
    assert!(foreign.starts_with("unknown operation"), "{foreign}");
}

#[tokio::test]
async fn an_upstream_that_crashes_fails_its_operation_with_the_reason() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let started = call(
        &client,
        "crash_after",
        json!({"seconds": 1, "code": 7, "message": "disk on fire", "_timeout_s": 0.3}),
    )
    .await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let failed = call(
        &client,
        "sluice_result",
        json!({"operation": id, "wait_s": 30}),
    )
    .await;
    assert_eq!(operation(&failed)["status"], "failed");
    let text = error_text(&failed);
    assert!(
        text.contains(&format!("operation {id} (`crash_after`) failed after")),
        "{text}"
    );
    assert!(
        text.contains("disk on fire"),
        "the upstream's last words: {text}"
    );
    // sluice serves on, and the upstream is started again.
    assert_eq!(
        first_text(&call(&client, "echo", json!({"text": "again"})).await),
        "again"
    );
}

#[tokio::test]
async fn a_client_that_leaves_does_not_cancel_its_operations_and_limits_hold() {
    let dir = TempDir::new("operations-leave");
    let marker = dir.0.join("marker");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[operations]\nmax_running = 1\n",
            toml_upstream("py", &py_server())
        ),
    );
    // Over HTTP the gateway outlives its clients.
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let (first, _) = connect_http(&sluice.url).await;
    let started = call(
        &first,
        "sleep",
        json!({"seconds": 2, "marker": marker, "_timeout_s": 0.3}),
    )
    .await;
    assert_eq!(operation(&started)["status"], "running");
    // One running is the most this session may have: a second slow call
    // is answered when it ends, its client waiting, not as an operation.
    let second = call(&first, "sleep", json!({"seconds": 1, "_timeout_s": 0.3})).await;
    assert!(
        first_text(&second).starts_with("slept 1"),
        "{}",
        first_text(&second)
    );
    assert!(meta(&second, "sluice/operation").is_none());
    first.cancel().await.unwrap();
    assert_eq!(
        wait_for_line(&marker, "completed", Duration::from_secs(15))
            .await
            .trim(),
        "completed",
        "the operation ran to its end after its client left"
    );
}

#[tokio::test]
async fn server_everythings_long_running_operation_reports_progress_as_an_operation() {
    let (client, _) = connect(&via_sluice(&everything())).await;
    let started = call(
        &client,
        "trigger-long-running-operation",
        json!({"duration": 2, "steps": 4, "_timeout_s": 0.8}),
    )
    .await;
    let op = operation(&started);
    assert_eq!(op["status"], "running");
    // One step every 0.5 s: by 0.8 s the first has been reported.
    assert_eq!(op["progress"]["total"], 4, "{op}");
    let id = op["id"].as_str().unwrap().to_owned();
    let done = call(
        &client,
        "sluice_result",
        json!({"operation": id, "wait_s": 30}),
    )
    .await;
    assert_eq!(
        first_text(&done),
        "Long running operation completed. Duration: 2 seconds, Steps: 4."
    );
    let op = operation(&done);
    assert_eq!(
        (&op["status"], &op["progress"]["progress"]),
        (&json!("completed"), &json!(4))
    );
}

#[tokio::test]
async fn python_clients_of_both_eras_collect_operations_over_stdio_and_http() {
    let dir = TempDir::new("operations-py");
    let stdio = stdio_target(&via_sluice(&py_server()));
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let mut eras = std::collections::BTreeSet::new();
    for target in [["--stdio", stdio.as_str()], ["--url", sluice.url.as_str()]] {
        for mode in ["auto", "legacy"] {
            let marker = dir.0.join(format!("marker-{mode}-{}", &target[0][2..]));
            let arguments = json!({"seconds": 2, "marker": marker, "_timeout_s": 0.5});
            let got = pages_py(mode, &target, "sleep", arguments, &["--wait-operation"]).await;
            let how = format!("{mode} via {} ({})", target[0], got["protocol_version"]);
            eras.insert(got["protocol_version"].as_str().unwrap().to_owned());
            assert_eq!(got["started"]["status"], "running", "{how}");
            assert_eq!(got["ended"]["status"], "completed", "{how}");
            assert_eq!(got["text"], "slept 2.0s", "{how}");
            assert_eq!(
                std::fs::read_to_string(&marker).unwrap().trim(),
                "completed",
                "{how}"
            );
        }
    }
    assert_eq!(
        eras.into_iter().collect::<Vec<_>>(),
        ["2025-11-25", "2026-07-28"],
        "both eras"
    );
}

/// A call that goes on as an operation tells its client no more progress
/// once its answer ("goes on in the background") is sent, though the tool
/// goes on reporting it (kept as the operation's): the stream of the
/// call's notifications ends with its answer. Claude Code, which
/// sends a progress token with every call, drops a stdio server's
/// connection on progress for a token it no longer knows
/// (anthropics/claude-code#47765, #64475).
#[tokio::test]
async fn a_call_gone_on_as_an_operation_tells_its_client_no_more_progress() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    raw.initialize().await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_task","arguments":{"seconds":2.5,"_timeout_s":0.6},"_meta":{"progressToken":"op-1"}}}"#).await;
    let mut before = 0;
    let started = loop {
        let line = raw.recv().await;
        if line["method"] == "notifications/progress" {
            assert_eq!(line["params"]["progressToken"], "op-1", "{line}");
            before += 1;
        } else if line["id"] == 2 {
            break line;
        }
    };
    assert!(before >= 1, "no progress before the answer");
    let operation = started["result"]["_meta"]["sluice/operation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("not an operation: {started}"))
        .to_owned();
    // Answered once the tool has ended, every progress it sent read.
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"sluice_result","arguments":{{"operation":"{operation}","wait_s":30}}}}}}"#
    ))
    .await;
    let done = loop {
        let line = raw.recv().await;
        assert_ne!(
            line["method"], "notifications/progress",
            "progress after the call's answer: {line}"
        );
        if line["id"] == 3 {
            break line;
        }
    };
    let status = &done["result"]["_meta"]["sluice/operation"];
    assert_eq!(status["status"], "completed", "{done}");
    // The operation kept what the tool reported after the answer.
    assert_eq!(status["progress"]["progress"], 10, "{done}");
}
