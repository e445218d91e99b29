//! `[http]`: what one client can make the listener hold is bounded — a
//! body over `max_body_mb` gets 413, a session over `max_sessions` 503,
//! sessions idle for `session_idle_s` are forgotten, a request whose
//! headers trickle in is closed after `header_timeout_s`, and a connection
//! over `max_connections` gets 503 — while other clients are served as
//! before.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::*;

/// sluice in front of the sample server with `[http]` set to `limits`.
async fn sluice_with(dir: &TempDir, limits: &str) -> HttpSluice {
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("sample", &sample()) + "[http]\n" + limits),
    );
    HttpSluice::start(&["--config", &config.display().to_string()], &[]).await
}

fn address(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned()
}

/// Sends `head` then `body` on a new connection; returns the response's
/// status line and the rest of what arrived before the server closed or
/// 10 s passed.
async fn exchange(addr: &str, head: &str, body: &[u8]) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    // The server may answer (and close) before the whole body is sent.
    let _ = stream.write_all(body).await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    response.extend_from_slice(&buf[..n]);
                    if response.windows(4).any(|w| w == b"\r\n\r\n")
                        && String::from_utf8_lossy(&response).contains("\"jsonrpc\"")
                    {
                        break;
                    }
                }
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (status, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    (status.to_owned(), rest.to_owned())
}

fn post_head(addr: &str, length: usize, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

#[tokio::test]
async fn a_body_over_max_body_mb_gets_413_and_others_pass() {
    let dir = TempDir::new("http-body");
    let sluice = sluice_with(&dir, "max_body_mb = 1\n").await;
    let addr = address(&sluice.url);

    // Declared too large: refused from its headers.
    let (status, _) = exchange(&addr, &post_head(&addr, 2 << 20, ""), b"").await;
    assert!(status.contains(" 413 "), "{status}");

    // Chunked, with no length declared: refused once 1 MiB has arrived.
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let chunk = vec![b' '; 64 << 10];
    let mut body = Vec::new();
    for _ in 0..40 {
        body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        body.extend_from_slice(&chunk);
        body.extend_from_slice(b"\r\n");
    }
    let (status, rest) = exchange(&addr, &head, &body).await;
    assert!(status.contains(" 413 "), "{status}");
    assert!(rest.contains("max_body_mb"), "{rest}");

    // Under the limit, a request is served as before.
    let (status, rest) = exchange(
        &addr,
        &post_head(&addr, INITIALIZE.len(), ""),
        INITIALIZE.as_bytes(),
    )
    .await;
    assert!(status.contains(" 200 "), "{status} {rest}");
}

/// A client that writes its whole body before it reads its answer (as
/// most do) reads the 413 of a body over `max_body_mb`: sluice reads the
/// rest and drops it. Closed with bytes unread, the connection was reset
/// under the client, which saw "broken pipe" and never the 413 (reqwest
/// with 2 MiB, now and then).
#[tokio::test]
async fn a_client_that_sends_a_body_over_max_body_mb_whole_reads_its_413() {
    let dir = TempDir::new("http-body-whole");
    let sluice = sluice_with(&dir, "max_body_mb = 1\n").await;
    let addr = address(&sluice.url);
    let length = 6 << 20;
    let chunked = {
        let chunk = vec![b' '; 64 << 10];
        let mut body = Vec::new();
        for _ in 0..length / chunk.len() {
            body.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            body.extend_from_slice(&chunk);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        body
    };
    let chunked_head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    for (how, head, body) in [
        ("declared", post_head(&addr, length, ""), vec![b' '; length]),
        ("chunked", chunked_head, chunked),
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let sent = stream.write_all(&body).await;
        assert!(sent.is_ok(), "{how}: the body was not taken: {sent:?}");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
            .await
            .expect("answered and closed");
        assert!(read.is_ok(), "{how}: {read:?}");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413 "), "{how}: {answer}");
        assert!(answer.contains("`[http] max_body_mb`"), "{how}: {answer}");
    }
}

#[tokio::test]
async fn a_body_that_trickles_in_gets_408_and_others_stay_fast() {
    let dir = TempDir::new("http-slow-body");
    // Bodies must arrive within 6 × header_timeout_s = 6 s.
    let sluice = sluice_with(&dir, "header_timeout_s = 1\n").await;
    let addr = address(&sluice.url);
    let client = stateless_http_client(&sluice.url, "127.0.0.1".parse().unwrap()).await;
    let idle = echo_latency(&client).await;
    // Headers promise a body; a few bytes of it come, then nothing.
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(post_head(&addr, INITIALIZE.len(), "").as_bytes())
        .await
        .unwrap();
    stream
        .write_all(&INITIALIZE.as_bytes()[..10])
        .await
        .unwrap();
    let loaded = echo_latency(&client).await;
    assert!(
        loaded < idle * 20 + Duration::from_millis(50),
        "echo took {loaded:?} with a body trickling in, {idle:?} idle"
    );
    let mut response = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut response)).await;
    assert!(read.is_ok(), "the connection was still open after 20 s");
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 408 "), "{response}");
    assert!(response.contains("did not arrive within 6 s"), "{response}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn sessions_over_max_sessions_get_503_until_idle_ones_are_forgotten() {
    let dir = TempDir::new("http-sessions");
    let sluice = sluice_with(&dir, "max_sessions = 3\nsession_idle_s = 2\n").await;
    let addr = address(&sluice.url);
    let head = post_head(&addr, INITIALIZE.len(), "");
    let initialize = || exchange(&addr, &head, INITIALIZE.as_bytes());
    for n in 0..3 {
        let (status, _) = initialize().await;
        assert!(status.contains(" 200 "), "session {n}: {status}");
    }
    let (status, rest) = initialize().await;
    assert!(status.contains(" 503 "), "{status}");
    let body = &rest[rest.find('{').expect("a JSON body")..];
    let error: serde_json::Value = serde_json::from_str(body.trim()).expect(body);
    assert_eq!(error["id"], 7);
    assert_eq!(error["error"]["code"], -32000);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("`[http] max_sessions`"), "{message}");

    // A stateless client needs no session: it is served meanwhile.
    let stateless = stateless_http_client(&sluice.url, "127.0.0.1".parse().unwrap()).await;
    let echo = call(&stateless, "echo", json!({"text": "still here"})).await;
    assert_eq!(first_text(&echo), "still here");

    // Idle sessions end and are forgotten: room for new ones again.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for n in 0..3 {
        let (status, _) = initialize().await;
        assert!(
            status.contains(" 200 "),
            "session {n} after the idle ones ended: {status}"
        );
    }
    stateless.cancel().await.unwrap();
}

/// A session in use stays open however it is used (its tool calls are
/// answered by sluice's own layer, not rmcp's session); one no request
/// names for `session_idle_s` is closed: its id then gets 404.
/// With `[auth]`, one principal holds at most `max_sessions_per_principal`
/// of the sessions: one more is refused with 429 (a JSON-RPC error naming
/// the key) while another principal opens sessions as before, and the
/// principal gets its place back when it closes one.
#[tokio::test]
async fn a_principal_holds_at_most_its_share_of_the_sessions() {
    let dir = TempDir::new("http-sessions-principal");
    let (alice, bob) = ("alice-secret-token", "bob-secret-token");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[http]\nmax_sessions_per_principal = 2\n{}",
            toml_upstream("sample", &sample()),
            auth_tokens(&[("alice", alice), ("bob", bob)])
        ),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let addr = address(&sluice.url);
    let bearer = |token: &str| format!("Authorization: Bearer {token}\r\n");
    let open = |token: &str| {
        let head = post_head(&addr, INITIALIZE.len(), &bearer(token));
        let addr = addr.clone();
        async move { exchange(&addr, &head, INITIALIZE.as_bytes()).await }
    };
    let mut alices = Vec::new();
    for n in 0..2 {
        let (status, rest) = open(alice).await;
        assert!(status.contains(" 200 "), "alice's session {n}: {status}");
        alices.push(session_id(&rest));
    }
    let (status, rest) = open(alice).await;
    assert!(status.contains(" 429 "), "{status}");
    let body = &rest[rest.find('{').expect("a JSON body")..];
    let error: serde_json::Value = serde_json::from_str(body.trim()).expect(body);
    assert_eq!(error["id"], 7);
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("you have 2 open sessions, the most one principal may (`[http] max_sessions_per_principal`)"),
        "{message}"
    );
    for n in 0..2 {
        let (status, _) = open(bob).await;
        assert!(status.contains(" 200 "), "bob's session {n}: {status}");
    }
    // alice closes one: her place is back.
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\n{}Mcp-Session-Id: {}\r\nConnection: close\r\n\r\n",
        bearer(alice),
        alices[0]
    );
    let (status, _) = exchange(&addr, &delete, b"").await;
    assert!(status.contains(" 200 "), "{status}");
    let (status, _) = open(alice).await;
    assert!(status.contains(" 200 "), "{status}");
}

/// The `Mcp-Session-Id` of a response's headers and body `rest`.
fn session_id(rest: &str) -> String {
    rest.lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {rest}"))
}

#[tokio::test]
async fn a_session_in_use_stays_open_and_an_unused_one_is_closed() {
    let dir = TempDir::new("http-idle");
    let sluice = sluice_with(&dir, "session_idle_s = 2\n").await;
    let addr = address(&sluice.url);
    let (status, rest) = exchange(
        &addr,
        &post_head(&addr, INITIALIZE.len(), ""),
        INITIALIZE.as_bytes(),
    )
    .await;
    assert!(status.contains(" 200 "), "{status}");
    let unused = rest
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .expect("a session id");
    let (client, _) = connect_http(&sluice.url).await;
    // Calls only, for twice the idle time.
    for n in 0..8 {
        let echo = call(&client, "echo", json!({"text": format!("call {n}")})).await;
        assert_eq!(first_text(&echo), format!("call {n}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let list = r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#;
    let (status, _) = exchange(
        &addr,
        &post_head(&addr, list.len(), &format!("Mcp-Session-Id: {unused}\r\n")),
        list.as_bytes(),
    )
    .await;
    assert!(status.contains(" 404 "), "the unused session: {status}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn half_open_requests_are_closed_after_header_timeout_s_and_others_stay_fast() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let dir = TempDir::new("http-slowloris");
    let sluice = sluice_with(&dir, "header_timeout_s = 1\n").await;
    let addr = address(&sluice.url);
    let client = stateless_http_client(&sluice.url, "127.0.0.1".parse().unwrap()).await;
    let idle = echo_latency(&client).await;

    // Slowloris: many connections that never finish their headers.
    let mut slow = Vec::new();
    for _ in 0..400 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all(format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ").as_bytes())
            .await
            .unwrap();
        slow.push(stream);
    }
    let loaded = echo_latency(&client).await;
    assert!(
        loaded < idle * 20 + Duration::from_millis(50),
        "echo took {loaded:?} with 400 half-open requests, {idle:?} idle"
    );
    // Each is closed by sluice (EOF or reset), not held for ever.
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        for stream in &mut slow {
            let mut buf = [0u8; 256];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {} // a 408 before closing is fine
                }
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "half-open requests were still open after 15 s"
    );
    let after = call(&client, "echo", json!({"text": "after"})).await;
    assert_eq!(first_text(&after), "after");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn connections_over_max_connections_get_503_until_one_closes() {
    let dir = TempDir::new("http-connections");
    let sluice = sluice_with(&dir, "max_connections = 2\n").await;
    let addr = address(&sluice.url);
    // Two connections held open, idle, as a client's kept-alive ones are:
    // accepted first (in the order they came), and counted.
    let mut held = vec![
        TcpStream::connect(&addr).await.unwrap(),
        TcpStream::connect(&addr).await.unwrap(),
    ];
    let initialize = |addr: String| async move {
        exchange(
            &addr,
            &post_head(&addr, INITIALIZE.len(), ""),
            INITIALIZE.as_bytes(),
        )
        .await
    };
    let (status, rest) = initialize(addr.clone()).await;
    assert!(status.contains(" 503 "), "{status}\n{rest}");
    assert!(
        rest.contains("sluice has 2 open connections")
            && rest.contains("(`[http] max_connections`)"),
        "{rest}"
    );
    // One closes: sluice sees it end, and serves the next connection.
    drop(held.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, rest) = initialize(addr.clone()).await;
        if status.contains(" 200 ") {
            assert!(rest.contains("\"protocolVersion\""), "{rest}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still refused 10 s after a connection closed: {status}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `[limits] max_requests_in_flight` holds over HTTP, per client (here a
/// principal): with it at 2, alice's third request while two of hers are
/// being answered is refused at once with an error naming the key; bob,
/// another principal, is served meanwhile; and once hers end, she is
/// served again. Before, one client had as many requests answered at once
/// as it opened connections (`max_connections`, 10,000).
#[tokio::test]
async fn requests_in_flight_over_http_are_bounded_per_client() {
    let dir = TempDir::new("http-in-flight");
    let (alice_token, bob_token) = ("alice-in-flight-token", "bob-in-flight-token");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[limits]\nmax_requests_in_flight = 2\n{}",
            toml_upstream("sample", &sample()),
            auth_tokens(&[("alice", alice_token), ("bob", bob_token)])
        ),
    );
    let sluice = HttpSluice::with_admin(&config).await;
    let (alice, _) = connect_http_as(&sluice.url, alice_token, Recorder::default()).await;
    let (bob, _) = connect_http_as(&sluice.url, bob_token, Recorder::default()).await;
    let tool = |name: &str, arguments: serde_json::Value| {
        rmcp::model::CallToolRequestParams::new(name.to_owned())
            .with_arguments(arguments.as_object().unwrap().clone())
    };
    // Three calls of alice's at once: the first two to arrive are
    // answered (4 s each), the third is refused at once.
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let alice = alice.peer().clone();
            let call = tool("slow_task", json!({"seconds": 4, "quiet": true}));
            tokio::spawn(async move { alice.call_tool(call).await })
        })
        .collect();
    let (first, _, others) = futures::future::select_all(slow).await;
    let refused = match first.unwrap() {
        Err(rmcp::ServiceError::McpError(error)) => error,
        other => panic!("the first to end was not refused: {other:?}"),
    };
    assert_eq!(refused.code.0, -32000, "{refused:?}");
    assert!(
        refused
            .message
            .contains("already answering 2 requests from this client")
            && refused
                .message
                .contains("`[limits] max_requests_in_flight`"),
        "{refused:?}"
    );
    // Refused again while hers are answered...
    let again = alice.call_tool(tool("echo", json!({"text": "4th"}))).await;
    assert!(
        matches!(&again, Err(rmcp::ServiceError::McpError(e)) if e.code.0 == -32000),
        "{again:?}"
    );
    // ...and said in the log once for the run, naming whose requests are
    // refused.
    let said = || -> Vec<String> {
        sluice
            .stderr
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains("max_requests_in_flight reached"))
            .cloned()
            .collect()
    };
    eventually(Duration::from_secs(10), "the refusal in the log", || {
        !said().is_empty()
    })
    .await;
    let said = said();
    assert!(
        said.len() == 1 && said[0].contains("refusing the requests of principal \"alice\""),
        "{said:?}"
    );
    // Each refusal counted for the operator.
    let metrics = metrics_read_by(&sluice, bob_token).await;
    assert!(
        metrics.contains("sluice_refusals_total{limit=\"max_requests_in_flight\"} 2\n"),
        "{metrics}"
    );
    // Another principal's share is its own.
    let bobs = bob
        .call_tool(tool("echo", json!({"text": "bob"})))
        .await
        .unwrap();
    assert_eq!(first_text(&bobs), "bob");
    assert!(
        others.iter().all(|call| !call.is_finished()),
        "alice's two calls were still being answered"
    );
    for call in others {
        call.await.unwrap().unwrap();
    }
    let again = alice
        .call_tool(tool("echo", json!({"text": "again"})))
        .await
        .unwrap();
    assert_eq!(first_text(&again), "again");
}

/// A `subscriptions/listen` stream (2026-07-28) holds its place among its
/// client's requests in flight for as long as it stays open: a client
/// cannot hold more streams open than `max_requests_in_flight`, each a
/// connection of everyone's `max_connections`. Closing one gives its place
/// back.
#[tokio::test]
async fn listen_streams_count_among_a_clients_requests_in_flight() {
    let dir = TempDir::new("http-listen-in-flight");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[limits]\nmax_requests_in_flight = 2\n",
            toml_upstream("sample", &sample())
        ),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let addr = address(&sluice.url);
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let head = |method: &str, length: usize| {
        post_head(
            &addr,
            length,
            &format!("Mcp-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"),
        )
    };
    let listen = async |id: u32| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},{meta}}}}}"#
        );
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream
            .write_all((head("subscriptions/listen", body.len()) + &body).as_bytes())
            .await
            .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("acknowledged") {
            let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
                .await
                .expect("the acknowledgement")
                .unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        stream
    };
    let echo = async || {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},{meta}}}}}"#
        );
        let head = head("tools/call\r\nMcp-Name: echo", body.len());
        exchange(&addr, &head, body.as_bytes()).await
    };
    let first = listen(1).await;
    let _second = listen(2).await;
    let (status, refused) = echo().await;
    assert!(status.contains(" 200 "), "{status}");
    assert!(
        refused.contains("`[limits] max_requests_in_flight`"),
        "{refused}"
    );
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, answer) = echo().await;
        if answer.contains(r#""text":"hi""#) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no place back 10 s after a stream closed: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With `[limits] requests_per_minute`, a client that sends more in a minute
/// is refused at once (a JSON-RPC error naming the key and when the next is
/// taken), counted, while another client is served.
#[tokio::test]
async fn a_client_over_requests_per_minute_is_refused_and_others_are_not() {
    let dir = TempDir::new("http-rate");
    let (alice, bob) = ("alice-rate-token", "bob-rate-token");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[limits]\nrequests_per_minute = 3\n{}",
            toml_upstream("sample", &sample()),
            auth_tokens(&[("alice", alice), ("bob", bob)])
        ),
    );
    let sluice = HttpSluice::with_admin(&config).await;
    let addr = address(&sluice.url);
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;
    let echo = async |token: &str| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},{meta}}}}}"#
        );
        let extra = format!(
            "Authorization: Bearer {token}\r\nMcp-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
        );
        let (status, rest) = exchange(
            &addr,
            &post_head(&addr, body.len(), &extra),
            body.as_bytes(),
        )
        .await;
        assert!(status.contains(" 200 "), "{status} {rest}");
        rest
    };
    for n in 0..3 {
        let answer = echo(alice).await;
        assert!(
            answer.contains(r#""text":"hi""#),
            "alice's call {n}: {answer}"
        );
    }
    let refused = echo(alice).await;
    assert!(
        refused.contains("too many requests: this client may send 3 a minute (`[limits] requests_per_minute`); the next is taken in "),
        "{refused}"
    );
    assert!(refused.contains(r#""code":-32000"#), "{refused}");
    assert!(
        echo(bob).await.contains(r#""text":"hi""#),
        "bob's own minute"
    );
    // (Read with bob's token: the admin server's requests are not
    // counted.)
    let metrics = metrics_read_by(&sluice, bob).await;
    assert!(
        metrics.contains(r#"sluice_refusals_total{limit="requests_per_minute"} 1"#),
        "{metrics}"
    );
}

/// The admin server's `/metrics`, read with `token`.
async fn metrics_read_by(sluice: &HttpSluice, token: &str) -> String {
    reqwest::Client::new()
        .get(format!("{}/metrics", admin_url(sluice)))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
