//! Transparency over stdio: what a client sees through sluice is what it
//! sees directly.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};

use crate::support::*;

/// Lists and calls the same things on `direct` and through sluice, and
/// compares every answer.
async fn same_answers(upstream: Vec<String>, calls: &[(&str, serde_json::Value)]) {
    let (direct, direct_inbox) = connect(&upstream).await;
    let (proxied, proxied_inbox) = connect(&via_sluice(&upstream)).await;

    let tools = direct.list_all_tools().await.unwrap();
    assert!(!tools.is_empty());
    assert_eq!(
        upstream_part(proxied.list_all_tools().await.unwrap()),
        as_listed_by_sluice(tools),
        "tools/list differs"
    );

    for (tool, arguments) in calls {
        let params =
            CallToolRequestParams::new(tool.to_string()).with_arguments(args(arguments.clone()));
        let want = direct.call_tool(params.clone()).await.unwrap();
        let got = proxied.call_tool(params).await.unwrap();
        if meta(&got, "sluice/stored").is_some() {
            // Too large for the budget: stored, and read back whole.
            assert_eq!(restore(&proxied, &got).await, first_text(&want), "{tool}");
            continue;
        }
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap(),
            "tools/call {tool} differs"
        );
    }
    // The clients' handlers run as tasks of their own: a call's last
    // progress may be handled after its answer (the direct calls were made
    // first, so theirs have had longer).
    let progress =
        |inbox: &std::sync::Arc<std::sync::Mutex<Inbox>>| inbox.lock().unwrap().progress.len();
    eventually(
        Duration::from_secs(5),
        "as much progress as directly",
        || progress(&proxied_inbox) >= progress(&direct_inbox),
    )
    .await;
    let want_progress = progress(&direct_inbox);
    let got_progress = progress(&proxied_inbox);
    assert_eq!(got_progress, want_progress, "progress notifications differ");

    let resources = direct.list_all_resources().await.unwrap();
    assert_eq!(proxied.list_all_resources().await.unwrap(), resources);
    for resource in resources.iter().take(3) {
        let params = ReadResourceRequestParams::new(resource.uri.clone());
        assert_eq!(
            proxied.read_resource(params.clone()).await.unwrap(),
            direct.read_resource(params).await.unwrap(),
            "resources/read {} differs",
            resource.uri
        );
    }
    let mut templates = proxied.list_all_resource_templates().await.unwrap();
    templates.retain(|t| t.uri_template != "sluice://result/{handle}");
    assert_eq!(
        templates,
        direct.list_all_resource_templates().await.unwrap()
    );
    let prompts = direct.list_all_prompts().await.unwrap();
    assert_eq!(proxied.list_all_prompts().await.unwrap(), prompts);
    for prompt in prompts
        .iter()
        .filter(|p| {
            p.arguments
                .as_ref()
                .is_none_or(|a| a.iter().all(|a| a.required != Some(true)))
        })
        .take(2)
    {
        let params = GetPromptRequestParams::new(prompt.name.clone());
        assert_eq!(
            proxied.get_prompt(params.clone()).await.unwrap(),
            direct.get_prompt(params).await.unwrap(),
            "prompts/get {} differs",
            prompt.name
        );
    }
    direct.cancel().await.unwrap();
    proxied.cancel().await.unwrap();
}

#[tokio::test]
async fn sample_server_through_sluice_answers_like_directly() {
    same_answers(
        sample(),
        &[
            ("echo", serde_json::json!({"text": "hello"})),
            ("inventory", serde_json::json!({"count": 500})),
            ("slow_task", serde_json::json!({"seconds": 0.5})),
        ],
    )
    .await;
}

#[tokio::test]
async fn server_everything_through_sluice_answers_like_directly() {
    let big = "x".repeat(300_000);
    same_answers(
        everything(),
        &[
            ("echo", serde_json::json!({"message": "hi"})),
            ("echo", serde_json::json!({ "message": big })),
            ("get-sum", serde_json::json!({"a": 2, "b": 40})),
            (
                "get-structured-content",
                serde_json::json!({"location": "New York"}),
            ),
            ("get-tiny-image", serde_json::json!({})),
            ("get-resource-links", serde_json::json!({"count": 3})),
            (
                "trigger-long-running-operation",
                serde_json::json!({"duration": 1, "steps": 4}),
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn progress_tokens_are_mapped_back_to_the_clients_own() {
    let (client, inbox) = connect(&via_sluice(&sample())).await;
    let params = CallToolRequestParams::new("slow_task")
        .with_arguments(args(serde_json::json!({"seconds": 1})));
    let result = client.call_tool(params).await.unwrap();
    assert_eq!(first_text(&result), "done after 1 s");
    // The client's handlers run as tasks of their own: the last progress
    // may be handled after the call's answer.
    eventually(
        Duration::from_secs(5),
        "four progress notifications",
        || inbox.lock().unwrap().progress.len() >= 4,
    )
    .await;
    let progress = inbox.lock().unwrap().progress.clone();
    assert_eq!(progress.len(), 4, "{progress:?}");
    // rmcp's client numbers its tokens from 0; the same token must come back.
    let token = &progress[0].progress_token;
    assert!(progress.iter().all(|p| &p.progress_token == token));
    assert_eq!(
        progress.iter().map(|p| p.progress).collect::<Vec<_>>(),
        [1.0, 2.0, 3.0, 4.0]
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn two_upstreams_from_a_config_file_are_prefixed_and_routed() {
    let dir = TempDir::new("two-upstreams");
    let sample = sample();
    let everything = everything();
    let toml = format!(
        "[upstreams.shop]\ncommand = {:?}\nargs = {:?}\n\n[upstreams.ref]\ncommand = {:?}\nargs = {:?}\n",
        sample[0],
        &sample[1..],
        everything[0],
        &everything[1..]
    );
    let config = dir.file("sluice.toml", &toml);
    let (client, _) = connect(&via_config(&config)).await;
    let names = tool_names(&client).await;
    assert!(names.contains(&"shop__echo".to_owned()), "{names:?}");
    assert!(names.contains(&"ref__echo".to_owned()), "{names:?}");
    assert!(
        names
            .iter()
            .all(|n| n.starts_with("shop__") || n.starts_with("ref__") || n.starts_with("sluice_")),
        "{names:?}"
    );

    let shop = client
        .call_tool(
            CallToolRequestParams::new("shop__echo")
                .with_arguments(args(serde_json::json!({"text": "from shop"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&shop), "from shop");
    let reference = client
        .call_tool(
            CallToolRequestParams::new("ref__echo")
                .with_arguments(args(serde_json::json!({"message": "from ref"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&reference), "Echo: from ref");

    let unknown = client
        .call_tool(CallToolRequestParams::new("nope__echo"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unknown.contains(
            "unknown tool `nope__echo`: names are `<upstream>__<tool>` with upstream one of ref, shop; did you mean `ref__echo` or `shop__echo`?"
        ),
        "{unknown}"
    );
    // Without a prefix, or with one of no upstream: the listed tools of
    // that name.
    for (called, meant) in [
        ("slow_task", "`shop__slow_task`"),
        ("sample__inventory", "`shop__inventory`"),
    ] {
        let unknown = client
            .call_tool(CallToolRequestParams::new(called))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            unknown.contains(&format!("unknown tool `{called}`"))
                && unknown.ends_with(&format!("; did you mean {meant}?")),
            "{unknown}"
        );
    }

    // Resources are routed by URI, prompts by prefix.
    let read = client
        .read_resource(ReadResourceRequestParams::new("sample://readme"))
        .await
        .unwrap();
    assert!(format!("{read:?}").contains("hammers"));
    let prompts: Vec<String> = client
        .list_all_prompts()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert!(prompts.contains(&"shop__restock".to_owned()), "{prompts:?}");
    client.cancel().await.unwrap();
}

/// Node's `child_process` (Claude Code, Cursor, the TypeScript SDK) starts
/// a server with a Unix socket pair on each of stdin and stdout, not pipes:
/// sluice reads and writes them (without blocking, `downstream::stdio_fds`),
/// answers in order, and ends when the client shuts its side down.
#[test]
fn a_client_that_starts_sluice_with_socket_pairs_is_served() {
    use std::io::{BufRead as _, Write as _};
    use std::os::unix::net::UnixStream;
    let (mut to_sluice, sluice_in) = UnixStream::pair().unwrap();
    let (from_sluice, sluice_out) = UnixStream::pair().unwrap();
    let command = via_sluice(&sample());
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            sluice_in,
        )))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            sluice_out,
        )))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    from_sluice
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut lines = std::io::BufReader::new(from_sluice);
    let mut next = move || {
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()
    };
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"node-like","version":"1"}}}"#;
    writeln!(to_sluice, "{initialize}").unwrap();
    assert_eq!(next()["id"], 0);
    writeln!(
        to_sluice,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    // Several calls written at once are all answered.
    let mut calls = String::new();
    for id in 1..=20 {
        calls.push_str(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"call {id}"}}}}}}"#
        ));
        calls.push('\n');
    }
    to_sluice.write_all(calls.as_bytes()).unwrap();
    let mut answered: Vec<i64> = (1..=20)
        .map(|_| {
            let answer = next();
            let id = answer["id"].as_i64().unwrap();
            assert_eq!(
                answer["result"]["content"][0]["text"],
                format!("call {id}"),
                "{answer}"
            );
            id
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, (1..=20).collect::<Vec<_>>());
    // The client shuts its side down: sluice's input ended, it exits.
    to_sluice.shutdown(std::net::Shutdown::Write).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sluice still runs after its input ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// The `_meta` of a 2026-07-28 request that stands alone, with `extra`
/// members.
fn alone(version: &str, extra: &str) -> String {
    format!(
        r#"{{"io.modelcontextprotocol/protocolVersion":"{version}","io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"0"}},"io.modelcontextprotocol/clientCapabilities":{{}}{extra}}}"#
    )
}

#[tokio::test]
async fn the_lifecycle_over_stdio_is_answered_as_the_spec_says() {
    // sluice's own layer answers every message of a stdio client: the
    // lifecycle's rules are kept exactly, and each refusal says why.
    let mut raw = Raw::start(&with_upstream(&sample()));
    // Before `initialize`: a ping is answered; a request without the
    // 2026-07-28 `_meta` is refused, naming what it lacks.
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    assert_eq!(raw.response(1).await["result"], serde_json::json!({}));
    let meta = alone("2026-07-28", "");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":30,"method":"ping","params":{{"_meta":{meta}}}}}"#
    ))
    .await;
    assert_eq!(raw.response(30).await["result"], serde_json::json!({}));
    // `params` null: rmcp's model reads it, sluice's layer does not; it is
    // refused with why, never left unanswered.
    raw.send(r#"{"jsonrpc":"2.0","id":32,"method":"tools/list","params":null}"#)
        .await;
    let null = raw.response(32).await;
    assert_eq!(null["error"]["code"], -32600, "{null}");
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#)
        .await;
    let refused = raw.response(2).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("io.modelcontextprotocol/protocolVersion"),
        "{refused}"
    );
    // A version sluice does not know: -32022 with those it knows.
    let meta = alone("2099-01-01", "");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{{"_meta":{meta}}}}}"#
    ))
    .await;
    let unknown = raw.response(3).await;
    assert_eq!(unknown["error"]["code"], -32022, "{unknown}");
    assert_eq!(unknown["error"]["data"]["requested"], "2099-01-01");
    let supported = unknown["error"]["data"]["supported"].as_array().unwrap();
    assert!(supported.contains(&"2026-07-28".into()), "{unknown}");
    // An older version has no requests standing alone.
    let meta = alone("2025-11-25", "");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":31,"method":"tools/list","params":{{"_meta":{meta}}}}}"#
    ))
    .await;
    let older = raw.response(31).await;
    assert_eq!(older["error"]["code"], -32600, "{older}");
    assert!(
        older["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send `initialize` first"),
        "{older}"
    );
    // A 2026-07-28 request standing alone is served, in its era.
    let meta = alone("2026-07-28", "");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{{"_meta":{meta}}}}}"#
    ))
    .await;
    let discover = raw.response(4).await;
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    assert!(
        discover["result"]["supportedVersions"].is_array(),
        "{discover}"
    );
    // ... without the methods that era removed (but a ping before
    // `initialize`, answered whatever it says).
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"resources/subscribe","params":{{"uri":"warehouse://stock","_meta":{meta}}}}}"#
    ))
    .await;
    let gone = raw.response(6).await;
    assert_eq!(gone["error"]["code"], -32601, "{gone}");
    // `initialize` with a version sluice serves over it: agreed as asked;
    // with one it does not, its own.
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    let init = raw.response(7).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "sluice", "{init}");
    raw.initialize().await;
    // Now a session: a 2026-07-28 request standing alone has no ping.
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{{"_meta":{meta}}}}}"#
    ))
    .await;
    let gone = raw.response(5).await;
    assert_eq!(gone["error"]["code"], -32601, "{gone}");
    // Requests of the session need no `_meta`.
    raw.send(r#"{"jsonrpc":"2.0","id":8,"method":"logging/setLevel","params":{"level":"info"}}"#)
        .await;
    let set = raw.response(8).await;
    assert_eq!(set["result"], serde_json::json!({}), "{set}");
    // Tasks need the client to have declared them.
    raw.send(r#"{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"taskId":"t"}}"#)
        .await;
    let tasks = raw.response(9).await;
    assert_eq!(tasks["error"]["code"], -32021, "{tasks}");
    raw.send(r#"{"jsonrpc":"2.0","id":33,"method":"tasks/get","params":{}}"#)
        .await;
    let no_id = raw.response(33).await;
    assert_eq!(no_id["error"]["code"], -32602, "{no_id}");
    assert!(
        no_id["error"]["message"]
            .as_str()
            .unwrap()
            .contains("taskId"),
        "{no_id}"
    );
    // `subscriptions/listen` belongs to 2026-07-28.
    raw.send(r#"{"jsonrpc":"2.0","id":10,"method":"subscriptions/listen","params":{"notifications":{}}}"#)
        .await;
    assert_eq!(raw.response(10).await["error"]["code"], -32601);
    // Params that do not read, and a method nobody serves.
    raw.send(r#"{"jsonrpc":"2.0","id":11,"method":"resources/read","params":[]}"#)
        .await;
    let bad = raw.response(11).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params must be a JSON object"),
        "{bad}"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":12,"method":"no/such/method","params":{}}"#)
        .await;
    let missing = raw.response(12).await;
    assert_eq!(missing["error"]["code"], -32601, "{missing}");
    assert_eq!(
        missing["error"]["message"],
        "method not found: no/such/method"
    );
    // A session's request may name its own version in `_meta`.
    raw.send(r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"echo","arguments":{"text":"named"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#).await;
    assert_eq!(
        raw.response(14).await["result"]["content"][0]["text"],
        "named"
    );
    // And the session goes on.
    raw.send(r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}"#).await;
    assert_eq!(
        raw.response(13).await["result"]["content"][0]["text"],
        "still here"
    );
}

#[tokio::test]
async fn a_stateless_client_listens_for_changes_over_stdio_until_it_cancels() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    let meta = alone("2026-07-28", "");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":"listen","method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},"_meta":{meta}}}}}"#
    ))
    .await;
    let ack = raw.recv().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    // Cancelled: it ends without an answer, and the connection goes on.
    raw.send(
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"listen"}}"#,
    )
    .await;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"after"}},"_meta":{meta}}}}}"#
    ))
    .await;
    let next = raw.recv().await;
    assert_eq!(next["id"], 2, "nothing else came first: {next}");
    assert_eq!(next["result"]["content"][0]["text"], "after");
}

/// A progress token must be a string or a number: another is refused as
/// invalid params, saying so (it was taken as no token, and the client
/// heard no progress without knowing why), and the next call works.
#[tokio::test]
async fn a_progress_token_that_is_not_a_string_or_a_number_is_refused_with_why() {
    let mut raw = Raw::start(&with_upstream(&sample()));
    for (id, token) in [(1, "{}"), (2, "[1]"), (3, "true")] {
        let meta = alone("2026-07-28", &format!(r#","progressToken":{token}"#));
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"x"}},"_meta":{meta}}}}}"#
        ))
        .await;
        let refused = raw.response(id).await;
        assert_eq!(refused["error"]["code"], -32602, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("params._meta.progressToken is")
                && message.contains("it must be a string or a number"),
            "{refused}"
        );
    }
    // In a prompt's request too, which the front routes the same way.
    let meta = alone("2026-07-28", r#","progressToken":{}"#);
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"prompts/get","params":{{"name":"restock","_meta":{meta}}}}}"#
    ))
    .await;
    let refused = raw.response(4).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("progressToken is an object"),
        "{refused}"
    );
    for (id, token) in [(5, r#""t""#), (6, "7"), (7, "null")] {
        let meta = alone("2026-07-28", &format!(r#","progressToken":{token}"#));
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"fine"}},"_meta":{meta}}}}}"#
        ))
        .await;
        let answer = raw.response(id).await;
        assert_eq!(answer["result"]["content"][0]["text"], "fine", "{answer}");
    }
}

#[tokio::test]
async fn an_initialize_piped_before_the_input_ends_is_answered() {
    // `printf '{…initialize…}\n' | sluice -- server`: the client's input ends
    // right after it, and the answer still comes.
    let mut raw = Raw::start(&with_upstream(&sample()));
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    drop(raw.stdin.take());
    let init = raw.response(1).await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
}

/// sluice over stdio in front of `upstream`, with `[limits]
/// max_requests_in_flight = max` (its config written in `dir`).
fn with_in_flight(dir: &TempDir, upstream: &[String], max: usize) -> Raw {
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("up", upstream) + &format!("[limits]\nmax_requests_in_flight = {max}\n")),
    );
    Raw::start(&["--config".into(), config.display().to_string()])
}

/// A stdio client has at most `[limits] max_requests_in_flight` of its
/// requests answered at once: one more is refused at once, naming the key,
/// while those in flight go on; once they are answered, requests are taken
/// again. (Without the bound, a client that sent requests and never read
/// its answers made sluice hold them all: 125 MB after 16 s of 20 kB
/// echoes, growing.)
#[tokio::test]
async fn requests_past_max_in_flight_are_refused_at_once_and_the_others_answered() {
    let dir = TempDir::new("in-flight");
    let mut raw = with_in_flight(&dir, &sample(), 2);
    raw.initialize().await;
    let call = |id: u64, tool: &str, arguments: serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}})
        .to_string()
    };
    let slow = serde_json::json!({"seconds": 1.5, "quiet": true});
    raw.send(&call(10, "slow_task", slow.clone())).await;
    raw.send(&call(11, "slow_task", slow)).await;
    raw.send(&call(12, "echo", serde_json::json!({"text": "third"})))
        .await;
    // The refusal comes first: the two slow calls are still running.
    let refused = raw.recv().await;
    assert_eq!(refused["id"], 12, "{refused}");
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("already answering 2 requests")
            && message.contains("`[limits] max_requests_in_flight`"),
        "{message}"
    );
    // The two slow calls end together: their answers come in either order.
    for done in raw.responses(&[10, 11]).await {
        assert!(done["result"]["content"].is_array(), "{done}");
    }
    raw.send(&call(
        13,
        "echo",
        serde_json::json!({"text": "taken again"}),
    ))
    .await;
    let echoed = raw.response(13).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "taken again",
        "{echoed}"
    );
}

/// At `[limits] max_requests_in_flight`, the client's answer to a request
/// sluice relays (the upstream's `sampling/createMessage`) is still read:
/// the call in flight that waits for it ends, while a new request is
/// refused.
#[tokio::test]
async fn at_max_in_flight_the_clients_answers_to_sluice_are_still_read() {
    let dir = TempDir::new("in-flight-sampling");
    let mut raw = with_in_flight(&dir, &py_server(), 1);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    raw.response(1).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ask_sampling","arguments":{"prompt":"hi"}}}"#).await;
    let asked = raw.recv().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    // The one request in flight waits for the client: another is refused.
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#)
        .await;
    let refused = raw.response(3).await;
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let answer = serde_json::json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
        "role": "assistant", "model": "raw-model",
        "content": {"type": "text", "text": "sampled"}}});
    raw.send(&answer.to_string()).await;
    let done = raw.response(2).await;
    assert_eq!(
        done["result"]["content"][0]["text"], "raw-model: sampled",
        "{done}"
    );
}
