//! `--admin`: `/metrics` read by Prometheus's own parser (Python's
//! `prometheus_client`) moves by exactly what clients did; the live page
//! loaded in a real headless Chromium shows a stored result, an operation
//! and the tokens saved after its own scripts ran; who may ask.

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::*;

/// A config serving the sample server as upstream `sample`, `echo` cached.
fn sample_config(dir: &TempDir, extra: &str) -> std::path::PathBuf {
    dir.file(
        "sluice.toml",
        &format!(
            "{}[upstreams.sample.tools.echo]\ncache = {{ ttl_s = 600 }}\n\n{extra}",
            toml_upstream("sample", &sample())
        ),
    )
}

/// Starts `sluice --listen … --admin 127.0.0.1:0 EXTRA…`; returns it and
/// the admin server's base URL, as sluice said it.
async fn start(extra: &[&str]) -> (HttpSluice, String) {
    let mut args = vec!["--admin", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let sluice = HttpSluice::start(&args, &[]).await;
    let base = admin_url(&sluice);
    (sluice, base)
}

async fn get(url: &str, token: Option<&str>) -> reqwest::Response {
    sluice::install_tls_provider();
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("the admin server answers")
}

/// `GET url` with one header `name: value` (and no token).
async fn get_with(url: &str, name: &str, value: &str) -> reqwest::Response {
    sluice::install_tls_provider();
    reqwest::Client::new()
        .get(url)
        .header(name, value)
        .send()
        .await
        .expect("the admin server answers")
}

/// `/metrics` parsed by `prometheus_client`'s text parser: each sample
/// keyed `name{"label":"value",…}` (labels sorted), and each family's type
/// as `TYPE name`.
async fn scrape(base: &str) -> (String, HashMap<String, f64>) {
    let response = get(&format!("{base}/metrics"), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.unwrap();
    const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    out["TYPE " + family.name] = family.type
    for s in family.samples:
        out[s.name + json.dumps(dict(sorted(s.labels.items())), separators=(",", ":"))] = s.value
print(json.dumps(out))
"#;
    let mut parser = tokio::process::Command::new(python())
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    use tokio::io::AsyncWriteExt as _;
    let mut stdin = parser.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    let out = parser.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "prometheus_client cannot parse /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: HashMap<String, Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut samples = HashMap::new();
    for (key, value) in parsed {
        match value {
            Value::Number(n) => {
                samples.insert(key, n.as_f64().unwrap());
            }
            Value::String(kind) => {
                samples.insert(format!("{key} {kind}"), 1.0);
            }
            other => panic!("{key}: {other}"),
        }
    }
    (text, samples)
}

/// The key of a sample in [`scrape`]'s map.
fn key(name: &str, labels: &[(&str, &str)]) -> String {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    format!("{name}{}", serde_json::to_string(&labels).unwrap())
}

fn sample_of(samples: &HashMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = key(name, labels);
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no sample {key}"))
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_move_by_exactly_what_clients_did() {
    let dir = TempDir::new("admin-metrics");
    let file = sample_config(
        &dir,
        "[operations]\nmax_running = 1\n[http]\nmax_body_mb = 1\n",
    );
    let (sluice, base) = start(&["--config", file.to_str().unwrap()]).await;
    let (_, before) = scrape(&base).await;
    assert_eq!(sample_of(&before, "sluice_sessions", &[]), 0.0);

    let (client, _) = connect_http(&sluice.url).await;
    client.list_all_tools().await.unwrap();
    let marker = format!("marker-{}", std::process::id());
    // Passed (and a cache miss), then the cache's hit.
    for _ in 0..2 {
        let echoed = call(&client, "echo", json!({"text": marker})).await;
        assert_eq!(first_text(&echoed), marker);
    }
    // A result that says `isError` (and a second miss: errors are never
    // cached).
    let refused_echo = call(&client, "echo", json!({})).await;
    assert_eq!(refused_echo.is_error, Some(true));
    // Stored.
    let stored = call(&client, "inventory", json!({"count": 20000})).await;
    let handle = stored_handle(&stored);
    let stored_tokens = meta(&stored, "sluice/stored").unwrap()["tokens"]
        .as_u64()
        .unwrap();
    // An error: a name no upstream lists (the only upstream takes it).
    let unknown = client
        .call_tool(rmcp::model::CallToolRequestParams::new("nosuch_tool"))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
    // An operation.
    let op = call(
        &client,
        "slow_task",
        json!({"seconds": 60, "_timeout_s": 0.5}),
    )
    .await;
    assert!(
        meta(&op, "sluice/operation").is_some(),
        "{:?}",
        first_text(&op)
    );
    // A second one, over `[operations] max_running`: not an operation,
    // its client waits for its result (counted as a refusal at the limit).
    let over = call(
        &client,
        "slow_task",
        json!({"seconds": 1, "quiet": true, "_timeout_s": 0.5}),
    )
    .await;
    assert_eq!(first_text(&over), "done after 1 s");
    // A body over `[http] max_body_mb`: 413.
    post_2_mib_refused(&sluice.url).await;
    // Reads of the stored result.
    call(&client, "sluice_read", json!({"handle": handle, "page": 2})).await;
    call(
        &client,
        "sluice_query",
        json!({"handle": handle, "filter": ".items | length"}),
    )
    .await;
    let refused = call(
        &client,
        "sluice_query",
        json!({"handle": handle, "filter": ".["}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "garden"}),
    )
    .await;

    let (text, after) = scrape(&base).await;
    // Every family, with its type (a vector without series yet, as
    // `sluice_tool_calls` before any call, is not written).
    for (family, kind) in [
        ("sluice_tool_calls", "counter"),
        ("sluice_tool_call_duration_seconds", "histogram"),
        ("sluice_tokens_saved", "counter"),
        ("sluice_stored_results", "gauge"),
        ("sluice_store_bytes", "gauge"),
        ("sluice_store_healthy", "gauge"),
        ("sluice_pages_served", "counter"),
        ("sluice_queries", "counter"),
        ("sluice_searches", "counter"),
        ("sluice_operations", "gauge"),
        ("sluice_cache_hits", "counter"),
        ("sluice_cache_misses", "counter"),
        ("sluice_cache_bytes", "gauge"),
        ("sluice_upstream_up", "gauge"),
        ("sluice_upstream_restarts", "counter"),
        ("sluice_sessions", "gauge"),
        ("sluice_jq_workers", "gauge"),
        ("sluice_refusals", "counter"),
    ] {
        assert!(
            after.contains_key(&format!("TYPE {family} {kind}")),
            "{family} is not a {kind}:\n{text}"
        );
    }
    let moved = |name: &str, labels: &[(&str, &str)]| {
        let key = key(name, labels);
        after.get(&key).copied().unwrap_or(0.0) - before.get(&key).copied().unwrap_or(0.0)
    };
    // Every call counted once, under its tool and outcome; nothing else.
    let expected: HashMap<(String, String, String), f64> = [
        ("sample", "echo", "passed"),
        ("sample", "echo", "cached"),
        ("sample", "echo", "error"),
        ("sample", "inventory", "stored"),
        ("sample", "slow_task", "operation"),
        ("sample", "slow_task", "passed"),
        ("sample", "(unknown)", "error"),
    ]
    .iter()
    .map(|(u, t, o)| ((u.to_string(), t.to_string(), o.to_string()), 1.0))
    .collect();
    let mut seen = 0;
    for key in after
        .keys()
        .filter(|k| k.starts_with("sluice_tool_calls_total{"))
    {
        let labels: HashMap<String, String> =
            serde_json::from_str(&key["sluice_tool_calls_total".len()..]).unwrap();
        let id = (
            labels["upstream"].clone(),
            labels["tool"].clone(),
            labels["outcome"].clone(),
        );
        let want = expected.get(&id).copied().unwrap_or(0.0);
        let got = after[key] - before.get(key).copied().unwrap_or(0.0);
        assert_eq!(got, want, "{key}\n{text}");
        seen += usize::from(want > 0.0);
    }
    assert_eq!(seen, expected.len(), "{text}");
    assert_eq!(
        moved(
            "sluice_tool_call_duration_seconds_count",
            &[("upstream", "sample"), ("tool", "echo")]
        ),
        3.0
    );
    assert_eq!(moved("sluice_cache_hits_total", &[]), 1.0);
    assert_eq!(moved("sluice_cache_misses_total", &[]), 2.0);
    assert_eq!(moved("sluice_pages_served_total", &[]), 1.0);
    assert_eq!(
        moved("sluice_queries_total", &[("outcome", "answered")]),
        1.0
    );
    assert_eq!(
        moved("sluice_queries_total", &[("outcome", "refused")]),
        1.0
    );
    assert_eq!(
        moved("sluice_queries_total", &[("outcome", "stopped")]),
        0.0
    );
    assert_eq!(moved("sluice_searches_total", &[]), 1.0);
    // Each refusal at a limit, under its key; every key there from the
    // start.
    for (limit, refused) in [
        ("max_running", 1.0),
        ("max_body_mb", 1.0),
        ("max_requests_in_flight", 0.0),
        ("requests_per_minute", 0.0),
        ("max_connections", 0.0),
        ("max_sessions", 0.0),
        ("max_sessions_per_principal", 0.0),
    ] {
        let labels = [("limit", limit)];
        assert_eq!(
            before.get(&key("sluice_refusals_total", &labels)),
            Some(&0.0),
            "{limit}"
        );
        assert_eq!(moved("sluice_refusals_total", &labels), refused, "{limit}");
    }
    // The tokens the stored result kept out of the context, less its
    // answer's.
    let saved = moved("sluice_tokens_saved_total", &[]);
    assert!(
        saved > 0.9 * stored_tokens as f64 && saved < stored_tokens as f64,
        "{saved} of {stored_tokens}"
    );
    assert_eq!(sample_of(&after, "sluice_stored_results", &[]), 1.0);
    assert!(sample_of(&after, "sluice_store_bytes", &[]) > 1_000_000.0);
    assert_eq!(sample_of(&after, "sluice_store_healthy", &[]), 1.0);
    assert_eq!(
        sample_of(&after, "sluice_operations", &[("status", "running")]),
        1.0
    );
    assert_eq!(sample_of(&after, "sluice_sessions", &[]), 1.0);
    assert_eq!(
        sample_of(&after, "sluice_upstream_up", &[("upstream", "sample")]),
        1.0
    );
    assert_eq!(
        sample_of(
            &after,
            "sluice_upstream_restarts_total",
            &[("upstream", "sample")]
        ),
        0.0
    );
    let workers = sample_of(&after, "sluice_jq_workers", &[("state", "idle")])
        + sample_of(&after, "sluice_jq_workers", &[("state", "busy")]);
    assert!(workers >= 1.0, "{text}");
    // No label carries a handle or an argument.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        for bad in [handle.as_str(), &marker, "nosuch_tool", "garden", ".items"] {
            assert!(!line.contains(bad), "{bad} in {line}");
        }
    }

    // The page's data says the same.
    let state: Value = get(&format!("{base}/api/state"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(state["store"]["newest"][0]["handle"], handle.as_str());
    assert_eq!(state["store"]["newest"][0]["tool"], "inventory");
    assert_eq!(state["store"]["results"], 1);
    assert_eq!(state["operations"][0]["tool"], "slow_task");
    assert_eq!(state["operations"][0]["status"], "running");
    assert_eq!(state["calls"]["stored"], 1);
    // Refusals at a limit, by its key, each listed.
    assert_eq!(
        (
            &state["refusals"]["max_running"],
            &state["refusals"]["max_body_mb"],
            &state["refusals"]["max_connections"]
        ),
        (&json!(1), &json!(1), &json!(0))
    );
    // `echo` without its text and an unknown tool (the call kept in the
    // foreground at `max_running` passed).
    assert_eq!(state["calls"]["error"], 2);
    assert_eq!(
        state["tokens_saved"].as_f64().unwrap(),
        sample_of(&after, "sluice_tokens_saved_total", &[])
    );
    assert!(
        state["sessions"][0]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("20")),
        "{state}"
    );
    assert!(state["sessions"][0]["client"].is_string(), "{state}");
    assert_eq!(state["upstreams"][0]["name"], "sample");
    assert_eq!(state["upstreams"][0]["up"], true);
    assert_eq!(state["cache"]["total"]["hits"], 1);
    assert!(
        state["tokens_saved_history"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "{state}"
    );
    client.cancel().await.ok();
}

/// Where Debian's Chromium is (`tests/peers/install.sh` installs it, with
/// the other peers, on first use: a test run by itself on a fresh machine
/// waits for it rather than finding none).
fn chromium() -> std::path::PathBuf {
    peers();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| {
            std::env::var_os("PATH")
                .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(move |dir| dir.join(name))
        })
        .find(|path| path.is_file())
        .expect("no chromium on PATH: run tests/peers/install.sh")
}

#[tokio::test]
async fn the_live_page_shows_a_stored_result_an_operation_and_the_tokens_saved_in_chromium() {
    let dir = TempDir::new("admin-page");
    let file = sample_config(&dir, "[http]\nmax_body_mb = 1\n");
    let (sluice, base) = start(&["--config", file.to_str().unwrap()]).await;
    let (client, _) = connect_http(&sluice.url).await;
    // A body refused at `max_body_mb`, for the refusals' card.
    post_2_mib_refused(&sluice.url).await;
    let stored = call(&client, "inventory", json!({"count": 20000})).await;
    let handle = stored_handle(&stored);
    call(
        &client,
        "slow_task",
        json!({"seconds": 120, "_timeout_s": 1}),
    )
    .await;
    // Progress has come in for the operation.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let state = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress of the operation within 30 s"
        );
        let state: Value = get(&format!("{base}/api/state"), None)
            .await
            .json()
            .await
            .unwrap();
        if state["operations"][0]["progress"]["total"].is_number() {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let saved = state["tokens_saved"].as_u64().unwrap();
    assert!(saved > 0);

    let profile = TempDir::new("admin-chromium");
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--virtual-time-budget=10000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.0.display()))
            .arg(format!("{base}/"))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium within 90 s")
    .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("data-updated="),
        "the page's script did not render the state: {}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The stored result: its handle and tool, in its row.
    let row = dom
        .split("<tr")
        .find(|r| r.contains(&format!("data-handle=\"{handle}\"")))
        .unwrap_or_else(|| panic!("no row of {handle}:\n{dom}"));
    assert!(
        row.contains("stored-row") && row.contains("inventory"),
        "{row}"
    );
    // The operation: its tool and progress.
    let op = dom
        .split("<tr")
        .find(|r| r.contains("operation-row"))
        .unwrap_or_else(|| panic!("no operation row:\n{dom}"));
    assert!(op.contains("slow_task"), "{op}");
    let progress = op
        .split("progress-text")
        .nth(1)
        .unwrap_or_else(|| panic!("no progress text: {op}"));
    assert!(progress.contains(" / 480"), "{op}");
    // The tokens saved, as the page writes them.
    let headline = dom
        .split("id=\"tokens-saved\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no tokens-saved:\n{dom}"));
    assert!(
        headline[..headline.find('<').unwrap()].contains(&sluice_core::format::group(saved)),
        "{} in {}",
        sluice_core::format::group(saved),
        &headline[..200.min(headline.len())]
    );
    // The refusal, by the key of its limit.
    let refusals = dom
        .split("id=\"refusals-total\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no refusals-total:\n{dom}"));
    assert!(
        refusals.starts_with(">1<"),
        "{}",
        &refusals[..200.min(refusals.len())]
    );
    let detail = refusals
        .split("id=\"refusals-detail\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no refusals-detail:\n{dom}"));
    assert!(
        detail[..detail.find("</div>").unwrap()].contains("max_body_mb"),
        "{}",
        &detail[..200.min(detail.len())]
    );
    client.cancel().await.ok();
}

/// POSTs 2 MiB to `url`, which `[http] max_body_mb = 1` refuses: 413.
async fn post_2_mib_refused(url: &str) {
    sluice::install_tls_provider();
    let too_large = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(vec![b' '; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(too_large.status(), 413);
}

/// `http://HOST:PORT` of `url`.
fn base_of(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    format!("http://{}", &rest[..rest.find('/').unwrap_or(rest.len())])
}

/// An `initialize` to `/mcp` with bearer `token`, as client `name`.
async fn initialize_as(sluice: &HttpSluice, token: &str, name: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/mcp", base_of(&sluice.url)))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": name, "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn with_auth_the_data_needs_a_token_and_without_it_only_loopback_hosts_are_served() {
    // With [auth]: the data needs a token of it; the page (no data) not.
    let dir = TempDir::new("admin-auth");
    let token = "admin-test-token-1";
    let file = sample_config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"ops\", sha256 = \"{}\" }} ]\n",
            sha256_hex(token)
        ),
    );
    let (_sluice, base) = start(&["--config", file.to_str().unwrap()]).await;
    for path in ["/metrics", "/api/state"] {
        let refused = get(&format!("{base}{path}"), None).await;
        assert_eq!(refused.status(), 401, "{path}");
        assert!(
            refused.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer"),
            "{path}"
        );
        let wrong = get(&format!("{base}{path}"), Some("not-the-token")).await;
        assert_eq!(wrong.status(), 401, "{path}");
        let served = get(&format!("{base}{path}"), Some(token)).await;
        assert_eq!(served.status(), 200, "{path}");
    }
    // Other forms of Authorization, other methods: refused, and the admin
    // server goes on serving.
    let basic = get_with(
        &format!("{base}/metrics"),
        "authorization",
        "Basic b3BzOnNlY3JldA==",
    )
    .await;
    assert_eq!(basic.status(), 401);
    let posted = reqwest::Client::new()
        .post(format!("{base}/metrics"))
        .bearer_auth(token)
        .body("x".repeat(100_000))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), 405);
    assert_eq!(
        get(&format!("{base}/metrics"), Some(token)).await.status(),
        200
    );
    // A session's principal is shown to the operator.
    let opened = initialize_as(&_sluice, token, "ops-console").await;
    assert_eq!(opened.status(), 200);
    let state: Value = get(&format!("{base}/api/state"), Some(token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(state["sessions"][0]["principal"], "ops", "{state}");
    assert_eq!(state["sessions"][0]["client"], "ops-console", "{state}");

    let page = get(&format!("{base}/"), None).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let policy = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    let html = page.text().await.unwrap();
    // The only URL in it names SVG's namespace.
    assert!(
        !html
            .replace("http://www.w3.org/2000/svg", "")
            .contains("http://")
            && !html.contains("https://")
            && !html.contains("//cdn"),
        "the page loads nothing from elsewhere"
    );

    // Without [auth]: loopback hosts only (DNS rebinding gets nothing).
    let open = TempDir::new("admin-open");
    let file = sample_config(&open, "");
    let (_sluice, base) = start(&["--config", file.to_str().unwrap()]).await;
    let rebinding = get_with(&format!("{base}/api/state"), "host", "evil.example:80").await;
    assert_eq!(rebinding.status(), 403);
    let other_site = get_with(&format!("{base}/metrics"), "origin", "http://evil.example").await;
    assert_eq!(other_site.status(), 403);
    assert_eq!(get(&format!("{base}/api/state"), None).await.status(), 200);
    assert_eq!(get(&format!("{base}/nothing"), None).await.status(), 404);

    // A non-loopback address without [auth] is refused at start; `--admin`
    // with a subcommand too.
    let run = |args: Vec<String>| async move {
        let out = tokio::process::Command::new(sluice())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut args: Vec<String> = ["--admin", "0.0.0.0:0", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(sample());
    let (code, err) = run(args).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--admin 0.0.0.0:0 is not a loopback address and no [auth] is configured"),
        "{err}"
    );
    let unguarded = open.file(
        "unguarded.toml",
        &format!(
            "{}[admin]\nlisten = \"0.0.0.0:9464\"\n",
            toml_upstream("sample", &sample())
        ),
    );
    let (code, err) = run(vec!["--config".into(), unguarded.display().to_string()]).await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--admin 0.0.0.0:9464 is not a loopback address"),
        "{err}"
    );
    let (code, err) = run(["--admin", "127.0.0.1:0", "demo"]
        .iter()
        .map(|s| s.to_string())
        .collect())
    .await;
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--admin applies when sluice serves clients"),
        "{err}"
    );

    // `[admin] listen` in the config starts it too.
    let port = free_port();
    let configured = TempDir::new("admin-config");
    let file = configured.file(
        "sluice.toml",
        &format!(
            "{}[admin]\nlisten = \"127.0.0.1:{port}\"\n",
            toml_upstream("sample", &sample())
        ),
    );
    let sluice = HttpSluice::start(&["--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(admin_url(&sluice), format!("http://127.0.0.1:{port}"));
    let (_, samples) = scrape(&admin_url(&sluice)).await;
    assert_eq!(sample_of(&samples, "sluice_sessions", &[]), 0.0);
}

/// `[admin] principals`: only the principals it names may read the data;
/// another principal of `[auth]` gets 403 (its token is good: 401 would
/// tell it to get another), and keeps using `/mcp`.
#[tokio::test]
async fn admin_principals_keep_the_data_to_those_named() {
    let dir = TempDir::new("admin-principals");
    let (ops, alice) = ("admin-principals-ops", "admin-principals-alice");
    let file = sample_config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"ops\", sha256 = \"{}\" }}, {{ principal = \"alice\", sha256 = \"{}\" }} ]\n\n[admin]\nprincipals = [\"ops\"]\n",
            sha256_hex(ops),
            sha256_hex(alice)
        ),
    );
    let (sluice, base) = start(&["--config", file.to_str().unwrap()]).await;
    for path in ["/metrics", "/api/state"] {
        let url = format!("{base}{path}");
        assert_eq!(get(&url, Some(ops)).await.status(), 200, "{path}");
        let refused = get(&url, Some(alice)).await;
        assert_eq!(refused.status(), 403, "{path}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"], "forbidden", "{body}");
        let why = body["error_description"].as_str().unwrap();
        assert!(
            why.contains(r#"principal "alice" may not read"#) && !why.contains("ops"),
            "{why}"
        );
        assert_eq!(get(&url, Some("no-such-token")).await.status(), 401);
        assert_eq!(get(&url, None).await.status(), 401);
    }
    // The page holds no data: served to anyone.
    assert_eq!(get(&format!("{base}/"), None).await.status(), 200);
    // alice's token is still good for /mcp.
    assert_eq!(initialize_as(&sluice, alice, "alice").await.status(), 200);
    let log = sluice.stderr.lock().unwrap().join("\n");
    assert!(
        log.contains("not one of [admin] principals") && !log.contains(alice),
        "{log}"
    );
}
