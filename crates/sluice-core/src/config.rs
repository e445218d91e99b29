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
//! headers = { Authorization = "Bearer secret" }
//!
//! [upstreams.fs.tools.directory_tree]   # per-tool settings (later versions)
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::naming::SEPARATOR;

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The upstream servers, sorted by name.
    pub upstreams: Vec<UpstreamSpec>,
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

/// Settings of one upstream tool. Reserved: later versions add budget,
/// timeout and cache settings here; today the table must be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {}

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUpstream {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<Spanned<String>>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    protocol: Option<Spanned<String>>,
    #[serde(default)]
    tools: BTreeMap<String, ToolSettings>,
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

    /// Parses and validates configuration text; `path` is only used in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
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
        for (name, raw) in raw.upstreams {
            let (name_span, name) = (name.span(), name.into_inner());
            if let Err(why) = check_upstream_name(&name) {
                return Err(at(name_span, why));
            }
            let span = raw.span();
            let raw = raw.into_inner();
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
                    UpstreamTransport::Stdio {
                        command,
                        args: raw.args,
                        env: raw.env,
                        cwd: raw.cwd,
                    }
                }
                (None, Some(url)) => {
                    let url_span = url.span();
                    let url = url.into_inner();
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        return Err(at(
                            url_span,
                            format!(
                                "upstream `{name}`: `url` must start with http:// or https://, got `{url}`"
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
                    for (header, value) in &raw.headers {
                        check_header(header, value)
                            .map_err(|why| at(span.clone(), format!("upstream `{name}`: {why}")))?;
                    }
                    UpstreamTransport::Http {
                        url,
                        headers: raw.headers,
                    }
                }
            };
            let protocol = match raw.protocol {
                None => ProtocolChoice::Auto,
                Some(p) => parse_protocol(p.get_ref()).ok_or_else(|| {
                    at(
                        p.span(),
                        format!("upstream `{name}`: unknown protocol `{}`: expected \"auto\", \"2025-11-25\" or \"2026-07-28\"", p.get_ref()),
                    )
                })?,
            };
            upstreams.push(UpstreamSpec {
                name,
                transport,
                protocol,
                tools: raw.tools,
            });
        }
        Ok(Config { upstreams })
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
        })
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
            "upstream name `{name}` contains `{SEPARATOR}`, which separates upstream and tool names: use `-` or a single `_`"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "upstream name `{name}` may only contain ASCII letters, digits, `-` and `_` (it prefixes tool names)"
        ));
    }
    Ok(())
}

fn check_header(name: &str, value: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("`{name}` is not a valid HTTP header name"));
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
    fn command_line_upstream_is_named_after_the_program() {
        let config =
            Config::single_command(&["/usr/bin/mcp-server-git".into(), "-r".into()]).unwrap();
        assert_eq!(config.upstreams[0].name, "mcp-server-git");
        assert!(Config::single_command(&[]).is_err());
        assert_eq!(default_name("python3.11"), "python3-11");
    }
}
