//! The official MCP conformance suite (`@modelcontextprotocol/conformance`)
//! run against a fixture server that implements its scenarios
//! (`tests/fixtures/conformance_server.py`), once directly and once through
//! sluice: every check that passes directly must pass through sluice.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::support::*;

/// The suite's checks that passed, as `scenario/check` names, and the
/// total it printed.
async fn run_suite(url: &str, out: &Path) -> (BTreeSet<String>, usize) {
    let suite = peers().join("npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        Command::new(node())
            .arg(suite)
            .args(["server", "--url", url, "-o"])
            .arg(out)
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("the conformance suite finishes within 300 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let total = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no Total line in:\n{stdout}"))
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut passed = BTreeSet::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        // server-<scenario>-<timestamp>
        let scenario = scenario_of(&name);
        let checks: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("checks.json")).unwrap())
                .unwrap();
        for check in checks.as_array().unwrap() {
            if check["status"] == "SUCCESS" {
                passed.insert(format!("{scenario}/{}", check["id"].as_str().unwrap()));
            }
        }
    }
    (passed, total)
}

/// The scenario of a result folder named `server-<scenario>-<YYYY-MM-DDTHH…>`.
fn scenario_of(folder: &str) -> String {
    let name = folder.trim_start_matches("server-");
    let bytes = name.as_bytes();
    let stamp = (0..bytes.len()).find(|&i| {
        let d = |j: usize| bytes.get(i + j).is_some_and(u8::is_ascii_digit);
        bytes[i] == b'-'
            && (1..=4).all(d)
            && bytes.get(i + 5) == Some(&b'-')
            && bytes.get(i + 11) == Some(&b'T')
    });
    name[..stamp.unwrap_or(name.len())].to_owned()
}

/// Starts the fixture over HTTP on a free port; killed on drop.
async fn fixture_http() -> (tokio::process::Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python())
        .arg(repo().join("tests/fixtures/conformance_server.py"))
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fixture did not listen within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

async fn through_sluice_loses_no_check(sluice: &HttpSluice, direct_url: &str, name: &str) {
    let dir = TempDir::new(name);
    let (direct, direct_total) = run_suite(direct_url, &dir.0.join("direct")).await;
    assert!(
        direct_total >= 40,
        "the fixture passes only {direct_total} checks directly"
    );
    let (proxied, proxied_total) = run_suite(&sluice.url, &dir.0.join("sluice")).await;
    let lost: Vec<&String> = direct.difference(&proxied).collect();
    if !lost.is_empty() {
        let mut details = String::new();
        for entry in std::fs::read_dir(dir.0.join("sluice")).unwrap() {
            let checks =
                std::fs::read_to_string(entry.unwrap().path().join("checks.json")).unwrap();
            for check in serde_json::from_str::<serde_json::Value>(&checks)
                .unwrap()
                .as_array()
                .unwrap()
            {
                if check["status"] != "SUCCESS" {
                    details.push_str(&format!("{check}\n"));
                }
            }
        }
        panic!("checks that pass directly but not through sluice: {lost:?}\n{details}");
    }
    assert_eq!(proxied_total, direct_total);
}

#[tokio::test]
async fn conformance_suite_passes_through_sluice_to_a_stdio_upstream() {
    let (_fixture, direct_url) = fixture_http().await;
    let sluice = HttpSluice::start(&[], &conformance_fixture()).await;
    through_sluice_loses_no_check(&sluice, &direct_url, "conformance-stdio").await;
}

#[tokio::test]
async fn conformance_suite_passes_through_sluice_to_an_http_upstream() {
    let (_fixture, direct_url) = fixture_http().await;
    let dir = TempDir::new("conformance-http-config");
    let config = dir.file(
        "sluice.toml",
        &format!("[upstreams.conformance]\nurl = {direct_url:?}\n"),
    );
    let sluice = HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await;
    through_sluice_loses_no_check(&sluice, &direct_url, "conformance-http").await;
}
