//! `sluice_query` end to end, side by side with the jq engines a user or
//! the seed design would use, on the same documents in one run.
//!
//! For each size (10 and 100 MB of compact JSON: the sample server's
//! `inventory`, stored by sluice) and each filter, the median of `--reps`
//! runs of:
//! - `sluice warm`: `sluice_query` through a sluice over stdio, the document
//!   kept parsed in a worker (every query after the first on a handle);
//! - `sluice cold`: the same through a sluice with `[query] cache_mb = 0`,
//!   so each query sends the document to a worker and parses it;
//! - `jaq CLI`: `jaq -c FILTER FILE` (jaq on `PATH`, or `$JAQ`);
//! - `jq 1.6`: `jq -c FILTER FILE` (Debian's; `$JQ`);
//! - `seed (libjq)`: Python's `jq` package (libjq 1.8) with the result
//!   text already in memory, `jq.compile(f).input_text(text).all()`: what
//!   the seed design did on every query (`$SEED_PYTHON`, default the
//!   peers' venv; process start not counted).
//!
//! Then, in process, what jaq itself costs: reading the document into its
//! values (`Parsed::json`) and running each filter over them.
//!
//! Run with `cargo bench -p sluice --bench query` (optionally `-- --sizes
//! 10,100 --reps 3`). A tool that is missing is reported and skipped.
//! Compare ratios within one run: the machine is shared.

mod support;
use support::{arg, params, sluice_with_config};

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::service::{RoleClient, RunningService};
use sluice_core::query::{OutputLimits, Parsed, run_parsed};

type Client = RunningService<RoleClient, ()>;

/// The filters of the issue, over the inventory's `items` array.
const FILTERS: [&str; 3] = [
    ".items[] | .name",
    ".items | map(select(.stock > 5))",
    "[.. | numbers] | add",
];

fn sluice() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// A sluice in front of its own sample server, with room for big queries;
/// its process id.
async fn gateway(dir: &Path, name: &str, cache_mb: u64) -> (Client, u32) {
    let toml = format!(
        "[upstreams.sample]\ncommand = {:?}\nargs = [\"sample-server\"]\n\n[store]\nmax_bytes = 4294967296\n\n[query]\ntimeout_s = 600\nmax_memory_mb = 16384\nmax_outputs = 100000000\nmax_output_mb = 4096\ncache_mb = {cache_mb}\n",
        sluice()
    );
    sluice_with_config(dir, name, &toml).await
}

/// Resident memory of the `jq-worker` children of `parent`, in MB.
fn workers_rss(parent: u32) -> Vec<u64> {
    let mut rss = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        };
        if field("PPid:") == Some(u64::from(parent))
            && cmdline.split(|&b| b == 0).any(|a| a == b"jq-worker")
        {
            rss.push(field("VmRSS:").unwrap_or(0) / 1024);
        }
    }
    rss
}

/// Stores `inventory {count}` through `client`; its handle.
async fn store(client: &Client, count: usize) -> String {
    let stored = client
        .call_tool(params("inventory", serde_json::json!({ "count": count })))
        .await
        .unwrap();
    let meta = stored.meta.expect("a stored answer has _meta");
    meta.0["sluice/stored"]["handle"]
        .as_str()
        .expect("the result was stored")
        .to_owned()
}

/// One `sluice_query`: its time and number of outputs.
async fn query(client: &Client, handle: &str, filter: &str) -> (Duration, u64) {
    let start = Instant::now();
    let result = client
        .call_tool(params(
            "sluice_query",
            serde_json::json!({"handle": handle, "filter": filter}),
        ))
        .await
        .unwrap();
    let elapsed = start.elapsed();
    assert_ne!(
        result.is_error,
        Some(true),
        "sluice_query {filter}: {:?}",
        result.content
    );
    let outputs = result.meta.unwrap().0["sluice/query"]["outputs"]
        .as_u64()
        .unwrap();
    (elapsed, outputs)
}

/// One CLI run: its time and number of output lines.
fn cli(program: &Path, filter: &str, file: &Path) -> Option<(Duration, u64)> {
    let start = Instant::now();
    let out = Command::new(program)
        .arg("-c")
        .arg(filter)
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return None;
    }
    Some((
        elapsed,
        out.stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .count() as u64,
    ))
}

/// Where a program is: `$VAR`, else the first of `candidates` that exists.
fn find(var: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p));
    }
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| {
            let name = candidates.first()?;
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|dir| Path::new(dir).join(Path::new(name).file_name().unwrap()))
                .find(|p| p.exists())
        })
}

/// The seed approach: a Python process holding the text, timing libjq.
struct Seed {
    child: std::process::Child,
    lines: BufReader<std::process::ChildStdout>,
}

const SEED_SCRIPT: &str = r#"
import json, sys, time
import jq
text = open(sys.argv[1]).read()
print("ready", flush=True)
for line in sys.stdin:
    f = json.loads(line)
    t = time.perf_counter()
    out = jq.compile(f).input_text(text).all()
    print(json.dumps([time.perf_counter() - t, len(out)]), flush=True)
"#;

impl Seed {
    fn start(python: &Path, file: &Path) -> Option<Self> {
        let mut child = Command::new(python)
            .arg("-c")
            .arg(SEED_SCRIPT)
            .arg(file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let mut lines = BufReader::new(child.stdout.take()?);
        let mut ready = String::new();
        lines.read_line(&mut ready).ok()?;
        (ready.trim() == "ready").then_some(Self { child, lines })
    }

    fn run(&mut self, filter: &str) -> Option<(Duration, u64)> {
        let stdin = self.child.stdin.as_mut()?;
        writeln!(stdin, "{}", serde_json::to_string(filter).ok()?).ok()?;
        let mut line = String::new();
        self.lines.read_line(&mut line).ok()?;
        let (secs, n): (f64, u64) = serde_json::from_str(&line).ok()?;
        Some((Duration::from_secs_f64(secs), n))
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = arg("--sizes", "10,100")
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes takes MB, e.g. 10,100"))
        .collect();
    let reps: usize = arg("--reps", "3").parse().expect("--reps takes a number");
    let dir = std::env::temp_dir().join(format!("sluice-query-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let jaq = find("JAQ", &["jaq"]);
    let jq = find("JQ", &["/usr/bin/jq"]);
    let python = find(
        "SEED_PYTHON",
        &[&format!(
            "{}/py/bin/python",
            std::env::var("SLUICE_PEERS").unwrap_or_default()
        )],
    );
    for (name, found) in [("jaq CLI", &jaq), ("jq 1.6", &jq), ("python", &python)] {
        if found.is_none() {
            println!("note: {name} not found, skipped");
        }
    }

    let (warm, warm_pid) = gateway(&dir, "warm", 256).await;
    let (cold, _) = gateway(&dir, "cold", 0).await;
    // Bytes per item, to size the documents.
    let per_item = sluice::sample_server::inventory(1000, None)
        .to_string()
        .len()
        / 1000;
    for mb in sizes {
        let count = mb * 1_000_000 / per_item;
        let text = sluice::sample_server::inventory(count, None).to_string();
        let file = dir.join(format!("inventory-{mb}MB.json"));
        std::fs::write(&file, &text).unwrap();
        println!(
            "\n== {:.1} MB of JSON, {count} items; median of {reps} runs, seconds",
            text.len() as f64 / 1e6
        );
        let warm_handle = store(&warm, count).await;
        let cold_handle = store(&cold, count).await;
        // The first query on a handle sends and parses the document.
        let (first, _) = query(&warm, &warm_handle, ".items | length").await;
        println!(
            "first sluice_query on the handle (send + parse + run): {:.3}",
            first.as_secs_f64()
        );

        let mut seed = python.as_ref().and_then(|p| Seed::start(p, &file));
        if python.is_some() && seed.is_none() {
            println!("note: Python's `jq` package is missing (pip install jq): seed skipped");
        }
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>10} {:>13} | {:>9} {:>9} {:>9}",
            "filter",
            "sluice",
            "sluice",
            "jaq CLI",
            "jq 1.6",
            "seed (libjq)",
            "jq 1.6 /",
            "seed /",
            "jq 1.6 /"
        );
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>10} {:>13} | {:>9} {:>9} {:>9}",
            "", "warm", "cold", "", "", "", "warm", "warm", "cold"
        );
        let parsed_start = Instant::now();
        let parsed = Parsed::json(text.as_bytes()).unwrap();
        let parse_time = parsed_start.elapsed();
        let mut in_process = Vec::new();
        for filter in FILTERS {
            let mut times: [Vec<Duration>; 5] = Default::default();
            let mut counts: [Option<u64>; 5] = [None; 5];
            for _ in 0..reps {
                let (t, n) = query(&warm, &warm_handle, filter).await;
                times[0].push(t);
                counts[0] = Some(n);
                let (t, n) = query(&cold, &cold_handle, filter).await;
                times[1].push(t);
                counts[1] = Some(n);
                for (i, program) in [(2, &jaq), (3, &jq)] {
                    if let Some((t, n)) = program.as_ref().and_then(|p| cli(p, filter, &file)) {
                        times[i].push(t);
                        counts[i] = Some(n);
                    }
                }
                if let Some((t, n)) = seed.as_mut().and_then(|s| s.run(filter)) {
                    times[4].push(t);
                    counts[4] = Some(n);
                }
            }
            let agreed: Vec<u64> = counts.iter().flatten().copied().collect();
            assert!(
                agreed.windows(2).all(|w| w[0] == w[1]),
                "{filter}: the engines disagree on the number of outputs: {counts:?}"
            );
            let medians: Vec<Option<f64>> = times
                .into_iter()
                .map(|t| (!t.is_empty()).then(|| median(t).as_secs_f64()))
                .collect();
            let show = |m: Option<f64>| m.map_or("—".to_owned(), |s| format!("{s:.3}"));
            let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) => format!("{:.1}×", a / b),
                _ => "—".to_owned(),
            };
            println!(
                "{filter:<34} {:>10} {:>10} {:>10} {:>10} {:>13} | {:>9} {:>9} {:>9}",
                show(medians[0]),
                show(medians[1]),
                show(medians[2]),
                show(medians[3]),
                show(medians[4]),
                ratio(medians[3], medians[0]),
                ratio(medians[4], medians[0]),
                ratio(medians[3], medians[1]),
            );
            let limits = OutputLimits {
                max_outputs: usize::MAX,
                max_bytes: usize::MAX,
            };
            let run_start = Instant::now();
            let outputs = run_parsed(filter, &parsed, limits).unwrap();
            in_process.push((filter, run_start.elapsed(), outputs.count));
        }
        println!(
            "resident memory of the warm gateway's jq workers: {:?} MB (document: {} MB)",
            workers_rss(warm_pid),
            text.len() / 1_000_000
        );
        println!(
            "in process: reading the document into jaq values {:.3} s; then",
            parse_time.as_secs_f64()
        );
        for (filter, t, n) in in_process {
            println!("  {filter:<34} {:.3} s ({n} outputs)", t.as_secs_f64());
        }
        drop(parsed);
        let _ = std::fs::remove_file(&file);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = warm.cancel().await;
    let _ = cold.cancel().await;
}
