//! Starting an upstream server as a child process.
//!
//! sluice owns the child (not rmcp) so that it can report how it ended:
//! the exit status and the last lines of stderr go into the error a client
//! gets when the upstream dies. Its stderr goes to sluice's log, never to
//! the client.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::config::UpstreamTransport;
use sluice_core::tail::Tail;

use crate::jsonrpc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a child may take to exit after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// A started child: its pipes, and how it ended once it has.
pub struct ChildProcess {
    /// Its stdout (sluice reads MCP messages here).
    pub stdout: ChildStdout,
    /// Its stdin (sluice writes MCP messages here).
    pub stdin: ChildStdin,
    /// `None` while it runs, then a description of how it ended.
    pub exit: watch::Receiver<Option<String>>,
    /// Cancel to stop it: stdin is closed by dropping the transport, then
    /// the child gets [`EXIT_GRACE`] before it is killed.
    pub stop: CancellationToken,
}

/// Starts `transport` (which must be a stdio one); stderr lines go to the
/// log and into `tail`.
pub fn spawn(
    upstream: &str,
    transport: &UpstreamTransport,
    tail: Arc<Mutex<Tail>>,
) -> std::io::Result<ChildProcess> {
    let UpstreamTransport::Stdio {
        command,
        args,
        env,
        cwd,
    } = transport
    else {
        return Err(std::io::Error::other("not a stdio upstream"));
    };
    let mut cmd = Command::new(command);
    cmd.args(args)
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    // Its own process group: a Ctrl-C in sluice's terminal reaches sluice,
    // which then stops its children in order, instead of killing them mid-reply.
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stdin = child.stdin.take().expect("stdin is piped");
    let stderr = child.stderr.take().expect("stderr is piped");

    let name = upstream.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "sluice::upstream::stderr", upstream = %name, "{line}");
            tail.lock().unwrap_or_else(|p| p.into_inner()).push(&line);
        }
    });

    let (exit_tx, exit) = watch::channel(None);
    let stop = CancellationToken::new();
    tokio::spawn(watch_child(
        upstream.to_owned(),
        child,
        exit_tx,
        stop.clone(),
    ));
    Ok(ChildProcess {
        stdout,
        stdin,
        exit,
        stop,
    })
}

async fn watch_child(
    name: String,
    mut child: Child,
    exit_tx: watch::Sender<Option<String>>,
    stop: CancellationToken,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        () = stop.cancelled() => {
            match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    tracing::warn!(upstream = %name, "did not exit within {EXIT_GRACE:?} of stdin closing; killing it");
                    let _ = child.kill().await;
                    child.wait().await
                }
            }
        }
    };
    let described = match status {
        Ok(status) => describe_status(status),
        Err(e) => format!("could not be waited for: {e}"),
    };
    tracing::info!(upstream = %name, "process {described}");
    let _ = exit_tx.send(Some(described));
}

fn describe_status(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    match status.code() {
        Some(code) => format!("exited with status {code}"),
        None => "exited".to_owned(),
    }
}

use std::time::Instant;

use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, RoleClient};

use super::client::UpstreamClient;
use super::{CONNECT_TIMEOUT, Connection, TAIL_LINES, Upstream, lock, root_cause, tap};

/// Connecting to a child process's stdin and stdout.
impl Upstream {
    /// Starts the upstream's process and makes the MCP handshake over its
    /// stdio; the error says why it could not (with its stderr's tail).
    pub(super) async fn connect_stdio(
        &self,
        transport: &UpstreamTransport,
        client: UpstreamClient,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Connection, String> {
        let UpstreamTransport::Stdio { command, .. } = transport else {
            unreachable!("connect_stdio is called for stdio upstreams")
        };
        // Only this run's stderr explains this run's failure.
        *lock(&self.tail) = Tail::new(TAIL_LINES);
        let child = spawn(self.name(), transport, self.tail.clone()).map_err(|e| {
            format!("could not be started: `{command}`: {e} (check `command` and PATH)")
        })?;
        let stop = child.stop.clone();
        // A handshake dropped midway (sluice shutting down) stops
        // the process.
        let stopped_if_dropped = stop.clone().drop_guard();
        let exit = child.exit.clone();
        let limit = self.max_message_bytes;
        let checked = checked_output(self.name().to_owned(), child.stdout, limit);
        let transport = tap::Tapped {
            // rmcp's own line limit stays above sluice's: a line over it
            // never reaches rmcp.
            inner: rmcp::transport::async_rw::AsyncRwTransport::<RoleClient, _, _>::new(
                checked,
                child.stdin,
            )
            .with_max_line_length(limit.saturating_add(1 << 10)),
            hub: self.hub.clone(),
            upstream: self.spec.name.clone(),
        };
        let serving = client.serve_with_lifecycle(transport, lifecycle);
        match tokio::time::timeout(CONNECT_TIMEOUT, serving).await {
            Ok(Ok(service)) => {
                stopped_if_dropped.disarm();
                Ok(Connection {
                    service,
                    exit: Some(exit),
                    stop: Some(stop),
                    started: Instant::now(),
                })
            }
            Ok(Err(e)) => {
                stop.cancel();
                let mut exit = exit;
                let status =
                    tokio::time::timeout(Duration::from_secs(3), exit.wait_for(Option::is_some))
                        .await
                        .ok()
                        .and_then(|s| s.ok().and_then(|s| s.clone()))
                        .map(|s| format!(" (the process {s})"))
                        .unwrap_or_default();
                Err(format!(
                    "failed during the MCP handshake: {}{status}{}",
                    root_cause(&e),
                    self.stderr_excerpt()
                ))
            }
            Err(_) => {
                stop.cancel();
                Err(format!(
                    "did not complete the MCP handshake within {} s{}",
                    CONNECT_TIMEOUT.as_secs(),
                    self.stderr_excerpt()
                ))
            }
        }
    }
}

/// How many bytes of checked output may wait for rmcp to read them.
const CHECKED_BUFFER: usize = 64 << 10;

/// Lines longer than this are checked on a blocking thread.
const BLOCKING_BYTES: usize = 256 << 10;

/// The bytes of a line as read (for a line over the limit: what was seen).
fn frame_bytes(frame: &jsonrpc::Frame) -> usize {
    match frame {
        jsonrpc::Frame::Message(line) => line.len(),
        jsonrpc::Frame::TooLarge { .. } => 0,
    }
}

/// The child's stdout as rmcp reads it: every line is first read by
/// sluice's own JSON-RPC layer, under `[limits] max_message_mb`, and only
/// messages it can read pass. rmcp drops a line it cannot decode without a
/// word, which left the call it answers waiting for ever; here such a line
/// (not UTF-8, nested deeper than [`jsonrpc::MAX_DEPTH`], over the limit)
/// becomes, when its id can be found, a JSON-RPC error answer to that
/// request that says what was wrong, so the call fails at once and the
/// next one works. A line without an id is skipped with a warning (garbage
/// between messages); one over the limit without an id ends the stream,
/// so the connection is restarted rather than left out of step.
fn checked_output(upstream: String, stdout: ChildStdout, limit: usize) -> tokio::io::DuplexStream {
    let (for_rmcp, mut to_rmcp) = tokio::io::duplex(CHECKED_BUFFER);
    tokio::spawn(async move {
        let mut lines = jsonrpc::LineReader::new(BufReader::new(stdout), limit);
        loop {
            let line = match lines.read_message().await {
                Ok(Some(frame)) if frame_bytes(&frame) > BLOCKING_BYTES => {
                    // Checking a large answer takes milliseconds per MB:
                    // not on the threads that serve other sessions.
                    let name = upstream.clone();
                    match tokio::task::spawn_blocking(move || checked_line(&name, frame, limit))
                        .await
                    {
                        Ok(line) => line,
                        Err(_) => return,
                    }
                }
                Ok(Some(frame)) => checked_line(&upstream, frame, limit),
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(upstream = %upstream, "reading the upstream's output: {e}");
                    return;
                }
            };
            let Some(line) = line else { continue };
            let Ok(line) = line else {
                return;
            };
            if to_rmcp.write_all(&line).await.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
                return;
            }
        }
    });
    for_rmcp
}

/// What of `frame` goes on to rmcp: the line itself, an error answer in
/// its place, nothing (`None`), or the end of the stream (`Some(Err(()))`).
fn checked_line(
    upstream: &str,
    frame: jsonrpc::Frame,
    limit: usize,
) -> Option<Result<bytes::Bytes, ()>> {
    let (error, id) = match frame {
        jsonrpc::Frame::Message(line) => match jsonrpc::Message::parse(line.clone()) {
            Ok(_) => return Some(Ok(line)),
            Err(error) => {
                let id = jsonrpc::salvage_id(&line);
                (error, id)
            }
        },
        jsonrpc::Frame::TooLarge { bytes_seen, id } => (
            jsonrpc::MessageError::TooLarge {
                bytes: bytes_seen,
                limit,
            },
            id,
        ),
    };
    match id {
        Some(id) => {
            tracing::warn!(upstream = %upstream, "answer to request {id} refused: {error}");
            Some(Ok(refusal(upstream, &id, &error)))
        }
        None if matches!(error, jsonrpc::MessageError::TooLarge { .. }) => {
            tracing::warn!(upstream = %upstream, "{error}; no request id in it: restarting the connection");
            Some(Err(()))
        }
        None => {
            tracing::warn!(upstream = %upstream, "skipped a line that is not a message: {error}");
            None
        }
    }
}

/// A JSON-RPC error answer to `id` saying why the upstream's answer was
/// refused.
fn refusal(upstream: &str, id: &jsonrpc::Id, error: &jsonrpc::MessageError) -> bytes::Bytes {
    let error = serde_json::json!({
        "code": -32603,
        "message": format!("upstream `{upstream}` sent an answer sluice cannot read: {error}"),
    });
    bytes::Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#,
        id.as_json()
    ))
}
