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
    // The client's handlers run as tasks of their own: the last progress
    // may be handled after the call's answer.
    eventually(
        Duration::from_secs(5),
        "three progress notifications",
        || inbox.lock().unwrap().progress.len() >= 3,
    )
    .await;
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
        eventually(Duration::from_secs(5), "each client's progress", || {
            clients[i].1.lock().unwrap().progress.len() > i
        })
        .await;
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
    leave_mid_call(true).await;
}

/// The same for a call that sends nothing until its answer (no progress
/// token): the client's leaving is noticed when its response is dropped,
/// not at the next message sluice would write.
#[tokio::test]
async fn a_session_client_that_leaves_a_quiet_call_cancels_it_upstream() {
    leave_mid_call(false).await;
}

/// And for a client that leaves before any answer began: while sluice
/// waits to see whether the answer comes first (`first_decides`), before
/// it has sent even the response's headers.
#[tokio::test]
async fn a_session_client_that_leaves_before_any_answer_cancels_it_upstream() {
    leave_mid_call_after(false, None).await;
}

/// A session's client starts a 30 s call (asking for progress or not) and
/// leaves 1.5 s after the response began: the upstream hears the
/// cancellation.
async fn leave_mid_call(progress: bool) {
    leave_mid_call_after(progress, Some(Duration::from_millis(1500))).await;
}

/// A session's client starts a 30 s call and leaves: `after` that long
/// once the response's head arrived, or (`None`) 300 ms after sending,
/// reading nothing. The upstream hears the cancellation.
async fn leave_mid_call_after(progress: bool, after: Option<Duration>) {
    let dir = TempDir::new(match (progress, after) {
        (true, _) => "http-session-disconnect",
        (false, Some(_)) => "http-session-quiet-disconnect",
        (false, None) => "http-session-early-disconnect",
    });
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
            "_meta": if progress { serde_json::json!({"progressToken": "p1"}) } else { serde_json::json!({}) }
        }
    })
    .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: {session}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    match after {
        Some(after) => {
            let (stream, head) = raw_request(&addr, &request).await;
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(head.contains("text/event-stream"), "{head}");
            tokio::time::sleep(after).await;
            drop(stream);
        }
        None => {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            stream.write_all(request.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(stream);
        }
    }
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled"
    );
}

/// One raw exchange with the endpoint: the status, the headers and the
/// whole body (a stream is read until it ends, so only ones that end).
struct Exchange {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Exchange {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The JSON-RPC message of the body (a JSON body, or an SSE stream's
    /// last `data:` line).
    fn message(&self) -> serde_json::Value {
        let text = match self
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .next_back()
        {
            Some(data) => data.trim(),
            None => self.body.trim(),
        };
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn exchange(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Exchange {
    sluice::install_tls_provider();
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(Duration::from_secs(20), request.send())
        .await
        .expect("an answer within 20 s")
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("a body that ends within 20 s")
        .unwrap();
    Exchange {
        status,
        headers,
        body,
    }
}

/// A POST of `body` to `url` that accepts JSON and SSE, with `headers`.
async fn post_to(url: &str, headers: Vec<(&'static str, String)>, body: String) -> Exchange {
    let mut all: Vec<(&str, &str)> = JSON_AND_SSE.to_vec();
    all.extend(headers.iter().map(|(n, v)| (*n, v.as_str())));
    exchange(reqwest::Method::POST, url, &all, &body).await
}

const JSON_AND_SSE: [(&str, &str); 2] = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
];

/// The Streamable HTTP endpoint is sluice's own (no rmcp server): each
/// kind of request gets what the spec (and the rmcp server sluice used
/// before) gives it, a session lives from `initialize` to `DELETE`, and a
/// request the fast path leaves to the endpoint (an unusual header) is
/// still answered.
#[tokio::test]
async fn the_http_endpoint_answers_each_kind_of_request_as_the_spec_says() {
    use reqwest::Method;
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.as_str();
    let post = |headers: Vec<(&'static str, String)>, body: String| post_to(url, headers, body);
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_owned();

    // The transport's own refusals.
    let put = exchange(Method::PUT, url, &JSON_AND_SSE, &list).await;
    assert_eq!(put.status, 405);
    assert!(put.header("allow").unwrap().contains("POST"));
    // A client that takes neither form (a client that takes one is
    // answered in it: `a_client_that_takes_one_form_or_any_is_answered_in_it`).
    let html = exchange(
        Method::POST,
        url,
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
        &list,
    )
    .await;
    assert_eq!(html.status, 406, "{}", html.body);
    let text = exchange(
        Method::POST,
        url,
        &[("content-type", "text/plain"), JSON_AND_SSE[1]],
        &list,
    )
    .await;
    assert_eq!(text.status, 415, "{}", text.body);
    // A compressed body: refused as such, saying what is accepted (it was
    // read as JSON and refused as "not UTF-8 text").
    let gzipped = exchange(
        Method::POST,
        url,
        &[
            JSON_AND_SSE[0],
            JSON_AND_SSE[1],
            ("content-encoding", "gzip"),
        ],
        "\u{1f}\u{8b}\u{8}\u{0}",
    )
    .await;
    assert_eq!(gzipped.status, 415, "{}", gzipped.body);
    assert!(
        gzipped
            .body
            .contains("Content-Encoding gzip is not accepted"),
        "{}",
        gzipped.body
    );
    assert_eq!(gzipped.header("accept-encoding"), Some("identity"));
    // A batch (JSON-RPC arrays are not MCP) is not a message.
    let batch = post(vec![], format!("[{list}]")).await;
    assert_eq!(batch.status, 400, "{}", batch.body);
    assert_eq!(batch.message()["error"]["code"], -32600, "{}", batch.body);
    let garbage = post(vec![], "{not json".to_owned()).await;
    assert_eq!(garbage.status, 400);
    assert_eq!(
        garbage.message()["error"]["code"],
        -32700,
        "{}",
        garbage.body
    );
    let unknown = post(
        vec![("mcp-protocol-version", "1999-01-01".to_owned())],
        list.clone(),
    )
    .await;
    assert_eq!(unknown.status, 400);
    assert!(
        unknown.body.contains("Unsupported MCP-Protocol-Version"),
        "{}",
        unknown.body
    );
    let no_session = post(vec![], list.clone()).await;
    assert_eq!(no_session.status, 400);
    assert!(
        no_session.body.contains("Session ID is required"),
        "{}",
        no_session.body
    );
    let gone = post(vec![("mcp-session-id", "nope".to_owned())], list.clone()).await;
    assert_eq!(gone.status, 404);

    // A session: opened by `initialize`, with its id.
    let hello = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let contradicted = post(
        vec![("mcp-protocol-version", "2025-06-18".to_owned())],
        hello.to_owned(),
    )
    .await;
    assert_eq!(contradicted.status, 400);
    assert_eq!(contradicted.message()["error"]["code"], -32600);
    assert!(contradicted.header("mcp-session-id").is_none());
    let opened = post(vec![], hello.to_owned()).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    assert_eq!(opened.message()["result"]["protocolVersion"], "2025-11-25");
    let session = opened
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    assert!(session.len() >= 22, "an unguessable id: {session}");
    let in_session = |extra: Vec<(&'static str, String)>| {
        let mut headers = vec![("mcp-session-id", session.clone())];
        headers.extend(extra);
        headers
    };
    let initialized = post(
        in_session(vec![]),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
    )
    .await;
    assert_eq!(initialized.status, 202);
    // An answer to nothing sluice asked is dropped, and the session goes on.
    let stray = post(
        in_session(vec![]),
        r#"{"jsonrpc":"2.0","id":"sluice-99","result":{}}"#.to_owned(),
    )
    .await;
    assert_eq!(stray.status, 202);
    for (request, expect) in [
        (r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#, r#"{}"#),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"debug"}}"#,
            r#"{}"#,
        ),
    ] {
        let answered = post(in_session(vec![]), request.to_owned()).await;
        assert_eq!(answered.status, 200, "{request}: {}", answered.body);
        assert_eq!(
            answered.message()["result"].to_string(),
            expect,
            "{request}"
        );
    }
    let unknown_method = post(
        in_session(vec![]),
        r#"{"jsonrpc":"2.0","id":4,"method":"no/such"}"#.to_owned(),
    )
    .await;
    assert_eq!(unknown_method.message()["error"]["code"], -32601);
    // An unusual header: left by the fast path to the endpoint, which
    // answers the call all the same.
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"by the endpoint"}}}"#;
    let called = post(
        in_session(vec![("mcp-method", "tools/call".to_owned())]),
        call.to_owned(),
    )
    .await;
    assert_eq!(called.status, 200, "{}", called.body);
    assert!(called.body.contains("by the endpoint"), "{}", called.body);

    // Its GET stream: only in the era of sessions; nothing to replay.
    let sse = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let replay = exchange(
        Method::GET,
        url,
        &[sse[0], sse[1], ("last-event-id", "7")],
        "",
    )
    .await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("content-type"), Some("text/event-stream"));
    assert_eq!(replay.body, "");
    let stateless_get = exchange(
        Method::GET,
        url,
        &[sse[0], ("mcp-protocol-version", "2026-07-28")],
        "",
    )
    .await;
    assert_eq!(stateless_get.status, 405);
    let open_stream = reqwest::Client::new()
        .get(url)
        .header(sse[0].0, sse[0].1)
        .header(sse[1].0, sse[1].1)
        .send()
        .await
        .unwrap();
    assert_eq!(open_stream.status().as_u16(), 200);

    // DELETE ends it: its GET stream ends, and it is not found any more.
    // 200, as the SDKs' servers answer (the Python SDK's client warns on
    // any other success).
    let deleted = exchange(Method::DELETE, url, &[sse[1]], "").await;
    assert_eq!(deleted.status, 200);
    let rest = tokio::time::timeout(Duration::from_secs(10), open_stream.text())
        .await
        .expect("the GET stream ends with its session");
    assert!(rest.is_ok());
    assert_eq!(post(in_session(vec![]), list.clone()).await.status, 404);
    // Deleting it again is no error (a client closing late).
    assert_eq!(
        exchange(Method::DELETE, url, &[sse[1]], "").await.status,
        200
    );

    // Requests that stand alone (2026-07-28).
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let v2026 = |method: &str| {
        vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", method.to_owned()),
        ]
    };
    let discover = post(
        v2026("server/discover"),
        format!(r#"{{"jsonrpc":"2.0","id":6,"method":"server/discover","params":{{{meta}}}}}"#),
    )
    .await;
    assert_eq!(discover.status, 200, "{}", discover.body);
    assert!(
        discover.message()["result"]["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.iter().any(|v| v == "2026-07-28")),
        "{}",
        discover.body
    );
    let ping = post(
        v2026("ping"),
        format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{{meta}}}}}"#),
    )
    .await;
    assert_eq!(ping.status, 404, "2026-07-28 removed ping: {}", ping.body);
    assert_eq!(ping.message()["error"]["code"], -32601);
    let bare = post(v2026("tools/list"), list.clone()).await;
    assert_eq!(bare.status, 400, "{}", bare.body);
    assert_eq!(bare.message()["error"]["code"], -32602);
    let answer = post(
        vec![("mcp-protocol-version", "2026-07-28".to_owned())],
        r#"{"jsonrpc":"2.0","id":1,"result":{}}"#.to_owned(),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.message()["error"]["code"], -32600);
    let mismatched = post(
        vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "tools/list".to_owned()),
        ],
        format!(r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}},{meta}}}}}"#),
    )
    .await;
    assert_eq!(mismatched.status, 400, "{}", mismatched.body);
    assert_eq!(mismatched.message()["error"]["code"], -32020);
}

/// A request that may be answered as a stream is answered as its first
/// message decides: its answer, when that comes first (a quick call), as
/// one JSON body; a notification first (progress), or nothing within the
/// first second (a quiet slow call), as an SSE stream that ends with the
/// answer; in a session and standing alone. A session's request left to
/// the endpoint is streamed from the start.
#[tokio::test]
async fn a_quick_answer_is_one_json_body_and_anything_else_a_stream() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.as_str();
    let post = |headers: Vec<(&'static str, String)>, body: String| post_to(url, headers, body);
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let session = raw_session(addr).await;
    let in_session = |extra: Vec<(&'static str, String)>| {
        let mut headers = extra;
        headers.push(("mcp-session-id", session.clone()));
        headers
    };
    let is_json = |answer: &Exchange, text: &str| {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.header("content-type"),
            Some("application/json"),
            "{}",
            answer.body
        );
        let message: serde_json::Value = serde_json::from_str(&answer.body)
            .unwrap_or_else(|e| panic!("one JSON message, not {:?}: {e}", answer.body));
        assert_eq!(
            message["result"]["content"][0]["text"], text,
            "{}",
            answer.body
        );
    };
    let is_stream = |answer: &Exchange, progress: usize, text: &str| {
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(
            answer.header("content-type"),
            Some("text/event-stream"),
            "{}",
            answer.body
        );
        let messages: Vec<serde_json::Value> = answer
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).unwrap())
            .collect();
        let (last, before) = messages.split_last().expect("messages");
        assert_eq!(
            last["result"]["content"][0]["text"], text,
            "{}",
            answer.body
        );
        assert_eq!(before.len(), progress, "{}", answer.body);
        assert!(
            before
                .iter()
                .all(|m| m["method"] == "notifications/progress"),
            "{}",
            answer.body
        );
    };

    // A quick call: one JSON body by the fast path; by the endpoint (which
    // an unusual header sends it to) a stream from the start, as the
    // conformance suite's check of concurrent streams wants.
    let quick = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"quick"}}}"#;
    is_json(&post(in_session(vec![]), quick.to_owned()).await, "quick");
    is_stream(
        &post(
            in_session(vec![("mcp-method", "tools/call".to_owned())]),
            quick.to_owned(),
        )
        .await,
        0,
        "quick",
    );
    // Progress before the answer: a stream, progress first.
    let with_progress = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_task","arguments":{"seconds":0.5},"_meta":{"progressToken":"p"}}}"#;
    is_stream(
        &post(in_session(vec![]), with_progress.to_owned()).await,
        2,
        "done after 0.5 s",
    );
    // Nothing for longer than the first second: a stream all the same.
    let quiet = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow_task","arguments":{"seconds":2,"quiet":true}}}"#;
    is_stream(
        &post(in_session(vec![]), quiet.to_owned()).await,
        0,
        "done after 2 s",
    );

    // Standing alone (2026-07-28): a quick call, one JSON body too.
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let alone = post(
        vec![
            ("mcp-protocol-version", "2026-07-28".to_owned()),
            ("mcp-method", "tools/call".to_owned()),
            ("mcp-name", "echo".to_owned()),
        ],
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"alone"}},{meta}}}}}"#),
    )
    .await;
    is_json(&alone, "alone");
}

/// A request standing alone is cancelled by closing its stream: a
/// `notifications/cancelled` standing alone names an id that any client
/// may use, so it cancels nothing (another client's call with that id
/// runs on).
#[tokio::test]
async fn a_cancellation_standing_alone_cancels_no_other_clients_call() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.clone();
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"slow_task","arguments":{{"seconds":1.5,"quiet":true}},{meta}}}}}"#
    );
    let running = tokio::spawn({
        let url = url.clone();
        async move {
            exchange(
                reqwest::Method::POST,
                &url,
                &[
                    JSON_AND_SSE[0],
                    JSON_AND_SSE[1],
                    ("mcp-protocol-version", "2026-07-28"),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", "slow_task"),
                ],
                &call,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"another client's"}}"#;
    let told = exchange(
        reqwest::Method::POST,
        &url,
        &[
            JSON_AND_SSE[0],
            JSON_AND_SSE[1],
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "notifications/cancelled"),
        ],
        cancel,
    )
    .await;
    assert_eq!(told.status, 202, "{}", told.body);
    let answered = running.await.unwrap();
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert!(
        answered.message()["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("done after")),
        "{}",
        answered.body
    );
}

/// MCP asks a client to accept both JSON and SSE, but real ones do not all
/// say so: Claude.ai's connector sends `Accept: text/event-stream` only,
/// browsers and some HTTP libraries `*/*`, some clients no Accept at all.
/// Each was refused with 406; each is now answered, in a form it takes: no
/// header or a wildcard as a client that takes both, SSE only as a stream
/// from the start (even a quick answer, even `initialize`), JSON only as
/// one body (even a slow call with progress, whose notifications it has no
/// stream for).
#[tokio::test]
async fn a_client_that_takes_one_form_or_any_is_answered_in_it() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.as_str();
    let hello = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let json = ("content-type", "application/json");
    let kind = |e: &Exchange| e.header("content-type").unwrap_or_default().to_owned();
    for accept in [None, Some("*/*"), Some("application/*, text/*")] {
        let mut headers = vec![json];
        headers.extend(accept.map(|a| ("accept", a)));
        let opened = exchange(reqwest::Method::POST, url, &headers, hello).await;
        assert_eq!(opened.status, 200, "{accept:?}: {}", opened.body);
        assert!(opened.header("mcp-session-id").is_some(), "{accept:?}");
    }

    // SSE only: every answer a stream.
    let sse_only = [json, ("accept", "text/event-stream")];
    let opened = exchange(reqwest::Method::POST, url, &sse_only, hello).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    assert_eq!(kind(&opened), "text/event-stream", "{}", opened.body);
    assert_eq!(opened.message()["result"]["protocolVersion"], "2025-11-25");
    let session = opened
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"streamed"}}}"#;
    let in_session = |accept: &'static str| {
        [
            json,
            ("accept", accept),
            ("mcp-session-id", session.as_str()),
        ]
    };
    let called = exchange(
        reqwest::Method::POST,
        url,
        &in_session("text/event-stream"),
        echo,
    )
    .await;
    assert_eq!(kind(&called), "text/event-stream", "{}", called.body);
    assert_eq!(called.message()["result"]["content"][0]["text"], "streamed");

    // JSON only: one body, even for a slow call that reports progress.
    let slow = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_task","arguments":{"seconds":1.5},"_meta":{"progressToken":"p"}}}"#;
    let called = exchange(
        reqwest::Method::POST,
        url,
        &in_session("application/json"),
        slow,
    )
    .await;
    assert_eq!(called.status, 200, "{}", called.body);
    assert_eq!(kind(&called), "application/json", "{}", called.body);
    let answer: serde_json::Value = serde_json::from_str(&called.body).unwrap();
    assert_eq!(answer["id"], 2, "{answer}");
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("done after")),
        "{answer}"
    );
    // A request standing alone, JSON only.
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let alone = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"alone"}},{meta}}}}}"#
    );
    let answered = exchange(
        reqwest::Method::POST,
        url,
        &[
            json,
            ("accept", "application/json"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ],
        &alone,
    )
    .await;
    assert_eq!(kind(&answered), "application/json", "{}", answered.body);
    assert!(answered.body.contains("alone"), "{}", answered.body);
}

/// Request ids over HTTP: the requests that stand alone come from every
/// such client, so two of them may carry the same id at once and both are
/// answered; in a session, an id already in use by a request being
/// answered is refused with why; and an id MCP does not allow (a fraction)
/// is refused saying so, not as a request "of no session".
#[tokio::test]
async fn ids_are_a_sessions_own_and_only_mcps_ids_are_taken() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.clone();
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let alone = |id: &str, tool: &'static str, arguments: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments},{meta}}}}}"#
        );
        let url = url.clone();
        async move {
            post_to(
                &url,
                vec![
                    ("mcp-protocol-version", "2026-07-28".to_owned()),
                    ("mcp-method", "tools/call".to_owned()),
                    ("mcp-name", tool.to_owned()),
                ],
                body,
            )
            .await
        }
    };
    let slow = r#"{"seconds":1,"quiet":true}"#;
    let (first, second) =
        tokio::join!(alone("1", "slow_task", slow), alone("1", "slow_task", slow));
    for answered in [first, second] {
        assert_eq!(answered.status, 200, "{}", answered.body);
        assert_eq!(
            answered.message()["result"]["content"][0]["text"],
            "done after 1 s",
            "{}",
            answered.body
        );
    }
    let fraction = alone("1.5", "echo", r#"{"text":"x"}"#).await;
    assert_eq!(
        fraction.message()["error"]["code"],
        -32600,
        "{}",
        fraction.body
    );
    assert!(
        fraction
            .body
            .contains("is not a string or an integer sluice can read"),
        "{}",
        fraction.body
    );

    let hello = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let opened = post_to(&url, vec![], hello.to_owned()).await;
    let session = opened
        .header("mcp-session-id")
        .expect("a session id")
        .to_owned();
    let in_session = |id: u64, tool: &str, arguments: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
        );
        post_to(&url, vec![("mcp-session-id", session.clone())], body)
    };
    let running = in_session(7, "slow_task", slow);
    let twice = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        in_session(7, "echo", r#"{"text":"second"}"#).await
    };
    let (first, twice) = tokio::join!(running, twice);
    assert_eq!(twice.message()["id"], 7, "{}", twice.body);
    assert_eq!(twice.message()["error"]["code"], -32600, "{}", twice.body);
    assert!(
        twice
            .body
            .contains("already the id of a request of this session"),
        "{}",
        twice.body
    );
    assert_eq!(
        first.message()["result"]["content"][0]["text"],
        "done after 1 s",
        "{}",
        first.body
    );
    // Answered, the id is free again (sluice keeps no list of used ids).
    let again = in_session(7, "echo", r#"{"text":"again"}"#).await;
    assert_eq!(
        again.message()["result"]["content"][0]["text"],
        "again",
        "{}",
        again.body
    );
}

/// A 2026-07-28 upstream hears no session: each request tells it what its
/// client can do. Through sluice it is told the capabilities of the client
/// the request is made for (a 2026-07-28 request's own, a session's from
/// its `initialize`), not those of the first client sluice served. The
/// conformance fixture's `test_missing_capability` (Python SDK) refuses a
/// client without sampling with -32021 and proceeds for one with it; the
/// first client here has none. Over both upstream transports.
#[tokio::test]
async fn a_2026_upstream_is_told_the_capabilities_of_each_requests_own_client() {
    let (_fixture, fixture_url) = crate::conformance::fixture_http().await;
    let dir = TempDir::new("capabilities-per-request");
    let config = dir.file(
        "sluice.toml",
        &format!("[upstreams.fixture]\nurl = {fixture_url:?}\nprotocol = \"2026-07-28\"\n"),
    );
    let over_stdio = HttpSluice::start(&[], &conformance_fixture()).await;
    let over_http = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    let tool = "test_missing_capability";
    for sluice in [&over_stdio, &over_http] {
        let url = sluice.url.as_str();
        let stateless = |id: u32, capabilities: &str| {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{capabilities}}}}}}}"#
            );
            let headers = vec![
                ("mcp-protocol-version", "2026-07-28".to_owned()),
                ("mcp-method", "tools/call".to_owned()),
                ("mcp-name", tool.to_owned()),
            ];
            post_to(url, headers, body)
        };
        let session = |capabilities: &'static str| async move {
            let initialize = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{capabilities},"clientInfo":{{"name":"raw","version":"0"}}}}}}"#
            );
            let opened = post_to(url, vec![], initialize).await;
            assert_eq!(opened.status, 200, "{}", opened.body);
            let id = opened.header("mcp-session-id").unwrap().to_owned();
            let headers = || {
                vec![
                    ("mcp-session-id", id.clone()),
                    ("mcp-protocol-version", "2025-11-25".to_owned()),
                ]
            };
            let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
            assert_eq!(
                post_to(url, headers(), initialized.into()).await.status,
                202
            );
            let call = format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
            );
            post_to(url, headers(), call).await
        };
        let refused = |answer: &Exchange| {
            assert_eq!(answer.message()["error"]["code"], -32021, "{}", answer.body);
        };
        let proceeded = |answer: &Exchange| {
            assert_eq!(
                answer.message()["result"]["content"][0]["text"],
                "Client declared sampling capability; proceeding.",
                "{}",
                answer.body
            );
        };
        // The first client declares nothing.
        refused(&stateless(1, "{}").await);
        proceeded(&stateless(2, r#"{"sampling":{}}"#).await);
        refused(&stateless(3, r#"{"elicitation":{}}"#).await);
        proceeded(&session(r#"{"sampling":{},"roots":{}}"#).await);
        refused(&session("{}").await);
        proceeded(&stateless(4, r#"{"sampling":{"tools":{}}}"#).await);
    }
}

/// Over HTTP, what sluice decodes of a request is bounded before the
/// endpoint reads it too (its `_meta`, an `initialize`'s params): an
/// `initialize` whose capabilities hold 8 MB of `[0,0,…]` is answered with an
/// error that says so and opens no session, and sluice's peak memory grows
/// by less than 24 times that (decoded, they took it past 600 MB); an
/// ordinary one then opens a session, in which a call whose `_meta` is over
/// 64 KiB gets its error while the next call works, whether the fast path
/// or the endpoint answers it.
#[tokio::test]
async fn the_http_endpoint_bounds_what_it_decodes_before_reading_it() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let url = sluice.url.as_str();
    let values = |bytes: usize| format!("[{}0]", "0,".repeat(bytes / 2));
    let initialize = |capabilities: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{capabilities},"clientInfo":{{"name":"c","version":"1"}}}}}}"#
        )
    };
    const BYTES: usize = 8 << 20;
    let pid = sluice.child.id().unwrap();
    let before = peak_kb(pid);
    let large = initialize(&format!(
        r#"{{"experimental":{{"x":{{"y":{}}}}}}}"#,
        values(BYTES)
    ));
    let refused = post_to(url, vec![], large).await;
    let grown = peak_kb(pid).saturating_sub(before);
    assert!(
        grown < 24 * BYTES / 1024,
        "sluice's peak memory grew by {grown} kB"
    );
    assert!(
        refused.header("mcp-session-id").is_none(),
        "{}",
        refused.body
    );
    let error = &refused.message()["error"];
    assert_eq!(error["code"], -32602, "{}", refused.body);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("the params of `initialize` are 83")),
        "{}",
        refused.body
    );
    let opened = post_to(url, vec![], initialize("{}")).await;
    let session = opened
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no session: {}", opened.body))
        .to_owned();
    let in_session = || {
        vec![
            ("mcp-session-id", session.clone()),
            ("mcp-protocol-version", "2025-11-25".to_owned()),
        ]
    };
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    post_to(url, in_session(), initialized.to_owned()).await;
    let call = |id: u32, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},"_meta":{meta}}}}}"#
        )
    };
    let meta = format!(r#"{{"x":{}}}"#, values(70 << 10));
    // With an `Mcp-Method` header the fast path leaves the request to the
    // endpoint, which reads `_meta`; without, the front answers.
    let to_endpoint = vec![("mcp-method", "tools/call".to_owned())];
    for headers in [in_session(), [in_session(), to_endpoint].concat()] {
        let refused = post_to(url, headers.clone(), call(2, &meta)).await;
        let error = &refused.message()["error"];
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("`_meta` is 7")),
            "{}",
            refused.body
        );
        let answered = post_to(url, headers, call(3, "{}")).await;
        assert!(
            answered.message()["result"].is_object(),
            "{}",
            answered.body
        );
    }
}
