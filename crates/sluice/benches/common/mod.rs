//! What the end-to-end benches share (a module, not a bench target: cargo
//! does not discover `benches/<dir>/mod.rs`).

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Starts a process that prints `… serving http://ADDR/mcp` on stderr; returns it and the URL.
pub async fn http_server(program: &str, args: &[&str]) -> (Child, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(i) = line.find("http://") {
            let url = line[i..].trim().to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, url);
        }
    }
    panic!("{program} did not start serving");
}
