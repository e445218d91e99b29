//! Who sees what without `[auth]`: a session's stored results and
//! operations are its own; a stateless (2026-07-28) client's are
//! capabilities, reachable by their id and listed or hinted to no one; and
//! anonymous clients' operation limits are counted per address.

use std::net::IpAddr;

use serde_json::json;

use crate::support::*;

fn from(address: &str) -> IpAddr {
    address.parse().unwrap()
}

/// The texts a client can get that could name ids: its listing, and the
/// hints of errors about ids that do not exist.
async fn everything_listed_to(client: &Client) -> String {
    let info = first_text(&call(client, "sluice_info", json!({})).await);
    let read = first_text(&call(client, "sluice_read", json!({"handle": "h_nothere"})).await);
    let result =
        first_text(&call(client, "sluice_result", json!({"operation": "op_nothere"})).await);
    format!("{info}\n{read}\n{result}")
}

#[tokio::test]
async fn stateless_clients_never_see_each_others_handles_or_operations() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let alice = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let bob = stateless_http_client(&sluice.url, from("127.0.0.1")).await;

    let stored = call(&alice, "inventory", json!({"count": 3000})).await;
    let handle = stored_handle(&stored);
    let running = call(
        &alice,
        "slow_task",
        json!({"seconds": 30, "quiet": true, "_timeout_s": 0.2}),
    )
    .await;
    let operation = meta(&running, "sluice/operation").expect("an operation")["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Neither bob nor alice herself is shown an anonymous id: every
    // sessionless client is "anonymous", so a listing would show all.
    for client in [&bob, &alice] {
        let listed = everything_listed_to(client).await;
        assert!(!listed.contains(&handle), "{listed}");
        assert!(!listed.contains(&operation), "{listed}");
        assert!(listed.contains("not listed"), "{listed}");
    }
    // The id is the capability: whoever holds it reads it.
    let page = call(&alice, "sluice_read", json!({"handle": handle})).await;
    assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
    let cancelled = call(&alice, "sluice_cancel", json!({"operation": operation})).await;
    assert_ne!(cancelled.is_error, Some(true), "{}", first_text(&cancelled));

    // A session (2025-11-25) still lists its own results to itself.
    let (session, _) = connect_http(&sluice.url).await;
    let own = stored_handle(&call(&session, "inventory", json!({"count": 3000})).await);
    let listed = everything_listed_to(&session).await;
    assert!(listed.contains(&own), "{listed}");
    assert!(!listed.contains(&handle), "{listed}");
    // ...and another session is not shown it.
    let (other, _) = connect_http(&sluice.url).await;
    let listed = everything_listed_to(&other).await;
    assert!(!listed.contains(&own), "{listed}");
    let read = call(&other, "sluice_read", json!({"handle": own})).await;
    assert_eq!(read.is_error, Some(true));
    assert!(
        first_text(&read).contains("unknown handle"),
        "{}",
        first_text(&read)
    );
    for client in [alice, bob, session, other] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn anonymous_operation_limits_are_counted_per_address() {
    let dir = TempDir::new("owners-limits");
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("sample", &sample()) + "[operations]\nmax_running = 1\n"),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let slow = json!({"seconds": 30, "quiet": true, "_timeout_s": 0.2});

    let first = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let started = call(&first, "slow_task", slow.clone()).await;
    assert!(
        meta(&started, "sluice/operation").is_some(),
        "{}",
        first_text(&started)
    );

    // Another client from the same address shares its share: its slow
    // call is no operation, it waits for its result...
    let same_place = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let waited = call(
        &same_place,
        "slow_task",
        json!({"seconds": 1, "quiet": true, "_timeout_s": 0.2}),
    )
    .await;
    assert_eq!(first_text(&waited), "done after 1 s");
    assert!(meta(&waited, "sluice/operation").is_none());

    // A client elsewhere is not held up by it.
    let elsewhere = stateless_http_client(&sluice.url, from("127.0.0.2")).await;
    let own = call(&elsewhere, "slow_task", slow).await;
    assert!(
        meta(&own, "sluice/operation").is_some(),
        "{}",
        first_text(&own)
    );
    for client in [first, same_place, elsewhere] {
        client.cancel().await.unwrap();
    }
}

/// sluice with `[auth]` tokens for alice and bob; returns it and their tokens.
async fn sluice_for_alice_and_bob(dir: &TempDir) -> (HttpSluice, &'static str, &'static str) {
    let (alice, bob) = ("alice-secret-token", "bob-secret-token");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}{}",
            toml_upstream("sample", &sample()),
            auth_tokens(&[("alice", alice), ("bob", bob)])
        ),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    (sluice, alice, bob)
}

#[tokio::test]
async fn principals_never_reach_each_others_results_cursors_or_operations_in_either_era() {
    let dir = TempDir::new("owners-principals");
    let (sluice, alice, bob) = sluice_for_alice_and_bob(&dir).await;
    for mode in ["auto", "legacy"] {
        let output = tokio::process::Command::new(python())
            .arg(repo().join("tests/clients/isolation.py"))
            .args(["--url", &sluice.url, "--mode", mode])
            .args(["--alice", alice, "--bob", bob])
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let expected_version = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert_eq!(seen["protocol_version"], expected_version);
        let (handle, operation) = (
            seen["handle"].as_str().unwrap(),
            seen["operation"].as_str().unwrap(),
        );
        // Every one of alice's ids is unknown to bob...
        for (attempt, expected) in [
            ("read", "unknown handle"),
            ("cursor", "belongs to a result you do not have"),
            ("query", "unknown handle"),
            ("search", "unknown handle"),
            ("result", "unknown operation"),
            ("cancel", "unknown operation"),
        ] {
            let answer = &seen["bob"][attempt];
            assert_eq!(answer["is_error"], true, "{mode} {attempt}: {answer}");
            let text = answer["text"].as_str().unwrap();
            assert!(text.contains(expected), "{mode} {attempt}: {text}");
            assert!(!text.contains("\"id\""), "{mode} {attempt}: {text}");
        }
        // ...and nothing listed to him names them.
        let info = seen["bob"]["info"]["text"].as_str().unwrap();
        assert!(
            !info.contains(handle) && !info.contains(operation),
            "{mode}: {info}"
        );
        // alice, in a new connection (a new session in 2025-11-25), still
        // owns them: they belong to her, not to a session.
        let again = &seen["alice_again"];
        let info = again["info"]["text"].as_str().unwrap();
        assert!(info.contains(handle), "{mode}: {info}");
        // Told as hers, not as the session's (it is another session).
        assert!(
            info.starts_with("Your stored results, newest first (")
                && !info.contains("this session"),
            "{mode}: {info}"
        );
        assert!(info.contains(operation), "{mode}: {info}");
        assert_eq!(again["read"]["is_error"], false, "{mode}: {again}");
        assert_eq!(again["cancel"]["is_error"], false, "{mode}: {again}");
    }
}

#[tokio::test]
async fn a_principals_tasks_are_unknown_to_another_in_either_era() {
    use rmcp::model::{CallToolResponse, CancelTaskParams, ClientCapabilities, GetTaskParams};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, ServiceError};
    let dir = TempDir::new("owners-tasks");
    let (sluice, alice, bob) = sluice_for_alice_and_bob(&dir).await;
    let client = |token: &'static str, lifecycle: ClientLifecycleMode| {
        let url = sluice.url.clone();
        async move {
            sluice::install_tls_provider();
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
                .auth_header(token);
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            Recorder {
                capabilities: ClientCapabilities::builder().enable_tasks().build(),
                ..Recorder::default()
            }
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .expect("MCP handshake with a bearer token")
        }
    };
    let eras = || {
        [
            ClientLifecycleMode::Initialize,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        ]
    };
    for (alice_era, bob_era) in eras().into_iter().zip(eras()) {
        let how = format!("{alice_era:?}");
        let alice = client(alice, alice_era).await;
        let bob = client(bob, bob_era).await;
        let created = match alice
            .call_tool_once(
                rmcp::model::CallToolRequestParams::new("slow_task").with_arguments(args(
                    json!({"seconds": 30, "quiet": true, "_timeout_s": 0.2}),
                )),
            )
            .await
            .unwrap()
        {
            CallToolResponse::Task(created) => created,
            other => panic!("{how}: not a task: {other:?}"),
        };
        let id = created.task.task_id.clone();
        let refused = |e: ServiceError| match e {
            ServiceError::McpError(e) => (e.code.0, e.message.to_string()),
            other => panic!("{how}: not an MCP error: {other}"),
        };
        let (code, message) = refused(bob.get_task(GetTaskParams::new(&id)).await.unwrap_err());
        assert_eq!(code, -32602, "{how}");
        assert!(message.contains("unknown task"), "{how}: {message}");
        let (code, _) = refused(
            bob.cancel_task(CancelTaskParams::new(&id))
                .await
                .unwrap_err(),
        );
        assert_eq!(code, -32602, "{how}");
        // Still alice's, still running: bob's cancel did nothing.
        let got = alice.get_task(GetTaskParams::new(&id)).await.unwrap();
        assert_eq!(got.task.status(), rmcp::model::TaskStatus::Working, "{how}");
        alice.cancel_task(CancelTaskParams::new(&id)).await.unwrap();
        alice.cancel().await.unwrap();
        bob.cancel().await.unwrap();
    }
}
