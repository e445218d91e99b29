//! `[store] backend = "disk"`: stored results, and the cursors into them,
//! outlive the sluice process that stored them, a `kill -9` included; a
//! store file that is damaged stops sluice at start with a clear error.

use serde_json::json;

use crate::support::*;

/// A config serving the sample server, its results kept on disk in `dir`.
fn disk_config(temp: &TempDir, store: &std::path::Path) -> std::path::PathBuf {
    temp.file(
        "sluice.toml",
        &format!(
            "{}[store]\nbackend = \"disk\"\npath = {:?}\n",
            toml_upstream("sample", &sample()),
            store.display().to_string()
        ),
    )
}

async fn start(config: &std::path::Path) -> HttpSluice {
    HttpSluice::start(&["--config", config.to_str().unwrap()], &[]).await
}

fn from_loopback() -> std::net::IpAddr {
    "127.0.0.1".parse().unwrap()
}

#[tokio::test]
async fn a_disk_store_keeps_handles_and_cursors_across_a_kill() {
    let temp = TempDir::new("durable-kill");
    let store = temp.0.join("store");
    let config = disk_config(&temp, &store);
    let mut sluice = start(&config).await;

    // A stateless client's result (its handle is its capability) and a
    // session's (bound to that session).
    let client = stateless_http_client(&sluice.url, from_loopback()).await;
    let handle = stored_handle(&call(&client, "inventory", json!({"count": 4000})).await);
    let first = call(&client, "sluice_read", json!({"handle": handle})).await;
    assert_ne!(first.is_error, Some(true), "{}", first_text(&first));
    let cursor = meta(&first, "sluice/page").expect("page meta")["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let second = first_text(&call(&client, "sluice_read", json!({"cursor": cursor})).await);
    let (session, _) = connect_http(&sluice.url).await;
    let sessions_handle = stored_handle(&call(&session, "inventory", json!({"count": 4000})).await);
    let info = call(&session, "sluice_info", json!({})).await;
    assert_eq!(
        meta(&info, "sluice/store").expect("the store's state"),
        json!({"backend": "disk", "healthy": true, "problem": null})
    );
    assert!(
        first_text(&info).contains("disk backend"),
        "{}",
        first_text(&info)
    );

    // The key that seals cursors was made beside the store, for its owner only.
    let secret = store.join("secret");
    assert_eq!(std::fs::read(&secret).unwrap().len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    // SIGKILL: nothing is flushed on the way out.
    sluice.child.start_kill().unwrap();
    sluice.child.wait().await.unwrap();
    drop((client, session));

    let sluice = start(&config).await;
    let client = stateless_http_client(&sluice.url, from_loopback()).await;
    // The cursor issued before the kill reads the same page.
    let again = call(&client, "sluice_read", json!({"cursor": cursor})).await;
    assert_ne!(again.is_error, Some(true), "{}", first_text(&again));
    assert_eq!(first_text(&again), second);
    // So does the handle, page by page.
    let page = call(&client, "sluice_read", json!({"handle": handle, "page": 2})).await;
    assert_eq!(first_text(&page), second);
    let searched = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "SKU-03999"}),
    )
    .await;
    assert_ne!(searched.is_error, Some(true), "{}", first_text(&searched));
    assert!(
        first_text(&searched).contains("SKU-03999"),
        "{}",
        first_text(&searched)
    );
    // A new session is not the old one: the old session's result is not its.
    let (session, _) = connect_http(&sluice.url).await;
    let read = call(&session, "sluice_read", json!({"handle": sessions_handle})).await;
    assert_eq!(read.is_error, Some(true));
    assert!(
        first_text(&read).contains("unknown handle"),
        "{}",
        first_text(&read)
    );
    client.cancel().await.unwrap();
    session.cancel().await.unwrap();
}

#[tokio::test]
async fn a_damaged_store_or_one_in_use_stops_sluice_at_start_with_why() {
    let temp = TempDir::new("durable-damaged");
    let store = temp.0.join("store");
    let config = disk_config(&temp, &store);
    // In use by another instance.
    let first = start(&config).await;
    let stderr = refused_at_start(&config).await;
    assert!(
        stderr.contains("in use by another sluice process"),
        "{stderr}"
    );
    drop(first);
    // A secret file too short to seal with.
    let short = temp.file("short-secret", "tiny\n");
    let with_short = temp.file(
        "short.toml",
        &format!(
            "{}[store]\nbackend = \"disk\"\npath = {:?}\nsecret_file = {:?}\n",
            toml_upstream("sample", &sample()),
            temp.0.join("other-store").display().to_string(),
            short.display().to_string()
        ),
    );
    let stderr = refused_at_start(&with_short).await;
    assert!(
        stderr.contains("short-secret") && stderr.contains("at least 32"),
        "{stderr}"
    );
    // Damaged: what is in the file is not a store.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    std::fs::write(store.join("store.redb"), b"not a database".repeat(1000)).unwrap();
    let stderr = refused_at_start(&config).await;
    assert!(
        stderr.contains("damaged") && stderr.contains("store.redb") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// What sluice said when it refused to start with `config` (exit code 2).
async fn refused_at_start(config: &std::path::Path) -> String {
    let out = tokio::process::Command::new(sluice())
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

#[tokio::test]
async fn a_compressed_memory_store_pages_queries_and_searches_as_the_plain_one() {
    // `[store] compress = true` with the memory backend: results in zstd
    // frames, read back whole on first use (a small `max_bytes` keeps
    // only the last one decoded: the first is read from its frames); every
    // answer the same as from a plain memory store.
    let temp = TempDir::new("memory-zstd");
    let answers = |store: &str| {
        let config = temp.file(
            &format!("sluice-{}.toml", store.len()),
            &format!("{}[store]\n{store}\n", toml_upstream("sample", &sample())),
        );
        async move {
            let (client, _) = connect(&via_config(&config)).await;
            let handle = stored_handle(&call(&client, "inventory", json!({"count": 4000})).await);
            stored_handle(&call(&client, "inventory", json!({"count": 3000})).await);
            let mut seen = Vec::new();
            for args in [
                json!({"handle": handle, "page": 3}),
                json!({"handle": handle, "path": "/items/3999"}),
            ] {
                let read = call(&client, "sluice_read", args).await;
                assert_ne!(read.is_error, Some(true), "{}", first_text(&read));
                seen.push(first_text(&read));
            }
            let query = json!({"handle": handle, "filter": "[.items[] | select(.id == \"SKU-02000\")] | length"});
            seen.push(first_text(&call(&client, "sluice_query", query).await));
            let search = json!({"handle": handle, "pattern": "SKU-03999"});
            seen.push(first_text(&call(&client, "sluice_search", search).await));
            let info = call(&client, "sluice_info", json!({})).await;
            assert_eq!(
                meta(&info, "sluice/store").expect("the store's state")["backend"],
                "memory"
            );
            client.cancel().await.unwrap();
            seen
        }
    };
    let plain = answers("compress = false").await;
    let compressed = answers("compress = true\nmax_bytes = 1048576").await;
    assert!(plain[2].contains('1'), "{}", plain[2]);
    assert!(plain[3].contains("SKU-03999"), "{}", plain[3]);
    assert_eq!(compressed, plain);
}

#[tokio::test]
async fn a_disk_store_keeps_cache_entries_and_operations_across_a_kill() {
    let temp = TempDir::new("durable-cache-ops");
    let store = temp.0.join("store");
    let config = temp.file(
        "sluice.toml",
        &format!(
            "{}[upstreams.py.tools.lookup]\ncache = {{ ttl_s = 600 }}\n\n[store]\nbackend = \"disk\"\npath = {:?}\n",
            toml_upstream("py", &py_server()),
            store.display().to_string()
        ),
    );
    let record = temp.0.join("calls");
    let calls = || {
        std::fs::read_to_string(&record)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let lookup = json!({"record": record, "key": "k", "sleep_s": 0.1});
    let operation =
        |r: &rmcp::model::CallToolResult| meta(r, "sluice/operation").expect("an operation's meta");
    let mut sluice = start(&config).await;
    let client = stateless_http_client(&sluice.url, from_loopback()).await;
    let first = call(&client, "lookup", lookup.clone()).await;
    assert_eq!(calls(), 1);
    // One operation ends before the kill, one runs through it.
    let ended = call(&client, "sleep", json!({"seconds": 1, "_timeout_s": 0.3})).await;
    let ended = operation(&ended)["id"].as_str().unwrap().to_owned();
    let done = call(
        &client,
        "sluice_result",
        json!({"operation": ended, "wait_s": 20}),
    )
    .await;
    assert_eq!(operation(&done)["status"], "completed");
    let running = call(&client, "sleep", json!({"seconds": 60, "_timeout_s": 0.3})).await;
    let running = operation(&running)["id"].as_str().unwrap().to_owned();

    sluice.child.start_kill().unwrap();
    sluice.child.wait().await.unwrap();
    drop(client);
    let sluice = start(&config).await;
    let client = stateless_http_client(&sluice.url, from_loopback()).await;

    // The cached answer, without calling the upstream.
    let again = call(&client, "lookup", lookup).await;
    assert_eq!(first_text(&again), first_text(&first));
    assert_eq!(meta(&again, "sluice/cache").expect("a hit")["hit"], true);
    assert_eq!(calls(), 1);
    // The ended operation's result; the one the kill cut short, failed
    // with why.
    let after = call(&client, "sluice_result", json!({"operation": ended})).await;
    assert_eq!(operation(&after)["status"], "completed");
    assert_eq!(first_text(&after), first_text(&done));
    let cut = call(
        &client,
        "sluice_result",
        json!({"operation": running, "wait_s": 5}),
    )
    .await;
    assert_eq!(operation(&cut)["status"], "failed", "{}", first_text(&cut));
    assert!(
        first_text(&cut).contains("sluice stopped while it ran"),
        "{}",
        first_text(&cut)
    );
    client.cancel().await.unwrap();
}
