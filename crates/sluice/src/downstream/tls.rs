//! TLS on the HTTP listener (`[http] tls_cert`, `tls_key`): sluice serves
//! `https://HOST/mcp` itself, so that a team's bearer tokens and results
//! do not cross the network in clear where no proxy terminates TLS for it.
//!
//! The files are read and checked when sluice starts (before it listens):
//! a missing file, a file with no certificate, a key that is not PEM or
//! does not match the certificate each stop it with an error that names
//! the file. Each connection's handshake must end within `[http]
//! header_timeout_s`, as a request's headers must: a client that connects
//! and says nothing holds nothing for long.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sluice_core::config::TlsFiles;

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

/// The server side of TLS with `files`: their certificate chain and key,
/// HTTP/1.1 offered by ALPN.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
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
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Pair)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsError::Pair)?;
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
