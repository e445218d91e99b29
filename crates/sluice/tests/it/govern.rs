//! Governing large results against real servers: every answer fits the
//! budget, and the pages reassemble exactly what the upstream sent
//! (compared with the same call made directly).

use std::time::Duration;

use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};

use crate::support::*;

/// The direct result's one text block, parsed as JSON.
fn direct_json(result: &rmcp::model::CallToolResult) -> Value {
    serde_json::from_str(&first_text(result)).expect("the upstream sent JSON text")
}

#[tokio::test]
async fn twenty_thousand_records_are_stored_and_their_pages_reassemble() {
    let (direct, _) = connect(&py_server()).await;
    let want = direct_json(&call(&direct, "records", json!({"count": 20000})).await);
    let rows = want["rows"].as_array().unwrap().clone();

    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = call(&client, "records", json!({"count": 20000})).await;
    assert!(
        fits(&answer, 18_000, 45_000),
        "the stored answer fits the budget"
    );
    let stored = meta(&answer, "sluice/stored").unwrap();
    assert_eq!(
        (stored["kind"].as_str(), stored["path"].as_str()),
        (Some("json"), Some("/rows"))
    );
    assert!(stored["pages"].as_u64().unwrap() > 10, "{stored}");
    assert!(stored["tokens"].as_u64().unwrap() > 500_000, "{stored}");
    let text = first_text(&answer);
    assert!(text.starts_with("records returned "), "{text}");
    assert!(text.contains("the bulk: 20,000 items at /rows"), "{text}");
    assert!(
        text.contains(r#"kind: "alpha"|"beta"|"gamma""#),
        "the shape shows the enum: {text}"
    );
    assert!(
        text.contains("\"count\":20000"),
        "the preview keeps the other fields: {text}"
    );
    assert!(
        text.contains("or call records again with `count` or `limit` to narrow it."),
        "{text}"
    );
    let handle = stored_handle(&answer);
    let link = answer.content[1]
        .as_resource_link()
        .expect("a resource link");
    assert_eq!(link.uri, format!("sluice://result/{handle}"));

    let pages = read_pages(&client, &handle, None).await;
    assert_eq!(pages.len() as u64, stored["pages"].as_u64().unwrap());
    assert_eq!(
        reassemble(&pages, Some("")),
        Reassembled::Json(want.clone())
    );
    // The fields around the rows come once, with the first page of rows.
    let first = pages[0].content[1].as_text().unwrap().text.clone();
    assert!(
        first.ends_with("\nthe root also holds: {\"count\":20000} (its \"rows\" is paged here)"),
        "{first}"
    );
    let header = pages[1].content[1].as_text().unwrap().text.clone();
    assert!(!header.contains("also holds"), "{header}");
    // The rows alone, by their path.
    let only_rows = read_pages(&client, &handle, Some("/rows")).await;
    assert_eq!(
        reassemble(&only_rows, Some("/rows")),
        Reassembled::Json(Value::Array(rows.clone()))
    );
    let second = meta(&pages[1], "sluice/page").unwrap();
    assert!(
        header.starts_with(&format!(
            "items {}–{} of 20,000 at /rows · page 2 of {} · next: sluice_read {{\"cursor\":\"c1_",
            second["start"].as_u64().unwrap() + 1,
            second["end"],
            stored["pages"]
        )),
        "{header}"
    );

    // Page 2 by number, and as a resource, is the page the cursor led to.
    let by_number = call(&client, "sluice_read", json!({"handle": handle, "page": 2})).await;
    assert_eq!(first_text(&by_number), first_text(&pages[1]));
    let resource = client
        .read_resource(ReadResourceRequestParams::new(format!(
            "sluice://result/{handle}?page=2"
        )))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &resource.contents[0] else {
        panic!("text contents");
    };
    assert_eq!(text, &first_text(&pages[1]));
    let templates = client.list_all_resource_templates().await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "sluice://result/{handle}")
    );

    // The whole document, with the fields around the array.
    let whole: Value = serde_json::from_str(&restore(&client, &answer).await).unwrap();
    assert_eq!(whole, want);

    // sluice_info describes it; without a handle it lists it.
    let info = call(&client, "sluice_info", json!({"handle": handle})).await;
    let text = first_text(&info);
    assert!(
        text.starts_with(&format!("{handle} — records, json, "))
            && text.contains("Shape: {count: integer, rows: [")
            && text.contains("Arrays: /rows (20,000 items)"),
        "{text}"
    );
    let list = call(&client, "sluice_info", json!({})).await;
    assert!(first_text(&list).contains(&handle));
    client.cancel().await.unwrap();
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_python_client_pages_the_same_rows_over_stdio_and_http() {
    let (direct, _) = connect(&py_server()).await;
    let want = direct_json(&call(&direct, "records", json!({"count": 5000})).await);
    let stdio = stdio_target(&via_sluice(&py_server()));
    let got = pages_py(
        "auto",
        &["--stdio", &stdio],
        "records",
        json!({"count": 5000}),
        &[],
    )
    .await;
    assert_eq!(got["protocol_version"], "2026-07-28");
    assert_eq!(got["items"], want["rows"]);
    assert!(got["pages"].as_u64().unwrap() > 2);

    let sluice = HttpSluice::start(&[], &py_server()).await;
    for mode in ["auto", "legacy"] {
        let got = pages_py(
            mode,
            &["--url", &sluice.url],
            "records",
            json!({"count": 5000}),
            &[],
        )
        .await;
        assert_eq!(got["items"], want["rows"], "{mode} over HTTP");
    }
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn codex_gets_pages_of_9_kib_and_250_lines() {
    let (client, _) = connect_with(
        &via_sluice(&py_server()),
        Recorder {
            name: Some("codex-mcp-client".into()),
            ..Default::default()
        },
    )
    .await;
    let answer = call(&client, "big", json!({"bytes": 200_000})).await;
    assert!(fits(&answer, 4_000, 9 * 1024), "{}", first_text(&answer));
    let handle = stored_handle(&answer);
    let mut request = json!({"handle": handle});
    let mut text = String::new();
    loop {
        let page = call(&client, "sluice_read", request).await;
        assert!(fits(&page, 4_000, 9 * 1024), "a page over Codex's budget");
        let data = first_text(&page);
        assert!(data.lines().count() < 250, "{} lines", data.lines().count());
        text.push_str(&data);
        match meta(&page, "sluice/page").unwrap()["next_cursor"].as_str() {
            Some(c) => request = json!({"cursor": c}),
            None => break,
        }
    }
    let (direct, _) = connect(&py_server()).await;
    assert_eq!(
        text,
        first_text(&call(&direct, "big", json!({"bytes": 200_000})).await)
    );
}

/// A tree of `dirs` × 60 subdirectories × 40 files.
fn file_tree(dir: &TempDir, dirs: usize) -> std::path::PathBuf {
    let root = dir.0.join("tree");
    for d in 0..dirs {
        for s in 0..60 {
            let sub = root.join(format!("top-{d}")).join(format!("sub-{s:02}"));
            std::fs::create_dir_all(&sub).unwrap();
            for f in 0..40 {
                std::fs::write(sub.join(format!("file-{f:02}.txt")), "").unwrap();
            }
        }
    }
    root
}

#[tokio::test]
async fn server_filesystem_directory_tree_of_thousands_of_entries_reassembles() {
    let dir = TempDir::new("govern-tree");
    let root = file_tree(&dir, 4).display().to_string();
    let server = server_filesystem(&root);
    let (direct, _) = connect(&server).await;
    let want = direct_json(&call(&direct, "directory_tree", json!({"path": root})).await);
    let (client, _) = connect(&via_sluice(&server)).await;
    let tools = client.list_all_tools().await.unwrap();
    let tree_tool = tools.iter().find(|t| t.name == "directory_tree").unwrap();
    assert!(tree_tool.output_schema.is_none(), "outputSchema is dropped");

    let answer = call(&client, "directory_tree", json!({"path": root})).await;
    assert!(fits(&answer, 18_000, 45_000));
    let text = first_text(&answer);
    assert!(
        text.contains("excludePatterns"),
        "the tool's own narrowing argument: {text}"
    );
    assert!(text.contains(r#"type: "directory""#), "{text}");
    let handle = stored_handle(&answer);
    // The root array has 4 elements each larger than a page: sluice descends
    // into them, and every page is whole items, the slice of the array it
    // names.
    let pages = read_pages(&client, &handle, None).await;
    for page in &pages {
        let m = meta(page, "sluice/page").unwrap();
        assert_eq!(m["form"], "items", "{m}");
        let items: Value = serde_json::from_str(&first_text(page)).unwrap();
        let array = want
            .pointer(m["path"].as_str().unwrap())
            .unwrap()
            .as_array()
            .unwrap();
        let (a, b) = (m["start"].as_u64().unwrap(), m["end"].as_u64().unwrap());
        assert_eq!(items.as_array().unwrap()[..], array[a as usize..b as usize]);
    }
    assert!(
        pages
            .iter()
            .any(|p| meta(p, "sluice/page").unwrap()["path"] == "/2/children"),
        "deep arrays are paged by their own path"
    );
    assert_eq!(
        reassemble(&pages, Some("")),
        Reassembled::Json(want.clone())
    );
    // The cursor of a page deep in the tree, altered: a JSON-RPC error, and
    // the genuine one still leads on.
    let deep = pages
        .iter()
        .rposition(|p| meta(p, "sluice/page").unwrap()["path"] == "/2/children")
        .unwrap();
    let cursor = meta(&pages[deep - 1], "sluice/page").unwrap()["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut bytes = cursor.clone().into_bytes();
    let at = bytes.len() - 30;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    let err = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("sluice_read")
                .with_arguments(args(json!({"cursor": String::from_utf8(bytes).unwrap()}))),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("altered"), "{err}");
    let again = call(&client, "sluice_read", json!({"cursor": cursor})).await;
    assert_eq!(first_text(&again), first_text(&pages[deep]));
    // A deeper array by its path: whole items.
    let pages = read_pages(&client, &handle, Some("/2/children")).await;
    assert_eq!(
        reassemble(&pages, Some("/2/children")),
        Reassembled::Json(want[2]["children"].clone())
    );
    direct.cancel().await.unwrap();
    client.cancel().await.unwrap();
}

/// A repository whose first and last commits differ by a few MB.
fn long_history(dir: &TempDir) -> std::path::PathBuf {
    let repo = dir.0.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| git_in(&repo, args);
    git(&["init", "-q"]);
    for commit in 0..6 {
        for file in 0..4 {
            let text: String = (0..6000)
                .map(|l| {
                    format!("line {l} of file {file}, version {commit}: lorem ipsum dolor ✓\n")
                })
                .collect();
            std::fs::write(repo.join(format!("f{file}.txt")), text).unwrap();
        }
        git(&["add", "."]);
        git(&["commit", "-q", "-m", &format!("commit {commit}")]);
    }
    repo
}

#[tokio::test]
async fn mcp_server_git_diff_of_megabytes_reassembles_exactly() {
    let dir = TempDir::new("govern-git");
    let repo = long_history(&dir).display().to_string();
    let server = vec![peers().join("py/bin/mcp-server-git").display().to_string()];
    let arguments = json!({"repo_path": repo, "target": "HEAD~5"});
    let (direct, _) = connect(&server).await;
    let want = first_text(&call(&direct, "git_diff", arguments.clone()).await);
    assert!(want.len() > 2_000_000, "{} bytes", want.len());
    for era in ["2025-11-25", "2026-07-28"] {
        let toml = format!("{}protocol = \"{era}\"\n", toml_upstream("git", &server));
        let config = dir.file(&format!("{era}.toml"), &toml);
        let (client, _) = connect(&via_config(&config)).await;
        let answer = call(&client, "git_diff", arguments.clone()).await;
        assert!(fits(&answer, 18_000, 45_000));
        let stored = meta(&answer, "sluice/stored").unwrap();
        assert_eq!(stored["kind"], "text");
        assert!(stored.get("path").is_none_or(Value::is_null));
        assert!(
            first_text(&answer).contains("context_lines"),
            "{}",
            first_text(&answer)
        );
        assert_eq!(restore(&client, &answer).await, want, "upstream {era}");
        client.cancel().await.unwrap();
    }
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn a_single_string_of_400_kb_and_text_that_is_not_json_reassemble() {
    let (direct, _) = connect(&py_server()).await;
    let (client, _) = connect(&via_sluice(&py_server())).await;

    let want = direct_json(&call(&direct, "long_string", json!({"chars": 400_000})).await);
    let answer = call(&client, "long_string", json!({"chars": 400_000})).await;
    let stored = meta(&answer, "sluice/stored").unwrap();
    assert_eq!(
        (stored["kind"].as_str(), stored["path"].as_str()),
        (Some("json"), Some(""))
    );
    let pages = read_pages(&client, &stored_handle(&answer), None).await;
    assert!(pages.len() > 5);
    // One string larger than a page: the only value sent as text slices.
    assert!(pages.iter().all(|p| {
        let m = meta(p, "sluice/page").unwrap();
        m["form"] == "text" && m["path"] == "/text"
    }));
    assert!(
        pages[0].content[1]
            .as_text()
            .unwrap()
            .text
            .contains("\nthe root holds only \"text\", paged here")
    );
    assert_eq!(reassemble(&pages, Some("")), Reassembled::Json(want));

    let want = first_text(&call(&direct, "broken_json", json!({"bytes": 200_000})).await);
    let answer = call(&client, "broken_json", json!({"bytes": 200_000})).await;
    assert_eq!(meta(&answer, "sluice/stored").unwrap()["kind"], "text");
    assert_eq!(restore(&client, &answer).await, want);

    // An empty result is within any budget: untouched.
    let empty = call(&client, "empty", json!({})).await;
    assert!(empty.content.is_empty() && meta(&empty, "sluice/stored").is_none());
    client.cancel().await.unwrap();
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn a_large_resource_read_is_stored_and_paged_too() {
    let uri = "fixture://big/300000";
    let (direct, _) = connect(&py_server()).await;
    let want = direct
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text: want, .. } = &want.contents[0] else {
        panic!("text contents");
    };
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &answer.contents[0] else {
        panic!("text contents");
    };
    assert!(
        text.starts_with(&format!("resources/read {uri} returned ")),
        "{text}"
    );
    let stored = answer.meta.as_ref().unwrap().0["sluice/stored"].clone();
    assert_eq!(stored["kind"], "text");
    let pages = read_pages(&client, stored["handle"].as_str().unwrap(), None).await;
    assert_eq!(reassemble(&pages, None), Reassembled::Text(want.clone()));
}

#[tokio::test]
async fn bad_reads_get_clear_errors_and_sluice_keeps_serving() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = call(&client, "records", json!({"count": 3000})).await;
    let handle = stored_handle(&answer);
    let pages = meta(&answer, "sluice/stored").unwrap()["pages"]
        .as_u64()
        .unwrap();
    let error_text = |r: &rmcp::model::CallToolResult| {
        assert_eq!(r.is_error, Some(true), "{}", first_text(r));
        first_text(r)
    };

    let r = call(
        &client,
        "sluice_read",
        json!({"handle": "h_AAAAAAAAAAAAAAAAAAAAAA"}),
    )
    .await;
    let text = error_text(&r);
    assert!(
        text.starts_with("unknown handle `h_AAAAAAAAAAAAAAAAAAAAAA`"),
        "{text}"
    );
    assert!(
        text.contains(&handle),
        "names the handles that exist: {text}"
    );
    let r = call(&client, "sluice_read", json!({"handle": handle, "page": 0})).await;
    assert!(error_text(&r).contains("numbered from 1"));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "page": pages + 1}),
    )
    .await;
    assert!(error_text(&r).starts_with(&format!(
        "page {} does not exist: there are {pages} pages (1 to {pages})",
        pages + 1
    )));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "/count"}),
    )
    .await;
    assert_eq!(
        error_text(&r),
        "`/count` is a number that fits in a page: there is nothing to page there; page the value around it (`\"path\":\"\"`) or read it with jq. Arrays: `/rows` (3,000 items)."
    );
    // A path that goes into a scalar.
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "/count/x"}),
    )
    .await;
    assert_eq!(
        error_text(&r),
        "`/count/x` does not exist: `x` is not found in the value at `/count`."
    );
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "/nope"}),
    )
    .await;
    assert!(error_text(&r).contains("`/nope` does not exist"));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "rows"}),
    )
    .await;
    assert!(error_text(&r).contains("is not a JSON Pointer"));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "max_tokens": 10}),
    )
    .await;
    assert!(error_text(&r).contains("at least 500"));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "page": "second"}),
    )
    .await;
    assert!(error_text(&r).contains("invalid value: string \"second\", expected a whole number"));
    // A page's number as a string is what it plainly means (`tools::lenient`).
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "page": "2"}),
    )
    .await;
    assert_ne!(r.is_error, Some(true), "{}", first_text(&r));
    let r = call(&client, "sluice_read", json!({})).await;
    assert!(error_text(&r).contains("needs a `handle`"));
    let r = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "cursor": "c1_x"}),
    )
    .await;
    assert!(error_text(&r).contains("either `cursor` or `handle`"));

    // Cursors: a tampered or garbage one is a JSON-RPC -32602.
    let first = call(&client, "sluice_read", json!({"handle": handle})).await;
    let cursor = meta(&first, "sluice/page").unwrap()["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut tampered = cursor.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    for bad in [
        String::from_utf8(tampered).unwrap(),
        "c1_garbage".into(),
        "hello".into(),
    ] {
        let err = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("sluice_read")
                    .with_arguments(args(json!({"cursor": bad}))),
            )
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("-32602") || text.contains("Invalid params") || text.contains("invalid"),
            "{text}"
        );
    }
    // The genuine cursor still works, and so does the upstream.
    let next = call(&client, "sluice_read", json!({"cursor": cursor})).await;
    assert_eq!(meta(&next, "sluice/page").unwrap()["page"], 2);
    let unknown = client
        .read_resource(ReadResourceRequestParams::new("sluice://result/h_nope"))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("unknown handle"), "{unknown}");
    for (query, expected) in [
        ("?page=0", "numbered from 1"),
        ("?page=x", "numbered from 1"),
        ("?bogus=1", "unknown parameter `bogus`"),
        ("?cursor=garbage", "not a sluice cursor"),
        ("?path=%2Fcount", "is a number that fits in a page"),
    ] {
        let uri = format!("sluice://result/{handle}{query}");
        let err = client
            .read_resource(ReadResourceRequestParams::new(uri.clone()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(expected), "{uri}: {err}");
    }
    let second = client
        .read_resource(ReadResourceRequestParams::new(format!(
            "sluice://result/{handle}?path=%2Frows&page=2"
        )))
        .await
        .unwrap();
    assert_eq!(
        second.meta.as_ref().unwrap().0["sluice/page"]["path"],
        "/rows"
    );
    let echo = call(&client, "echo", json!({"text": "still here"})).await;
    assert_eq!(first_text(&echo), "still here");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn handles_and_cursors_of_another_session_are_refused() {
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let (a, _) = connect_http(&sluice.url).await;
    let (b, _) = connect_http(&sluice.url).await;
    let answer = call(&a, "records", json!({"count": 3000})).await;
    let handle = stored_handle(&answer);
    let first = call(&a, "sluice_read", json!({"handle": handle})).await;
    let cursor = meta(&first, "sluice/page").unwrap()["next_cursor"].clone();

    let r = call(&b, "sluice_read", json!({"handle": handle})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(
        first_text(&r).starts_with(&format!("unknown handle `{handle}`")),
        "{}",
        first_text(&r)
    );
    let err = b
        .call_tool(
            rmcp::model::CallToolRequestParams::new("sluice_read")
                .with_arguments(args(json!({"cursor": cursor}))),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("a result you do not have"),
        "{err}"
    );
    assert!(
        b.read_resource(ReadResourceRequestParams::new(format!(
            "sluice://result/{handle}"
        )))
        .await
        .is_err()
    );
    // The owner still reads it.
    assert_ne!(
        call(&a, "sluice_read", json!({"cursor": cursor}))
            .await
            .is_error,
        Some(true)
    );
}

#[tokio::test]
async fn truncate_mode_and_a_smaller_tool_budget() {
    let dir = TempDir::new("govern-modes");
    let toml = format!(
        "{}[upstreams.py.tools.records]\nmode = \"truncate\"\nmax_tokens = 4000\n[upstreams.py.tools.long_string]\nmode = \"passthrough\"\n",
        toml_upstream("py", &py_server())
    );
    let config = dir.file("sluice.toml", &toml);
    let (client, _) = connect(&via_config(&config)).await;
    let answer = call(&client, "records", json!({"count": 3000})).await;
    let text = first_text(&answer);
    assert!(
        text.starts_with("[TRUNCATED by sluice: records returned"),
        "{text}"
    );
    assert!(fits(&answer, 4_000, 45_000));
    assert!(
        meta(&answer, "sluice/stored").is_some(),
        "the whole is still stored"
    );
    let passed = call(&client, "long_string", json!({"chars": 100_000})).await;
    assert!(meta(&passed, "sluice/stored").is_none());
    assert!(first_text(&passed).len() > 100_000);
}

#[tokio::test]
async fn a_100_mb_result_does_not_stall_other_sessions() {
    let dir = TempDir::new("govern-100mb");
    let toml = format!(
        "{}{}",
        toml_upstream("py", &py_server()),
        toml_upstream("shop", &sample())
    );
    let config = dir.file("sluice.toml", &toml);
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let (a, _) = connect_http(&sluice.url).await;
    let (b, _) = connect_http(&sluice.url).await;
    let big = tokio::spawn(async move {
        // Slow in a debug build: wait for it rather than become an operation.
        let r = call(
            &a,
            "py__big",
            json!({"bytes": 100_000_000, "_timeout_s": 300}),
        )
        .await;
        (r, a)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !big.is_finished(),
        "100 MB took under 0.3 s: this test proves nothing"
    );
    for i in 0..5 {
        let echo = call(&b, "shop__echo", json!({"text": format!("ping {i}")})).await;
        assert_eq!(first_text(&echo), format!("ping {i}"));
    }
    assert!(
        !big.is_finished(),
        "the other session's calls waited for the 100 MB result"
    );
    let (answer, a) = big.await.unwrap();
    assert!(fits(&answer, 18_000, 45_000));
    let stored = meta(&answer, "sluice/stored").unwrap();
    assert_eq!(stored["bytes"], 100_000_000);
    let last = call(
        &a,
        "sluice_read",
        json!({"handle": stored["handle"], "page": stored["pages"]}),
    )
    .await;
    let data = first_text(&last);
    assert!(
        !data.is_empty() && big_text(100_000_000).ends_with(&data),
        "the last page is the text's end"
    );
}

/// The fixture's `big` text (tests/fixtures/py_server.py `big_text`).
fn big_text(n: usize) -> String {
    let mut text = String::with_capacity(n + 80);
    let mut i = 0;
    while text.len() < n {
        text.push_str(&format!(
            "{i:08} abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456\n"
        ));
        i += 1;
    }
    text.truncate(n);
    text
}
