//! The result cache, through real clients: the Python fixture's `lookup`
//! (read-only, idempotent; sleeps, and records every real call in a file)
//! and server-everything's annotated tools. Its timing (idle and lifetime
//! expiry, refresh-ahead, single flight, stored answers reused while their
//! handle lives) is checked at exact durations in `inproc.rs`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

/// A sluice config with the fixture as upstream `py`, `lookup` cached with
/// `cache`, and `extra` tables.
fn config(dir: &TempDir, cache: &str, extra: &str) -> std::path::PathBuf {
    dir.file(
        "sluice.toml",
        &format!(
            "{}[upstreams.py.tools.lookup]\ncache = {cache}\n\n{extra}",
            toml_upstream("py", &py_server())
        ),
    )
}

/// The real calls `lookup` recorded.
fn real_calls(record: &Path) -> usize {
    std::fs::read_to_string(record)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// `lookup`'s answer: {key, call}.
fn answer(result: &rmcp::model::CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{}", first_text(result));
    serde_json::from_str(&first_text(result))
        .unwrap_or_else(|e| panic!("{e}: {}", first_text(result)))
}

/// The `_meta["sluice/cache"]` of a result served from the cache.
fn hit(result: &rmcp::model::CallToolResult) -> Option<Value> {
    meta(result, "sluice/cache")
}

#[tokio::test]
async fn identical_calls_are_answered_from_the_cache_and_others_are_not() {
    let dir = TempDir::new("cache-keys");
    let record = dir.0.join("calls");
    let (client, _) = connect(&via_config(&config(
        &dir,
        "{ ttl_s = 60, idle_s = 60 }",
        "",
    )))
    .await;
    let lookup = |arguments: Value| {
        let client = &client;
        async move { call(client, "lookup", arguments).await }
    };
    let key = json!({"a": 1, "b": [1, 2.5], "c": {"x": "y", "z": null}});
    let first = lookup(json!({"record": record, "key": key, "sleep_s": 0.3})).await;
    assert_eq!(answer(&first)["call"], 1);
    assert!(
        hit(&first).is_none(),
        "a miss is the upstream's result, unmarked"
    );
    // The same call twice more, once with its keys in another order and
    // numbers in another form, and with sluice's own `_timeout_s`.
    for arguments in [
        json!({"record": record, "key": key, "sleep_s": 0.3}),
        json!({"sleep_s": 0.3, "key": {"c": {"z": null, "x": "y"}, "b": [1.0, 2.5], "a": 1.0}, "record": record, "_timeout_s": 30}),
    ] {
        let again = lookup(arguments).await;
        assert_eq!(answer(&again), answer(&first));
        let cached = hit(&again).expect("served from the cache");
        assert_eq!(cached["hit"], true);
        assert!(cached["age_s"].as_f64().unwrap() < 30.0, "{cached}");
    }
    assert_eq!(
        real_calls(&record),
        1,
        "three identical calls, one upstream call"
    );
    // Other arguments are other entries.
    let other = lookup(json!({"record": record, "key": {"a": 2}, "sleep_s": 0.3})).await;
    assert_eq!(answer(&other)["call"], 2);
    assert!(hit(&other).is_none());
    // `_fresh` skips the entry and replaces it.
    let fresh = lookup(json!({"record": record, "key": key, "sleep_s": 0.3, "_fresh": true})).await;
    assert_eq!(answer(&fresh)["call"], 3);
    assert!(hit(&fresh).is_none());
    let after = lookup(json!({"record": record, "key": key, "sleep_s": 0.3})).await;
    assert_eq!(answer(&after)["call"], 3, "the refreshed entry");
    assert!(hit(&after).is_some());
    let bad = lookup(json!({"record": record, "key": key, "_fresh": "yes"})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        first_text(&bad).contains("`_fresh` must be true"),
        "{}",
        first_text(&bad)
    );
    // Error results are never cached.
    for n in [4, 5] {
        let failed =
            lookup(json!({"record": record, "key": "x", "sleep_s": 0.1, "fail": true})).await;
        assert_eq!(failed.is_error, Some(true));
        assert!(
            first_text(&failed).contains(&format!("(call {n})")),
            "{}",
            first_text(&failed)
        );
        assert!(hit(&failed).is_none());
    }
    assert_eq!(real_calls(&record), 5);
    // Only cached tools take `_fresh`; every upstream tool takes `_timeout_s`.
    let tools = client.list_all_tools().await.unwrap();
    let properties = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        tool.input_schema["properties"].as_object().unwrap().clone()
    };
    assert!(properties("lookup").contains_key("_fresh"));
    assert!(!properties("echo").contains_key("_fresh"));
    assert!(properties("echo").contains_key("_timeout_s"));
    // The figures, in sluice_info.
    let info = call(&client, "sluice_info", json!({})).await;
    let figures = meta(&info, "sluice/cache_figures").unwrap();
    let lookup_figures = &figures["tools"]["lookup"];
    assert_eq!(
        (
            &lookup_figures["hits"],
            &lookup_figures["misses"],
            &lookup_figures["bypasses"],
            &lookup_figures["entries"]
        ),
        (&json!(3), &json!(4), &json!(1), &json!(2)),
        "{figures}"
    );
    assert_eq!(figures["total"]["hit_ratio"], json!(0.429));
    assert!(
        first_text(&info).contains("`lookup`: 2 entries"),
        "{}",
        first_text(&info)
    );
}

#[tokio::test]
async fn max_bytes_evicts_the_least_recently_used_entries() {
    let dir = TempDir::new("cache-evict");
    let record = dir.0.join("calls");
    // Each entry weighs about 6.2 kB: three fit in 20,000 bytes, not four.
    let (client, _) = connect(&via_config(&config(
        &dir,
        "{ ttl_s = 600 }",
        "[cache]\nmax_bytes = 20000\n",
    )))
    .await;
    let lookup = |key: u32| {
        let client = &client;
        let arguments = json!({"record": record, "key": key, "sleep_s": 0, "pad": 6000});
        async move { call(client, "lookup", arguments).await }
    };
    let info = || async {
        meta(
            &call(&client, "sluice_info", json!({})).await,
            "sluice/cache_figures",
        )
        .unwrap()
    };
    for key in 1..=3 {
        assert!(hit(&lookup(key).await).is_none());
    }
    // moka orders entries in batches, reads before writes: reading 1
    // counts once its insert has been applied (sluice_info applies them).
    assert_eq!(info().await["total"]["entries"], 3);
    assert!(
        hit(&lookup(1).await).is_some(),
        "1 is now the most recently used"
    );
    assert_eq!(info().await["total"]["entries"], 3);
    assert!(hit(&lookup(4).await).is_none());
    let figures = info().await;
    assert_eq!(figures["total"]["evictions"], 1, "{figures}");
    assert_eq!(figures["total"]["entries"], 3, "{figures}");
    assert!(
        figures["total"]["bytes"].as_u64().unwrap() <= 20000,
        "{figures}"
    );
    // 2 was the least recently used.
    assert!(hit(&lookup(1).await).is_some());
    assert!(hit(&lookup(3).await).is_some());
    assert!(hit(&lookup(2).await).is_none(), "2 was evicted");
    assert_eq!(real_calls(&record), 5);
}

#[tokio::test]
async fn annotated_tools_are_cached_only_when_asked() {
    // server-everything annotates `trigger-long-running-operation` (and
    // `echo`) read-only and idempotent.
    let dir = TempDir::new("cache-annotated");
    let arguments = json!({"duration": 1, "steps": 2});
    for annotated in [true, false] {
        let file = dir.file(
            &format!("sluice-{annotated}.toml"),
            &format!(
                "{}[cache]\nannotated = {annotated}\n",
                toml_upstream("everything", &everything())
            ),
        );
        let (client, _) = connect(&via_config(&file)).await;
        let tools = client.list_all_tools().await.unwrap();
        let slow = tools
            .iter()
            .find(|t| t.name == "trigger-long-running-operation")
            .unwrap();
        assert_eq!(
            slow.input_schema["properties"].get("_fresh").is_some(),
            annotated
        );
        let first = call(&client, "trigger-long-running-operation", arguments.clone()).await;
        let started = Instant::now();
        let second = call(&client, "trigger-long-running-operation", arguments.clone()).await;
        assert_eq!(first_text(&first), first_text(&second));
        assert_eq!(hit(&second).is_some(), annotated, "annotated = {annotated}");
        if annotated {
            assert!(
                started.elapsed() < Duration::from_millis(900),
                "no 1 s wait for a hit"
            );
        }
    }
}

#[tokio::test]
async fn entries_are_shared_across_sessions_unless_per_session() {
    let dir = TempDir::new("cache-sessions");
    let record = dir.0.join("calls");
    let file = dir.file(
        "sluice.toml",
        &format!(
            "{up}[upstreams.py.tools.lookup]\ncache = {{ ttl_s = 60 }}\n\n{other}[upstreams.mine.tools.lookup]\ncache = {{ ttl_s = 60, per_session = true }}\n",
            up = toml_upstream("py", &py_server()),
            other = toml_upstream("mine", &py_server()),
        ),
    );
    let sluice = HttpSluice::start(&["--config", file.to_str().unwrap()], &[]).await;
    let (a, _) = connect_http(&sluice.url).await;
    let (b, _) = connect_http(&sluice.url).await;
    let arguments = json!({"record": record, "key": "k", "sleep_s": 0});
    // Two upstreams: names are prefixed.
    assert!(hit(&call(&a, "py__lookup", arguments.clone()).await).is_none());
    assert!(
        hit(&call(&b, "py__lookup", arguments.clone()).await).is_some(),
        "shared"
    );
    assert!(hit(&call(&a, "mine__lookup", arguments.clone()).await).is_none());
    assert!(
        hit(&call(&b, "mine__lookup", arguments.clone()).await).is_none(),
        "per session"
    );
    assert!(hit(&call(&b, "mine__lookup", arguments.clone()).await).is_some());
    assert_eq!(real_calls(&record), 3);
    // The figures go to the log when sluice stops.
    drop((a, b));
    let pid = sluice.child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let log = sluice.stderr.lock().unwrap().join("\n");
        if log.contains("cache of `mine__lookup`") || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        logged.contains("cache: 3 entries") && logged.contains("2 hits, 3 misses (40 % hits)"),
        "{logged}"
    );
}

#[tokio::test]
async fn python_clients_of_both_eras_get_cached_answers_over_stdio_and_http() {
    let dir = TempDir::new("cache-py");
    let record = dir.0.join("calls");
    let file = config(&dir, "{ ttl_s = 600 }", "");
    let stdio = stdio_target(&via_config(&file));
    let sluice = HttpSluice::start(&["--config", file.to_str().unwrap()], &[]).await;
    let mut eras = std::collections::BTreeSet::new();
    let mut expected_calls = 0;
    for target in [["--stdio", stdio.as_str()], ["--url", sluice.url.as_str()]] {
        for mode in ["auto", "legacy"] {
            let how = format!("{mode} via {}", target[0]);
            let arguments = json!({"record": record, "key": how, "sleep_s": 0.2});
            let got = pages_py(mode, &target, "lookup", arguments, &["--repeat", "3"]).await;
            eras.insert(got["protocol_version"].as_str().unwrap().to_owned());
            expected_calls += 1;
            let calls = got["calls"].as_array().unwrap();
            assert_eq!(calls.len(), 3, "{how}");
            assert_eq!(calls[0]["cache"], Value::Null, "{how}: {got}");
            for later in &calls[1..] {
                assert_eq!(later["cache"]["hit"], true, "{how}: {got}");
                assert_eq!(later["text"], calls[0]["text"], "{how}");
            }
            let first: Value = serde_json::from_str(calls[0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(first["call"], expected_calls, "{how}");
        }
    }
    assert_eq!(real_calls(&record), 4, "one upstream call per client");
    assert_eq!(
        eras.into_iter().collect::<Vec<_>>(),
        ["2025-11-25", "2026-07-28"],
        "both eras"
    );
}
