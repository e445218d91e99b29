//! A bad command line or config file: a message that says where and what
//! is expected, and exit status 2.

use std::process::Command;

use crate::support::*;

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(sluice()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_key_names_the_file_line_and_expected_keys() {
    let dir = TempDir::new("bad-key");
    let file = dir.file(
        "sluice.toml",
        "[upstreams.fs]\ncommand = \"x\"\nagrs = []\n",
    );
    let (code, err) = run(&["--config", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("sluice.toml:3:1: unknown field `agrs`, expected one of"),
        "{err}"
    );
}

#[test]
fn missing_file_and_no_upstream_are_explained() {
    let (code, err) = run(&["--config", "/nonexistent/sluice.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read config file /nonexistent/sluice.toml"),
        "{err}"
    );
    let (code, err) = run(&[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no upstream: give a server command after `--`"),
        "{err}"
    );
}

/// TLS files that cannot be served with stop `--listen` before it listens,
/// naming the file and what is wrong with it.
#[test]
fn tls_files_that_cannot_serve_stop_the_listener_before_it_listens() {
    let dir = TempDir::new("bad-tls");
    let fixtures = repo().join("tests/fixtures/tls");
    for (cert, key, expected) in [
        (
            dir.0.join("missing.pem"),
            fixtures.join("localhost.key"),
            "cannot read [http] tls_cert ",
        ),
        (
            fixtures.join("localhost.pem"),
            fixtures.join("ca.pem"),
            "[http] tls_key ",
        ),
    ] {
        let file = dir.file(
            "sluice.toml",
            &format!(
                "[upstreams.a]\ncommand = \"x\"\n[http]\ntls_cert = {cert:?}\ntls_key = {key:?}\n"
            ),
        );
        let (code, err) = run(&[
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(expected) && !err.contains("serving"), "{err}");
    }
}

/// What serving one client over stdio leaves unused of the config file is
/// said, not silently ignored: `[http]`'s limits, its TLS files and
/// `[auth]`, which belong to `--listen` (and the last two to `--admin`).
#[test]
fn settings_unused_over_stdio_are_said() {
    let dir = TempDir::new("unused-over-stdio");
    let fixtures = repo().join("tests/fixtures/tls");
    let file = dir.file(
        "sluice.toml",
        &format!(
            "{}[http]\nmax_body_mb = 2\ntls_cert = {:?}\ntls_key = {:?}\n{}",
            toml_upstream("sample", &sample()),
            fixtures.join("localhost.pem"),
            fixtures.join("localhost.key"),
            auth_tokens(&[("alice", "alice-token")])
        ),
    );
    // stdin is empty: sluice serves no one and ends.
    let (code, err) = run(&["--config", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for said in [
        "[http]'s limits apply to --listen only",
        "[http] tls_cert and tls_key apply to --listen and --admin only",
        "[auth] applies to --listen and --admin only",
    ] {
        assert!(err.contains(said), "{said}: {err}");
    }
    let plain = dir.file("plain.toml", &toml_upstream("sample", &sample()));
    let (code, err) = run(&["--config", plain.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("apply to --listen"), "{err}");
}

#[test]
fn config_and_command_together_are_refused() {
    let dir = TempDir::new("both");
    let file = dir.file("sluice.toml", "[upstreams.a]\ncommand = \"x\"\n");
    let (code, err) = run(&["--config", file.to_str().unwrap(), "--", "cat"]);
    assert_eq!(code, 2);
    assert!(err.contains("not both"), "{err}");
    let (code, err) = run(&["--allow-host", "example.org", "--", "cat"]);
    assert_eq!(code, 2);
    assert!(err.contains("only apply with --listen"), "{err}");
}

#[test]
fn call_with_bad_json_arguments_is_explained() {
    let (code, err) = run(&["call", "--tool", "echo", "--args", "{nope", "--", "cat"]);
    assert_eq!(code, 2);
    assert!(err.contains("--args is not valid JSON"), "{err}");
    let (code, err) = run(&["call", "--tool", "echo", "--args", "[1]", "--", "cat"]);
    assert_eq!(code, 2);
    assert!(err.contains("must be a JSON object"), "{err}");
}

/// `sluice --log-level warn call ARGS…`, which must succeed: what it
/// printed, as JSON, and its stderr.
fn call_ok(args: &[&str]) -> (serde_json::Value, String) {
    let out = Command::new(sluice())
        .args(["--log-level", "warn", "call"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = serde_json::from_slice(&out.stdout).unwrap();
    (result, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn call_prints_the_result_as_json() {
    let sample = sample();
    let mut args = vec!["--tool", "echo", "--args", r#"{"text":"hi"}"#, "--"];
    args.extend(sample.iter().map(String::as_str));
    let (value, _) = call_ok(&args);
    assert_eq!(value["content"][0]["text"], "hi");
    let out = Command::new(sluice())
        .args(["--log-level", "warn", "call", "--tool", "nosuch", "--"])
        .args(&sample)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no tool `nosuch`; the upstream has: echo, inventory, slow_task")
    );
}

/// `sluice call` whose result is stored says, on stderr, that the memory
/// store ends with the command; with results on disk it says nothing and
/// a later `sluice call` reads the handle's pages.
#[test]
fn a_call_whose_result_is_stored_says_where_it_can_be_read() {
    let dir = TempDir::new("call-stored");
    let call = |config: &std::path::Path, tool: &str, args: &str| {
        call_ok(&[
            "--config",
            config.to_str().unwrap(),
            "--tool",
            tool,
            "--args",
            args,
        ])
    };
    let upstream = toml_upstream("shop", &sample());
    let in_memory = dir.file("memory.toml", &upstream);
    let (result, stderr) = call(&in_memory, "inventory", r#"{"count":20000}"#);
    let handle = result["_meta"]["sluice/stored"]["handle"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("sluice stored it (as {handle})"))
            && stderr.contains("the memory store ends with this command")
            && stderr.contains("`[store] backend = \"disk\"`"),
        "{stderr}"
    );
    let on_disk = dir.file(
        "disk.toml",
        &format!(
            "{upstream}[store]\nbackend = \"disk\"\npath = {:?}\n",
            dir.0.join("store")
        ),
    );
    let (result, stderr) = call(&on_disk, "inventory", r#"{"count":20000}"#);
    assert!(!stderr.contains("memory store"), "{stderr}");
    let handle = result["_meta"]["sluice/stored"]["handle"].as_str().unwrap();
    let (page, _) = call(
        &on_disk,
        "sluice_read",
        &format!(r#"{{"handle":"{handle}","page":2}}"#),
    );
    assert_eq!(page["_meta"]["sluice/page"]["page"], 2, "{page}");
}

#[test]
fn demo_runs_with_nothing_installed() {
    let out = Command::new(sluice()).arg("demo").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("hello through sluice"), "{stdout}");
    assert!(stdout.contains("progress 4/4"), "{stdout}");
    assert!(stdout.contains("unknown tool `nosuch`"), "{stdout}");
}

#[test]
fn settings_for_a_tool_the_upstream_lacks_are_reported() {
    let dir = TempDir::new("unknown-tool-settings");
    let sample = sample();
    let file = dir.file(
        "sluice.toml",
        &(toml_upstream("shop", &sample) + "[upstreams.shop.tools.ech0]\n"),
    );
    let out = Command::new(sluice())
        .args([
            "--log-level",
            "warn",
            "call",
            "--tool",
            "echo",
            "--args",
            r#"{"text":"hi"}"#,
        ])
        .args(["--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("settings for tool `ech0` of upstream `shop`, which has no such tool (it has: echo, inventory, slow_task)"),
        "{stderr}"
    );
}
