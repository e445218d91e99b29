//! Configuration: the TOML file and the one-upstream command line.
//!
//! Parsing goes in two steps, as in ripgrep's flags: a raw form that mirrors
//! the file (serde, unknown keys rejected), then a validated [`Config`] that
//! the gateway uses. Every error names the file, the line and what is expected.
//!
//! ```toml
//! [upstreams.fs]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/code"]
//! env = { NODE_OPTIONS = "--max-old-space-size=512" }
//! cwd = "/home/me"
//!
//! [upstreams.search]
//! url = "http://127.0.0.1:3001/mcp"
//! headers = { Authorization = "Bearer ${SEARCH_TOKEN}" }   # see [`crate::vars`]
//!
//! [upstreams.fs.tools.directory_tree]   # per-tool settings
//! max_tokens = 8000
//! mode = "truncate"                      # or "buffer" (default), "passthrough"
//! timeout_s = 60                         # then the call goes on in the background
//!
//! [upstreams.fs.tools.read_text_file]
//! cache = { ttl_s = 3600, idle_s = 900, refresh_at = 0.8, per_session = false }
//!
//! [budget]                               # the defaults shown
//! max_tokens = 18000
//! max_chars = 45000
//! token_factor = 1.25
//!
//! [budget.clients."codex-mcp-client"]    # by clientInfo.name, over the built-in presets
//! max_chars = 9216
//! max_lines = 250
//!
//! [store]
//! max_bytes = 1073741824                 # 1 GiB of stored results
//! ttl_s = 1800                           # kept 30 min after their last use
//! backend = "memory"                     # "memory" | "disk" | "redis"
//! path = "/var/lib/sluice"               # disk: a directory
//! url = "redis://127.0.0.1:6379/0"       # redis (or SLUICE_REDIS_URL)
//! secret_file = "/etc/sluice/secret"     # the key that seals cursors
//! compress = true                        # zstd frames (default: disk, redis; memory: false)
//!
//! [query]                                # jq over stored results
//! timeout_s = 10                         # then the filter is stopped
//! max_memory_mb = 1024                   # per filter, beyond its parsed document
//! max_outputs = 100000
//! max_output_mb = 64
//! workers = 2                            # worker processes: queries at once
//! cache_mb = 128                         # documents each worker keeps parsed
//!
//! [operations]                           # slow calls
//! default_timeout_s = 10                 # a call waits this long, then goes on in the background
//! max_timeout_s = 300                    # the most `_timeout_s` and `wait_s` may ask
//! retention_h = 24                       # ended operations are kept this long
//! max_running = 16                       # per client
//! max_running_total = 256
//! max_ended = 256                        # ended ones kept per client (the oldest forgotten first)
//! max_ended_total = 4096
//!
//! [cache]                                # results of idempotent tools; nothing by default
//! annotated = false                      # true: cache tools annotated readOnly + idempotent
//! max_bytes = 268435456                  # 256 MiB, least recently used evicted first
//! ttl_s = 3600                           # defaults of every `cache = { … }`
//! idle_s = 900
//! refresh_at = 0.8
//!
//!
//! [auth]                                 # who may use the HTTP listener
//! tokens = [ { principal = "alice", sha256 = "<hex SHA-256 of alice's bearer token>" } ]
//! [auth.jwt]                             # and/or JWTs from an OAuth 2.1 authorization server
//! issuer = "https://idp.example.com"
//! audience = "sluice"
//! jwks_url = "https://idp.example.com/.well-known/jwks.json"   # or jwks_file = "/path/jwks.json"
//! principal_claim = "sub"                # the default
//! [http]                                 # the listener of `--listen`
//! max_body_mb = 16                       # larger request bodies get 413
//! max_sessions = 1000                    # more 2025-11-25 sessions get 503
//! max_sessions_per_principal = 100       # one principal's more get 429 (with [auth])
//! session_idle_s = 1800                  # an unused session is closed
//! header_timeout_s = 10                  # headers must have arrived by then
//! tls_cert = "/etc/sluice/cert.pem"      # serve https:// (with tls_key; relative to this file)
//! tls_key = "/etc/sluice/key.pem"
//! max_connections = 10000                # more open connections get 503
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::budget::{Budget, BudgetOverride, builtin_presets};
use crate::cache::{CacheFields, CachePolicy, CacheSettings};
use crate::format::one_line;
use crate::http::HttpLimits;
use crate::limits::MessageLimits;
use crate::naming::SEPARATOR;
use crate::operation::OperationSettings;
use crate::query::QuerySettings;
use crate::store::{StoreBackend, StoreSettings};

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The upstream servers, sorted by name.
    pub upstreams: Vec<UpstreamSpec>,
    /// Budgets: the default and the per-client presets.
    pub budget: BudgetConfig,
    /// The result store: its backend and bounds (`[store]`).
    pub store: StoreSettings,
    /// jq queries: limits and workers.
    pub query: QuerySettings,
    /// Slow calls as operations.
    pub operations: OperationSettings,
    /// The result cache.
    pub cache: CacheSettings,
    /// Limits of the HTTP listener.
    pub http: HttpLimits,
    /// The certificate and key the HTTP listener serves TLS with (`[http]
    /// tls_cert`, `tls_key`); `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Limits of every message, in every direction (`[limits]`).
    pub limits: MessageLimits,
    /// Who may use the HTTP listener (`[auth]`); `None` when the file has no `[auth]`.
    pub auth: Option<AuthConfig>,
    /// Where the admin server (metrics, the live page) listens
    /// (`[admin] listen`; `--admin` overrides it); `None`: it does not run.
    pub admin: Option<std::net::SocketAddr>,
    /// The principals of `[auth]` who may read the admin server's data
    /// (`[admin] principals`); `None`: any principal of `[auth]`.
    pub admin_principals: Option<Vec<String>>,
}

/// The files of `[http] tls_cert` and `tls_key`, as named (relative ones
/// made relative to the config file's folder). Read, and checked, where
/// the listener starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM: the server's certificate first.
    pub cert: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The `[auth]` table: the bearer tokens the HTTP listener accepts, and the
/// principal each one stands for. At least one of `tokens` and `jwt` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// Static tokens, known by their SHA-256 digests.
    pub tokens: Vec<StaticToken>,
    /// JWTs from an OAuth 2.1 authorization server (`[auth.jwt]`).
    pub jwt: Option<JwtConfig>,
    /// A proxy in front that authenticates and names the principal in a
    /// header (`[auth.proxy]`).
    pub proxy: Option<ProxyAuth>,
}

/// The `[auth.proxy]` table: the principal as an authenticating proxy in
/// front of sluice names it (oauth2-proxy's `X-Forwarded-User`, …), believed
/// only from the proxy's own addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyAuth {
    /// The header that names the principal (`header`), lower case.
    pub header: String,
    /// The addresses the header is believed from (`from`): the proxies',
    /// each an address or a network (`10.0.0.0/8`, where proxies come and
    /// go, as an ingress's pods do).
    pub from: Vec<IpNetwork>,
}

/// An IP network: an address and how many of its leading bits are the
/// network's (all of them for one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNetwork {
    /// The network's address (its host bits zero).
    pub address: std::net::IpAddr,
    /// The prefix length: 0–32 for IPv4, 0–128 for IPv6.
    pub prefix: u8,
}

impl IpNetwork {
    /// `text` as `ADDRESS` or `ADDRESS/PREFIX`; an IPv4-mapped IPv6
    /// address is read as the IPv4 one.
    pub fn parse(text: &str) -> Option<IpNetwork> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address = address.parse::<std::net::IpAddr>().ok()?.to_canonical();
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) if p.bytes().all(|b| b.is_ascii_digit()) && !p.is_empty() => p.parse().ok()?,
            Some(_) => return None,
        };
        if prefix > bits {
            return None;
        }
        let network = IpNetwork { address, prefix };
        // Written with host bits set (`10.1.2.3/8`) it means the network.
        Some(IpNetwork {
            address: network.masked(address)?,
            prefix,
        })
    }

    /// Whether `ip` is in the network.
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        self.masked(ip.to_canonical()) == Some(self.address)
    }

    /// `ip` with the bits past the prefix zeroed; `None` if it is of the
    /// other family.
    fn masked(&self, ip: std::net::IpAddr) -> Option<std::net::IpAddr> {
        use std::net::IpAddr;
        match (self.address, ip) {
            (IpAddr::V4(_), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V4((u32::from(ip) & mask).into()))
            }
            (IpAddr::V6(_), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                Some(IpAddr::V6((u128::from(ip) & mask).into()))
            }
            _ => None,
        }
    }
}

/// One static bearer token: only its digest is configured, so the file
/// never holds the secret itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticToken {
    /// Who presents it (e.g. `alice`).
    pub principal: String,
    /// The SHA-256 digest of the token.
    pub sha256: [u8; 32],
}

/// The `[auth.jwt]` table: how to check a JWT bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtConfig {
    /// The `iss` every token must carry, and the authorization server named
    /// in the protected-resource metadata.
    pub issuer: String,
    /// The `aud` every token must carry.
    pub audience: String,
    /// Where the signing keys (a JWKS) are.
    pub jwks: JwksSource,
    /// The claim that names the principal (default `sub`).
    pub principal_claim: String,
}

/// Where a JSON Web Key Set is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// Fetched over HTTP(S).
    Url(String),
    /// Read from a file (relative paths are relative to the config file).
    File(PathBuf),
}

/// The `[budget]` table with the built-in presets folded in.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetConfig {
    /// For clients without a preset.
    pub default: Budget,
    /// Overrides by lower-case `clientInfo.name`.
    pub clients: BTreeMap<String, BudgetOverride>,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            default: Budget::default(),
            clients: builtin_presets(),
        }
    }
}

impl BudgetConfig {
    /// The budget of the client that calls itself `client` (its
    /// `clientInfo.name`), or the default one.
    pub fn for_client(&self, client: Option<&str>) -> Budget {
        let preset = client.and_then(|name| {
            // Looked up as it is when it is lowercase already (every call
            // asks): no copy made.
            let key: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                name.to_ascii_lowercase().into()
            } else {
                name.into()
            };
            self.clients.get(key.as_ref())
        });
        preset.map_or(self.default, |o| self.default.with(o))
    }
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSpec {
    /// Its name: the prefix of its tools when there are several upstreams.
    pub name: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// Which protocol era to speak to it.
    pub protocol: ProtocolChoice,
    /// Per-tool settings, by the upstream's own tool name.
    pub tools: BTreeMap<String, ToolSettings>,
}

/// How sluice reaches an upstream.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (added to sluice's own environment).
        env: BTreeMap<String, String>,
        /// The working directory, if not sluice's.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// Which lifecycle sluice uses with an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProtocolChoice {
    /// Try `server/discover` (2026-07-28), fall back to `initialize` (2025-11-25).
    #[default]
    Auto,
    /// Only `initialize` (2025-11-25 and earlier).
    Legacy,
    /// Only `server/discover` (2026-07-28, stateless).
    Stateless,
}

/// Settings of one upstream tool.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    /// A lower token budget for this tool's results (never above the client's).
    pub max_tokens: Option<u32>,
    /// A lower character budget for this tool's results.
    pub max_chars: Option<u32>,
    /// How deep the preview of a stored result goes (default 3).
    pub preview_depth: Option<u32>,
    /// What happens to a result over budget.
    pub mode: Option<Mode>,
    /// Seconds a call waits before it goes on in the background (default
    /// `[operations] default_timeout_s`).
    pub timeout_s: Option<f64>,
    /// Cache the tool's results: `cache = { ttl_s, idle_s, refresh_at,
    /// per_session }`, each field defaulting to `[cache]`'s.
    pub cache: Option<CacheFields>,
    /// `cache` over the `[cache]` defaults, checked when the file is read.
    #[serde(skip)]
    pub cache_policy: Option<CachePolicy>,
}

impl ToolSettings {
    /// The budget overrides these settings make.
    pub fn budget(&self) -> BudgetOverride {
        BudgetOverride {
            max_tokens: self.max_tokens,
            max_chars: self.max_chars,
            ..Default::default()
        }
    }
}

/// What sluice does with a tool result over budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Store it and answer with a summary, a preview and a handle.
    #[default]
    Buffer,
    /// Store it and answer with as much depth-cut preview as fits, marked
    /// as truncated.
    Truncate,
    /// Send it whole, whatever its size (the tool's results are never stored).
    Passthrough,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file is not valid, at a known place.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong and what is expected.
        message: String,
    },
    /// The command line is not valid.
    #[error("{0}")]
    CommandLine(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    upstreams: BTreeMap<Spanned<String>, Spanned<RawUpstream>>,
    budget: Option<Spanned<RawBudget>>,
    store: Option<Spanned<RawStore>>,
    query: Option<Spanned<RawQuery>>,
    operations: Option<Spanned<RawOperations>>,
    cache: Option<Spanned<RawCache>>,
    http: Option<Spanned<RawHttp>>,
    limits: Option<Spanned<RawLimits>>,
    auth: Option<Spanned<RawAuth>>,
    admin: Option<Spanned<RawAdmin>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Option<String>,
    principals: Option<Vec<String>>,
}

/// What `[admin]` says: where it listens, and who may read it.
type AdminTable = (Option<std::net::SocketAddr>, Option<Vec<String>>);

impl RawAdmin {
    /// `with_auth`: the file has an `[auth]` table (`principals` names
    /// some of its principals).
    fn check(self, with_auth: bool) -> Result<AdminTable, String> {
        let listen = self
            .listen
            .map(|listen| {
                listen.parse().map_err(|_| {
                    format!(
                        "[admin]: `listen = {listen:?}` is not an address and port, like \"127.0.0.1:9464\""
                    )
                })
            })
            .transpose()?;
        let Some(principals) = self.principals else {
            return Ok((listen, None));
        };
        if !with_auth {
            return Err("[admin]: `principals` names who, among the principals of [auth], may read the admin server's data, but the file has no [auth] table: add one (see [auth] in the README), or remove `principals`".into());
        }
        if principals.is_empty() {
            return Err("[admin]: `principals = []` lets no one read the admin server's data: name who may (e.g. [\"ops\"]), or remove `principals` to let any principal of [auth]".into());
        }
        let mut named = Vec::with_capacity(principals.len());
        for principal in principals {
            let principal = principal.trim();
            if principal.is_empty() {
                return Err("[admin]: `principals` holds an empty name: name a principal of [auth] (e.g. \"ops\")".into());
            }
            named.push(principal.to_owned());
        }
        Ok((listen, Some(named)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    tokens: Vec<Spanned<RawToken>>,
    jwt: Option<Spanned<RawJwt>>,
    proxy: Option<Spanned<RawProxy>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProxy {
    header: String,
    from: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToken {
    principal: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJwt {
    issuer: String,
    audience: String,
    jwks_url: Option<String>,
    jwks_file: Option<PathBuf>,
    principal_claim: Option<String>,
}

/// What to add to a config file for `[auth]`, shown in errors.
pub const AUTH_EXAMPLE: &str = r#"[auth]
tokens = [ { principal = "alice", sha256 = "<the token's SHA-256 in hex: printf %s TOKEN | sha256sum>" } ]
# and/or JWTs from your authorization server:
[auth.jwt]
issuer = "https://idp.example.com"
audience = "sluice"
jwks_url = "https://idp.example.com/.well-known/jwks.json""#;

impl RawAuth {
    /// Validates `[auth]`; `dir` is the config file's folder, for a relative
    /// `jwks_file`. Errors carry the span of what is wrong.
    fn check(
        self,
        span: std::ops::Range<usize>,
        dir: &Path,
    ) -> Result<AuthConfig, (std::ops::Range<usize>, String)> {
        if self.tokens.is_empty() && self.jwt.is_none() && self.proxy.is_none() {
            return Err((
                span,
                format!(
                    "[auth] accepts no token: add `tokens = [ {{ principal = \"alice\", sha256 = \"…\" }} ]`, an [auth.jwt] table or an [auth.proxy] table, e.g.\n{AUTH_EXAMPLE}"
                ),
            ));
        }
        let mut tokens: Vec<StaticToken> = Vec::with_capacity(self.tokens.len());
        for token in self.tokens {
            let span = token.span();
            let token = token.into_inner();
            let principal = token.principal.trim();
            if principal.is_empty() {
                return Err((span, "[auth] tokens: `principal` is empty: name who presents the token (e.g. \"alice\")".into()));
            }
            let Some(sha256) = hex_digest(token.sha256.trim()) else {
                return Err((
                    span,
                    format!(
                        "[auth] tokens: the `sha256` of `{}` must be 64 hex digits (the SHA-256 of the token, as `printf %s \"$TOKEN\" | sha256sum` prints it)",
                        one_line(principal)
                    ),
                ));
            };
            if let Some(other) = tokens.iter().find(|t| t.sha256 == sha256) {
                return Err((
                    span,
                    format!(
                        "[auth] tokens: `{}` and `{}` have the same `sha256`: give each principal its own token",
                        one_line(principal),
                        one_line(&other.principal)
                    ),
                ));
            }
            tokens.push(StaticToken {
                principal: principal.to_owned(),
                sha256,
            });
        }
        let jwt = match self.jwt {
            None => None,
            Some(raw) => {
                let span = raw.span();
                let raw = raw.into_inner();
                let non_empty = |key: &str, value: &str| {
                    if value.trim().is_empty() {
                        Err((span.clone(), format!("[auth.jwt]: `{key}` is empty")))
                    } else {
                        Ok(value.trim().to_owned())
                    }
                };
                let issuer = non_empty("issuer", &raw.issuer)?;
                let audience = non_empty("audience", &raw.audience)?;
                let principal_claim = non_empty(
                    "principal_claim",
                    raw.principal_claim.as_deref().unwrap_or("sub"),
                )?;
                let jwks = match (raw.jwks_url, raw.jwks_file) {
                    (Some(_), Some(_)) => {
                        return Err((
                            span,
                            "[auth.jwt]: both `jwks_url` and `jwks_file` are set: keep one".into(),
                        ));
                    }
                    (None, None) => {
                        return Err((
                            span,
                            "[auth.jwt]: where are the signing keys? Add `jwks_url = \"https://…/jwks.json\"` (your authorization server's JWKS) or `jwks_file = \"/path/jwks.json\"`".into(),
                        ));
                    }
                    (Some(url), None) => {
                        if !(url.starts_with("https://") || url.starts_with("http://")) {
                            return Err((
                                span,
                                format!(
                                    "[auth.jwt]: `jwks_url` must start with https:// or http://, got `{}`",
                                    one_line(&url)
                                ),
                            ));
                        }
                        JwksSource::Url(url)
                    }
                    (None, Some(file)) => JwksSource::File(dir.join(file)),
                };
                Some(JwtConfig {
                    issuer,
                    audience,
                    jwks,
                    principal_claim,
                })
            }
        };
        let proxy = self.proxy.map(RawProxy::check).transpose()?;
        Ok(AuthConfig { tokens, jwt, proxy })
    }
}

impl RawProxy {
    /// Validates `[auth.proxy]` (its span, for errors).
    fn check(raw: Spanned<RawProxy>) -> Result<ProxyAuth, (std::ops::Range<usize>, String)> {
        let span = raw.span();
        let raw = raw.into_inner();
        let header = raw.header.trim().to_ascii_lowercase();
        if header.is_empty() || http_header_name(&header).is_none() {
            return Err((
                span,
                format!(
                    "[auth.proxy]: `header = {:?}` is not an HTTP header name: name the header your proxy sets to the user it authenticated, e.g. \"X-Forwarded-User\"",
                    one_line(&raw.header)
                ),
            ));
        }
        if header == "authorization" || header == "mcp-session-id" {
            return Err((
                span,
                format!(
                    "[auth.proxy]: `header = {header:?}` is one sluice reads for itself: name the header your proxy sets to the user, e.g. \"X-Forwarded-User\""
                ),
            ));
        }
        if raw.from.is_empty() {
            return Err((
                span,
                "[auth.proxy]: `from` is empty: list the proxies' addresses (e.g. [\"127.0.0.1\"]); the header is believed from those only".into(),
            ));
        }
        let mut from = Vec::with_capacity(raw.from.len());
        for address in &raw.from {
            match IpNetwork::parse(address.trim()) {
                Some(network) => from.push(network),
                None => {
                    return Err((
                        span,
                        format!(
                            "[auth.proxy]: `from` holds {:?}, which is neither an IP address nor a network (e.g. \"10.0.0.7\", \"::1\", \"10.0.0.0/8\")",
                            one_line(address)
                        ),
                    ));
                }
            }
        }
        Ok(ProxyAuth { header, from })
    }
}

/// `name` if it is a valid HTTP header name (RFC 9110 token characters).
fn http_header_name(name: &str) -> Option<&str> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    (!name.is_empty() && name.chars().all(token)).then_some(name)
}

/// The 32 bytes of a SHA-256 digest written as 64 hex digits (either case).
fn hex_digest(text: &str) -> Option<[u8; 32]> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(text.chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        *byte = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(digest)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_message_mb: Option<u64>,
    max_requests_in_flight: Option<u64>,
    requests_per_minute: Option<u64>,
}

impl RawLimits {
    fn check(self) -> Result<MessageLimits, String> {
        let mut l = MessageLimits::default();
        if let Some(m) = self.max_message_mb {
            if !(1..=4096).contains(&m) {
                return Err(format!(
                    "[limits]: `max_message_mb = {m}` is out of range: from 1 to 4096 (MiB)"
                ));
            }
            l.max_message_bytes = usize::try_from(m << 20).unwrap_or(usize::MAX);
        }
        if let Some(n) = self.max_requests_in_flight {
            if !(1..=65536).contains(&n) {
                return Err(format!(
                    "[limits]: `max_requests_in_flight = {n}` is out of range: from 1 to 65536"
                ));
            }
            l.max_requests_in_flight = n as usize;
        }
        if let Some(n) = self.requests_per_minute {
            if !(1..=1_000_000).contains(&n) {
                return Err(format!(
                    "[limits]: `requests_per_minute = {n}` is out of range: from 1 to 1000000"
                ));
            }
            l.requests_per_minute = Some(n as u32);
        }
        Ok(l)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    max_body_mb: Option<u64>,
    max_sessions: Option<usize>,
    max_sessions_per_principal: Option<usize>,
    session_idle_s: Option<u64>,
    header_timeout_s: Option<u64>,
    max_connections: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

impl RawHttp {
    /// `tls_cert` and `tls_key`, both or neither; `dir` is the config
    /// file's folder, for relative paths.
    fn tls(&self, dir: &Path) -> Result<Option<TlsFiles>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: dir.join(cert),
                key: dir.join(key),
            })),
            (Some(_), None) => Err(
                "[http]: `tls_cert` is set without `tls_key`: give both, the certificate chain and its private key (PEM files)".into(),
            ),
            (None, Some(_)) => Err(
                "[http]: `tls_key` is set without `tls_cert`: give both, the certificate chain and its private key (PEM files)".into(),
            ),
        }
    }

    fn check(self) -> Result<HttpLimits, String> {
        let mut h = HttpLimits::default();
        if let Some(m) = self.max_body_mb {
            if !(1..=4096).contains(&m) {
                return Err(format!(
                    "[http]: `max_body_mb = {m}` is out of range: from 1 to 4096 (MiB)"
                ));
            }
            h.max_body_bytes = m << 20;
        }
        if let Some(n) = self.max_sessions {
            if !(1..=1_000_000).contains(&n) {
                return Err(format!(
                    "[http]: `max_sessions = {n}` is out of range: from 1 to 1000000"
                ));
            }
            h.max_sessions = n;
        }
        if let Some(n) = self.max_sessions_per_principal {
            if !(1..=1_000_000).contains(&n) {
                return Err(format!(
                    "[http]: `max_sessions_per_principal = {n}` is out of range: from 1 to 1000000"
                ));
            }
            h.max_sessions_per_principal = n;
        }
        if let Some(t) = self.session_idle_s {
            if !(1..=7 * 86_400).contains(&t) {
                return Err(format!(
                    "[http]: `session_idle_s = {t}` is out of range: from 1 to 604800 (a week)"
                ));
            }
            h.session_idle = std::time::Duration::from_secs(t);
        }
        if let Some(t) = self.header_timeout_s {
            if !(1..=3_600).contains(&t) {
                return Err(format!(
                    "[http]: `header_timeout_s = {t}` is out of range: from 1 to 3600 (seconds)"
                ));
            }
            h.header_timeout = std::time::Duration::from_secs(t);
        }
        if let Some(n) = self.max_connections {
            if !(1..=1_000_000).contains(&n) {
                return Err(format!(
                    "[http]: `max_connections = {n}` is out of range: from 1 to 1000000"
                ));
            }
            h.max_connections = n;
        }
        Ok(h)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    annotated: Option<bool>,
    max_bytes: Option<u64>,
    ttl_s: Option<f64>,
    idle_s: Option<f64>,
    refresh_at: Option<f64>,
    per_session: Option<bool>,
}

impl RawCache {
    fn check(self) -> Result<CacheSettings, String> {
        let mut c = CacheSettings::default();
        if let Some(a) = self.annotated {
            c.annotated = a;
        }
        if let Some(b) = self.max_bytes {
            if b < 1024 {
                return Err(format!(
                    "[cache]: `max_bytes = {b}` is too small: at least 1024"
                ));
            }
            c.max_bytes = b;
        }
        c.defaults = CacheFields {
            ttl_s: self.ttl_s,
            idle_s: self.idle_s,
            refresh_at: self.refresh_at,
            per_session: self.per_session,
        }
        .over(&c.defaults, "[cache]")?;
        Ok(c)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    max_tokens: Option<u32>,
    max_chars: Option<u32>,
    max_lines: Option<u32>,
    token_factor: Option<f32>,
    #[serde(default)]
    clients: BTreeMap<String, RawBudgetFields>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBudgetFields {
    max_tokens: Option<u32>,
    max_chars: Option<u32>,
    max_lines: Option<u32>,
    token_factor: Option<f32>,
}

/// The longest wait a configuration sets (`[operations]` timeouts, a
/// tool's `timeout_s`): a day.
const MAX_TIMEOUT_S: f64 = 86_400.0;

/// The longest `[store] ttl_s`: a year.
const MAX_STORE_TTL_S: u64 = 365 * 86_400;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperations {
    default_timeout_s: Option<f64>,
    max_timeout_s: Option<f64>,
    retention_h: Option<f64>,
    max_running: Option<usize>,
    max_running_total: Option<usize>,
    max_ended: Option<usize>,
    max_ended_total: Option<usize>,
}

impl RawOperations {
    fn check(self) -> Result<OperationSettings, String> {
        let mut o = OperationSettings::default();
        let seconds = |key: &str, v: f64| {
            if v > 0.0 && v <= MAX_TIMEOUT_S {
                Ok(std::time::Duration::from_secs_f64(v))
            } else {
                Err(format!(
                    "[operations]: `{key} = {v}` is out of range: more than 0, at most 86400 (seconds)"
                ))
            }
        };
        if let Some(v) = self.max_timeout_s {
            o.max_timeout = seconds("max_timeout_s", v)?;
        }
        if let Some(v) = self.default_timeout_s {
            o.default_timeout = seconds("default_timeout_s", v)?;
        }
        if o.default_timeout > o.max_timeout {
            return Err(format!(
                "[operations]: `default_timeout_s` ({} s) is over `max_timeout_s` ({} s)",
                o.default_timeout.as_secs_f64(),
                o.max_timeout.as_secs_f64()
            ));
        }
        if let Some(h) = self.retention_h {
            if !(h > 0.0 && h <= 24.0 * 365.0) {
                return Err(format!(
                    "[operations]: `retention_h = {h}` is out of range: more than 0, at most 8760 (hours)"
                ));
            }
            o.retention = std::time::Duration::from_secs_f64(h * 3600.0);
        }
        for (key, value, field) in [
            ("max_running", self.max_running, &mut o.max_running),
            (
                "max_running_total",
                self.max_running_total,
                &mut o.max_running_total,
            ),
            ("max_ended", self.max_ended, &mut o.max_ended),
            (
                "max_ended_total",
                self.max_ended_total,
                &mut o.max_ended_total,
            ),
        ] {
            if let Some(n) = value {
                if n == 0 {
                    return Err(format!("[operations]: `{key}` must be at least 1"));
                }
                *field = n;
            }
        }
        Ok(o)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuery {
    timeout_s: Option<f64>,
    max_memory_mb: Option<u64>,
    max_outputs: Option<usize>,
    max_output_mb: Option<usize>,
    workers: Option<usize>,
    cache_mb: Option<u64>,
}

impl RawQuery {
    fn check(self) -> Result<QuerySettings, String> {
        let mut q = QuerySettings::default();
        if let Some(t) = self.timeout_s {
            if !(0.1..=3600.0).contains(&t) {
                return Err(format!(
                    "[query]: `timeout_s = {t}` is out of range: from 0.1 to 3600 (seconds)"
                ));
            }
            q.timeout = std::time::Duration::from_secs_f64(t);
        }
        if let Some(m) = self.max_memory_mb {
            if !(64..=1 << 20).contains(&m) {
                return Err(format!(
                    "[query]: `max_memory_mb = {m}` is out of range: from 64 to 1048576"
                ));
            }
            q.max_memory_bytes = m << 20;
        }
        if let Some(n) = self.max_outputs {
            if n == 0 {
                return Err("[query]: `max_outputs` must be at least 1".into());
            }
            q.max_outputs = n;
        }
        if let Some(m) = self.max_output_mb {
            if !(1..=4096).contains(&m) {
                return Err(format!(
                    "[query]: `max_output_mb = {m}` is out of range: from 1 to 4096"
                ));
            }
            q.max_output_bytes = m << 20;
        }
        if let Some(w) = self.workers {
            if !(1..=64).contains(&w) {
                return Err(format!(
                    "[query]: `workers = {w}` is out of range: from 1 to 64"
                ));
            }
            q.workers = w;
        }
        if let Some(c) = self.cache_mb {
            // Bounded before the shift, which would drop high bits silently.
            if c > 1 << 20 {
                return Err(format!(
                    "[query]: `cache_mb = {c}` is out of range: from 0 to 1048576"
                ));
            }
            q.cache_bytes = c << 20;
        }
        Ok(q)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
    max_bytes: Option<u64>,
    ttl_s: Option<u64>,
    backend: Option<String>,
    path: Option<PathBuf>,
    url: Option<String>,
    secret_file: Option<PathBuf>,
    compress: Option<bool>,
}

/// The platform's directory for state that survives restarts, for the
/// disk store when `[store] path` is not given: `$XDG_STATE_HOME/sluice`,
/// else `~/.local/state/sluice` (on macOS, `~/Library/Application
/// Support/sluice`).
pub fn default_store_dir() -> Option<PathBuf> {
    // The XDG spec ignores a relative XDG_STATE_HOME.
    if let Some(state) = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|s| s.is_absolute())
    {
        return Some(state.join("sluice"));
    }
    let home = PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?);
    Some(if cfg!(target_os = "macos") {
        home.join("Library/Application Support/sluice")
    } else {
        home.join(".local/state/sluice")
    })
}

impl RawStore {
    /// The backend and its settings; `dir` is the config file's folder, for
    /// relative paths.
    fn backend(&self, dir: &Path) -> Result<(StoreBackend, bool, Option<PathBuf>), String> {
        let name = self.backend.as_deref().unwrap_or("memory");
        let url = self.url.clone().or_else(|| {
            std::env::var("SLUICE_REDIS_URL")
                .ok()
                .filter(|u| !u.is_empty())
        });
        let backend = match name {
            "memory" => StoreBackend::Memory,
            "disk" => StoreBackend::Disk {
                path: match &self.path {
                    Some(path) => dir.join(path),
                    None => default_store_dir().ok_or(
                        "[store]: backend = \"disk\" needs `path = \"/var/lib/sluice\"` (no HOME or XDG_STATE_HOME to default to)",
                    )?,
                },
            },
            "redis" => {
                let Some(url) = url else {
                    return Err("[store]: backend = \"redis\" needs `url = \"redis://127.0.0.1:6379/0\"` (or SLUICE_REDIS_URL)".into());
                };
                if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                    return Err(format!(
                        "[store]: `url = {url:?}` is not a Redis URL: it starts with redis:// (or rediss:// for TLS)"
                    ));
                }
                StoreBackend::Redis { url }
            }
            other => {
                return Err(format!(
                    "[store]: `backend = {other:?}` is not a store: use \"memory\" (the default), \"disk\" or \"redis\""
                ));
            }
        };
        if self.path.is_some() && !matches!(backend, StoreBackend::Disk { .. }) {
            return Err(format!(
                "[store]: `path` is where the disk store lives; it means nothing with backend = {name:?} (set backend = \"disk\", or remove it)"
            ));
        }
        if self.url.is_some() && !matches!(backend, StoreBackend::Redis { .. }) {
            return Err(format!(
                "[store]: `url` is the Redis server of backend = \"redis\"; it means nothing with backend = {name:?}"
            ));
        }
        let secret_file = self.secret_file.as_ref().map(|f| dir.join(f));
        if matches!(backend, StoreBackend::Redis { .. }) && secret_file.is_none() {
            return Err("[store]: backend = \"redis\" needs `secret_file = \"/etc/sluice/secret\"`: every instance must seal cursors with the same key (a file of at least 32 random bytes, e.g. `head -c 32 /dev/urandom > /etc/sluice/secret`)".into());
        }
        let compress = self.compress.unwrap_or(backend != StoreBackend::Memory);
        Ok((backend, compress, secret_file))
    }
}

impl RawBudgetFields {
    fn check(self, table: &str) -> Result<BudgetOverride, String> {
        if let Some(t) = self.max_tokens
            && t < 500
        {
            return Err(format!(
                "{table}: `max_tokens = {t}` is too small: at least 500 are needed for a summary and a page"
            ));
        }
        if let Some(c) = self.max_chars
            && c < 2000
        {
            return Err(format!(
                "{table}: `max_chars = {c}` is too small: at least 2000 are needed for a summary and a page"
            ));
        }
        if let Some(l) = self.max_lines
            && l < 20
        {
            return Err(format!(
                "{table}: `max_lines = {l}` is too small: at least 20"
            ));
        }
        if let Some(f) = self.token_factor
            && !(0.5..=4.0).contains(&f)
        {
            return Err(format!(
                "{table}: `token_factor = {f}` must be between 0.5 and 4 (1.25 allows for Claude's tokenizer counting more than o200k)"
            ));
        }
        Ok(BudgetOverride {
            max_tokens: self.max_tokens,
            max_chars: self.max_chars,
            max_lines: self.max_lines,
            token_factor: self.token_factor,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, Spanned<String>>,
    cwd: Option<PathBuf>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    protocol: Option<Spanned<String>>,
    #[serde(default)]
    tools: BTreeMap<String, Spanned<ToolSettings>>,
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates configuration text; `path` is only used in
    /// errors. `${NAME}` in the values that hold secrets is read from
    /// sluice's environment (see [`crate::vars`]).
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_with(text, path, &|name| std::env::var(name).ok())
    }

    /// [`Self::parse`], with the environment `env` (a variable's value, if
    /// it is set).
    pub fn parse_with(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let at = |span: std::ops::Range<usize>, message: String| {
            let (line, column) = line_column(text, span.start);
            ConfigError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            }
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            at(
                e.span().unwrap_or(0..0),
                e.message().trim_end().replace('\n', " "),
            )
        })?;
        if raw.upstreams.is_empty() {
            return Err(at(
                0..0,
                "no upstream configured: add a table such as [upstreams.fs] with `command = \"…\"` or `url = \"…\"`".into(),
            ));
        }
        let mut upstreams = Vec::with_capacity(raw.upstreams.len());
        // Where each upstream's tool tables are, for errors found later.
        let mut tool_spans = Vec::with_capacity(raw.upstreams.len());
        for (name, raw) in raw.upstreams {
            let (name_span, name) = (name.span(), name.into_inner());
            if let Err(why) = check_upstream_name(&name) {
                return Err(at(name_span, why));
            }
            let span = raw.span();
            let raw = raw.into_inner();
            // A value that may hold `${NAME}` (see `crate::vars`); an error
            // points at the value's line, not the table's.
            let expand = |value: &Spanned<String>, what: &str| {
                crate::vars::expand(value.get_ref(), env)
                    .map_err(|e| at(value.span(), format!("upstream `{name}`: {what}: {e}")))
            };
            let transport = match (raw.command, raw.url) {
                (Some(_), Some(_)) => {
                    return Err(at(
                        span,
                        format!(
                            "upstream `{name}` has both `command` and `url`: keep one (a child process or a Streamable HTTP endpoint)"
                        ),
                    ));
                }
                (None, None) => {
                    return Err(at(
                        span,
                        format!(
                            "upstream `{name}` needs `command = \"program\"` (a stdio server) or `url = \"http://…/mcp\"` (a Streamable HTTP server)"
                        ),
                    ));
                }
                (Some(command), None) => {
                    if command.trim().is_empty() {
                        return Err(at(span, format!("upstream `{name}`: `command` is empty")));
                    }
                    if !raw.headers.is_empty() {
                        return Err(at(
                            span,
                            format!("upstream `{name}`: `headers` only applies to `url` upstreams"),
                        ));
                    }
                    let mut expanded = BTreeMap::new();
                    for (variable, value) in raw.env {
                        let what = format!("`env.{}`", one_line(&variable));
                        expanded.insert(variable, expand(&value, &what)?);
                    }
                    UpstreamTransport::Stdio {
                        command,
                        args: raw.args,
                        env: expanded,
                        cwd: raw.cwd,
                    }
                }
                (None, Some(written)) => {
                    let url = expand(&written, "`url`")?;
                    let url_span = written.span();
                    let written = written.into_inner();
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        // The file's text, never what its variables hold.
                        return Err(at(
                            url_span,
                            format!(
                                "upstream `{name}`: `url` must start with http:// or https://, got `{}`{}",
                                one_line(&written),
                                if written == url {
                                    ""
                                } else {
                                    " (its variables replaced)"
                                }
                            ),
                        ));
                    }
                    if !raw.args.is_empty() || !raw.env.is_empty() || raw.cwd.is_some() {
                        return Err(at(
                            span,
                            format!(
                                "upstream `{name}`: `args`, `env` and `cwd` only apply to `command` upstreams"
                            ),
                        ));
                    }
                    let mut headers = BTreeMap::new();
                    for (header, value) in raw.headers {
                        let what = format!("header `{}`", one_line(&header));
                        let expanded = expand(&value, &what)?;
                        check_header(&header, &expanded)
                            .map_err(|why| at(value.span(), format!("upstream `{name}`: {why}")))?;
                        headers.insert(header, expanded);
                    }
                    UpstreamTransport::Http { url, headers }
                }
            };
            let protocol = match raw.protocol {
                None => ProtocolChoice::Auto,
                Some(p) => parse_protocol(p.get_ref()).ok_or_else(|| {
                    at(
                        p.span(),
                        format!("upstream `{name}`: unknown protocol `{}`: expected \"auto\", \"2025-11-25\" or \"2026-07-28\"", one_line(p.get_ref())),
                    )
                })?,
            };
            // Each tool's table, and where it is for errors found later.
            let mut tools = BTreeMap::new();
            let mut spans = BTreeMap::new();
            for (tool, settings) in raw.tools {
                let span = settings.span();
                let settings = settings.into_inner();
                if let Some(t) = settings.max_tokens
                    && t < 500
                {
                    return Err(at(
                        span.clone(),
                        format!(
                            "upstream `{name}`, tool `{}`: `max_tokens = {t}` is too small: at least 500",
                            one_line(&tool)
                        ),
                    ));
                }
                if let Some(c) = settings.max_chars
                    && c < 2000
                {
                    return Err(at(
                        span.clone(),
                        format!(
                            "upstream `{name}`, tool `{}`: `max_chars = {c}` is too small: at least 2000",
                            one_line(&tool)
                        ),
                    ));
                }
                // Bounded like `[operations]`: a wait past what a Duration
                // holds (`1e20`) would panic when a call uses it.
                if let Some(t) = settings.timeout_s
                    && !(t > 0.0 && t <= MAX_TIMEOUT_S)
                {
                    return Err(at(
                        span.clone(),
                        format!(
                            "upstream `{name}`, tool `{}`: `timeout_s = {t}` must be more than 0 and at most {MAX_TIMEOUT_S} (seconds)",
                            one_line(&tool)
                        ),
                    ));
                }
                spans.insert(tool.clone(), span);
                tools.insert(tool, settings);
            }
            tool_spans.push(spans);
            upstreams.push(UpstreamSpec {
                name,
                transport,
                protocol,
                tools,
            });
        }
        let mut budget = BudgetConfig::default();
        if let Some(raw) = raw.budget {
            let span = raw.span();
            let raw = raw.into_inner();
            let fields = RawBudgetFields {
                max_tokens: raw.max_tokens,
                max_chars: raw.max_chars,
                max_lines: raw.max_lines,
                token_factor: raw.token_factor,
            };
            let default = fields.check("[budget]").map_err(|e| at(span.clone(), e))?;
            budget.default = budget.default.with(&default);
            for (client, fields) in raw.clients {
                let o = fields
                    .check(&format!("[budget.clients.\"{client}\"]"))
                    .map_err(|e| at(span.clone(), e))?;
                let entry = budget
                    .clients
                    .entry(client.to_ascii_lowercase())
                    .or_default();
                *entry = merge(entry, &o);
            }
        }
        let mut store = StoreSettings::default();
        if let Some(raw) = raw.store {
            let span = raw.span();
            let raw = raw.into_inner();
            let dir = path.parent().unwrap_or(Path::new(""));
            (store.backend, store.compress, store.secret_file) =
                raw.backend(dir).map_err(|e| at(span.clone(), e))?;
            if let Some(b) = raw.max_bytes {
                if b < 1 << 20 {
                    return Err(at(
                        span,
                        format!(
                            "[store]: `max_bytes = {b}` is too small: at least 1048576 (1 MiB)"
                        ),
                    ));
                }
                store.limits.max_bytes = b;
            }
            if let Some(t) = raw.ttl_s {
                // At most a year: an expiry past what the clock holds would
                // panic when the first result is stored.
                if !(1..=MAX_STORE_TTL_S).contains(&t) {
                    return Err(at(
                        span,
                        format!(
                            "[store]: `ttl_s = {t}` is out of range: from 1 to {MAX_STORE_TTL_S} (seconds, a year)"
                        ),
                    ));
                }
                store.limits.ttl = std::time::Duration::from_secs(t);
            }
        }
        let query = match raw.query {
            None => QuerySettings::default(),
            Some(raw) => {
                let span = raw.span();
                raw.into_inner().check().map_err(|e| at(span, e))?
            }
        };
        let operations = match raw.operations {
            None => OperationSettings::default(),
            Some(raw) => {
                let span = raw.span();
                raw.into_inner().check().map_err(|e| at(span, e))?
            }
        };
        let cache = match raw.cache {
            None => CacheSettings::default(),
            Some(raw) => {
                let span = raw.span();
                raw.into_inner().check().map_err(|e| at(span, e))?
            }
        };
        let (http, tls) = match raw.http {
            None => (HttpLimits::default(), None),
            Some(raw) => {
                let span = raw.span();
                let raw = raw.into_inner();
                let dir = path.parent().unwrap_or(Path::new(""));
                let tls = raw.tls(dir).map_err(|e| at(span.clone(), e))?;
                (raw.check().map_err(|e| at(span, e))?, tls)
            }
        };
        let limits = match raw.limits {
            None => MessageLimits::default(),
            Some(raw) => {
                let span = raw.span();
                raw.into_inner().check().map_err(|e| at(span, e))?
            }
        };
        // Each tool's cache table over the `[cache]` defaults.
        for (upstream, spans) in upstreams.iter_mut().zip(&tool_spans) {
            for (tool, settings) in upstream.tools.iter_mut() {
                if let Some(fields) = &settings.cache {
                    let table = format!(
                        "upstream `{}`, tool `{}`: cache",
                        upstream.name,
                        one_line(tool)
                    );
                    settings.cache_policy = Some(
                        fields
                            .over(&cache.defaults, &table)
                            .map_err(|e| at(spans[tool].clone(), e))?,
                    );
                }
            }
        }
        let auth = match raw.auth {
            None => None,
            Some(raw) => {
                let span = raw.span();
                let dir = path.parent().unwrap_or(Path::new(""));
                Some(
                    raw.into_inner()
                        .check(span, dir)
                        .map_err(|(span, e)| at(span, e))?,
                )
            }
        };
        let (admin, admin_principals) = match raw.admin {
            None => (None, None),
            Some(raw) => {
                let span = raw.span();
                raw.into_inner()
                    .check(auth.is_some())
                    .map_err(|e| at(span, e))?
            }
        };
        Ok(Config {
            upstreams,
            budget,
            store,
            query,
            operations,
            cache,
            http,
            tls,
            limits,
            auth,
            admin,
            admin_principals,
        })
    }

    /// The configuration of `sluice -- CMD ARGS…`: one stdio upstream, named
    /// after the program.
    pub fn single_command(command: &[String]) -> Result<Self, ConfigError> {
        let (program, args) = command.split_first().ok_or_else(|| {
            ConfigError::CommandLine(
                "no upstream: give a server command after `--` (e.g. `sluice -- npx -y @modelcontextprotocol/server-everything`) or a config file with --config".into(),
            )
        })?;
        Ok(Config {
            upstreams: vec![UpstreamSpec {
                name: default_name(program),
                transport: UpstreamTransport::Stdio {
                    command: program.clone(),
                    args: args.to_vec(),
                    env: BTreeMap::new(),
                    cwd: None,
                },
                protocol: ProtocolChoice::Auto,
                tools: BTreeMap::new(),
            }],
            budget: BudgetConfig::default(),
            store: StoreSettings::default(),
            query: QuerySettings::default(),
            operations: OperationSettings::default(),
            cache: CacheSettings::default(),
            http: HttpLimits::default(),
            tls: None,
            limits: MessageLimits::default(),
            auth: None,
            admin: None,
            admin_principals: None,
        })
    }
}

fn merge(base: &BudgetOverride, o: &BudgetOverride) -> BudgetOverride {
    BudgetOverride {
        max_tokens: o.max_tokens.or(base.max_tokens),
        max_chars: o.max_chars.or(base.max_chars),
        max_lines: o.max_lines.or(base.max_lines),
        token_factor: o.token_factor.or(base.token_factor),
    }
}

fn parse_protocol(text: &str) -> Option<ProtocolChoice> {
    match text {
        "auto" => Some(ProtocolChoice::Auto),
        "2025-11-25" | "2025-06-18" | "2025-03-26" | "2024-11-05" | "legacy" => {
            Some(ProtocolChoice::Legacy)
        }
        "2026-07-28" | "stateless" => Some(ProtocolChoice::Stateless),
        _ => None,
    }
}

/// A name for an upstream given only its command: the program's file name,
/// reduced to the characters allowed in a name.
fn default_name(program: &str) -> String {
    let base = Path::new(program)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cleaned = cleaned.trim_matches('-').to_owned();
    if cleaned.is_empty() {
        "upstream".into()
    } else {
        cleaned
    }
}

fn check_upstream_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an upstream name is empty".into());
    }
    if name.contains(SEPARATOR) {
        return Err(format!(
            "upstream name `{}` contains `{SEPARATOR}`, which separates upstream and tool names: use `-` or a single `_`",
            one_line(name)
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "upstream name `{}` may only contain ASCII letters, digits, `-` and `_` (it prefixes tool names)",
            one_line(name)
        ));
    }
    Ok(())
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!(
            "`{}` is not a valid HTTP header name",
            one_line(name)
        ));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(format!(
            "the value of header `{name}` contains control characters"
        ));
    }
    Ok(())
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl fmt::Display for ProtocolChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProtocolChoice::Auto => "auto",
            ProtocolChoice::Legacy => "2025-11-25",
            ProtocolChoice::Stateless => "2026-07-28",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("sluice.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn two_upstreams_of_both_kinds() {
        let config = parse(
            r#"
[upstreams.fs]
command = "npx"
args = ["-y", "server-filesystem", "/tmp"]
env = { A = "1" }

[upstreams.web]
url = "http://127.0.0.1:3001/mcp"
headers = { Authorization = "Bearer x" }
protocol = "2026-07-28"

[upstreams.fs.tools.directory_tree]
"#,
        )
        .unwrap();
        assert_eq!(config.upstreams.len(), 2);
        assert_eq!(config.upstreams[0].name, "fs");
        assert!(matches!(
            &config.upstreams[0].transport,
            UpstreamTransport::Stdio { command, args, .. } if command == "npx" && args.len() == 3
        ));
        assert!(config.upstreams[0].tools.contains_key("directory_tree"));
        assert_eq!(config.upstreams[1].protocol, ProtocolChoice::Stateless);
    }

    #[test]
    fn unknown_key_names_file_line_and_expected_keys() {
        let err = parse("[upstreams.fs]\ncomand = \"x\"\n").unwrap_err();
        assert!(
            err.starts_with("sluice.toml:2:1: unknown field `comand`"),
            "{err}"
        );
        assert!(err.contains("`command`"), "{err}");
    }

    #[test]
    fn unknown_tool_setting_is_an_error() {
        let err = parse("[upstreams.fs]\ncommand = \"x\"\n[upstreams.fs.tools.t]\nbogus = 1\n")
            .unwrap_err();
        assert!(
            err.starts_with("sluice.toml:4:1: unknown field `bogus`"),
            "{err}"
        );
    }

    #[test]
    fn both_or_neither_transport_is_an_error() {
        let err = parse("[upstreams.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n").unwrap_err();
        assert!(err.contains("both `command` and `url`"), "{err}");
        let err = parse("\n[upstreams.a]\nargs = []\n").unwrap_err();
        assert!(err.starts_with("sluice.toml:2:"), "{err}");
        assert!(err.contains("needs `command"), "{err}");
    }

    #[test]
    fn a_value_quoted_in_an_error_is_quoted_on_one_line() {
        for (text, quoted) in [
            (
                "[upstreams.a]\nurl = '''multi\nline'''\n",
                "got `multi\\nline`",
            ),
            (
                "[upstreams.\"a\\nb\"]\ncommand = \"x\"\n",
                "upstream name `a\\nb`",
            ),
            (
                "[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.\"t\\r\\n\"]\ntimeout_s = 0\n",
                "tool `t\\r\\n`",
            ),
            (
                "[upstreams.a]\ncommand = \"x\"\nprotocol = \"2025\\u001b[31m\"\n",
                "unknown protocol `2025\\u{1b}[31m`",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(quoted), "{err}");
            assert!(!err.contains(['\n', '\r', '\u{1b}']), "{err}");
        }
    }

    #[test]
    fn bad_names_urls_protocols_and_types() {
        assert!(
            parse("[upstreams.a__b]\ncommand = \"x\"\n")
                .unwrap_err()
                .contains("contains `__`")
        );
        assert!(
            parse("[upstreams.\"a b\"]\ncommand = \"x\"\n")
                .unwrap_err()
                .contains("may only contain")
        );
        let err = parse("[upstreams.a]\nurl = \"ftp://h\"\n").unwrap_err();
        assert!(
            err.starts_with("sluice.toml:2:7: upstream `a`: `url` must start"),
            "{err}"
        );
        assert!(
            parse("[upstreams.a]\ncommand = \"x\"\nprotocol = \"1999\"\n")
                .unwrap_err()
                .contains("unknown protocol")
        );
        let err = parse("[upstreams.a]\ncommand = 3\n").unwrap_err();
        assert!(
            err.starts_with("sluice.toml:2:11: invalid type: integer `3`, expected a string"),
            "{err}"
        );
        assert!(parse("").unwrap_err().contains("no upstream configured"));
        assert!(
            parse("[upstreams.a]\nurl = \"http://h\"\nheaders = { \"bad header\" = \"v\" }\n")
                .unwrap_err()
                .contains("not a valid HTTP header name")
        );
    }

    #[test]
    fn budgets_presets_and_tool_settings() {
        let config = parse(
            r#"
[upstreams.fs]
command = "x"
[upstreams.fs.tools.tree]
max_tokens = 4000
mode = "truncate"
preview_depth = 2

[budget]
max_tokens = 20000
[budget.clients."My-Client"]
max_chars = 3000
max_lines = 100
[budget.clients.codex-mcp-client]
max_tokens = 3000

[store]
ttl_s = 60

[query]
timeout_s = 2.5
max_memory_mb = 512
workers = 1
cache_mb = 0
"#,
        )
        .unwrap();
        let b = &config.budget;
        assert_eq!(b.for_client(None).max_tokens, 20_000);
        assert_eq!(b.for_client(Some("claude-code")).max_chars, 45_000);
        // A client's name is matched whatever its case.
        assert_eq!(b.for_client(Some("MY-Client")).max_chars, 3000);
        let mine = b.for_client(Some("my-client"));
        assert_eq!(
            (mine.max_tokens, mine.max_chars, mine.max_lines),
            (20_000, 3000, Some(100))
        );
        let codex = b.for_client(Some("codex-mcp-client"));
        assert_eq!(
            (codex.max_tokens, codex.max_chars, codex.max_lines),
            (3000, 9216, Some(250))
        );
        let tool = &config.upstreams[0].tools["tree"];
        assert_eq!(tool.mode, Some(Mode::Truncate));
        assert_eq!(mine.narrowed(&tool.budget()).max_tokens, 4000);
        assert_eq!(config.store.limits.ttl.as_secs(), 60);
        let q = config.query;
        assert_eq!(q.timeout, std::time::Duration::from_millis(2500));
        assert_eq!(
            (q.max_memory_bytes, q.workers, q.cache_bytes),
            (512 << 20, 1, 0)
        );
        assert_eq!(q.max_outputs, QuerySettings::default().max_outputs);
    }

    #[test]
    fn operations_settings_are_read_and_checked() {
        let up = "[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\ntimeout_s = 60\n";
        let config = parse(&format!(
            "{up}[operations]\ndefault_timeout_s = 2.5\nretention_h = 1\nmax_running = 3\nmax_ended = 7\nmax_ended_total = 70\n"
        ))
        .unwrap();
        let o = config.operations;
        assert_eq!(o.default_timeout, std::time::Duration::from_millis(2500));
        assert_eq!((o.retention.as_secs(), o.max_running), (3600, 3));
        assert_eq!((o.max_ended, o.max_ended_total), (7, 70));
        assert_eq!(config.upstreams[0].tools["t"].timeout_s, Some(60.0));
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        for (text, expected) in [
            (
                "[operations]\ndefault_timeout_s = -1\n",
                "`default_timeout_s = -1` is out of range",
            ),
            (
                "[operations]\ndefault_timeout_s = 400\n",
                "is over `max_timeout_s` (300 s)",
            ),
            (
                "[operations]\nretention_h = 0\n",
                "`retention_h = 0` is out of range",
            ),
            (
                "[operations]\nmax_running = 0\n",
                "`max_running` must be at least 1",
            ),
            (
                "[operations]\nmax_ended = 0\n",
                "`max_ended` must be at least 1",
            ),
            (
                "[upstreams.a.tools.t]\ntimeout_s = 0\n",
                "`timeout_s = 0` must be more than 0",
            ),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn http_limits_are_read_and_checked() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let config = parse(&format!(
            "{up}[http]\nmax_body_mb = 2\nmax_sessions = 5\nmax_sessions_per_principal = 3\nsession_idle_s = 60\nheader_timeout_s = 3\nmax_connections = 7\n"
        ))
        .unwrap();
        let h = config.http;
        assert_eq!((h.max_body_bytes, h.max_sessions), (2 << 20, 5));
        assert_eq!(h.max_sessions_per_principal, 3);
        assert_eq!(HttpLimits::default().max_sessions_per_principal, 100);
        assert_eq!(h.max_connections, 7);
        assert_eq!(HttpLimits::default().max_connections, 10_000);
        assert_eq!(h.session_idle.as_secs(), 60);
        assert_eq!(h.header_timeout.as_secs(), 3);
        assert_eq!(parse(up).unwrap().http, HttpLimits::default());
        for (text, expected) in [
            (
                "[http]\nmax_body_mb = 0\n",
                "`max_body_mb = 0` is out of range",
            ),
            (
                "[http]\nmax_sessions_per_principal = 0\n",
                "`max_sessions_per_principal = 0` is out of range",
            ),
            (
                "[http]\nmax_sessions = 0\n",
                "`max_sessions = 0` is out of range",
            ),
            (
                "[http]\nsession_idle_s = 0\n",
                "`session_idle_s = 0` is out of range",
            ),
            (
                "[http]\nheader_timeout_s = 0\n",
                "`header_timeout_s = 0` is out of range",
            ),
            (
                "[http]\nmax_connections = 0\n",
                "`max_connections = 0` is out of range: from 1 to 1000000",
            ),
            ("[http]\nmax_body = 3\n", "unknown field `max_body`"),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn message_limits_are_read_and_checked() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        assert_eq!(parse(up).unwrap().limits.max_message_bytes, 1 << 30);
        let config = parse(&format!("{up}[limits]\nmax_message_mb = 3\n")).unwrap();
        assert_eq!(config.limits.max_message_bytes, 3 << 20);
        assert_eq!(config.limits.describe(), "[limits] max_message_mb = 3");
        assert_eq!(parse(up).unwrap().limits.max_requests_in_flight, 256);
        let config = parse(&format!("{up}[limits]\nmax_requests_in_flight = 2\n")).unwrap();
        assert_eq!(config.limits.max_requests_in_flight, 2);
        assert_eq!(config.limits.requests_per_minute, None);
        let config = parse(&format!("{up}[limits]\nrequests_per_minute = 600\n")).unwrap();
        assert_eq!(config.limits.requests_per_minute, Some(600));
        let err = parse(&format!("{up}[limits]\nrequests_per_minute = 0\n")).unwrap_err();
        assert!(
            err.contains("`requests_per_minute = 0` is out of range"),
            "{err}"
        );
        for (text, expected) in [
            (
                "[limits]\nmax_message_mb = 0\n",
                "`max_message_mb = 0` is out of range",
            ),
            ("[limits]\nmax_message_mb = 5000\n", "from 1 to 4096"),
            (
                "[limits]\nmax_requests_in_flight = 0\n",
                "`max_requests_in_flight = 0` is out of range: from 1 to 65536",
            ),
            ("[limits]\nmax_message = 3\n", "unknown field `max_message`"),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn cache_settings_are_read_over_the_defaults_and_checked() {
        let up = "[upstreams.a]\ncommand = \"x\"\n[upstreams.a.tools.t]\ncache = { idle_s = 30, per_session = true }\n[upstreams.a.tools.u]\nmax_tokens = 900\n";
        let config = parse(&format!(
            "{up}[cache]\nannotated = true\nmax_bytes = 4096\nttl_s = 120\nrefresh_at = 0.5\n"
        ))
        .unwrap();
        let c = config.cache;
        assert!(c.annotated);
        assert_eq!(c.max_bytes, 4096);
        assert_eq!(c.defaults.ttl, std::time::Duration::from_secs(120));
        let t = config.upstreams[0].tools["t"].cache_policy.unwrap();
        // The tool's own fields over `[cache]`'s.
        assert_eq!(
            (
                t.ttl.as_secs(),
                t.idle.as_secs(),
                t.refresh_at,
                t.per_session
            ),
            (120, 30, 0.5, true)
        );
        assert_eq!(config.upstreams[0].tools["u"].cache_policy, None);
        assert_eq!(parse(up).unwrap().cache, CacheSettings::default());
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        for (text, expected) in [
            (
                "[cache]\nttl_s = -5\n",
                "sluice.toml:3:1: [cache]: `ttl_s = -5` is out of range",
            ),
            (
                "[cache]\nidle_s = 0\n",
                "[cache]: `idle_s = 0` is out of range",
            ),
            (
                "[cache]\nrefresh_at = 1.5\n",
                "[cache]: `refresh_at = 1.5` must be a fraction of the lifetime",
            ),
            ("[cache]\nmax_bytes = 10\n", "`max_bytes = 10` is too small"),
            ("[cache]\nsize = 10\n", "unknown field `size`"),
            (
                "[upstreams.a.tools.t]\ncache = { ttl_s = -1 }\n",
                "sluice.toml:3:1: upstream `a`, tool `t`: cache: `ttl_s = -1` is out of range",
            ),
            (
                "[upstreams.a.tools.t]\ncache = { refresh_at = -0.2 }\n",
                "upstream `a`, tool `t`: cache: `refresh_at = -0.2` must be a fraction",
            ),
            (
                "[upstreams.a.tools.t]\ncache = { ttl = 5 }\n",
                "unknown field `ttl`, expected one of `ttl_s`, `idle_s`, `refresh_at`, `per_session`",
            ),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn bad_query_values_are_refused() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        for (line, expected) in [
            (
                "timeout_s = 0",
                "sluice.toml:3:1: [query]: `timeout_s = 0` is out of range",
            ),
            ("timeout_s = -1", "`timeout_s = -1` is out of range"),
            (
                "max_memory_mb = 8",
                "`max_memory_mb = 8` is out of range: from 64",
            ),
            ("max_outputs = 0", "`max_outputs` must be at least 1"),
            ("max_output_mb = 0", "`max_output_mb = 0` is out of range"),
            ("workers = 0", "`workers = 0` is out of range: from 1 to 64"),
            ("cache_mb = -5", "invalid value"),
            ("timeout = 3", "unknown field `timeout`"),
        ] {
            let err = parse(&format!("{up}[query]\n{line}\n")).unwrap_err();
            assert!(err.contains(expected), "{line}: {err}");
        }
    }

    #[test]
    fn the_store_backend_is_chosen_and_checked() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let store = |lines: &str| {
            Config::parse(
                &format!("{up}[store]\n{lines}\n"),
                Path::new("/etc/sluice/sluice.toml"),
            )
            .map(|c| c.store)
            .map_err(|e| e.to_string())
        };
        let memory = store("max_bytes = 1048576").unwrap();
        assert_eq!(
            (memory.backend, memory.compress),
            (StoreBackend::Memory, false)
        );
        // Memory in zstd frames, when asked.
        assert!(store("compress = true").unwrap().compress);
        // A relative path is the config file's folder's; compressed by default.
        let disk = store("backend = \"disk\"\npath = \"state\"").unwrap();
        assert_eq!(
            disk.backend,
            StoreBackend::Disk {
                path: PathBuf::from("/etc/sluice/state")
            }
        );
        assert!(disk.compress);
        let plain = store(
            "backend = \"disk\"\npath = \"/var/lib/s\"\ncompress = false\nsecret_file = \"k\"",
        )
        .unwrap();
        assert!(!plain.compress);
        assert_eq!(plain.secret_file, Some(PathBuf::from("/etc/sluice/k")));
        let redis = store("backend = \"redis\"\nurl = \"rediss://r:6380/1\"\nsecret_file = \"/s\"")
            .unwrap();
        assert_eq!(
            redis.backend,
            StoreBackend::Redis {
                url: "rediss://r:6380/1".into()
            }
        );
        for (lines, expected) in [
            ("backend = \"s3\"", "`backend = \"s3\"` is not a store"),
            ("path = \"/x\"", "`path` is where the disk store lives"),
            (
                "backend = \"disk\"\nurl = \"redis://x\"",
                "`url` is the Redis server",
            ),
            (
                "backend = \"redis\"\nurl = \"http://x\"\nsecret_file = \"/s\"",
                "is not a Redis URL",
            ),
            (
                "backend = \"redis\"\nurl = \"redis://x\"",
                "needs `secret_file",
            ),
            ("backend = \"disk\"\ncompress = \"yes\"", "invalid type"),
        ] {
            let err = store(lines).unwrap_err();
            assert!(err.contains(expected), "{lines}: {err}");
        }
    }

    #[test]
    fn bad_budget_values_are_refused() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let err = parse(&format!("{up}[budget]\nmax_tokens = 10\n")).unwrap_err();
        assert!(
            err.starts_with("sluice.toml:3:1: [budget]: `max_tokens = 10` is too small"),
            "{err}"
        );
        assert!(
            parse(&format!("{up}[budget]\ntoken_factor = 0\n"))
                .unwrap_err()
                .contains("between 0.5 and 4")
        );
        assert!(
            parse(&format!("{up}[budget]\nmax_tokens = -1\n"))
                .unwrap_err()
                .contains("invalid value")
        );
        assert!(
            parse(&format!("{up}[budget.clients.x]\nmax_lines = 1\n"))
                .unwrap_err()
                .contains("[budget.clients.\"x\"]: `max_lines = 1`")
        );
        assert!(
            parse(&format!("{up}[budget]\nbogus = 1\n"))
                .unwrap_err()
                .contains("unknown field `bogus`")
        );
        assert!(
            parse(&format!("{up}[store]\nttl_s = 0\n"))
                .unwrap_err()
                .contains("ttl_s")
        );
        assert!(
            parse(&format!("{up}[upstreams.a.tools.t]\nmode = \"lossy\"\n"))
                .unwrap_err()
                .contains("unknown variant `lossy`")
        );
        assert!(
            parse(&format!("{up}[upstreams.a.tools.t]\nmax_chars = 5\n"))
                .unwrap_err()
                .contains("tool `t`: `max_chars = 5`")
        );
    }

    #[test]
    fn values_past_what_the_clock_holds_are_refused() {
        // Each was accepted, then panicked (or wrapped) when used.
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        for (text, expected) in [
            (
                "[upstreams.a.tools.t]\ntimeout_s = 1e20\n",
                "sluice.toml:3:1: upstream `a`, tool `t`: `timeout_s = 100000000000000000000` must be more than 0 and at most 86400",
            ),
            (
                "[upstreams.a.tools.t]\ntimeout_s = nan\n",
                "`timeout_s = NaN` must be more than 0",
            ),
            (
                "[store]\nttl_s = 18446744073709551615\n",
                "sluice.toml:3:1: [store]: `ttl_s = 18446744073709551615` is out of range: from 1 to 31536000",
            ),
            (
                "[query]\ncache_mb = 17592186044416\n",
                "[query]: `cache_mb = 17592186044416` is out of range: from 0 to 1048576",
            ),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
        let longest = parse(&format!(
            "{up}[upstreams.a.tools.t]\ntimeout_s = 86400\n[store]\nttl_s = 31536000\n[query]\ncache_mb = 1048576\n"
        ))
        .unwrap();
        assert_eq!(longest.store.limits.ttl.as_secs(), 31_536_000);
        assert_eq!(longest.query.cache_bytes, 1 << 40);
    }

    #[test]
    fn admin_listen_is_an_address_and_port() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let config = parse(&format!("{up}[admin]\nlisten = \"127.0.0.1:9464\"\n")).unwrap();
        assert_eq!(config.admin, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(parse(up).unwrap().admin, None);
        assert_eq!(parse(&format!("{up}[admin]\n")).unwrap().admin, None);
        let err = parse(&format!("{up}[admin]\nlisten = \"localhost\"\n")).unwrap_err();
        assert!(
            err.contains("[admin]: `listen = \"localhost\"` is not an address and port"),
            "{err}"
        );
        let err = parse(&format!("{up}[admin]\nport = 9464\n")).unwrap_err();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn secrets_come_from_the_environment_and_errors_name_them_never_show_them() {
        let env = |name: &str| match name {
            "GH_TOKEN" => Some("ghp_s3cret".to_owned()),
            "HOST" => Some("mcp.example.com".to_owned()),
            "BAD" => Some("line\nbreak".to_owned()),
            "FTP" => Some("ftp://s3cret@host".to_owned()),
            _ => None,
        };
        let parse_env = |text: &str| {
            Config::parse_with(text, Path::new("sluice.toml"), &env).map_err(|e| e.to_string())
        };
        let config = parse_env(
            "[upstreams.gh]\nurl = \"https://${HOST}/mcp?key=${KEY:-none}\"\nheaders = { Authorization = \"Bearer ${GH_TOKEN}\", X-Literal = \"$${GH_TOKEN}\" }\n\n[upstreams.fs]\ncommand = \"server\"\nargs = [\"${GH_TOKEN}\"]\nenv = { TOKEN = \"${GH_TOKEN}\", PLAIN = \"p\" }\n",
        )
        .unwrap();
        let by_name = |n: &str| {
            &config
                .upstreams
                .iter()
                .find(|u| u.name == n)
                .unwrap()
                .transport
        };
        let UpstreamTransport::Http { url, headers } = by_name("gh") else {
            panic!("gh is an HTTP upstream")
        };
        assert_eq!(url, "https://mcp.example.com/mcp?key=none");
        assert_eq!(headers["Authorization"], "Bearer ghp_s3cret");
        assert_eq!(headers["X-Literal"], "${GH_TOKEN}");
        let UpstreamTransport::Stdio { args, env, .. } = by_name("fs") else {
            panic!("fs is a stdio upstream")
        };
        assert_eq!(env["TOKEN"], "ghp_s3cret");
        assert_eq!(env["PLAIN"], "p");
        // `args` are the server's command line: left as written.
        assert_eq!(args, &["${GH_TOKEN}"]);
        for (text, expected) in [
            (
                "[upstreams.gh]\nurl = \"https://h/mcp\"\nheaders = { Authorization = \"Bearer ${GITHUB_TOKEN}\" }\n",
                // At the value's line and column, not the table's.
                "sluice.toml:3:29: upstream `gh`: header `Authorization`: `${GITHUB_TOKEN}` names a variable that is not set",
            ),
            (
                "[upstreams.gh]\nurl = \"${MISSING_URL}\"\n",
                "upstream `gh`: `url`: `${MISSING_URL}` names a variable that is not set",
            ),
            (
                "[upstreams.fs]\ncommand = \"s\"\nenv = { T = \"${GH_TOKEN\" }\n",
                "sluice.toml:3:13: upstream `fs`: `env.T`: `${` opens a variable that no `}` closes",
            ),
            (
                "[upstreams.gh]\nurl = \"${FTP}\"\n",
                "`url` must start with http:// or https://, got `${FTP}` (its variables replaced)",
            ),
            (
                "[upstreams.gh]\nurl = \"https://h/mcp\"\nheaders = { X = \"${BAD}\" }\n",
                "the value of header `X` contains control characters",
            ),
        ] {
            let err = parse_env(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.starts_with("sluice.toml:"), "at a place: {err}");
            for secret in ["s3cret", "line\nbreak", "ftp://"] {
                assert!(!err.contains(secret), "{err}");
            }
        }
    }

    #[test]
    fn admin_principals_name_some_of_auths_principals() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let auth = format!(
            "[auth]\ntokens = [ {{ principal = \"ops\", sha256 = \"{}\" }} ]\n",
            "ab".repeat(32)
        );
        let config = parse(&format!(
            "{up}{auth}[admin]\nlisten = \"127.0.0.1:9464\"\nprincipals = [\"ops\", \" alice \"]\n"
        ))
        .unwrap();
        assert_eq!(
            config.admin_principals,
            Some(vec!["ops".to_owned(), "alice".to_owned()])
        );
        assert_eq!(
            parse(&format!("{up}{auth}[admin]\n"))
                .unwrap()
                .admin_principals,
            None
        );
        for (principals, with_auth, expected) in [
            ("[\"ops\"]", false, "the file has no [auth] table"),
            ("[]", true, "`principals = []` lets no one read"),
            (
                "[\"ops\", \"  \"]",
                true,
                "`principals` holds an empty name",
            ),
        ] {
            let auth = if with_auth { auth.as_str() } else { "" };
            let err =
                parse(&format!("{up}{auth}[admin]\nprincipals = {principals}\n")).unwrap_err();
            assert!(err.contains(expected), "{principals}: {err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }

    /// `[http] tls_cert` and `tls_key` come together, relative to the
    /// config file's folder; one without the other says so.
    #[test]
    fn tls_files_come_in_pairs_beside_the_config_file() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        assert_eq!(parse(up).unwrap().tls, None);
        let config = Config::parse(
            &format!("{up}[http]\ntls_cert = \"tls/cert.pem\"\ntls_key = \"/etc/k.pem\"\n"),
            Path::new("/srv/sluice/sluice.toml"),
        )
        .unwrap();
        assert_eq!(
            config.tls,
            Some(TlsFiles {
                cert: PathBuf::from("/srv/sluice/tls/cert.pem"),
                key: PathBuf::from("/etc/k.pem"),
            })
        );
        for (line, expected) in [
            (
                "tls_cert = \"c.pem\"",
                "`tls_cert` is set without `tls_key`: give both",
            ),
            (
                "tls_key = \"k.pem\"",
                "`tls_key` is set without `tls_cert`: give both",
            ),
        ] {
            let err = parse(&format!("{up}[http]\n{line}\n")).unwrap_err();
            assert!(
                err.contains(expected) && err.contains("sluice.toml:"),
                "{err}"
            );
        }
    }

    #[test]
    fn an_authenticating_proxy_is_read() {
        let config = parse(
            "[upstreams.a]\ncommand = \"x\"\n[auth.proxy]\nheader = \"X-Forwarded-User\"\nfrom = [\"127.0.0.1\", \"::ffff:10.0.0.7\"]\n",
        )
        .unwrap();
        let one = |ip: std::net::IpAddr, prefix| IpNetwork {
            address: ip,
            prefix,
        };
        assert_eq!(
            config.auth.unwrap().proxy,
            Some(ProxyAuth {
                header: "x-forwarded-user".into(),
                from: vec![
                    one(std::net::Ipv4Addr::LOCALHOST.into(), 32),
                    one(std::net::Ipv4Addr::new(10, 0, 0, 7).into(), 32)
                ],
            })
        );
        // Networks, as written or with host bits set; both families.
        let network = |text: &str| IpNetwork::parse(text).unwrap();
        let ip = |text: &str| text.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(network("10.1.2.3/8"), network("10.0.0.0/8"));
        assert!(network("10.0.0.0/8").contains(ip("10.255.0.1")));
        assert!(!network("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(network("10.0.0.0/8").contains(ip("::ffff:10.0.0.1")));
        assert!(network("0.0.0.0/0").contains(ip("192.0.2.1")));
        assert!(!network("0.0.0.0/0").contains(ip("::1")));
        assert!(network("fd00::/8").contains(ip("fd12::1")));
        assert!(!network("fd00::/8").contains(ip("fe80::1")));
        assert!(network("::1").contains(ip("::1")));
        assert!(!network("127.0.0.1").contains(ip("127.0.0.2")));
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/8/8",
            "x",
        ] {
            assert_eq!(IpNetwork::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn auth_tokens_and_jwt_are_read() {
        let digest = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
        let config = parse(&format!(
            "[upstreams.a]\ncommand = \"x\"\n[auth]\ntokens = [ {{ principal = \"alice\", sha256 = \"{digest}\" }} ]\n[auth.jwt]\nissuer = \"https://idp.example.com\"\naudience = \"sluice\"\njwks_file = \"keys/jwks.json\"\n"
        ))
        .unwrap();
        let auth = config.auth.unwrap();
        assert_eq!(auth.tokens[0].principal, "alice");
        assert_eq!(&auth.tokens[0].sha256[..4], &[0x9f, 0x86, 0xd0, 0x81]);
        let jwt = auth.jwt.unwrap();
        assert_eq!(jwt.principal_claim, "sub");
        // A relative `jwks_file` is found beside the config file.
        assert_eq!(jwt.jwks, JwksSource::File(PathBuf::from("keys/jwks.json")));
        let config = Config::parse(
            "[upstreams.a]\ncommand = \"x\"\n[auth.jwt]\nissuer = \"i\"\naudience = \"a\"\njwks_url = \"https://idp/jwks\"\nprincipal_claim = \"email\"\n",
            Path::new("/etc/sluice/sluice.toml"),
        )
        .unwrap();
        let auth = config.auth.unwrap();
        assert!(auth.tokens.is_empty());
        let jwt = auth.jwt.unwrap();
        assert_eq!(jwt.jwks, JwksSource::Url("https://idp/jwks".into()));
        assert_eq!(jwt.principal_claim, "email");
        assert_eq!(
            parse("[upstreams.a]\ncommand = \"x\"\n").unwrap().auth,
            None
        );
    }

    #[test]
    fn bad_auth_tables_are_refused_with_what_to_add() {
        let up = "[upstreams.a]\ncommand = \"x\"\n";
        let good = "0".repeat(64);
        let jwt = "[auth.jwt]\nissuer = \"https://idp\"\naudience = \"sluice\"\n";
        for (text, expected) in [
            (
                "[auth]\n".to_owned(),
                "sluice.toml:3:1: [auth] accepts no token: add `tokens = [",
            ),
            (
                "[auth]\ntokens = []\n".to_owned(),
                "[auth] accepts no token",
            ),
            (
                "[auth]\ntokens = [ { principal = \"alice\", sha256 = \"abc\" } ]\n".to_owned(),
                "sluice.toml:4:12: [auth] tokens: the `sha256` of `alice` must be 64 hex digits",
            ),
            (
                format!(
                    "[auth]\ntokens = [ {{ principal = \"bob\", sha256 = \"{}\" }} ]\n",
                    "g".repeat(64)
                ),
                "the `sha256` of `bob` must be 64 hex digits",
            ),
            (
                format!("[auth]\ntokens = [ {{ principal = \" \", sha256 = \"{good}\" }} ]\n"),
                "[auth] tokens: `principal` is empty",
            ),
            (
                format!(
                    "[auth]\ntokens = [ {{ principal = \"a\", sha256 = \"{good}\" }}, {{ principal = \"b\", sha256 = \"{good}\" }} ]\n"
                ),
                "`b` and `a` have the same `sha256`",
            ),
            (
                "[auth]\ntokens = [ { principal = \"a\" } ]\n".to_owned(),
                "missing field `sha256`",
            ),
            (
                "[auth]\ntoken = []\n".to_owned(),
                "unknown field `token`, expected one of `tokens`, `jwt`, `proxy`",
            ),
            (
                "[auth.proxy]\nheader = \"X-User\"\nfrom = []\n".to_owned(),
                "[auth.proxy]: `from` is empty",
            ),
            (
                "[auth.proxy]\nheader = \"X-User\"\nfrom = [\"10.0.0.0/33\"]\n".to_owned(),
                "[auth.proxy]: `from` holds \"10.0.0.0/33\", which is neither an IP address nor a network",
            ),
            (
                "[auth.proxy]\nheader = \"X-User\"\nfrom = [\"proxy.local\"]\n".to_owned(),
                "`from` holds \"proxy.local\", which is neither",
            ),
            (
                "[auth.proxy]\nheader = \"X User\"\nfrom = [\"::1\"]\n".to_owned(),
                "is not an HTTP header name",
            ),
            (
                "[auth.proxy]\nheader = \"Authorization\"\nfrom = [\"::1\"]\n".to_owned(),
                "`header = \"authorization\"` is one sluice reads for itself",
            ),
            (
                jwt.to_owned(),
                "[auth.jwt]: where are the signing keys? Add `jwks_url",
            ),
            (
                format!("{jwt}jwks_url = \"https://idp/j\"\njwks_file = \"j.json\"\n"),
                "[auth.jwt]: both `jwks_url` and `jwks_file` are set: keep one",
            ),
            (
                format!("{jwt}jwks_url = \"idp/j\"\n"),
                "`jwks_url` must start with https:// or http://",
            ),
            (
                "[auth.jwt]\nissuer = \"\"\naudience = \"s\"\njwks_file = \"j\"\n".to_owned(),
                "[auth.jwt]: `issuer` is empty",
            ),
            (
                "[auth.jwt]\nissuer = \"i\"\njwks_file = \"j\"\n".to_owned(),
                "missing field `audience`",
            ),
            (
                format!("{jwt}jwks_file = \"j\"\nprincipal_claim = \"\"\n"),
                "[auth.jwt]: `principal_claim` is empty",
            ),
            (
                format!("{jwt}jwks_file = \"j\"\nalgorithms = [\"HS256\"]\n"),
                "unknown field `algorithms`",
            ),
        ] {
            let err = parse(&format!("{up}{text}")).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn command_line_upstream_is_named_after_the_program() {
        let config =
            Config::single_command(&["/usr/bin/mcp-server-git".into(), "-r".into()]).unwrap();
        assert_eq!(config.upstreams[0].name, "mcp-server-git");
        assert!(Config::single_command(&[]).is_err());
        assert_eq!(default_name("python3.11"), "python3-11");
    }
}
