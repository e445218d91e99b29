//! Faults: upstreams that fail to start, crash mid-call or print garbage;
//! clients that send garbage or go away; signals. Each gets a clear
//! answer, and sluice keeps serving.

use std::time::Duration;

use rmcp::model::CallToolRequestParams;

use crate::support::*;

fn call(tool: &str, arguments: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args(arguments))
}

#[tokio::test]
async fn an_upstream_that_cannot_start_is_named_and_the_others_serve() {
    let dir = TempDir::new("cannot-start");
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("good", &sample())
            + &toml_upstream("bad", &cmd(&["/nonexistent/mcp-server", "--flag"]))),
    );
    let (client, _) = connect(&via_config(&config)).await;
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "good__echo"), "{tools:?}");
    let failed = client
        .call_tool(call("bad__anything", serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(failed.is_error, Some(true));
    let text = first_text(&failed);
    assert!(
        text.contains(
            "upstream `bad` could not be started: `/nonexistent/mcp-server`: No such file"
        ),
        "{text}"
    );
    let ok = client
        .call_tool(call(
            "good__echo",
            serde_json::json!({"text": "still serving"}),
        ))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "still serving");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_unreachable_http_upstream_is_named_with_its_url() {
    let dir = TempDir::new("unreachable");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Nothing listens there (the port was just free); https exercises TLS setup too.
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("shop", &sample())
            + &format!("[upstreams.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\n\n")
            + &format!("[upstreams.tls]\nurl = \"https://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer x\" }}\n")),
    );
    let (client, _) = connect(&via_config(&config)).await;
    assert!(
        client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .any(|t| t.name == "shop__echo")
    );
    for name in ["web", "tls"] {
        let failed = client
            .call_tool(call(&format!("{name}__anything"), serde_json::json!({})))
            .await
            .unwrap();
        let text = first_text(&failed);
        assert_eq!(failed.is_error, Some(true), "{text}");
        assert!(text.starts_with(&format!("upstream `{name}`")), "{text}");
        assert!(text.contains(&format!("127.0.0.1:{port}/mcp")), "{text}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_that_dies_during_the_handshake_is_explained() {
    let upstream = cmd(&["sh", "-c", "echo 'module not found: mcp' >&2; exit 7"]);
    let (client, _) = connect(&via_sluice(&upstream)).await;
    let failed = client
        .call_tool(call("anything", serde_json::json!({})))
        .await
        .unwrap();
    let text = first_text(&failed);
    assert_eq!(failed.is_error, Some(true), "{text}");
    assert!(text.contains("failed during the MCP handshake"), "{text}");
    assert!(text.contains("exited with status 7"), "{text}");
    assert!(text.contains("module not found: mcp"), "{text}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_crash_mid_call_is_reported_and_the_next_call_restarts_the_upstream() {
    let dir = TempDir::new("crash");
    let admin = format!("127.0.0.1:{}", free_port());
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("py", &py_server())
            + &toml_upstream("shop", &sample())
            + &format!("[admin]\nlisten = \"{admin}\"\n")),
    );
    let (client, inbox) = connect(&via_config(&config)).await;
    let crashed = client
        .call_tool(call(
            "py__crash",
            serde_json::json!({"code": 3, "message": "disk on fire"}),
        ))
        .await
        .unwrap();
    let text = first_text(&crashed);
    assert_eq!(crashed.is_error, Some(true), "{text}");
    assert!(
        text.contains("upstream `py` exited with status 3 during the request"),
        "{text}"
    );
    assert!(text.contains("disk on fire"), "{text}");
    // The other upstream never noticed.
    let shop = client
        .call_tool(call(
            "shop__echo",
            serde_json::json!({"text": "unaffected"}),
        ))
        .await
        .unwrap();
    assert_eq!(first_text(&shop), "unaffected");
    // The next call starts the crashed one again, and clients are told
    // to list again (a restarted server may offer other tools).
    let again = client
        .call_tool(call("py__echo", serde_json::json!({"text": "back"})))
        .await
        .unwrap();
    assert_eq!(first_text(&again), "back", "{again:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while inbox.lock().unwrap().tool_list_changed == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tools/list_changed after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The operator saw it: the crash counted as an error of its tool, the
    // restart counted, the upstream up again (sluice over stdio, its
    // admin server from `[admin] listen`).
    sluice::install_tls_provider();
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "sluice_tool_calls_total{outcome=\"error\",tool=\"crash\",upstream=\"py\"} 1",
        "sluice_tool_calls_total{outcome=\"passed\",tool=\"echo\",upstream=\"py\"} 1",
        "sluice_tool_calls_total{outcome=\"passed\",tool=\"echo\",upstream=\"shop\"} 1",
        "sluice_upstream_restarts_total{upstream=\"py\"} 1",
        "sluice_upstream_restarts_total{upstream=\"shop\"} 0",
        "sluice_upstream_up{upstream=\"py\"} 1",
        "sluice_sessions 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn malformed_requests_get_errors_and_sluice_keeps_serving() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    raw.initialize().await;
    raw.send(r#"{"jsonrpc":"2.0","id":4}"#).await;
    let invalid = raw.recv().await;
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    assert_eq!(invalid["id"], 4, "the error names the request: {invalid}");
    raw.send("[1,2]").await;
    assert_eq!(raw.recv().await["error"]["code"], -32600);
    raw.send("this is not json").await;
    let parse = raw.recv().await;
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(parse["id"].is_null(), "{parse}");
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"no/such/method"}"#)
        .await;
    assert_eq!(raw.response(5).await["error"]["code"], -32601);
    raw.send(r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":42}}"#)
        .await;
    let invalid = raw.response(6).await;
    assert_eq!(invalid["error"]["code"], -32602, "{invalid}");
    assert!(
        invalid["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid parameters for tools/call"),
        "{invalid}"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}"#).await;
    let ok = raw.response(7).await;
    assert_eq!(ok["result"]["content"][0]["text"], "still here", "{ok}");
}

/// A line that is not a message is answered with what is wrong in it, in
/// the words sluice's own reading gives (the same as over HTTP), not a
/// parser's "unrecognized JSON-RPC message"; an id MCP does not allow, and
/// an id already in use by a request being answered, are refused with why
/// (the first was refused as if no session had begun; the second was
/// relayed, and a cancellation naming it could stop either request).
#[tokio::test]
async fn lines_and_ids_that_are_not_mcps_are_refused_saying_what_is_wrong() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    raw.initialize().await;
    let lines: [(&[u8], i64, &str); 5] = [
        (
            br#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#,
            -32600,
            "is a JSON-RPC batch",
        ),
        (
            br#"{"id":3,"method":"ping"}"#,
            -32600,
            r#""jsonrpc": "2.0" is missing"#,
        ),
        (
            br#"{"jsonrpc":"2.0","id":4,"method":5}"#,
            -32600,
            r#""method" is a number; it must be a string"#,
        ),
        (
            br#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            -32600,
            "the id is an object",
        ),
        (
            b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"a\":\"\xff\"}}",
            -32700,
            "is not UTF-8 text",
        ),
    ];
    for (line, code, says) in lines {
        raw.send_bytes(line).await;
        let refused = raw.recv().await;
        let line = String::from_utf8_lossy(line);
        assert_eq!(refused["error"]["code"], code, "{line}: {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{line}: {refused}");
    }
    let call = |id: &str, tool: &str, arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
        )
    };
    // MCP's ids are strings or integers: a fraction, or an integer too
    // large to read, is refused, and the answer carries it as sent.
    for id in ["1.5", "1e400", "123456789012345678901234567890"] {
        raw.send(&call(id, "echo", r#"{"text":"x"}"#)).await;
        let refused = raw.recv_text().await;
        assert!(
            refused.contains(&format!(r#""id":{id}"#))
                && refused.contains("-32600")
                && refused.contains("is not a string or an integer sluice can read"),
            "{refused}"
        );
    }
    // Integers written otherwise, and strings, are ids.
    for (id, text) in [("-0", "minus zero"), ("1.0", "one"), (r#""\u0061b""#, "ab")] {
        raw.send(&call(id, "echo", &format!(r#"{{"text":"{text}"}}"#)))
            .await;
        let answer = raw.recv_text().await;
        assert!(
            answer.contains(&format!(r#""id":{id}"#)) && answer.contains(text),
            "{answer}"
        );
    }
    // An id in use by a request still being answered: the second request
    // is refused at once; the first is answered as it would have been.
    raw.send(&call("7", "slow_task", r#"{"seconds":1,"quiet":true}"#))
        .await;
    raw.send(&call("7", "echo", r#"{"text":"second"}"#)).await;
    let refused = raw.recv().await;
    assert_eq!(refused["id"], 7, "{refused}");
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already the id of a request of this session that has not been answered"),
        "{refused}"
    );
    let first = raw.response(7).await;
    assert_eq!(
        first["result"]["content"][0]["text"], "done after 1 s",
        "{first}"
    );
    raw.send(&call("8", "echo", r#"{"text":"still here"}"#))
        .await;
    let ok = raw.response(8).await;
    assert_eq!(ok["result"]["content"][0]["text"], "still here", "{ok}");
}

/// A cancelled request's id stays in use until its work has ended: a
/// request sent with it right after the cancellation is refused. It was
/// taken, and then unregistered when the cancelled work ended, which left
/// it running where no cancellation could reach it, and answered.
#[tokio::test]
async fn an_id_stays_in_use_until_its_cancelled_work_has_ended() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    raw.initialize().await;
    let call = |id: u64, tool: &str, arguments: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
        )
    };
    let cancel = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#;
    // In one write: the three lines are read one after another, before the
    // cancelled call's work runs again to end.
    let lines = [
        call(7, "slow_task", r#"{"seconds":5,"quiet":true}"#),
        cancel.to_owned(),
        call(7, "slow_task", r#"{"seconds":2,"quiet":true}"#),
    ];
    raw.send_bytes(lines.join("\n").as_bytes()).await;
    let second = raw.response(7).await;
    assert_eq!(second["error"]["code"], -32600, "{second}");
    assert!(
        second["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already the id of a request of this session"),
        "{second}"
    );
    // Once the cancelled work has ended, the id is free again.
    let mut again = serde_json::Value::Null;
    for attempt in 8..58 {
        raw.send(&call(attempt, "echo", r#"{"text":"next"}"#)).await;
        assert_eq!(
            raw.response(attempt).await["result"]["content"][0]["text"],
            "next"
        );
        raw.send(&call(7, "echo", r#"{"text":"again"}"#)).await;
        again = raw.response(7).await;
        if again.get("result").is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(again["result"]["content"][0]["text"], "again", "{again}");
}

#[tokio::test]
async fn garbage_from_an_upstream_is_skipped() {
    let sample = sample();
    let noisy = cmd(&[
        "sh",
        "-c",
        &format!(
            "echo 'this is not JSON-RPC'; echo '{{\"broken'; exec '{}' sample-server",
            sample[0]
        ),
    ]);
    let (client, _) = connect(&via_sluice(&noisy)).await;
    let ok = client
        .call_tool(call("echo", serde_json::json!({"text": "fine"})))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "fine");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_cancelling_a_call_cancels_it_upstream() {
    let dir = TempDir::new("cancel");
    let marker = dir.0.join("marker");
    let mut raw = Raw::start(&with_upstream(&py_server()));
    raw.initialize().await;
    let call = serde_json::json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":30,"marker":marker}}});
    raw.send(&call.to_string()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9,"reason":"user pressed Esc"}}"#).await;
    let text = wait_for_line(&marker, "cancelled", Duration::from_secs(10)).await;
    assert_eq!(text.trim(), "cancelled");
    // The session goes on.
    raw.send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"echo","arguments":{"text":"next"}}}"#).await;
    assert_eq!(
        raw.response(10).await["result"]["content"][0]["text"],
        "next"
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_call_cancels_it_upstream_and_sluice_exits() {
    let dir = TempDir::new("disconnect");
    let marker = dir.0.join("marker");
    let mut raw = Raw::start(&with_upstream(&py_server()));
    raw.initialize().await;
    let call = serde_json::json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sleep","arguments":{"seconds":60,"marker":marker}}});
    raw.send(&call.to_string()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    drop(raw.stdin.take());
    let text = wait_for_line(&marker, "cancelled", Duration::from_secs(20)).await;
    assert_eq!(text.trim(), "cancelled");
    let status = tokio::time::timeout(Duration::from_secs(20), raw.child.wait())
        .await
        .expect("sluice exits after its client leaves")
        .unwrap();
    assert!(status.success(), "{status}");
}

fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// The sample server as an upstream that records its pid in `pidfile`, so
/// a test can check it is gone (`sh`, which `exec`s the server, or with
/// `stubborn` runs it and then sleeps on: an upstream that does not exit
/// when its stdin ends).
fn sample_recording_pid(pidfile: &std::path::Path, stubborn: bool) -> Vec<String> {
    let server = format!("'{}' sample-server", sample()[0]);
    let run = if stubborn {
        format!("{server}; exec sleep 300")
    } else {
        format!("exec {server}")
    };
    cmd(&[
        "sh",
        "-c",
        &format!("echo $$ > '{}'; {run}", pidfile.display()),
    ])
}

/// The pid an upstream of [`sample_recording_pid`] recorded, checked alive.
fn recorded_pid(pidfile: &std::path::Path) -> String {
    let pid = std::fs::read_to_string(pidfile).unwrap().trim().to_owned();
    assert!(alive(&pid), "upstream {pid} is not running");
    pid
}

#[tokio::test]
async fn stdin_closing_shuts_down_and_stops_the_upstream() {
    let dir = TempDir::new("stdin-close");
    let pidfile = dir.0.join("pid");
    let mut raw = Raw::start(&with_upstream(&sample_recording_pid(&pidfile, false)));
    raw.initialize().await;
    let pid = recorded_pid(&pidfile);
    drop(raw.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(15), raw.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    assert!(!alive(&pid), "upstream {pid} outlived sluice");
}

/// Waits up to 10 s for process `pid` to be gone (killing it if not).
async fn gone_within_10_s(pid: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        if tokio::time::Instant::now() > deadline {
            let what = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let _ = std::process::Command::new("kill").arg(pid).status();
            panic!("upstream {pid} ({what:?}) outlived a killed sluice by 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// sluice run by the dynamic loader (`ld.so sluice …`, as some packagers
/// and tools such as valgrind run a binary) still starts its stdio
/// upstreams: its launcher is the file its code came from, not
/// `/proc/self/exe`, which is then the loader.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn an_upstream_starts_when_sluice_is_run_by_the_dynamic_loader() {
    // The loader this test binary was started by is the one for sluice.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let loader = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|file| {
            std::path::Path::new(file)
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("ld-"))
        })
        .expect("a dynamically linked test binary maps its loader");
    let mut command = vec![loader.to_owned()];
    command.extend(via_sluice(&sample()));
    let (client, _) = connect(&command).await;
    let echoed = client
        .call_tool(call("echo", serde_json::json!({"text": "loaded"})))
        .await
        .unwrap();
    assert_ne!(echoed.is_error, Some(true), "{echoed:?}");
    assert_eq!(first_text(&echoed), "loaded");
    client.cancel().await.unwrap();
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn an_upstream_that_outlives_its_stdin_ends_with_a_sluice_killed_outright() {
    // sluice, killed with SIGKILL, cannot stop it; the kernel does
    // (`upstream/tether.rs`). Over stdio (one thread) and HTTP (upstreams
    // started on the runtime's worker threads).
    let dir = TempDir::new("sigkill");
    let pidfile = dir.0.join("pid");
    let mut raw = Raw::start(&with_upstream(&sample_recording_pid(&pidfile, true)));
    raw.initialize().await;
    let pid = recorded_pid(&pidfile);
    raw.child.kill().await.unwrap();
    gone_within_10_s(&pid).await;

    let pidfile = dir.0.join("pid-http");
    let mut sluice = HttpSluice::start(&[], &sample_recording_pid(&pidfile, true)).await;
    let (client, _) = connect_http(&sluice.url).await;
    assert!(!client.list_all_tools().await.unwrap().is_empty());
    let pid = recorded_pid(&pidfile);
    sluice.child.kill().await.unwrap();
    gone_within_10_s(&pid).await;
}

#[cfg(target_os = "linux")]
#[test]
fn a_launcher_whose_sluice_is_not_its_parent_starts_nothing() {
    // `exec-upstream PARENT` from a process that is not sluice `PARENT`
    // (sluice died before the launcher could ask to end with it, or anyone
    // else typing it): no signal would stop what it starts, so it starts
    // nothing and says why.
    let dir = TempDir::new("launcher");
    let marker = dir.0.join("started");
    let out = std::process::Command::new(sluice())
        .args(["exec-upstream", "1", "--", "sh", "-c"])
        .arg(format!("touch '{}'", marker.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("not starting `sh`: sluice (pid 1), which asked for it, has exited"),
        "{said}"
    );
    assert!(!marker.exists(), "the command ran");
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_and_stops_the_upstream() {
    let dir = TempDir::new("sigterm");
    let pidfile = dir.0.join("pid");
    let mut sluice = HttpSluice::start(&[], &sample_recording_pid(&pidfile, false)).await;
    let (client, _) = connect_http(&sluice.url).await;
    assert!(!client.list_all_tools().await.unwrap().is_empty());
    let pid = recorded_pid(&pidfile);
    let own = sluice.child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &own])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), sluice.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.success(),
        "{status}: {:?}",
        sluice.stderr.lock().unwrap()
    );
    assert!(!alive(&pid), "upstream {pid} outlived sluice");
}

#[tokio::test]
async fn sigterm_stops_a_sluice_whose_stderr_no_one_reads_any_more() {
    // Whoever started sluice and read its log has gone (a killed test
    // harness, `sluice … 2>&1 | head`): log lines cannot be written. They
    // are dropped; tracing's own complaint about it used to panic on the
    // same closed stderr and kill the task that logged, the one that turns
    // SIGTERM into a shutdown among them.
    let mut child = http_sluice(&[], &sample()).spawn().unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stderr.take().unwrap()));
    let url = loop {
        let line = lines.next_line().await.unwrap().expect("sluice serves");
        if let Some(url) = line.strip_prefix("sluice: serving MCP at ") {
            break url.trim().to_owned();
        }
    };
    drop(lines);
    // Work that logs, with no one reading.
    let (client, _) = connect_http(&url).await;
    assert!(!client.list_all_tools().await.unwrap().is_empty());
    let own = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &own])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("sluice ignored SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}

/// The fixture's `big` text (as `govern.rs` builds it).
fn big_text(n: usize) -> String {
    let mut text = String::with_capacity(n + 80);
    let mut i = 0;
    while text.len() < n {
        text.push_str(&format!(
            "{i:08} abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456\n"
        ));
        i += 1;
    }
    text.truncate(n);
    text
}

#[tokio::test]
async fn a_huge_error_result_is_stored_like_a_result_and_stays_an_error() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = client
        .call_tool(call("big_error", serde_json::json!({"bytes": 5_000_000})))
        .await
        .unwrap();
    let text = first_text(&answer);
    assert_eq!(answer.is_error, Some(true), "{text}");
    assert!(
        fits(&answer, 18_000, 45_000),
        "over the budget: {} chars",
        text.len()
    );
    assert!(
        text.starts_with("big_error returned an error of ≈"),
        "the answer says it was an error: {text}"
    );
    // The whole error is read back through its handle.
    let whole = restore(&client, &answer).await;
    assert_eq!(
        whole.len(),
        "Error executing tool big_error: ".len() + 5_000_000
    );
    assert!(whole == format!("Error executing tool big_error: {}", big_text(5_000_000)));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_huge_json_rpc_error_is_cut_to_the_budget_and_stored_whole() {
    let dir = TempDir::new("huge-error");
    let config = dir.file("sluice.toml", &toml_upstream("py", &py_server()));
    let (client, _) = connect(&via_config(&config)).await;
    for (bytes, data_bytes) in [(5_000_000, 0), (100, 5_000_000)] {
        let error = match client
            .call_tool(call(
                "big_raise",
                serde_json::json!({"bytes": bytes, "data_bytes": data_bytes}),
            ))
            .await
        {
            Err(rmcp::ServiceError::McpError(error)) => error,
            other => panic!("a JSON-RPC error, not {other:?}"),
        };
        let sent = serde_json::to_string(&error).unwrap();
        assert!(
            sent.len() < 45_000 && sluice_core::budget::count_tokens(&sent, 1.25) < 18_000,
            "over the budget: {} bytes",
            sent.len()
        );
        assert_eq!(error.code.0, -32001, "the upstream's code is kept");
        let message = error.message.to_string();
        assert!(
            message.starts_with(&big_text(bytes.min(1000))),
            "it starts as the upstream's message did: {}",
            &message[..200.min(message.len())]
        );
        assert!(
            message.contains("upstream `py`"),
            "{}",
            &message[message.len().saturating_sub(600)..]
        );
        // The whole error is stored: its message, and its data.
        let stored = error
            .data
            .as_ref()
            .and_then(|d| d.get("sluice/stored"))
            .unwrap_or_else(|| panic!("{}", &message[message.len().saturating_sub(600)..]));
        let handle = stored["handle"].as_str().unwrap();
        assert!(message.contains(&format!("sluice_read {{\"handle\":\"{handle}\"}}")));
        // (Checked with jq: paging 5 MB back is `a_huge_error_result_…`'s.)
        let filter = "(.data.detail // \"\") as $d | [.code, (.message | length), .message[-70:], ($d | length), $d[-70:]]";
        let whole = client
            .call_tool(call(
                "sluice_query",
                serde_json::json!({"handle": handle, "filter": filter}),
            ))
            .await
            .unwrap();
        let tail = |n: usize| {
            let text = big_text(n);
            text[text.len().saturating_sub(70)..].to_owned()
        };
        let want = serde_json::json!([-32001, bytes, tail(bytes), data_bytes, tail(data_bytes)]);
        let got = serde_json::from_str::<serde_json::Value>(&first_text(&whole));
        assert_eq!(got.ok(), Some(want), "{}", first_text(&whole));
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_upstream_that_never_finishes_its_handshake_is_named_and_the_others_serve() {
    let dir = TempDir::new("stuck-handshake");
    // Reads its stdin and never answers.
    let stuck = cmd(&["sh", "-c", "cat > /dev/null"]);
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("py", &py_server()) + &toml_upstream("stuck", &stuck)),
    );
    // The bound is the feature (10 s); these limits only leave room for a
    // loaded machine. Before, `initialize` took 20 s and `tools/list` 40 s.
    let began = std::time::Instant::now();
    let (client, _) = connect(&via_config(&config)).await;
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "initialize took {:?}",
        began.elapsed()
    );
    let began = std::time::Instant::now();
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "tools/list waited for the stuck upstream again: {:?}",
        began.elapsed()
    );
    assert!(tools.iter().any(|t| t.name == "py__echo"), "{tools:?}");
    assert!(!tools.iter().any(|t| t.name.starts_with("stuck__")));
    let failed = client
        .call_tool(call("stuck__anything", serde_json::json!({})))
        .await
        .unwrap();
    let text = first_text(&failed);
    assert_eq!(failed.is_error, Some(true), "{text}");
    assert!(
        text.starts_with(
            "upstream `stuck` did not finish its MCP handshake within 10 s: it was started but has not answered"
        ),
        "{text}"
    );
    let ok = client
        .call_tool(call(
            "py__echo",
            serde_json::json!({"text": "still serving"}),
        ))
        .await
        .unwrap();
    assert_eq!(first_text(&ok), "still serving");
    client.cancel().await.unwrap();
}
