//! No input stalls the gateway (issue 14): what a client or an upstream
//! sends may cost work in proportion to its size, never more, off the
//! request threads when it is large, and errors quote inputs cut. Each test
//! drives one shared HTTP sluice from two sessions: one sends the hostile
//! input, the other calls `echo` meanwhile, and its latency is compared with
//! its own idle latency measured in the same run (a ratio, not a time).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::*;

/// How much slower than idle another session's `echo` may get while one
/// session sends a hostile input. Generous: the machine running the tests
/// is shared; a stall (seconds on a request thread) is hundreds of times.
const SLOWDOWN: u32 = 20;

/// The median latency of `echo` from `client`, over `n` calls.
async fn echo_latency(client: &Client, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let result = call(client, "echo", json!({"text": format!("ping {i}")})).await;
        times.push(started.elapsed());
        assert_eq!(first_text(&result), format!("ping {i}"));
    }
    median(times)
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Runs `hostile` while `bystander` calls `echo` in a loop; returns what
/// `hostile` gave and the bystander's median latency meanwhile.
async fn meanwhile<T>(
    bystander: &Client,
    hostile: impl std::future::Future<Output = T>,
) -> (T, Duration) {
    let mut hostile = std::pin::pin!(hostile);
    let mut times = Vec::new();
    let mut i = 0;
    loop {
        let started = Instant::now();
        let echo = call(bystander, "echo", json!({"text": format!("meanwhile {i}")}));
        tokio::select! {
            biased;
            out = &mut hostile => {
                // One more, so that there is always a figure.
                if times.is_empty() {
                    times.push(echo_latency(bystander, 1).await);
                }
                return (out, median(times));
            }
            result = echo => {
                assert_eq!(first_text(&result), format!("meanwhile {i}"));
                times.push(started.elapsed());
            }
        }
        i += 1;
    }
}

/// Asserts `during` is within [`SLOWDOWN`] times `idle` (idle floored at
/// 1 ms, under which timers and scheduling dominate).
fn assert_not_stalled(what: &str, idle: Duration, during: Duration) {
    eprintln!("{what}: echo {during:?} (median) meanwhile, {idle:?} idle");
    let idle = idle.max(Duration::from_millis(1));
    assert!(
        during < idle * SLOWDOWN,
        "{what}: another session's echo took {during:?} (median) against {idle:?} idle"
    );
}

#[tokio::test]
async fn deep_nesting_from_an_upstream_is_stored_while_other_sessions_stay_fast() {
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let (attacker, _) = connect_http(&sluice.url).await;
    let (bystander, _) = connect_http(&sluice.url).await;
    let idle = echo_latency(&bystander, 15).await;
    // 1 MB of `[[[…]]]` as text: O(depth²) scanning took a minute for 200 KB.
    let depth = 500_000;
    let started = Instant::now();
    let (result, during) = meanwhile(
        &bystander,
        call(&attacker, "nested", json!({"depth": depth})),
    )
    .await;
    eprintln!("nested, depth {depth}: answered in {:?}", started.elapsed());
    assert_ne!(result.is_error, Some(true), "{}", first_text(&result));
    let stored = meta(&result, "sluice/stored").expect("a stored answer");
    assert_eq!(stored["kind"], "json", "{stored}");
    assert_not_stalled("deep nesting", idle, during);
    // Its named arrays stop at a bounded depth: the answer stays short.
    assert!(
        fits(&result, 25_000, 100_000),
        "{}",
        first_text(&result).len()
    );
    // Read back at its deepest: one page, the innermost array.
    let handle = stored_handle(&result);
    let deepest = "/0".repeat(depth - 1);
    let page = call(
        &attacker,
        "sluice_read",
        json!({"handle": handle, "path": deepest}),
    )
    .await;
    assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
    assert!(first_text(&page).contains('1'), "{}", first_text(&page));
    // And searched: every string's pointer is built as the scan goes.
    let searched = call(
        &attacker,
        "sluice_search",
        json!({"handle": handle, "pattern": "1", "regex": false}),
    )
    .await;
    assert_ne!(searched.is_error, Some(true), "{}", first_text(&searched));
}

#[tokio::test]
async fn huge_patterns_are_refused_and_large_ones_compile_off_the_request_threads() {
    let sluice = HttpSluice::start(&[], &py_server()).await;
    let (attacker, _) = connect_http(&sluice.url).await;
    let (bystander, _) = connect_http(&sluice.url).await;
    let stored = call(&attacker, "records", json!({"count": 3000})).await;
    let handle = stored_handle(&stored);
    let idle = echo_latency(&bystander, 15).await;
    // 3.5 MB: refused before anything is compiled, the limit named.
    let huge = "a".repeat(3_500_000);
    let (refused, during) = meanwhile(
        &bystander,
        call(
            &attacker,
            "sluice_search",
            json!({"handle": handle, "pattern": huge, "regex": true}),
        ),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    let message = first_text(&refused);
    assert!(
        message.contains("8 KiB") && message.len() < 400,
        "{message}"
    );
    assert_not_stalled("a 3.5 MB pattern", idle, during);
    // 8 KiB of nested counted repetitions: legal, but past the regex
    // crate's size limit. A clear error, compiled off the request threads.
    let unit = r"(\w{1,40}\d{1,40}){1,40}";
    let heavy = unit.repeat(8 * 1024 / unit.len());
    assert!(heavy.len() <= 8 * 1024);
    let (answer, during) = meanwhile(
        &bystander,
        call(
            &attacker,
            "sluice_search",
            json!({"handle": handle, "pattern": heavy, "regex": true}),
        ),
    )
    .await;
    let message = first_text(&answer);
    assert_eq!(answer.is_error, Some(true), "{message}");
    assert!(
        message.contains("invalid regular expression") && message.contains("size limit"),
        "{message}"
    );
    assert!(message.len() < 1000, "{}", message.len());
    assert_not_stalled("an 8 KiB pattern", idle, during);
    // A pattern at the limit that compiles is searched as any other.
    let found = call(
        &attacker,
        "sluice_search",
        json!({"handle": handle, "pattern": format!("row 2999{}", "|zzz".repeat(2000)), "regex": true}),
    )
    .await;
    assert_ne!(found.is_error, Some(true), "{}", first_text(&found));
    assert!(first_text(&found).contains("row 2999"));
}

#[tokio::test]
async fn path_aliases_are_refused_with_the_canonical_spelling() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let stored = call(&client, "records", json!({"count": 3000})).await;
    let handle = stored_handle(&stored);
    for alias in ["/rows/+0", "/rows/00", "/rows/ 0", "/rows/-0"] {
        let refused = call(
            &client,
            "sluice_read",
            json!({"handle": handle, "path": alias}),
        )
        .await;
        assert_eq!(refused.is_error, Some(true), "{alias}");
        let message = first_text(&refused);
        assert!(message.contains("write `/rows/0`"), "{alias}: {message}");
    }
    let refused = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "/rows/-1"}),
    )
    .await;
    assert!(
        first_text(&refused).contains("numbered from 0"),
        "{}",
        first_text(&refused)
    );
    let read = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": "/rows/0"}),
    )
    .await;
    assert_ne!(read.is_error, Some(true), "{}", first_text(&read));
}

#[tokio::test]
async fn huge_inputs_are_quoted_cut_in_errors() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let bogus = "A".repeat(1 << 20);
    let short = |text: &str| {
        assert!(text.len() < 2000, "{} bytes: {}…", text.len(), &text[..200]);
        assert!(text.contains("1,048,57"), "the size is named: {text}");
    };
    // A handle, a path, an operation id, a jq filter.
    for (tool, arguments) in [
        ("sluice_read", json!({"handle": bogus})),
        ("sluice_search", json!({"handle": bogus, "pattern": "x"})),
        ("sluice_query", json!({"handle": bogus, "filter": "."})),
        ("sluice_info", json!({"handle": bogus})),
        ("sluice_result", json!({"operation": bogus})),
        ("sluice_cancel", json!({"operation": bogus})),
    ] {
        let result = call(&client, tool, arguments).await;
        assert_eq!(result.is_error, Some(true), "{tool}");
        short(&first_text(&result));
    }
    let stored = call(&client, "records", json!({"count": 3000})).await;
    let handle = stored_handle(&stored);
    let path = format!("/{bogus}");
    let result = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "path": path}),
    )
    .await;
    short(&first_text(&result));
    let result = call(
        &client,
        "sluice_query",
        json!({"handle": handle, "filter": format!(".{bogus} | {{")}),
    )
    .await;
    assert_eq!(result.is_error, Some(true));
    assert!(
        first_text(&result).len() < 2000,
        "{}",
        first_text(&result).len()
    );
    // A value of the wrong type, quoted by the argument parser.
    let result = call(
        &client,
        "sluice_read",
        json!({"handle": handle, "page": bogus}),
    )
    .await;
    assert!(
        first_text(&result).len() < 2000,
        "{}",
        first_text(&result).len()
    );
    let result = call(
        &client,
        "sluice_result",
        json!({"operation": "op_x", "wait_s": bogus}),
    )
    .await;
    assert!(
        first_text(&result).len() < 2000,
        "{}",
        first_text(&result).len()
    );
    // An unknown tool: a protocol error, its name cut.
    let error = client
        .call_tool(rmcp::model::CallToolRequestParams::new(bogus.clone()))
        .await
        .map(|r| format!("{} bytes of text", first_text(&r).len()))
        .expect_err("an unknown tool is a protocol error");
    short(&error.to_string());
    // A cursor that was never issued.
    let error = client
        .call_tool(
            rmcp::model::CallToolRequestParams::new("sluice_read")
                .with_arguments(args(json!({"cursor": bogus}))),
        )
        .await
        .map(|r| format!("{} bytes of text", first_text(&r).len()))
        .expect_err("an unknown cursor is a protocol error");
    assert!(
        error.to_string().len() < 2000,
        "{}",
        error.to_string().len()
    );
}

#[tokio::test]
async fn waits_past_what_a_duration_holds_get_a_clear_error() {
    let (client, _) = connect(&via_sluice(&py_server())).await;
    let started = call(&client, "sleep", json!({"seconds": 2, "_timeout_s": 0.2})).await;
    let op = meta(&started, "sluice/operation").expect("an operation")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for wait in [json!(1e20), json!(f64::MAX), json!(-1)] {
        let result = call(
            &client,
            "sluice_result",
            json!({"operation": op, "wait_s": wait}),
        )
        .await;
        assert_eq!(result.is_error, Some(true), "{wait}");
        assert!(
            first_text(&result).contains("`wait_s` must be"),
            "{}",
            first_text(&result)
        );
    }
    // The session still answers.
    let result = call(&client, "echo", json!({"text": "still here"})).await;
    assert_eq!(first_text(&result), "still here");
}
