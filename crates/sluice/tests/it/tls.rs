//! An HTTPS upstream: sluice reaches it over TLS, its certificate checked
//! against the roots the platform trusts (here the test CA of
//! `tests/fixtures/tls`, named by `SSL_CERT_FILE`), and refuses it with an
//! error that says why when the certificate is not trusted.
//!
//! The upstream is the sample server over HTTP behind a TLS terminator in
//! this process (rustls, the fixture's `localhost` certificate, valid until
//! 2126). Through a proxy `HTTPS_PROXY` names, sluice asks it for a
//! `CONNECT` tunnel and speaks TLS to the upstream inside it; through
//! Debian's tinyproxy, an `http://` upstream as absolute-form requests too.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::support::*;

/// Serves TLS on a port of its own and relays each connection's bytes to
/// `plain` (host:port); its `https://localhost:PORT`.
pub async fn tls_in_front_of(plain: String) -> String {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    sluice::install_tls_provider();
    let dir = repo().join("tests/fixtures/tls");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(dir.join("localhost.pem"))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("localhost.key")).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, plain) = (acceptor.clone(), plain.clone());
            tokio::spawn(async move {
                // A client that refuses the certificate ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut upstream = tokio::net::TcpStream::connect(&plain).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    format!("https://localhost:{port}")
}

/// `sluice sample-server --listen`: its host:port, once it serves.
async fn sample_over_http() -> (tokio::process::Child, String) {
    let mut child = Command::new(sluice())
        .args(["sample-server", "--listen", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(url) = line.strip_prefix("sample-server: serving http://") {
            let addr = url.trim().trim_end_matches("/mcp").to_owned();
            return (child, addr);
        }
    }
    panic!("the sample server did not start serving");
}

/// A proxy on a port of its own that opens every `CONNECT` tunnel it is
/// asked for; each request's head (to its blank line) comes out of the
/// receiver.
async fn connect_proxy() -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (heads, received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let heads = heads.clone();
            tokio::spawn(async move {
                let Ok(head) = read_head(&mut client).await else {
                    return;
                };
                let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let _ = heads.send(head);
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (address, received)
}

/// `sluice --config` over stdio with `url` as its one upstream,
/// `SSL_CERT_FILE` set to `roots` (the platform's roots when `None`), and
/// the variables of `env` (`NAME=value`).
async fn sluice_to(
    url: &str,
    roots: Option<&std::path::Path>,
    env: &[String],
) -> (Client, TempDir) {
    let temp = TempDir::new("tls");
    let config = temp.file("sluice.toml", &format!("[upstreams.s]\nurl = {url:?}\n"));
    let mut command = vec!["env".to_owned()];
    match roots {
        Some(roots) => command.push(format!("SSL_CERT_FILE={}", roots.display())),
        None => command.extend(["-u".to_owned(), "SSL_CERT_FILE".to_owned()]),
    }
    command.extend(env.iter().cloned());
    command.extend(via_config(&config));
    (connect(&command).await.0, temp)
}

#[tokio::test]
async fn an_https_upstream_is_reached_over_tls_and_an_untrusted_one_refused() {
    let (_server, plain) = sample_over_http().await;
    let url = format!("{}/mcp", tls_in_front_of(plain).await);
    let ca = repo().join("tests/fixtures/tls/ca.pem");

    let (client, _temp) = sluice_to(&url, Some(&ca), &[]).await;
    assert!(tool_names(&client).await.contains(&"echo".to_owned()));
    let echoed = call(&client, "echo", serde_json::json!({"text": "over TLS"})).await;
    assert_eq!(first_text(&echoed), "over TLS");
    assert_ne!(echoed.is_error, Some(true));
    client.cancel().await.unwrap();

    // The same upstream, its CA not among the roots: the call fails, and
    // says it is the certificate.
    let (client, _temp) = sluice_to(&url, None, &[]).await;
    let refused = call(&client, "echo", serde_json::json!({"text": "x"})).await;
    assert_eq!(refused.is_error, Some(true), "{}", first_text(&refused));
    let why = first_text(&refused);
    assert!(why.contains("certificate") && why.contains(&url), "{why}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_https_upstream_is_reached_through_the_tunnel_of_the_proxy_https_proxy_names() {
    let (_server, plain) = sample_over_http().await;
    let url = format!("{}/mcp", tls_in_front_of(plain).await);
    let ca = repo().join("tests/fixtures/tls/ca.pem");
    let (proxy, mut heads) = connect_proxy().await;
    let through = [format!("HTTPS_PROXY=http://pu:p%40ss@{proxy}")];

    let (client, _temp) = sluice_to(&url, Some(&ca), &through).await;
    let echoed = call(&client, "echo", serde_json::json!({"text": "tunnelled"})).await;
    assert_eq!(first_text(&echoed), "tunnelled");
    assert_ne!(echoed.is_error, Some(true));
    client.cancel().await.unwrap();
    // Each connection (the requests', the upstream's stream) was a tunnel
    // asked for the upstream's host and port, with the proxy's
    // credentials from its URL (base64 of "pu:p@ss").
    let host = url.trim_start_matches("https://").trim_end_matches("/mcp");
    let mut tunnels = 0;
    while let Ok(head) = heads.try_recv() {
        assert!(
            head.starts_with(&format!("CONNECT {host} HTTP/1.1\r\n")),
            "{head}"
        );
        assert!(
            head.contains("Proxy-Authorization: Basic cHU6cEBzcw==\r\n"),
            "{head}"
        );
        tunnels += 1;
    }
    assert!(tunnels > 0, "sluice did not go through the proxy");

    // `NO_PROXY` naming the host: straight to it, a proxy not asked.
    let (proxy, mut heads) = connect_proxy().await;
    let direct = [
        format!("HTTPS_PROXY=http://{proxy}"),
        "NO_PROXY=localhost".to_owned(),
    ];
    let (client, _temp) = sluice_to(&url, Some(&ca), &direct).await;
    let echoed = call(&client, "echo", serde_json::json!({"text": "direct"})).await;
    assert_eq!(first_text(&echoed), "direct");
    client.cancel().await.unwrap();
    assert!(heads.try_recv().is_err(), "the proxy was asked");
}

/// Debian's tinyproxy on a port of its own, asking for `user:password`
/// (Basic); its log (every request it relays) comes out of the receiver.
/// Killed on drop.
async fn tinyproxy(
    dir: &TempDir,
    user: &str,
    password: &str,
) -> (
    tokio::process::Child,
    String,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    peers();
    let port = free_port();
    let config = dir.file(
        "tinyproxy.conf",
        &format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\nLogLevel Info\nBasicAuth {user} {password}\n"
        ),
    );
    let mut child = Command::new("tinyproxy")
        .arg("-d")
        .arg("-c")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("tinyproxy (Debian's: tests/peers/install.sh installs it)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (log, logged) = tokio::sync::mpsc::unbounded_channel();
    let (ready, started) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut ready = Some(ready);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("Accepting connections") {
                ready.take().map(|ready| ready.send(()));
            }
            let _ = log.send(line);
        }
    });
    tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .expect("tinyproxy serves within 10 s")
        .expect("tinyproxy started");
    (child, format!("127.0.0.1:{port}"), logged)
}

/// A real proxy (Debian's tinyproxy, asking for credentials) named by
/// `HTTP_PROXY` and `HTTPS_PROXY`: an `http://` upstream is reached with
/// absolute-form requests, an `https://` one through a `CONNECT` tunnel,
/// the proxy's credentials from its URL.
#[tokio::test]
async fn a_real_proxy_relays_an_http_upstream_and_tunnels_an_https_one() {
    let dir = TempDir::new("tinyproxy");
    let (_proxy, proxy, mut log) = tinyproxy(&dir, "pu", "pss1").await;
    let (_server, plain) = sample_over_http().await;
    let tls = format!("{}/mcp", tls_in_front_of(plain.clone()).await);
    let config = dir.file(
        "sluice.toml",
        &format!(
            "[upstreams.plain]\nurl = \"http://{plain}/mcp\"\n[upstreams.tls]\nurl = {tls:?}\n"
        ),
    );
    let ca = repo().join("tests/fixtures/tls/ca.pem");
    let mut command: Vec<String> = [
        "env".to_owned(),
        "-u".to_owned(),
        "NO_PROXY".to_owned(),
        "-u".to_owned(),
        "no_proxy".to_owned(),
        format!("SSL_CERT_FILE={}", ca.display()),
        format!("HTTP_PROXY=http://pu:pss1@{proxy}"),
        format!("HTTPS_PROXY=http://pu:pss1@{proxy}"),
    ]
    .into();
    command.extend(via_config(&config));
    let (client, _) = connect(&command).await;
    let names = tool_names(&client).await;
    for upstream in ["plain", "tls"] {
        let echo = names
            .iter()
            .find(|n| n.starts_with(upstream) && n.ends_with("echo"))
            .unwrap_or_else(|| panic!("no echo of {upstream} in {names:?}"));
        let echoed = call(&client, echo, serde_json::json!({"text": upstream})).await;
        assert_eq!(first_text(&echoed), upstream);
        assert_ne!(echoed.is_error, Some(true));
    }
    client.cancel().await.unwrap();

    // What tinyproxy relayed: the http:// upstream's requests in absolute
    // form, a tunnel to the https:// one's host and port.
    let mut relayed = Vec::new();
    while let Ok(line) = log.try_recv() {
        relayed.push(line);
    }
    let said = |what: &str| relayed.iter().any(|line| line.contains(what));
    assert!(
        said(&format!("POST http://{plain}/mcp HTTP/1.1")),
        "{relayed:#?}"
    );
    let host = tls.trim_start_matches("https://").trim_end_matches("/mcp");
    assert!(said(&format!("CONNECT {host} HTTP/1.1")), "{relayed:#?}");
}

/// sluice serves `https://` itself with `[http] tls_cert` and `tls_key`
/// (relative to the config file), and its admin server too: another sluice reaches it as an HTTPS
/// upstream (its certificate checked against the fixture's CA) and calls a
/// tool through it with a bearer token; the protected-resource metadata
/// names the `https://` URL; a plain HTTP request on that port gets no
/// answer, and a connection that never starts its handshake is closed
/// after `header_timeout_s`.
#[tokio::test]
async fn sluice_serves_https_itself_with_its_own_certificate() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let temp = TempDir::new("https-listener");
    let fixtures = repo().join("tests/fixtures/tls");
    for name in ["localhost.pem", "localhost.key"] {
        std::fs::copy(fixtures.join(name), temp.0.join(name)).unwrap();
    }
    let token = "alice-https-token";
    let config = temp.file(
        "sluice.toml",
        &format!(
            "{}[http]\ntls_cert = \"localhost.pem\"\ntls_key = \"localhost.key\"\nheader_timeout_s = 1\n{}",
            toml_upstream("sample", &sample()),
            auth_tokens(&[("alice", token)])
        ),
    );
    let served = HttpSluice::with_admin(&config).await;
    assert!(
        served.url.starts_with("https://127.0.0.1:"),
        "{}",
        served.url
    );
    let port = served
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/mcp");
    let url = format!("https://localhost:{port}/mcp");

    // sluice as the client, over TLS, with the token.
    let front = TempDir::new("https-listener-client");
    let front_config = front.file(
        "sluice.toml",
        &format!(
            "[upstreams.far]\nurl = {url:?}\nheaders = {{ Authorization = \"Bearer {token}\" }}\n"
        ),
    );
    let mut command = vec![
        "env".to_owned(),
        format!("SSL_CERT_FILE={}", fixtures.join("ca.pem").display()),
    ];
    command.extend(via_config(&front_config));
    let (client, _) = connect(&command).await;
    let echoed = call(
        &client,
        "echo",
        serde_json::json!({"text": "over sluice's TLS"}),
    )
    .await;
    assert_eq!(first_text(&echoed), "over sluice's TLS");
    client.cancel().await.unwrap();

    // The metadata names the URL as the client reached it: https.
    sluice::install_tls_provider();
    // A client that trusts `ca` (a file of the fixtures) alone.
    let trusting = |ca: &str| {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(fixtures.join(ca)).unwrap());
        // A connection, and so a handshake, for each request.
        reqwest::Client::builder()
            .tls_certs_only([ca.unwrap()])
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let (first_ca, renewed_ca) = (trusting("ca.pem"), trusting("renewed-ca.pem"));
    let metadata_url = format!("https://localhost:{port}/.well-known/oauth-protected-resource");
    let metadata: serde_json::Value = first_ca
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], url.as_str(), "{metadata}");
    // The admin server speaks TLS with the same certificate.
    let said_https = served
        .stderr
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("sluice: serving the admin page at https://"));
    assert!(said_https, "the admin server serves https");
    let admin_port = admin_address(&served)
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let scraped = first_ca
        .get(format!("https://localhost:{admin_port}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(
        scraped
            .text()
            .await
            .unwrap()
            .contains("sluice_refusals_total")
    );

    // A renewal, without a restart. Half written (the new certificate,
    // the old key): the first certificate goes on, and the log says why.
    let reaches = |client: &reqwest::Client| {
        let request = client.get(&metadata_url).send();
        async move { request.await.is_ok_and(|r| r.status() == 200) }
    };
    assert!(!reaches(&renewed_ca).await);
    std::fs::copy(fixtures.join("renewed.pem"), temp.0.join("localhost.pem")).unwrap();
    let said = |what: &str| {
        let log = served.stderr.lock().unwrap().clone();
        log.iter().any(|line| line.contains(what))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !said("the TLS files changed but cannot be served with") {
        assert!(tokio::time::Instant::now() < deadline, "no warning");
        // A fresh client each time: see below.
        assert!(
            reaches(&trusting("ca.pem")).await,
            "the first certificate went on"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Whole: the renewed certificate from a handshake on.
    std::fs::copy(fixtures.join("renewed.key"), temp.0.join("localhost.key")).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !reaches(&renewed_ca).await {
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // (A fresh client: one that connected before resumes its TLS session,
    // which checks no certificate.)
    assert!(
        !reaches(&trusting("ca.pem")).await,
        "the first certificate is gone"
    );
    assert!(said("serving the TLS certificate read again"));

    // Plain HTTP on that port: no HTTP answer.
    let address = format!("127.0.0.1:{port}");
    let mut plain = tokio::net::TcpStream::connect(&address).await.unwrap();
    plain
        .write_all(b"GET /mcp HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer)).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    // A connection that says nothing is closed after the header timeout.
    let mut silent = tokio::net::TcpStream::connect(&address).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut [0; 16])).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "still open: {closed:?}"
    );
}
