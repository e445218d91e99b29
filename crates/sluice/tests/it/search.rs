//! `sluice_search` over stored results from real servers: every match is
//! found (compared with the direct result), pages fit, bad inputs get
//! clear errors.

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
            "matching strings 1–50 of {} · next: sluice_search {{\"cursor\":\"s1_",
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
            "at most 10",
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
    for bad in ["s1_AAAA", "c1_AAAA", "nonsense"] {
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
