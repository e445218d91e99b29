//! The result cache end to end: what a hit saves, how fast hits come under
//! concurrency, and what a cached megabyte costs in memory.
//!
//! 1. A small call (`echo` of sluice's sample server) through a sluice that
//!    caches it and through one that does not, interleaved call by call
//!    over stdio: p50/p99 of each and the ratio. The upstream answers in
//!    microseconds, so this is the least a hit can save; a slow upstream
//!    saves its whole time.
//! 2. 8 concurrent Streamable HTTP clients on one sluice, each making
//!    `--calls` calls: hit latency p50/p99, then the same with the cache
//!    off (in alternating order), and the ratio.
//! 3. Resident memory: `--entries` results of 480 kB (`inventory`, passed
//!    through whole so that only the cache keeps them) cached in one
//!    sluice, and the same calls through a sluice that caches nothing:
//!    the difference in resident growth per cached MB (the cache's own
//!    count of its bytes, their JSON size).
//!
//! Run with `cargo bench -p sluice --bench cache` (`-- --calls 2000
//! --entries 200`). Compare figures within one run: the machine is shared.

mod support;
use support::{arg, params, sluice_with_config};

use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use tokio::io::{AsyncBufReadExt, BufReader};

type Client = RunningService<RoleClient, ()>;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Resident kB of a process.
fn resident_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The sample server as the upstream `s`, with `tools` tables after it.
fn config(tools: &str, extra: &str) -> String {
    format!(
        "[upstreams.s]\ncommand = {:?}\nargs = [\"sample-server\"]\n\n{tools}\n{extra}",
        env!("CARGO_BIN_EXE_sluice")
    )
}

const CACHED_ECHO: &str = "[upstreams.s.tools.echo]\ncache = { ttl_s = 3600, idle_s = 3600 }\n";

async fn timed_echo(client: &Client) -> (Duration, bool) {
    let start = Instant::now();
    let r = client
        .call_tool(params(
            "echo",
            serde_json::json!({"text": "a small result"}),
        ))
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_eq!(r.is_error, Some(false));
    let hit = r.meta.is_some_and(|m| m.0.contains_key("sluice/cache"));
    (elapsed, hit)
}

fn summary(label: &str, sorted: &[Duration]) -> (Duration, Duration) {
    let (p50, p99) = (percentile(sorted, 0.5), percentile(sorted, 0.99));
    println!(
        "{label:<40} p50 {:>8.1} µs  p99 {:>8.1} µs  ({} calls)",
        micros(p50),
        micros(p99),
        sorted.len()
    );
    (p50, p99)
}

/// Prints the latencies of upstream calls and of hits, and their ratio.
fn compare(
    heading: &str,
    (upstream_label, mut upstream): (&str, Vec<Duration>),
    (hit_label, mut hits): (&str, Vec<Duration>),
) {
    upstream.sort();
    hits.sort();
    println!("{heading}");
    let (u50, u99) = summary(upstream_label, &upstream);
    let (h50, h99) = summary(hit_label, &hits);
    println!(
        "   hit / upstream: p50 {:.2}, p99 {:.2}",
        h50.as_secs_f64() / u50.as_secs_f64(),
        h99.as_secs_f64() / u99.as_secs_f64()
    );
}

/// 1: hits vs upstream calls, interleaved.
async fn hit_vs_upstream(dir: &std::path::Path, calls: usize) {
    let (cached, _) = sluice_with_config(dir, "cached", &config(CACHED_ECHO, "")).await;
    let (plain, _) = sluice_with_config(dir, "plain", &config("", "")).await;
    for _ in 0..200 {
        timed_echo(&cached).await;
        timed_echo(&plain).await;
    }
    let (mut hits, mut upstream) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..calls {
        let (a, b) = if i % 2 == 0 {
            (timed_echo(&cached).await, timed_echo(&plain).await)
        } else {
            let b = timed_echo(&plain).await;
            (timed_echo(&cached).await, b)
        };
        assert!(a.1 && !b.1, "the cached sluice hits, the other does not");
        hits.push(a.0);
        upstream.push(b.0);
    }
    compare(
        "1. a small call over stdio, interleaved:",
        ("   through sluice, upstream called", upstream),
        ("   through sluice, answered from cache", hits),
    );
    let _ = cached.cancel().await;
    let _ = plain.cancel().await;
}

/// `sluice --listen` with `toml`; the process and its URL.
async fn http_sluice(
    dir: &std::path::Path,
    name: &str,
    toml: &str,
) -> (tokio::process::Child, String) {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, toml).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--listen", "127.0.0.1:0", "--log-level", "info", "--config"])
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(url) = line.strip_prefix("sluice: serving MCP at ") {
            let url = url.trim().to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, url);
        }
    }
    panic!("sluice did not start serving");
}

/// Every call of `clients` clients making `calls` calls each at once.
async fn concurrent(clients: &[Client], calls: usize) -> Vec<Duration> {
    let runs = clients.iter().map(|c| {
        let peer = c.peer().clone();
        async move {
            let mut times = Vec::with_capacity(calls);
            for _ in 0..calls {
                let start = Instant::now();
                peer.call_tool(params(
                    "echo",
                    serde_json::json!({"text": "a small result"}),
                ))
                .await
                .unwrap();
                times.push(start.elapsed());
            }
            times
        }
    });
    let mut all: Vec<Duration> = futures::future::join_all(runs).await.concat();
    all.sort();
    all
}

/// 2: 8 concurrent HTTP clients, cache on and off.
async fn eight_clients(dir: &std::path::Path, calls: usize) {
    sluice::install_tls_provider();
    let (_cached_server, cached_url) =
        http_sluice(dir, "http-cached", &config(CACHED_ECHO, "")).await;
    let (_plain_server, plain_url) = http_sluice(dir, "http-plain", &config("", "")).await;
    let mut cached = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..8 {
        let transport =
            rmcp::transport::StreamableHttpClientTransport::from_uri(cached_url.clone());
        cached.push(().serve(transport).await.unwrap());
        let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(plain_url.clone());
        plain.push(().serve(transport).await.unwrap());
    }
    concurrent(&cached, 50).await;
    concurrent(&plain, 50).await;
    // Alternating blocks, so that neither always runs on a quieter machine.
    let (mut hits, mut upstream) = (Vec::new(), Vec::new());
    for block in 0..4 {
        if block % 2 == 0 {
            hits.extend(concurrent(&cached, calls / 4).await);
            upstream.extend(concurrent(&plain, calls / 4).await);
        } else {
            upstream.extend(concurrent(&plain, calls / 4).await);
            hits.extend(concurrent(&cached, calls / 4).await);
        }
    }
    compare(
        "2. 8 concurrent HTTP clients:",
        ("   upstream called", upstream),
        ("   answered from cache", hits),
    );
    for c in cached.into_iter().chain(plain) {
        let _ = c.cancel().await;
    }
}

/// Resident kB of a sluice before and after `entries` distinct calls of
/// `inventory` (the same 480 kB each, passed through whole; results that
/// grow call by call leave holes in the heap that no later one fits, and
/// about double the figure); the cache's figures at the end.
async fn grow(
    dir: &std::path::Path,
    name: &str,
    cache: &str,
    entries: usize,
) -> (u64, u64, serde_json::Value) {
    let tools = format!("[upstreams.s.tools.inventory]\nmode = \"passthrough\"\n{cache}");
    let (client, pid) = sluice_with_config(
        dir,
        name,
        &config(&tools, "[cache]\nmax_bytes = 4294967296\n"),
    )
    .await;
    client
        .call_tool(params("inventory", serde_json::json!({"count": 1})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = resident_kb(pid);
    for i in 0..entries {
        client
            .call_tool(params(
                "inventory",
                serde_json::json!({"count": 6000, "variant": i}),
            ))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = resident_kb(pid);
    let info = client
        .call_tool(params("sluice_info", serde_json::json!({})))
        .await
        .unwrap();
    let figures = info.meta.unwrap().0["sluice/cache_figures"]["total"].clone();
    let _ = client.cancel().await;
    (before, after, figures)
}

/// 3: resident memory per cached MB, against the same calls uncached (the
/// allocator keeps some of what passing 100 MB through leaves behind).
async fn memory(dir: &std::path::Path, entries: usize) {
    let (b0, a0, _) = grow(dir, "memory-plain", "", entries).await;
    let (b1, a1, figures) = grow(
        dir,
        "memory-cached",
        "cache = { ttl_s = 3600, idle_s = 3600 }\n",
        entries,
    )
    .await;
    assert_eq!(figures["misses"], entries + 1, "{figures}");
    let cached_mb = figures["bytes"].as_u64().unwrap() as f64 / 1e6;
    let mb = |kb: u64| kb as f64 * 1024.0 / 1e6;
    let (plain, cached) = (mb(a0.saturating_sub(b0)), mb(a1.saturating_sub(b1)));
    println!(
        "3. {entries} results of ~480 kB through sluice: resident +{plain:.0} MB uncached, +{cached:.0} MB cached; {} entries, {cached_mb:.1} MB of JSON cached: {:.2} MB resident per cached MB ({:.2} counting all growth)",
        figures["entries"],
        (cached - plain) / cached_mb,
        cached / cached_mb
    );
}

#[tokio::main]
async fn main() {
    let calls: usize = arg("--calls", "2000").parse().unwrap();
    let entries: usize = arg("--entries", "200").parse().unwrap();
    let dir = std::env::temp_dir().join(format!("sluice-bench-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    hit_vs_upstream(&dir, calls).await;
    eight_clients(&dir, calls).await;
    memory(&dir, entries).await;
    let _ = std::fs::remove_dir_all(&dir);
}
