//! The command line, parsed (clap) and then validated into a [`Command`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sluice_core::config::{AUTH_EXAMPLE, Config};

use crate::downstream::auth::Authenticator;

use crate::admin::AdminSettings;
use crate::downstream::HttpAccess;
use crate::downstream::http_front::AllowedHosts;

/// sluice: an MCP gateway that keeps every tool result within the client's
/// context budget, losslessly.
#[derive(Debug, Parser)]
#[command(
    name = "sluice",
    version,
    about,
    after_help = "Examples:\n  sluice -- npx -y @modelcontextprotocol/server-filesystem ~/code\n  sluice --config sluice.toml --listen 127.0.0.1:8808 --admin 127.0.0.1:9464\n  sluice call --tool echo --args '{\"message\":\"hi\"}' -- npx -y @modelcontextprotocol/server-everything\n  sluice demo"
)]
pub struct Args {
    /// A TOML file listing the upstream servers ([upstreams.NAME] tables).
    #[arg(long, short, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Also serve the admin endpoints at http://ADDR/ (a live page),
    /// /metrics (Prometheus) and /api/state; overrides `[admin] listen`.
    /// Not loopback: only with [auth].
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<SocketAddr>,

    /// With --listen or --admin: also accept this Host (and Origin) besides localhost; repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,

    /// With --listen: accept any Host and Origin (only behind a trusted proxy;
    /// never on --admin, which checks Hosts without [auth]).
    #[arg(long)]
    pub allow_any_host: bool,

    /// With --listen on an address that is not loopback: serve without [auth]
    /// (only behind a proxy that authenticates, or on a trusted network).
    #[arg(long)]
    pub no_auth: bool,

    /// Log level or filter (error, warn, info, debug, trace, or a tracing filter;
    /// the default keeps the MCP SDK's per-message lines out).
    #[arg(
        long,
        global = true,
        value_name = "LEVEL",
        default_value = "info,rmcp=warn",
        env = "SLUICE_LOG"
    )]
    pub log_level: String,

    /// How log lines are written to stderr: text (the default), or json (one
    /// JSON object per line: timestamp, level, target, fields), for log
    /// collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value = "text",
        env = "SLUICE_LOG_FORMAT"
    )]
    pub log_format: LogFormat,

    #[command(subcommand)]
    pub command: Option<Sub>,

    /// The upstream server command, after `--`.
    #[arg(last = true, value_name = "UPSTREAM CMD")]
    pub upstream: Vec<String>,
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-11-26T15:10:47.068423Z  INFO sluice::state: …`
    Text,
    /// `{"timestamp":"…","level":"INFO","fields":{"message":"…"},"target":"sluice::state"}`
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Make one tool call through sluice and print the result as JSON.
    Call {
        /// The tool's name (as sluice lists it).
        #[arg(long)]
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The upstream server command, after `--`.
        #[arg(last = true, value_name = "UPSTREAM CMD")]
        upstream: Vec<String>,
    },
    /// A built-in walkthrough: a sample server behind sluice, and what a model sees.
    Demo,
    /// The sample MCP server used by the demo (stdio, or HTTP with --listen).
    #[command(hide = true)]
    SampleServer {
        /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
    },
    /// Runs one jq filter for sluice_query (started by sluice itself).
    #[command(hide = true)]
    JqWorker,
}

/// What to run, validated.
#[derive(Debug)]
pub enum Command {
    /// Serve clients over stdio, and the admin endpoints if asked.
    Stdio(Config, Option<AdminSettings>),
    /// Serve clients over Streamable HTTP, and the admin endpoints if asked.
    Http(Config, SocketAddr, HttpAccess, Option<AdminSettings>),
    /// One call, printed.
    Call {
        /// The upstreams.
        config: Config,
        /// The tool.
        tool: String,
        /// Its arguments.
        arguments: serde_json::Map<String, serde_json::Value>,
    },
    /// The walkthrough.
    Demo,
    /// The sample server, on stdio or at an HTTP address.
    SampleServer(Option<SocketAddr>),
    /// One jq filter, for sluice_query.
    JqWorker,
}

impl Args {
    /// Validates the arguments into a command.
    pub fn validate(self) -> anyhow::Result<Command> {
        let config_from =
            |config: &Option<PathBuf>, upstream: &[String]| -> anyhow::Result<Config> {
                match (config, upstream.is_empty()) {
                    (Some(_), false) => anyhow::bail!(
                        "give either --config FILE or an upstream command after `--`, not both"
                    ),
                    (Some(path), true) => Ok(Config::load(path)?),
                    (None, _) => Ok(Config::single_command(upstream)?),
                }
            };
        if self.admin.is_some() && self.command.is_some() {
            anyhow::bail!(
                "--admin applies when sluice serves clients (over stdio or --listen), not to a subcommand"
            );
        }
        match self.command {
            Some(Sub::Demo) => Ok(Command::Demo),
            Some(Sub::SampleServer { listen }) => Ok(Command::SampleServer(listen)),
            Some(Sub::JqWorker) => Ok(Command::JqWorker),
            Some(Sub::Call {
                tool,
                args,
                upstream,
            }) => {
                let value: serde_json::Value = serde_json::from_str(&args)
                    .map_err(|e| anyhow::anyhow!("--args is not valid JSON: {e}"))?;
                let serde_json::Value::Object(arguments) = value else {
                    anyhow::bail!("--args must be a JSON object, like '{{\"path\":\".\"}}'");
                };
                let config = config_from(&self.config, &upstream)?;
                Ok(Command::Call {
                    config,
                    tool,
                    arguments,
                })
            }
            None => {
                let config = config_from(&self.config, &self.upstream)?;
                if self.no_auth && self.listen.is_none() {
                    anyhow::bail!("--no-auth only applies with --listen");
                }
                let admin_addr = self.admin.or(config.admin);
                if self.allow_any_host && self.listen.is_none() && admin_addr.is_some() {
                    anyhow::bail!(
                        "--allow-any-host only applies with --listen: the admin server accepts localhost and --allow-host hosts only"
                    );
                }
                if self.listen.is_none()
                    && admin_addr.is_none()
                    && (self.allow_any_host || !self.allow_hosts.is_empty())
                {
                    anyhow::bail!(
                        "--allow-host and --allow-any-host only apply with --listen or --admin"
                    );
                }
                // One authenticator for /mcp and the admin server.
                let authenticator = match &config.auth {
                    Some(auth) => Some(Authenticator::new(auth)?),
                    None => None,
                };
                // Read and checked before anything listens (and only if
                // something will); the admin server speaks it too.
                let tls = match &config.tls {
                    Some(files) if self.listen.is_some() || admin_addr.is_some() => {
                        Some(crate::downstream::tls::server_config(files)?)
                    }
                    _ => None,
                };
                let admin = admin_addr.map(|addr| AdminSettings {
                    addr,
                    auth: authenticator.clone(),
                    principals: config.admin_principals.clone(),
                    // Never any Host: without [auth] the Host check is all
                    // that keeps a DNS-rebinding page from the data.
                    hosts: AllowedHosts::new(&self.allow_hosts, false),
                    tls: tls.clone(),
                });
                if let Some(admin) = &admin {
                    admin.check()?;
                }
                let Some(addr) = self.listen else {
                    return Ok(Command::Stdio(config, admin));
                };
                let auth = match (authenticator, self.no_auth) {
                    (Some(_), true) => anyhow::bail!(
                        "--no-auth and an [auth] table together: remove one (with [auth], every request to /mcp needs a bearer token)"
                    ),
                    (Some(auth), false) => Some(auth),
                    (None, false) if !addr.ip().to_canonical().is_loopback() => {
                        anyhow::bail!(
                            "--listen {addr} is not a loopback address and no [auth] is configured: anyone who reaches it could call every upstream tool. Add to the config file (--config FILE):\n\n{AUTH_EXAMPLE}\n\nor pass --no-auth to serve without authentication (only behind a proxy that authenticates, or on a trusted network)."
                        )
                    }
                    (None, _) => None,
                };
                Ok(Command::Http(
                    config,
                    addr,
                    HttpAccess {
                        auth,
                        allowed_hosts: self.allow_hosts,
                        allow_any: self.allow_any_host,
                        tls,
                    },
                    admin,
                ))
            }
        }
    }
}
