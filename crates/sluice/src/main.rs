//! The `sluice` binary: parse, validate, run. Logs go to stderr (stdout
//! carries MCP messages when serving over stdio).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::{Args, Command, LogFormat};
use sluice::gateway::Gateway;
use tokio_util::sync::CancellationToken;

/// mimalloc (see Cargo.toml for why and what it measured).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A stdio upstream's launcher becomes the upstream's command at once:
    // no logs, no runtime, not even clap, whose options read the
    // environment, the upstream's by now (see `upstream/tether.rs`).
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some((parent, command)) = sluice::upstream::tether::launcher(&raw) {
        return sluice::upstream::tether::exec(parent, command);
    }
    let args = Args::parse_from(raw);
    let log_format = args.log_format;
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level)
        .or_else(|_| tracing_subscriber::EnvFilter::try_new("info"))
        .expect("a valid default filter");
    let quiet_demo = matches!(args.command, Some(sluice::cli::Sub::Demo))
        && std::env::var_os("SLUICE_LOG").is_none();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(if quiet_demo {
            tracing_subscriber::EnvFilter::new("warn,rmcp=error")
        } else {
            filter
        })
        .with_writer(std::io::stderr)
        // When whoever read sluice's stderr has gone, a log line cannot be
        // written: it is dropped. tracing's default says so with
        // `eprintln!`, which panics on the same closed stderr, and the
        // task that logged died with it (the one that turns SIGTERM into
        // shutdown among them: sluice then ignored SIGTERM).
        .log_internal_errors(false)
        .with_ansi(false);
    match args.log_format {
        LogFormat::Text => logs.init(),
        // One object per line; an event's fields stay fields (`upstream`,
        // `status`…), and the spans it is in are listed.
        LogFormat::Json => logs.json().init(),
    }
    sluice::install_tls_provider();
    // Serving one client (stdio, `call`, `demo`) is a relay between a few
    // pipes: one thread does it with fewer wake-ups (perf stat on 30,000
    // echo calls: 19 % less CPU, 43 % fewer context switches than the
    // multi-threaded runtime). HTTP serves many clients at once.
    let runtime = if args.listen.is_some() {
        tokio::runtime::Runtime::new()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            say(
                log_format,
                "ERROR",
                &format!("cannot start the async runtime: {e}"),
            );
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(code) => code,
        Err(e) => {
            say(log_format, "ERROR", &format!("{e:#}"));
            ExitCode::from(2)
        }
    }
}

/// Says `line` to whoever started sluice (where it serves, why it stopped),
/// whatever the log level: `sluice: {line}` in text; with `--log-format
/// json`, an object shaped as the log lines are, so that every line on
/// stderr is one.
///
/// A stderr no one reads any more is not an error: the line is dropped
/// (`eprintln!` would panic).
fn say(format: LogFormat, level: &str, line: &str) {
    use std::io::Write as _;
    let said = match format {
        LogFormat::Text => format!("sluice: {line}"),
        LogFormat::Json => serde_json::json!({
            "timestamp": sluice_core::format::timestamp(std::time::SystemTime::now()),
            "level": level,
            "fields": {"message": line},
            "target": "sluice",
        })
        .to_string(),
    };
    let _ = writeln!(std::io::stderr(), "{said}");
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let log_format = args.log_format;
    let config_file = args.config.clone();
    let command = args.validate()?;
    match command {
        Command::Demo => sluice::demo::run().await.map(|()| ExitCode::SUCCESS),
        Command::JqWorker => Ok(sluice::jq::worker::main()),
        Command::SampleServer(listen) => sluice::sample_server::run(listen)
            .await
            .map(|()| ExitCode::SUCCESS),
        Command::Call {
            config,
            tool,
            arguments,
        } => Ok(if sluice::call::run(config, tool, arguments).await? {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }),
        Command::Stdio(config, admin) => {
            warn_unused_over_stdio(&config, admin.is_some());
            if config.store.backend != sluice_core::store::StoreBackend::Memory {
                tracing::warn!(
                    "[store] backend = {:?} over stdio: this connection's results belong to it, and a restarted sluice serves a new one that cannot read them (README, Durable state)",
                    config.store.backend.name()
                );
            }
            let gateway = Gateway::open(&config)?;
            let shutdown = shutdown_on_signal();
            let auth = admin.as_ref().and_then(|a| a.auth.clone());
            reload_auth_on_hangup(auth, config_file, &shutdown);
            let admin = start_admin(&gateway, admin, &shutdown, log_format).await?;
            let result = sluice::downstream::stdio::serve(gateway.clone(), shutdown.clone()).await;
            // The admin server ends with the client's connection.
            shutdown.cancel();
            stop_admin(admin).await;
            gateway.shutdown().await;
            result.map(|()| ExitCode::SUCCESS)
        }
        Command::Http(config, addr, access, admin) => {
            if access.auth.is_none() && !addr.ip().to_canonical().is_loopback() {
                tracing::warn!(
                    "--no-auth: serving {addr} without authentication: anyone who reaches it can call every upstream tool"
                );
            }
            let gateway = Gateway::open(&config)?;
            let shutdown = shutdown_on_signal();
            reload_auth_on_hangup(access.auth.clone(), config_file, &shutdown);
            let admin = start_admin(&gateway, admin, &shutdown, log_format).await?;
            let scheme = sluice::downstream::tls::scheme(&access.tls);
            let result = sluice::downstream::http::serve(
                gateway.clone(),
                addr,
                access,
                config.http,
                shutdown.clone(),
                |bound| {
                    say(
                        log_format,
                        "INFO",
                        &format!("serving MCP at {scheme}://{bound}/mcp"),
                    )
                },
            )
            .await;
            shutdown.cancel();
            stop_admin(admin).await;
            gateway.shutdown().await;
            result.map(|()| ExitCode::SUCCESS)
        }
    }
}

/// Says which of the config file's settings serving one client over stdio
/// leaves unused (they belong to `--listen`, and `[auth]` and TLS also to
/// `--admin`): set and silently ignored, they would look in force.
fn warn_unused_over_stdio(config: &sluice_core::config::Config, admin: bool) {
    if config.http != sluice_core::http::HttpLimits::default() {
        tracing::warn!(
            "[http]'s limits apply to --listen only: unused over stdio (one client, on this process's stdin and stdout)"
        );
    }
    if !admin && config.tls.is_some() {
        tracing::warn!(
            "[http] tls_cert and tls_key apply to --listen and --admin only: nothing listens here, so no TLS is served"
        );
    }
    if !admin && config.auth.is_some() {
        tracing::warn!(
            "[auth] applies to --listen and --admin only: a client over stdio is not asked for a token (it is the user who started sluice)"
        );
    }
}

/// Reads `[auth]` again from the config file at each SIGHUP, while sluice
/// serves, if it has both.
fn reload_auth_on_hangup(
    auth: Option<std::sync::Arc<sluice::downstream::auth::Authenticator>>,
    file: Option<std::path::PathBuf>,
    shutdown: &CancellationToken,
) {
    #[cfg(unix)]
    if let (Some(auth), Some(file)) = (auth, file) {
        tokio::spawn(sluice::downstream::auth::reload_on_hangup(
            auth,
            file,
            shutdown.child_token(),
        ));
    }
    #[cfg(not(unix))]
    let _ = (auth, file, shutdown);
}

/// Starts the admin server if asked (`--admin`, `[admin] listen`), and says
/// where it serves, as where MCP is served is said.
async fn start_admin(
    gateway: &std::sync::Arc<Gateway>,
    admin: Option<sluice::admin::AdminSettings>,
    shutdown: &CancellationToken,
    log_format: LogFormat,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    let Some(admin) = admin else {
        return Ok(None);
    };
    let scheme = sluice::downstream::tls::scheme(&admin.tls);
    let (bound, serving) =
        sluice::admin::start(gateway.clone(), admin, shutdown.child_token()).await?;
    tracing::info!(
        "serving the admin page at {scheme}://{bound}/ and metrics at {scheme}://{bound}/metrics"
    );
    say(
        log_format,
        "INFO",
        &format!(
            "serving the admin page at {scheme}://{bound}/ and metrics at {scheme}://{bound}/metrics"
        ),
    );
    Ok(Some(serving))
}

/// Waits for the admin server to end (its shutdown was asked).
async fn stop_admin(admin: Option<tokio::task::JoinHandle<()>>) {
    if let Some(serving) = admin {
        let _ = serving.await;
    }
}

/// A token cancelled on SIGTERM or SIGINT.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("cannot watch SIGTERM: {e}");
                        let _ = ctrl_c.await;
                        cancel.cancel();
                        return;
                    }
                };
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
        cancel.cancel();
    });
    token
}
