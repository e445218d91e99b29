//! Authentication on the HTTP listener: who is calling, from the request's
//! `Authorization: Bearer` token, and nothing past `/mcp` without one.
//!
//! [`Authenticator`] checks a token against the `[auth]` configuration:
//! static tokens by their SHA-256 digests (compared in constant time), and
//! JWTs from an OAuth 2.1 authorization server (signature by a key of its
//! JWKS, chosen by `kid`; `iss`, `aud`, `exp` and `nbf`). [`protect`] puts it
//! in front of `/mcp` as an axum middleware, serves the RFC 9728
//! protected-resource metadata, and binds each legacy session to the
//! principal that created it. The [`Principal`] of a request is put into its
//! extensions, where rmcp's `http::request::Parts` carries it to the session.
//!
//! Tokens never appear in logs, not even at debug level: only the principal
//! (or the one a rejected JWT claims) and the reason.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::downstream::http_sessions::SessionId;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use jsonwebtoken::crypto::{CryptoProvider, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, Validation};
use sha2::{Digest as _, Sha256};
use sluice_core::config::{AuthConfig, JwksSource, JwtConfig, ProxyAuth};
use subtle::ConstantTimeEq as _;

/// Who made a request: the principal its bearer token stands for. Put into
/// the HTTP request's extensions by [`protect`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal(pub Arc<str>);

/// Why sluice cannot start with this `[auth]`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `jwks_file` could not be read.
    #[error("[auth.jwt]: cannot read `jwks_file` {path}: {source}")]
    JwksFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// `jwks_file` holds no key sluice can check a signature with.
    #[error("[auth.jwt]: `jwks_file` {path}: {why}")]
    JwksContent {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The HTTP client for `jwks_url` could not be built.
    #[error("[auth.jwt]: cannot build the HTTP client that fetches `jwks_url`: {0}")]
    Client(String),
}

/// The longest bearer token looked at; a longer one is refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// The largest JWKS document read.
const MAX_JWKS_BYTES: usize = 1 << 20;
/// How often, at most, the JWKS is fetched again for an unknown `kid`.
const JWKS_REFETCH_EVERY: Duration = Duration::from_secs(10);
/// How long a JWKS fetch may take.
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Clock skew allowed on `exp` and `nbf`, in seconds.
const LEEWAY_S: u64 = 60;
/// The header of a legacy (2025-11-25) session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Checks bearer tokens against the `[auth]` configuration.
pub struct Authenticator {
    /// Who may come in: replaced whole when the configuration is read
    /// again ([`Authenticator::reload`]); a request checks the one it read.
    credentials: std::sync::RwLock<Arc<Credentials>>,
    /// Which principal created each live legacy session.
    sessions: SessionOwners,
}

/// The tokens and JWT settings of one reading of `[auth]`.
struct Credentials {
    /// Static tokens: who, and the SHA-256 digest of their token.
    tokens: Vec<(Principal, [u8; 32])>,
    /// JWTs, with `[auth.jwt]`.
    jwt: Option<JwtChecker>,
    /// An authenticating proxy's header, with `[auth.proxy]`.
    proxy: Option<ProxyAuth>,
}

/// Why a request has no principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// It carries no credential at all.
    Missing,
    /// What it carries is refused: why (a reason that names no secret).
    Invalid(String),
}

/// The longest principal a proxy's header may name, in bytes.
const MAX_PROXIED_PRINCIPAL: usize = 256;

impl Credentials {
    /// Reads `jwks_file` now (a `jwks_url` is fetched when the first JWT
    /// arrives).
    fn new(config: &AuthConfig) -> Result<Self, AuthError> {
        let tokens = config
            .tokens
            .iter()
            .map(|t| (Principal(t.principal.as_str().into()), t.sha256))
            .collect();
        let jwt = config.jwt.as_ref().map(JwtChecker::new).transpose()?;
        Ok(Self {
            tokens,
            jwt,
            proxy: config.proxy.clone(),
        })
    }

    /// The principal `[auth.proxy]`'s header names in `headers`, if it is
    /// there: believed from one of the proxies' addresses (`peer`), refused
    /// (why) from anywhere else, as a header no proxy checked.
    fn proxied(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> Option<Result<Principal, String>> {
        let proxy = self.proxy.as_ref()?;
        let mut values = headers.get_all(proxy.header.as_str()).iter();
        let value = values.next()?;
        if values.next().is_some() {
            // A proxy that added its header to a client's, rather than
            // putting its own in its place: which one it checked is unknown.
            return Some(Err(format!(
                "the `{}` header comes more than once: it must name one principal",
                proxy.header
            )));
        }
        if !peer.is_some_and(|peer| proxy.from.iter().any(|network| network.contains(peer))) {
            return Some(Err(format!(
                "the `{}` header is believed only from `[auth.proxy] from`, not from this address",
                proxy.header
            )));
        }
        let name = value.to_str().map(str::trim).unwrap_or_default();
        if name.is_empty()
            || name.len() > MAX_PROXIED_PRINCIPAL
            || name.chars().any(char::is_control)
        {
            return Some(Err(format!(
                "the `{}` header names no principal sluice takes (1 to {MAX_PROXIED_PRINCIPAL} visible characters)",
                proxy.header
            )));
        }
        Some(Ok(Principal(name.into())))
    }

    /// The principal whose static token this is. Every configured digest is
    /// compared, in constant time, whichever matches.
    fn static_token(&self, token: &str) -> Option<Principal> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (principal, expected) in &self.tokens {
            if bool::from(expected.ct_eq(&digest)) {
                found = Some(principal.clone());
            }
        }
        found
    }

    /// What it admits, in a few words, for the log.
    fn described(&self) -> String {
        let mut admitted = vec![sluice_core::format::counted(
            self.tokens.len() as u64,
            "token",
            "tokens",
        )];
        if let Some(jwt) = &self.jwt {
            admitted.push(format!("JWTs of {}", jwt.config.issuer));
        }
        if let Some(proxy) = &self.proxy {
            admitted.push(format!(
                "the `{}` header from {} proxy addresses or networks",
                proxy.header,
                proxy.from.len()
            ));
        }
        admitted.join(" and ")
    }
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let credentials = self.credentials();
        f.debug_struct("Authenticator")
            .field("tokens", &credentials.tokens.len())
            .field("jwt", &credentials.jwt.as_ref().map(|j| &j.config.issuer))
            .finish()
    }
}

impl Authenticator {
    /// An authenticator for `config`; reads `jwks_file` now (a `jwks_url`
    /// is fetched when the first JWT arrives).
    pub fn new(config: &AuthConfig) -> Result<Arc<Self>, AuthError> {
        install_jwt_crypto();
        Ok(Arc::new(Self {
            credentials: std::sync::RwLock::new(Arc::new(Credentials::new(config)?)),
            sessions: SessionOwners::default(),
        }))
    }

    /// Admits from now on whom `config` admits, and no one else: a token
    /// taken out is refused at its next request (its sessions stay its
    /// own). What it admits, in a few words; on an error, the previous
    /// configuration stays.
    pub fn reload(&self, config: &AuthConfig) -> Result<String, AuthError> {
        let credentials = Credentials::new(config)?;
        let described = credentials.described();
        *self.credentials.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(credentials);
        Ok(described)
    }

    /// The configuration in use now.
    fn credentials(&self) -> Arc<Credentials> {
        self.credentials
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Who makes `request`: the principal an authenticating proxy names
    /// (`[auth.proxy]`, believed from the proxies' addresses only), else
    /// the one its bearer token stands for.
    pub fn principal_of<'a>(
        &'a self,
        request: &'a Request,
    ) -> impl Future<Output = Result<Principal, Refused>> + Send + 'a {
        let peer = request
            .extensions()
            .get::<super::PeerAddr>()
            .map(|p| p.0.ip());
        // Not `request` across the awaits (its body is not `Sync`): its
        // headers.
        self.principal_in(request.headers(), peer)
    }

    /// [`Authenticator::principal_of`] a request of `headers` from `peer`.
    async fn principal_in(
        &self,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Principal, Refused> {
        if let Some(proxied) = self.credentials().proxied(headers, peer) {
            return proxied.map_err(Refused::Invalid);
        }
        match bearer_token(headers) {
            Ok(Some(token)) => self.authenticate(token).await.map_err(Refused::Invalid),
            Ok(None) => Err(Refused::Missing),
            Err(why) => Err(Refused::Invalid(why.to_owned())),
        }
    }

    /// The principal `token` stands for, or why it is refused (a reason
    /// that names no secret).
    pub async fn authenticate(&self, token: &str) -> Result<Principal, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(format!("the token is over {MAX_TOKEN_BYTES} bytes long"));
        }
        let credentials = self.credentials();
        if let Some(principal) = credentials.static_token(token) {
            return Ok(principal);
        }
        match &credentials.jwt {
            Some(jwt) if token.bytes().filter(|&b| b == b'.').count() == 2 => {
                jwt.check(token).await
            }
            _ => Err("unknown token".into()),
        }
    }

    /// The issuer named as authorization server in the metadata, with `[auth.jwt]`.
    fn issuer(&self) -> Option<String> {
        self.credentials()
            .jwt
            .as_ref()
            .map(|j| j.config.issuer.clone())
    }
}

/// Checks JWTs against `[auth.jwt]`.
struct JwtChecker {
    config: JwtConfig,
    /// The keys by `kid` (`""` for a key without one), replaced whole on refetch.
    keys: RwLock<Arc<KeySet>>,
    /// When the JWKS was last fetched; held while fetching, so that
    /// concurrent refetches wait for one and then use its keys.
    fetched: tokio::sync::Mutex<Option<Instant>>,
    /// The client for `jwks_url`, and the URL parsed (without the
    /// credentials it may carry, which the client sends).
    http: Option<(crate::http_client::HttpClient, http::Uri)>,
}

/// The usable keys of a JWKS, by `kid`.
#[derive(Default)]
struct KeySet(HashMap<String, Vec<VerifyingKey>>);

/// One public key and the algorithms it may verify.
struct VerifyingKey {
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
}

impl JwtChecker {
    fn new(config: &JwtConfig) -> Result<Self, AuthError> {
        let (keys, fetched, http) = match &config.jwks {
            JwksSource::File(path) => {
                let keys = read_jwks_file(path)?;
                if keys.0.is_empty() {
                    return Err(AuthError::JwksContent {
                        path: path.clone(),
                        why: "no RSA or EC (P-256, P-384) signing key in it".into(),
                    });
                }
                (keys, Some(Instant::now()), None)
            }
            JwksSource::Url(url) => {
                let (client, uri) = crate::http_client::HttpClient::open(url, JWKS_FETCH_TIMEOUT)
                    .map_err(AuthError::Client)?;
                (KeySet::default(), None, Some((client, uri)))
            }
        };
        Ok(Self {
            config: config.clone(),
            keys: RwLock::new(Arc::new(keys)),
            fetched: tokio::sync::Mutex::new(fetched),
            http,
        })
    }

    async fn check(&self, token: &str) -> Result<Principal, String> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| format!("not a JWT that sluice can check: {e}"))?;
        let algorithm = header.alg;
        if !ACCEPTED_ALGORITHMS.contains(&algorithm) {
            return Err(format!("JWT algorithm {algorithm:?} is not accepted"));
        }
        let kid = header.kid.unwrap_or_default();
        let mut keys = self.keys();
        if !keys.0.contains_key(&kid) {
            // A key rotated in since the last fetch: fetch again.
            self.refetch().await;
            keys = self.keys();
        }
        let Some(candidates) = keys.0.get(&kid) else {
            return Err(format!(
                "JWT signed by an unknown key (kid {:?}, not in the JWKS)",
                cut(&kid, 64)
            ));
        };
        let Some(key) = candidates
            .iter()
            .find(|k| k.algorithms.contains(&algorithm))
        else {
            return Err(format!(
                "JWT algorithm {algorithm:?} is not one of its key's (kid {:?})",
                cut(&kid, 64)
            ));
        };
        let mut validation = Validation::new(algorithm);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.key,
            &validation,
        )
        .map_err(|e| {
            let why = match e.kind() {
                ErrorKind::ExpiredSignature => "JWT expired".to_owned(),
                ErrorKind::ImmatureSignature => "JWT not valid yet (nbf)".to_owned(),
                ErrorKind::InvalidAudience => {
                    format!("JWT for another audience (not {:?})", self.config.audience)
                }
                ErrorKind::InvalidIssuer => {
                    format!("JWT from another issuer (not {:?})", self.config.issuer)
                }
                ErrorKind::InvalidSignature => "JWT signature does not verify".to_owned(),
                ErrorKind::MissingRequiredClaim(claim) => {
                    format!("JWT without the `{claim}` claim")
                }
                other => format!("JWT refused: {other:?}"),
            };
            match claimed(token, &self.config.principal_claim) {
                Some(who) => format!("{why} (claims to be {who:?})"),
                None => why,
            }
        })?
        .claims;
        match claims.get(&self.config.principal_claim) {
            Some(serde_json::Value::String(who)) if !who.is_empty() => {
                Ok(Principal(who.as_str().into()))
            }
            _ => Err(format!(
                "JWT without a string `{}` claim to name its principal",
                self.config.principal_claim
            )),
        }
    }

    fn keys(&self) -> Arc<KeySet> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fetches the JWKS again, unless that was done less than
    /// [`JWKS_REFETCH_EVERY`] ago (then the keys already fetched stand).
    async fn refetch(&self) {
        let mut fetched = self.fetched.lock().await;
        if fetched.is_some_and(|at| at.elapsed() < JWKS_REFETCH_EVERY) {
            return;
        }
        *fetched = Some(Instant::now());
        let result = match &self.config.jwks {
            JwksSource::File(path) => read_jwks_file(path).map_err(|e| e.to_string()),
            JwksSource::Url(_) => self.fetch().await,
        };
        match result {
            Ok(keys) => {
                tracing::info!(keys = keys.0.len(), "JWKS loaded");
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
            }
            // The keys fetched before stay in use.
            Err(why) => tracing::warn!("cannot refresh the JWKS: {why}"),
        }
    }

    async fn fetch(&self) -> Result<KeySet, String> {
        use crate::http_client::{chunk, error_chain};
        // `url` has no credentials: the client sends them.
        let (client, url) = self.http.as_ref().expect("a client for jwks_url");
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            http::HeaderValue::from_static("application/json"),
        );
        let read = async {
            let mut response = client
                .send(http::Method::GET, url, headers, bytes::Bytes::new())
                .await
                .map_err(|e| format!("GET {url}: {}", error_chain(&e)))?;
            if !response.status().is_success() {
                return Err(format!("GET {url}: HTTP {}", response.status()));
            }
            let mut body = Vec::new();
            while let Some(chunk) = chunk(&mut response)
                .await
                .map_err(|e| format!("GET {url}: {}", error_chain(&e)))?
            {
                if body.len() + chunk.len() > MAX_JWKS_BYTES {
                    return Err(format!(
                        "GET {url}: the JWKS is over {MAX_JWKS_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        let body = tokio::time::timeout(JWKS_FETCH_TIMEOUT, read)
            .await
            .map_err(|_| format!("GET {url}: no answer within {JWKS_FETCH_TIMEOUT:?}"))??;
        parse_jwks(&body).map_err(|why| format!("{url}: {why}"))
    }
}

/// The algorithms sluice checks JWT signatures with: RSA and ECDSA, never
/// HMAC (a public key is no shared secret) nor `none`.
const ACCEPTED_ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

fn read_jwks_file(path: &Path) -> Result<KeySet, AuthError> {
    let text = std::fs::read(path).map_err(|source| AuthError::JwksFile {
        path: path.to_owned(),
        source,
    })?;
    if text.len() > MAX_JWKS_BYTES {
        return Err(AuthError::JwksContent {
            path: path.to_owned(),
            why: format!("over {MAX_JWKS_BYTES} bytes"),
        });
    }
    parse_jwks(&text).map_err(|why| AuthError::JwksContent {
        path: path.to_owned(),
        why,
    })
}

/// The signing keys of a JWKS document (`{"keys": [...]}`). Keys sluice
/// cannot use (HMAC, encryption keys, other curves) are left out.
fn parse_jwks(body: &[u8]) -> Result<KeySet, String> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let document: Document = serde_json::from_slice(body)
        .map_err(|e| format!("not a JWKS (a JSON object with `keys`): {e}"))?;
    let mut set = KeySet::default();
    for value in document.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            continue;
        };
        if matches!(
            jwk.common.public_key_use,
            Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
        ) {
            continue;
        }
        let by_type: &[Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => &ACCEPTED_ALGORITHMS[..6],
            AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                EllipticCurve::P256 => &[Algorithm::ES256],
                EllipticCurve::P384 => &[Algorithm::ES384],
                _ => continue,
            },
            _ => continue,
        };
        let algorithms: Vec<Algorithm> = match jwk.common.key_algorithm {
            None => by_type.to_vec(),
            Some(named) => match by_type.iter().find(|a| same_algorithm(**a, named)) {
                Some(a) => vec![*a],
                None => continue,
            },
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        set.0
            .entry(jwk.common.key_id.clone().unwrap_or_default())
            .or_default()
            .push(VerifyingKey { key, algorithms });
    }
    Ok(set)
}

fn same_algorithm(algorithm: Algorithm, named: KeyAlgorithm) -> bool {
    format!("{algorithm:?}") == format!("{named:?}")
}

/// The principal a (refused) JWT claims to be, for the log line; unverified.
fn claimed(token: &str, claim: &str) -> Option<String> {
    let claims = jsonwebtoken::dangerous::insecure_decode::<
        serde_json::Map<String, serde_json::Value>,
    >(token)
    .ok()?
    .claims;
    claims.get(claim)?.as_str().map(|s| cut(s, 64).to_owned())
}

/// At most `max` characters of `text`.
fn cut(text: &str, max: usize) -> &str {
    text.char_indices()
        .nth(max)
        .map_or(text, |(at, _)| &text[..at])
}

// --- JWT signature checks on ring --------------------------------------------
//
// jsonwebtoken 10+ leaves its cryptography to a provider: `rust_crypto`
// (the RustCrypto `rsa`, `p256`, `p384`, `ed25519-dalek`, `hmac`, `sha2`
// 0.10 crates: some 30 more crates, and `rsa` carries RUSTSEC-2023-0071) or
// `aws_lc_rs` (a C library built from source: minutes on a small machine).
// sluice already has ring (rustls uses it for HTTPS upstreams), and ring
// verifies exactly what a resource server needs, RSA PKCS#1 v1.5 and PSS
// (2048 to 8192 bits) and ECDSA P-256 and P-384, so this provider adds no
// crypto crate. It only verifies: sluice never signs a token.

static RING_PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: |_, _| Err(ErrorKind::UnsupportedAlgorithm.into()),
    verifier_factory: ring_verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes [`RING_PROVIDER`] jsonwebtoken's provider (once per process).
fn install_jwt_crypto() {
    let _ = RING_PROVIDER.install_default();
}

/// A public key and the ring algorithm that checks signatures with it.
struct RingVerifier {
    algorithm: Algorithm,
    key: DecodingKeyKind,
    rsa: Option<&'static ring::signature::RsaParameters>,
    ecdsa: Option<&'static ring::signature::EcdsaVerificationAlgorithm>,
}

fn ring_verifier(
    algorithm: &Algorithm,
    key: &DecodingKey,
) -> jsonwebtoken::errors::Result<Box<dyn JwtVerifier>> {
    use ring::signature as s;
    let (rsa, ecdsa) = match algorithm {
        Algorithm::RS256 => (Some(&s::RSA_PKCS1_2048_8192_SHA256), None),
        Algorithm::RS384 => (Some(&s::RSA_PKCS1_2048_8192_SHA384), None),
        Algorithm::RS512 => (Some(&s::RSA_PKCS1_2048_8192_SHA512), None),
        Algorithm::PS256 => (Some(&s::RSA_PSS_2048_8192_SHA256), None),
        Algorithm::PS384 => (Some(&s::RSA_PSS_2048_8192_SHA384), None),
        Algorithm::PS512 => (Some(&s::RSA_PSS_2048_8192_SHA512), None),
        Algorithm::ES256 => (None, Some(&s::ECDSA_P256_SHA256_FIXED)),
        Algorithm::ES384 => (None, Some(&s::ECDSA_P384_SHA384_FIXED)),
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    Ok(Box::new(RingVerifier {
        algorithm: *algorithm,
        key: key.kind().clone(),
        rsa,
        ecdsa,
    }))
}

impl jsonwebtoken::signature::Verifier<Vec<u8>> for RingVerifier {
    fn verify(
        &self,
        message: &[u8],
        signature: &Vec<u8>,
    ) -> Result<(), jsonwebtoken::signature::Error> {
        use ring::signature::{RsaPublicKeyComponents, UnparsedPublicKey};
        let verified = match (&self.key, self.rsa, self.ecdsa) {
            (DecodingKeyKind::RsaModulusExponent { n, e }, Some(rsa), _) => {
                RsaPublicKeyComponents { n, e }.verify(rsa, message, signature)
            }
            (DecodingKeyKind::SecretOrDer(der), Some(rsa), _) => {
                UnparsedPublicKey::new(rsa, der).verify(message, signature)
            }
            (DecodingKeyKind::SecretOrDer(point), None, Some(ecdsa)) => {
                UnparsedPublicKey::new(ecdsa, point).verify(message, signature)
            }
            _ => return Err(jsonwebtoken::signature::Error::new()),
        };
        verified.map_err(|_| jsonwebtoken::signature::Error::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

// --- Legacy sessions belong to their principal ------------------------------

/// Which principal created each legacy session. An entry goes when its
/// session is deleted, when a request for it is answered 404 and the
/// session manager no longer has it, and in sweeps of dead sessions once the
/// map has doubled since the last sweep: the map stays within about twice
/// the live sessions.
#[derive(Default)]
struct SessionOwners {
    owners: Mutex<HashMap<SessionId, Principal>>,
    /// The size at which the next sweep runs.
    sweep_at: AtomicUsize,
    sweeping: AtomicBool,
}

/// Whether the session manager still has a session.
type IsLive = Arc<dyn Fn(SessionId) -> BoxFuture<'static, bool> + Send + Sync>;

impl SessionOwners {
    fn owner(&self, id: &str) -> Option<Principal> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Principal>> {
        self.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn insert(&self, id: SessionId, principal: Principal, is_live: &IsLive) {
        let len = {
            let mut owners = self.lock();
            owners.insert(id, principal);
            owners.len()
        };
        if len >= self.sweep_at.load(Ordering::Relaxed).max(1024)
            && !self.sweeping.swap(true, Ordering::AcqRel)
        {
            let ids: Vec<SessionId> = self.lock().keys().cloned().collect();
            let mut dead = Vec::new();
            for id in ids {
                if !is_live(id.clone()).await {
                    dead.push(id);
                }
            }
            let mut owners = self.lock();
            for id in dead {
                owners.remove(&id);
            }
            self.sweep_at.store(owners.len() * 2, Ordering::Relaxed);
            self.sweeping.store(false, Ordering::Release);
        }
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// Reads `[auth]` again from the config file `file` at each SIGHUP, until
/// `stop` fires: tokens are added and revoked without a restart (which
/// would end every session, and with the memory store, every stored
/// result). A file that does not read, or has no `[auth]` any more, leaves
/// the configuration in use, with an error in the log; the rest of the
/// file is not applied (it is read at the next start).
#[cfg(unix)]
pub async fn reload_on_hangup(
    auth: Arc<Authenticator>,
    file: std::path::PathBuf,
    stop: tokio_util::sync::CancellationToken,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            tracing::warn!("cannot watch SIGHUP, so [auth] is not read again on it: {e}");
            return;
        }
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        let file_name = file.display();
        let config = match sluice_core::config::Config::load(&file) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(
                    "SIGHUP: {file_name} does not read, so [auth] stays as it was: {e}"
                );
                continue;
            }
        };
        let Some(config) = config.auth else {
            tracing::error!(
                "SIGHUP: {file_name} has no [auth] now; [auth] stays as it was (serving without authentication needs a restart)"
            );
            continue;
        };
        match auth.reload(&config) {
            Ok(admitted) => tracing::info!(
                "SIGHUP: [auth] read again from {file_name}: {admitted} admitted from now on (the rest of the file applies at the next start)"
            ),
            Err(e) => tracing::error!("SIGHUP: [auth] stays as it was: {e}"),
        }
    }
}

// --- HTTP ---------------------------------------------------------------------

/// Puts `auth` in front of every route of `router` (a request without a
/// valid bearer token gets 401), and adds the protected-resource metadata
/// (RFC 9728) at `/.well-known/oauth-protected-resource` and
/// `/.well-known/oauth-protected-resource/mcp`, which need no token.
/// `sessions` are the open sessions, asked whether a session still lives
/// before its owner is forgotten.
pub fn protect(
    router: axum::Router,
    auth: Arc<Authenticator>,
    sessions: Arc<crate::downstream::http_sessions::SessionTable>,
) -> axum::Router {
    let is_live: IsLive = Arc::new(move |id: SessionId| {
        let live = sessions.has(&id);
        Box::pin(async move { live })
    });
    let metadata = {
        let auth = auth.clone();
        move |headers: HeaderMap, over_tls: Option<axum::Extension<super::OverTls>>| {
            let auth = auth.clone();
            async move { resource_metadata(&auth, &headers, over_tls.is_some()) }
        }
    };
    router
        .layer(axum::middleware::from_fn_with_state(
            (auth, is_live),
            require_bearer,
        ))
        .route(
            "/.well-known/oauth-protected-resource",
            axum::routing::get(metadata.clone()),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            axum::routing::get(metadata),
        )
}

/// The middleware: authenticates the request, keeps sessions to their
/// principals, and records who created each new session.
async fn require_bearer(
    State((auth, is_live)): State<(Arc<Authenticator>, IsLive)>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = match auth.principal_of(&request).await {
        Ok(principal) => principal,
        Err(Refused::Missing) => {
            return unauthorized(
                &request,
                None,
                "this endpoint needs an `Authorization: Bearer <token>` header",
            );
        }
        Err(Refused::Invalid(why)) => {
            tracing::info!(reason = %why, "refused a request to {}", request.uri().path());
            return unauthorized(&request, Some(&why), &why);
        }
    };
    let session: Option<SessionId> = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(Into::into);
    if let Some(id) = &session
        && let Some(owner) = auth.sessions.owner(id)
        && owner != principal
    {
        tracing::info!(
            principal = %principal.0,
            owner = %owner.0,
            "refused a request for another principal's session"
        );
        // As if the session did not exist: its id tells a stranger nothing.
        return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
    }
    tracing::debug!(principal = %principal.0, "authenticated");
    let deleting = request.method() == Method::DELETE;
    request.extensions_mut().insert(principal.clone());
    let response = next.run(request).await;
    match session {
        None => {
            if let Some(id) = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                auth.sessions.insert(id.into(), principal, &is_live).await;
            }
        }
        Some(id) if deleting && response.status().is_success() => auth.sessions.remove(&id),
        Some(id) if response.status() == StatusCode::NOT_FOUND => {
            if !is_live(id.clone()).await {
                auth.sessions.remove(&id);
            }
        }
        Some(_) => {}
    }
    response
}

/// The token of the request's `Authorization: Bearer` header: `None`
/// without one, an error for any other form.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, &'static str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("more than one Authorization header");
    }
    let value = value
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?;
    let (scheme, token) = value
        .trim()
        .split_once(' ')
        .ok_or("the Authorization header is not `Bearer <token>`")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("the Authorization header is not `Bearer <token>`");
    }
    let token = token.trim_start();
    if token.is_empty() {
        return Err("the bearer token is empty");
    }
    Ok(Some(token))
}

/// The URL the client used to reach sluice, without a path: the scheme
/// (`https` over sluice's own TLS, or when a proxy says so in
/// `X-Forwarded-Proto`) and the Host.
fn base_url(headers: &HeaderMap, over_tls: bool) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-_:[]".contains(&b))
        })
        .unwrap_or("localhost");
    let https = over_tls
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    format!("{}://{host}", if https { "https" } else { "http" })
}

/// 401 with the `WWW-Authenticate` challenge of RFC 6750 and RFC 9728
/// (`error="invalid_token"` when a token was presented and refused), and a
/// JSON body that says what is wrong.
fn unauthorized(request: &Request, refused: Option<&str>, why: &str) -> Response {
    let over_tls = request.extensions().get::<super::OverTls>().is_some();
    let metadata = format!(
        "{}/.well-known/oauth-protected-resource",
        base_url(request.headers(), over_tls)
    );
    let challenge = match refused {
        None => format!("Bearer resource_metadata=\"{metadata}\""),
        Some(_) => format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\""),
    };
    let body = serde_json::json!({
        "error": if refused.is_some() { "invalid_token" } else { "unauthorized" },
        "error_description": why,
        "resource_metadata": metadata,
    });
    let mut response = json(StatusCode::UNAUTHORIZED, &body);
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The protected-resource metadata document (RFC 9728).
fn resource_metadata(auth: &Authenticator, headers: &HeaderMap, over_tls: bool) -> Response {
    let mut document = serde_json::json!({
        "resource": format!("{}/mcp", base_url(headers, over_tls)),
        "bearer_methods_supported": ["header"],
    });
    if let Some(issuer) = auth.issuer() {
        document["authorization_servers"] = serde_json::json!([issuer]);
    }
    json(StatusCode::OK, &document)
}

/// A JSON response (axum's `Json` is behind a feature sluice leaves off).
fn json(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::config::StaticToken;

    fn with_tokens(tokens: &[(&str, &str)]) -> Arc<Authenticator> {
        Authenticator::new(&AuthConfig {
            tokens: tokens
                .iter()
                .map(|(principal, token)| StaticToken {
                    principal: (*principal).into(),
                    sha256: Sha256::digest(token.as_bytes()).into(),
                })
                .collect(),
            jwt: None,
            proxy: None,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_static_token_names_its_principal_and_any_other_is_refused() {
        let auth = with_tokens(&[("alice", "alice-secret"), ("bob", "bob-secret")]);
        assert_eq!(
            auth.authenticate("bob-secret").await.unwrap(),
            Principal("bob".into())
        );
        assert_eq!(
            auth.authenticate("alice-secret").await.unwrap(),
            Principal("alice".into())
        );
        assert_eq!(
            auth.authenticate("alice-secre").await.unwrap_err(),
            "unknown token"
        );
        // A JWT-shaped token without [auth.jwt] is just an unknown token.
        assert_eq!(
            auth.authenticate("a.b.c").await.unwrap_err(),
            "unknown token"
        );
        let long = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert!(auth.authenticate(&long).await.unwrap_err().contains("over"));
    }

    #[test]
    fn bearer_headers_are_read_strictly() {
        let headers = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            }
            h
        };
        assert_eq!(bearer_token(&headers(&[])), Ok(None));
        assert_eq!(bearer_token(&headers(&["Bearer abc"])), Ok(Some("abc")));
        assert_eq!(bearer_token(&headers(&["bearer  abc"])), Ok(Some("abc")));
        assert!(bearer_token(&headers(&["Basic abc"])).is_err());
        assert!(bearer_token(&headers(&["Bearer"])).is_err());
        assert!(bearer_token(&headers(&["Bearer "])).is_err());
        assert!(bearer_token(&headers(&["Bearer a", "Bearer b"])).is_err());
    }

    #[test]
    fn the_base_url_is_the_host_the_client_used_or_localhost() {
        let mut h = HeaderMap::new();
        assert_eq!(base_url(&h, false), "http://localhost");
        h.insert(header::HOST, HeaderValue::from_static("mcp.example:8808"));
        assert_eq!(base_url(&h, false), "http://mcp.example:8808");
        // Over sluice's own TLS.
        assert_eq!(base_url(&h, true), "https://mcp.example:8808");
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(base_url(&h, false), "https://mcp.example:8808");
        // A Host that would break out of the quoted challenge is not echoed.
        h.insert(header::HOST, HeaderValue::from_static("a\"b"));
        assert_eq!(base_url(&h, false), "https://localhost");
    }

    #[tokio::test]
    async fn tokens_with_unknown_kids_at_once_make_one_jwks_fetch() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        crate::install_tls_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks.json", listener.local_addr().unwrap());
        let fetches = Arc::new(AtomicUsize::new(0));
        let counted = fetches.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                // Slow enough that the other checks arrive while it runs.
                tokio::time::sleep(Duration::from_millis(200)).await;
                let body = r#"{"keys":[]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            }
        });
        let auth = Authenticator::new(&AuthConfig {
            tokens: Vec::new(),
            jwt: Some(JwtConfig {
                issuer: "https://idp".into(),
                audience: "sluice".into(),
                jwks: JwksSource::Url(url),
                principal_claim: "sub".into(),
            }),
            proxy: None,
        })
        .unwrap();
        // {"alg":"RS256","kid":"rotated-later"}.{}.sig
        let token = "eyJhbGciOiJSUzI1NiIsImtpZCI6InJvdGF0ZWQtbGF0ZXIifQ.e30.c2ln";
        let checks = (0..20).map(|_| auth.authenticate(token));
        for refused in futures::future::join_all(checks).await {
            assert!(
                refused
                    .unwrap_err()
                    .contains("unknown key (kid \"rotated-later\""),
            );
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // And within the next 10 s, no more.
        assert!(auth.authenticate(token).await.is_err());
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn owners_of_dead_sessions_are_swept_once_the_map_doubles() {
        let owners = SessionOwners::default();
        // Sessions whose id ends in 0 live on; the others have ended.
        let is_live: IsLive = Arc::new(|id: SessionId| Box::pin(async move { id.ends_with('0') }));
        let alice = Principal("alice".into());
        for i in 0..1023 {
            owners
                .insert(format!("s{i}").into(), alice.clone(), &is_live)
                .await;
        }
        assert_eq!(owners.lock().len(), 1023, "no sweep below 1024");
        owners.insert("s1023".into(), alice.clone(), &is_live).await;
        // The 103 live ones (s0, s10, …, s1020) are kept, with their owner.
        assert_eq!(owners.lock().len(), 103);
        assert_eq!(owners.owner("s1020"), Some(alice));
        assert_eq!(owners.owner("s1021"), None);
    }

    #[test]
    fn hmac_and_unknown_keys_in_a_jwks_are_left_out() {
        let set = parse_jwks(
            br#"{"keys":[
                {"kty":"oct","kid":"h","k":"c2VjcmV0"},
                {"kty":"EC","kid":"e","crv":"P-256","use":"enc",
                 "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
                {"kty":"EC","kid":"s","crv":"P-256",
                 "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
                {"kty":"weird","kid":"w"}
            ]}"#,
        )
        .unwrap();
        let kids: Vec<&String> = set.0.keys().collect();
        assert_eq!(kids, ["s"]);
        assert_eq!(set.0["s"][0].algorithms, [Algorithm::ES256]);
        assert!(parse_jwks(b"[]").is_err_and(|e| e.contains("not a JWKS")));
    }
}
