//! The relay's promises, shown with hand-written peers that keep raw bytes
//! (no SDK on either side): `tests/fixtures/raw_server.py` answers with exact
//! bytes and records every message it receives and sends;
//! `tests/clients/raw_client.py` sends exact lines and records every message
//! it receives. Both over stdio and Streamable HTTP (the server's answers
//! plain JSON or SSE).
//!
//! What sluice may change between the two ends, and nothing else:
//! - the JSON-RPC `id` of a request it forwards (each side has its own ids);
//! - the progress token: the upstream gets a token of sluice's own in a
//!   tool call's `params._meta.progressToken` (a call may go on as an
//!   operation, which reports progress; other requests get none), and the
//!   client gets its own back in `notifications/progress`;
//! - tool and prompt names, where several upstreams need a prefix (here one
//!   upstream: none);
//! - `tools/list`: each upstream tool gains `_timeout_s` (and `_fresh` when
//!   cached) in `inputSchema.properties` (made if absent) and loses
//!   `outputSchema`; sluice's own tools are listed too; merged lists are
//!   sluice's own objects around the upstreams' items (and
//!   `resources/templates/list` starts with sluice's template);
//! - the members the client's era requires (`resultType`, a read's cache
//!   hints) and a cache hit's `_meta["sluice/cache"]`;
//! - its own answers: `initialize`, errors it makes, stored answers.
//!
//! Everything else arrives as the bytes sent: a result within budget is the
//! upstream's `result` byte for byte (member order, number spellings such as
//! `1.50`, `1e2` and `-0`, escapes such as `\u00e9` and `\/`, whitespace and
//! unknown members included), and so are the params of notifications and of
//! server→client requests, and the client's answers to those.
//!
//! The peers are checked against each other directly, so that a failure
//! through sluice is sluice's.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;
use tokio::process::{Child, Command};

use crate::support::*;

/// How the client reaches sluice (or the server, directly).
#[derive(Clone, Copy, Debug)]
enum Downstream {
    Stdio,
    Http,
}

/// How the server is reached.
#[derive(Clone, Copy, Debug)]
enum Upstream {
    Stdio,
    /// Streamable HTTP, every answer a plain JSON body (except `chatty`'s,
    /// which has messages to send before it).
    HttpJson,
    /// Streamable HTTP, every answer an SSE stream.
    HttpSse,
}

/// The transports each promise is shown over.
const PATHS: [(Downstream, Upstream); 3] = [
    (Downstream::Stdio, Upstream::Stdio),
    (Downstream::Http, Upstream::HttpJson),
    (Downstream::Http, Upstream::HttpSse),
];

/// The paths whose upstream is a child process (its output read by
/// `upstream::lines`).
const STDIO_UPSTREAM: [(Downstream, Upstream); 2] = [
    (Downstream::Stdio, Upstream::Stdio),
    (Downstream::Http, Upstream::Stdio),
];

/// What both ends saw, one message per entry, as the bytes.
struct Run {
    /// What the client received, and its own markers (`#timeout ID`,
    /// `#replied MESSAGE`, `#closed`, `#http STATUS`).
    client: Vec<Vec<u8>>,
    /// What the server received.
    server_received: Vec<Vec<u8>>,
    /// What the server sent.
    server_sent: Vec<Vec<u8>>,
    /// The client's stderr and sluice's.
    stderr: String,
    /// Which path, through sluice or not: to say in failures.
    what: String,
    _dir: TempDir,
}

/// The first messages of every script: a 2025-11-25 client that can answer
/// roots and sampling requests.
const HANDSHAKE: [&str; 2] = [
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{},"sampling":{}},"clientInfo":{"name":"raw-client","version":"1.0.0"}}}"#,
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
];

/// The client's answer to the server's `roots/list`, as no encoder writes it.
const ROOTS_REPLY: &str =
    r#"{"roots":[{"uri":"file:///tmp","name":"t\u00e9","x-root":1.50}], "x-r":-0}"#;

/// A `tools/call` request, exactly.
fn tool_call(id: u32, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

/// Waits until something listens on `port` (at most 30 s).
async fn listening(port: u16) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listened on {port} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The raw server's command line over stdio, recording into `record`.
fn raw_server(record: &Path) -> Vec<String> {
    vec![
        python().display().to_string(),
        repo()
            .join("tests/fixtures/raw_server.py")
            .display()
            .to_string(),
        "--record".into(),
        record.display().to_string(),
    ]
}

/// Starts the raw server over HTTP; its URL. Killed on drop.
async fn raw_server_http(record: &Path, sse: bool) -> (Child, String) {
    let port = free_port();
    let mut command = Command::new(python());
    command
        .arg(repo().join("tests/fixtures/raw_server.py"))
        .arg("--record")
        .arg(record)
        .args(["--port", &port.to_string()]);
    if sse {
        command.arg("--sse");
    }
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    listening(port).await;
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// A client over stdio of sluice in front of the raw server over HTTP
/// (plain JSON answers), its record and config in `dir`, `extra` added to
/// the config after the upstream's URL; the server is killed on drop.
async fn via_raw_http(dir: &TempDir, extra: &str) -> (Child, Client) {
    let (server, url) = raw_server_http(&dir.0.join("record"), false).await;
    let config = dir.file(
        "sluice.toml",
        &format!("[upstreams.raw]\nurl = {url:?}\n{extra}"),
    );
    let (client, _) = connect(&via_config(&config)).await;
    (server, client)
}

/// The lines of a record file, as bytes.
fn lines(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .unwrap_or_default()
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Runs `messages` from the raw client to the raw server, through sluice
/// (with `config`, TOML put before the upstream's table) or, with `direct`,
/// to the server itself.
async fn exchange(
    label: &str,
    path: (Downstream, Upstream),
    direct: bool,
    config: &str,
    messages: &[String],
    accept: Option<&str>,
) -> Run {
    let (downstream, upstream) = path;
    let what = format!(
        "{downstream:?} client, {upstream:?} server, {}",
        if direct { "directly" } else { "through sluice" }
    );
    let dir = TempDir::new(&format!("relay-{label}-{downstream:?}-{upstream:?}"));
    let record = dir.0.join("record");
    // A script whose first request carries its own protocol version
    // (2026-07-28) needs no handshake.
    let handshake: &[&str] = match messages.first() {
        Some(first) if first.contains(r#""io.modelcontextprotocol/protocolVersion""#) => &[],
        _ => &HANDSHAKE,
    };
    let script = serde_json::json!({
        "send": handshake.iter().map(|m| (*m).to_owned()).chain(messages.iter().cloned()).collect::<Vec<_>>(),
        "replies": {"roots/list": ROOTS_REPLY},
    });
    let script = dir.file("script.json", &script.to_string());
    let out = dir.0.join("out.txt");

    // The server (an HTTP one is started here; a stdio one by its client).
    let mut _server = None;
    let upstream_table = match upstream {
        Upstream::Stdio => toml_upstream("raw", &raw_server(&record)),
        Upstream::HttpJson | Upstream::HttpSse => {
            let (child, url) =
                raw_server_http(&record, matches!(upstream, Upstream::HttpSse)).await;
            _server = Some(child);
            format!("[upstreams.raw]\nurl = {url:?}\n")
        }
    };
    let config = dir.file("sluice.toml", &format!("{config}\n{upstream_table}"));

    let mut client = Command::new(python());
    client
        .arg(repo().join("tests/clients/raw_client.py"))
        .arg("--script")
        .arg(&script)
        .arg("--out")
        .arg(&out)
        .args(["--timeout", "10"]);
    if let Some(accept) = accept {
        client.args(["--accept", accept]);
    }
    let mut _sluice = None;
    match (downstream, direct) {
        (Downstream::Stdio, true) => {
            assert!(matches!(upstream, Upstream::Stdio));
            client.arg("--").args(raw_server(&record));
        }
        (Downstream::Stdio, false) => {
            client.arg("--").args(via_config(&config));
        }
        (Downstream::Http, true) => {
            let url = upstream_url(&config);
            client.args(["--url", &url]);
        }
        (Downstream::Http, false) => {
            let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
            client.args(["--url", &sluice.url]);
            _sluice = Some(sluice);
        }
    }
    let output = tokio::time::timeout(Duration::from_secs(240), client.output())
        .await
        .expect("the raw client finishes within 240 s")
        .unwrap();
    let mut stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "raw_client.py failed: {stderr}");
    if let Some(sluice) = &_sluice {
        for line in sluice.stderr.lock().unwrap().iter() {
            stderr.push_str(line);
            stderr.push('\n');
        }
    }
    Run {
        client: lines(&out),
        server_received: lines(&record.join("received.jsonl")),
        server_sent: lines(&record.join("sent.jsonl")),
        stderr,
        what,
        _dir: dir,
    }
}

/// The upstream URL written in a config made by `exchange`.
fn upstream_url(config: &Path) -> String {
    let text = std::fs::read_to_string(config).unwrap();
    let line = text.lines().find(|l| l.starts_with("url = ")).unwrap();
    serde_json::from_str(line.trim_start_matches("url = ")).unwrap()
}

// ---------------------------------------------------------------- raw JSON

/// The members of a JSON object, in order, each value as the raw text sent.
fn members(text: &str) -> Vec<(String, &str)> {
    struct Members<'a>(Vec<(String, &'a RawValue)>);
    impl<'de> serde::Deserialize<'de> for Members<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Entries;
            impl<'de> Visitor<'de> for Entries {
                type Value = Members<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut entries = Vec::new();
                    while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                        entries.push(entry);
                    }
                    Ok(Members(entries))
                }
            }
            d.deserialize_map(Entries)
        }
    }
    let parsed: Members =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not a JSON object ({e}): {text}"));
    parsed.0.into_iter().map(|(k, v)| (k, v.get())).collect()
}

/// The raw text of member `key` of the JSON object `text`.
fn member<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    members(text)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// `text` with the value of its member `key` replaced by `value` (raw),
/// everything else as it was.
fn with_member(text: &str, key: &str, value: &str) -> String {
    let old = member(text, key).unwrap_or_else(|| panic!("no {key} in {text}"));
    let start = old.as_ptr() as usize - text.as_ptr() as usize;
    format!("{}{value}{}", &text[..start], &text[start + old.len()..])
}

/// The messages of `lines` that parse as JSON objects (invalid UTF-8 shown
/// lossily; markers skipped).
fn messages(lines: &[Vec<u8>]) -> Vec<String> {
    lines
        .iter()
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .filter(|line| line.starts_with('{'))
        .collect()
}

impl Run {
    /// The answer the client got to its request `id` (raw id text) before
    /// it stopped waiting (`#timeout ID`).
    fn answer(&self, id: &str) -> Option<String> {
        let timeout = format!("#timeout {id}");
        for line in &self.client {
            let line = String::from_utf8_lossy(line);
            if line == timeout {
                return None;
            }
            if line.starts_with('{')
                && member(&line, "method").is_none()
                && member(&line, "id") == Some(id)
            {
                return Some(line.into_owned());
            }
        }
        None
    }

    /// What the client received with `method` (notifications, requests).
    fn client_got(&self, method: &str) -> Vec<String> {
        let method = serde_json::to_string(method).unwrap();
        messages(&self.client)
            .into_iter()
            .filter(|m| member(m, "method") == Some(method.as_str()))
            .collect()
    }

    /// The `tools/call` of `tool` the server received.
    fn server_call(&self, tool: &str) -> String {
        messages(&self.server_received)
            .into_iter()
            .find(|m| {
                member(m, "method") == Some(r#""tools/call""#)
                    && member(m, "params")
                        .and_then(|p| member(p, "name"))
                        .is_some_and(|n| serde_json::from_str::<String>(n).unwrap() == tool)
            })
            .unwrap_or_else(|| panic!("{}: the server got no call of {tool}", self.what))
    }

    /// The server's answer to the request it received as `request`.
    fn server_answer(&self, request: &str) -> String {
        let id = member(request, "id").unwrap();
        messages(&self.server_sent)
            .into_iter()
            .find(|m| member(m, "method").is_none() && member(m, "id") == Some(id))
            .unwrap_or_else(|| panic!("{}: the server sent no answer to {request}", self.what))
    }

    /// What the server sent with `method`.
    fn server_sent(&self, method: &str) -> Vec<String> {
        let method = serde_json::to_string(method).unwrap();
        messages(&self.server_sent)
            .into_iter()
            .filter(|m| member(m, "method") == Some(method.as_str()))
            .collect()
    }

    /// Everything both ends saw, to explain a failure.
    fn transcript(&self) -> String {
        let show = |lines: &[Vec<u8>]| {
            lines
                .iter()
                .map(|l| {
                    let l = String::from_utf8_lossy(l);
                    let cut: String = l.chars().take(600).collect();
                    format!("    {cut}\n")
                })
                .collect::<String>()
        };
        format!(
            "{}\n  client received:\n{}  server received:\n{}  server sent:\n{}  stderr:\n{}",
            self.what,
            show(&self.client),
            show(&self.server_received),
            show(&self.server_sent),
            self.stderr
        )
    }
}

// ------------------------------------------------------------- the checks

/// The `exact` tool's result reaches the client as the bytes the server
/// sent.
fn assert_result_byte_for_byte(run: &Run) {
    let sent = run.server_answer(&run.server_call("exact"));
    let sent_result = member(&sent, "result").unwrap();
    // The server does send what an encoder would change.
    for odd in [
        "1.50",
        "1e2",
        "-0",
        r"\u00e9",
        r"\/",
        "x-trace",
        "x-block",
        "\t",
        r"\ud83d\ude00",
    ] {
        assert!(sent_result.contains(odd), "the raw server sent no {odd}");
    }
    let got = run
        .answer("3")
        .unwrap_or_else(|| panic!("no answer to the call:\n{}", run.transcript()));
    let keys: Vec<String> = members(&got).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["jsonrpc", "id", "result"], "{}", run.transcript());
    assert_eq!(
        member(&got, "result").unwrap(),
        sent_result,
        "the result changed on the way:\n{}",
        run.transcript()
    );
}

/// The upstream tools are listed with every member the server sent, as
/// sent, but for sluice's documented changes (see the module's doc).
fn assert_tools_listed_unchanged(run: &Run, via_sluice: bool) {
    let sent = run.server_answer(
        &messages(&run.server_received)
            .into_iter()
            .find(|m| member(m, "method") == Some(r#""tools/list""#))
            .expect("the server was asked for its tools"),
    );
    let got = run
        .answer("2")
        .unwrap_or_else(|| panic!("no tools/list answer:\n{}", run.transcript()));
    let sent_tools: Vec<&RawValue> =
        serde_json::from_str(member(member(&sent, "result").unwrap(), "tools").unwrap()).unwrap();
    let got_tools: Vec<&RawValue> =
        serde_json::from_str(member(member(&got, "result").unwrap(), "tools").unwrap()).unwrap();
    let name = |tool: &RawValue| -> String {
        serde_json::from_str(member(tool.get(), "name").unwrap()).unwrap()
    };
    let mut problems = Vec::new();
    for sent_tool in &sent_tools {
        let tool = name(sent_tool);
        let Some(got_tool) = got_tools.iter().find(|t| name(t) == tool) else {
            problems.push(format!("{tool} is not listed"));
            continue;
        };
        let got_members = members(got_tool.get());
        for (key, value) in members(sent_tool.get()) {
            let through = got_members.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            match (key.as_str(), through) {
                ("outputSchema", Some(_)) if via_sluice => {
                    problems.push(format!("{tool}: outputSchema is still listed"));
                }
                ("outputSchema", None) if via_sluice => {}
                ("inputSchema", Some(schema)) if via_sluice => {
                    problems.extend(schema_changes(&tool, value, schema));
                }
                (_, Some(through)) if through == value => {}
                (_, Some(through)) => {
                    problems.push(format!("{tool}.{key}: sent {value}, listed {through}"));
                }
                (_, None) => problems.push(format!("{tool}.{key} ({value}) is missing")),
            }
        }
        for (key, value) in &got_members {
            if member(sent_tool.get(), key).is_none() {
                problems.push(format!("{tool}.{key} ({value}) was added"));
            }
        }
    }
    if via_sluice {
        let listed: Vec<String> = got_tools.iter().map(|t| name(t)).collect();
        for builtin in BUILTINS {
            assert!(
                listed.iter().any(|n| n == builtin),
                "{builtin} is not listed"
            );
        }
        assert_eq!(listed.len(), sent_tools.len() + BUILTINS.len());
    } else {
        assert_eq!(got_tools.len(), sent_tools.len());
    }
    assert!(
        problems.is_empty(),
        "tools/list changed beyond sluice's documented additions:\n  {}\n{}",
        problems.join("\n  "),
        run.transcript()
    );
}

/// What changed in a tool's input schema beyond sluice's `_timeout_s` and
/// `_fresh` properties.
fn schema_changes(tool: &str, sent: &str, listed: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let listed_members = members(listed);
    for (key, value) in members(sent) {
        let through = listed_members
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v);
        match through {
            Some(_) if key == "properties" => {}
            Some(through) if through == value => {}
            Some(through) => problems.push(format!(
                "{tool}.inputSchema.{key}: sent {value}, listed {through}"
            )),
            None => problems.push(format!("{tool}.inputSchema.{key} ({value}) is missing")),
        }
    }
    for (key, value) in &listed_members {
        if key != "properties" && member(sent, key).is_none() {
            problems.push(format!("{tool}.inputSchema.{key} ({value}) was added"));
        }
    }
    let sent_properties = member(sent, "properties").map(members).unwrap_or_default();
    let listed_properties = member(listed, "properties")
        .map(members)
        .unwrap_or_default();
    for (key, value) in &sent_properties {
        match listed_properties.iter().find(|(k, _)| k == key) {
            Some((_, through)) if through == value => {}
            Some((_, through)) => problems.push(format!(
                "{tool}.inputSchema.properties.{key}: sent {value}, listed {through}"
            )),
            None => problems.push(format!("{tool}.inputSchema.properties.{key} is missing")),
        }
    }
    for (key, _) in &listed_properties {
        let sluices = key == "_timeout_s" || key == "_fresh";
        if !sluices && !sent_properties.iter().any(|(k, _)| k == key) {
            problems.push(format!("{tool}.inputSchema.properties.{key} was added"));
        }
    }
    if !listed_properties.iter().any(|(k, _)| k == "_timeout_s") {
        problems.push(format!("{tool}: no _timeout_s"));
    }
    problems
}

/// During `chatty` (called with the progress token `"p-1"`), the log and
/// progress notifications and the `roots/list` request reach the client as
/// sent (the progress token aside), and the client's answer reaches the
/// server as sent (its id aside); the call itself reaches the server as
/// sent (its id and progress token aside).
fn assert_requests_and_notifications_unchanged(run: &Run) {
    let mut problems = log_problems(run);
    problems.extend(request_problems(run));
    assert!(
        problems.is_empty(),
        "messages changed on the way:\n  {}\n{}",
        problems.join("\n  "),
        run.transcript()
    );
}

/// [`assert_requests_and_notifications_unchanged`] but for the log message.
fn assert_requests_unchanged(run: &Run) {
    let problems = request_problems(run);
    assert!(
        problems.is_empty(),
        "messages changed on the way:\n  {}\n{}",
        problems.join("\n  "),
        run.transcript()
    );
}

/// Exactly one of `method` was sent and arrived: (sent, received); or the
/// problem.
fn sent_and_arrived(
    run: &Run,
    method: &str,
    problems: &mut Vec<String>,
) -> Option<(String, String)> {
    let sent = run.server_sent(method);
    let got = run.client_got(method);
    assert_eq!(sent.len(), 1, "the server sent {method} once");
    match got.as_slice() {
        [got] => Some((sent[0].clone(), got.clone())),
        _ => {
            problems.push(format!("{method} arrived {} times", got.len()));
            None
        }
    }
}

/// How the log message changed on the way.
fn log_problems(run: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some((sent, got)) = sent_and_arrived(run, "notifications/message", &mut problems) {
        let (sent, got) = (
            member(&sent, "params").unwrap(),
            member(&got, "params").unwrap(),
        );
        if sent != got {
            problems.push(format!("the log message: sent {sent}, arrived {got}"));
        }
    }
    problems
}

/// How the progress, the server's request, the client's answer and the
/// call changed on the way.
fn request_problems(run: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    // Progress: params byte for byte, with the client's own token.
    if let Some((sent, got)) = sent_and_arrived(run, "notifications/progress", &mut problems) {
        let sent = with_member(
            member(&sent, "params").unwrap(),
            "progressToken",
            r#""p-1""#,
        );
        let got = member(&got, "params").unwrap();
        if sent != got {
            problems.push(format!(
                "progress: sent {sent} (the client's token put back), arrived {got}"
            ));
        }
    }
    // The server's request: params byte for byte; the client's answer:
    // result byte for byte.
    if let Some((sent, got)) = sent_and_arrived(run, "roots/list", &mut problems) {
        let (sent_request, got_params) = (member(&sent, "params"), member(&got, "params"));
        if sent_request != got_params {
            problems.push(format!(
                "the server's roots/list: sent params {sent_request:?}, arrived {got_params:?}"
            ));
        }
        let answer = messages(&run.server_received)
            .into_iter()
            .find(|m| member(m, "id") == member(&sent, "id") && member(m, "method").is_none());
        match answer.as_deref().map(|a| member(a, "result")) {
            Some(Some(result)) if result == ROOTS_REPLY => {}
            Some(result) => problems.push(format!(
                "the client's answer: sent result {ROOTS_REPLY}, the server got {result:?}"
            )),
            None => problems.push("the client's answer did not reach the server".into()),
        }
    }
    problems.extend(call_params_changes(run));
    if run.answer("4").is_none() {
        problems.push("chatty was not answered".into());
    }
    problems
}

/// `chatty`'s progress reaches the client as the server sent it, with the
/// client's own token put back.
fn assert_progress_unchanged(run: &Run) {
    let sent = run.server_sent("notifications/progress");
    assert_eq!(sent.len(), 1, "the server sent one progress notification");
    let got = run.client_got("notifications/progress");
    assert_eq!(got.len(), 1, "{}", run.transcript());
    let sent = with_member(
        member(&sent[0], "params").unwrap(),
        "progressToken",
        r#""p-1""#,
    );
    assert_eq!(
        member(&got[0], "params").unwrap(),
        sent,
        "progress changed on the way:\n{}",
        run.transcript()
    );
    assert!(run.answer("4").is_some(), "{}", run.transcript());
}

/// `chatty`'s params, exactly as the client sends them.
/// What changed in the `chatty` call on its way to the server, beyond its
/// id and progress token: its params must be as the client sent them.
fn call_params_changes(run: &Run) -> Vec<String> {
    let mut problems = Vec::new();
    let call = run.server_call("chatty");
    let params = member(&call, "params").unwrap();
    for (key, value) in members(CHATTY_PARAMS) {
        let through = member(params, &key);
        if key != "_meta" {
            if through != Some(value) {
                problems.push(format!(
                    "the call's {key}: sent {value}, forwarded {through:?}"
                ));
            }
            continue;
        }
        let Some(through) = through else {
            problems.push("the call's _meta was not forwarded".into());
            continue;
        };
        for (meta_key, meta_value) in members(value) {
            let forwarded = member(through, &meta_key);
            if meta_key == "progressToken" {
                if forwarded.is_none() {
                    problems.push("the call was forwarded without a progress token".into());
                }
            } else if forwarded != Some(meta_value) {
                problems.push(format!(
                    "the call's _meta.{meta_key}: sent {meta_value}, forwarded {forwarded:?}"
                ));
            }
        }
    }
    for (key, _) in members(params) {
        if member(CHATTY_PARAMS, &key).is_none() {
            problems.push(format!("the call gained {key}"));
        }
    }
    problems
}

const CHATTY_PARAMS: &str = r#"{"name":"chatty","arguments":{"note":"caf\u00e9","n":1.50},"_meta":{"progressToken":"p-1","x-client":-0}}"#;

/// The messages of the transparency scenario: tools/list (id 2), `exact`
/// (id 3), `chatty` with a progress token (id 4).
fn transparency_script() -> Vec<String> {
    vec![
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#.to_owned(),
        tool_call(3, "exact", "{}"),
        format!(r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{CHATTY_PARAMS}}}"#),
    ]
}

/// A bad answer (to call id 2) gets, within the client's 10 s, an error
/// that names what was wrong (`says`, any case), and the next call (id 3,
/// `ok`) works.
fn assert_clear_error_then_next_call_works(run: &Run, says: &[&str]) {
    let context = || run.transcript();
    let answer = run
        .answer("2")
        .unwrap_or_else(|| panic!("no answer within 10 s:\n{}", context()));
    let text = answer.to_lowercase();
    let is_error = member(&answer, "error").is_some()
        || member(&answer, "result")
            .and_then(|r| member(r, "isError"))
            .is_some_and(|e| e == "true");
    assert!(
        is_error,
        "the bad answer did not become an error:\n{}",
        context()
    );
    assert!(
        says.iter().any(|word| text.contains(&word.to_lowercase())),
        "the error does not say what was wrong (one of {says:?}): {answer}\n{}",
        context()
    );
    let next = run
        .answer("3")
        .unwrap_or_else(|| panic!("the next call got no answer:\n{}", context()));
    assert_eq!(
        member(&next, "result"),
        Some(r#"{"content":[{"type":"text","text":"ok"}]}"#),
        "{}",
        context()
    );
}

/// Runs `messages` over every path of [`PATHS`] (through sluice with
/// `config`, or `direct`) and checks each run with `check`; fails with what
/// failed on every path, not only the first.
async fn on_every_path(
    label: &str,
    direct: bool,
    config: &str,
    messages: &[String],
    check: impl Fn(&Run),
) {
    on_paths(&PATHS, label, direct, config, messages, check).await;
}

/// `check` over each of `paths`; the failures of all of them reported
/// together.
async fn on_paths(
    paths: &[(Downstream, Upstream)],
    label: &str,
    direct: bool,
    config: &str,
    messages: &[String],
    check: impl Fn(&Run),
) {
    let mut failures = Vec::new();
    for &path in paths {
        let run = exchange(label, path, direct, config, messages, None).await;
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&run))) {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("=== {}: {message}", run.what));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A bad answer to `tool` (call id 2), then a call of `ok` (id 3).
fn bad_answer_then_ok(tool: &str, arguments: &str) -> Vec<String> {
    vec![tool_call(2, tool, arguments), tool_call(3, "ok", "{}")]
}

// --------------------------------------------------------------- the tests

/// The peers themselves: directly, each promise holds (so a failure through
/// sluice is sluice's).
#[tokio::test]
async fn the_raw_peers_keep_every_byte_when_they_talk_directly() {
    on_every_path("direct", true, "", &transparency_script(), |run| {
        assert_result_byte_for_byte(run);
        assert_tools_listed_unchanged(run, false);
        assert_requests_and_notifications_unchanged(run);
    })
    .await;
}

/// The paths whose ends are both sluice's own JSON-RPC layer today: a
/// client over stdio or HTTP (its `tools/list` and `tools/call` answered by
/// `downstream::front`, `downstream::http_front` for HTTP) and any upstream.
const OWN_LAYER: [(Downstream, Upstream); 5] = [
    (Downstream::Stdio, Upstream::Stdio),
    (Downstream::Stdio, Upstream::HttpJson),
    (Downstream::Stdio, Upstream::HttpSse),
    (Downstream::Http, Upstream::HttpJson),
    (Downstream::Http, Upstream::HttpSse),
];

/// The transparency script over `paths`, its run checked by `check`.
async fn transparency(paths: &[(Downstream, Upstream)], label: &str, check: impl Fn(&Run)) {
    on_paths(paths, label, false, "", &transparency_script(), check).await;
}

#[tokio::test]
async fn a_result_within_budget_arrives_byte_for_byte() {
    transparency(&OWN_LAYER, "result", assert_result_byte_for_byte).await;
}

#[tokio::test]
async fn tools_list_keeps_execution_icons_and_unknown_fields() {
    transparency(&OWN_LAYER, "tools", |run| {
        assert_tools_listed_unchanged(run, true)
    })
    .await;
}

/// The `_meta` of a 2026-07-28 request, which carries its whole lifecycle.
const META_2026: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw-client","version":"1.0.0"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// A 2026-07-28 client (no `initialize`; over HTTP, no session) gets the
/// result as the upstream sent it, with only the `resultType` its version
/// requires put first (the upstream, of the initialize era, sent none); and
/// the tools as sent, but for sluice's documented changes.
#[tokio::test]
async fn a_2026_client_gets_the_result_as_sent_with_a_result_type() {
    let script = [
        format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{META_2026}}}}}"#),
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"exact","arguments":{{}},{META_2026}}}}}"#
        ),
    ];
    on_paths(&OWN_LAYER, "result-2026", false, "", &script, |run| {
        let sent = run.server_answer(&run.server_call("exact"));
        let sent_result = member(&sent, "result").unwrap();
        assert!(!sent_result.contains("resultType"), "{sent_result}");
        let got = run
            .answer("3")
            .unwrap_or_else(|| panic!("no answer to the call:\n{}", run.transcript()));
        let rest = sent_result.trim_start()[1..].trim_start();
        assert_eq!(
            member(&got, "result").unwrap(),
            format!(r#"{{"resultType":"complete",{rest}"#),
            "{}",
            run.transcript()
        );
        let listed = run
            .answer("2")
            .unwrap_or_else(|| panic!("no tools listed:\n{}", run.transcript()));
        let result = member(&listed, "result").unwrap();
        assert!(
            result.starts_with(
                r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":["#
            ),
            "{}",
            run.transcript()
        );
        for kept in ["x-vendor", "1.50", "1e2"] {
            assert!(result.contains(kept), "{kept} lost:\n{}", run.transcript());
        }
    })
    .await;
}

/// `_timeout_s` is sluice's: the upstream never sees it, however the
/// client spells its key (`_time\u006fut_s` is the same key), and every
/// other argument arrives as the client wrote it. Arguments without it
/// arrive byte for byte.
#[tokio::test]
async fn sluices_own_argument_never_reaches_the_upstream() {
    let script = [
        tool_call(3, "exact", r#"{"a":1.50,"_timeout_s":60}"#),
        tool_call(4, "exact", r#"{"b":"caf\u00e9","_time\u006fut_s":60}"#),
        tool_call(5, "exact", r#"{ "c" : -0 }"#),
    ];
    on_paths(&OWN_LAYER, "own-argument", false, "", &script, |run| {
        let received: Vec<String> = messages(&run.server_received)
            .into_iter()
            .filter(|m| member(m, "method") == Some(r#""tools/call""#))
            .filter_map(|m| {
                member(&m, "params")
                    .and_then(|p| member(p, "arguments"))
                    .map(str::to_owned)
            })
            .collect();
        for expected in [r#"{"a":1.50}"#, r#"{"b":"caf\u00e9"}"#, r#"{ "c" : -0 }"#] {
            assert!(
                received.iter().any(|r| r == expected),
                "the server got no call with arguments {expected}: {received:?}\n{}",
                run.transcript()
            );
        }
        assert_eq!(received.len(), 3, "{}", run.transcript());
    })
    .await;
}

/// Arguments that are not an object: an array or a string is refused with
/// an invalid-params error naming what was wrong, and never sent on; `null`
/// is a call without arguments. The next call is served.
#[tokio::test]
async fn arguments_that_are_not_an_object_get_a_clear_answer() {
    let script = [
        tool_call(3, "exact", "[1]"),
        tool_call(4, "exact", r#""x""#),
        tool_call(5, "exact", "null"),
        tool_call(6, "exact", r#"{"after":true}"#),
    ];
    on_paths(
        &OWN_LAYER,
        "non-object-arguments",
        false,
        "",
        &script,
        |run| {
            for (id, found) in [("3", "sequence"), ("4", "string")] {
                let answer = run
                    .answer(id)
                    .unwrap_or_else(|| panic!("no answer to {id}:\n{}", run.transcript()));
                let error = member(&answer, "error")
                    .unwrap_or_else(|| panic!("{id} was not refused: {answer}"));
                assert_eq!(member(error, "code"), Some("-32602"), "{answer}");
                let message = member(error, "message").unwrap();
                assert!(
                    message.contains("invalid parameters for tools/call")
                        && message.contains(found),
                    "{answer}"
                );
            }
            for id in ["5", "6"] {
                let answer = run
                    .answer(id)
                    .unwrap_or_else(|| panic!("no answer to {id}:\n{}", run.transcript()));
                assert!(member(&answer, "result").is_some(), "{answer}");
            }
            let calls: Vec<String> = messages(&run.server_received)
                .into_iter()
                .filter(|m| member(m, "method") == Some(r#""tools/call""#))
                .collect();
            assert_eq!(calls.len(), 2, "only null and the object go on: {calls:?}");
            assert!(
                calls
                    .iter()
                    .any(|c| member(member(c, "params").unwrap(), "arguments")
                        == Some(r#"{"after":true}"#)),
                "{calls:?}"
            );
        },
    )
    .await;
}

/// The client's call reaches the upstream as the client sent it: its
/// arguments (`"caf\u00e9"`, `1.50`) and its `_meta` (`-0`), but for the id
/// and sluice's own progress token.
#[tokio::test]
async fn a_calls_params_reach_the_upstream_as_the_client_sent_them() {
    transparency(&OWN_LAYER, "call-params", |run| {
        let problems = call_params_changes(run);
        assert!(
            problems.is_empty(),
            "the call changed on its way:\n  {}\n{}",
            problems.join("\n  "),
            run.transcript()
        );
    })
    .await;
}

/// A call with nothing for sluice to edit (no `_meta`, none of sluice's
/// arguments, no escape: its params are not read again on their way)
/// reaches the upstream as the very text the client sent, its spacing too,
/// with only sluice's progress token added at its end; a call sluice edits
/// (here its `_timeout_s` taken out) keeps every value's spelling.
#[tokio::test]
async fn a_call_with_nothing_to_edit_reaches_the_upstream_byte_for_byte() {
    let untouched = r#"{ "name": "exact" , "arguments": {"n": 1.50, "s": "a b", "z": -0} }"#;
    let edited = r#"{ "name": "chatty" , "arguments": {"n": 1.50, "_timeout_s": 30} }"#;
    let script = [untouched, edited].map(|params| {
        format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{params}}}"#)
    });
    let script = [
        script[0].clone(),
        script[1].replace(r#""id":2"#, r#""id":3"#),
    ];
    on_paths(&OWN_LAYER, "untouched-params", false, "", &script, |run| {
        let call = run.server_call("exact");
        let params = member(&call, "params").unwrap();
        let open = untouched.trim_end_matches('}');
        assert!(
            params.starts_with(open) && params.contains(r#""_meta":{"progressToken":"#),
            "sent {untouched}, forwarded {params}"
        );
        let call = run.server_call("chatty");
        let arguments = member(member(&call, "params").unwrap(), "arguments").unwrap();
        assert_eq!(member(arguments, "n"), Some("1.50"), "{arguments}");
        assert_eq!(member(arguments, "_timeout_s"), None, "{arguments}");
    })
    .await;
}

/// A call that repeats `name`, `arguments` or `_meta` is refused with an
/// error that names the member, and never forwarded: sluice reads the last
/// of a repeated key, and an upstream whose parser keeps the first would
/// call another tool, or with other arguments, than sluice checked and
/// cached on. The next call works.
#[tokio::test]
async fn a_call_that_repeats_its_name_or_meta_is_refused_and_never_forwarded() {
    let script = [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chatty","arguments":{"note":"first"},"name":"exact","arguments":{}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exact","arguments":{},"_meta":{"progressToken":"a"},"_meta":{"progressToken":"b"}}}"#.to_owned(),
        tool_call(4, "ok", "{}"),
    ];
    on_paths(&OWN_LAYER, "repeated-name", false, "", &script, |run| {
        for (id, member_named) in [("2", "`name`"), ("3", "`_meta`")] {
            let answer = run
                .answer(id)
                .unwrap_or_else(|| panic!("no answer to {id}:\n{}", run.transcript()));
            let error = member(&answer, "error").unwrap_or_else(|| panic!("not refused: {answer}"));
            assert!(
                error.contains("duplicate field") && error.contains(member_named),
                "{error}"
            );
        }
        let calls: Vec<String> = messages(&run.server_received)
            .into_iter()
            .filter(|m| member(m, "method") == Some(r#""tools/call""#))
            .collect();
        assert_eq!(calls.len(), 1, "only the next call is forwarded: {calls:?}");
        assert!(
            run.answer("4")
                .is_some_and(|a| member(&a, "result").is_some()),
            "{}",
            run.transcript()
        );
    })
    .await;
}

/// Each of the requests `ids` was answered with a result.
fn assert_results(run: &Run, ids: std::ops::RangeInclusive<u32>) {
    for id in ids {
        let answer = run.answer(&id.to_string()).unwrap();
        assert!(member(&answer, "result").is_some(), "{answer}");
    }
}

/// The arguments of each `tools/call` the server received, as it received
/// them.
fn forwarded_call_arguments(run: &Run) -> Vec<String> {
    messages(&run.server_received)
        .into_iter()
        .filter(|m| member(m, "method") == Some(r#""tools/call""#))
        .map(|m| {
            member(member(&m, "params").unwrap(), "arguments")
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A cached tool's call whose arguments repeat a key (at any depth) is
/// answered by the upstream every time, never from the cache nor into it:
/// the key reads the last `k`, an upstream whose parser keeps the first
/// would answer another call, and every caller of that key would get it.
/// The same call without the repeat is cached as usual.
#[tokio::test]
async fn a_call_whose_arguments_repeat_a_key_is_never_cached() {
    let config = "[upstreams.raw.tools.exact]\ncache = { ttl_s = 60 }\n";
    let script = [
        tool_call(2, "exact", r#"{"k":"first","k":"last"}"#),
        tool_call(3, "exact", r#"{"k":"first","k":"last"}"#),
        tool_call(4, "exact", r#"{"deep":{"k":1,"k":2}}"#),
        tool_call(5, "exact", r#"{"deep":{"k":1,"k":2}}"#),
        tool_call(6, "exact", r#"{"k":"last"}"#),
        tool_call(7, "exact", r#"{"k":"last"}"#),
    ];
    on_paths(
        &OWN_LAYER[..2],
        "repeated-key-cache",
        false,
        config,
        &script,
        |run| {
            let forwarded = forwarded_call_arguments(run);
            assert_eq!(
                forwarded,
                [
                    r#"{"k":"first","k":"last"}"#,
                    r#"{"k":"first","k":"last"}"#,
                    r#"{"deep":{"k":1,"k":2}}"#,
                    r#"{"deep":{"k":1,"k":2}}"#,
                    r#"{"k":"last"}"#,
                ],
                "{}",
                run.transcript()
            );
            assert_results(run, 2..=7);
        },
    )
    .await;
}

/// `[0,0,…,0]`: about `bytes` of the smallest values JSON has, the text
/// that costs a decoded tree the most for its size.
fn small_values(bytes: usize) -> String {
    format!("[{}0]", "0,".repeat(bytes / 2))
}

/// sluice's peak memory grew by `grown_kb` for `what` of `bytes`: less than
/// 24 times their size (a tree of small values costs 80 times and more).
fn assert_grew_less_than_24_times(grown_kb: usize, bytes: usize, what: &str) {
    assert!(
        grown_kb < 24 * bytes / 1024,
        "sluice's peak memory grew by {grown_kb} kB for {what} of {} kB",
        bytes / 1024
    );
}

/// A call's and a prompt's arguments are kept as text on their way
/// (`gateway::NamedParams`): 8 MB of small values reach the upstream as
/// sent, and sluice's peak memory grows by a few times their size, not by
/// the ~85 times a tree of them costs (decoded, 16 MB of them made sluice
/// hold 1.3 GB). The bound is loose (24 times) and far from either. So do
/// the arguments of a tool its upstream runs only as a task (SEP-1686),
/// whose request sluice edits to add `task`.
#[tokio::test]
async fn large_arguments_are_kept_as_text_on_their_way_to_the_upstream() {
    const BYTES: usize = 8 << 20;
    let (dir, mut raw) = raw_session("relay-large-arguments");
    raw.initialize().await;
    let pid = raw.child.id().unwrap();
    let before = peak_kb(pid);
    let values = small_values(BYTES);
    let requests = [
        (2, "tools/call", "ok", "xs"),
        (3, "prompts/get", "greet", "who"),
        // Its upstream runs it only as a task: `task` is added to the text.
        (4, "tools/call", "tasked", "xs"),
    ];
    // With numbers a tree would respell (`1.5`, `100.0`, `-0.0`).
    let arguments = |key: &str| format!(r#"{{"n":1.50,"e":1e2,"z":-0,"{key}":{values}}}"#);
    for (id, method, name, key) in requests {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"name":"{name}","arguments":{}}}}}"#,
            arguments(key)
        ))
        .await;
        let answer = raw.response_text(id).await;
        assert!(member(&answer, "result").is_some(), "{method}: {answer}");
    }
    let grown = peak_kb(pid).saturating_sub(before);
    let received = messages(&lines(&dir.0.join("record").join("received.jsonl")));
    for (_, method, name, key) in requests {
        let params = received
            .iter()
            .filter(|m| member(m, "method") == Some(format!("{method:?}").as_str()))
            .map(|m| member(m, "params").unwrap())
            .rfind(|p| member(p, "name") == Some(format!("{name:?}").as_str()))
            .unwrap_or_else(|| panic!("the server got no {method} of {name}"));
        assert!(
            member(params, "arguments") == Some(arguments(key).as_str()),
            "{method}'s arguments of {name} changed on their way"
        );
        if name == "tasked" {
            assert!(member(params, "task").is_some(), "called as a task");
        }
    }
    assert_grew_less_than_24_times(grown, BYTES, "arguments");
}

/// An upstream's log message is passed on as it sent it, its `data` never
/// decoded: 8 MB of `[0,0,…]` as a log message's data arrives byte for
/// byte, and sluice's peak memory grows by a few times its size (a tree of
/// it, and a copy of that, grew it ~195 times: 3.1 GB for 16 MB).
#[tokio::test]
async fn a_large_log_message_arrives_as_sent_and_is_never_decoded() {
    const BYTES: usize = 8 << 20;
    let (dir, mut raw) = raw_session("relay-large-log");
    raw.initialize().await;
    let pid = raw.child.id().unwrap();
    let before = peak_kb(pid);
    raw.send(&tool_call(2, "loud", r#"{"mb":8}"#)).await;
    // The log message goes to every session, the answer to the caller:
    // either may come first.
    let (mut log, mut answer) = (None, None);
    while log.is_none() || answer.is_none() {
        let line = raw.recv_text().await;
        match member(&line, "method") {
            Some(r#""notifications/message""#) => log = Some(line),
            _ if member(&line, "id") == Some("2") => answer = Some(line),
            _ => {}
        }
    }
    let grown = peak_kb(pid).saturating_sub(before);
    let answer = answer.unwrap();
    assert!(member(&answer, "result").is_some(), "{answer}");
    let sent = messages(&lines(&dir.0.join("record").join("sent.jsonl")))
        .into_iter()
        .find(|m| member(m, "method") == Some(r#""notifications/message""#))
        .expect("the server sent its log message");
    assert!(sent.len() > BYTES, "{} bytes", sent.len());
    assert!(log.unwrap() == sent, "the log message changed on its way");
    assert_grew_less_than_24_times(grown, BYTES, "a log message");
}

/// An upstream's request is passed on to the client as it sent it, its
/// params never decoded: a `roots/list` whose params hold 8 MB of `[0,0,…]`
/// reaches the client byte for byte (but for its id), the client's answer
/// reaches the upstream, and sluice's peak memory grows by a few times its
/// size.
#[tokio::test]
async fn a_large_request_of_the_upstream_reaches_the_client_as_sent() {
    const BYTES: usize = 8 << 20;
    let (dir, mut raw) = raw_session("relay-large-ask");
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    raw.response(1).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let pid = raw.child.id().unwrap();
    let before = peak_kb(pid);
    raw.send(&tool_call(2, "asks_loudly", r#"{"mb":8}"#)).await;
    let asked = loop {
        let line = raw.recv_text().await;
        if member(&line, "method") == Some(r#""roots/list""#) {
            break line;
        }
    };
    let id = member(&asked, "id").unwrap().to_owned();
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"roots":[]}}}}"#
    ))
    .await;
    let answer = raw.response_text(2).await;
    let grown = peak_kb(pid).saturating_sub(before);
    assert!(answer.contains("reply: "), "{answer}");
    let sent = messages(&lines(&dir.0.join("record").join("sent.jsonl")))
        .into_iter()
        .find(|m| member(m, "method") == Some(r#""roots/list""#))
        .expect("the server asked");
    assert!(sent.len() > BYTES, "{} bytes", sent.len());
    assert!(
        member(&asked, "params") == member(&sent, "params"),
        "the request's params changed on their way"
    );
    assert_grew_less_than_24_times(grown, BYTES, "a request's params");
}

/// A client that does not read while an upstream floods its call with
/// progress makes sluice hold a bounded number of those notifications, not
/// all of them: 3,000 progress notifications of 16 KiB (49 MB) grew
/// sluice's peak by 110 MB before the bound. The upstream is never made to
/// wait (its answer is sent while the client still reads nothing); once the
/// client reads, it gets progress up to the last one, then the answer; the
/// progress replaced by later ones is said in sluice's log; the next call
/// works.
#[tokio::test]
async fn a_client_that_does_not_read_makes_sluice_hold_a_bounded_part_of_its_calls_progress() {
    flooded_unread("relay-flood", 3000, 16).await;
}

/// The same with notifications of 8 MiB: what waits for the client is
/// bounded in bytes, not only in count (the streams' channels held 64 of
/// them whatever their size: 150 of 8 MiB grew sluice's peak by 628 MB).
#[tokio::test]
async fn a_client_that_does_not_read_makes_sluice_hold_a_bounded_part_of_its_calls_large_progress()
{
    flooded_unread("relay-flood-large", 120, 8 << 10).await;
}

/// A stdio client calls the raw server's `flood` with a progress token and
/// `count` notifications of `kb` KiB, reads nothing until the upstream
/// answered, then reads: see the tests above. (Not an operation however
/// long the flood takes on a loaded machine: an operation's client hears
/// no more progress once it has its answer.)
async fn flooded_unread(name: &str, count: usize, kb: usize) {
    let bytes = count * (kb << 10);
    let (_dir, mut raw, before, record) = logged_raw_session(name).await;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"flood","arguments":{{"count":{count},"kb":{kb},"_timeout_s":300}},"_meta":{{"progressToken":"flood"}}}}}}"#
    ))
    .await;
    upstream_answered_unread(&record).await;
    let grown = (peak_kb(raw.child.id().unwrap()) * 1024).saturating_sub(before);
    let mut progress = Vec::new();
    let answer = loop {
        let line = raw.recv_text().await;
        if member(&line, "method") == Some(r#""notifications/progress""#) {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            progress.push(message["params"]["progress"].as_u64().unwrap());
        } else if member(&line, "id") == Some("2") {
            break line;
        }
    };
    assert!(member(&answer, "result").is_some(), "{answer}");
    assert!(
        grown < bytes / 4,
        "sluice's peak grew by {grown} bytes for {bytes} of progress its client did not read"
    );
    assert!(
        progress.len() < count && progress.windows(2).all(|w| w[0] < w[1]),
        "{} progress notifications, in order: {:?}…",
        progress.len(),
        &progress[..progress.len().min(10)]
    );
    assert_eq!(
        progress.last(),
        Some(&(count as u64)),
        "the latest progress arrives"
    );
    let warning = raw.warning("did not read its notifications").await;
    assert!(
        warning.contains("progress notifications were replaced by later ones"),
        "{warning}"
    );
    raw.send(&tool_call(3, "ok", "{}")).await;
    let next = raw.response_text(3).await;
    assert!(member(&next, "result").is_some(), "{next}");
}

/// A client that cancels a call it does not read has its cancellation
/// reach the upstream at once. While one of the call's notifications waited
/// for room on the client's stream, the call was not polled: the upstream
/// heard of the cancellation only once the client read.
#[tokio::test]
async fn a_client_that_cancels_a_call_it_does_not_read_has_the_upstream_told_at_once() {
    const BYTES: u64 = 3000 * (16 << 10);
    let (_dir, mut raw, _, record) = logged_raw_session("relay-flood-cancel").await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"flood","arguments":{"count":3000,"kb":16,"sleep_s":30},"_meta":{"progressToken":"flood"}}}"#)
        .await;
    // The upstream has sent its progress, none of it read.
    let sent = record.join("sent.jsonl");
    eventually(Duration::from_secs(60), "the upstream's progress", || {
        std::fs::metadata(&sent).is_ok_and(|m| m.len() > BYTES)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#)
        .await;
    // Told well before its answer (30 s away).
    let received = record.join("received.jsonl");
    eventually(
        Duration::from_secs(10),
        "the upstream told of the cancellation",
        || tail(&received, 4096).contains("notifications/cancelled"),
    )
    .await;
    raw.send(&tool_call(3, "ok", "{}")).await;
    let next = raw.response_text(3).await;
    assert!(member(&next, "result").is_some(), "{next}");
}

/// Waits until the raw server recorded in `record` has sent its answer to
/// the last call (of `ok`'s result), with the client reading nothing, and
/// until sluice has read what the server sent.
async fn upstream_answered_unread(record: &Path) {
    let sent = record.join("sent.jsonl");
    // (Its id is sluice's own: the last line recorded is the answer.)
    let answered = r#","result":{"content":[{"type":"text","text":"ok"}]}}"#;
    eventually(
        Duration::from_secs(60),
        "the upstream's answer, unread",
        || tail(&sent, 4096).contains(answered),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// A session's client that does not read while an upstream floods it with
/// log messages makes sluice hold a bounded part of them: 1,500 log
/// messages of 256 KiB (384 MB) to a stdio client grew sluice's peak by
/// 298 MB before the session's backlog (the hub's broadcast kept every
/// event since the lagging client's last read). The upstream answers
/// unread; once the client reads, the answer comes after some of the log
/// messages, the drop is said in sluice's log, and the next call works.
#[tokio::test]
async fn a_session_that_does_not_read_makes_sluice_hold_a_bounded_part_of_its_log_messages() {
    const COUNT: usize = 1500;
    const BYTES: usize = COUNT * (256 << 10);
    let (_dir, mut raw, before, record) = logged_raw_session("relay-log-flood").await;
    raw.send(&tool_call(
        2,
        "flood",
        &format!(r#"{{"count":{COUNT},"kb":256,"log":true}}"#),
    ))
    .await;
    upstream_answered_unread(&record).await;
    let grown = (peak_kb(raw.child.id().unwrap()) * 1024).saturating_sub(before);
    let mut logs = 0;
    let answer = loop {
        let line = raw.recv_text().await;
        if member(&line, "method") == Some(r#""notifications/message""#) {
            logs += 1;
        } else if member(&line, "id") == Some("2") {
            break line;
        }
    };
    assert!(member(&answer, "result").is_some(), "{answer}");
    assert!(
        grown < BYTES / 4,
        "sluice's peak grew by {grown} bytes for {BYTES} of log messages its client did not read"
    );
    raw.warning("log messages dropped: the client does not read them")
        .await;
    raw.send(&tool_call(3, "ok", "{}")).await;
    let next = loop {
        let line = raw.recv_text().await;
        if member(&line, "method") == Some(r#""notifications/message""#) {
            logs += 1;
        } else if member(&line, "id") == Some("3") {
            break line;
        }
    };
    assert!(member(&next, "result").is_some(), "{next}");
    // The messages held came, before the answer or after it (a stdio
    // upstream's log messages name no call: they are not ordered with its
    // answer; on a loaded machine all of them came after it); the rest were
    // dropped.
    assert!(logs > 0 && logs < COUNT, "{logs} log messages came");
}

/// The last `bytes` of the file at `path` (empty if there is none yet).
fn tail(path: &Path, bytes: u64) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map_or(0, |m| m.len());
    file.seek(SeekFrom::Start(length.saturating_sub(bytes)))
        .unwrap();
    let mut text = Vec::new();
    file.read_to_end(&mut text).unwrap();
    String::from_utf8_lossy(&text).into_owned()
}

/// A log message sent during a 2026-07-28 client's call over HTTP (no
/// session: it comes on the call's stream, before the answer) arrives as
/// the upstream sent it too; it was made again from its decoding, which
/// respelled its numbers (`1.50`, `1e2`) and dropped unknown members.
#[tokio::test]
async fn a_log_message_on_a_calls_stream_arrives_as_sent() {
    let script = [format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"loud","arguments":{{"mb":0.01}},{META_2026}}}}}"#
    )];
    on_paths(
        &OWN_LAYER[3..],
        "log-on-stream",
        false,
        "",
        &script,
        |run| {
            let problems = log_problems(run);
            assert!(problems.is_empty(), "{problems:?}\n{}", run.transcript());
            let answer = run.answer("2").expect("an answer to the call");
            assert!(member(&answer, "result").is_some(), "{answer}");
        },
    )
    .await;
}

/// A log message an HTTP upstream sends on a call's response stream is
/// about that call: it reaches that call's client, on the stream that
/// carries the answer, and no other session. One upstream connection
/// serves every client: published to every session, what a tool logged
/// about one client's call (with `[auth]`, one principal's) reached the
/// others too.
#[tokio::test]
async fn a_log_message_about_a_call_reaches_that_calls_client_alone() {
    let dir = TempDir::new("relay-log-about-a-call");
    let (_server, url) = raw_server_http(&dir.0.join("record"), true).await;
    let config = dir.file("sluice.toml", &format!("[upstreams.raw]\nurl = {url:?}\n"));
    let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    let (caller, caller_inbox) = connect_http(&sluice.url).await;
    let (other, other_inbox) = connect_http(&sluice.url).await;
    let flooded = call(
        &caller,
        "flood",
        serde_json::json!({"count": 3, "kb": 0, "log": true}),
    )
    .await;
    assert_eq!(first_text(&flooded), "ok");
    eventually(
        Duration::from_secs(10),
        "the caller's 3 log messages",
        || caller_inbox.lock().unwrap().logs.len() == 3,
    )
    .await;
    let data: Vec<_> = caller_inbox
        .lock()
        .unwrap()
        .logs
        .iter()
        .map(|log| log.data.clone())
        .collect();
    assert_eq!(data, ["0 ", "1 ", "2 "]);
    // A list change is every session's, and goes after the log messages
    // through the same broadcast and the same stream: once the other
    // session has it, it would have had the log messages if they were
    // published to it.
    call(&caller, "fickle", serde_json::json!({})).await;
    eventually(
        Duration::from_secs(10),
        "the other session's tools/list_changed",
        || other_inbox.lock().unwrap().tool_list_changed > 0,
    )
    .await;
    let seen = other_inbox.lock().unwrap().logs.clone();
    assert!(seen.is_empty(), "another session's log messages: {seen:?}");
    // Its own still reach it.
    call(
        &other,
        "flood",
        serde_json::json!({"count": 1, "kb": 0, "log": true}),
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the other session's own log message",
        || other_inbox.lock().unwrap().logs.len() == 1,
    )
    .await;
}

/// With `[auth]`, what a stdio upstream logs or asks names no call (stdio
/// cannot say whose it is), and one upstream serves every principal. It
/// goes to the one principal whose calls are waiting, or to no one: a log
/// message is withheld and a server→client request refused while calls of
/// two principals wait. Before, a log message went to every session
/// (alice's reached bob), and a request to the latest caller (bob's
/// `roots/list` was asked of alice).
#[tokio::test]
async fn a_stdio_upstreams_messages_of_no_call_reach_one_principal_or_none() {
    let dir = TempDir::new("relay-whose-without-auth");
    let record = dir.0.join("record");
    let (alice_token, bob_token) = ("alice-whose-token", "bob-whose-token");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}{}",
            toml_upstream("raw", &raw_server(&record)),
            auth_tokens(&[("alice", alice_token), ("bob", bob_token)])
        ),
    );
    let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    let with_roots = || {
        let mut recorder = Recorder::default();
        recorder.capabilities.roots = Some(Default::default());
        recorder
    };
    let (alice, alice_inbox) = connect_http_as(&sluice.url, alice_token, with_roots()).await;
    let (bob, bob_inbox) = connect_http_as(&sluice.url, bob_token, with_roots()).await;
    let logs = |inbox: &std::sync::Arc<std::sync::Mutex<Inbox>>| inbox.lock().unwrap().logs.len();
    // A list change is every session's, and comes through the same
    // broadcast and stream as a log message: once both have it, they have
    // every log message published before it.
    let mut fences = 0;
    let mut fence = async || {
        fences += 1;
        call(&alice, "fickle", serde_json::json!({})).await;
        for inbox in [&alice_inbox, &bob_inbox] {
            eventually(Duration::from_secs(10), "tools/list_changed", || {
                inbox.lock().unwrap().tool_list_changed >= fences
            })
            .await;
        }
    };
    let flood = serde_json::json!({"count": 2, "kb": 0, "log": true});
    // alice alone: her calls' log messages reach her, not bob.
    assert_eq!(
        first_text(&call(&alice, "flood", flood.clone()).await),
        "ok"
    );
    fence().await;
    assert_eq!((logs(&alice_inbox), logs(&bob_inbox)), (2, 0));
    // alice's call waits upstream while bob's logs and asks: no one hears
    // the log messages, and bob's roots/list is asked of no one.
    let waiting = {
        let alice = alice.peer().clone();
        let slow = rmcp::model::CallToolRequestParams::new("flood").with_arguments(
            serde_json::json!({"count": 0, "sleep_s": 3})
                .as_object()
                .unwrap()
                .clone(),
        );
        tokio::spawn(async move { alice.call_tool(slow).await.unwrap() })
    };
    let received = record.join("received.jsonl");
    eventually(Duration::from_secs(10), "alice's call upstream", || {
        tail(&received, 4096).contains("sleep_s")
    })
    .await;
    assert_eq!(first_text(&call(&bob, "flood", flood.clone()).await), "ok");
    let asked = first_text(&call(&bob, "chatty", serde_json::json!({})).await);
    assert!(
        asked.starts_with("roots reply: ")
            && asked.contains("clients of several principals")
            && !asked.contains("\"roots\""),
        "{asked}"
    );
    assert!(!waiting.is_finished(), "alice's call waited throughout");
    waiting.await.unwrap();
    fence().await;
    assert_eq!((logs(&alice_inbox), logs(&bob_inbox)), (2, 0));
    // bob alone: his client is asked, and hears his call's log message.
    let asked = first_text(&call(&bob, "chatty", serde_json::json!({})).await);
    assert!(asked.contains(r#""result":{"roots":[]}"#), "{asked}");
    fence().await;
    assert_eq!((logs(&alice_inbox), logs(&bob_inbox)), (2, 1));
}

/// An HTTP session's client that reads its GET stream slower than an
/// upstream logs still hears that a list changed: the list change waits
/// for room on the stream (the log messages beyond the session's bound
/// are dropped, said in sluice's log). A full GET stream dropped what came,
/// and the client kept a stale list.
#[tokio::test]
async fn a_list_change_reaches_an_http_session_that_reads_its_get_stream_slowly() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = TempDir::new("relay-get-stream-full");
    let record = dir.0.join("record");
    let config = dir.file("sluice.toml", &toml_upstream("raw", &raw_server(&record)));
    let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    sluice::install_tls_provider();
    let http = reqwest::Client::new();
    let post = |body: String, session: Option<String>| {
        let mut request = http
            .post(&sluice.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        request.send()
    };
    let initialized = post(HANDSHAKE[0].to_owned(), None).await.unwrap();
    let session = initialized.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    initialized.text().await.unwrap();
    post(HANDSHAKE[1].to_owned(), Some(session.clone()))
        .await
        .unwrap();
    // The GET stream, on a socket that takes little before it is read.
    let address: std::net::SocketAddr = sluice.url["http://".len()..]
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /mcp HTTP/1.1\r\nhost: {address}\r\naccept: text/event-stream\r\n\
                 mcp-session-id: {session}\r\nmcp-protocol-version: 2025-11-25\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let head = read_head(&mut stream).await.unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // 16 MB of log messages to every session, unread; then a list change.
    let call = |id: u32, name: &str, arguments: &str| {
        post(tool_call(id, name, arguments), Some(session.clone()))
    };
    let flooded = call(2, "flood", r#"{"count":1000,"kb":16,"log":true}"#)
        .await
        .unwrap();
    assert!(flooded.text().await.unwrap().contains(r#""id":2"#));
    let changed = call(3, "fickle", "{}").await.unwrap();
    assert!(changed.text().await.unwrap().contains(r#""id":3"#));
    // Time for the change to be published while the stream is full (it
    // was dropped then); the test passes whenever it comes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Read until the list change, counting the log messages before it
    // (`carry`: the end of the last read, where a name may have been cut).
    let count = |text: &[u8], name: &[u8]| text.windows(name.len()).filter(|w| *w == name).count();
    let (mut logs, mut carry) = (0, Vec::new());
    let mut buffer = vec![0u8; 64 << 10];
    let told = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the GET stream ended before the list change");
            carry.extend_from_slice(&buffer[..n]);
            logs += count(&carry, b"notifications/message");
            if count(&carry, b"notifications/tools/list_changed") > 0 {
                return;
            }
            carry.drain(..carry.len().saturating_sub(31));
        }
    })
    .await;
    assert!(
        told.is_ok(),
        "no tools/list_changed on the GET stream within 30 s, after {logs} log messages"
    );
    assert!(logs < 1000, "{logs} log messages: none dropped?");
    let said = |line: &String| line.contains("log messages dropped: the client does not read them");
    assert!(
        sluice.stderr.lock().unwrap().iter().any(said),
        "no warning of the log messages dropped"
    );
}

/// What sluice decodes of a request is bounded before it is read: a
/// `_meta` over 64 KiB, the params of a request small by nature (here a
/// completion) over 1 MiB, and a built-in tool's arguments with over 64 KiB
/// of arrays and objects each get a clear error, reach no upstream, and
/// the next call works.
#[tokio::test]
async fn what_sluice_decodes_of_a_request_is_bounded_with_a_clear_error() {
    let meta = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"ok","arguments":{{}},"_meta":{{"x":{}}}}}}}"#,
        small_values(70 << 10)
    );
    let completion = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"completion/complete","params":{{"ref":{{"type":"ref/prompt","name":"greet"}},"argument":{{"name":"who","value":"a"}},"context":{{"arguments":{{"x":{}}}}}}}}}"#,
        small_values(2 << 20)
    );
    let script = [
        meta,
        tool_call(3, "ok", "{}"),
        completion,
        tool_call(
            5,
            "sluice_read",
            &format!(r#"{{"handle":{}}}"#, small_values(2 << 20)),
        ),
    ];
    on_paths(&OWN_LAYER, "decoded-bounds", false, "", &script, |run| {
        assert_clear_error_then_next_call_works(run, &["`_meta` is 7"]);
        let completed = run.answer("4").expect("an answer to the completion");
        assert!(
            member(&completed, "error").is_some_and(|e| e
                .contains("the params of `completion/complete` are 2097")
                && e.contains("at most 1048576")),
            "{completed}"
        );
        let read = run.answer("5").expect("an answer to sluice_read");
        assert!(
            read.contains("hold 2097") && read.contains("at most 65536 bytes of arrays"),
            "{read}"
        );
        let forwarded: Vec<String> = messages(&run.server_received)
            .into_iter()
            .filter_map(|m| member(&m, "method").map(str::to_owned))
            .filter(|m| m == r#""tools/call""# || m == r#""completion/complete""#)
            .collect();
        assert_eq!(forwarded, [r#""tools/call""#], "{}", run.transcript());
    })
    .await;
}

/// An `initialize` whose params are over 1 MiB (here its capabilities) is
/// refused with a clear error before they are read; an ordinary one then
/// makes the session.
#[tokio::test]
async fn an_initialize_too_large_to_read_is_refused_and_the_next_one_works() {
    let (_dir, mut raw) = raw_session("relay-large-initialize");
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{"experimental":{{"x":{{"y":{}}}}}}},"clientInfo":{{"name":"raw","version":"0"}}}}}}"#,
        small_values(2 << 20)
    ))
    .await;
    let refused = raw.response_text(7).await;
    assert!(
        member(&refused, "error")
            .is_some_and(|e| e.contains("the params of `initialize` are 2097")),
        "{refused}"
    );
    raw.initialize().await;
    raw.send(&tool_call(2, "ok", "{}")).await;
    let answer = raw.response_text(2).await;
    assert_eq!(
        member(&answer, "result"),
        Some(r#"{"content":[{"type":"text","text":"ok"}]}"#),
        "{answer}"
    );
}

/// A tool cached per session, called by a client of no session (a
/// 2026-07-28 request over HTTP, whose entry every such client would share)
/// is not cached, and its `_fresh` is still sluice's: the upstream never
/// sees it (it did).
#[tokio::test]
async fn a_per_session_tool_called_without_a_session_never_forwards_fresh() {
    let config = "[upstreams.raw.tools.exact]\ncache = { ttl_s = 60, per_session = true }\n";
    let script = [2, 3].map(|id| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exact","arguments":{{"k":1,"_fresh":true}},{META_2026}}}}}"#
        )
    });
    on_paths(
        &OWN_LAYER[3..],
        "per-session-fresh",
        false,
        config,
        &script,
        |run| {
            assert_eq!(
                forwarded_call_arguments(run),
                [r#"{"k":1}"#, r#"{"k":1}"#],
                "{}",
                run.transcript()
            );
            assert_results(run, 2..=3);
        },
    )
    .await;
}

/// A cached tool's call whose arguments are over 1 MiB, or hold over 64
/// KiB of arrays and objects, goes to its upstream every time (its key
/// would be those arguments, decoded and written again), without sluice's
/// `_fresh`; the same tool's calls with a long string are cached as usual.
#[tokio::test]
async fn a_call_with_arguments_too_large_to_key_is_not_cached() {
    let config = "[upstreams.raw.tools.exact]\ncache = { ttl_s = 60 }\n";
    let large = format!(r#"{{"xs":{}}}"#, small_values(1100 << 10));
    let structured = format!(r#"{{"xs":{},"_fresh":false}}"#, small_values(100 << 10));
    let long = format!(r#"{{"text":"{}"}}"#, "a".repeat(200 << 10));
    let script = [
        tool_call(2, "exact", &large),
        tool_call(3, "exact", &large),
        tool_call(4, "exact", &structured),
        tool_call(5, "exact", &structured),
        tool_call(6, "exact", &long),
        tool_call(7, "exact", &long),
    ];
    on_paths(
        &OWN_LAYER[..2],
        "large-uncached",
        false,
        config,
        &script,
        |run| {
            let forwarded: Vec<usize> = forwarded_call_arguments(run)
                .iter()
                .map(String::len)
                .collect();
            assert_eq!(
                forwarded,
                [
                    large.len(),
                    large.len(),
                    structured.len() - r#","_fresh":false"#.len(),
                    structured.len() - r#","_fresh":false"#.len(),
                    long.len(),
                ],
                "{}",
                run.transcript()
            );
            assert_results(run, 2..=7);
        },
    )
    .await;
}

#[tokio::test]
async fn progress_arrives_as_sent_with_the_clients_token() {
    transparency(&OWN_LAYER, "progress", assert_progress_unchanged).await;
}

/// The params of the routed requests of [`prompts_and_resources_script`]
/// (their members, without braces), as no encoder writes them.
const ROUTED_PARAMS: [(&str, &str); 3] = [
    (
        "prompts/get",
        r#""name":"greet","arguments":{"who":"caf\u00e9"},"x-p":1.50"#,
    ),
    ("resources/read", r#""uri":"raw://doc","x-p":1e2"#),
    (
        "completion/complete",
        r#""ref":{"type":"ref/prompt","name":"greet","x-r":-0},"argument":{"name":"who","value":"c"}"#,
    ),
];

/// Prompts, resources, templates and completions (ids 5 to 10), each
/// request's params with `meta` (a `_meta` member, or nothing).
fn prompts_and_resources_script(meta: &str) -> Vec<String> {
    let with = |params: &str| match (params.is_empty(), meta.is_empty()) {
        (true, true) => String::new(),
        (true, false) => format!(r#","params":{{{meta}}}"#),
        (false, true) => format!(r#","params":{{{params}}}"#),
        (false, false) => format!(r#","params":{{{params},{meta}}}"#),
    };
    [
        (5, "prompts/list", ""),
        (6, "prompts/get", ROUTED_PARAMS[0].1),
        (7, "resources/list", ""),
        (8, "resources/templates/list", ""),
        (9, "resources/read", ROUTED_PARAMS[1].1),
        (10, "completion/complete", ROUTED_PARAMS[2].1),
    ]
    .into_iter()
    .map(|(id, method, params)| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"{}}}"#,
            with(params)
        )
    })
    .collect()
}

impl Run {
    /// The `result` the server sent for the request of `method` it received.
    fn server_result(&self, method: &str) -> String {
        let quoted = serde_json::to_string(method).unwrap();
        let request = messages(&self.server_received)
            .into_iter()
            .find(|m| member(m, "method") == Some(quoted.as_str()))
            .unwrap_or_else(|| panic!("the server got no {method}:\n{}", self.transcript()));
        let answer = self.server_answer(&request);
        member(&answer, "result").unwrap().to_owned()
    }

    /// The `result` of the client's answer `id`.
    fn client_result(&self, id: &str) -> String {
        let answer = self
            .answer(id)
            .unwrap_or_else(|| panic!("no answer to {id}:\n{}", self.transcript()));
        member(&answer, "result")
            .unwrap_or_else(|| panic!("answer {id} is not a result:\n{}", self.transcript()))
            .to_owned()
    }
}

/// The items of a list result's `key`, each as its text.
fn list_items(result: &str, key: &str) -> Vec<String> {
    let items = member(result, key).unwrap_or_else(|| panic!("no {key} in {result}"));
    serde_json::from_str::<Vec<Box<RawValue>>>(items)
        .unwrap()
        .into_iter()
        .map(|item| item.get().to_owned())
        .collect()
}

/// The prompts, resources, templates and completions of
/// [`prompts_and_resources_script`] arrive as the server sent them: a
/// routed result whole, each listed item whole (one upstream: no prefix),
/// but for `prefix`, what the client's era requires at the head of a
/// routed result.
fn assert_prompts_and_resources_unchanged(run: &Run, legacy: bool) {
    let context = || run.transcript();
    for (id, method) in [
        ("6", "prompts/get"),
        ("9", "resources/read"),
        ("10", "completion/complete"),
    ] {
        let sent = run.server_result(method);
        // The server does send what an encoder would change.
        assert!(
            sent.contains("1.50") && sent.contains("1e2") && sent.contains("x-"),
            "{sent}"
        );
        let expected = if legacy {
            sent.clone()
        } else {
            let hints = if method == "resources/read" {
                r#""ttlMs":0,"cacheScope":"private","#
            } else {
                ""
            };
            let rest = sent.trim_start()[1..].trim_start();
            format!(r#"{{"resultType":"complete",{hints}{rest}"#)
        };
        assert_eq!(
            run.client_result(id),
            expected,
            "{method}'s result changed on the way:\n{}",
            context()
        );
    }
    // The requests reach the server as the client sent them, but for the
    // id and the `_meta` keys that describe the client (2026-07-28).
    for (method, params) in ROUTED_PARAMS {
        let quoted = serde_json::to_string(method).unwrap();
        let request = messages(&run.server_received)
            .into_iter()
            .find(|m| member(m, "method") == Some(quoted.as_str()))
            .unwrap_or_else(|| panic!("the server got no {method}:\n{}", context()));
        assert_eq!(
            member(&request, "params").unwrap(),
            format!("{{{params}}}"),
            "{method}'s params changed on the way:\n{}",
            context()
        );
    }
    for (id, method, key) in [
        ("5", "prompts/list", "prompts"),
        ("7", "resources/list", "resources"),
        ("8", "resources/templates/list", "resourceTemplates"),
    ] {
        let sent = list_items(&run.server_result(method), key);
        assert!(!sent.is_empty());
        let result = run.client_result(id);
        if !legacy {
            assert!(
                result.starts_with(r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private","#),
                "{method}: {result}"
            );
        }
        let listed = list_items(&result, key);
        for item in &sent {
            assert!(
                listed.contains(item),
                "{method}: {item} is not listed as sent:\n{}",
                context()
            );
        }
    }
}

/// Prompts, resources and completions cross sluice as the bytes sent: the
/// requests `prompts/get`, `resources/read` and `completion/complete` and
/// their results (a read's within the budget), and every item of the
/// merged lists.
#[tokio::test]
async fn prompts_resources_and_completions_arrive_as_sent() {
    let script = prompts_and_resources_script("");
    on_paths(&OWN_LAYER, "prompts", false, "", &script, |run| {
        assert_prompts_and_resources_unchanged(run, true)
    })
    .await;
}

/// Requests of the methods the front routes whose params do not read as
/// theirs get a clear JSON-RPC error each (the params' fault, said), and
/// the next request is answered as sent.
#[tokio::test]
async fn malformed_prompt_read_and_completion_requests_get_clear_errors() {
    let script = [
        r#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"completion/complete","params":{"ref":{"type":"ref/unknown"},"argument":{"name":"a","value":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":7}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"greet"}}"#,
    ]
    .map(str::to_owned);
    let paths = [(Downstream::Stdio, Upstream::Stdio)];
    on_paths(&paths, "malformed-routed", false, "", &script, |run| {
        let context = || run.transcript();
        for (id, says) in [
            ("2", "prompts/get"),
            ("3", "completion/complete"),
            ("4", "resources/read"),
        ] {
            let answer = run
                .answer(id)
                .unwrap_or_else(|| panic!("no answer to {id}:\n{}", context()));
            let error = member(&answer, "error")
                .unwrap_or_else(|| panic!("{id} is not an error: {answer}\n{}", context()));
            assert_eq!(member(error, "code"), Some("-32602"), "{answer}");
            assert!(
                error.contains(says),
                "{id} does not say which method: {answer}"
            );
        }
        // None of them went upstream: only the good `prompts/get` did.
        let sent_upstream = |method: &str| {
            let quoted = serde_json::to_string(method).unwrap();
            messages(&run.server_received)
                .iter()
                .filter(|m| member(m, "method") == Some(quoted.as_str()))
                .count()
        };
        assert_eq!(
            [
                sent_upstream("prompts/get"),
                sent_upstream("completion/complete"),
                sent_upstream("resources/read")
            ],
            [1, 0, 0],
            "{}",
            context()
        );
        assert_eq!(
            run.client_result("5"),
            run.server_result("prompts/get"),
            "{}",
            context()
        );
    })
    .await;
}

/// The same for a 2026-07-28 client: only the `resultType` (and for a
/// read, the cache hints) its version requires are added, first.
#[tokio::test]
async fn a_2026_client_gets_prompts_resources_and_completions_as_sent() {
    let script = prompts_and_resources_script(META_2026);
    on_paths(&OWN_LAYER, "prompts-2026", false, "", &script, |run| {
        assert_prompts_and_resources_unchanged(run, false)
    })
    .await;
}

/// A result within the budget is measured from its bytes and relayed as
/// them, never decoded: a content block of a kind rmcp cannot decode (a
/// later revision's, a vendor's) reaches the client as sent. Decoding it
/// failed the call with "its result could not be read".
#[tokio::test]
async fn a_result_with_a_content_block_no_sdk_knows_arrives_as_sent() {
    arrives_as_sent_then_ok("novel", "x-hologram").await;
}

/// A resource read within the budget is measured from its bytes and
/// relayed as them, never decoded, as a tool's result is: contents of a
/// kind rmcp cannot decode (neither `text` nor `blob`) reach the client as
/// sent, and the next request works. Decoding them failed the read with
/// "its result could not be read".
#[tokio::test]
async fn a_read_with_contents_no_sdk_knows_arrives_as_sent() {
    let read =
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"raw://novel"}}"#;
    answered_then_ok("novel-read", read.to_owned(), |run| {
        let sent = run.server_result("resources/read");
        assert!(sent.contains("x-hologram"), "the raw server sent {sent}");
        sent
    })
    .await;
}

/// A prompt is relayed as its bytes, never decoded: a message whose
/// content block is of a kind rmcp cannot decode reaches the client as
/// sent, and the next request works. Decoding it failed the request.
#[tokio::test]
async fn a_prompt_with_content_no_sdk_knows_arrives_as_sent() {
    let get = r#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"novel"}}"#;
    answered_then_ok("novel-prompt", get.to_owned(), |run| {
        let sent = run.server_result("prompts/get");
        assert!(sent.contains("x-hologram"), "the raw server sent {sent}");
        sent
    })
    .await;
}

/// `tool`'s result, which holds `odd`, reaches the client as the raw
/// server sent it on every path of sluice's own layer, and the next call
/// (`ok`) works.
async fn arrives_as_sent_then_ok(tool: &str, odd: &str) {
    arrives_then_ok(tool, |run| {
        let sent = run.server_answer(&run.server_call(tool));
        let sent = member(&sent, "result").unwrap().to_owned();
        assert!(sent.contains(odd), "the raw server sent {sent}");
        sent
    })
    .await;
}

/// `tool`'s result reaches the client as `expected` says on every path of
/// sluice's own layer, and the next call (`ok`) works.
async fn arrives_then_ok(tool: &str, expected: impl Fn(&Run) -> String) {
    answered_then_ok(tool, tool_call(2, tool, "{}"), expected).await;
}

/// The result of `request` (id 2) reaches the client as `expected` says on
/// every path of sluice's own layer, and the next call (`ok`) works.
async fn answered_then_ok(label: &str, request: String, expected: impl Fn(&Run) -> String) {
    let script = [request, tool_call(3, "ok", "{}")];
    on_paths(&OWN_LAYER, label, false, "", &script, |run| {
        assert_eq!(
            run.client_result("2"),
            expected(run),
            "{}",
            run.transcript()
        );
        assert_eq!(
            run.client_result("3"),
            r#"{"content":[{"type":"text","text":"ok"}]}"#,
            "{}",
            run.transcript()
        );
    })
    .await;
}

/// A tool its upstream runs only as a task (SEP-1686): sluice calls it as
/// one and polls, and its result (`tasks/result`) reaches the client as the
/// upstream sent it, but for the `_meta` key that ties it to the upstream's
/// task (decoding it dropped the unknown members and respelled numbers).
#[tokio::test]
async fn a_task_only_tools_result_arrives_as_sent_but_for_its_task() {
    arrives_then_ok("tasked", |run| {
        let sent = run.server_result("tasks/result");
        let tie = r#""io.modelcontextprotocol/related-task":{"taskId":"raw-task-1"},"#;
        assert!(sent.contains(tie), "the raw server sent {sent}");
        sent.replace(tie, "")
    })
    .await;
}

/// A cached tool's result crosses sluice as the upstream sent it: on the
/// call that fills the cache, byte for byte; on a hit (the upstream not
/// called again), every member as sent, with `_meta["sluice/cache"]` added.
#[tokio::test]
async fn a_cached_result_arrives_as_sent_and_a_hit_adds_only_its_mark() {
    cached_arrives_as_sent("exact").await;
}

/// A cached tool's result that rmcp's types cannot hold (a content block of
/// a kind no SDK knows, a lone surrogate escape) is cached as sent, not
/// decoded: the call that fills the cache and the hit both get it (decoding
/// the miss to make the entry failed that call).
#[tokio::test]
async fn a_cached_result_no_sdk_can_read_is_cached_and_arrives_as_sent() {
    cached_arrives_as_sent("novel").await;
    cached_arrives_as_sent("surrogate").await;
}

/// Calls cached `tool` twice: see [`a_cached_result_arrives_as_sent_and_a_hit_adds_only_its_mark`].
async fn cached_arrives_as_sent(tool: &str) {
    let config = format!("[upstreams.raw.tools.{tool}]\ncache = {{ ttl_s = 600 }}\n");
    let script = [tool_call(2, tool, "{}"), tool_call(3, tool, "{}")];
    on_paths(
        &OWN_LAYER,
        &format!("cache-{tool}"),
        false,
        &config,
        &script,
        |run| {
            let context = || run.transcript();
            let calls = messages(&run.server_received)
                .into_iter()
                .filter(|m| member(m, "method") == Some(r#""tools/call""#))
                .count();
            assert_eq!(calls, 1, "the hit called the upstream:\n{}", context());
            let sent = run.server_answer(&run.server_call(tool));
            let sent = member(&sent, "result").unwrap();
            assert_eq!(run.client_result("2"), sent, "{}", context());
            let hit = run.client_result("3");
            let mut got = members(&hit);
            let meta = got.pop().expect("members");
            assert_eq!(meta.0, "_meta", "{}", context());
            let mark = member(meta.1, "sluice/cache").expect("the hit's mark");
            assert_eq!(member(mark, "hit"), Some("true"), "{}", context());
            assert_eq!(got, members(sent), "{}", context());
        },
    )
    .await;
}

/// A stdio client, any upstream: log messages, and the requests the server
/// asks the client (`roots/list`) with the client's answers, cross sluice
/// as the bytes sent (`downstream::link`).
#[tokio::test]
async fn server_to_client_requests_and_notifications_arrive_unchanged() {
    transparency(
        &OWN_LAYER[..3],
        "requests",
        assert_requests_and_notifications_unchanged,
    )
    .await;
}

/// An HTTP session's client: the server's request goes on the stream of the
/// call that caused it, and the client's answer (a POST) reaches the server
/// as sent.
#[tokio::test]
async fn server_to_client_requests_arrive_unchanged_over_http() {
    transparency(&OWN_LAYER[3..], "requests-http", assert_requests_unchanged).await;
}

/// An HTTP session's client: a log message arrives as the upstream sent it,
/// on the session's GET stream (`http_endpoint`'s).
#[tokio::test]
async fn log_messages_arrive_unchanged_over_http() {
    transparency(&OWN_LAYER[3..], "log-http", |run| {
        let problems = log_problems(run);
        assert!(
            problems.is_empty(),
            "{}\n{}",
            problems.join("\n"),
            run.transcript()
        );
    })
    .await;
}

/// A text with a lone UTF-16 surrogate escape (`\ud800`, which
/// JavaScript's `JSON.stringify` writes for half a pair) is valid JSON that
/// no Rust string holds: measured from its bytes, it reaches the client as
/// sent (decoding it failed the call), and the next call works.
#[tokio::test]
async fn a_result_with_a_lone_surrogate_arrives_as_sent() {
    arrives_as_sent_then_ok("surrogate", r"\ud800").await;
}

#[tokio::test]
async fn an_answer_with_invalid_utf8_gets_a_clear_error_and_the_next_call_works() {
    on_every_path(
        "utf8",
        false,
        "",
        &bad_answer_then_ok("bad_utf8", "{}"),
        |run| {
            assert_clear_error_then_next_call_works(run, &["UTF-8", "utf8"]);
        },
    )
    .await;
}

#[tokio::test]
async fn an_answer_nested_200_deep_gets_a_clear_error_and_the_next_call_works() {
    let messages = bad_answer_then_ok("deep", r#"{"depth":200}"#);
    on_every_path("deep", false, "", &messages, |run| {
        assert_clear_error_then_next_call_works(run, &["nest", "deep", "depth"]);
    })
    .await;
}

/// A result that is valid JSON but not a tool's (a block without its
/// `type`): neither read from its bytes nor decoded, it fails its call with
/// an error that says so, cached or not (nothing is cached), and the next
/// call works.
#[tokio::test]
async fn a_result_that_is_not_a_tools_gets_a_clear_error_and_the_next_call_works() {
    let messages = bad_answer_then_ok("untyped", "{}");
    for config in [
        "",
        "[upstreams.raw.tools.untyped]\ncache = { ttl_s = 600 }\n",
    ] {
        on_paths(&OWN_LAYER, "untyped", false, config, &messages, |run| {
            assert_clear_error_then_next_call_works(run, &["could not be read"]);
        })
        .await;
    }
}

/// An error that names no request (`"id":null`: the server could not read
/// the request's id) answers the call it came for: over HTTP the request
/// whose response it is, over stdio the one call waiting. It was dropped
/// with a warning, and the call waited for its timeout (30 s here), then
/// went on as an operation that never ended.
#[tokio::test]
async fn an_error_that_names_no_request_answers_the_call_it_came_for() {
    let paths = [&PATHS[..], &STDIO_UPSTREAM[1..]].concat();
    let messages = bad_answer_then_ok("nameless", r#"{"_timeout_s":30}"#);
    on_paths(&paths, "nameless", false, "", &messages, |run| {
        assert_clear_error_then_next_call_works(run, &["could not read this request"]);
    })
    .await;
}

/// A progress notification that comes after its request's answer (a
/// server whose last progress races its response on the wire) is not
/// passed on: Claude Code drops a stdio server's connection on progress for
/// a token it no longer knows (anthropics/claude-code#47765, #64475), and
/// the call in flight with it. Directly, the client gets it after the
/// answer.
#[tokio::test]
async fn progress_after_its_answer_is_not_passed_on() {
    let messages = vec![
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"late_progress","arguments":{},"_meta":{"progressToken":"late-1"}}}"#.to_owned(),
        // Answered after the late progress came (directly).
        tool_call(3, "novel", r#"{"sleep_s":0.5}"#),
    ];
    // The progress notifications the client got after the answer to 2.
    let after_answer = |run: &Run| -> Vec<String> {
        let answered = run.client.iter().position(|line| {
            let line = String::from_utf8_lossy(line);
            member(&line, "id") == Some("2") && member(&line, "method").is_none()
        });
        let answered = answered.unwrap_or_else(|| panic!("no answer to 2:\n{}", run.transcript()));
        run.client[answered..]
            .iter()
            .map(|line| String::from_utf8_lossy(line).into_owned())
            .filter(|line| member(line, "method") == Some(r#""notifications/progress""#))
            .collect()
    };
    on_paths(
        &STDIO_UPSTREAM[..1],
        "late-progress",
        true,
        "",
        &messages,
        |run| {
            assert_eq!(after_answer(run).len(), 1, "{}", run.transcript());
        },
    )
    .await;
    on_paths(
        &STDIO_UPSTREAM,
        "late-progress",
        false,
        "",
        &messages,
        |run| {
            let late = after_answer(run);
            assert!(late.is_empty(), "{late:?}\n{}", run.transcript());
            let sent = run.server_sent.iter().any(|line| {
                member(&String::from_utf8_lossy(line), "method")
                    == Some(r#""notifications/progress""#)
            });
            assert!(
                sent,
                "the server sent no late progress:\n{}",
                run.transcript()
            );
            assert!(run.answer("3").is_some(), "{}", run.transcript());
        },
    )
    .await;
}

#[tokio::test]
async fn an_answer_over_max_message_mb_gets_a_clear_error_and_the_next_call_works() {
    let config = "[limits]\nmax_message_mb = 1\n";
    let messages = bad_answer_then_ok("huge", r#"{"mb":2}"#);
    on_every_path("max-message", false, config, &messages, |run| {
        assert_clear_error_then_next_call_works(run, &["max_message_mb"]);
    })
    .await;
}

/// From a child process, an answer that is not UTF-8, one nested 200 deep
/// and one over `[limits] max_message_mb` each fail their call at once with
/// an error that says what was wrong, and the next call works.
#[tokio::test]
async fn a_stdio_upstreams_unreadable_answers_get_clear_errors_and_the_next_call_works() {
    on_paths(
        &STDIO_UPSTREAM,
        "utf8-stdio",
        false,
        "",
        &bad_answer_then_ok("bad_utf8", "{}"),
        |run| assert_clear_error_then_next_call_works(run, &["UTF-8"]),
    )
    .await;
    on_paths(
        &STDIO_UPSTREAM,
        "deep-stdio",
        false,
        "",
        &bad_answer_then_ok("deep", r#"{"depth":200}"#),
        |run| assert_clear_error_then_next_call_works(run, &["levels deep"]),
    )
    .await;
    on_paths(
        &STDIO_UPSTREAM,
        "max-message-stdio",
        false,
        "[limits]\nmax_message_mb = 1\n",
        &bad_answer_then_ok("huge", r#"{"mb":2}"#),
        |run| assert_clear_error_then_next_call_works(run, &["max_message_mb"]),
    )
    .await;
}

/// A large plain-JSON answer (one HTTP body, no SSE) from an HTTP upstream
/// is stored whole: its first page holds the first records, and the stored
/// document ends with the last.
async fn plain_json_answer_is_stored_and_paged(mb: u32) {
    let dir = TempDir::new(&format!("relay-stored-{mb}"));
    let (_server, client) = via_raw_http(&dir, "").await;
    let result = call(
        &client,
        "huge",
        // A loaded machine may take more than the default 10 s to make and
        // send it: the test is about storing, not about operations.
        serde_json::json!({"mb": mb, "form": "json", "_timeout_s": 300}),
    )
    .await;
    let handle = stored_handle(&result);
    let stored = meta(&result, "sluice/stored").unwrap();
    assert!(
        stored["bytes"].as_u64().unwrap() >= u64::from(mb) << 20,
        "{stored}"
    );
    let page = call(
        &client,
        "sluice_read",
        serde_json::json!({"handle": handle}),
    )
    .await;
    assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
    let items: Vec<serde_json::Value> = serde_json::from_str(&first_text(&page)).unwrap();
    assert_eq!(items[0], serde_json::json!({"i": 0, "pad": "p".repeat(40)}));
    let count = query_number(&client, &handle, "length").await;
    assert!(count > u64::from(mb) * 10_000, "only {count} records");
    assert_eq!(query_number(&client, &handle, ".[-1].i").await, count - 1);
    client.cancel().await.unwrap();
}

/// A result over the budget goes to the store from its bytes, never
/// decoded: its content blocks are stored as sent, a kind no SDK knows
/// included, and read back. Decoding it failed the call.
#[tokio::test]
async fn a_large_result_with_a_content_block_no_sdk_knows_is_stored_as_sent() {
    let dir = TempDir::new("relay-stored-novel");
    let (_server, client) = via_raw_http(&dir, "").await;
    let result = call(&client, "novel", serde_json::json!({"kb": 200})).await;
    assert_ne!(result.is_error, Some(true), "{}", first_text(&result));
    let handle = stored_handle(&result);
    let query = |filter| query_text(&client, &handle, filter);
    assert_eq!(
        query("[.[] | .type]").await,
        r#"["x-hologram","text","text"]"#
    );
    assert_eq!(query(".[0].uri").await, r#""holo://1""#);
    assert_eq!(query(".[2].text | length").await, (200 * 1024).to_string());
    client.cancel().await.unwrap();
}

/// A resource read over the budget goes to the store from its bytes, never
/// decoded, as a tool's result does: its contents are stored as sent, a
/// kind no SDK knows included, and read back. Decoding them failed the
/// read.
#[tokio::test]
async fn a_large_read_with_contents_no_sdk_knows_is_stored_as_sent() {
    let dir = TempDir::new("relay-stored-novel-read");
    let (_server, client) = via_raw_http(&dir, "").await;
    let uri = "raw://novel/200";
    let read = client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let rmcp::model::ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("the stored answer is a text: {read:?}");
    };
    assert!(
        text.starts_with(&format!("resources/read {uri} returned ")),
        "{text}"
    );
    let stored = &read.meta.as_ref().unwrap().0["sluice/stored"];
    let handle = stored["handle"].as_str().unwrap().to_owned();
    let query = |filter| query_text(&client, &handle, filter);
    assert_eq!(
        query("[.[] | .uri]").await,
        r#"["raw://novel","raw://novel#2"]"#
    );
    assert_eq!(query(".[1] | keys").await, r#"["uri","x-hologram"]"#);
    assert_eq!(query(".[0].text | length").await, (200 * 1024).to_string());
    client.cancel().await.unwrap();
}

/// The same result from a cached tool: the call that fills the entry
/// stores it from its bytes (decoding it to make the entry failed the
/// call), and the hit gets the same stored answer while its handle lives.
#[tokio::test]
async fn a_large_cached_result_no_sdk_can_read_is_stored_as_sent_once() {
    let dir = TempDir::new("relay-stored-novel-cached");
    let (_server, client) = via_raw_http(
        &dir,
        "[upstreams.raw.tools.novel]\ncache = { ttl_s = 600 }\n",
    )
    .await;
    let args = serde_json::json!({"kb": 200});
    let first = call(&client, "novel", args.clone()).await;
    assert_ne!(first.is_error, Some(true), "{}", first_text(&first));
    let handle = stored_handle(&first);
    let hit = call(&client, "novel", args).await;
    assert_eq!(stored_handle(&hit), handle, "{}", first_text(&hit));
    let mark = hit
        .meta
        .as_ref()
        .and_then(|m| m.get("sluice/cache"))
        .unwrap_or_else(|| panic!("the hit is not marked: {:?}", hit.meta));
    assert_eq!(mark["hit"], true);
    assert_eq!(
        query_text(&client, &handle, "[.[] | .type]").await,
        r#"["x-hologram","text","text"]"#
    );
    client.cancel().await.unwrap();
}

/// A raw stdio session with sluice in front of the raw server, which
/// records what it sends in `DIR/record`.
fn raw_session(name: &str) -> (TempDir, Raw) {
    let dir = TempDir::new(name);
    let record = dir.0.join("record");
    let config = dir.file("sluice.toml", &toml_upstream("raw", &raw_server(&record)));
    let raw = Raw::start(&["--config".to_owned(), config.display().to_string()]);
    (dir, raw)
}

/// A list item no SDK can read (a hand-written server's slip: a member of
/// the wrong type) is left out of the list with a warning that names it
/// and says why, and the upstream's other items are listed, as sent. Read
/// whole, such an item lost the upstream's whole list (every tool gone).
#[tokio::test]
async fn an_item_no_sdk_can_read_is_left_out_of_its_list_and_the_others_are_listed() {
    let dir = TempDir::new("relay-slips");
    let mut server = raw_server(&dir.0.join("record"));
    server.push("--slips".to_owned());
    let config = dir.file("sluice.toml", &toml_upstream("raw", &server));
    let mut raw = Raw::start_logged(&["--config".to_owned(), config.display().to_string()]);
    raw.initialize().await;
    for (id, method, key, listed) in [
        (2, "tools/list", "tools", r#""name":"exact""#),
        (3, "prompts/list", "prompts", r#""name":"greet""#),
        (4, "resources/list", "resources", r#""uri":"raw://doc""#),
        (
            5,
            "resources/templates/list",
            "resourceTemplates",
            r#""uriTemplate":"raw://item/{id}""#,
        ),
    ] {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#
        ))
        .await;
        let answer = raw.response_text(id).await;
        let items = member(member(&answer, "result").unwrap(), key)
            .unwrap_or_else(|| panic!("{method}: {answer}"));
        assert!(
            items.contains(listed),
            "{method} lost the good items: {items}"
        );
        assert!(
            !items.contains("slipped"),
            "{method} lists the slip: {items}"
        );
    }
    // Each list's slip is named, and why it cannot be read said.
    let mut unsaid = vec!["tools", "prompts", "resources", "resourceTemplates"];
    while !unsaid.is_empty() {
        let warning = raw.warning("left out of the list of ").await;
        assert!(
            warning.contains("`slipped`, which sluice cannot read (")
                && ["invalid type", "missing field"]
                    .iter()
                    .any(|why| warning.contains(why)),
            "{warning}"
        );
        unsaid.retain(|key| !warning.contains(&format!("the list of {key}:")));
    }
    // Once per item, not at every listing: listed again, then a warning
    // of another kind (an answer that is not UTF-8), and no slip between.
    for (id, method) in [(7, "tools/list"), (8, "prompts/list")] {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}"}}"#
        ))
        .await;
        raw.response_text(id).await;
    }
    raw.send(&tool_call(9, "bad_utf8", "{}")).await;
    raw.response_text(9).await;
    let since = raw.warnings_until("refused").await;
    let again: Vec<&String> = since.iter().filter(|l| l.contains("left out of")).collect();
    assert!(again.is_empty(), "said again: {again:?}");
    raw.send(&tool_call(6, "ok", "{}")).await;
    assert_eq!(
        member(&raw.response_text(6).await, "result"),
        Some(r#"{"content":[{"type":"text","text":"ok"}]}"#)
    );
}

/// [`raw_session`] with sluice's warnings kept, initialized; its peak
/// memory then, in bytes; and where the raw server records.
async fn logged_raw_session(name: &str) -> (TempDir, Raw, usize, std::path::PathBuf) {
    let dir = TempDir::new(name);
    let record = dir.0.join("record");
    let config = dir.file("sluice.toml", &toml_upstream("raw", &raw_server(&record)));
    let mut raw = Raw::start_logged(&["--config".to_owned(), config.display().to_string()]);
    raw.initialize().await;
    let before = peak_kb(raw.child.id().unwrap()) * 1024;
    (dir, raw, before, record)
}

/// A 2026-07-28 upstream gets a call's params as the client sent them too
/// (they went through rmcp's typed model before, which respelled `1.50`
/// and dropped unknown members): only `_meta` gains what sluice sets, the
/// client context of sluice's own connection and the client's log level.
#[tokio::test]
async fn a_2026_upstream_gets_a_calls_params_as_the_client_sent_them() {
    let dir = TempDir::new("relay-2026-params");
    let record = dir.0.join("record");
    let mut server = raw_server(&record);
    server.extend(["--era".to_owned(), "2026".to_owned()]);
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}protocol = \"2026-07-28\"\n",
            toml_upstream("raw", &server)
        ),
    );
    let mut raw = Raw::start(&["--config".to_owned(), config.display().to_string()]);
    raw.initialize().await;
    // The client's log level travels with each request in this era.
    raw.send(
        r#"{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{"level":"warning"}}"#,
    )
    .await;
    let set = raw.response_text(9).await;
    assert!(member(&set, "result").is_some(), "{set}");
    let params = r#"{"name":"ok","arguments":{"n":1.50,"s":"caf\u00e9","z":-0},"x-p":1e2,"_meta":{"x-client":{"k":1.50}}}"#;
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{params}}}"#
    ))
    .await;
    let answer = raw.response_text(2).await;
    assert!(member(&answer, "result").is_some(), "{answer}");
    let received = lines(&record.join("received.jsonl"));
    let call = messages(&received)
        .into_iter()
        .find(|m| member(m, "method") == Some(r#""tools/call""#))
        .unwrap_or_else(|| panic!("the server got no call: {answer} {:?}", messages(&received)));
    let forwarded = member(&call, "params").unwrap();
    for (key, value) in members(params) {
        if key != "_meta" {
            assert_eq!(member(forwarded, &key), Some(value), "{key}: {call}");
        }
    }
    let meta = member(forwarded, "_meta").unwrap();
    assert_eq!(member(meta, "x-client"), Some(r#"{"k":1.50}"#), "{call}");
    assert_eq!(
        member(meta, "io.modelcontextprotocol/protocolVersion"),
        Some(r#""2026-07-28""#),
        "{call}"
    );
    assert!(
        member(meta, "io.modelcontextprotocol/clientInfo").is_some_and(|i| i.contains("sluice")),
        "sluice's own client context: {call}"
    );
    assert_eq!(
        member(meta, "io.modelcontextprotocol/logLevel"),
        Some(r#""warning""#),
        "{call}"
    );
}

/// The raw server's answer to the `novel` call of [`raw_session`], as sent.
fn novel_answer(dir: &TempDir) -> String {
    messages(&lines(&dir.0.join("record").join("sent.jsonl")))
        .into_iter()
        .find(|m| member(m, "id").is_some_and(|id| id != "1") && m.contains("x-hologram"))
        .expect("the server's answer")
}

/// A call that outlives its timeout keeps its upstream's result as the
/// bytes sent: `sluice_result` answers with them, only the operation's
/// `_meta` added, a content block no SDK knows included (decoding it failed
/// the operation: "its result could not be read").
#[tokio::test]
async fn an_operations_result_arrives_as_sent() {
    let (dir, mut raw) = raw_session("relay-operation-novel");
    raw.initialize().await;
    raw.send(&tool_call(2, "novel", r#"{"sleep_s":1,"_timeout_s":0.2}"#))
        .await;
    let started = raw.response_text(2).await;
    let result = member(&started, "result").expect("an answer");
    let meta: serde_json::Value = serde_json::from_str(member(result, "_meta").unwrap()).unwrap();
    let operation = meta["sluice/operation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("not an operation: {started}"))
        .to_owned();
    let collect = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"sluice_result","arguments":{{"operation":"{operation}","wait_s":30}}}}}}"#
    );
    raw.send(&collect).await;
    let collected = raw.response_text(3).await;
    let got = member(&collected, "result").unwrap();
    let sent = novel_answer(&dir);
    let sent = member(&sent, "result").unwrap();
    let mut got = members(got);
    let meta = got.pop().expect("members");
    assert_eq!(meta.0, "_meta", "{collected}");
    assert!(member(meta.1, "sluice/operation").is_some(), "{collected}");
    assert_eq!(got, members(sent), "{collected}");
}

/// The same, for a client that declared tasks: its `tasks/get` carries
/// the call's result as the upstream sent it, in place of the task's
/// `result` (rmcp's model, which wrote it before, dropped the block it does
/// not know and respelled the numbers).
#[tokio::test]
async fn a_tasks_result_arrives_as_sent() {
    let (dir, mut raw) = raw_session("relay-task-novel");
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    raw.response(1).await;
    raw.send(&tool_call(2, "novel", r#"{"sleep_s":1,"_timeout_s":0.2}"#))
        .await;
    let started = raw.response(2).await;
    let task = started["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {started}"))
        .to_owned();
    let get = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tasks/get","params":{{"taskId":"{task}"}}}}"#
        )
    };
    let mut id = 3;
    let answer = loop {
        raw.send(&get(id)).await;
        let answer = raw.response_text(id).await;
        let status: serde_json::Value = serde_json::from_str(&answer).unwrap();
        match status["result"]["status"].as_str() {
            Some("working") => {}
            Some("completed") => break answer,
            _ => panic!("the task did not complete: {answer}"),
        }
        assert!(id < 60, "still working after {id} polls");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        id += 1;
    };
    let got = member(member(&answer, "result").unwrap(), "result").expect("the call's result");
    let sent = novel_answer(&dir);
    let sent = member(&sent, "result").unwrap();
    assert_eq!(got, sent, "the call's result, as sent: {answer}");
}

/// What `filter` makes of a stored result, as compact JSON text.
async fn query_text(client: &Client, handle: &str, filter: &str) -> String {
    let answer = call(
        client,
        "sluice_query",
        serde_json::json!({"handle": handle, "filter": filter}),
    )
    .await;
    assert_ne!(answer.is_error, Some(true), "{}", first_text(&answer));
    first_text(&answer).trim().to_owned()
}

/// The number `filter` makes of a stored result.
async fn query_number(client: &Client, handle: &str, filter: &str) -> u64 {
    let text = query_text(client, handle, filter).await;
    text.parse()
        .unwrap_or_else(|_| panic!("{filter} made {text}"))
}

#[tokio::test]
async fn a_2_mb_plain_json_answer_from_an_http_upstream_is_stored_and_paged() {
    plain_json_answer_is_stored_and_paged(2).await;
}

#[tokio::test]
async fn a_40_mb_plain_json_answer_from_an_http_upstream_is_stored_and_paged() {
    plain_json_answer_is_stored_and_paged(40).await;
}

/// sluice asks an upstream for progress only where it listens: a list
/// request reaches the upstream without a progress token (the SDK sluice
/// used before added one to every request); a tool call, which may go on
/// as an operation that reports its progress, carries a token of sluice's
/// own, never the client's, and the progress comes back to the client under
/// the client's token.
#[tokio::test]
async fn an_upstream_is_asked_for_progress_only_where_sluice_listens() {
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    let listening = r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"chatty","arguments":{},"_meta":{"progressToken":"client-token"}}}"#;
    on_paths(
        &PATHS,
        "progress-token",
        false,
        "",
        &[list.to_owned(), listening.to_owned()],
        |run| {
            let lists: Vec<String> = messages(&run.server_received)
                .into_iter()
                .filter(|m| member(m, "method") == Some(r#""tools/list""#))
                .collect();
            assert!(!lists.is_empty(), "{}", run.transcript());
            for list in lists {
                let meta = member(&list, "params").and_then(|p| member(p, "_meta"));
                assert!(
                    meta.is_none_or(|m| member(m, "progressToken").is_none()),
                    "{}: a list request asked for progress: {list}",
                    run.what
                );
            }
            let chatty = run.server_call("chatty");
            let token = member(&chatty, "params")
                .and_then(|p| member(p, "_meta"))
                .and_then(|m| member(m, "progressToken"))
                .unwrap_or_else(|| panic!("{}: no progress token upstream: {chatty}", run.what));
            assert_ne!(
                token, r#""client-token""#,
                "{}: the client's token went upstream",
                run.what
            );
            let progress = run.client_got("notifications/progress");
            assert!(!progress.is_empty(), "{}", run.transcript());
            for notification in progress {
                let token =
                    member(&notification, "params").and_then(|p| member(p, "progressToken"));
                assert_eq!(token, Some(r#""client-token""#), "{}", run.transcript());
            }
            assert!(run.answer("4").is_some(), "{}", run.transcript());
        },
    )
    .await;
}

/// An upstream that answers with an id sluice never sent is told apart
/// from a late answer and named in a warning, which says what the server
/// must do, and the session goes on. (It was dropped with a debug line
/// only: a user saw a call that never ended and no reason.) Another number
/// is dropped; the request's own number sent back as a string is taken as
/// its answer (it can be no other's), with a warning. A request of the
/// upstream's with an id MCP does not allow is refused saying so (it was
/// "sluice cannot forward roots/list requests").
#[tokio::test]
async fn an_answer_to_a_request_never_sent_is_named_in_a_warning() {
    let dir = TempDir::new("relay-misnumbered");
    let record = dir.0.join("record");
    let config = dir.file("sluice.toml", &toml_upstream("raw", &raw_server(&record)));
    let mut raw = Raw::start_logged(&["--config".to_owned(), config.display().to_string()]);
    raw.initialize().await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"misnumbered","arguments":{"_timeout_s":1}}}"#).await;
    let number = raw.warning("which sluice never sent").await;
    assert!(
        number.contains("the upstream answered request 10") && number.contains("raw"),
        "{number}"
    );
    // The same id as a string can only be the request's: its answer, said
    // in a warning (it was dropped, and the call became an operation that
    // never ended).
    let string = raw.warning("written another way").await;
    assert!(
        string.contains(r#"with the id ""#)
            && string.contains("taken as its answer")
            && string.contains("exactly as sent (a number as a number)"),
        "{string}"
    );
    let answer = raw.response(2).await;
    assert_eq!(answer["result"]["content"][0]["text"], "ok", "{answer}");
    // A request of the upstream's whose id is not MCP's is answered so,
    // not as a method sluice cannot forward.
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"oddly_asked","arguments":{}}}"#).await;
    let asked = raw.response(3).await;
    let reply = asked["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        reply.contains(r#""id":1.5"#)
            && reply.contains("-32600")
            && reply.contains("the request's id 1.5 is not a string or an integer"),
        "{asked}"
    );
    raw.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ok","arguments":{}}}"#,
    )
    .await;
    let ok = raw.response(4).await;
    assert_eq!(ok["result"]["content"][0]["text"], "ok", "{ok}");
}

/// An upstream's request with the id of one of its requests sluice is
/// still answering is refused at once, and the first is answered: the
/// second took the first's place, and whichever ended first removed the
/// other's, so one of the two was never answered and its upstream waited.
#[tokio::test]
async fn an_upstreams_request_id_in_use_is_refused_and_the_first_answered() {
    let (_dir, mut raw) = raw_session("relay-asks-twice");
    raw.initialize().await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"asks_twice","arguments":{}}}"#).await;
    let answer = raw.response(2).await;
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    let answers: Vec<serde_json::Value> = text
        .split(" | ")
        .map(|a| serde_json::from_str(a).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{answer}");
    // The client declared no roots: the first is answered so.
    assert!(
        answers.iter().any(|a| a["error"]["code"] == -32601
            && a["error"]["message"].as_str().unwrap().contains("roots")),
        "{answer}"
    );
    assert!(
        answers.iter().any(|a| a["error"]["code"] == -32600
            && a["error"]["message"]
                .as_str()
                .unwrap()
                .contains(r#"id "twice" is already the id of a request of upstream `raw`"#)),
        "{answer}"
    );
    raw.send(
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ok","arguments":{}}}"#,
    )
    .await;
    assert_eq!(raw.response(3).await["result"]["content"][0]["text"], "ok");
}

/// An HTTP client that takes only JSON answers (its `Accept`) reads no
/// stream of a call's: a request sluice relays to it about the call
/// (`roots/list` here) goes on its session's GET stream, where it answers
/// it, and the call ends with that answer. It went on the call's response,
/// was dropped there with the notifications, and the upstream waited.
#[tokio::test]
async fn a_client_that_takes_only_json_is_asked_on_its_get_stream() {
    for upstream in [Upstream::Stdio, Upstream::HttpSse] {
        let messages = [tool_call(2, "chatty", "{}")];
        let path = (Downstream::Http, upstream);
        let run = exchange(
            "json-only",
            path,
            false,
            "",
            &messages,
            Some("application/json"),
        )
        .await;
        let answer = run
            .answer("2")
            .unwrap_or_else(|| panic!("no answer:\n{}", run.transcript()));
        assert!(
            answer.contains("roots reply: ") && answer.contains("file:///tmp"),
            "{answer}\n{}",
            run.transcript()
        );
        let asked = run.client_got("roots/list");
        assert_eq!(asked.len(), 1, "{}", run.transcript());
    }
}

/// A run of list changes reaches a client once: each says only "list
/// again", and a server that adds its tools one by one says it once per
/// tool (each would have had the client list them all again: 50 here, and
/// 2,000 from a server that sent that many, before).
#[tokio::test]
async fn a_run_of_list_changes_is_told_once() {
    let (_dir, mut raw) = raw_session("relay-fickle");
    raw.initialize().await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fickle","arguments":{}}}"#).await;
    let mut changes = 0;
    let change = |line: &serde_json::Value| line["method"] == "notifications/tools/list_changed";
    loop {
        let line = raw.recv().await;
        changes += usize::from(change(&line));
        if line["id"] == 2 {
            assert_eq!(line["result"]["content"][0]["text"], "ok", "{line}");
            break;
        }
    }
    // The forwarder is a task of its own: what it had not written yet may
    // come after the call's answer, and after a ping's. Read on until the
    // ping is answered and a change was told.
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#)
        .await;
    let mut pinged = false;
    while !pinged || changes == 0 {
        let line = raw.recv().await;
        changes += usize::from(change(&line));
        pinged |= line["id"] == 3;
    }
    assert!(
        (1..=5).contains(&changes),
        "{changes} tools/list_changed for 50"
    );
}
