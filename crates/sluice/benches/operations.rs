//! Many operations at once on one sluice: what each costs in memory, how
//! fast `sluice_result` answers while they run, and whether waiting costs
//! CPU.
//!
//! One sluice over stdio in front of its own sample server. `--ops N`
//! (default 1000) calls of `slow_task {"seconds": 5, "_timeout_s": 0.05}`
//! are made at once; each becomes an operation. Then:
//! - resident memory of the sluice process before and with the operations
//!   running, per operation;
//! - `sluice_result` (no wait) latency, p50/p99 over `--polls` calls while
//!   they run;
//! - the CPU time sluice uses while N `sluice_result {wait_s: 30}` calls
//!   wait for the ends (the upstream's progress notifications, 4 a second
//!   per operation, are part of it);
//! - every operation completes.
//!
//! Run with `cargo bench -p sluice --bench operations` (`-- --ops 1000
//! --polls 300`; `--quiet` makes the tool report no progress, so that the
//! CPU figure is waiting alone). Compare figures within one run: the
//! machine is shared.

mod support;
use support::{arg, params, sluice_with_config};

use std::time::{Duration, Instant};

/// (resident kB, CPU ticks user + system) of a process.
fn usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses): utime is
    // the 14th field of the line, stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<u64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    (
        rss,
        fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let ops: usize = arg("--ops", "1000").parse().expect("--ops N");
    let polls: usize = arg("--polls", "300").parse().expect("--polls N");
    let quiet = std::env::args().any(|a| a == "--quiet");
    let dir = std::env::temp_dir().join(format!("sluice-ops-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A config raising the limits for this many operations.
    let toml = format!(
        "[upstreams.sample]\ncommand = {:?}\nargs = [\"sample-server\"]\n\n[operations]\nmax_running = {ops}\nmax_running_total = {ops}\n",
        env!("CARGO_BIN_EXE_sluice")
    );
    let (client, pid) = sluice_with_config(&dir, "sluice", &toml).await;
    // Warm up: the upstream started, one call made.
    client
        .call_tool(params("echo", serde_json::json!({"text": "warm"})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (rss_before, _) = usage(pid);

    let start = Instant::now();
    let calls = (0..ops).map(|_| {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(params(
                "slow_task",
                serde_json::json!({"seconds": 5, "quiet": quiet, "_timeout_s": 0.05}),
            ))
            .await
            .unwrap()
        })
    });
    let mut ids = Vec::with_capacity(ops);
    for call in futures::future::join_all(calls).await {
        let result = call.unwrap();
        let op = &result.meta.expect("an operation has _meta").0["sluice/operation"];
        assert_eq!(op["status"], "running", "{op}");
        ids.push(op["id"].as_str().unwrap().to_owned());
    }
    let started_in = start.elapsed();
    let (rss_running, _) = usage(pid);
    println!(
        "{ops} operations started in {:.2} s; sluice resident memory {} MB before, {} MB with them running: {:.1} kB per operation",
        started_in.as_secs_f64(),
        rss_before / 1024,
        rss_running / 1024,
        (rss_running.saturating_sub(rss_before)) as f64 / ops as f64
    );

    let mut latencies = Vec::with_capacity(polls);
    for i in 0..polls {
        let id = &ids[i % ids.len()];
        let t = Instant::now();
        let r = client
            .call_tool(params(
                "sluice_result",
                serde_json::json!({"operation": id}),
            ))
            .await
            .unwrap();
        latencies.push(t.elapsed());
        assert_eq!(r.is_error, Some(false));
    }
    latencies.sort();
    println!(
        "sluice_result while they run: p50 {:.0} µs, p99 {:.0} µs ({polls} calls)",
        percentile(&latencies, 0.5).as_secs_f64() * 1e6,
        percentile(&latencies, 0.99).as_secs_f64() * 1e6
    );

    let (_, cpu_before) = usage(pid);
    let wait_start = Instant::now();
    let waits = ids.iter().map(|id| {
        let peer = client.peer().clone();
        let id = id.clone();
        tokio::spawn(async move {
            peer.call_tool(params(
                "sluice_result",
                serde_json::json!({"operation": id, "wait_s": 30}),
            ))
            .await
            .unwrap()
        })
    });
    let mut completed = 0;
    for r in futures::future::join_all(waits).await {
        let r = r.unwrap();
        if r.meta.unwrap().0["sluice/operation"]["status"] == "completed" {
            completed += 1;
        }
    }
    let waited = wait_start.elapsed();
    let (rss_end, cpu_after) = usage(pid);
    let ticks = 100.0; // USER_HZ on Linux
    println!(
        "{ops} sluice_result calls waited {:.2} s for the ends; sluice used {:.2} s of CPU meanwhile ({:.1} % of one core; {}); {completed}/{ops} completed; resident {} MB after",
        waited.as_secs_f64(),
        (cpu_after - cpu_before) as f64 / ticks,
        (cpu_after - cpu_before) as f64 / ticks / waited.as_secs_f64() * 100.0,
        if quiet {
            "the tool reported no progress"
        } else {
            "relaying 4 progress notifications a second per operation included"
        },
        rss_end / 1024
    );
    assert_eq!(completed, ops, "every operation completed");
    let _ = client.cancel().await;
    let _ = std::fs::remove_dir_all(&dir);
}
