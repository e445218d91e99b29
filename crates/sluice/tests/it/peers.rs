//! Real SDK clients (Python `mcp` 2.x in both protocol eras, the TypeScript
//! SDK v1) against real servers, directly and through sluice over stdio
//! and Streamable HTTP: the transcripts of the same scripted session must
//! be the same. The drivers are `tests/clients/transcript.{py,mjs}`.

use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::support::*;

#[derive(Clone, Copy, Debug)]
enum Driver {
    /// Python SDK, `server/discover` first (2026-07-28), falling back.
    PyAuto,
    /// Python SDK, `initialize` (2025-11-25).
    PyLegacy,
    /// TypeScript SDK v1 (2025-11-25), what most hosts embed.
    Ts,
}

enum Target {
    Stdio(Vec<String>),
    Url(String),
}

async fn transcript(driver: Driver, target: &Target, script: &str, declare: &str) -> Value {
    let mut command = match driver {
        Driver::PyAuto | Driver::PyLegacy => {
            let mut c = Command::new(python());
            c.arg(repo().join("tests/clients/transcript.py"))
                .arg("--mode")
                .arg(if matches!(driver, Driver::PyAuto) {
                    "auto"
                } else {
                    "legacy"
                });
            c
        }
        Driver::Ts => {
            let mut c = Command::new(node());
            c.arg(repo().join("tests/clients/transcript.mjs"));
            c
        }
    };
    command
        .env("SLUICE_PEERS", peers())
        .args(["--script", script]);
    command.args(["--drop-meta", "io.modelcontextprotocol/serverInfo"]);
    if !declare.is_empty() {
        command.args(["--declare", declare]);
    }
    match target {
        Target::Stdio(cmd) => {
            let line = cmd
                .iter()
                .map(|p| format!("'{p}'"))
                .collect::<Vec<_>>()
                .join(" ");
            command.args(["--stdio", &line]);
        }
        Target::Url(url) => {
            command.args(["--url", url]);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("the driver finishes within 240 s")
        .unwrap();
    assert!(
        out.status.success(),
        "{driver:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Removes what legitimately differs through sluice.
fn normalize(mut t: Value) -> Value {
    let o = t.as_object_mut().unwrap();
    // sluice introduces itself as sluice.
    o.remove("server_name");
    o.remove("server_version");
    // sluice speaks 2026-07-28 to a client that can, even in front of a
    // server that cannot (checked on its own in `compare`).
    let era = o.remove("protocol_version").unwrap_or_default();
    o.insert("era".into(), era);
    // rmcp 3.x models the tasks of 2025-11-25 no more (tools' `execution`,
    // the `tasks` capability): sluice re-adds tasks with operations.
    if let Some(caps) = o
        .get_mut("server_capabilities")
        .and_then(Value::as_object_mut)
    {
        caps.remove("tasks");
    }
    if let Some(tools) = o.get_mut("tools").and_then(Value::as_array_mut) {
        for tool in tools {
            tool.as_object_mut().unwrap().remove("execution");
        }
    }
    // rmcp puts a progress token on every request it sends, also on the
    // server→client requests sluice forwards.
    if let Some(requests) = o.get_mut("server_requests").and_then(Value::as_array_mut) {
        for request in requests {
            if let Some(meta) = request
                .pointer_mut("/params/_meta")
                .and_then(Value::as_object_mut)
            {
                meta.remove("progressToken");
                if meta.is_empty() {
                    let params = request["params"].as_object_mut().unwrap();
                    params.remove("_meta");
                    if params.is_empty() {
                        request["params"] = Value::Null;
                    }
                }
            }
        }
    }
    t
}

/// Applies to the direct transcript what sluice documents it changes, and
/// removes from the proxied one what sluice adds: its own tools and the
/// template of stored results (with the resources capability they need),
/// and no `outputSchema` (a stored answer could not meet it). Results too
/// large for the budget were read back whole by the driver.
/// Whether the direct listing of tool `name` has no `properties` at all
/// (sluice adds one for `_timeout_s`).
fn direct_without_properties(direct: &Value, name: &Value) -> bool {
    direct["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == *name))
        .is_some_and(|t| t["inputSchema"].get("properties").is_none())
}

fn what_sluice_adds(direct: &mut Value, proxied: &mut Value) {
    if let Some(tools) = direct["tools"].as_array_mut() {
        for tool in tools {
            tool.as_object_mut().unwrap().remove("outputSchema");
        }
    }
    if let Some(tools) = proxied["tools"].as_array_mut() {
        let before = tools.len();
        tools.retain(|t| !t["name"].as_str().is_some_and(|n| n.starts_with("sluice_")));
        assert_eq!(
            before - tools.len(),
            6,
            "sluice_read, _search, _query, _info, _result and _cancel are listed"
        );
        // Every upstream tool gains `_timeout_s`.
        for tool in tools {
            let properties = tool
                .pointer_mut("/inputSchema/properties")
                .and_then(Value::as_object_mut)
                .expect("a listed tool has properties");
            assert!(
                properties.remove("_timeout_s").is_some(),
                "{} takes _timeout_s",
                tool["name"]
            );
            if properties.is_empty() && direct_without_properties(direct, &tool["name"]) {
                tool["inputSchema"]
                    .as_object_mut()
                    .unwrap()
                    .remove("properties");
            }
        }
    }
    let p = proxied.as_object_mut().unwrap();
    // sluice's operations are tasks to clients that declare the extension.
    let capabilities = p["server_capabilities"].as_object_mut().unwrap();
    let extensions = capabilities
        .get_mut("extensions")
        .and_then(Value::as_object_mut)
        .expect("sluice declares extensions");
    assert!(
        extensions.remove("io.modelcontextprotocol/tasks").is_some(),
        "sluice declares the tasks extension"
    );
    if extensions.is_empty() {
        capabilities.remove("extensions");
    }
    if let Some(templates) = p.get_mut("templates").and_then(Value::as_array_mut) {
        templates.retain(|t| t["uriTemplate"] != "sluice://result/{handle}");
    }
    let direct_has_resources = direct["server_capabilities"].get("resources").is_some();
    if !direct_has_resources {
        assert_eq!(p["server_capabilities"]["resources"], serde_json::json!({}));
        p["server_capabilities"]
            .as_object_mut()
            .unwrap()
            .remove("resources");
        for key in ["resources", "templates"] {
            if p.get(key)
                .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
            {
                p.remove(key);
            }
        }
    }
}

fn direct_era(t: &Value) -> Value {
    t["era"].clone()
}

/// Removes the result fields only 2026-07-28 has (`resultType`, `ttlMs`,
/// `cacheScope`), for comparing a 2026-07-28 session with a 2025-11-25 one.
fn without_era_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["resultType", "ttlMs", "cacheScope"] {
                map.remove(key);
            }
            map.values_mut().for_each(without_era_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(without_era_fields),
        _ => {}
    }
}

fn assert_same(direct: &Value, proxied: &Value, what: &str) {
    let (mut direct, mut proxied) = (normalize(direct.clone()), normalize(proxied.clone()));
    what_sluice_adds(&mut direct, &mut proxied);
    if direct_era(&direct) != direct_era(&proxied) {
        without_era_fields(&mut direct);
        without_era_fields(&mut proxied);
    }
    direct.as_object_mut().unwrap().remove("era");
    proxied.as_object_mut().unwrap().remove("era");
    if direct != proxied {
        let d = serde_json::to_string_pretty(&direct).unwrap();
        let p = serde_json::to_string_pretty(&proxied).unwrap();
        let first = d
            .lines()
            .zip(p.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let context = |s: &str| {
            s.lines()
                .skip(first.saturating_sub(5))
                .take(14)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "{what}: transcripts differ at line {first}:\n--- direct\n{}\n--- through sluice\n{}",
            context(&d),
            context(&p)
        );
    }
}

/// The same session directly, through `sluice --` over stdio, and through
/// `sluice --listen` over HTTP (a fresh sluice each time: it mirrors its
/// first client).
async fn compare(driver: Driver, server: Vec<String>, script: &str, declare: &str) {
    let direct = transcript(driver, &Target::Stdio(server.clone()), script, declare).await;
    assert!(!direct["tools"].as_array().unwrap().is_empty());
    let via_stdio = transcript(driver, &Target::Stdio(via_sluice(&server)), script, declare).await;
    let era = match driver {
        Driver::PyAuto => "2026-07-28",
        Driver::PyLegacy | Driver::Ts => "2025-11-25",
    };
    assert_eq!(via_stdio["protocol_version"], era, "{driver:?}");
    assert_same(
        &direct,
        &via_stdio,
        &format!("{driver:?} {script} via stdio"),
    );
    let sluice = HttpSluice::start(&[], &server).await;
    let via_http = transcript(driver, &Target::Url(sluice.url.clone()), script, declare).await;
    assert_same(&direct, &via_http, &format!("{driver:?} {script} via http"));
}

#[tokio::test]
async fn python_auto_client_sees_server_everything_unchanged() {
    compare(Driver::PyAuto, everything(), "everything", "").await;
}

#[tokio::test]
async fn python_legacy_client_sees_server_everything_unchanged() {
    compare(Driver::PyLegacy, everything(), "everything", "").await;
}

#[tokio::test]
async fn typescript_client_sees_server_everything_unchanged() {
    compare(Driver::Ts, everything(), "everything", "").await;
}

#[tokio::test]
async fn python_auto_client_answers_sampling_elicitation_and_roots_through_sluice() {
    compare(
        Driver::PyAuto,
        py_server(),
        "fixture",
        "sampling,elicitation,roots",
    )
    .await;
}

#[tokio::test]
async fn python_legacy_client_answers_sampling_elicitation_and_roots_through_sluice() {
    compare(
        Driver::PyLegacy,
        py_server(),
        "fixture",
        "sampling,elicitation,roots",
    )
    .await;
}

#[tokio::test]
async fn typescript_client_answers_sampling_elicitation_and_roots_through_sluice() {
    compare(
        Driver::Ts,
        py_server(),
        "fixture",
        "sampling,elicitation,roots",
    )
    .await;
}

#[tokio::test]
async fn server_everything_declares_its_capability_dependent_tools_to_a_capable_client() {
    // server-everything adds tools once it knows the client can sample,
    // elicit and list roots: sluice must declare what its client declared.
    compare(
        Driver::PyLegacy,
        everything(),
        "generic",
        "sampling,elicitation,roots",
    )
    .await;
}

#[tokio::test]
async fn an_older_client_answers_a_2026_upstreams_input_requests_and_gets_its_logs() {
    // The upstream is held to 2026-07-28: it asks for sampling, elicitation
    // and roots with `input_required` and logs per request. A 2025-11-25
    // client knows neither; sluice asks it the classic way and carries its
    // `logging/setLevel` with each request.
    let declare = "sampling,elicitation,roots";
    let direct = transcript(
        Driver::PyLegacy,
        &Target::Stdio(py_server()),
        "fixture",
        declare,
    )
    .await;
    let dir = TempDir::new("bridge-2026");
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("py", &py_server()) + "protocol = \"2026-07-28\"\n"),
    );
    let bridged = transcript(
        Driver::PyLegacy,
        &Target::Stdio(via_config(&config)),
        "fixture",
        declare,
    )
    .await;
    for tool in ["ask_sampling", "ask_elicitation", "roots", "log"] {
        let call = |t: &Value| {
            t["calls"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["tool"] == tool)
                .cloned()
                .collect::<Vec<_>>()
        };
        assert!(!call(&direct).is_empty(), "the script calls {tool}");
        assert_eq!(call(&bridged), call(&direct), "{tool}");
    }
    let methods = |t: &Value| {
        t["server_requests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["method"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(methods(&bridged), methods(&direct));
    assert_eq!(bridged["logs"], direct["logs"]);
    assert!(!direct["logs"].as_array().unwrap().is_empty());
}

/// An older client's answer that sluice must decode to pass on to a
/// 2026-07-28 upstream itself is bounded: a sampling answer of 2 MB gets
/// the call a clear error instead of a tree many times its size, and the
/// same request answered plainly then works.
#[tokio::test]
async fn an_older_clients_answer_too_large_to_pass_on_gets_a_clear_error() {
    let dir = TempDir::new("bridge-2026-large");
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("py", &py_server()) + "protocol = \"2026-07-28\"\n"),
    );
    let mut raw = Raw::start(&["--config".to_owned(), config.display().to_string()]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
    raw.response(1).await;
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let padding = format!("[{}0]", "0,".repeat(1 << 20));
    for (id, pad) in [(2, padding.as_str()), (3, "[]")] {
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"ask_sampling","arguments":{{"prompt":"hi"}}}}}}"#
        ))
        .await;
        let asked = loop {
            let message = raw.recv().await;
            if message["method"] == "sampling/createMessage" {
                break message;
            }
        };
        raw.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{},"result":{{"role":"assistant","content":{{"type":"text","text":"fine"}},"model":"m","x-pad":{pad}}}}}"#,
            asked["id"]
        ))
        .await;
        let answer = raw.response(id).await;
        let text = answer.to_string();
        if id == 2 {
            assert!(
                text.contains("the client's answer is 2097") && text.contains("at most 1048576"),
                "{answer}"
            );
        } else {
            assert_eq!(
                answer["result"]["content"][0]["text"], "m: fine",
                "{answer}"
            );
        }
    }
}
