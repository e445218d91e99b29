//! `[store] backend = "redis"`: two sluice instances share stored results
//! and cursors through a real `redis-server` (Debian's, started here on a
//! free port), for rmcp's and the Python SDK's stateless clients; a killed
//! instance's handles live on; a Redis outage fails only what needs the
//! store, clearly, and sluice recovers by itself. They share the cache
//! (one upstream call for both) and operations (collected, waited for and
//! cancelled through either; failed when their instance dies).

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

/// A `redis-server` of the test's own, without persistence; killed on drop.
pub(crate) struct Redis {
    port: u16,
    child: Option<tokio::process::Child>,
}

impl Redis {
    pub(crate) async fn start() -> Self {
        // Debian's redis-server comes with the peers (installed on first use).
        peers();
        let mut redis = Self {
            port: free_port(),
            child: None,
        };
        redis.start_again().await;
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts it (again) on its port, and waits until it answers.
    async fn start_again(&mut self) {
        let child = tokio::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server (Debian's: tests/peers/install.sh installs it)");
        self.child = Some(child);
        for _ in 0..100 {
            if self.ping().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not answer on port {}", self.port);
    }

    async fn ping(&self) -> bool {
        let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        let mut answer = [0u8; 7];
        stream.write_all(b"PING\r\n").await.is_ok()
            && stream.read_exact(&mut answer).await.is_ok()
            && &answer == b"+PONG\r\n"
    }

    /// A connection of the test's own, to look at or alter what sluice keeps.
    async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }

    async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().await.unwrap();
        }
    }
}

/// A config serving the sample server, its results kept in `redis`.
fn redis_config(temp: &TempDir, redis: &Redis) -> std::path::PathBuf {
    redis_config_of(temp, redis, &toml_upstream("sample", &sample()))
}

/// A config serving `upstreams` (TOML), its state kept in `redis`.
fn redis_config_of(temp: &TempDir, redis: &Redis, upstreams: &str) -> std::path::PathBuf {
    let secret = temp.0.join("secret");
    std::fs::write(&secret, b"0123456789abcdef0123456789abcdef-shared").unwrap();
    temp.file(
        "sluice.toml",
        &format!(
            "{upstreams}[store]\nbackend = \"redis\"\nurl = {:?}\nsecret_file = {:?}\n",
            redis.url(),
            secret.display().to_string()
        ),
    )
}

/// The Python fixture as upstream `py`, `lookup` cached for a minute.
pub(crate) fn py_config(temp: &TempDir, redis: &Redis) -> std::path::PathBuf {
    redis_config_of(
        temp,
        redis,
        &format!(
            "{}[upstreams.py.tools.lookup]\ncache = {{ ttl_s = 60, idle_s = 60 }}\n\n",
            toml_upstream("py", &py_server())
        ),
    )
}

/// `_meta["sluice/operation"]`.
fn operation(result: &rmcp::model::CallToolResult) -> serde_json::Value {
    meta(result, "sluice/operation").expect("an operation's meta")
}

/// `lookup`'s answer: {key, call, pad}.
fn looked_up(result: &rmcp::model::CallToolResult) -> serde_json::Value {
    assert_ne!(result.is_error, Some(true), "{}", first_text(result));
    serde_json::from_str(&first_text(result)).unwrap()
}

/// The real calls `lookup` recorded in `record`.
fn real_calls(record: &std::path::Path) -> usize {
    std::fs::read_to_string(record)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

pub(crate) async fn start(config: &std::path::Path) -> HttpSluice {
    HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await
}

fn loopback() -> std::net::IpAddr {
    "127.0.0.1".parse().unwrap()
}

fn next_cursor(page: &rmcp::model::CallToolResult) -> String {
    meta(page, "sluice/page").expect("page meta")["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned()
}

async fn read(client: &Client, args: serde_json::Value) -> rmcp::model::CallToolResult {
    let page = call(client, "sluice_read", args).await;
    assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
    page
}

#[tokio::test]
async fn two_instances_share_results_and_cursors_and_outlive_a_kill() {
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-two");
    let config = redis_config(&temp, &redis);
    let mut a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;

    // Stored through A…
    let handle = stored_handle(&call(&on_a, "inventory", json!({"count": 4000})).await);
    let first_on_a = read(&on_a, json!({"handle": handle})).await;
    let second_on_a = read(&on_a, json!({"handle": handle, "page": 2})).await;
    // …read, searched and queried through B, with A's cursor.
    let second_on_b = read(&on_b, json!({"cursor": next_cursor(&first_on_a)})).await;
    assert_eq!(first_text(&second_on_b), first_text(&second_on_a));
    let searched = call(
        &on_b,
        "sluice_search",
        json!({"handle": handle, "pattern": "SKU-03999"}),
    )
    .await;
    assert!(
        first_text(&searched).contains("SKU-03999"),
        "{}",
        first_text(&searched)
    );
    let counted = call(
        &on_b,
        "sluice_query",
        json!({"handle": handle, "filter": ".items | length"}),
    )
    .await;
    assert!(
        first_text(&counted).contains("4000"),
        "{}",
        first_text(&counted)
    );
    // A cursor B issued reads the same page on A.
    let third_on_a = read(&on_a, json!({"cursor": next_cursor(&second_on_b)})).await;
    let third_on_b = read(&on_b, json!({"handle": handle, "page": 3})).await;
    assert_eq!(first_text(&third_on_a), first_text(&third_on_b));
    let info = call(&on_b, "sluice_info", json!({})).await;
    assert_eq!(
        meta(&info, "sluice/store").expect("the store's state"),
        json!({"backend": "redis", "healthy": true, "problem": null})
    );
    // A third instance's operator sees the result stored through A (an
    // anonymous one, listed to no client) and the store's figures.
    let c = HttpSluice::with_admin(&config).await;
    let admin = admin_url(&c);
    sluice::install_tls_provider();
    let state: serde_json::Value = reqwest::get(format!("{admin}/api/state"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["store"]["backend"], "redis");
    assert_eq!(state["store"]["results"], 1);
    assert_eq!(state["store"]["newest"][0]["handle"], handle.as_str());
    assert_eq!(state["store"]["newest"][0]["tool"], "inventory");
    drop(c);

    // A client's text that is no handle touches no key: unknown, and B
    // goes on serving.
    for bogus in ["h_nope\r\nFLUSHALL", "sluice:all", &"h_A".repeat(10_000)] {
        let read = call(&on_b, "sluice_read", json!({"handle": bogus})).await;
        assert_eq!(read.is_error, Some(true));
        assert!(
            first_text(&read).contains("unknown handle"),
            "{}",
            first_text(&read)
        );
    }
    assert_eq!(
        first_text(&read(&on_b, json!({"handle": handle, "page": 2})).await),
        first_text(&second_on_a)
    );

    // A killed; a new A serves the handle, reading only the frames its
    // page spans, by the plan saved with the result: its last frame, far
    // from page 2, deleted meanwhile, is not missed.
    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    drop(on_a);
    let mut redis_client = redis.connection().await;
    let key = format!("sluice:r:{handle}");
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&key)
        .query_async(&mut redis_client)
        .await
        .unwrap();
    assert!(
        fields.iter().any(|f| f.starts_with("p:")),
        "a plan saved: {fields:?}"
    );
    let frames = fields.iter().filter(|f| f.starts_with('f')).count();
    assert!(frames >= 3, "{fields:?}");
    let _: () = redis::cmd("HDEL")
        .arg(&key)
        .arg(format!("f{}", frames - 1))
        .query_async(&mut redis_client)
        .await
        .unwrap();
    let a = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let again = read(&on_a, json!({"handle": handle, "page": 2})).await;
    assert_eq!(first_text(&again), first_text(&second_on_a));
    // What needs the whole document says it is missing, and A goes on.
    let counted = call(
        &on_a,
        "sluice_query",
        json!({"handle": handle, "filter": ".items | length"}),
    )
    .await;
    assert_eq!(counted.is_error, Some(true), "{}", first_text(&counted));
    assert!(
        first_text(&counted).contains("frames of") && first_text(&counted).contains("damaged"),
        "{}",
        first_text(&counted)
    );
    let again = read(&on_a, json!({"handle": handle, "page": 2})).await;
    assert_eq!(first_text(&again), first_text(&second_on_a));
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}

/// Runs `openssl ARGS…` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian's)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority of the test's own (`{name}.pem`, `{name}.key`)
/// in `dir`.
fn authority(dir: &std::path::Path, name: &str) {
    let (pem, key) = (format!("{name}.pem"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

/// A `redis-server` serving TLS only, on a free port, with a certificate
/// for 127.0.0.1 that authority `ca` (in `dir`) issued.
async fn tls_redis(dir: &std::path::Path, ca: &str) -> (tokio::process::Child, u16) {
    peers();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ],
    );
    let port = free_port();
    let child = tokio::process::Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            "server.pem",
            "--tls-key-file",
            "server.key",
        ])
        .args([
            "--tls-ca-cert-file",
            &format!("{ca}.pem"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no"])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server (Debian's, built with TLS)");
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return (child, port);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("redis-server did not listen on port {port}");
}

#[tokio::test]
async fn a_rediss_url_keeps_results_over_tls_and_an_unknown_certificate_is_refused_clearly() {
    let temp = TempDir::new("shared-tls");
    authority(&temp.0, "ca");
    authority(&temp.0, "other-ca");
    let (_redis, port) = tls_redis(&temp.0, "ca").await;
    let secret = temp.0.join("secret");
    std::fs::write(&secret, b"0123456789abcdef0123456789abcdef-shared").unwrap();
    let config = temp.file(
        "sluice.toml",
        &format!(
            "{}[store]\nbackend = \"redis\"\nurl = \"rediss://127.0.0.1:{port}/0\"\nsecret_file = {:?}\n",
            toml_upstream("sample", &sample()),
            secret.display().to_string()
        ),
    );
    let config = config.to_str().unwrap();
    // The server's certificate checked against the roots sluice is given
    // (rustls-native-certs reads SSL_CERT_FILE).
    let ca = temp.0.join("ca.pem");
    let trusting = HttpSluice::start_with_env(
        &["--config", config],
        &[],
        &[("SSL_CERT_FILE", ca.as_os_str())],
    )
    .await;
    let client = stateless_http_client(&trusting.url, loopback()).await;
    let handle = stored_handle(&call(&client, "inventory", json!({"count": 4000})).await);
    let second = read(&client, json!({"handle": handle, "page": 2})).await;
    assert_ne!(second.is_error, Some(true), "{}", first_text(&second));
    let info = call(&client, "sluice_info", json!({})).await;
    assert_eq!(
        meta(&info, "sluice/store").expect("the store's state"),
        json!({"backend": "redis", "healthy": true, "problem": null})
    );

    // Another instance that does not trust that authority stores nothing
    // and says why; small results still pass.
    let other = temp.0.join("other-ca.pem");
    let wary = HttpSluice::start_with_env(
        &["--config", config],
        &[],
        &[("SSL_CERT_FILE", other.as_os_str())],
    )
    .await;
    let wary_client = stateless_http_client(&wary.url, loopback()).await;
    let refused = call(&wary_client, "inventory", json!({"count": 4000})).await;
    let text = first_text(&refused);
    assert!(
        text.contains("the redis store is unavailable") && text.contains("rediss://127.0.0.1"),
        "{text}"
    );
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    let small = call(&wary_client, "inventory", json!({"count": 2})).await;
    assert_ne!(small.is_error, Some(true), "{}", first_text(&small));
    client.cancel().await.unwrap();
    wary_client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_python_sdk_client_stores_through_one_instance_and_reads_through_another() {
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-python");
    let config = redis_config(&temp, &redis);
    let a = start(&config).await;
    let b = start(&config).await;
    // Stateless (2026-07-28): stored through A, every page read through B
    // by following B's cursors.
    let paged = pages_py(
        "auto",
        &["--url", &a.url],
        "inventory",
        json!({"count": 4000}),
        &["--read-url", &b.url],
    )
    .await;
    assert_eq!(paged["protocol_version"], "2026-07-28");
    assert!(paged["pages"].as_u64().unwrap() > 1, "{}", paged["pages"]);
    let items = paged["items"].as_array().expect("the items, page by page");
    assert_eq!(items.len(), 4000);
    assert_eq!(items[0]["id"], "SKU-00001");
    assert_eq!(items[3999]["id"], "SKU-04000");
    // Queried and searched through B.
    let asked = pages_py(
        "auto",
        &["--url", &a.url],
        "inventory",
        json!({"count": 4000}),
        &[
            "--read-url",
            &b.url,
            "--query",
            ".items | length",
            "--search",
            "SKU-03999",
        ],
    )
    .await;
    let answers = asked["answers"].as_array().expect("two answers");
    assert!(
        answers.iter().all(|a| a["is_error"] == false),
        "{answers:?}"
    );
    assert!(
        answers[0]["text"].as_str().unwrap().contains("4000"),
        "{answers:?}"
    );
    assert!(
        answers[1]["text"].as_str().unwrap().contains("SKU-03999"),
        "{answers:?}"
    );
}

#[tokio::test]
async fn one_shot_calls_on_a_single_thread_runtime_store_and_read_through_redis() {
    // `sluice call` (like stdio) runs on a single-threaded runtime: the
    // store's commands run on it from a blocking thread.
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-call");
    let config = redis_config(&temp, &redis);
    let call_once = |tool: &str, arguments: serde_json::Value| {
        let config = config.clone();
        let tool = tool.to_owned();
        async move {
            let out = tokio::process::Command::new(sluice())
                .args(["call", "--log-level", "warn", "--config"])
                .arg(&config)
                .args(["--tool", &tool, "--args", &arguments.to_string()])
                .stdin(Stdio::null())
                .output()
                .await
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        }
    };
    let stored = call_once("inventory", json!({"count": 4000})).await;
    let handle = stored["_meta"]["sluice/stored"]["handle"]
        .as_str()
        .expect("stored")
        .to_owned();
    let page = call_once("sluice_read", json!({"handle": handle, "page": 2})).await;
    assert_ne!(page["isError"], json!(true), "{page}");
    assert_eq!(page["_meta"]["sluice/page"]["page"], json!(2), "{page}");
}

#[tokio::test]
async fn a_redis_outage_fails_only_what_needs_the_store_and_sluice_recovers() {
    let mut redis = Redis::start().await;
    let temp = TempDir::new("shared-outage");
    let config = redis_config(&temp, &redis);
    let sluice = start(&config).await;
    let client = stateless_http_client(&sluice.url, loopback()).await;
    stored_handle(&call(&client, "inventory", json!({"count": 4000})).await);

    redis.stop().await;
    // Within the budget: passes as always.
    let small = call(&client, "echo", json!({"text": "still here"})).await;
    assert_eq!(first_text(&small), "still here");
    // Over it: an error result that names the store and the problem.
    let started = std::time::Instant::now();
    let large = call(&client, "inventory", json!({"count": 4000})).await;
    assert_eq!(large.is_error, Some(true));
    let text = first_text(&large);
    assert!(
        text.contains("could not store it") && text.contains("redis store is unavailable"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "it failed, it did not hang"
    );
    let info = call(&client, "sluice_info", json!({})).await;
    let state = meta(&info, "sluice/store").expect("the store's state");
    assert_eq!(state["healthy"], json!(false), "{state}");

    // Back: results are stored and read again, with no restart of sluice.
    redis.start_again().await;
    let handle = stored_once_back(&client).await;
    read(&client, json!({"handle": handle, "page": 2})).await;

    // A Redis that accepts and never answers (stopped with SIGSTOP): the
    // call fails at its deadline, and the next works once it answers.
    let pid = redis.child.as_ref().unwrap().id().unwrap().to_string();
    let signal = |sig: &str| {
        std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
    };
    assert!(signal("-STOP").success());
    let started = std::time::Instant::now();
    let stalled = call(&client, "inventory", json!({"count": 4000})).await;
    let waited = started.elapsed();
    assert!(signal("-CONT").success());
    assert_eq!(stalled.is_error, Some(true));
    assert!(
        first_text(&stalled).contains("redis store is unavailable"),
        "{}",
        first_text(&stalled)
    );
    assert!(
        waited < Duration::from_secs(20),
        "{waited:?}: it did not hang"
    );
    let handle = stored_once_back(&client).await;
    read(&client, json!({"handle": handle})).await;
    client.cancel().await.unwrap();
}

/// A large result stored through `client` once the store works again
/// (within 10 s): its handle.
async fn stored_once_back(client: &Client) -> String {
    for _ in 0..50 {
        let result = call(client, "inventory", json!({"count": 4000})).await;
        if result.is_error != Some(true) {
            return stored_handle(&result);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("storing does not work again once Redis is back");
}

#[tokio::test]
async fn a_cached_tool_called_on_one_instance_then_another_calls_the_upstream_once() {
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-cache");
    let config = py_config(&temp, &redis);
    let a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;
    let record = temp.0.join("calls");
    let args = |key: u32, sleep_s: f64| json!({"record": record, "key": key, "sleep_s": sleep_s});

    // On A, then on B: one upstream call; B answers with A's entry.
    let first = call(&on_a, "lookup", args(1, 0.1)).await;
    assert_eq!(meta(&first, "sluice/cache"), None, "a miss");
    let second = call(&on_b, "lookup", args(1, 0.1)).await;
    assert_eq!(looked_up(&second), looked_up(&first));
    assert_eq!(meta(&second, "sluice/cache").expect("a hit")["hit"], true);
    assert_eq!(real_calls(&record), 1);

    // Missed on both at once: one instance calls, the other waits for
    // its entry; both answer with the same value.
    let (on_a_now, on_b_now) = tokio::join!(
        call(&on_a, "lookup", args(2, 1.5)),
        call(&on_b, "lookup", args(2, 1.5))
    );
    assert_eq!(looked_up(&on_a_now), looked_up(&on_b_now));
    assert_eq!(real_calls(&record), 2, "one upstream call for both");

    // `_fresh` on B makes a new entry: A, which holds a copy of the old
    // one, answers with the new value from then on.
    let mut fresh_args = args(1, 0.1);
    fresh_args["_fresh"] = json!(true);
    let fresh = looked_up(&call(&on_b, "lookup", fresh_args).await);
    assert_eq!(real_calls(&record), 3);
    assert_ne!(fresh, looked_up(&first));
    let after = call(&on_a, "lookup", args(1, 0.1)).await;
    assert_eq!(looked_up(&after), fresh);
    assert_eq!(meta(&after, "sluice/cache").expect("a hit")["hit"], true);
    assert_eq!(real_calls(&record), 3);

    // Errors are never kept, for either instance.
    let mut failing = args(3, 0.1);
    failing["fail"] = json!(true);
    assert_eq!(
        call(&on_a, "lookup", failing.clone()).await.is_error,
        Some(true)
    );
    assert_eq!(call(&on_b, "lookup", failing).await.is_error, Some(true));
    assert_eq!(real_calls(&record), 5);
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}

#[tokio::test]
async fn an_operation_started_on_one_instance_is_collected_and_cancelled_through_another() {
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-operations");
    let config = py_config(&temp, &redis);
    let a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;

    // Started on A; its progress seen, then its result collected, on B.
    // (Looked at 3 s in, 5 s before it ends: looked at 2.5 s into a call
    // of 3 s, it was once found completed on a loaded CI machine.)
    let started = call(&on_a, "sleep", json!({"seconds": 8, "_timeout_s": 0.5})).await;
    let id = operation(&started)["id"]
        .as_str()
        .expect("an operation")
        .to_owned();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let looked = call(&on_b, "sluice_result", json!({"operation": id})).await;
    assert_eq!(
        operation(&looked)["status"],
        "running",
        "{}",
        first_text(&looked)
    );
    assert!(
        operation(&looked)["progress"]["progress"]
            .as_u64()
            .unwrap_or(0)
            > 2,
        "the progress A's call reported, as B sees it: {}",
        operation(&looked)
    );
    let collected = call(
        &on_b,
        "sluice_result",
        json!({"operation": id, "wait_s": 20}),
    )
    .await;
    assert_eq!(operation(&collected)["status"], "completed");
    assert!(
        first_text(&collected).starts_with("slept 8"),
        "{}",
        first_text(&collected)
    );

    // Started on A, cancelled through B: A's upstream request is cancelled.
    let marker = temp.0.join("marker");
    let started = call(
        &on_a,
        "sleep",
        json!({"seconds": 30, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let cancelled = call(&on_b, "sluice_cancel", json!({"operation": id})).await;
    assert_eq!(
        operation(&cancelled)["status"],
        "cancelled",
        "{}",
        first_text(&cancelled)
    );
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled",
        "the upstream saw the cancellation"
    );
    let on_a_later = call(&on_a, "sluice_result", json!({"operation": id})).await;
    assert_eq!(operation(&on_a_later)["status"], "cancelled");
    let again = call(&on_b, "sluice_cancel", json!({"operation": id})).await;
    assert!(
        first_text(&again).contains("already ended (cancelled)"),
        "{}",
        first_text(&again)
    );

    // A request whose message A never got (its listener away just then)
    // is found on A's next tick: kept in Redis, as B keeps it.
    let marker = temp.0.join("marker-kept");
    let started = call(
        &on_a,
        "sleep",
        json!({"seconds": 30, "marker": marker, "_timeout_s": 0.5}),
    )
    .await;
    let id_kept = operation(&started)["id"].as_str().unwrap().to_owned();
    let mut redis_client = redis.connection().await;
    let _: () = redis::cmd("SET")
        .arg(format!("sluice:cx:{id_kept}"))
        .arg(1)
        .arg("PX")
        .arg(60_000)
        .query_async(&mut redis_client)
        .await
        .unwrap();
    assert_eq!(
        wait_for_line(&marker, "cancelled", Duration::from_secs(15))
            .await
            .trim(),
        "cancelled",
        "the upstream saw the cancellation"
    );
    let seen = call(
        &on_b,
        "sluice_result",
        json!({"operation": id_kept, "wait_s": 10}),
    )
    .await;
    assert_eq!(
        operation(&seen)["status"],
        "cancelled",
        "{}",
        first_text(&seen)
    );

    // A text that is no operation id touches no key.
    for bogus in ["op_nope\r\nFLUSHALL", "sluice:op:*", &"op_A".repeat(10_000)] {
        for tool in ["sluice_result", "sluice_cancel"] {
            let unknown = call(&on_b, tool, json!({"operation": bogus})).await;
            assert_eq!(unknown.is_error, Some(true), "{tool}");
            assert!(
                first_text(&unknown).contains("unknown operation"),
                "{tool}: {}",
                first_text(&unknown)
            );
        }
    }
    // And B goes on serving.
    assert_eq!(
        operation(&call(&on_b, "sluice_result", json!({"operation": id})).await)["status"],
        "cancelled"
    );
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}

#[tokio::test]
async fn an_operation_whose_instance_died_is_reported_failed_within_a_heartbeat() {
    let redis = Redis::start().await;
    let temp = TempDir::new("shared-dead-owner");
    let config = py_config(&temp, &redis);
    let mut a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;
    let started = call(&on_a, "sleep", json!({"seconds": 60, "_timeout_s": 0.5})).await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let running = call(&on_b, "sluice_result", json!({"operation": id})).await;
    assert_eq!(operation(&running)["status"], "running");

    a.child.start_kill().unwrap();
    a.child.wait().await.unwrap();
    // Within the 30 s asked (else it would still say "running"): the
    // heartbeat's lease (15 s) and one look more (3 s).
    let failed = call(
        &on_b,
        "sluice_result",
        json!({"operation": id, "wait_s": 30}),
    )
    .await;
    assert_eq!(
        operation(&failed)["status"],
        "failed",
        "{}",
        first_text(&failed)
    );
    assert!(
        first_text(&failed).contains("its heartbeat lapsed"),
        "{}",
        first_text(&failed)
    );
    on_b.cancel().await.unwrap();
}

/// Past `[operations] max_ended`, an operation whose end could not be
/// written (Redis was down) is kept until it is: forgotten, other
/// instances would read it "running" for a day, or (Redis back empty, as
/// here) not at all.
#[tokio::test]
async fn an_operation_past_max_ended_is_kept_until_its_end_is_written() {
    let mut redis = Redis::start().await;
    let temp = TempDir::new("shared-ops-unwritten");
    let config = redis_config_of(
        &temp,
        &redis,
        &format!(
            "{}[operations]\nmax_ended = 1\n\n",
            toml_upstream("py", &py_server())
        ),
    );
    let a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let started = call(&on_a, "sleep", json!({"seconds": 1.5, "_timeout_s": 0.3})).await;
        ids.push(operation(&started)["id"].as_str().unwrap().to_owned());
    }
    // Both end while Redis is down; a third starts then, which sweeps the
    // ended ones: two of this client's, one more than `max_ended`.
    redis.stop().await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let _third = call(&on_a, "sleep", json!({"seconds": 0.1, "_timeout_s": 0.01})).await;
    redis.start_again().await;

    // A writes both ends once Redis is back: B sees each completed.
    for id in &ids {
        let (seen, _) = completed_on(&on_b, id).await;
        assert_eq!(seen, "completed", "{id}");
    }
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}

/// Operation `id` as `client` sees it through `sluice_result`, looked at
/// every 250 ms until it is completed (10 s at most): its last status, and
/// the answer that said "completed".
async fn completed_on(client: &Client, id: &str) -> (String, Option<rmcp::model::CallToolResult>) {
    let mut seen = String::new();
    for _ in 0..40 {
        let looked = call(client, "sluice_result", json!({"operation": id})).await;
        if let Some(op) = meta(&looked, "sluice/operation") {
            seen = op["status"].as_str().unwrap_or_default().to_owned();
            if seen == "completed" {
                return (seen, Some(looked));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    (seen, None)
}

#[tokio::test]
async fn an_operation_that_ends_while_redis_is_down_is_seen_ended_once_it_is_back() {
    let mut redis = Redis::start().await;
    let temp = TempDir::new("shared-ops-outage");
    let config = py_config(&temp, &redis);
    let a = start(&config).await;
    let b = start(&config).await;
    let on_a = stateless_http_client(&a.url, loopback()).await;
    let on_b = stateless_http_client(&b.url, loopback()).await;
    let started = call(&on_a, "sleep", json!({"seconds": 2, "_timeout_s": 0.5})).await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();

    // It ends while Redis is down (and comes back empty: no persistence),
    // so the record of its end could not be written then.
    redis.stop().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    redis.start_again().await;

    // A writes it again: B sees it completed, not "running" for ever.
    let (seen, looked) = completed_on(&on_b, &id).await;
    assert_eq!(seen, "completed");
    let text = first_text(&looked.unwrap());
    assert!(text.starts_with("slept 2"), "{text}");
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}
