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

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
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
    // Started through sluice's own binary, so that it ends with sluice
    // even when sluice is killed outright (see `tether`).
    let mut cmd = super::tether::command(
        command,
        args,
        super::tether::child_path(env).as_deref(),
        cwd.as_deref(),
    )?;
    cmd.envs(env)
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

use super::client::UpstreamClient;
use super::rpc::Lifecycle;
use super::{Connection, TAIL_LINES, Upstream, lock};

/// Connecting to a child process's stdin and stdout.
impl Upstream {
    /// Starts the upstream's process and makes the MCP handshake over its
    /// stdio; the error says why it could not (with its stderr's tail).
    pub(super) async fn connect_stdio(
        &self,
        transport: &UpstreamTransport,
        client: UpstreamClient,
        lifecycle: Lifecycle,
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
        let (lines, inbound) = super::lines::open(
            self.name(),
            child.stdout,
            child.stdin,
            self.max_message_bytes,
        );
        match self.handshake(lines, inbound, client, lifecycle).await {
            Ok((rpc, info)) => {
                stopped_if_dropped.disarm();
                Ok(Connection {
                    rpc,
                    info,
                    exit: Some(exit),
                    stop: Some(stop),
                    started: std::time::Instant::now(),
                })
            }
            Err(e) => {
                stop.cancel();
                let mut exit = exit;
                let status =
                    tokio::time::timeout(Duration::from_secs(3), exit.wait_for(Option::is_some))
                        .await
                        .ok()
                        .and_then(|s| s.ok().and_then(|s| s.clone()))
                        .map(|s| format!(" (the process {s})"))
                        .unwrap_or_default();
                Err(format!("{e}{status}{}", self.stderr_excerpt()))
            }
        }
    }
}
