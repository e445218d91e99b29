//! Streamable HTTP downstream: same answers as stdio, several sessions at
//! once, and the localhost-only Host and Origin checks.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

#[tokio::test]
async fn an_http_client_gets_the_same_answers_as_a_direct_stdio_client() {
    let sluice = HttpSluice::start(&[], &everything()).await;
    let (proxied, inbox) = connect_http(&sluice.url).await;
    let (direct, _) = connect(&everything()).await;
    assert_eq!(
        upstream_part(proxied.list_all_tools().await.unwrap()),
        as_listed_by_sluice(direct.list_all_tools().await.unwrap())
    );
    for (tool, arguments) in [
        ("echo", serde_json::json!({"message": "over http"})),
        (
            "get-structured-content",
            serde_json::json!({"location": "Chicago"}),
        ),
        (
            "trigger-long-running-operation",
            serde_json::json!({"duration": 1, "steps": 3}),
        ),
    ] {
        let params = CallToolRequestParams::new(tool).with_arguments(args(arguments));
        assert_eq!(
            serde_json::to_value(proxied.call_tool(params.clone()).await.unwrap()).unwrap(),
            serde_json::to_value(direct.call_tool(params).await.unwrap()).unwrap(),
            "{tool}"
        );
    }
    assert_eq!(inbox.lock().unwrap().progress.len(), 3);
    proxied.cancel().await.unwrap();
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn concurrent_sessions_each_get_their_own_progress() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect_http(&sluice.url).await);
    }
    let calls = clients.iter().enumerate().map(|(i, (client, _))| {
        let seconds = 0.25 * (i + 1) as f64;
        let params = CallToolRequestParams::new("slow_task")
            .with_arguments(args(serde_json::json!({"seconds": seconds})));
        async move { client.call_tool(params).await.unwrap() }
    });
    let results = futures::future::join_all(calls).await;
    for (i, result) in results.iter().enumerate() {
        assert_eq!(
            first_text(result),
            format!("done after {} s", 0.25 * (i + 1) as f64)
        );
        let progress = clients[i].1.lock().unwrap().progress.len();
        assert_eq!(progress, i + 1, "client {i} got another session's progress");
    }
    for (client, _) in clients {
        client.cancel().await.unwrap();
    }
}

/// Sends a raw HTTP request; returns the connection and the first bytes of
/// the response (at least its status line).
async fn raw_request(addr: &str, request: &str) -> (tokio::net::TcpStream, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut head))
        .await
        .expect("a response within 10 s")
        .unwrap();
    let head = String::from_utf8_lossy(&head[..n]).into_owned();
    (stream, head)
}

/// Sends a raw `initialize` POST with the given Host and Origin; returns
/// the HTTP status line.
async fn post_with(url: &str, host: &str, origin: Option<&str>) -> String {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (_stream, head) = raw_request(&addr, &request).await;
    head.lines()
        .next()
        .unwrap_or_default()
        .to_owned()
        .to_owned()
}

#[tokio::test]
async fn only_localhost_hosts_and_origins_are_accepted_by_default() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let port = sluice
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp")
        .to_owned();
    let local = format!("localhost:{port}");
    assert!(post_with(&sluice.url, &local, None).await.contains("200"));
    assert!(
        post_with(&sluice.url, &local, Some("http://localhost:3000"))
            .await
            .contains("200")
    );
    assert!(
        post_with(&sluice.url, "evil.example", None)
            .await
            .contains("403")
    );
    assert!(
        post_with(&sluice.url, &local, Some("http://evil.example"))
            .await
            .contains("403")
    );
}

#[tokio::test]
async fn allow_host_widens_the_checks() {
    let sluice = HttpSluice::start(&["--allow-host", "mcp.internal"], &sample()).await;
    assert!(
        post_with(&sluice.url, "mcp.internal", Some("https://mcp.internal"))
            .await
            .contains("200")
    );
    assert!(
        post_with(&sluice.url, "evil.example", None)
            .await
            .contains("403")
    );
}

#[tokio::test]
async fn an_http_client_cancelling_a_call_cancels_it_upstream() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let dir = TempDir::new("http-cancel");
    let marker = dir.0.join("marker");
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let (client, _) = connect_http(&sluice.url).await;
    let params = CallToolRequestParams::new("sleep")
        .with_arguments(args(serde_json::json!({"seconds": 30, "marker": marker})));
    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    handle
        .cancel(Some("user pressed Esc".into()))
        .await
        .unwrap();
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled"
    );
    // The session goes on.
    let echo = client
        .call_tool(
            CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "next"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&echo), "next");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_stateless_http_client_that_disconnects_mid_call_cancels_it_upstream() {
    let dir = TempDir::new("http-disconnect");
    let marker = dir.0.join("marker");
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let addr = sluice
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    // A 2026-07-28 request stands alone: its `_meta` says who is asking.
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "sleep",
            "arguments": {"seconds": 30, "marker": marker},
                        "_meta": {
                "progressToken": "p1",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: sleep\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // Progress flows, so the response stream opens at once.
    let (stream, head) = raw_request(&addr, &request).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(stream);
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled"
    );
}

/// Opens a 2025-11-25 session with raw requests; gives its id.
async fn raw_session(addr: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (_stream, head) = raw_request(addr, &request).await;
    let id = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id: {head}"));
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {id}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{initialized}",
        initialized.len()
    );
    let (_stream, head) = raw_request(addr, &request).await;
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    id
}

/// A session's call is answered by sluice's own layer (`http_front`):
/// the client going away mid-call cancels it upstream too.
#[tokio::test]
async fn a_session_client_that_disconnects_mid_call_cancels_it_upstream() {
    let dir = TempDir::new("http-session-disconnect");
    let marker = dir.0.join("marker");
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let addr = sluice
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let session = raw_session(&addr).await;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {
            "name": "sleep",
            "arguments": {"seconds": 30, "marker": marker},
            "_meta": {"progressToken": "p1"}
        }
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (stream, head) = raw_request(&addr, &request).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/event-stream"), "{head}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(stream);
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled"
    );
}
