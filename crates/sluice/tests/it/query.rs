//! `sluice_query`: jq (jaq) over stored results, in worker processes that
//! bad filters cannot take down sluice with.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

fn error_text(r: &rmcp::model::CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{}", first_text(r));
    first_text(r)
}

#[tokio::test]
async fn queries_answer_inline_or_are_stored_and_chain() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = call(&client, "records", json!({"count": 20000})).await;
    let handle = stored_handle(&answer);
    assert!(
        first_text(&answer).contains(&format!(
            "Next, every call with the same handle:\n  sluice_read {{\"handle\":\"{handle}\"}}"
        )) && first_text(&answer)
            .contains("  sluice_query {\"filter\":\".rows | length\"} — jq over it"),
        "the answer offers a query on the same handle: {}",
        first_text(&answer)
    );
    let q = |filter: &str| json!({"handle": handle, "filter": filter});

    // The ready-made filters of the answer's next steps all run.
    let offered: Vec<String> = first_text(&answer)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("sluice_query "))
        .map(|l| {
            let call: serde_json::Value = serde_json::Deserializer::from_str(l)
                .into_iter()
                .next()
                .unwrap()
                .unwrap();
            call["filter"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        offered[..2],
        [
            ".rows | length",
            ".rows | group_by(.kind) | map({kind: .[0].kind, count: length})"
        ]
    );
    assert!(
        offered[2].starts_with(".rows | map(select(.kind == \""),
        "{offered:?}"
    );
    assert_eq!(offered[3], ".rows | map({id, name, kind, score})");
    let by_kind = call(&client, "sluice_query", q(&offered[1])).await;
    assert_eq!(
        first_text(&by_kind),
        r#"[{"kind":"alpha","count":6667},{"kind":"beta","count":6667},{"kind":"gamma","count":6666}]"#
    );
    let selected = call(&client, "sluice_query", q(&offered[2])).await;
    let selected = stored_handle(&selected);
    let kinds = call(
        &client,
        "sluice_query",
        json!({"handle": selected, "filter": "map(.kind) | unique | length"}),
    )
    .await;
    assert_eq!(first_text(&kinds), "1", "one kind selected");
    let picked = stored_handle(&call(&client, "sluice_query", q(&offered[3])).await);
    let keys = call(
        &client,
        "sluice_query",
        json!({"handle": picked, "filter": "map(keys_unsorted) | unique"}),
    )
    .await;
    assert_eq!(first_text(&keys), r#"[["id","name","kind","score"]]"#);

    let count = call(&client, "sluice_query", q(".rows | length")).await;
    assert_eq!(first_text(&count), "20000");
    // A handle copied with what surrounds it, and `max_tokens` as a string
    // (`tools::lenient`): the same answer.
    let spaced =
        json!({"handle": format!(" {handle}\n"), "filter": ".rows | length", "max_tokens": "900"});
    assert_eq!(
        first_text(&call(&client, "sluice_query", spaced).await),
        "20000"
    );
    // jq's own definitions that jaq lacks are there (`query/defs.jq`).
    let table = call(
        &client,
        "sluice_query",
        q(".rows[:2][] | [.id, .kind, .active] | @csv, @tsv"),
    )
    .await;
    assert_eq!(
        first_text(&table),
        "\"0,\\\"alpha\\\",true\"\n\"0\\talpha\\ttrue\"\n\"1,\\\"beta\\\",false\"\n\"1\\tbeta\\tfalse\""
    );
    assert_eq!(
        meta(&count, "sluice/query").unwrap(),
        json!({"handle": handle, "filter": ".rows | length", "outputs": 1})
    );
    let gamma = call(
        &client,
        "sluice_query",
        q(r#"[.rows[] | select(.kind == "gamma")] | length"#),
    )
    .await;
    assert_eq!(first_text(&gamma), "6666");
    let two = call(&client, "sluice_query", q(".rows[:2][] | {id, kind}")).await;
    assert_eq!(
        first_text(&two),
        "{\"id\":0,\"kind\":\"alpha\"}\n{\"id\":1,\"kind\":\"beta\"}"
    );

    // 20,000 names: over the budget, stored in turn, and queryable again.
    let names = call(&client, "sluice_query", q(".rows[] | .name")).await;
    assert!(fits(&names, 18_000, 45_000));
    let query_meta = meta(&names, "sluice/query").unwrap();
    assert_eq!(query_meta["outputs"], 20000);
    let stored_as = query_meta["stored_as"].as_str().unwrap().to_owned();
    assert_eq!(meta(&names, "sluice/stored").unwrap()["handle"], stored_as);
    let again = call(
        &client,
        "sluice_query",
        json!({"handle": stored_as, "filter": "length, .[19999]"}),
    )
    .await;
    assert_eq!(first_text(&again), "20000\n\"row 19999 été ✓\"");

    // A text result is the array of its lines.
    let text = stored_handle(&call(&client, "big", json!({"bytes": 300_000})).await);
    let lines = call(
        &client,
        "sluice_query",
        json!({"handle": text, "filter": "length, (.[777] | .[0:8])"}),
    )
    .await;
    assert_eq!(first_text(&lines), "4348\n\"00000777\"");
    // A filter written for the tool's JSON result fails on the lines: the
    // error keeps what it indexed with (jaq quotes the whole array before
    // it) and says how a text is queried.
    let json_filter = call(
        &client,
        "sluice_query",
        json!({"handle": text, "filter": ".content[0].text"}),
    )
    .await;
    let why = error_text(&json_filter);
    assert!(
        why.starts_with("sluice_query: the filter failed: cannot index [\"00000000 ")
            && why.contains(" bytes left out)…")
            && why.contains("\"] with \"content\". This result is a text: it is queried as the JSON array of its lines (4,348 lines), so `.[0]` is its first line"),
        "{why}"
    );
    assert!(why.len() < 1_200, "{} bytes: {why}", why.len());
}

#[tokio::test]
async fn bad_filters_get_clear_errors_and_sluice_keeps_serving() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let handle = stored_handle(&call(&client, "records", json!({"count": 3000})).await);
    let q = |filter: &str| json!({"handle": handle, "filter": filter});

    let syntax = error_text(&call(&client, "sluice_query", q(".rows | [")).await);
    assert!(
        syntax.starts_with("sluice_query: syntax error: expected")
            && syntax.contains(".rows | [\n"),
        "{syntax}"
    );
    let undefined = error_text(&call(&client, "sluice_query", q(".rows | mapp(.id)")).await);
    assert!(
        undefined.contains("undefined filter: `mapp`\n.rows | mapp(.id)\n        ^"),
        "{undefined}"
    );
    for outside in ["env", "$ENV", "input"] {
        assert!(
            error_text(&call(&client, "sluice_query", q(outside)).await).contains("undefined"),
            "{outside}"
        );
    }
    let runtime = error_text(&call(&client, "sluice_query", q(".count + \"x\"")).await);
    assert!(runtime.contains("the filter failed"), "{runtime}");
    assert!(!runtime.contains("This result is a text"), "{runtime}");
    // An assignment through a missing path, which jq would create.
    let assigned = error_text(&call(&client, "sluice_query", q(".summary.count = 5")).await);
    assert!(
        assigned.contains("the filter failed: cannot use null as iterable")
            && assigned.contains("jq would have created the missing path"),
        "{assigned}"
    );
    assert!(!runtime.contains("jq would have created"), "{runtime}");
    let many = error_text(&call(&client, "sluice_query", q("range(1000000)")).await);
    assert!(many.contains("more than 100000 outputs"), "{many}");
    let deep = error_text(&call(&client, "sluice_query", q("def f: [f]; f")).await);
    assert!(deep.contains("recursed too deep"), "{deep}");
    // `[repeat(1)]` reaches the limit too, after ~30 s in a debug build:
    // a 2 GB string gets there at once.
    let memory = error_text(&call(&client, "sluice_query", q(r#""x" * 2000000000"#)).await);
    assert!(memory.contains("stopped at 1024 MiB"), "{memory}");
    // NaN prints as jq prints it; a key that is not a string is refused.
    assert_eq!(
        first_text(&call(&client, "sluice_query", q("[nan]")).await),
        "[null]"
    );
    let key = error_text(&call(&client, "sluice_query", q("{(1): 2}")).await);
    assert!(key.contains("object key that is not a string"), "{key}");
    let unknown = error_text(
        &call(
            &client,
            "sluice_query",
            json!({"handle": "h_AAAAAAAAAAAAAAAAAAAAAA", "filter": "."}),
        )
        .await,
    );
    assert!(unknown.starts_with("unknown handle"), "{unknown}");
    let missing = error_text(&call(&client, "sluice_query", json!({"handle": handle})).await);
    assert!(missing.contains("missing field `filter`"), "{missing}");

    // A filter that never ends is killed after 10 s; meanwhile sluice serves.
    let forever = {
        let args = q("def f: f; f");
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("sluice_query")
                    .with_arguments(args.as_object().cloned().unwrap()),
            )
            .await
            .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..3 {
        assert_eq!(
            first_text(&call(&client, "echo", json!({"text": format!("ping {i}")})).await),
            format!("ping {i}")
        );
    }
    let count = call(&client, "sluice_query", q(".count")).await;
    assert_eq!(first_text(&count), "3000");
    assert!(
        !forever.is_finished(),
        "the endless filter was still running while sluice served"
    );
    let stopped = forever.await.unwrap();
    assert!(
        error_text(&stopped).contains("stopped after 10 s"),
        "{}",
        first_text(&stopped)
    );
}

/// A query works once the file sluice started from is gone (deleted, or
/// replaced as an upgrade in place or a rebuild replaces it): its workers
/// start from the binary that runs. They started from the path, and the
/// query failed with "cannot start a jq worker: No such file or directory".
#[tokio::test]
async fn queries_work_once_the_file_sluice_started_from_is_gone() {
    let dir = TempDir::new("query-binary-gone");
    let copy = dir.0.join("sluice");
    std::fs::copy(sluice(), &copy).unwrap();
    let config = dir.file(
        "sluice.toml",
        &format!(
            "[query]\ntimeout_s = 3\n\n{}",
            toml_upstream("py", &py_server())
        ),
    );
    // The time limit holds the worker's start and the document's parse
    // too: 1 s was passed now and then by `.rows | length` on 20,000 rows
    // with a test suite running beside it.
    let mut command = via_config(&config);
    command[0] = copy.display().to_string();
    let (client, _) = connect(&command).await;
    let answer = call(&client, "records", json!({"count": 20000})).await;
    let handle = stored_handle(&answer);
    std::fs::remove_file(&copy).unwrap();
    // The worker started while the file was there ends with a filter that
    // never does; the next query needs a worker started now.
    let q = |filter: &str| json!({"handle": handle, "filter": filter});
    let stopped = call(&client, "sluice_query", q("def f: f; f")).await;
    assert!(
        error_text(&stopped).contains("was stopped after 3 s"),
        "{}",
        first_text(&stopped)
    );
    // Its worker had not read the document (4.6 MB) yet: that is said too.
    assert!(
        error_text(&stopped).contains("That time also went to reading the document ("),
        "{}",
        first_text(&stopped)
    );
    let count = call(&client, "sluice_query", q(".rows | length")).await;
    assert_eq!(first_text(&count), "20000");
    // A handle copied with what surrounds it, and `max_tokens` as a string
    // (`tools::lenient`): the same answer.
    let spaced =
        json!({"handle": format!(" {handle}\n"), "filter": ".rows | length", "max_tokens": "900"});
    assert_eq!(
        first_text(&call(&client, "sluice_query", spaced).await),
        "20000"
    );
}

/// The `sluice/jq` figures of `sluice_info`.
async fn jq_stats(client: &Client) -> serde_json::Value {
    meta(&call(client, "sluice_info", json!({})).await, "sluice/jq").unwrap()
}

#[tokio::test]
async fn workers_stay_warm_keep_documents_parsed_and_obey_the_config() {
    let dir = TempDir::new("query-config");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[query]\ntimeout_s = 1.5\nmax_memory_mb = 128\nworkers = 1\n",
            toml_upstream("py", &py_server())
        ),
    );
    let (client, _) = connect(&via_config(&config)).await;
    let rows = stored_handle(&call(&client, "records", json!({"count": 5000})).await);
    let text = stored_handle(&call(&client, "big", json!({"bytes": 300_000})).await);
    let q = |handle: &str, filter: &str| json!({"handle": handle, "filter": filter});
    let stats = jq_stats(&client).await;
    assert_eq!(stats["queries"], 0, "{stats}");

    // The first query over a document parses it; the next ones reuse it.
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&rows, ".count")).await),
        "5000"
    );
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&rows, ".rows[4999].id")).await),
        "4999"
    );
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&text, "length")).await),
        "4348"
    );
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&rows, ".rows | length")).await),
        "5000"
    );
    let stats = jq_stats(&client).await;
    assert_eq!(
        (&stats["queries"], &stats["kept_parsed"], &stats["stopped"]),
        (&json!(4), &json!(2), &json!(0)),
        "two documents, each parsed once: {stats}"
    );
    assert_eq!(
        (&stats["workers_idle"], &stats["workers_busy"]),
        (&json!(1), &json!(0))
    );
    let info = first_text(&call(&client, "sluice_info", json!({})).await);
    assert!(
        info.contains(
            "sluice_query, all sessions: 4 queries, 2 over a document kept parsed, 0 stopped"
        ),
        "{info}"
    );

    // The configured clock and memory limit.
    let forever = error_text(&call(&client, "sluice_query", q(&rows, "def f: f; f")).await);
    assert!(forever.contains("stopped after 1.5 s"), "{forever}");
    let memory = error_text(&call(&client, "sluice_query", q(&rows, r#""x" * 300000000"#)).await);
    assert!(memory.contains("stopped at 128 MiB"), "{memory}");
    // A new worker takes over, and parses the document again.
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&rows, ".count")).await),
        "5000"
    );

    // A query the client cancels ends its worker at once: the only worker
    // is free for the next query (else that one would wait and fail with
    // "all 1 jq workers stayed busy").
    let handle = client
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
                rmcp::model::CallToolRequestParams::new("sluice_query")
                    .with_arguments(args(q(&rows, "def f: f; f"))),
            )),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.cancel(Some("changed my mind".into())).await.unwrap();
    // Its worker is gone well before the 1.5 s clock would have ended it.
    let mut busy = json!(1);
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        busy = jq_stats(&client).await["workers_busy"].clone();
        if busy == 0 {
            break;
        }
    }
    assert_eq!(busy, 0, "the cancelled query still holds its worker");
    assert_eq!(
        first_text(&call(&client, "sluice_query", q(&rows, ".count")).await),
        "5000"
    );
    let stats = jq_stats(&client).await;
    assert_eq!(
        (&stats["queries"], &stats["kept_parsed"], &stats["stopped"]),
        (&json!(8), &json!(2), &json!(2)),
        "the cancelled query is not counted: {stats}"
    );
}

#[tokio::test]
async fn a_python_client_queries_and_searches_in_both_eras_over_stdio_and_http() {
    let extra = [
        "--query",
        "[.rows[] | select(.kind == \"gamma\")] | length",
        "--query",
        ".rows | map(.id)",
        "--query",
        ".rows | mapp(.id)",
        "--search",
        "row 2999 ",
    ];
    let check = |got: &serde_json::Value, how: &str| {
        let answers = got["answers"].as_array().unwrap();
        assert_eq!(answers[0]["text"], "1000", "{how}");
        assert_eq!(answers[0]["meta"]["sluice/query"]["outputs"], 1, "{how}");
        // 3,000 ids fit inline, one JSON array.
        let ids: Vec<u64> = serde_json::from_str(answers[1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(ids, (0..3000).collect::<Vec<u64>>(), "{how}");
        assert_eq!(answers[2]["is_error"], true, "{how}");
        assert!(
            answers[2]["text"]
                .as_str()
                .unwrap()
                .contains("undefined filter: `mapp`"),
            "{how}"
        );
        assert_eq!(answers[3]["meta"]["sluice/search"]["total"], 1, "{how}");
        assert!(
            answers[3]["text"]
                .as_str()
                .unwrap()
                .starts_with(r#"{"path":"/rows/2999/name","value":"row 2999 été ✓"}"#),
            "{how}: {}",
            answers[3]["text"]
        );
    };
    let stdio = stdio_target(&via_sluice(&py_server()));
    let sluice = HttpSluice::start(&[], &py_server()).await;
    for target in [["--stdio", stdio.as_str()], ["--url", sluice.url.as_str()]] {
        for mode in ["auto", "legacy"] {
            let got = pages_py(mode, &target, "records", json!({"count": 3000}), &extra).await;
            check(
                &got,
                &format!("{mode} via {} ({})", target[0], got["protocol_version"]),
            );
        }
    }
}

/// A `sluice_query` call that runs on its own task, so that others go on
/// meanwhile.
fn spawn_query(client: &Client, handle: &str, filter: &str) -> tokio::task::JoinHandle<String> {
    let peer = client.peer().clone();
    let arguments = args(json!({"handle": handle, "filter": filter}));
    tokio::spawn(async move {
        let result = peer
            .call_tool(
                rmcp::model::CallToolRequestParams::new("sluice_query").with_arguments(arguments),
            )
            .await
            .unwrap();
        error_text(&result)
    })
}

#[tokio::test]
async fn one_session_cannot_hold_every_jq_worker_another_queries_meanwhile() {
    let dir = TempDir::new("query-fair");
    let config = dir.file(
        "sluice.toml",
        &format!(
            "{}[query]\ntimeout_s = 4\nworkers = 2\n",
            toml_upstream("py", &py_server())
        ),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let (hog, _) = connect_http(&sluice.url).await;
    let (other, _) = connect_http(&sluice.url).await;
    let spun = stored_handle(&call(&hog, "big", json!({"bytes": 300_000})).await);
    let text = stored_handle(&call(&other, "big", json!({"bytes": 300_000})).await);

    // One session asks for as many never-ending filters as there are workers.
    let spins = [
        spawn_query(&hog, &spun, "def f: f; f"),
        spawn_query(&hog, &spun, "[range(1e9)] | length"),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stats = jq_stats(&other).await;
        let asked = stats["workers_busy"].as_u64().unwrap()
            + stats["queries_waiting"].as_u64().unwrap_or(0);
        if asked == 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{stats}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Another session's trivial query runs, and answers, while they spin.
    let first = call(
        &other,
        "sluice_query",
        json!({"handle": text, "filter": ".[0]"}),
    )
    .await;
    assert_ne!(first.is_error, Some(true), "{}", first_text(&first));
    assert_eq!(
        first_text(&first),
        "\"00000000 abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456\""
    );
    assert!(
        spins.iter().all(|s| !s.is_finished()),
        "the hog's filters were still running"
    );
    // The hog's own filters are stopped by the clock, each blamed for itself
    // (the one that gave its worker back ran again from the start).
    for spin in spins {
        let stopped = spin.await.unwrap();
        assert!(
            stopped.starts_with("sluice_query: the filter was stopped after 4 s"),
            "{stopped}"
        );
    }
    let stats = jq_stats(&other).await;
    assert_eq!(
        (&stats["queries"], &stats["preempted"], &stats["stopped"]),
        (&json!(3), &json!(1), &json!(2)),
        "{stats}"
    );
}
