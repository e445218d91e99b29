//! Fuzz target for the stdio framing (`sluice::downstream::lines`): every line a
//! client sends is answered or delivered, and the stream goes on.
//!
//! Lines of any bytes (garbage, cut messages, non-UTF-8, batches, odd or
//! missing ids, BOMs, CRLF, deep nesting) are fed to `ClientLines` in
//! process, with valid messages between them. Each non-blank line is either
//! delivered as the message rmcp reads from it, or answered with exactly one
//! JSON-RPC error: `-32700` when it is not JSON, `-32600` (with the
//! request's integer or string id) when it is JSON but not a message. Every
//! valid message after it is still delivered, in order. The seeds in
//! `tests/fuzz/framing/` (one line each) run first; `PROPTEST_CASES` sets
//! how many generated streams follow (64 by default).

use std::io::Cursor;

use crate::support::{TempDir, sample, sluice, toml_upstream};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use rmcp::service::{RoleServer, RxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use sluice::downstream::lines::ClientLines;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// What a line should come to.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// Delivered: the message as rmcp reads it (serialized back).
    Delivered(Value),
    /// Answered with this error code and id.
    Error(i64, Value),
}

/// What `line` (without its `\n`) should come to; `None` for a blank line.
fn expected(line: &[u8]) -> Option<Outcome> {
    let text = line
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(line)
        .trim_ascii();
    if text.is_empty() {
        return None;
    }
    if let Ok(message) = serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(text) {
        return Some(Outcome::Delivered(serde_json::to_value(&message).unwrap()));
    }
    Some(match serde_json::from_slice::<Value>(text) {
        Err(_) => Outcome::Error(-32700, Value::Null),
        Ok(value) => {
            let id = match value.get("id") {
                Some(Value::Number(n)) if n.is_i64() => Value::Number(n.clone()),
                Some(Value::String(s)) => Value::String(s.clone()),
                _ => Value::Null,
            };
            Outcome::Error(-32600, id)
        }
    })
}

/// Feeds `stream` to a `ClientLines` until the input ends; what was
/// delivered and answered, in order of each kind.
async fn run(stream: Vec<u8>) -> (Vec<Value>, Vec<(i64, Value)>) {
    let (writer, output) = tokio::io::duplex(64 << 20);
    let mut lines = ClientLines::new(Cursor::new(stream), writer);
    let mut delivered = Vec::new();
    while let Some(message) = lines.receive().await {
        delivered.push(serde_json::to_value(&message).unwrap());
    }
    drop(lines);
    let mut errors = Vec::new();
    let mut output = BufReader::new(output).lines();
    while let Some(line) = output.next_line().await.unwrap() {
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("an answer is not JSON ({e}): {line}"));
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty(), "an error says what is wrong: {answer}");
        let code = answer["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no code: {answer}"));
        errors.push((code, answer["id"].clone()));
    }
    (delivered, errors)
}

/// Checks that `lines` (each without its line break, ended as `ends` says)
/// followed by a ping all come to what they should.
fn check(lines: &[Vec<u8>], crlf: &[bool]) -> Result<(), TestCaseError> {
    let mut stream = Vec::new();
    let mut want_delivered = Vec::new();
    let mut want_errors = Vec::new();
    let last = br#"{"jsonrpc":"2.0","id":"last","method":"ping"}"#.to_vec();
    for (i, line) in lines.iter().chain([&last]).enumerate() {
        stream.extend_from_slice(line);
        stream.extend_from_slice(if crlf.get(i) == Some(&true) {
            b"\r\n"
        } else {
            b"\n"
        });
        match expected(line) {
            None => {}
            Some(Outcome::Delivered(message)) => want_delivered.push(message),
            Some(Outcome::Error(code, id)) => want_errors.push((code, id)),
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (delivered, errors) = runtime.block_on(run(stream));
    prop_assert_eq!(
        errors,
        want_errors,
        "answers to {:?}",
        lines
            .iter()
            .map(|l| String::from_utf8_lossy(l))
            .collect::<Vec<_>>()
    );
    prop_assert_eq!(
        delivered.last().map(|m| &m["id"]),
        Some(&json!("last")),
        "the ping after them"
    );
    prop_assert_eq!(delivered, want_delivered);
    Ok(())
}

fn ping(id: &str) -> Vec<u8> {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#).into_bytes()
}

/// `bytes` without line breaks.
fn no_newline(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.retain(|&b| b != b'\n');
    bytes
}

/// One line a client might send, valid or not (never containing `\n`).
fn line() -> impl Strategy<Value = Vec<u8>> {
    let id = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551615".to_owned()),
        Just("1.5".to_owned()),
        Just("1e300".to_owned()),
        Just("-0".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("[1]".to_owned()),
        Just("{\"a\":1}".to_owned()),
        "[a-z0-9]{0,6}".prop_map(|s| format!("\"{s}\"")),
    ];
    prop_oneof![
        // Valid messages.
        3 => id.clone().prop_map(|id| ping(&id)),
        1 => Just(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec()),
        1 => Just(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#.to_vec()),
        1 => any::<i64>().prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{}}}}"#).into_bytes()),
        // Messages bent: a field missing or wrong, an unknown method, padding.
        1 => id.clone().prop_map(|id| format!(r#"{{"id":{id},"method":"ping"}}"#).into_bytes()),
        1 => id.clone().prop_map(|id| format!(r#"{{"jsonrpc":"1.0","id":{id},"method":"ping"}}"#).into_bytes()),
        1 => id.clone().prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#).into_bytes()),
        1 => id.clone().prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":42}}"#).into_bytes()),
        1 => id.clone().prop_map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":[1]}}"#).into_bytes()),
        1 => id.prop_map(|id| {
            let mut line = b"\xEF\xBB\xBF \t".to_vec();
            line.extend(ping(&id));
            line.extend(b" \r");
            line
        }),
        // Batches.
        1 => prop::collection::vec(any::<u32>(), 0..4).prop_map(|ids| {
            let pings: Vec<String> = ids.iter().map(|i| String::from_utf8(ping(&i.to_string())).unwrap()).collect();
            format!("[{}]", pings.join(",")).into_bytes()
        }),
        // Cut messages, at any byte.
        2 => any::<prop::sample::Index>().prop_map(|at| {
            let whole = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\u00e9 é"}}}"#.as_bytes();
            whole[..at.index(whole.len())].to_vec()
        }),
        // JSON that is no message.
        1 => prop_oneof![
            Just("null"), Just("1"), Just("\"ping\""), Just("[]"), Just("{}"), Just("[1,2]"), Just("true"),
        ].prop_map(|s| s.as_bytes().to_vec()),
        // Not UTF-8, NUL bytes, control characters, inside a message.
        1 => prop::collection::vec(any::<u8>(), 1..4).prop_map(|bad| {
            let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":""#.to_vec();
            line.extend(bad);
            line.extend(br#""}}"#);
            no_newline(line)
        }),
        // Deep nesting.
        1 => (1usize..5000).prop_map(|depth| {
            let mut line = vec![b'['; depth];
            line.extend(vec![b']'; depth]);
            line
        }),
        // Anything.
        3 => prop::collection::vec(any::<u8>(), 0..80).prop_map(no_newline),
        2 => "[ -~]{0,40}".prop_map(String::into_bytes),
        1 => Just(Vec::new()),
        1 => Just(b"   \t\r".to_vec()),
    ]
}

fn config() -> Config {
    let mut config = Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fuzz/regressions/framing.txt"
        )))),
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 64;
    }
    config
}

#[test]
fn every_seed_line_is_answered_or_delivered_and_the_stream_goes_on() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz/framing");
    let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 10, "the framing corpus is there");
    for (name, seed) in &seeds {
        // A seed is one line; a final line break is the file's, not the seed's.
        let line = seed.strip_suffix(b"\n").unwrap_or(seed);
        assert!(!line.contains(&b'\n'), "seed {name} holds one line");
        check(&[line.to_vec()], &[false]).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        check(&[line.to_vec()], &[true]).unwrap_or_else(|e| panic!("seed {name} (CRLF): {e}"));
    }
    // The corpus holds every outcome: delivered, not JSON, not a message
    // (with its id named back).
    let outcomes: Vec<Option<Outcome>> = seeds
        .iter()
        .map(|(_, s)| expected(s.strip_suffix(b"\n").unwrap_or(s)))
        .collect();
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Some(Outcome::Delivered(_))))
    );
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Some(Outcome::Error(-32700, _))))
    );
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Some(Outcome::Error(-32600, id)) if !id.is_null()))
    );
    // All of them in one stream.
    let lines: Vec<Vec<u8>> = seeds
        .iter()
        .map(|(_, s)| s.strip_suffix(b"\n").unwrap_or(s).to_vec())
        .collect();
    check(&lines, &[]).unwrap();
}

#[test]
fn the_last_line_needs_no_line_break() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (delivered, errors) = runtime.block_on(run(
        b"oops\n{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"ping\"}".to_vec(),
    ));
    assert_eq!(errors, [(-32700, Value::Null)]);
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0]["id"], 9);
}

/// A line longer than the limit (64 MiB) is answered as soon as it passes
/// the limit, its rest is skipped without being kept, and the next message
/// is delivered.
#[tokio::test]
async fn an_over_long_line_is_answered_at_the_limit_and_skipped() {
    const LIMIT: usize = 64 << 20;
    let (mut client, input) = tokio::io::duplex(1 << 20);
    let (writer, output) = tokio::io::duplex(1 << 20);
    let mut lines = ClientLines::new(input, writer);
    let (delivered_tx, mut delivered) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(message) = lines.receive().await {
            let _ = delivered_tx.send(serde_json::to_value(&message).unwrap());
        }
    });
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..(LIMIT >> 20) + 1 {
        client.write_all(&chunk).await.unwrap();
    }
    // The line has not ended, and the input is still open: the answer comes
    // now, not when the line ends. (A hang guard, not a timing.)
    let mut output = BufReader::new(output).lines();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(120), output.next_line())
        .await
        .expect("the over-long line is answered before it ends")
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("longer than"),
        "{answer}"
    );
    // More of the same line, then its end and a ping.
    for _ in 0..8 {
        client.write_all(&chunk).await.unwrap();
    }
    client.write_all(b"\n").await.unwrap();
    client.write_all(&ping("\"after\"")).await.unwrap();
    client.write_all(b"\n").await.unwrap();
    drop(client);
    let next = delivered
        .recv()
        .await
        .expect("the ping after the long line");
    assert_eq!(next["id"], "after");
    assert_eq!(delivered.recv().await, None);
    reader.await.unwrap();
    assert_eq!(output.next_line().await.unwrap(), None, "one answer only");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_line_is_answered_or_delivered_and_the_stream_goes_on(
        lines in prop::collection::vec(line(), 0..12),
        crlf in prop::collection::vec(any::<bool>(), 13),
    ) {
        check(&lines, &crlf)?;
    }
}

/// sluice itself reads its client's lines under `[limits] max_message_mb`:
/// a longer line is refused with an error that names the key, and the
/// client's next message is served.
#[tokio::test]
async fn a_client_line_over_max_message_mb_is_refused_naming_the_key() {
    let dir = TempDir::new("limits-client-line");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "[limits]\nmax_message_mb = 1\n{}",
            toml_upstream("sample", &sample())
        ),
    );
    let mut child = tokio::process::Command::new(sluice())
        .arg("--config")
        .arg(&config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}\n",
        "x".repeat(1 << 20)
    );
    stdin.write_all(big.as_bytes()).await.unwrap();
    stdin.write_all(&ping("2")).await.unwrap();
    stdin.write_all(b"\n").await.unwrap();
    let mut answers = Vec::new();
    while answers.len() < 2 {
        let line = tokio::time::timeout(std::time::Duration::from_secs(60), stdout.next_line())
            .await
            .expect("sluice answers both lines")
            .unwrap()
            .expect("sluice keeps serving");
        answers.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    let refused = &answers[0];
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_message_mb"), "{message}");
    assert_eq!(
        answers[1]["id"], 2,
        "the next message is served: {}",
        answers[1]
    );
    assert!(answers[1].get("result").is_some(), "{}", answers[1]);
}
