//! `sluice_search` over stored results from real servers: every match is
//! found (compared with the direct result), pages fit, bad inputs get
//! clear errors. Over text it is grep-true: anchors hold at each line,
//! context before and after is asked for separately.

use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::support::*;

/// Every page of a search, following `next_cursor`.
async fn search_all(client: &Client, first: Value) -> (Vec<String>, Vec<String>, u64) {
    let mut request = first;
    let (mut data, mut headers) = (Vec::new(), Vec::new());
    loop {
        let page = call(client, "sluice_search", request).await;
        assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
        assert!(fits(&page, 18_000, 45_000), "a search page over the budget");
        let m = meta(&page, "sluice/search").unwrap();
        let total = m["total"].as_u64().unwrap();
        data.push(first_text(&page));
        headers.push(page.content[1].as_text().unwrap().text.clone());
        match m["next_cursor"].as_str() {
            Some(c) => request = json!({"cursor": c}),
            None => return (data, headers, total),
        }
        assert!(data.len() < 10_000, "search pages never end");
    }
}

/// The header of a search of `handle` for `pattern` that matches nothing.
async fn missed(client: &Client, handle: &str, pattern: &str) -> String {
    let (_, headers, total) =
        search_all(client, json!({"handle": handle, "pattern": pattern})).await;
    assert_eq!(total, 0, "{pattern}");
    headers.concat()
}

#[tokio::test]
async fn json_matches_come_with_their_paths_and_all_are_found() {
    let (direct, _) = connect(&py_server()).await;
    let want: Value = serde_json::from_str(&first_text(
        &call(&direct, "records", json!({"count": 20000})).await,
    ))
    .unwrap();
    let expected: Vec<String> = want["rows"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, r)| r["kind"] == "gamma")
        .map(|(i, _)| format!("/rows/{i}/kind"))
        .collect();

    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = call(&client, "records", json!({"count": 20000})).await;
    assert!(
        first_text(&answer).contains("sluice_search {\"pattern\":"),
        "the answer offers search"
    );
    let handle = stored_handle(&answer);
    let (pages, headers, total) =
        search_all(&client, json!({"handle": handle, "pattern": "GAMMA"})).await;
    assert_eq!(total as usize, expected.len());
    assert!(pages.len() > 1);
    assert!(
        headers[0].starts_with(&format!(
            "matching strings 1–50 of {} · next: sluice_search {{\"cursor\":\"s2_",
            sluice_core::format::group(expected.len() as u64)
        )),
        "{}",
        headers[0]
    );
    let found: Vec<String> = pages
        .iter()
        .flat_map(|p| p.lines().map(str::to_owned).collect::<Vec<_>>())
        .map(|line| {
            let hit: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(hit["value"], "gamma");
            hit["path"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(found, expected);

    // Keys match too, case-sensitive and regex searches narrow.
    let keys = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "^owner$", "regex": true, "max_matches": 3}),
    )
    .await;
    let first: Value = serde_json::from_str(first_text(&keys).lines().next().unwrap()).unwrap();
    assert_eq!(first, json!({"path": "/rows/0/owner", "key": "owner"}));
    assert_eq!(first_text(&keys).lines().count(), 3);
    let none = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "GAMMA", "case_sensitive": true}),
    )
    .await;
    assert_eq!(meta(&none, "sluice/search").unwrap()["total"], 0);
    assert!(
        none.content[1]
            .as_text()
            .unwrap()
            .text
            .starts_with("no matching strings")
    );

    // What a search that matched nothing may have missed is said: the
    // pattern's matches as a regex, or that numbers are not searched
    // (with a filter that finds them, which runs).
    let header = |pattern: &'static str| missed(&client, &handle, pattern);
    let beta_or_gamma = want["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "gamma" || r["kind"] == "beta")
        .count() as u64;
    assert_eq!(
        header("gamma|beta").await,
        format!(
            "no matching strings: the pattern was taken literally; as a regular expression (add \"regex\": true) it matches {} strings · last page",
            sluice_core::format::group(beta_or_gamma)
        )
    );
    assert_eq!(
        header("0.37").await,
        "no matching strings: a search reads the strings of JSON (keys and values), never its numbers, true, false or null; the filter `[paths(. == 0.37)]` of sluice_query gives the paths of the values equal to 0.37 · last page"
    );
    let paths = call(
        &client,
        "sluice_query",
        json!({"handle": handle, "filter": "[paths(. == 0.37)]"}),
    )
    .await;
    assert_eq!(first_text(&paths), r#"[["rows",1,"score"]]"#);
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn text_matches_come_with_line_numbers_and_context() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let answer = call(&client, "big", json!({"bytes": 300_000})).await;
    let handle = stored_handle(&answer);
    // Lines are "NNNNNNNN abc…\n": every line number ending in 777.
    let (pages, _, total) = search_all(
        &client,
        json!({"handle": handle, "pattern": r"(?m)^\d{5}777 ", "regex": true, "context": 1}),
    )
    .await;
    let lines = 300_000 / 69 + 1;
    let expected: Vec<usize> = (0..lines).filter(|i| i % 1000 == 777).collect();
    assert_eq!(total as usize, expected.len());
    let text = pages.concat();
    let hits: Vec<usize> = text
        .lines()
        .filter_map(|l| {
            l.split_once(':')
                .map(|(n, _)| n.parse::<usize>().unwrap() - 1)
        })
        .collect();
    assert_eq!(hits, expected);
    // One line of context each side, groups separated by `--`.
    assert!(
        text.starts_with(&format!("777-{:08} ", 776)),
        "{}",
        &text[..200]
    );
    assert!(text.contains(&format!("779-{:08} ", 778)));
    assert!(text.contains("\n--\n"));

    // A pattern with a regular expression's syntax, taken literally (the
    // default), that matches nothing: the answer says what it matches as
    // a regex, not only "no matching lines" (which says there are none).
    let header = |pattern: &'static str| missed(&client, &handle, pattern);
    assert_eq!(
        header("00000777 |00001777 ").await,
        "no matching lines: the pattern was taken literally; as a regular expression (add \"regex\": true) it matches 2 lines · last page"
    );
    assert_eq!(
        header("^00000777").await,
        "no matching lines: the pattern was taken literally; as a regular expression (add \"regex\": true) it matches 1 line · last page"
    );
    // Nothing to say when it matches nothing as a regex either, or has
    // no regex syntax.
    assert_eq!(header("zz|yy").await, "no matching lines · last page");
    // Not a regex at all (its regex reading does not compile): nothing
    // said, and the search still answers.
    assert_eq!(header("(unclosed").await, "no matching lines · last page");
    assert_eq!(
        header("no such words").await,
        "no matching lines · last page"
    );
}

#[tokio::test]
async fn bad_searches_get_clear_errors_and_sluice_keeps_serving() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let handle = stored_handle(&call(&client, "records", json!({"count": 3000})).await);
    let error_text = |r: &rmcp::model::CallToolResult| {
        assert_eq!(r.is_error, Some(true), "{}", first_text(r));
        first_text(r)
    };
    for (request, expected) in [
        (
            json!({"handle": handle, "pattern": "(unclosed", "regex": true}),
            "invalid regular expression",
        ),
        (
            json!({"handle": handle, "pattern": "((a{100}){100}){100}", "regex": true}),
            "size limit",
        ),
        (
            json!({"handle": handle, "pattern": ""}),
            "the pattern is empty",
        ),
        (
            json!({"handle": "h_AAAAAAAAAAAAAAAAAAAAAA", "pattern": "x"}),
            "unknown handle",
        ),
        (
            json!({"handle": handle, "pattern": "x", "context": 11}),
            "`context` must be a whole number of lines from 0 to 10",
        ),
        (
            json!({"handle": handle}),
            "needs a `handle` and a `pattern`",
        ),
        (
            json!({"handle": handle, "pattern": "x", "bogus": 1}),
            "unknown field `bogus`",
        ),
    ] {
        let r = call(&client, "sluice_search", request.clone()).await;
        assert!(
            error_text(&r).contains(expected),
            "{request}: {}",
            first_text(&r)
        );
    }
    // Literal search treats regex syntax as text.
    let r = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "(unclosed"}),
    )
    .await;
    assert_eq!(meta(&r, "sluice/search").unwrap()["total"], 0);
    // A forged search cursor, or a page cursor given to search: -32602.
    for bad in ["s2_AAAA", "s1_AAAA", "c1_AAAA", "nonsense"] {
        let err = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("sluice_search")
                    .with_arguments(args(json!({"cursor": bad}))),
            )
            .await
            .unwrap_err();
        assert!(err.to_string().contains("cursor"), "{err}");
    }
    assert_eq!(
        first_text(&call(&client, "echo", json!({"text": "still here"})).await),
        "still here"
    );
}

/// A pytest log of `lines` lines: passes, one failure with its `E` lines,
/// decoys (an `E` not at the start, `Error…` at the start), the summary.
fn pytest_log(lines: usize) -> String {
    let failure = [
        "=================================== FAILURES ===================================",
        "_________________________________ test_case_7 _________________________________",
        "",
        "    def test_case_7():",
        "        value = compute(7)",
        ">       assert value == 8",
        "E       assert 7 == 8",
        "E        +  where 7 = compute(7)",
        "",
        "tests/test_mod_7.py:12: AssertionError",
        "Error summary below; E lines above",
        "=========================== short test summary info ============================",
        "FAILED tests/test_mod_7.py::test_case_7 - assert 7 == 8",
    ];
    let header = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.12.1, pytest-8.0.0, pluggy-1.4.0",
        "collected 39985 items",
        "",
    ];
    let passes = lines - header.len() - failure.len() - 1;
    let mut log: Vec<String> = header.iter().map(|l| (*l).to_owned()).collect();
    log.extend((0..passes).map(|i| {
        format!(
            "tests/test_mod_{i}.py::test_case_{i} PASSED{:>40}",
            format!("[{:>3}%]", i * 100 / passes)
        )
    }));
    log.extend(failure.iter().map(|l| (*l).to_owned()));
    log.push(format!(
        "==================== 1 failed, {passes} passed in 12.34s ===================="
    ));
    log.join("\n") + "\n"
}

/// The hit lines of search pages (`N:text`), as (1-based number, text).
fn hit_lines(pages: &[String]) -> Vec<(usize, String)> {
    pages
        .iter()
        .flat_map(|p| p.lines())
        .filter_map(|l| {
            let digits = l.find(|c: char| !c.is_ascii_digit())?;
            let rest = l[digits..].strip_prefix(':')?;
            Some((l[..digits].parse().ok()?, rest.to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn a_stored_log_is_searched_line_by_line_like_grep() {
    let dir = TempDir::new("search-log");
    let log = pytest_log(40_000);
    let file = dir.file("pytest.log", &log);
    let server = server_filesystem(&dir.0.display().to_string());
    let (client, _) = connect(&via_sluice(&server)).await;
    let answer = call(
        &client,
        "read_text_file",
        json!({"path": file.display().to_string()}),
    )
    .await;
    let stored = meta(&answer, "sluice/stored").expect("a 40,000-line log is over the budget");
    assert_eq!(stored["kind"], "text", "{stored}");
    let handle = stored_handle(&answer);
    let lines: Vec<&str> = log.lines().collect();
    let numbered = |keep: &dyn Fn(&str) -> bool| -> Vec<(usize, String)> {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| keep(l))
            .map(|(i, l)| (i + 1, (*l).to_owned()))
            .collect()
    };

    // `^` holds at every line start: exactly the lines that begin "E" and
    // a space, not those with "E " further on or "Error" at the start.
    let e_lines = numbered(&|l| {
        l.strip_prefix('E')
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
    });
    assert_eq!(e_lines.len(), 2);
    let (pages, _, total) = search_all(
        &client,
        json!({"handle": handle, "pattern": "^E\\s", "regex": true}),
    )
    .await;
    assert_eq!(total, 2);
    assert_eq!(hit_lines(&pages), e_lines);
    // Two lines of context each side by default, grep-style.
    let (n, _) = e_lines[0];
    assert!(
        pages[0].starts_with(&format!("{}-{}\n", n - 2, lines[n - 3])),
        "{}",
        pages[0]
    );

    // `^FAILED` finds the summary line, `$` holds at line ends.
    let failed = numbered(&|l| l.starts_with("FAILED"));
    assert_eq!(failed.len(), 1);
    let (pages, _, _) = search_all(
        &client,
        json!({"handle": handle, "pattern": "^FAILED", "regex": true}),
    )
    .await;
    assert_eq!(hit_lines(&pages), failed);
    let (pages, _, total) = search_all(
        &client,
        json!({"handle": handle, "pattern": "assert 7 == 8$", "regex": true, "context": 0}),
    )
    .await;
    assert_eq!(total, 2, "{pages:?}");
    // A literal never spans lines.
    let (_, _, total) = search_all(
        &client,
        json!({"handle": handle, "pattern": "assert 7 == 8\nE"}),
    )
    .await;
    assert_eq!(total, 0);

    // `before: 3, after: 0`: exactly the 3 lines before the hit, and it.
    let (at, summary) = &failed[0];
    let shown = |from: usize, to: usize| -> String {
        (from..=to)
            .map(|n| {
                let sep = if n == *at { ':' } else { '-' };
                format!("{n}{sep}{}\n", lines[n - 1])
            })
            .collect()
    };
    let before = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "^FAILED", "regex": true, "before": 3, "after": 0}),
    )
    .await;
    assert_eq!(first_text(&before), shown(at - 3, *at));
    assert!(first_text(&before).ends_with(&format!("{at}:{summary}\n")));
    // `before` wins over `context` on its side; `context` gives the other.
    let mixed = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "^FAILED", "regex": true, "context": 1, "before": 3}),
    )
    .await;
    assert_eq!(first_text(&mixed), shown(at - 3, at + 1));
    client.cancel().await.unwrap();
}

fn mcp_error(e: ServiceError) -> (i32, String) {
    match e {
        ServiceError::McpError(e) => (e.code.0, e.message.to_string()),
        other => panic!("not an MCP error: {other}"),
    }
}

#[tokio::test]
async fn bad_context_and_tampered_cursors_get_clear_errors() {
    let dir = TempDir::new("search-bad-context");
    let log = pytest_log(40_000);
    let file = dir.file("pytest.log", &log);
    let server = server_filesystem(&dir.0.display().to_string());
    let (client, _) = connect(&via_sluice(&server)).await;
    let path = file.display().to_string();
    let handle = stored_handle(&call(&client, "read_text_file", json!({"path": path})).await);
    for (name, bad) in [
        ("before", json!(11)),
        ("after", json!(-1)),
        ("before", json!("three")),
        ("before", json!("11")),
        ("after", json!(2.5)),
        ("before", json!(true)),
        ("context", json!(100)),
    ] {
        let mut request = json!({"handle": handle, "pattern": "PASSED"});
        request[name] = bad.clone();
        let r = call(&client, "sluice_search", request).await;
        assert_eq!(r.is_error, Some(true), "{name}: {bad}: {}", first_text(&r));
        assert!(
            first_text(&r).contains(&format!(
                "`{name}` must be a whole number of lines from 0 to 10"
            )),
            "{name}: {bad}: {}",
            first_text(&r)
        );
    }
    // A cursor carries its context: none may be given with it.
    let first = call(
        &client,
        "sluice_search",
        json!({"handle": handle, "pattern": "PASSED", "max_matches": 5, "before": 1}),
    )
    .await;
    let cursor = meta(&first, "sluice/search").unwrap()["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(cursor.starts_with("s2_"), "{cursor}");
    let r = call(
        &client,
        "sluice_search",
        json!({"cursor": cursor, "after": 1}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert!(first_text(&r).contains("carries its pattern and options"));
    // A tampered search cursor: -32602, that says how to start again.
    let mut tampered = cursor.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let (code, message) = mcp_error(
        client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("sluice_search").with_arguments(args(
                    json!({"cursor": String::from_utf8(tampered).unwrap()}),
                )),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(code, -32602, "{message}");
    assert!(message.contains("altered"), "{message}");
    assert!(
        message.contains("call sluice_search with the handle"),
        "{message}"
    );
    // sluice keeps serving: the genuine cursor goes on where page 1 ended,
    // with the context it was given (one line before each hit, none after;
    // a page starts with its first hit's context).
    let next = call(&client, "sluice_search", json!({"cursor": cursor})).await;
    assert_ne!(next.is_error, Some(true), "{}", first_text(&next));
    let text = first_text(&next);
    let lines: Vec<&str> = log.lines().collect();
    let pass = |n: usize| format!("{n}:{}", lines[n - 1]);
    assert!(
        text.starts_with(&format!("9-{}\n{}\n{}\n", lines[8], pass(10), pass(11))),
        "{text}"
    );
    assert_eq!(
        meta(&next, "sluice/search").unwrap()["returned"],
        5,
        "{text}"
    );
    client.cancel().await.unwrap();
}
