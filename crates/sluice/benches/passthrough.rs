//! End-to-end cost of going through sluice, measured side by side.
//!
//! 1. Latency over stdio: a small `tools/call` (`echo`) to sluice's sample
//!    server, directly and through `sluice --`, interleaved call by call;
//!    p50/p99 of each and the difference. Beside them, three floors: a
//!    byte relay (two threads copying bytes, the least any stdio proxy
//!    costs), an envelope relay (one tokio thread that reads each line's
//!    envelope and renumbers ids, the least a gateway built as sluice is
//!    costs) and the same envelope work on two blocking threads (the
//!    least any gateway that reads its messages costs), each set against
//!    the direct calls and against the byte relay. Last, issue 15's goal
//!    in one sitting: direct, the byte relay, the envelope relays and
//!    sluice interleaved call by call, each added latency and its ratio
//!    to the byte relay's.
//! 2. Latency over Streamable HTTP: the sample server serving HTTP, directly
//!    and through `sluice --listen` with it as an HTTP upstream.
//!    Then large results (0.8, 1.2 and 8.5 MB of JSON text), median of 7
//!    each way: the whole result directly vs the stored answer through
//!    sluice, and the end-to-end time of reading the middle page of each
//!    (O(page)).
//! 3. Throughput with 8 concurrent HTTP clients: requests per second,
//!    directly and through sluice, in alternating blocks (5 of 3 s each
//!    way unless `--blocks N`, `--seconds S`; the order turned at each);
//!    the ratio, as the median of the blocks' ratios and their range. Both
//!    kinds of clients: rmcp clients on kept-alive connections, and raw
//!    clients that send a 2026-07-28 stateless `tools/call` (no session),
//!    each over a kept-alive connection, and clients that open a new TCP
//!    connection for every such request (`Connection: close`). Beside them,
//!    the floor: a relay that parses nothing (hyper server and pooled
//!    client, `--http-relay`), in the same alternation.
//! 4. At rest: the resident memory (VmRSS, and RssAnon: heap and stacks,
//!    without the binary's own pages; Linux) of a fresh `sluice --`
//!    (stdio) and `sluice --listen` (HTTP) before a client connects, after
//!    `initialize` + `tools/list`, after a small call, and after a 20 kB
//!    result (the first that needs the tokenizer, which loads then); and
//!    the size of the sluice binary these figures were taken with. The one
//!    `cargo bench` builds carries rmcp's client transports, which only the
//!    benches' and tests' clients use: `cargo build --release` leaves them
//!    out (0.2 MB less on 2026-11-26).
//!
//! Run with `cargo bench -p sluice --bench passthrough` (optionally
//! `-- --calls N --seconds S`). Figures vary with the machine: compare the
//! ratios, measured in one run. `SLUICE_BENCH_BIN=PATH` measures another
//! sluice binary (as sample server and as gateway), to set two builds side
//! by side.
//!
//! `-- --large` measures only the large results (section 2's), with
//! `--samples N` calls each way (7 by default; the median is reported).
//!
//! `-- --auth` measures only what `[auth]` costs per request: sluice over
//! keep-alive HTTP without `[auth]`, with a static token and with an ES256
//! JWT (a JWKS file), `--calls` echo calls on each, interleaved.
//!
//! `-- --metrics` measures only what the metrics cost: in process, the
//! work each tool call adds (the clock read, the listed-tool check, the
//! series lookup and the record), alone and from 2 threads at once; one
//! scrape of `/metrics` with 1,000 tools; and, with
//! `SLUICE_BENCH_BASE_BIN=PATH` (a build without metrics), the small stdio
//! call through that build and through this one, interleaved.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::http_server;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::process::Command;

type Client = RunningService<RoleClient, ()>;

/// The sluice binary measured: the one cargo built for this bench, or
/// `SLUICE_BENCH_BIN` (another build, to compare two in one sitting).
fn sluice() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SLUICE_BENCH_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_owned())
    })
}

async fn stdio_client(program: &str, args: &[&str]) -> Client {
    let mut cmd = Command::new(program);
    cmd.args(args);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ().serve(transport).await.unwrap()
}

/// A stdio client of one of this bench's floors (`flag`: `--relay`,
/// `--envelope-relay`, `--envelope-threads`) in front of the sample server.
async fn floor_client(flag: &str) -> Client {
    let me = std::env::current_exe().unwrap();
    stdio_client(me.to_str().unwrap(), &[flag, sluice(), "sample-server"]).await
}

async fn http_client(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

fn echo() -> CallToolRequestParams {
    CallToolRequestParams::new("echo").with_arguments(
        serde_json::json!({"text": "a small result"})
            .as_object()
            .cloned()
            .unwrap(),
    )
}

async fn timed_call(client: &Client) -> Duration {
    let start = Instant::now();
    let result = client.call_tool(echo()).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(result.is_error, Some(false));
    elapsed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Interleaves `calls` calls on each client; prints p50/p99 and the added latency.
/// `calls` timed calls to each of `clients`, interleaved call by call (the
/// order turned at each round, so none always goes first with a warm
/// cache), after 200 untimed rounds; each client's times, sorted.
async fn interleaved(clients: &[&Client], calls: usize) -> Vec<Vec<Duration>> {
    for _ in 0..200 {
        for client in clients {
            timed_call(client).await;
        }
    }
    let mut times = vec![Vec::with_capacity(calls); clients.len()];
    for i in 0..calls {
        for k in 0..clients.len() {
            let which = (i + k) % clients.len();
            times[which].push(timed_call(clients[which]).await);
        }
    }
    for times in &mut times {
        times.sort();
    }
    times
}

async fn latency(label: &str, direct: &Client, proxied: &Client, calls: usize) {
    let times = interleaved(&[direct, proxied], calls).await;
    let (d, p) = (&times[0], &times[1]);
    let (d50, d99, p50, p99) = (
        percentile(d, 0.5),
        percentile(d, 0.99),
        percentile(p, 0.5),
        percentile(p, 0.99),
    );
    println!(
        "{label:<16} direct p50 {:>8.1} µs  p99 {:>8.1} µs | sluice p50 {:>8.1} µs  p99 {:>8.1} µs | added p50 {:>7.1} µs  ratio {:.2}",
        micros(d50),
        micros(d99),
        micros(p50),
        micros(p99),
        micros(p50) - micros(d50),
        p50.as_secs_f64() / d50.as_secs_f64()
    );
}

/// Issue 15's stdio goal measured in one sitting: direct, through the
/// byte relay, the two envelope relays and sluice, interleaved call by
/// call, so that the added latencies it compares come from the same
/// minutes (the rows above measure them two by two, in turn, and the
/// machine drifts between them). Each added p50, and its ratio to the
/// byte relay's: the goal is sluice's at most 1.5; the envelope relays'
/// say where the floor of any gateway that reads its messages is.
async fn goal(clients: [&Client; 5], calls: usize) {
    let times = interleaved(&clients, calls).await;
    let added = |k: usize| micros(percentile(&times[k], 0.5)) - micros(percentile(&times[0], 0.5));
    let relay = added(1);
    println!(
        "stdio, all five interleaved: direct p50 {:>6.1} µs | added p50: byte relay {relay:>5.1} µs | envelope relay {:>5.1} µs ({:.2}×) | envelope threads {:>5.1} µs ({:.2}×) | sluice {:>5.1} µs ({:.2}×; goal ≤ 1.5×)",
        micros(percentile(&times[0], 0.5)),
        added(2),
        added(2) / relay,
        added(3),
        added(3) / relay,
        added(4),
        added(4) / relay,
    );
}

/// The large results measured, in `inventory` items: 0.8 MB, 1.2 MB (the
/// size issue 15's goal names: answered no later than the whole result
/// directly) and 8.5 MB of JSON text.
const LARGE_COUNTS: [usize; 3] = [10_000, 14_000, 100_000];

/// A large result (`inventory` of `count` items, one JSON text block):
/// median of `samples` calls each way (7 unless `--samples N`), interleaved.
async fn large_result(direct: &Client, proxied: &Client, count: usize) {
    let samples = (arg("--samples", 7.0) as usize).max(1);
    let params = CallToolRequestParams::new("inventory").with_arguments(
        serde_json::json!({ "count": count })
            .as_object()
            .cloned()
            .unwrap(),
    );
    let mut bytes = 0;
    let mut answer_chars = 0;
    let mut stored = serde_json::Value::Null;
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        let start = Instant::now();
        let whole = direct.call_tool(params.clone()).await.unwrap();
        d.push(start.elapsed());
        bytes = whole.content[0].as_text().map_or(0, |t| t.text.len());
        let start = Instant::now();
        let answer = proxied.call_tool(params.clone()).await.unwrap();
        p.push(start.elapsed());
        answer_chars = answer.content[0]
            .as_text()
            .map_or(0, |t| t.text.chars().count());
        stored = answer.meta.as_ref().unwrap().0["sluice/stored"].clone();
    }
    d.sort();
    p.sort();
    println!(
        "{:<14} direct p50 {:>8.1} ms (the whole result) | sluice p50 {:>8.1} ms (stored; answer of {answer_chars} chars) | sluice/direct {:.2}",
        format!("{:.1} MB result", bytes as f64 / 1e6),
        d[samples / 2].as_secs_f64() * 1e3,
        p[samples / 2].as_secs_f64() * 1e3,
        p[samples / 2].as_secs_f64() / d[samples / 2].as_secs_f64()
    );
    // A page of it, end to end: O(page), whatever the document's size.
    let middle = stored["pages"].as_u64().unwrap() / 2 + 1;
    let read = CallToolRequestParams::new("sluice_read").with_arguments(
        serde_json::json!({"handle": stored["handle"], "page": middle})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let mut times = Vec::new();
    let mut page_chars = 0;
    for _ in 0..21 {
        let start = Instant::now();
        let page = proxied.call_tool(read.clone()).await.unwrap();
        times.push(start.elapsed());
        page_chars = page.content[0]
            .as_text()
            .map_or(0, |t| t.text.chars().count());
    }
    times.sort();
    println!(
        "{:<14} sluice_read page {middle} of {}: p50 {:>7.2} ms ({page_chars} chars of data)",
        "",
        stored["pages"],
        times[10].as_secs_f64() * 1e3
    );
}

/// `-- --large`: only the large results over stdio (with `--samples N`,
/// the median of N calls each way).
async fn large_results() {
    let direct = stdio_client(sluice(), &["sample-server"]).await;
    let proxied = stdio_client(
        sluice(),
        &["--log-level", "error", "--", sluice(), "sample-server"],
    )
    .await;
    for count in LARGE_COUNTS {
        large_result(&direct, &proxied, count).await;
    }
    for client in [direct, proxied] {
        client.cancel().await.unwrap();
    }
}

/// Requests per second from `clients` concurrent clients for `seconds`.
/// The kinds of HTTP client the throughput rows measure, 8 at once.
#[derive(Debug, Clone, Copy)]
enum Load {
    /// rmcp clients in 2025-11-25 sessions, on kept-alive connections.
    Sessions,
    /// 2026-07-28 requests standing alone, on kept-alive connections.
    Stateless,
    /// 2026-07-28 requests standing alone, a new connection for each.
    PerConnection,
}

/// Requests per second of 8 clients of `load` at `url` for `seconds`.
async fn rate(load: Load, url: &str, seconds: f64) -> f64 {
    match load {
        Load::Sessions => throughput(url, 8, seconds).await,
        Load::Stateless => throughput_stateless(url, 8, seconds).await,
        Load::PerConnection => throughput_per_connection(url, 8, seconds).await,
    }
}

/// `blocks` rounds of `seconds` at each of `urls` (direct, the relay,
/// sluice), the order turned at each round so that none always runs
/// first; each one's requests per second, round by round.
async fn alternating(load: Load, urls: [&str; 3], blocks: usize, seconds: f64) -> [Vec<f64>; 3] {
    let mut rates: [Vec<f64>; 3] = Default::default();
    for block in 0..blocks {
        for k in 0..urls.len() {
            let which = (block + k) % urls.len();
            rates[which].push(rate(load, urls[which], seconds).await);
        }
    }
    rates
}

/// Prints a throughput row: the mean rates, and each ratio as the median
/// (and range) of the rounds' ratios, each taken between runs a few
/// seconds apart (the machine drifts over a whole row's minute).
fn report_rates(label: &str, [direct, relay, proxied]: &[Vec<f64>; 3], seconds: f64) {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let ratio = |over: &[f64], under: &[f64]| {
        let mut ratios: Vec<f64> = over.iter().zip(under).map(|(o, u)| o / u).collect();
        ratios.sort_by(f64::total_cmp);
        format!(
            "{:.2} ({:.2}–{:.2})",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        )
    };
    println!(
        "{label}: direct {:>7.0} req/s | sluice {:>7.0} req/s | sluice/direct {}   ({} alternating blocks of {seconds} s; median of the blocks' ratios, and their range)",
        mean(direct),
        mean(proxied),
        ratio(proxied, direct),
        direct.len()
    );
    println!(
        "  an HTTP relay that parses nothing (hyper): {:>7.0} req/s | relay/direct {} | sluice/relay {}",
        mean(relay),
        ratio(relay, direct),
        ratio(proxied, relay)
    );
}

async fn throughput(url: &str, clients: usize, seconds: f64) -> f64 {
    let mut sessions = Vec::new();
    for _ in 0..clients {
        sessions.push(http_client(url).await);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let counts = futures::future::join_all(sessions.iter().map(|client| async move {
        let mut n = 0u64;
        while Instant::now() < deadline {
            timed_call(client).await;
            n += 1;
        }
        n
    }))
    .await;
    let rps = counts.iter().sum::<u64>() as f64 / start.elapsed().as_secs_f64();
    for client in sessions {
        let _ = client.cancel().await;
    }
    rps
}

/// The echo call of [`echo`] as one 2026-07-28 request: it stands alone
/// (its `_meta` says who is asking), so it needs no session.
const STATELESS_ECHO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a small result"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"0"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;

/// Requests per second from `clients` concurrent clients for `seconds`,
/// each request on a new TCP connection (`Connection: close`): connect,
/// send [`STATELESS_ECHO`], read the response to its end. A response that
/// is not a 200 carrying the echoed text panics: a broken setup must not
/// pass for a figure.
async fn throughput_per_connection(url: &str, clients: usize, seconds: f64) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let request: std::sync::Arc<[u8]> = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{STATELESS_ECHO}",
        STATELESS_ECHO.len()
    )
    .into_bytes()
    .into();
    let addr: std::sync::Arc<str> = addr.into();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, request) = (addr.clone(), request.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                let mut response = Vec::with_capacity(4096);
                while Instant::now() < deadline {
                    let mut stream = tokio::net::TcpStream::connect(&*addr).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    stream.write_all(&request).await.unwrap();
                    response.clear();
                    stream.read_to_end(&mut response).await.unwrap();
                    let text = String::from_utf8_lossy(&response);
                    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
                    assert!(
                        head.starts_with("HTTP/1.1 200")
                            && body.contains("a small result")
                            && !body.contains(r#""isError":true"#),
                        "a request on its own connection to {addr} failed:\n{head}\n\n{body}"
                    );
                    n += 1;
                }
                n
            })
        })
        .collect();
    requests_per_second(tasks, start).await
}

/// The requests per second since `start` of `tasks`, each counting the
/// requests it had answered.
async fn requests_per_second(tasks: Vec<tokio::task::JoinHandle<u64>>, start: Instant) -> f64 {
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Requests per second from `clients` concurrent clients for `seconds`,
/// each sending [`STATELESS_ECHO`] (2026-07-28: no session) over one
/// kept-alive connection of its own (hyper's client, a pool of one per
/// client). A response that is not a 200 carrying the echoed text panics.
async fn throughput_stateless(url: &str, clients: usize, seconds: f64) -> f64 {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let uri: hyper::Uri = url.parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let uri = uri.clone();
            tokio::spawn(async move {
                let client = Client::builder(TokioExecutor::new())
                    .pool_max_idle_per_host(1)
                    .build_http::<Full<bytes::Bytes>>();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let request = hyper::Request::post(uri.clone())
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", "2026-07-28")
                        .header("mcp-method", "tools/call")
                        .header("mcp-name", "echo")
                        .body(Full::new(bytes::Bytes::from_static(
                            STATELESS_ECHO.as_bytes(),
                        )))
                        .unwrap();
                    let response = client.request(request).await.unwrap();
                    let status = response.status();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let text = String::from_utf8_lossy(&body);
                    assert!(
                        status == 200
                            && text.contains("a small result")
                            && !text.contains(r#""isError":true"#),
                        "a stateless request to {uri} failed: {status}\n{text}"
                    );
                    n += 1;
                }
                n
            })
        })
        .collect();
    requests_per_second(tasks, start).await
}

/// The resident memory of process `pid` (VmRSS, or VmHWM for the peak) in
/// MB (10^6 bytes); `None` where /proc does not tell (not Linux).
fn resident_mb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024.0 / 1e6)
}

/// The points at which [`at_rest`] reads a gateway's resident memory.
const REST_POINTS: [&str; 4] = [
    "before a client",
    "initialize + tools/list",
    "+ a small call",
    "+ a 20 kB result",
];

/// A gateway's resident memory at one point: all of it (VmRSS), and its
/// anonymous part (RssAnon: heap and stacks): VmRSS also counts the pages
/// of the binary itself, which move by 2–3 MB between builds with no
/// allocation changed.
type Resident = (Option<f64>, Option<f64>);

fn resident(pid: u32) -> Resident {
    (resident_mb(pid, "VmRSS"), resident_mb(pid, "RssAnon"))
}

/// sluice's resident memory at each of [`REST_POINTS`] as `client` (built
/// by `connect`) uses the gateway `pid`, then its peak.
async fn at_rest<F>(pid: u32, connect: F) -> (Vec<Resident>, Option<f64>)
where
    F: std::future::Future<Output = Client>,
{
    // Let the gateway finish starting (it starts its upstream first).
    let settle = || tokio::time::sleep(Duration::from_millis(500));
    settle().await;
    let mut figures = vec![resident(pid)];
    let client = connect.await;
    client.list_all_tools().await.unwrap();
    settle().await;
    figures.push(resident(pid));
    timed_call(&client).await;
    settle().await;
    figures.push(resident(pid));
    // 200 items are about 20 kB of text: within the default budget, but too
    // many bytes to prove it without counting tokens.
    let inventory = CallToolRequestParams::new("inventory").with_arguments(
        serde_json::json!({"count": 200})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let result = client.call_tool(inventory).await.unwrap();
    assert!(
        result
            .meta
            .is_none_or(|m| m.0.get("sluice/stored").is_none())
    );
    settle().await;
    figures.push(resident(pid));
    let peak = resident_mb(pid, "VmHWM");
    client.cancel().await.unwrap();
    (figures, peak)
}

fn print_rest(label: &str, (figures, peak): (Vec<Resident>, Option<f64>)) {
    let mb = |f: Option<f64>| f.map_or("n/a".to_owned(), |f| format!("{f:.1}"));
    let points: Vec<String> = REST_POINTS
        .iter()
        .zip(&figures)
        .map(|(point, (all, anon))| format!("{point} {} (anon {})", mb(*all), mb(*anon)))
        .collect();
    println!("{label:<14} {} | peak {} MB", points.join(" | "), mb(peak));
}

fn arg(name: &str, default: f64) -> f64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `passthrough --relay CMD…`: copies bytes between this process's stdio
/// and a child's, parsing nothing: the floor of what any stdio proxy costs
/// (two more pipe hops and one more process to wake).
fn relay(command: &[String]) {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let mut child = spawn_piped(command);
    let pump = |mut from: Box<dyn Read + Send>, mut to: Box<dyn Write + Send>| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        })
    };
    let stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned().unwrap());
    let up = pump(
        Box::new(std::io::stdin()),
        Box::new(child.stdin.take().unwrap()),
    );
    let down = pump(Box::new(child.stdout.take().unwrap()), Box::new(stdout));
    let _ = up.join();
    let _ = child.wait();
    let _ = down.join();
}

/// What the envelope relays read of each line.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    id: Option<&'a serde_json::value::RawValue>,
    method: Option<&'a str>,
}

/// `line` with `id` (a slice of it) replaced by `by`.
fn with_id(line: &[u8], id: &serde_json::value::RawValue, by: &[u8]) -> Vec<u8> {
    let start = id.get().as_ptr() as usize - line.as_ptr() as usize;
    let end = start + id.get().len();
    [&line[..start], by, &line[end..]].concat()
}

/// Ids the envelope relays gave their client's requests, and the client's.
type Pending = std::collections::HashMap<u64, Box<serde_json::value::RawValue>>;

/// A client's line as the envelope relays send it upstream: a request
/// with an id of the relay's (the next after `last`), its own kept in
/// `pending`; anything else as it came.
fn renumbered(line: &[u8], last: &mut u64, pending: &std::sync::Mutex<Pending>) -> Vec<u8> {
    match serde_json::from_slice(line).unwrap() {
        Envelope {
            id: Some(id),
            method: Some(_),
        } => {
            *last += 1;
            pending.lock().unwrap().insert(*last, id.to_owned());
            with_id(line, id, last.to_string().as_bytes())
        }
        _ => line.to_vec(),
    }
}

/// An upstream's line as the envelope relays give it back: an answer with
/// its client's id; anything else as it came.
fn given_back(line: &[u8], pending: &std::sync::Mutex<Pending>) -> Vec<u8> {
    let theirs = match serde_json::from_slice(line).unwrap() {
        Envelope {
            id: Some(id),
            method: None,
        } => id
            .get()
            .parse()
            .ok()
            .and_then(|ours: u64| pending.lock().unwrap().remove(&ours))
            .map(|theirs| (id, theirs)),
        _ => None,
    };
    match theirs {
        Some((id, theirs)) => with_id(line, id, theirs.get().as_bytes()),
        None => line.to_vec(),
    }
}

/// `command` started with its stdin and stdout piped.
fn spawn_piped(command: &[String]) -> std::process::Child {
    std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `passthrough --envelope-threads CMD…`: [`envelope_relay`]'s work (each
/// line's envelope read, ids renumbered and given back) on [`relay`]'s
/// structure, two blocking threads and no async runtime: the least any
/// stdio gateway that reads its messages costs, beside [`relay`]'s floor
/// of one that reads nothing.
fn envelope_threads(command: &[String]) {
    use std::io::{BufRead, BufReader, Write};
    let mut child = spawn_piped(command);
    let mut to_upstream = child.stdin.take().unwrap();
    let from_upstream = child.stdout.take().unwrap();
    let pending: std::sync::Arc<std::sync::Mutex<Pending>> = Default::default();
    let answers = std::thread::spawn({
        let pending = pending.clone();
        move || {
            let mut from_upstream = BufReader::with_capacity(1 << 16, from_upstream);
            let mut to_client = std::io::stdout().lock();
            let mut answer = Vec::new();
            while from_upstream.read_until(b'\n', &mut answer).unwrap() > 0 {
                to_client.write_all(&given_back(&answer, &pending)).unwrap();
                to_client.flush().unwrap();
                answer.clear();
            }
        }
    });
    let mut from_client = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let (mut request, mut last) = (Vec::new(), 0u64);
    while from_client.read_until(b'\n', &mut request).unwrap() > 0 {
        let line = renumbered(&request, &mut last, &pending);
        to_upstream.write_all(&line).unwrap();
        request.clear();
    }
    drop(to_upstream);
    let _ = child.wait();
    let _ = answers.join();
}

/// `passthrough --envelope-relay CMD…`: the least an async MCP gateway
/// must do, on the runtime sluice's stdio mode uses (tokio, one thread):
/// read each line, parse its envelope (`id`, `method`), give each client
/// request an id of its own and each answer its client's id back, write
/// the line on. Nothing else: no routing, no budget, no tasks. The floor
/// of any gateway built the way sluice is, beside [`relay`]'s floor of any
/// stdio proxy.
fn envelope_relay(command: &[String]) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::unix::pipe;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut to_upstream = child.stdin.take().unwrap();
        let mut from_upstream = BufReader::with_capacity(1 << 16, child.stdout.take().unwrap());
        // Reopened as sluice's stdio mode does (`downstream/stdio_fds.rs`),
        // so that the reactor drives them.
        let mut from_client = BufReader::with_capacity(
            1 << 16,
            pipe::OpenOptions::new()
                .open_receiver("/proc/self/fd/0")
                .unwrap(),
        );
        let mut to_client = pipe::OpenOptions::new()
            .open_sender("/proc/self/fd/1")
            .unwrap();
        // Behind a lock no one else takes, as the threads' relay's is.
        let pending = std::sync::Mutex::new(Pending::new());
        let mut last = 0u64;
        let (mut request, mut answer) = (Vec::new(), Vec::new());
        loop {
            tokio::select! {
                read = from_client.read_until(b'\n', &mut request) => {
                    if read.unwrap() == 0 {
                        break;
                    }
                    let line = renumbered(&request, &mut last, &pending);
                    to_upstream.write_all(&line).await.unwrap();
                    request.clear();
                }
                read = from_upstream.read_until(b'\n', &mut answer) => {
                    if read.unwrap() == 0 {
                        break;
                    }
                    to_client.write_all(&given_back(&answer, &pending)).await.unwrap();
                    answer.clear();
                }
            }
        }
        drop(to_upstream);
        let _ = child.wait().await;
    });
}

/// `passthrough --http-relay URL`: a Streamable HTTP relay to `URL` that
/// parses nothing. Each request goes on as it came (method, headers but
/// `Host` and `Connection`, its body streamed) over a pool of kept-alive
/// connections, and each answer comes back the same way; on tokio's
/// multi-threaded runtime, as `sluice --listen` runs. The floor of any HTTP
/// gateway, as [`relay`] is of a stdio one. Says where it serves on stderr,
/// as sluice does.
fn http_relay(upstream: &str) {
    use hyper::body::Incoming;
    use hyper::header::{CONNECTION, HOST};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let upstream: hyper::Uri = upstream.parse().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let client = Client::builder(TokioExecutor::new()).build_http::<Incoming>();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            eprintln!(
                "relaying on http://{}{}",
                listener.local_addr().unwrap(),
                upstream.path()
            );
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (client, upstream) = (client.clone(), upstream.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let (mut parts, body) = hyper::Request::into_parts(request);
                        parts.uri = upstream.clone();
                        parts.headers.remove(HOST);
                        parts.headers.remove(CONNECTION);
                        client.request(hyper::Request::from_parts(parts, body))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
}

/// Base64url without padding (JWT segments).
fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// What `[auth]` adds per request: the same echo call through sluice over
/// keep-alive HTTP without `[auth]`, with a static token and with an ES256
/// JWT checked against a JWKS file; interleaved, p50 and p99 of each.
/// What the metrics add to a tool call, and what a scrape costs.
async fn metrics_cost(calls: usize) {
    use sluice::metrics::{Metrics, Outcome, Snapshot};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    // The work `call_tool_relayed` adds to each call, as it does it.
    let metrics = Arc::new(Metrics::new());
    let listed: Arc<Mutex<HashMap<String, ()>>> = Arc::new(Mutex::new(
        (0..50).map(|n| (format!("sample__tool{n}"), ())).collect(),
    ));
    listed.lock().unwrap().insert("sample__echo".into(), ());
    let one_call = |metrics: &Metrics, listed: &Mutex<HashMap<String, ()>>| {
        let started = Instant::now();
        metrics
            .tool("sample__echo", || {
                let known = listed.lock().unwrap().contains_key("sample__echo");
                (Some("sample"), Some("echo").filter(|_| known))
            })
            .record(Outcome::Passed, started.elapsed());
    };
    const N: u32 = 2_000_000;
    for _ in 0..10_000 {
        one_call(&metrics, &listed);
    }
    let start = Instant::now();
    for _ in 0..N {
        one_call(&metrics, &listed);
    }
    let alone = start.elapsed() / N;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (metrics, listed) = (metrics.clone(), listed.clone());
            std::thread::spawn(move || {
                let start = Instant::now();
                for _ in 0..N {
                    one_call(&metrics, &listed);
                }
                start.elapsed() / N
            })
        })
        .collect();
    let contended: Vec<Duration> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    println!(
        "metrics per tool call, in process: {:.0} ns alone, {:.0} / {:.0} ns from 2 threads at once ({} calls each)",
        alone.as_nanos(),
        contended[0].as_nanos(),
        contended[1].as_nanos(),
        N
    );

    // A scrape with 1,000 tools called (5 outcomes and a histogram each).
    for n in 0..1_000 {
        let tool = format!("t{n}");
        metrics
            .tool(&format!("sample__t{n}"), || (Some("sample"), Some(&tool)))
            .record(Outcome::Stored, Duration::from_millis(3));
    }
    let snapshot = Snapshot {
        upstreams: vec![("sample".into(), true, 0)],
        ..Default::default()
    };
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..20 {
        bytes = metrics.encode(&snapshot).len();
    }
    println!(
        "one scrape of /metrics with 1,000 tools: {:.1} ms, {} kB",
        (start.elapsed() / 20).as_secs_f64() * 1e3,
        bytes / 1000
    );

    // End to end, against a build without metrics.
    let Ok(base) = std::env::var("SLUICE_BENCH_BASE_BIN") else {
        println!("(set SLUICE_BENCH_BASE_BIN to a build without metrics to compare end to end)");
        return;
    };
    let without = stdio_client(
        &base,
        &["--log-level", "error", "--", sluice(), "sample-server"],
    )
    .await;
    let with = stdio_client(
        sluice(),
        &["--log-level", "error", "--", sluice(), "sample-server"],
    )
    .await;
    println!("small stdio call: \"direct\" is the build without metrics, \"sluice\" this one");
    for _ in 0..3 {
        latency("metrics", &without, &with, calls).await;
    }
    without.cancel().await.unwrap();
    with.cancel().await.unwrap();
}

async fn auth_cost(calls: usize) {
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
    use sha2::Digest as _;
    let dir = std::env::temp_dir().join(format!("sluice-bench-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let key =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let point = key.public_key().as_ref();
    let jwks = serde_json::json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "bench", "use": "sig",
        "alg": "ES256", "x": b64url(&point[1..33]), "y": b64url(&point[33..65])}]});
    let jwks_file = dir.join("jwks.json");
    std::fs::write(&jwks_file, jwks.to_string()).unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let claims = serde_json::json!({"iss": "https://idp.bench", "aud": "sluice", "sub": "bench", "exp": exp});
    let message = format!(
        "{}.{}",
        b64url(br#"{"alg":"ES256","typ":"JWT","kid":"bench"}"#),
        b64url(claims.to_string().as_bytes())
    );
    let signature = key.sign(&rng, message.as_bytes()).unwrap();
    let jwt = format!("{message}.{}", b64url(signature.as_ref()));
    let static_token = "bench-static-token-0123456789abcdef";
    let digest: String = sha2::Sha256::digest(static_token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();

    let upstream = format!(
        "[upstreams.sample]\ncommand = {:?}\nargs = [\"sample-server\"]\n",
        sluice()
    );
    let open = dir.join("open.toml");
    std::fs::write(&open, &upstream).unwrap();
    let guarded = dir.join("auth.toml");
    std::fs::write(
        &guarded,
        format!(
            "{upstream}[auth]\ntokens = [ {{ principal = \"bench\", sha256 = \"{digest}\" }} ]\n[auth.jwt]\nissuer = \"https://idp.bench\"\naudience = \"sluice\"\njwks_file = {:?}\n",
            jwks_file.display().to_string()
        ),
    )
    .unwrap();
    let serve = |config: &std::path::Path| {
        let config = config.to_str().unwrap().to_owned();
        async move {
            http_server(
                sluice(),
                &[
                    "--log-level",
                    "error",
                    "--listen",
                    "127.0.0.1:0",
                    "--config",
                    &config,
                ],
            )
            .await
        }
    };
    let (_open_server, open_url) = serve(&open).await;
    let (_guarded_server, guarded_url) = serve(&guarded).await;
    let with_token = |url: &str, token: &str| {
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let config =
            StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
        async move { ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap() }
    };
    let clients = [
        http_client(&open_url).await,
        with_token(&guarded_url, static_token).await,
        with_token(&guarded_url, &jwt).await,
    ];
    for _ in 0..200 {
        for client in &clients {
            timed_call(client).await;
        }
    }
    let mut times = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..calls {
        // Rotate which goes first.
        for k in 0..3 {
            let k = (i + k) % 3;
            times[k].push(timed_call(&clients[k]).await);
        }
    }
    let p50: Vec<f64> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            micros(percentile(t, 0.5))
        })
        .collect();
    let p99: Vec<f64> = times.iter().map(|t| micros(percentile(t, 0.99))).collect();
    println!("[auth], http keep-alive, {calls} echo calls each, interleaved:");
    for (k, label) in ["no [auth]", "static token", "JWT ES256"]
        .iter()
        .enumerate()
    {
        println!(
            "  {label:<13} p50 {:>8.1} µs  p99 {:>8.1} µs | added p50 {:>6.1} µs",
            p50[k],
            p99[k],
            p50[k] - p50[0]
        );
    }
    for client in clients {
        client.cancel().await.unwrap();
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--relay") {
        return relay(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("--envelope-relay") {
        return envelope_relay(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("--envelope-threads") {
        return envelope_threads(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("--http-relay") {
        return http_relay(&args[2]);
    }
    tokio::runtime::Runtime::new().unwrap().block_on(bench());
}

async fn bench() {
    sluice::install_tls_provider();
    let calls = arg("--calls", 2000.0) as usize;
    let seconds = arg("--seconds", 3.0);
    if std::env::args().any(|a| a == "--auth") {
        return auth_cost(calls).await;
    }
    if std::env::args().any(|a| a == "--metrics") {
        return metrics_cost(calls).await;
    }
    if std::env::args().any(|a| a == "--large") {
        return large_results().await;
    }

    println!(
        "sluice pass-through: a small tools/call (echo), direct vs through sluice, interleaved"
    );
    let direct = stdio_client(sluice(), &["sample-server"]).await;
    let proxied = stdio_client(
        sluice(),
        &["--log-level", "error", "--", sluice(), "sample-server"],
    )
    .await;
    latency("stdio", &direct, &proxied, calls).await;
    let me = std::env::current_exe().unwrap();
    let relayed = floor_client("--relay").await;
    latency("stdio relay", &direct, &relayed, calls).await;
    latency("sluice/relay", &relayed, &proxied, calls).await;
    let enveloped = floor_client("--envelope-relay").await;
    latency("envelope relay", &direct, &enveloped, calls).await;
    latency("envelope/relay", &relayed, &enveloped, calls).await;
    latency("sluice/envelope", &enveloped, &proxied, calls).await;
    let threaded = floor_client("--envelope-threads").await;
    latency("envelope threads", &direct, &threaded, calls).await;
    latency("threads/relay", &relayed, &threaded, calls).await;
    goal([&direct, &relayed, &enveloped, &threaded, &proxied], calls).await;
    for count in LARGE_COUNTS {
        large_result(&direct, &proxied, count).await;
    }
    for client in [direct, proxied, relayed, enveloped, threaded] {
        client.cancel().await.unwrap();
    }

    let (_server, server_url) =
        http_server(sluice(), &["sample-server", "--listen", "127.0.0.1:0"]).await;
    let config = std::env::temp_dir().join(format!("sluice-bench-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!("[upstreams.sample]\nurl = {server_url:?}\n"),
    )
    .unwrap();
    let (_gateway, gateway_url) = http_server(
        sluice(),
        &[
            "--log-level",
            "error",
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    let direct = http_client(&server_url).await;
    let proxied = http_client(&gateway_url).await;
    latency("http", &direct, &proxied, calls / 2).await;
    direct.cancel().await.unwrap();
    proxied.cancel().await.unwrap();

    // The floor beside sluice: a relay that parses nothing.
    let (_relay, relay_url) =
        http_server(me.to_str().unwrap(), &["--http-relay", &server_url]).await;
    let urls = [
        server_url.as_str(),
        relay_url.as_str(),
        gateway_url.as_str(),
    ];
    let blocks = (arg("--blocks", 5.0) as usize).max(1);
    for (load, label) in [
        (Load::Sessions, "http, 8 clients"),
        (
            Load::Stateless,
            "http, 8 clients, 2026-07-28 requests standing alone, kept-alive connections",
        ),
        (
            Load::PerConnection,
            "http, 8 clients, a connection per request",
        ),
    ] {
        let rates = alternating(load, urls, blocks, seconds).await;
        report_rates(label, &rates, seconds);
    }

    println!(
        "sluice at rest: resident memory (VmRSS, and RssAnon: heap and stacks, without the binary's pages; MB = 10^6 bytes) of a fresh gateway"
    );
    let mut cmd = Command::new(sluice());
    cmd.args(["--log-level", "error", "--", sluice(), "sample-server"]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    print_rest(
        "stdio",
        at_rest(pid, async { ().serve(transport).await.unwrap() }).await,
    );
    let (gateway, gateway_url) = http_server(
        sluice(),
        &[
            "--log-level",
            "error",
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    let pid = gateway.id().unwrap();
    print_rest("http", at_rest(pid, http_client(&gateway_url)).await);
    let binary = std::fs::metadata(sluice()).unwrap().len();
    let built = if std::env::var_os("SLUICE_BENCH_BIN").is_some() {
        "SLUICE_BENCH_BIN"
    } else {
        "built by cargo bench, a release build is smaller"
    };
    println!(
        "{:<14} {:.1} MB ({}; {built})",
        "sluice binary",
        binary as f64 / 1e6,
        sluice()
    );
    let _ = std::fs::remove_file(config);
}
