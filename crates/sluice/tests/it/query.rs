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
            "sluice_query {{\"handle\":\"{handle}\",\"filter\":\".rows | length\"}} — jq over it"
        )),
        "the answer offers a query: {}",
        first_text(&answer)
    );
    let q = |filter: &str| json!({"handle": handle, "filter": filter});

    let count = call(&client, "sluice_query", q(".rows | length")).await;
    assert_eq!(first_text(&count), "20000");
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
    let many = error_text(&call(&client, "sluice_query", q("range(1000000)")).await);
    assert!(many.contains("more than 100000 outputs"), "{many}");
    let deep = error_text(&call(&client, "sluice_query", q("def f: [f]; f")).await);
    assert!(deep.contains("recursed too deep"), "{deep}");
    // `[repeat(1)]` reaches the limit too, after ~30 s in a debug build:
    // a 2 GB string gets there at once.
    let memory = error_text(&call(&client, "sluice_query", q(r#""x" * 2000000000"#)).await);
    assert!(memory.contains("stopped at 1024 MiB"), "{memory}");
    let nan = error_text(&call(&client, "sluice_query", q("nan")).await);
    assert!(nan.contains("not valid JSON"), "{nan}");
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
