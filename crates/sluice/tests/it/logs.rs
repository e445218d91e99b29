//! `--log-format json`: every line sluice writes to stderr is one JSON
//! object (timestamp, level, target, fields), an event's fields kept as
//! fields; the lines sluice says whatever the level (where it serves, why
//! it stopped) too. Text stays the default.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::*;

/// Each line of `stderr`, parsed; fails on one that is not a JSON object
/// shaped as a log line.
fn objects(stderr: &str) -> Vec<Value> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let value: Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            check(&value, line);
            value
        })
        .collect()
}

fn check(value: &Value, line: &str) {
    let timestamp = value["timestamp"]
        .as_str()
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        timestamp.len() >= 20 && timestamp.starts_with("20") && timestamp.ends_with('Z'),
        "{line}"
    );
    assert!(
        ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"]
            .contains(&value["level"].as_str().unwrap_or("")),
        "{line}"
    );
    assert!(
        value["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("sluice")),
        "{line}"
    );
    assert!(value["fields"]["message"].is_string(), "{line}");
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_with_their_fields() {
    let call = |format: &'static str| {
        let mut cmd = tokio::process::Command::new(sluice());
        cmd.args(["--log-format", format, "call", "--tool", "echo"])
            .args(["--args", r#"{"text":"hi"}"#, "--"])
            .args(sample())
            .stdin(Stdio::null());
        cmd
    };
    let out = call("json").output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = objects(&String::from_utf8(out.stderr).unwrap());
    assert!(lines.len() >= 2, "{lines:?}");
    // An event's fields are fields, not words in its message.
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "ready" && l["fields"]["upstream"] == "sluice"),
        "{lines:?}"
    );
    // The result still goes to stdout, as JSON of its own.
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["content"][0]["text"], "hi");

    // Text is the default, and SLUICE_LOG_FORMAT chooses too.
    let out = call("text").output().await.unwrap();
    let text = String::from_utf8(out.stderr).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains(" INFO sluice::gateway: ready")),
        "{text}"
    );
    assert!(serde_json::from_str::<Value>(text.lines().next().unwrap()).is_err());
    let out = tokio::process::Command::new(sluice())
        .env("SLUICE_LOG_FORMAT", "json")
        .args(["call", "--tool", "echo", "--args", r#"{"text":"hi"}"#, "--"])
        .args(sample())
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!objects(&String::from_utf8(out.stderr).unwrap()).is_empty());

    // Why sluice stopped is an object too, and the exit code says so.
    let out = tokio::process::Command::new(sluice())
        .args([
            "--log-format",
            "json",
            "--config",
            "/nonexistent/sluice.toml",
        ])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let lines = objects(&String::from_utf8(out.stderr).unwrap());
    let last = lines.last().expect("why it stopped");
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/sluice.toml"),
        "{last}"
    );

    // An unknown format is refused before anything starts.
    let out = tokio::process::Command::new(sluice())
        .args(["--log-format", "yaml", "demo"])
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[possible values: text, json]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn with_json_logs_the_line_saying_where_sluice_serves_is_an_object_with_the_url() {
    let mut child = tokio::process::Command::new(sluice())
        .args([
            "--log-format",
            "json",
            "--log-level",
            "error",
            "--listen",
            "127.0.0.1:0",
            "--",
        ])
        .args(sample())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // Said whatever the level (here: errors only).
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let value: Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            check(&value, &line);
            if let Some(url) = value["fields"]["message"]
                .as_str()
                .and_then(|m| m.strip_prefix("serving MCP at "))
            {
                return url.to_owned();
            }
        }
        panic!("sluice exited before serving");
    })
    .await
    .expect("sluice did not say where it serves within 30 s");
    let client = stateless_http_client(&url, "127.0.0.1".parse().unwrap()).await;
    assert!(tool_names(&client).await.contains(&"echo".to_owned()));
    client.cancel().await.unwrap();
}
