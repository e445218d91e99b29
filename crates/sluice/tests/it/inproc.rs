//! sluice's own timing, in process: the gateway, a client and the sample
//! server wired in memory by `sluice::testing::Harness`, on tokio's paused
//! clock. Time moves only when every task waits, so lifetimes, idle
//! expiry, refresh-ahead, operation timeouts and `wait_s` are checked at
//! their exact durations, in milliseconds of real time, with no peer
//! process. (The same features against real peers, over stdio and HTTP,
//! stay in `cache.rs`, `operations.rs` and `tasks.rs`.)

use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use sluice::testing::{Harness, Running};
use tokio::time::{Instant, sleep};

use crate::support::{Reassembled, first_text, meta, reassemble, stored_handle};

/// `lookup`'s answer: {key, call, pad}.
fn answer(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "{}", first_text(result));
    serde_json::from_str(&first_text(result))
        .unwrap_or_else(|e| panic!("{e}: {}", first_text(result)))
}

/// The `_meta["sluice/cache"]` of a result served from the cache.
fn hit(result: &CallToolResult) -> Option<Value> {
    meta(result, "sluice/cache")
}

/// The `_meta["sluice/operation"]` of an answer (which must be one).
fn operation(result: &CallToolResult) -> Value {
    meta(result, "sluice/operation")
        .unwrap_or_else(|| panic!("not an operation: {}", first_text(result)))
}

/// `sluice_info`'s cache figures.
async fn cache_figures(h: &Running) -> Value {
    meta(
        &h.call("sluice_info", json!({})).await,
        "sluice/cache_figures",
    )
    .unwrap()
}

/// A harness whose `lookup` is cached with `cache` (a TOML inline table).
async fn cached_lookup(cache: &str, extra: &str) -> Running {
    Harness::new()
        .toml(&format!(
            "{extra}\n[upstreams.sample.tools.lookup]\ncache = {cache}"
        ))
        .start()
        .await
}

#[tokio::test(start_paused = true)]
async fn entries_expire_when_idle_and_at_their_lifetime() {
    let h = cached_lookup("{ ttl_s = 4, idle_s = 1.5, refresh_at = 1 }", "").await;
    let lookup = || h.call("lookup", json!({"key": "k"}));
    assert_eq!(answer(&lookup().await)["call"], 1);
    // Read 1 ms before its idle expiry: a hit, and idle counts from now.
    sleep(Duration::from_millis(1499)).await;
    let read = lookup().await;
    assert_eq!(answer(&read)["call"], 1);
    assert_eq!(hit(&read).unwrap()["age_s"], 1.5, "{:?}", hit(&read));
    // Unread for exactly idle_s: gone.
    sleep(Duration::from_millis(1500)).await;
    let renewed = lookup().await;
    assert_eq!(answer(&renewed)["call"], 2, "expired after idle_s");
    assert!(hit(&renewed).is_none());
    // Read every second (never idle): hits up to its lifetime, not at it.
    for second in 1..=3 {
        sleep(Duration::from_secs(1)).await;
        let read = lookup().await;
        assert_eq!(answer(&read)["call"], 2, "within ttl_s at {second} s");
        assert_eq!(hit(&read).unwrap()["age_s"], f64::from(second));
    }
    sleep(Duration::from_millis(999)).await;
    assert_eq!(answer(&lookup().await)["call"], 2, "1 ms before ttl_s");
    sleep(Duration::from_millis(1)).await;
    assert_eq!(
        answer(&lookup().await)["call"],
        3,
        "expired at ttl_s, however often read"
    );
    let figures = cache_figures(&h).await;
    assert_eq!(figures["tools"]["lookup"]["expirations"], 2, "{figures}");
    assert_eq!(figures["tools"]["lookup"]["entries"], 1, "{figures}");
    assert_eq!(h.ledger().lookups().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn refresh_ahead_serves_the_old_value_then_the_new_and_survives_a_failed_refresh() {
    // Refreshed ahead past 1.5 s (0.025 of 60); the upstream takes 0.5 s.
    let h = cached_lookup("{ ttl_s = 60, idle_s = 60, refresh_at = 0.025 }", "").await;
    let arguments = json!({"key": "k", "sleep_s": 0.5});
    let lookup = || h.call("lookup", arguments.clone());
    let asked = Instant::now();
    assert_eq!(answer(&lookup().await)["call"], 1);
    assert_eq!(asked.elapsed(), Duration::from_millis(500), "a miss waits");
    // 1 ms early: a plain hit, no refresh.
    sleep(Duration::from_millis(1499)).await;
    assert_eq!(answer(&lookup().await)["call"], 1);
    sleep(Duration::from_millis(1)).await;
    assert_eq!(h.ledger().lookups().len(), 1, "no refresh before 1.5 s");
    // Due: the hit answers at once with the old value, and refreshes in
    // the background.
    let asked = Instant::now();
    let old = lookup().await;
    assert_eq!(asked.elapsed(), Duration::ZERO, "no wait for the upstream");
    assert_eq!(answer(&old)["call"], 1);
    assert_eq!(hit(&old).unwrap()["age_s"], 1.5);
    // The refresh ends 0.5 s later: from then on, the new value. (Checked
    // 1 ms either side: at the very tick, which task runs first is open.)
    sleep(Duration::from_millis(499)).await;
    assert_eq!(answer(&lookup().await)["call"], 1, "refresh still running");
    sleep(Duration::from_millis(2)).await;
    let new = lookup().await;
    assert_eq!(answer(&new)["call"], 2, "the refreshed value");
    assert_eq!(hit(&new).unwrap()["age_s"], 0.0);
    assert_eq!(h.ledger().lookups().len(), 2, "one refresh");
    // A refresh that fails (an error result) keeps the entry.
    h.ledger().fail_lookups(true);
    sleep(Duration::from_millis(1500)).await;
    assert_eq!(answer(&lookup().await)["call"], 2);
    sleep(Duration::from_millis(499)).await;
    let figures = cache_figures(&h).await;
    assert_eq!(
        figures["tools"]["lookup"]["failed_refreshes"], 0,
        "{figures}"
    );
    sleep(Duration::from_millis(2)).await;
    let figures = cache_figures(&h).await;
    assert_eq!(
        figures["tools"]["lookup"]["failed_refreshes"], 1,
        "{figures}"
    );
    assert_eq!(figures["tools"]["lookup"]["refreshes"], 1, "{figures}");
    assert_eq!(h.ledger().lookups().len(), 3, "the failed refresh ran");
    let still = lookup().await;
    assert_eq!(
        answer(&still)["call"],
        2,
        "the old entry stays after a failed refresh"
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_identical_calls_make_one_upstream_call() {
    let h = cached_lookup("{ ttl_s = 60 }", "").await;
    let arguments = json!({"key": "same", "sleep_s": 1});
    let asked = Instant::now();
    let answers =
        futures::future::join_all((0..5).map(|_| h.call("lookup", arguments.clone()))).await;
    assert_eq!(
        asked.elapsed(),
        Duration::from_secs(1),
        "all answered by the one call"
    );
    assert_eq!(
        h.ledger().lookups().len(),
        1,
        "five concurrent calls, one upstream call"
    );
    for a in &answers {
        assert_eq!(answer(a)["call"], 1);
    }
    // One made the call; the four that waited on it were answered by it.
    let marked = answers.iter().filter(|a| hit(a).is_some()).count();
    assert_eq!(marked, 4);
}

#[tokio::test(start_paused = true)]
async fn a_large_cached_result_is_stored_once_per_owner_while_its_handle_lives() {
    let h = cached_lookup("{ ttl_s = 600 }", "[store]\nttl_s = 3").await;
    let arguments = json!({"key": "big", "pad": 300000});
    let first = h.call("lookup", arguments.clone()).await;
    let handle = stored_handle(&first);
    // A hit by the same session with the same budget: the same stored
    // answer, not a second copy of the result; its handle's expiry renewed.
    sleep(Duration::from_millis(2999)).await;
    let again = h.call("lookup", arguments.clone()).await;
    assert!(hit(&again).is_some());
    assert_eq!(stored_handle(&again), handle);
    assert_eq!(first_text(&again), first_text(&first));
    let expires = |r: &CallToolResult| {
        meta(r, "sluice/stored").unwrap()["expires_at"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        expires(&again) > expires(&first),
        "{} vs {}",
        expires(&again),
        expires(&first)
    );
    let (entries, _) = h.gateway().governor().store().usage();
    assert_eq!(entries, 1, "stored once");
    // Once the handle has expired (3 s after that hit), a hit stores the
    // result again.
    sleep(Duration::from_secs(3)).await;
    let later = h.call("lookup", arguments.clone()).await;
    assert!(hit(&later).is_some());
    let renewed = stored_handle(&later);
    assert_ne!(renewed, handle);
    let gone = h.call("sluice_read", json!({"handle": handle})).await;
    assert!(
        first_text(&gone).starts_with(&format!(
            "handle `{handle}` expired 0 s ago (results are kept 3 s after their last use). Your stored results: {renewed} — lookup, "
        )),
        "{}",
        first_text(&gone)
    );
    let Reassembled::Json(whole) = reassemble(&h.read_all(&renewed).await, Some("")) else {
        panic!("a JSON result")
    };
    assert_eq!(
        whole["pad"].as_str().unwrap().len(),
        300000,
        "the whole result reads back from the new handle"
    );
    assert_eq!(h.ledger().lookups().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn unused_results_expire_after_the_configured_time() {
    let h = Harness::new().toml("[store]\nttl_s = 1").start().await;
    let answer = h.call("inventory", json!({"count": 3000})).await;
    let handle = stored_handle(&answer);
    // Read 1 ms before it expires: the time-to-live starts again.
    sleep(Duration::from_millis(999)).await;
    let read = h.call("sluice_read", json!({"handle": handle})).await;
    assert_ne!(read.is_error, Some(true), "{}", first_text(&read));
    sleep(Duration::from_millis(1000)).await;
    let gone = h.call("sluice_read", json!({"handle": handle})).await;
    assert_eq!(gone.is_error, Some(true));
    assert_eq!(
        first_text(&gone),
        format!(
            "handle `{handle}` expired 0 s ago (results are kept 1 s after their last use). You have no stored results: call the tool again."
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_becomes_an_operation_at_its_timeout_and_its_result_comes_later() {
    let h = Harness::new()
        .toml("[operations]\nretention_h = 1")
        .start()
        .await;
    let asked = Instant::now();
    // Progress every 0.25 s, 8 steps.
    let started = h
        .call("slow_task", json!({"seconds": 2, "_timeout_s": 0.6}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_millis(600), "at _timeout_s");
    let op = operation(&started);
    let id = op["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&op["status"], &op["tool"], &op["elapsed_s"]),
        (&json!("running"), &json!("slow_task"), &json!(0.6))
    );
    assert_eq!(
        op["progress"],
        json!({"progress": 2, "total": 8, "message": "step 2 of 8"}),
        "what the upstream reported by then"
    );
    assert!(
        first_text(&started).starts_with(&format!(
            "`slow_task` is still running after 0.6 s, so it goes on in the background as operation {id}."
        )),
        "{}",
        first_text(&started)
    );
    // Waiting less than it needs: still running after exactly `wait_s`.
    let waited = h
        .call("sluice_result", json!({"operation": id, "wait_s": 1}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_millis(1600));
    let status = operation(&waited);
    assert_eq!(
        (
            &status["status"],
            &status["elapsed_s"],
            &status["progress"]["progress"]
        ),
        (&json!("running"), &json!(1.6), &json!(6))
    );
    assert!(
        first_text(&waited).contains("is still running: 1.6 s so far."),
        "{}",
        first_text(&waited)
    );
    // Waiting long enough returns as soon as it ends, with its result.
    let done = h
        .call("sluice_result", json!({"operation": id, "wait_s": 60}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_secs(2), "when it ended");
    assert_eq!(first_text(&done), "done after 2 s");
    let status = operation(&done);
    assert_eq!(
        (
            &status["status"],
            &status["elapsed_s"],
            &status["progress"]["progress"]
        ),
        (&json!("completed"), &json!(2.0), &json!(8))
    );
    assert_eq!(h.ledger().slow_tasks(), ["completed"]);
    // Kept `retention_h` after it ended, not a moment longer.
    sleep(Duration::from_secs(3600) - Duration::from_millis(1)).await;
    let kept = h.call("sluice_result", json!({"operation": id})).await;
    assert_eq!(operation(&kept)["status"], "completed");
    assert_eq!(operation(&kept)["elapsed_s"], 2.0, "its run, not its age");
    sleep(Duration::from_millis(1)).await;
    let gone = h.call("sluice_result", json!({"operation": id})).await;
    assert_eq!(gone.is_error, Some(true));
    assert!(
        first_text(&gone).starts_with(&format!("unknown operation `{id}`")),
        "{}",
        first_text(&gone)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_its_tools_timeout_else_the_default_then_goes_on_as_an_operation() {
    let h = Harness::new()
        .toml("[operations]\ndefault_timeout_s = 10\n[upstreams.sample.tools.slow_task]\ntimeout_s = 1.5")
        .start()
        .await;
    let asked = Instant::now();
    let started = h
        .call("slow_task", json!({"seconds": 60, "quiet": true}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_millis(1500), "the tool's");
    assert_eq!(operation(&started)["status"], "running");
    assert!(operation(&started).get("progress").is_none(), "quiet");
    // `_timeout_s` wins over the tool's.
    let asked = Instant::now();
    let quick = h
        .call("slow_task", json!({"seconds": 1, "_timeout_s": 1.25}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_secs(1), "ended in time");
    assert_eq!(first_text(&quick), "done after 1 s");
    assert!(meta(&quick, "sluice/operation").is_none());
    // Another tool waits the default.
    let asked = Instant::now();
    let slow = h.call("lookup", json!({"key": "k", "sleep_s": 30})).await;
    assert_eq!(asked.elapsed(), Duration::from_secs(10), "the default");
    assert_eq!(operation(&slow)["tool"], "lookup");
}

/// `[operations] max_running` counts what runs without its client waiting:
/// a tool that never answers fills it with operations and holds nothing
/// else up. A quick call is answered as ever; a slow one, past its timeout
/// with no room, is answered when it ends, its client waiting as for any
/// call; and one waiting so becomes an operation as soon as one ends.
#[tokio::test(start_paused = true)]
async fn operations_that_never_end_hold_no_other_call_up() {
    let h = Harness::new()
        .toml("[operations]\nmax_running = 1")
        .start()
        .await;
    let never = json!({"seconds": 600, "quiet": true, "_timeout_s": 1});
    let hung = h.call("slow_task", never.clone()).await;
    let hung = operation(&hung)["id"].as_str().unwrap().to_owned();

    let asked = Instant::now();
    let quick = h.call("echo", json!({"text": "still here"})).await;
    assert_eq!(first_text(&quick), "still here");
    assert_eq!(asked.elapsed(), Duration::ZERO);

    let slow = h
        .call(
            "slow_task",
            json!({"seconds": 3, "quiet": true, "_timeout_s": 1}),
        )
        .await;
    assert_eq!(first_text(&slow), "done after 3 s");
    assert!(meta(&slow, "sluice/operation").is_none(), "its own result");
    assert_eq!(asked.elapsed(), Duration::from_secs(3), "when it ended");

    let asked = Instant::now();
    let (waiting, cancelled) = tokio::join!(h.call("slow_task", never), async {
        sleep(Duration::from_secs(5)).await;
        h.call("sluice_cancel", json!({"operation": hung})).await
    });
    assert_eq!(operation(&cancelled)["status"], "cancelled");
    let op = operation(&waiting);
    assert_eq!(
        (&op["status"], &op["elapsed_s"]),
        (&json!("running"), &json!(5.0)),
        "an operation from when the other ended"
    );
    assert_eq!(asked.elapsed(), Duration::from_secs(5));
    assert!(
        first_text(&waiting).starts_with("`slow_task` is still running after 5"),
        "{}",
        first_text(&waiting)
    );
    assert_eq!(h.ledger().slow_tasks(), ["completed", "cancelled"]);
}

/// `[limits] requests_per_minute` holds for a stdio connection too (one
/// client): a bucket of that many requests, refilled at that many a
/// minute; a request that finds it empty is refused with when the next is
/// taken, and goes once that time has passed.
#[tokio::test(start_paused = true)]
async fn a_connection_over_requests_per_minute_is_told_when_to_come_back() {
    let h = Harness::new()
        .toml("[limits]\nrequests_per_minute = 3")
        .start()
        .await;
    // `initialize` took one.
    for text in ["1", "2"] {
        assert_eq!(
            first_text(&h.call("echo", json!({"text": text})).await),
            text
        );
    }
    let refused = sluice::testing::call(h.client(), "echo", json!({"text": "3"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(
            "too many requests: this client may send 3 a minute (`[limits] requests_per_minute`); the next is taken in 20.0 s"
        ),
        "{refused}"
    );
    sleep(Duration::from_secs(20)).await;
    assert_eq!(first_text(&h.call("echo", json!({"text": "3"})).await), "3");
}

/// A server that answers its handshake, and never what it is asked after:
/// its tools, its prompts, its log level.
#[derive(Clone)]
struct Mute;

impl rmcp::ServerHandler for Mute {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_logging()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _: Option<rmcp::model::PaginatedRequestParams>,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        std::future::pending().await
    }

    async fn list_prompts(
        &self,
        _: Option<rmcp::model::PaginatedRequestParams>,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, rmcp::ErrorData> {
        std::future::pending().await
    }

    async fn set_level(
        &self,
        _: rmcp::model::SetLevelRequestParams,
        _: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), rmcp::ErrorData> {
        std::future::pending().await
    }
}

/// An upstream that never answers what sluice asks of every upstream at
/// once holds up no one: a list is answered after sluice's wait for each
/// upstream (15 s), with the others' items and sluice's own tools; so is
/// a log level; calls go on; the next list asks it again.
#[tokio::test(start_paused = true)]
async fn an_upstream_that_never_answers_a_list_holds_up_no_one() {
    let h = Harness::new()
        .toml("[upstreams.mute]\ncommand = \"mute\"")
        .server("mute", Mute)
        .start()
        .await;
    let client = h.client();
    for _ in 0..2 {
        let asked = Instant::now();
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(asked.elapsed(), Duration::from_secs(15));
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for name in [
            "sample__echo",
            "sample__slow_task",
            "sluice_read",
            "sluice_result",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
    }
    let asked = Instant::now();
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(asked.elapsed(), Duration::from_secs(15));
    assert!(!prompts.is_empty(), "the sample's prompts");
    let asked = Instant::now();
    client
        .set_level(rmcp::model::SetLevelRequestParams::new(
            rmcp::model::LoggingLevel::Info,
        ))
        .await
        .unwrap();
    assert_eq!(asked.elapsed(), Duration::from_secs(15));
    let echoed = h.call("sample__echo", json!({"text": "meanwhile"})).await;
    assert_eq!(first_text(&echoed), "meanwhile");
}

#[tokio::test(start_paused = true)]
async fn sluice_cancel_stops_an_operation_upstream() {
    let h = Harness::new().start().await;
    let started = h
        .call("slow_task", json!({"seconds": 30, "_timeout_s": 0.5}))
        .await;
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    sleep(Duration::from_millis(2100)).await;
    let cancelled = h.call("sluice_cancel", json!({"operation": id})).await;
    assert_eq!(operation(&cancelled)["status"], "cancelled");
    assert_eq!(
        first_text(&cancelled),
        format!(
            "operation {id} (`slow_task`) was cancelled after 2.6 s. Progress: 10/120 (step 10 of 120)."
        )
    );
    // The upstream hears of it before any more time passes.
    sleep(Duration::from_millis(1)).await;
    assert_eq!(h.ledger().slow_tasks(), ["cancelled"]);
    let later = h
        .call("sluice_result", json!({"operation": id, "wait_s": 1}))
        .await;
    assert_eq!(operation(&later)["status"], "cancelled");
    assert_eq!(operation(&later)["elapsed_s"], 2.6);
    let again = h.call("sluice_cancel", json!({"operation": id})).await;
    assert_eq!(again.is_error, Some(true));
    assert!(
        first_text(&again).contains("already ended (cancelled): nothing to cancel"),
        "{}",
        first_text(&again)
    );
    // Another session does not see it.
    let (other, _) = h.connect().await;
    let foreign = sluice::testing::call(&other, "sluice_result", json!({"operation": id}))
        .await
        .unwrap();
    assert!(
        first_text(&foreign).starts_with("unknown operation"),
        "{}",
        first_text(&foreign)
    );
}

/// A built-in tool called with an argument it does not take says which,
/// and shows a call it takes, as JSON a model can copy (the examples of
/// `sluice_read` and `sluice_query` came out as `{{"handle":…}}`).
#[tokio::test(start_paused = true)]
async fn a_builtin_tool_given_a_wrong_argument_shows_a_call_it_takes() {
    let h = Harness::new().start().await;
    for tool in [
        "sluice_read",
        "sluice_search",
        "sluice_query",
        "sluice_info",
    ] {
        let answer = h.call(tool, json!({"bogus": 1})).await;
        assert_eq!(answer.is_error, Some(true), "{tool}");
        let text = first_text(&answer);
        let (why, example) = text
            .split_once(". Call it as ")
            .unwrap_or_else(|| panic!("{tool}: {text}"));
        assert!(
            why.starts_with(&format!("{tool}: unknown field `bogus`")),
            "{text}"
        );
        // Each call the example offers is a JSON object.
        for call in example.trim_end_matches('.').split(" or ") {
            let call: Value = serde_json::from_str(call)
                .unwrap_or_else(|e| panic!("{tool}: `{call}` is not JSON ({e}): {text}"));
            assert!(call.is_object(), "{tool}: {text}");
        }
    }
}

/// sluice's own tools read an argument as a model or client plainly meant
/// it: `"page": "2"` (some clients send every argument as a string), and so
/// `_timeout_s` and `wait_s`, a boolean as `"true"`, a handle, cursor or operation id with spaces or a
/// newline around it (copied from a line of text). Each answer is the one
/// the argument written properly gets; a string that is no number is still
/// refused with a call to copy. (`sluice_query`, whose worker is the
/// binary's, in `query::queries_answer_inline_or_are_stored_and_chain`.)
#[tokio::test(start_paused = true)]
async fn builtin_arguments_are_read_as_a_model_plainly_meant_them() {
    let h = Harness::new().start().await;
    let handle = stored_handle(&h.call("inventory", json!({"count": 3000})).await);
    let spaced = format!(" {handle}\n");
    // `[tool, arguments]`: its answer's texts, and whether it is an error.
    let answer = |call: Value| {
        let h = &h;
        async move {
            let answer = h.call(call[0].as_str().unwrap(), call[1].clone()).await;
            let texts: Vec<String> = answer
                .content
                .iter()
                .filter_map(|block| block.as_text().map(|t| t.text.clone()))
                .collect();
            (texts, answer.is_error == Some(true))
        }
    };
    let same = |asked: Value, proper: Value| {
        let answer = &answer;
        async move {
            let (asked, proper) = (answer(asked).await, answer(proper).await);
            assert!(!asked.1, "{asked:?}");
            assert_eq!(asked, proper);
        }
    };
    same(
        json!(["sluice_read", {"handle": spaced, "page": "2", "max_tokens": " 900 "}]),
        json!(["sluice_read", {"handle": handle, "page": 2, "max_tokens": 900}]),
    )
    .await;
    same(
        json!(["sluice_read", {"handle": handle, "page": 2.0}]),
        json!(["sluice_read", {"handle": handle, "page": 2}]),
    )
    .await;
    same(
        json!(["sluice_search", {"handle": spaced, "pattern": "#1[0-9]", "regex": "true", "max_matches": "3", "context": "1"}]),
        json!(["sluice_search", {"handle": handle, "pattern": "#1[0-9]", "regex": true, "max_matches": 3, "context": 1}]),
    )
    .await;
    same(
        json!(["sluice_info", {"handle": spaced}]),
        json!(["sluice_info", {"handle": handle}]),
    )
    .await;
    // A cursor from page 1, with a newline after it.
    let first = h.call("sluice_read", json!({"handle": handle})).await;
    let cursor = first.meta.as_ref().unwrap()["sluice/page"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    same(
        json!(["sluice_read", {"cursor": format!("{cursor}\n")}]),
        json!(["sluice_read", {"cursor": cursor}]),
    )
    .await;
    // `_timeout_s` and `wait_s` as strings, an operation id with a space
    // before it.
    let asked = Instant::now();
    let started = h
        .call("slow_task", json!({"seconds": 2, "_timeout_s": "0.5"}))
        .await;
    assert_eq!(asked.elapsed(), Duration::from_millis(500), "at _timeout_s");
    let id = operation(&started)["id"].as_str().unwrap().to_owned();
    let waited = h
        .call(
            "sluice_result",
            json!({"operation": format!(" {id}"), "wait_s": "5"}),
        )
        .await;
    assert_eq!(first_text(&waited), "done after 2 s");
    // A number past any page, 100,000 digits long: refused in a bounded
    // answer.
    let huge = h
        .call(
            "sluice_read",
            json!({"handle": handle, "page": "9".repeat(100_000)}),
        )
        .await;
    assert_eq!(huge.is_error, Some(true));
    assert!(first_text(&huge).len() < 500, "{}", first_text(&huge).len());
    // What plainly is no number is refused, with a call to copy.
    let refused = h
        .call("sluice_read", json!({"handle": handle, "page": "two"}))
        .await;
    assert_eq!(refused.is_error, Some(true));
    let text = first_text(&refused);
    assert!(
        text.starts_with(
            "sluice_read: invalid value: string \"two\", expected a whole number (or a string of its digits)"
        ) && text.contains(". Call it as {\"handle\":\"h_…\",\"page\":2}"),
        "{text}"
    );
}
