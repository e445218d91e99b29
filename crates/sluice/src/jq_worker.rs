//! jq filters in worker processes: `sluice jq-worker` runs one filter over
//! one document under a memory limit; the gateway starts it, feeds it, and
//! kills it when its time is up.
//!
//! jaq has no resource limits: `def f: [f]; f` overflows the stack and
//! aborts the process, `def f: f; f` never ends, `[repeat(1)]` eats memory.
//! None of that may reach the gateway, so each query runs in its own
//! process (`RLIMIT_AS`, a wall clock, capped output).
//!
//! The protocol: one JSON line `{filter, max_outputs, max_bytes,
//! memory_bytes}` on stdin, then the document's bytes to the end of
//! stdin; one JSON line on stdout: `{"outputs": [..]}` or `{"error": ".."}`.

use std::io::{Read, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_core::query::{self, OutputLimits};
use tokio::io::AsyncWriteExt;

/// What a worker is asked.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    filter: String,
    max_outputs: usize,
    max_bytes: usize,
    memory_bytes: u64,
}

/// What a worker answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Reply {
    Outputs(Vec<String>),
    Error(String),
}

/// Limits of one query.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock time.
    pub time: Duration,
    /// Address space of the worker.
    pub memory_bytes: u64,
    /// Outputs.
    pub max_outputs: usize,
    /// Bytes of output.
    pub max_bytes: usize,
}

impl Default for Limits {
    /// 10 s, 1 GiB, 100,000 outputs, 64 MiB of output.
    fn default() -> Self {
        Self {
            time: Duration::from_secs(10),
            memory_bytes: 1 << 30,
            max_outputs: 100_000,
            max_bytes: 64 << 20,
        }
    }
}

/// `sluice jq-worker`: answers one request and exits.
pub fn main() -> std::process::ExitCode {
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        return std::process::ExitCode::FAILURE;
    }
    let newline = input
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(input.len());
    let reply = match serde_json::from_slice::<Request>(&input[..newline]) {
        Err(e) => Reply::Error(format!("bad worker request: {e}")),
        Ok(request) => {
            // The limit applies to what the filter allocates from now on.
            let _ = rlimit::setrlimit(
                rlimit::Resource::AS,
                request.memory_bytes,
                request.memory_bytes,
            );
            let doc = &input[(newline + 1).min(input.len())..];
            let limits = OutputLimits {
                max_outputs: request.max_outputs,
                max_bytes: request.max_bytes,
            };
            match query::run(&request.filter, doc, limits) {
                Ok(outputs) => Reply::Outputs(outputs),
                Err(e) => Reply::Error(e.to_string()),
            }
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, &reply);
    let _ = out.write_all(b"\n");
    std::process::ExitCode::SUCCESS
}

/// Runs `filter` over `doc` (JSON bytes) in a fresh worker; the outputs,
/// or a message for the model.
pub async fn run(filter: &str, doc: Vec<u8>, limits: Limits) -> Result<Vec<String>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the sluice binary: {e}"))?;
    let mut child = tokio::process::Command::new(exe)
        .arg("jq-worker")
        .env("RUST_BACKTRACE", "0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start a jq worker: {e}"))?;
    let request = serde_json::to_vec(&Request {
        filter: filter.to_owned(),
        max_outputs: limits.max_outputs,
        max_bytes: limits.max_bytes,
        memory_bytes: limits.memory_bytes,
    })
    .unwrap_or_default();
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&request).await;
        let _ = stdin.write_all(b"\n").await;
        let _ = stdin.write_all(&doc).await;
        // Dropping stdin ends the document.
    });
    let output = match tokio::time::timeout(limits.time, child.wait_with_output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(format!("the jq worker failed: {e}")),
        Err(_) => {
            feed.abort();
            // `kill_on_drop` ends the worker with the dropped future.
            return Err(format!(
                "the filter was stopped after {} s: it may never end (e.g. a recursion without a base case, or `repeat`/`range` without a bound). Narrow it, or use `limit(n; …)` / `first(…)`.",
                limits.time.as_secs()
            ));
        }
    };
    let _ = feed.await;
    if let Some(line) = output
        .stdout
        .split(|&b| b == b'\n')
        .next()
        .filter(|l| !l.is_empty())
    {
        return match serde_json::from_slice::<Reply>(line) {
            Ok(Reply::Outputs(outputs)) => Ok(outputs),
            Ok(Reply::Error(message)) => Err(message),
            Err(e) => Err(format!("the jq worker answered nonsense: {e}")),
        };
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("overflowed its stack") {
        return Err("the filter recursed too deep and was stopped (e.g. `def f: [f]; f`): give the recursion a base case, or use `recurse`/`..`.".into());
    }
    if stderr.contains("memory allocation") || stderr.contains("capacity overflow") {
        return Err(format!(
            "the filter was stopped at {} MiB of memory: it builds something too large (e.g. `[repeat(1)]`). Narrow it, or use `limit(n; …)`.",
            limits.memory_bytes >> 20
        ));
    }
    Err(format!(
        "the jq worker ended without an answer ({}){}",
        output.status,
        stderr
            .lines()
            .last()
            .map(|l| format!(": {l}"))
            .unwrap_or_default()
    ))
}
