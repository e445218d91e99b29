//! The configuration file (`sluice_core::config`): what an operator writes,
//! or a tool generates.
//!
//! Any text is either a configuration or an error that names the file, a
//! line and a column inside the text; never a panic. A configuration that
//! is accepted can be used: every duration it sets can be added to the
//! clock and every timeout converted. Generated valid files read back to
//! exactly the settings written.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use proptest::prelude::*;
use sluice_core::config::{Config, ConfigError, Mode, ProtocolChoice, UpstreamTransport};

use crate::corpus::{self, config};
use crate::regressions;

/// `text` parsed: a configuration that can be used, or an error at a place
/// inside the text.
fn check_any(text: &str) -> Result<Option<Config>, TestCaseError> {
    match Config::parse(text, Path::new("sluice.toml")) {
        Ok(config) => {
            check_usable(&config)?;
            Ok(Some(config))
        }
        Err(ConfigError::Invalid {
            path,
            line,
            column,
            message,
        }) => {
            prop_assert_eq!(path.as_path(), Path::new("sluice.toml"));
            let lines = text.split('\n').count();
            prop_assert!(
                (1..=lines).contains(&line),
                "line {} of {}: {}",
                line,
                lines,
                message
            );
            let width = text
                .split('\n')
                .nth(line - 1)
                .map_or(0, |l| l.chars().count());
            prop_assert!(
                (1..=width + 1).contains(&column),
                "column {} of {}: {}",
                column,
                width,
                message
            );
            prop_assert!(!message.trim().is_empty());
            prop_assert!(!message.contains('\n'), "{}", message);
            Ok(None)
        }
        Err(other) => Err(TestCaseError::fail(format!(
            "not an error at a place: {other}"
        ))),
    }
}

/// Every duration of `config` can be added to the clock, and every timeout
/// converted, without overflow.
fn check_usable(config: &Config) -> Result<(), TestCaseError> {
    let now = Instant::now();
    let wall = SystemTime::now();
    let mut durations: Vec<(&str, Duration)> = vec![
        ("[store] ttl_s", config.store.limits.ttl),
        ("[query] timeout_s", config.query.timeout),
        (
            "[operations] default_timeout_s",
            config.operations.default_timeout,
        ),
        ("[operations] max_timeout_s", config.operations.max_timeout),
        ("[operations] retention_h", config.operations.retention),
        ("[cache] ttl_s", config.cache.defaults.ttl),
        ("[cache] idle_s", config.cache.defaults.idle),
    ];
    for upstream in &config.upstreams {
        for settings in upstream.tools.values() {
            // How a call under this tool's `timeout_s` waits.
            let wait = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                config.operations.timeout(None, settings.timeout_s)
            }))
            .map_err(|_| {
                TestCaseError::fail(format!(
                    "`timeout_s = {:?}` panics when used",
                    settings.timeout_s
                ))
            })?
            .map_err(TestCaseError::fail)?;
            durations.push(("a tool's timeout_s", wait));
            if let Some(policy) = &settings.cache_policy {
                durations.push(("a tool's cache ttl_s", policy.ttl));
                durations.push(("a tool's cache idle_s", policy.idle));
            }
        }
    }
    for (what, d) in durations {
        prop_assert!(
            now.checked_add(d).is_some(),
            "{} = {:?} overflows the clock",
            what,
            d
        );
        prop_assert!(
            wall.checked_add(d).is_some(),
            "{} = {:?} overflows the wall clock",
            what,
            d
        );
    }
    Ok(())
}

/// Lines that look like a configuration: real tables and keys with values
/// of every type and size, and breakage.
fn toml_ish() -> impl Strategy<Value = String> {
    let table = prop_oneof![
        Just("[upstreams.a]"),
        Just("[upstreams.b]"),
        Just("[upstreams.\"a b\"]"),
        Just("[upstreams.a__b]"),
        Just("[upstreams.a.tools.t]"),
        Just("[upstreams.a.tools.t.cache]"),
        Just("[budget]"),
        Just("[budget.clients.x]"),
        Just("[store]"),
        Just("[query]"),
        Just("[operations]"),
        Just("[cache]"),
        Just("[[upstreams]]"),
        Just("[upstreams"),
        Just("[]"),
    ]
    .prop_map(str::to_owned);
    let key = prop_oneof![
        Just("command"),
        Just("args"),
        Just("env"),
        Just("cwd"),
        Just("url"),
        Just("headers"),
        Just("protocol"),
        Just("max_tokens"),
        Just("max_chars"),
        Just("max_lines"),
        Just("token_factor"),
        Just("mode"),
        Just("timeout_s"),
        Just("preview_depth"),
        Just("cache"),
        Just("max_bytes"),
        Just("ttl_s"),
        Just("idle_s"),
        Just("refresh_at"),
        Just("per_session"),
        Just("annotated"),
        Just("max_memory_mb"),
        Just("max_outputs"),
        Just("max_output_mb"),
        Just("workers"),
        Just("cache_mb"),
        Just("default_timeout_s"),
        Just("max_timeout_s"),
        Just("retention_h"),
        Just("max_running"),
        Just("max_running_total"),
        Just("bogus"),
        Just("\"quoted key\""),
        Just("a.b"),
    ];
    let value = prop_oneof![
        Just("\"x\"".to_owned()),
        Just("\"http://127.0.0.1:1/mcp\"".to_owned()),
        Just("\"ftp://h\"".to_owned()),
        Just("\"2026-07-28\"".to_owned()),
        Just("\"truncate\"".to_owned()),
        Just("\"\"".to_owned()),
        Just("'''multi\nline'''".to_owned()),
        Just("\"\\ud800\"".to_owned()),
        Just("[\"-y\", \"x\"]".to_owned()),
        Just("{ A = \"1\" }".to_owned()),
        Just("{ \"bad header\" = \"v\" }".to_owned()),
        Just("{ Authorization = \"a\\nb\" }".to_owned()),
        Just("{ ttl_s = 1e20, idle_s = 5 }".to_owned()),
        Just("true".to_owned()),
        Just("nan".to_owned()),
        Just("inf".to_owned()),
        Just("-inf".to_owned()),
        Just("1e400".to_owned()),
        Just("1e20".to_owned()),
        Just("1e300".to_owned()),
        Just("5e-324".to_owned()),
        Just("18446744073709551615".to_owned()),
        Just("9223372036854775807".to_owned()),
        Just("-9223372036854775808".to_owned()),
        Just("17592186044416".to_owned()),
        Just("0x7fffffffffffffff".to_owned()),
        Just("1979-05-27T07:32:00Z".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        (0u64..100_000).prop_map(|n| n.to_string()),
        ".{0,8}",
    ];
    let line = prop_oneof![
        2 => table,
        6 => (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => ".{0,20}",
        1 => Just(String::new()),
        1 => Just("# a comment".to_owned()),
    ];
    (
        prop::collection::vec(line, 0..16),
        any::<bool>(),
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(lines, bom, crlf, cut)| {
            let mut text = if bom {
                "\u{feff}".to_owned()
            } else {
                String::new()
            };
            text.push_str(&lines.join(if crlf { "\r\n" } else { "\n" }));
            // Sometimes cut short (a file still being written).
            if cut.index(4) == 0 {
                let at = cut.index(text.len() + 1);
                if text.is_char_boundary(at) {
                    text.truncate(at);
                }
            }
            text
        })
}

/// A valid configuration, as settings to write and expect back.
#[derive(Debug, Clone)]
struct Model {
    upstreams: BTreeMap<String, UpstreamModel>,
    budget: Option<(u32, u32, Option<u32>, f32)>,
    store: Option<(u64, u64)>,
    /// timeout_s, max_memory_mb, max_outputs, max_output_mb, workers, cache_mb
    query: Option<(f64, u64, usize, usize, usize, u64)>,
    /// default_timeout_s, max_timeout_s, retention_h, max_running, max_running_total
    operations: Option<(f64, f64, f64, usize, usize)>,
    /// annotated, max_bytes, ttl_s, idle_s, refresh_at
    cache: Option<(bool, u64, f64, f64, f64)>,
}

/// A stdio upstream's command and args, or an HTTP upstream's URL and headers.
type TransportModel = Result<(String, Vec<String>), (String, BTreeMap<String, String>)>;

/// A tool's max_tokens, timeout_s, mode and cache ttl_s.
type ToolModel = (Option<u32>, Option<f64>, Option<&'static str>, Option<f64>);

#[derive(Debug, Clone)]
struct UpstreamModel {
    transport: TransportModel,
    protocol: Option<&'static str>,
    tools: BTreeMap<String, ToolModel>,
}

/// `value` as a config's `url` or header value spells it: `${` is a
/// variable there (`sluice_core::vars`), `$${` a literal `${`.
fn literal(value: &str) -> String {
    value.replace("${", "$${")
}

/// A TOML string literal (basic string, escaped by serde_json's rules,
/// which TOML shares for these characters).
fn quoted(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Seconds as TOML writes them (always a float, so a whole number is too).
fn float(v: f64) -> String {
    format!("{v:?}")
}

fn model() -> impl Strategy<Value = Model> {
    let seconds = (1u32..=86_400_000).prop_map(|ms| f64::from(ms) / 1000.0);
    let tool = (
        prop::option::of(500u32..100_000),
        prop::option::of(seconds.clone()),
        prop::option::of(prop_oneof![
            Just("buffer"),
            Just("truncate"),
            Just("passthrough")
        ]),
        prop::option::of((1u32..=3_600_000).prop_map(|ms| f64::from(ms) / 1000.0)),
    );
    let upstream = (
        prop_oneof![
            ("[a-z]{1,8}", prop::collection::vec(".{0,6}", 0..3)).prop_map(|(c, a)| Ok((c, a))),
            (
                "https?://[a-z0-9.]{1,10}(:[0-9]{1,4})?/[a-z]{0,4}",
                prop::collection::btree_map("[A-Za-z][A-Za-z0-9-]{0,8}", "[ -~]{0,10}", 0..3)
            )
                .prop_map(Err),
        ],
        prop::option::of(prop_oneof![
            Just("auto"),
            Just("2025-11-25"),
            Just("2026-07-28"),
            Just("legacy"),
            Just("stateless")
        ]),
        prop::collection::btree_map("[a-z_]{1,8}|\"[^\"\\\\]{1,6}\"", tool, 0..3),
    )
        .prop_map(|(transport, protocol, tools)| UpstreamModel {
            transport,
            protocol,
            tools: tools
                .into_iter()
                .map(|(name, t)| (name.trim_matches('"').to_owned(), t))
                .collect(),
        });
    (
        prop::collection::btree_map("[a-z][a-z0-9_-]{0,8}", upstream, 1..4)
            .prop_filter("names without `__`", |m| {
                m.keys().all(|k| !k.contains("__"))
            }),
        prop::option::of((
            500u32..1_000_000,
            2000u32..1_000_000,
            prop::option::of(20u32..10_000),
            (32u16..=256).prop_map(|n| f32::from(n) / 64.0),
        )),
        prop::option::of((1u64 << 20..1 << 40, 1u64..=365 * 86_400)),
        prop::option::of((
            (100u32..=3_600_000).prop_map(|ms| f64::from(ms) / 1000.0),
            64u64..=1 << 20,
            1usize..1_000_000,
            1usize..=4096,
            1usize..=64,
            0u64..=1 << 20,
        )),
        prop::option::of((
            seconds.clone(),
            seconds,
            (1u32..=8760 * 100).prop_map(|h| f64::from(h) / 100.0),
            1usize..1000,
            1usize..10_000,
        ))
        .prop_map(|o| o.map(|(a, b, r, m, t)| (a.min(b), a.max(b), r, m, t))),
        prop::option::of((
            any::<bool>(),
            1024u64..1 << 40,
            (1u32..=31_536_000).prop_map(f64::from),
            (1u32..=31_536_000).prop_map(f64::from),
            (1u32..=100).prop_map(|p| f64::from(p) / 100.0),
        )),
    )
        .prop_map(
            |(upstreams, budget, store, query, operations, cache)| Model {
                upstreams,
                budget,
                store,
                query,
                operations,
                cache,
            },
        )
}

/// The file that says what `model` says.
fn write(model: &Model) -> String {
    let mut out = String::new();
    for (name, up) in &model.upstreams {
        out.push_str(&format!("[upstreams.{name}]\n"));
        match &up.transport {
            Ok((command, args)) => {
                out.push_str(&format!("command = {}\n", quoted(command)));
                let args: Vec<String> = args.iter().map(|a| quoted(a)).collect();
                out.push_str(&format!("args = [{}]\n", args.join(", ")));
            }
            Err((url, headers)) => {
                out.push_str(&format!("url = {}\n", quoted(&literal(url))));
                let headers: Vec<String> = headers
                    .iter()
                    .map(|(k, v)| format!("{} = {}", quoted(k), quoted(&literal(v))))
                    .collect();
                out.push_str(&format!("headers = {{ {} }}\n", headers.join(", ")));
            }
        }
        if let Some(p) = up.protocol {
            out.push_str(&format!("protocol = \"{p}\"\n"));
        }
        for (tool, (max_tokens, timeout_s, mode, ttl_s)) in &up.tools {
            out.push_str(&format!("[upstreams.{name}.tools.{}]\n", quoted(tool)));
            if let Some(t) = max_tokens {
                out.push_str(&format!("max_tokens = {t}\n"));
            }
            if let Some(t) = timeout_s {
                out.push_str(&format!("timeout_s = {}\n", float(*t)));
            }
            if let Some(m) = mode {
                out.push_str(&format!("mode = \"{m}\"\n"));
            }
            if let Some(t) = ttl_s {
                out.push_str(&format!("cache = {{ ttl_s = {} }}\n", float(*t)));
            }
        }
    }
    if let Some((tokens, chars, lines, factor)) = model.budget {
        out.push_str(&format!(
            "[budget]\nmax_tokens = {tokens}\nmax_chars = {chars}\ntoken_factor = {factor:?}\n"
        ));
        if let Some(l) = lines {
            out.push_str(&format!("max_lines = {l}\n"));
        }
    }
    if let Some((bytes, ttl)) = model.store {
        out.push_str(&format!("[store]\nmax_bytes = {bytes}\nttl_s = {ttl}\n"));
    }
    if let Some((timeout, memory, outputs, output_mb, workers, cache_mb)) = model.query {
        out.push_str(&format!(
            "[query]\ntimeout_s = {}\nmax_memory_mb = {memory}\nmax_outputs = {outputs}\nmax_output_mb = {output_mb}\nworkers = {workers}\ncache_mb = {cache_mb}\n",
            float(timeout)
        ));
    }
    if let Some((default, max, retention, running, total)) = model.operations {
        out.push_str(&format!(
            "[operations]\ndefault_timeout_s = {}\nmax_timeout_s = {}\nretention_h = {}\nmax_running = {running}\nmax_running_total = {total}\n",
            float(default),
            float(max),
            float(retention)
        ));
    }
    if let Some((annotated, bytes, ttl, idle, refresh)) = model.cache {
        out.push_str(&format!(
            "[cache]\nannotated = {annotated}\nmax_bytes = {bytes}\nttl_s = {}\nidle_s = {}\nrefresh_at = {}\n",
            float(ttl),
            float(idle),
            float(refresh)
        ));
    }
    out
}

/// `config` says what `model` says.
fn check_model(model: &Model, config: &Config) -> Result<(), TestCaseError> {
    let names: Vec<&String> = model.upstreams.keys().collect();
    let found: Vec<&String> = config.upstreams.iter().map(|u| &u.name).collect();
    prop_assert_eq!(found, names);
    for (spec, (_, up)) in config.upstreams.iter().zip(&model.upstreams) {
        match (&spec.transport, &up.transport) {
            (UpstreamTransport::Stdio { command, args, .. }, Ok((c, a))) => {
                prop_assert_eq!(command, c);
                prop_assert_eq!(args, a);
            }
            (UpstreamTransport::Http { url, headers }, Err((u, h))) => {
                prop_assert_eq!(url, u);
                prop_assert_eq!(headers, h);
            }
            (found, _) => prop_assert!(false, "transport {:?} for {:?}", found, up),
        }
        let protocol = match up.protocol {
            None | Some("auto") => ProtocolChoice::Auto,
            Some("2026-07-28" | "stateless") => ProtocolChoice::Stateless,
            Some(_) => ProtocolChoice::Legacy,
        };
        prop_assert_eq!(spec.protocol, protocol);
        prop_assert_eq!(
            spec.tools.keys().collect::<Vec<_>>(),
            up.tools.keys().collect::<Vec<_>>()
        );
        for (settings, (max_tokens, timeout_s, mode, ttl_s)) in
            spec.tools.values().zip(up.tools.values())
        {
            prop_assert_eq!(settings.max_tokens, *max_tokens);
            prop_assert_eq!(settings.timeout_s, *timeout_s);
            let mode = mode.map(|m| match m {
                "buffer" => Mode::Buffer,
                "truncate" => Mode::Truncate,
                _ => Mode::Passthrough,
            });
            prop_assert_eq!(settings.mode, mode);
            prop_assert_eq!(
                settings.cache_policy.map(|p| p.ttl),
                ttl_s.map(Duration::from_secs_f64)
            );
        }
    }
    if let Some((tokens, chars, lines, factor)) = model.budget {
        let b = config.budget.for_client(None);
        prop_assert_eq!(
            (b.max_tokens, b.max_chars, b.max_lines, b.token_factor),
            (tokens, chars, lines, factor)
        );
    }
    if let Some((bytes, ttl)) = model.store {
        prop_assert_eq!(
            (config.store.limits.max_bytes, config.store.limits.ttl),
            (bytes, Duration::from_secs(ttl))
        );
    }
    if let Some((timeout, memory, outputs, output_mb, workers, cache_mb)) = model.query {
        let q = &config.query;
        prop_assert_eq!(q.timeout, Duration::from_secs_f64(timeout));
        prop_assert_eq!(q.max_memory_bytes, memory << 20);
        prop_assert_eq!(
            (q.max_outputs, q.max_output_bytes, q.workers),
            (outputs, output_mb << 20, workers)
        );
        prop_assert_eq!(q.cache_bytes, cache_mb << 20);
    }
    if let Some((default, max, retention, running, total)) = model.operations {
        let o = &config.operations;
        prop_assert_eq!(o.default_timeout, Duration::from_secs_f64(default));
        prop_assert_eq!(o.max_timeout, Duration::from_secs_f64(max));
        prop_assert_eq!(o.retention, Duration::from_secs_f64(retention * 3600.0));
        prop_assert_eq!((o.max_running, o.max_running_total), (running, total));
    }
    if let Some((annotated, bytes, ttl, idle, refresh)) = model.cache {
        let c = &config.cache;
        prop_assert_eq!((c.annotated, c.max_bytes), (annotated, bytes));
        prop_assert_eq!(c.defaults.ttl, Duration::from_secs_f64(ttl));
        prop_assert_eq!(c.defaults.idle, Duration::from_secs_f64(idle));
        prop_assert_eq!(c.defaults.refresh_at, refresh);
    }
    Ok(())
}

#[test]
fn seed_files_are_read_or_refused_at_a_place() {
    let mut read = 0;
    for (name, bytes) in corpus::seeds("config") {
        let text = String::from_utf8_lossy(&bytes);
        let config = check_any(&text).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        // A seed named `ok-…` is a valid file; every other one is refused.
        assert_eq!(config.is_some(), name.starts_with("ok-"), "seed {name}");
        read += usize::from(config.is_some());
    }
    assert!(read >= 2, "the corpus has valid files");
}

proptest! {
    #![proptest_config(config(regressions!("config"), 256))]

    #[test]
    fn any_text_is_a_config_or_an_error_at_a_place(text in toml_ish()) {
        check_any(&text)?;
    }

    #[test]
    fn any_value_written_literally_expands_to_itself(value in "[$a{}b:-]{0,24}|\\PC{0,40}") {
        let expanded = sluice_core::vars::expand(&literal(&value), &|_| None);
        prop_assert_eq!(expanded.as_deref(), Ok(value.as_str()));
    }

    #[test]
    fn generated_configs_read_back_to_what_was_written(model in model()) {
        let text = write(&model);
        let config = Config::parse(&text, Path::new("sluice.toml"))
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        check_usable(&config)?;
        check_model(&model, &config)?;
    }
}
