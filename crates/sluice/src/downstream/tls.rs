//! TLS on the HTTP listener (`[http] tls_cert`, `tls_key`): sluice serves
//! `https://HOST/mcp` itself, so that a team's bearer tokens and results
//! do not cross the network in clear where no proxy terminates TLS for it.
//!
//! The files are read and checked when sluice starts (before it listens):
//! a missing file, a file with no certificate, a key that is not PEM or
//! does not match the certificate each stop it with an error that names
//! the file. A renewed certificate is served without a restart (the files
//! are looked at again, at most every second, by the next handshake). Each
//! connection's handshake must end within `[http] header_timeout_s`, as a
//! request's headers must: a client that connects and says nothing holds
//! nothing for long.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use sluice_core::config::TlsFiles;

/// The scheme of a listener's URLs: `https` with TLS (`tls`), else `http`.
pub fn scheme<T>(tls: &Option<T>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}

/// Why the TLS files cannot be served with.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {which} {}: {why}", .path.display())]
    Read {
        /// `[http] tls_cert` or `tls_key`.
        which: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What the system said.
        why: std::io::Error,
    },
    /// A file holds nothing of what it should.
    #[error("{which} {}: {what}", .path.display())]
    Content {
        /// `[http] tls_cert` or `tls_key`.
        which: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it, and what it should hold.
        what: String,
    },
    /// The certificate and the key do not go together.
    #[error("[http] tls_cert and tls_key cannot be served with together: {0}")]
    Pair(rustls::Error),
}

const CERT: &str = "[http] tls_cert";
const KEY: &str = "[http] tls_key";

fn read(which: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|why| TlsError::Read {
        which,
        path: path.to_owned(),
        why,
    })
}

/// The certificate and key of `files`, checked to go together.
fn certified(
    files: &TlsFiles,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let content = |which, path: &Path, what: String| TlsError::Content {
        which,
        path: path.to_owned(),
        what,
    };
    let pem = read(CERT, &files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| content(CERT, &files.cert, format!("not PEM certificates ({e})")))?;
    if chain.is_empty() {
        return Err(content(
            CERT,
            &files.cert,
            "no certificate in it: it should hold the server's certificate, then the ones that issued it, each as -----BEGIN CERTIFICATE-----".into(),
        ));
    }
    let pem = read(KEY, &files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        content(
            KEY,
            &files.key,
            format!("no private key in it ({e}): it should hold one, as -----BEGIN PRIVATE KEY----- (or RSA PRIVATE KEY, EC PRIVATE KEY)"),
        )
    })?;
    CertifiedKey::from_der(chain, key, provider)
        .map(Arc::new)
        .map_err(TlsError::Pair)
}

/// How often, at most, a handshake looks whether the files changed.
const RECHECK: Duration = Duration::from_secs(1);

/// When each file was last changed (`None`: it cannot be read now).
type Stamp = (Option<SystemTime>, Option<SystemTime>);

fn stamp(files: &TlsFiles) -> Stamp {
    let changed = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    (changed(&files.cert), changed(&files.key))
}

/// The listener's certificate, read again when its files change: a
/// renewed certificate is served from the next handshake on, without a
/// restart (which would end every session). At most every [`RECHECK`] a
/// handshake looks at the files' times; when they changed, they are read
/// and checked; if they do not serve (a renewal half written: a new
/// certificate with the old key), the previous pair goes on and sluice's
/// log says why, until they change again.
#[derive(Debug)]
struct Reloading {
    files: TlsFiles,
    provider: Arc<rustls::crypto::CryptoProvider>,
    loaded: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Stamp,
    checked: Instant,
}

impl rustls::server::ResolvesServerCert for Reloading {
    fn resolve(&self, _: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if loaded.checked.elapsed() >= RECHECK {
            loaded.checked = Instant::now();
            let now = stamp(&self.files);
            if now != loaded.stamp {
                loaded.stamp = now;
                match certified(&self.files, &self.provider) {
                    Ok(key) => {
                        loaded.key = key;
                        tracing::info!(
                            cert = %self.files.cert.display(),
                            "serving the TLS certificate read again: its files changed"
                        );
                    }
                    Err(e) => tracing::warn!(
                        "the TLS files changed but cannot be served with, so the previous certificate goes on: {e}"
                    ),
                }
            }
        }
        Some(loaded.key.clone())
    }
}

/// The server side of TLS with `files`: their certificate chain and key
/// (read again when they change), HTTP/1.1 offered by ALPN.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let before = stamp(files);
    let key = certified(files, &provider)?;
    let resolver = Reloading {
        files: files.clone(),
        provider: provider.clone(),
        loaded: Mutex::new(Loaded {
            key,
            stamp: before,
            checked: Instant::now(),
        }),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Pair)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tls")
            .join(name)
    }

    /// The fixture's pair serves; each wrong file says which it is and
    /// what is wrong with it.
    #[test]
    fn the_files_are_checked_and_each_fault_named() {
        let files = |cert: &str, key: &str| TlsFiles {
            cert: fixture(cert),
            key: fixture(key),
        };
        let config = server_config(&files("localhost.pem", "localhost.key")).unwrap();
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
        for (files, expected) in [
            (
                files("missing.pem", "localhost.key"),
                "cannot read [http] tls_cert ",
            ),
            (
                files("localhost.key", "localhost.key"),
                "no certificate in it",
            ),
            (files("localhost.pem", "localhost.pem"), "[http] tls_key "),
            // The CA's certificate with the server's key: no pair.
            (
                files("ca.pem", "localhost.key"),
                "cannot be served with together",
            ),
        ] {
            let error = server_config(&files).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
