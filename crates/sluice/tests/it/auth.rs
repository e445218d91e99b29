//! `[auth]` on the HTTP listener, with the Python SDK 2.x client presenting
//! bearer tokens in both protocol eras: static tokens, JWTs checked against
//! a JWKS the test serves (or a file), the 401 and its metadata document,
//! sessions kept to their principal, and the refusal of a public `--listen`
//! without `[auth]`. sluice runs with `--log-level trace` throughout, and no
//! token may appear in what it logs.

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

const ISSUER: &str = "https://idp.sluice.test";
const AUDIENCE: &str = "sluice";

/// A config file: the sample server as upstream, and `auth` (TOML).
fn config(dir: &TempDir, auth: &str) -> std::path::PathBuf {
    dir.file(
        "sluice.toml",
        &format!("{}{auth}", toml_upstream("sample", &sample())),
    )
}

/// `sluice --config FILE --listen 127.0.0.1:0 --log-level trace`, serving.
async fn start(config: &std::path::Path) -> HttpSluice {
    start_with(config, &[]).await
}

/// [`start`], with environment variables `env` set.
async fn start_with(config: &std::path::Path, env: &[(&str, &std::ffi::OsStr)]) -> HttpSluice {
    let mut child = tokio::process::Command::new(sluice())
        .envs(env.iter().copied())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "trace",
            "--config",
        ])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn sluice");
    let (url, log) = serving(&mut child).await;
    HttpSluice {
        child,
        url,
        stderr: log,
    }
}

/// Asserts that none of `tokens` appears in sluice's log.
fn assert_not_logged(sluice: &HttpSluice, tokens: &[&str]) {
    let log = sluice.stderr.lock().unwrap();
    assert!(log.len() > 5, "a trace log was written: {log:?}");
    for token in tokens {
        assert!(
            !log.iter().any(|line| line.contains(token)),
            "a token was logged: {token}"
        );
    }
}

/// Runs tests/clients/auth.py with `args`; its stdout as JSON.
async fn auth_py(args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new(python())
        .arg(repo().join("tests/clients/auth.py"))
        .args(args)
        .output()
        .await
        .expect("run auth.py");
    assert!(
        out.status.success(),
        "auth.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("auth.py prints JSON")
}

/// Keys made in `dir/keys` by `auth.py sign` (and their `jwks.json`), and
/// the tokens it signed with them, by name.
async fn sign_in(dir: &TempDir) -> (std::path::PathBuf, serde_json::Value) {
    let keys = dir.0.join("keys");
    let signed = auth_py(&[
        "sign",
        "--dir",
        keys.to_str().unwrap(),
        "--issuer",
        ISSUER,
        "--audience",
        AUDIENCE,
    ])
    .await;
    (keys, signed)
}

/// Connects once per `(name, token)` with the Python SDK client in `mode`
/// and calls `echo`; the names whose call succeeded, and the protocol
/// versions they spoke.
async fn python_calls(
    url: &str,
    mode: &str,
    tokens: &[(&str, Option<&str>)],
) -> (Vec<String>, Vec<String>) {
    let tokens = serde_json::to_string(tokens).unwrap();
    let results = auth_py(&["call", "--url", url, "--mode", mode, "--tokens", &tokens]).await;
    let mut passed = Vec::new();
    let mut versions = Vec::new();
    for r in results.as_array().unwrap() {
        if r["ok"] == true {
            assert_eq!(r["text"], "hello through auth");
            passed.push(r["name"].as_str().unwrap().to_owned());
            versions.push(r["protocol_version"].as_str().unwrap().to_owned());
        }
    }
    (passed, versions)
}

/// An HTTP response, read by hand: status, headers (lower-case names) and
/// the body when it has a length.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Sends one HTTP/1.1 request to `url`'s host (`url` names the path too).
async fn request(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Answer {
    request_from(None, method, url, headers, body).await
}

/// [`request`], from the local address `from` if given (any of
/// 127.0.0.0/8 reaches a listener on 127.0.0.1).
async fn request_from(
    from: Option<std::net::IpAddr>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        text.push_str(&format!(
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    text.push_str("\r\n");
    text.push_str(body.unwrap_or_default());
    let mut stream = match from {
        None => tokio::net::TcpStream::connect(host).await.unwrap(),
        Some(ip) => {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(ip, 0)).unwrap();
            socket.connect(host.parse().unwrap()).await.unwrap()
        }
    };
    stream.write_all(text.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), read_answer(&mut stream))
        .await
        .expect("an answer within 20 s")
}

async fn read_answer(stream: &mut tokio::net::TcpStream) -> Answer {
    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed before the headers");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse::<usize>().unwrap());
    let mut body = buf[end + 4..].to_vec();
    if let Some(length) = length {
        while body.len() < length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// Checks a 401: the challenge names the metadata document (with
/// `error="invalid_token"` when a token was refused), and that document
/// resolves and names `/mcp` as the resource.
async fn assert_unauthorized(answer: &Answer, sluice: &HttpSluice, refused: bool) {
    assert_eq!(answer.status, 401, "{answer:?}");
    let base = sluice.url.trim_end_matches("/mcp");
    let metadata = format!("{base}/.well-known/oauth-protected-resource");
    let challenge = answer.header("www-authenticate").expect("WWW-Authenticate");
    if refused {
        assert_eq!(
            challenge,
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\"")
        );
        assert_eq!(answer.json()["error"], "invalid_token");
    } else {
        assert_eq!(
            challenge,
            format!("Bearer resource_metadata=\"{metadata}\"")
        );
        assert_eq!(answer.json()["error"], "unauthorized");
    }
    let document = request("GET", &metadata, &[], None).await;
    assert_eq!(document.status, 200);
    assert_eq!(document.json()["resource"], sluice.url);
}

#[tokio::test]
async fn static_tokens_admit_their_principal_in_both_eras_and_refuse_others() {
    let dir = TempDir::new("auth-static");
    let alice = "alice-token-0123456789";
    let file = config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"alice\", sha256 = \"{}\" }} ]\n",
            sha256_hex(alice)
        ),
    );
    let sluice = start(&file).await;
    let tokens = [
        ("alice", Some(alice)),
        ("wrong", Some("not-alice-token-9876")),
        ("none", None),
    ];
    let (passed, versions) = python_calls(&sluice.url, "auto", &tokens).await;
    assert_eq!(
        (passed, versions),
        (vec!["alice".into()], vec!["2026-07-28".into()])
    );
    let (passed, versions) = python_calls(&sluice.url, "legacy", &tokens).await;
    assert_eq!(
        (passed, versions),
        (vec!["alice".into()], vec!["2025-11-25".into()])
    );

    let without = request("POST", &sluice.url, &[], Some(INITIALIZE)).await;
    assert_unauthorized(&without, &sluice, false).await;
    let wrong = request(
        "POST",
        &sluice.url,
        &[("Authorization", "Bearer not-alice-token-9876")],
        Some(INITIALIZE),
    )
    .await;
    assert_unauthorized(&wrong, &sluice, true).await;
    let basic = request(
        "POST",
        &sluice.url,
        &[("Authorization", &format!("Basic {alice}"))],
        Some(INITIALIZE),
    )
    .await;
    assert_unauthorized(&basic, &sluice, true).await;

    // The metadata, in both spellings, without a token; no authorization
    // server without [auth.jwt].
    let base = sluice.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let document = request("GET", &format!("{base}{path}"), &[], None).await;
        assert_eq!(document.status, 200, "{path}");
        assert_eq!(document.header("content-type"), Some("application/json"));
        assert_eq!(
            document.json(),
            serde_json::json!({"resource": sluice.url, "bearer_methods_supported": ["header"]})
        );
    }
    assert_not_logged(&sluice, &[alice, "not-alice-token-9876"]);
}

/// A JWKS over HTTP: serves `body`, counts the fetches and notes the last
/// (and the head of the last request).
struct JwksServer {
    url: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
    last_fetch: Arc<Mutex<Option<Instant>>>,
    last_head: Arc<Mutex<String>>,
}

impl JwksServer {
    async fn start(body: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://{}/.well-known/jwks.json",
            listener.local_addr().unwrap()
        );
        let body = Arc::new(Mutex::new(body));
        let fetches = Arc::new(AtomicUsize::new(0));
        let last_fetch = Arc::new(Mutex::new(None));
        let last_head = Arc::new(Mutex::new(String::new()));
        let (served, counted, noted) = (body.clone(), fetches.clone(), last_fetch.clone());
        let headed = last_head.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let head = read_head(&mut stream).await.unwrap_or_else(|cut| cut);
                counted.fetch_add(1, Ordering::SeqCst);
                *noted.lock().unwrap() = Some(Instant::now());
                *headed.lock().unwrap() = head;
                let body = served.lock().unwrap().clone();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        Self {
            url,
            body,
            fetches,
            last_fetch,
            last_head,
        }
    }
}

/// Behind a proxy that authenticates (`[auth.proxy]`), the principal is the
/// one its header names, believed from the proxy's address only: a session
/// is that principal's; from another address the header is refused (401);
/// without it, bearer tokens work as before.
#[tokio::test]
async fn a_proxys_header_names_the_principal_from_the_proxys_address_only() {
    let dir = TempDir::new("auth-proxy");
    let carol = "carol-token-0123";
    let file = config(
        &dir,
        &format!(
            "{}[auth.proxy]\nheader = \"X-Forwarded-User\"\nfrom = [\"::1\", \"127.0.0.0/31\"]\n",
            auth_tokens(&[("carol", carol)])
        ),
    );
    let sluice = start(&file).await;
    let as_user = |user: &'static str| [("X-Forwarded-User", user)];
    let opened = request("POST", &sluice.url, &as_user("alice"), Some(INITIALIZE)).await;
    assert_eq!(opened.status, 200, "{}", opened.body);
    let session = opened
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let in_session = |user: &'static str| {
        let session = session.clone();
        let url = sluice.url.clone();
        async move {
            let headers = [
                ("X-Forwarded-User", user),
                ("Mcp-Session-Id", session.as_str()),
                ("Mcp-Protocol-Version", "2025-11-25"),
            ];
            request("POST", &url, &headers, Some(ping)).await.status
        }
    };
    assert_eq!(in_session("alice").await, 200, "alice's own session");
    assert_eq!(in_session("bob").await, 404, "another principal's session");
    let elsewhere = "127.0.0.2".parse().ok();
    let forged = request_from(
        elsewhere,
        "POST",
        &sluice.url,
        &as_user("alice"),
        Some(INITIALIZE),
    )
    .await;
    assert_eq!(forged.status, 401, "{}", forged.body);
    assert!(
        forged
            .body
            .contains("believed only from `[auth.proxy] from`"),
        "{}",
        forged.body
    );
    let twice = request(
        "POST",
        &sluice.url,
        &[
            ("X-Forwarded-User", "mallory"),
            ("X-Forwarded-User", "alice"),
        ],
        Some(INITIALIZE),
    )
    .await;
    assert_eq!(twice.status, 401, "{}", twice.body);
    assert!(
        twice.body.contains("comes more than once"),
        "{}",
        twice.body
    );
    let long = "a".repeat(300);
    for name in ["", " ", long.as_str()] {
        let odd = request(
            "POST",
            &sluice.url,
            &[("X-Forwarded-User", name)],
            Some(INITIALIZE),
        )
        .await;
        assert_eq!(odd.status, 401, "{name:?}: {}", odd.body);
        assert!(
            odd.body.contains("names no principal sluice takes"),
            "{}",
            odd.body
        );
    }
    let none = request("POST", &sluice.url, &[], Some(INITIALIZE)).await;
    assert_eq!(none.status, 401);
    let bearer = format!("Bearer {carol}");
    let token = request_from(
        elsewhere,
        "POST",
        &sluice.url,
        &[("Authorization", &bearer)],
        Some(INITIALIZE),
    )
    .await;
    assert_eq!(token.status, 200, "a token still works: {}", token.body);
}

/// `[auth]` is read again at SIGHUP, without a restart: a token added is
/// admitted and one taken out refused at its next request, while a session
/// of a principal kept goes on; a file that does not read, or has no
/// `[auth]` any more, leaves `[auth]` as it was.
#[tokio::test]
async fn sighup_reads_auth_again_and_tokens_come_and_go_without_a_restart() {
    let dir = TempDir::new("auth-sighup");
    let (alice, bob, carol) = ("alice-token-0123", "bob-token-4567", "carol-token-89ab");
    let file = config(&dir, &auth_tokens(&[("alice", alice), ("carol", carol)]));
    let sluice = start(&file).await;
    let (kept, _) = connect_http_as(&sluice.url, carol, Recorder::default()).await;
    assert_eq!(
        first_text(&call(&kept, "echo", serde_json::json!({"text": "1"})).await),
        "1"
    );
    let status_of = |token: &str| {
        let bearer = format!("Bearer {token}");
        let url = sluice.url.clone();
        async move {
            request(
                "POST",
                &url,
                &[("Authorization", &bearer)],
                Some(INITIALIZE),
            )
            .await
            .status
        }
    };
    assert_eq!((status_of(alice).await, status_of(bob).await), (200, 401));
    let said = |line: &'static str| {
        let log = sluice.stderr.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let count = log
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|l| l.contains(line))
                    .count();
                if count > 0 || Instant::now() > deadline {
                    return count;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let hangup = || {
        let pid = sluice.child.id().unwrap().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &pid])
            .status();
        assert!(sent.unwrap().success(), "kill -HUP {pid}");
    };

    config(&dir, &auth_tokens(&[("bob", bob), ("carol", carol)]));
    hangup();
    assert_eq!(
        said("SIGHUP: [auth] read again").await,
        1,
        "{:?}",
        sluice.stderr
    );
    assert_eq!((status_of(alice).await, status_of(bob).await), (401, 200));
    assert_eq!(
        first_text(&call(&kept, "echo", serde_json::json!({"text": "2"})).await),
        "2",
        "carol's session goes on"
    );

    dir.file("sluice.toml", "[auth\n");
    hangup();
    assert_eq!(said("does not read, so [auth] stays as it was").await, 1);
    // A file that reads but whose `[auth]` cannot serve (its JWKS file is
    // missing): the same.
    config(
        &dir,
        "[auth.jwt]\nissuer = \"https://idp\"\naudience = \"sluice\"\njwks_file = \"missing.json\"\n",
    );
    hangup();
    assert_eq!(said("SIGHUP: [auth] stays as it was: [auth.jwt]").await, 1);
    config(&dir, "");
    hangup();
    assert_eq!(said("has no [auth] now; [auth] stays as it was").await, 1);
    assert_eq!((status_of(alice).await, status_of(bob).await), (401, 200));
    kept.cancel().await.unwrap();
}

fn jwt_auth(jwks: &str) -> String {
    format!("[auth.jwt]\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n{jwks}\n")
}

#[tokio::test]
async fn jwts_are_checked_by_kid_against_a_served_jwks_that_is_refetched_for_a_new_kid() {
    let dir = TempDir::new("auth-jwt-url");
    let (keys, signed) = sign_in(&dir).await;
    let token = |name: &str| signed[name].as_str().unwrap().to_owned();
    let jwks = JwksServer::start(std::fs::read_to_string(keys.join("jwks.json")).unwrap()).await;
    // Credentials in the URL go as `Authorization: Basic`, never shown.
    let with_credentials = jwks.url.replace("http://", "http://jwks:hunter%32@");
    let file = config(
        &dir,
        &jwt_auth(&format!("jwks_url = \"{with_credentials}\"")),
    );
    let sluice = start(&file).await;
    assert_eq!(
        jwks.fetches.load(Ordering::SeqCst),
        0,
        "fetched when needed"
    );

    // The first token has a kid in no JWKS: the JWKS is fetched, and it is
    // still unknown. The others are checked against the keys fetched.
    let refused = [
        "unknown_kid",
        "expired",
        "wrong_audience",
        "wrong_issuer",
        "bad_signature",
        "hs256_with_public_key",
        "alg_none",
        "no_subject",
    ];
    let mut tokens: Vec<(String, Option<String>)> = vec![
        ("unknown_kid".into(), Some(token("unknown_kid"))),
        ("rs256".into(), Some(token("rs256"))),
        ("es256".into(), Some(token("es256"))),
    ];
    tokens.extend(refused[1..].iter().map(|n| (n.to_string(), Some(token(n)))));
    let tokens: Vec<(&str, Option<&str>)> = tokens
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_deref()))
        .collect();
    let (passed, versions) = python_calls(&sluice.url, "auto", &tokens).await;
    assert_eq!(passed, ["rs256", "es256"]);
    assert_eq!(versions, ["2026-07-28", "2026-07-28"]);
    // Without the unknown kid: no fetch whatever the time.
    let (passed, versions) = python_calls(&sluice.url, "legacy", &tokens[1..]).await;
    assert_eq!(passed, ["rs256", "es256"]);
    assert_eq!(versions, ["2025-11-25", "2025-11-25"]);
    // Keys once fetched serve every token that names them.
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);
    // base64("jwks:hunter2")
    let head = jwks.last_head.lock().unwrap().clone();
    assert!(
        head.contains("authorization: Basic andrczpodW50ZXIy\r\n"),
        "{head}"
    );

    for name in refused {
        let answer = request(
            "POST",
            &sluice.url,
            &[("Authorization", &format!("Bearer {}", token(name)))],
            Some(INITIALIZE),
        )
        .await;
        assert_unauthorized(&answer, &sluice, true).await;
    }
    let base = sluice.url.trim_end_matches("/mcp");
    let document = request(
        "GET",
        &format!("{base}/.well-known/oauth-protected-resource"),
        &[],
        None,
    )
    .await;
    assert_eq!(
        document.json()["authorization_servers"],
        serde_json::json!([ISSUER])
    );

    // A key rotated in after start: its unknown kid makes sluice fetch the
    // JWKS again, once the 10 s since the last fetch have passed.
    *jwks.body.lock().unwrap() = std::fs::read_to_string(keys.join("jwks-rotated.json")).unwrap();
    let last = jwks.last_fetch.lock().unwrap().unwrap();
    tokio::time::sleep(
        (last + Duration::from_millis(10_500)).saturating_duration_since(Instant::now()),
    )
    .await;
    let before = jwks.fetches.load(Ordering::SeqCst);
    let rotated = token("rotated");
    let (passed, _) = python_calls(&sluice.url, "auto", &[("rotated", Some(&rotated))]).await;
    assert_eq!(passed, ["rotated"]);
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), before + 1);

    let mut all: Vec<String> = refused.iter().map(|n| token(n)).collect();
    all.extend([token("rs256"), token("es256"), rotated]);
    all.extend(["hunter2".to_owned(), "hunter%32".to_owned()]);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    assert_not_logged(&sluice, &all);
}

#[tokio::test]
async fn a_jwks_file_is_read_at_start_and_a_missing_one_is_refused() {
    let dir = TempDir::new("auth-jwt-file");
    let (_keys, signed) = sign_in(&dir).await;
    // Relative to the config file.
    let file = config(&dir, &jwt_auth("jwks_file = \"keys/jwks.json\""));
    let sluice = start(&file).await;
    let es256 = signed["es256"].as_str().unwrap();
    let unknown = signed["unknown_kid"].as_str().unwrap();
    let (passed, versions) = python_calls(
        &sluice.url,
        "legacy",
        &[("es256", Some(es256)), ("unknown_kid", Some(unknown))],
    )
    .await;
    assert_eq!(
        (passed, versions),
        (vec!["es256".into()], vec!["2025-11-25".into()])
    );

    let missing = config(&dir, &jwt_auth("jwks_file = \"nowhere/jwks.json\""));
    let out = tokio::process::Command::new(crate::support::sluice())
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&missing)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[auth.jwt]: cannot read `jwks_file`") && err.contains("nowhere/jwks.json"),
        "{err}"
    );
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_created_it() {
    let dir = TempDir::new("auth-sessions");
    let (alice, bob) = ("alice-session-token", "bob-session-token");
    let file = config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"alice\", sha256 = \"{}\" }}, {{ principal = \"bob\", sha256 = \"{}\" }} ]\n",
            sha256_hex(alice),
            sha256_hex(bob)
        ),
    );
    let sluice = start(&file).await;
    let as_alice = format!("Bearer {alice}");
    let as_bob = format!("Bearer {bob}");
    let created = request(
        "POST",
        &sluice.url,
        &[("Authorization", &as_alice)],
        Some(INITIALIZE),
    )
    .await;
    assert_eq!(created.status, 200, "{created:?}");
    let session = created
        .header("mcp-session-id")
        .expect("a legacy session")
        .to_owned();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let with = |auth: &str| {
        [
            ("Authorization", auth.to_owned()),
            ("Mcp-Session-Id", session.clone()),
            ("MCP-Protocol-Version", "2025-11-25".to_owned()),
        ]
    };
    let send = |auth: String, method: &'static str, body: Option<&'static str>| {
        let headers = with(&auth);
        let url = sluice.url.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            request(method, &url, &headers, body).await.status
        }
    };
    assert_eq!(send(as_alice.clone(), "POST", Some(initialized)).await, 202);
    // Bob holds the id, and gets what a made-up id gets.
    assert_eq!(send(as_bob.clone(), "POST", Some(list)).await, 404);
    assert_eq!(send(as_bob.clone(), "DELETE", None).await, 404);
    assert_eq!(send(as_alice.clone(), "POST", Some(list)).await, 200);
    assert!((200..300).contains(&send(as_alice.clone(), "DELETE", None).await));
    assert_eq!(send(as_alice.clone(), "POST", Some(list)).await, 404);
    assert_not_logged(&sluice, &[alice, bob]);
}

#[tokio::test]
async fn a_public_listen_address_needs_auth_or_no_auth() {
    let run = |args: &[&str]| {
        let mut cmd = std::process::Command::new(sluice());
        cmd.args(args).arg("--").args(sample());
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{err}");
    for expected in [
        "--listen 0.0.0.0:0 is not a loopback address and no [auth] is configured",
        "[auth]\ntokens = [ { principal = \"alice\", sha256 = ",
        "[auth.jwt]\nissuer = ",
        "or pass --no-auth",
    ] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
    let (code, err) = run(&["--listen", "[::]:0"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&["--no-auth"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--no-auth only applies with --listen"),
        "{err}"
    );

    let dir = TempDir::new("auth-no-auth");
    let file = config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"a\", sha256 = \"{}\" }} ]\n",
            sha256_hex("t")
        ),
    );
    let out = std::process::Command::new(sluice())
        .args(["--listen", "0.0.0.0:0", "--no-auth", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--no-auth and an [auth] table together"),
        "{err}"
    );

    // With --no-auth it serves, and says so.
    let mut child = tokio::process::Command::new(sluice())
        .args([
            "--listen",
            "0.0.0.0:0",
            "--no-auth",
            "--log-level",
            "warn",
            "--",
        ])
        .args(sample())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (url, log) = serving(&mut child).await;
    let port = url.rsplit(':').next().unwrap().trim_end_matches("/mcp");
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("WARN") && l.contains("--no-auth: serving 0.0.0.0:")),
        "{:?}",
        log.lock().unwrap()
    );
    let (client, _) = connect_http(&format!("http://127.0.0.1:{port}/mcp")).await;
    let result = call(&client, "echo", serde_json::json!({"text": "open"})).await;
    assert_eq!(first_text(&result), "open");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_jwks_over_https_is_fetched_with_its_certificate_checked() {
    let dir = TempDir::new("auth-jwt-tls");
    let (keys, signed) = sign_in(&dir).await;
    let rs256 = signed["rs256"].as_str().unwrap().to_owned();
    let jwks = JwksServer::start(std::fs::read_to_string(keys.join("jwks.json")).unwrap()).await;
    let plain = jwks.url["http://".len()..]
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let url = format!(
        "{}/.well-known/jwks.json",
        crate::tls::tls_in_front_of(plain).await
    );
    let file = config(&dir, &jwt_auth(&format!("jwks_url = \"{url}\"")));
    let fixtures = repo().join("tests/fixtures/tls");

    // Its CA trusted: fetched over TLS, and the token passes.
    let ca = fixtures.join("ca.pem");
    let sluice = start_with(&file, &[("SSL_CERT_FILE", ca.as_os_str())]).await;
    let (passed, _) = python_calls(&sluice.url, "auto", &[("rs256", Some(&rs256))]).await;
    assert_eq!(passed, ["rs256"]);
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);
    drop(sluice);

    // Roots that do not hold its CA: the JWKS is not fetched (the TLS
    // handshake fails before any request), the token is refused, and the
    // log says it was the certificate.
    let not_the_ca = fixtures.join("localhost.pem");
    let sluice = start_with(&file, &[("SSL_CERT_FILE", not_the_ca.as_os_str())]).await;
    let (passed, _) = python_calls(&sluice.url, "auto", &[("rs256", Some(&rs256))]).await;
    assert!(passed.is_empty());
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1);
    let said =
        |line: &String| line.contains("cannot refresh the JWKS") && line.contains("certificate");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sluice.stderr.lock().unwrap().iter().any(said) {
        assert!(
            Instant::now() < deadline,
            "no log line says why: {:?}",
            sluice.stderr.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An upstream's token from sluice's environment: sluice B reaches sluice
/// A (which has `[auth]`) with `Authorization = "Bearer ${UP_TOKEN}"`, the
/// token set only in B's environment; calls go through, the token is never
/// logged; without the variable, B refuses to start, naming it.
#[tokio::test]
async fn an_upstream_token_comes_from_the_environment() {
    let dir = TempDir::new("auth-env-token");
    let token = "env-upstream-token-7f3a";
    let guarded = config(
        &dir,
        &format!(
            "[auth]\ntokens = [ {{ principal = \"gateway\", sha256 = \"{}\" }} ]\n",
            sha256_hex(token)
        ),
    );
    let upstream = start(&guarded).await;
    let front_dir = TempDir::new("auth-env-token-front");
    let front_config = front_dir.file(
        "sluice.toml",
        &format!(
            "[upstreams.far]\nurl = {:?}\nheaders = {{ Authorization = \"Bearer ${{UP_TOKEN}}\" }}\n",
            upstream.url
        ),
    );
    let front = start_with(&front_config, &[("UP_TOKEN", std::ffi::OsStr::new(token))]).await;
    let (client, _) = connect_http(&front.url).await;
    let echoed = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("echo")
                .with_arguments(args(serde_json::json!({"text": "through two"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&echoed), "through two");
    client.cancel().await.unwrap();
    assert_not_logged(&front, &[token]);

    // Without the variable: refused at start, the variable named.
    let refused = tokio::process::Command::new(sluice())
        .env_remove("UP_TOKEN")
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&front_config)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("header `Authorization`: `${UP_TOKEN}` names a variable that is not set"),
        "{stderr}"
    );
}
