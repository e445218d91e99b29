//! What the end-to-end benches share.
#![allow(dead_code)] // each bench uses its part

use rmcp::model::CallToolRequestParams;

/// The value after `name` on the command line, or `default`.
pub fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

/// A tool call with JSON arguments.
pub fn params(tool: &str, args: serde_json::Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args.as_object().cloned().unwrap())
}

/// A client of `sluice --config FILE` over stdio, with `toml` written to
/// `dir/name.toml`; and sluice's process id.
pub async fn sluice_with_config(
    dir: &std::path::Path,
    name: &str,
    toml: &str,
) -> (
    rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    u32,
) {
    use rmcp::ServiceExt;
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    cmd.args(["--log-level", "warn", "--config"]).arg(&config);
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
}
