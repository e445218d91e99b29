//! An HTTPS upstream: sluice reaches it over TLS, its certificate checked
//! against the roots the platform trusts (here the test CA of
//! `tests/fixtures/tls`, named by `SSL_CERT_FILE`), and refuses it with an
//! error that says why when the certificate is not trusted.
//!
//! The upstream is the sample server over HTTP behind a TLS terminator in
//! this process (rustls, the fixture's `localhost` certificate, valid until
//! 2126).

use std::sync::Arc;

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

/// `sluice --config` over stdio with `url` as its one upstream, and
/// `SSL_CERT_FILE` set to `roots` (the platform's roots when `None`).
async fn sluice_to(url: &str, roots: Option<&std::path::Path>) -> (Client, TempDir) {
    let temp = TempDir::new("tls");
    let config = temp.file("sluice.toml", &format!("[upstreams.s]\nurl = {url:?}\n"));
    let mut command = vec!["env".to_owned()];
    match roots {
        Some(roots) => command.push(format!("SSL_CERT_FILE={}", roots.display())),
        None => command.extend(["-u".to_owned(), "SSL_CERT_FILE".to_owned()]),
    }
    command.extend(via_config(&config));
    (connect(&command).await.0, temp)
}

#[tokio::test]
async fn an_https_upstream_is_reached_over_tls_and_an_untrusted_one_refused() {
    let (_server, plain) = sample_over_http().await;
    let url = format!("{}/mcp", tls_in_front_of(plain).await);
    let ca = repo().join("tests/fixtures/tls/ca.pem");

    let (client, _temp) = sluice_to(&url, Some(&ca)).await;
    assert!(tool_names(&client).await.contains(&"echo".to_owned()));
    let echoed = call(&client, "echo", serde_json::json!({"text": "over TLS"})).await;
    assert_eq!(first_text(&echoed), "over TLS");
    assert_ne!(echoed.is_error, Some(true));
    client.cancel().await.unwrap();

    // The same upstream, its CA not among the roots: the call fails, and
    // says it is the certificate.
    let (client, _temp) = sluice_to(&url, None).await;
    let refused = call(&client, "echo", serde_json::json!({"text": "x"})).await;
    assert_eq!(refused.is_error, Some(true), "{}", first_text(&refused));
    let why = first_text(&refused);
    assert!(why.contains("certificate") && why.contains(&url), "{why}");
    client.cancel().await.unwrap();
}
