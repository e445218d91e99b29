//! Who sees what without `[auth]`: a session's stored results and
//! operations are its own; a stateless (2026-07-28) client's are
//! capabilities, reachable by their id and listed or hinted to no one; and
//! anonymous clients' operation limits are counted per address.

use std::net::IpAddr;

use serde_json::json;

use crate::support::*;

fn from(address: &str) -> IpAddr {
    address.parse().unwrap()
}

/// The texts a client can get that could name ids: its listing, and the
/// hints of errors about ids that do not exist.
async fn everything_listed_to(client: &Client) -> String {
    let info = first_text(&call(client, "sluice_info", json!({})).await);
    let read = first_text(&call(client, "sluice_read", json!({"handle": "h_nothere"})).await);
    let result =
        first_text(&call(client, "sluice_result", json!({"operation": "op_nothere"})).await);
    format!("{info}\n{read}\n{result}")
}

#[tokio::test]
async fn stateless_clients_never_see_each_others_handles_or_operations() {
    let sluice = HttpSluice::start(&[], &sample()).await;
    let alice = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let bob = stateless_http_client(&sluice.url, from("127.0.0.1")).await;

    let stored = call(&alice, "inventory", json!({"count": 3000})).await;
    let handle = stored_handle(&stored);
    let running = call(
        &alice,
        "slow_task",
        json!({"seconds": 30, "quiet": true, "_timeout_s": 0.2}),
    )
    .await;
    let operation = meta(&running, "sluice/operation").expect("an operation")["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Neither bob nor alice herself is shown an anonymous id: every
    // sessionless client is "anonymous", so a listing would show all.
    for client in [&bob, &alice] {
        let listed = everything_listed_to(client).await;
        assert!(!listed.contains(&handle), "{listed}");
        assert!(!listed.contains(&operation), "{listed}");
        assert!(listed.contains("not listed"), "{listed}");
    }
    // The id is the capability: whoever holds it reads it.
    let page = call(&alice, "sluice_read", json!({"handle": handle})).await;
    assert_ne!(page.is_error, Some(true), "{}", first_text(&page));
    let cancelled = call(&alice, "sluice_cancel", json!({"operation": operation})).await;
    assert_ne!(cancelled.is_error, Some(true), "{}", first_text(&cancelled));

    // A session (2025-11-25) still lists its own results to itself.
    let (session, _) = connect_http(&sluice.url).await;
    let own = stored_handle(&call(&session, "inventory", json!({"count": 3000})).await);
    let listed = everything_listed_to(&session).await;
    assert!(listed.contains(&own), "{listed}");
    assert!(!listed.contains(&handle), "{listed}");
    // ...and another session is not shown it.
    let (other, _) = connect_http(&sluice.url).await;
    let listed = everything_listed_to(&other).await;
    assert!(!listed.contains(&own), "{listed}");
    let read = call(&other, "sluice_read", json!({"handle": own})).await;
    assert_eq!(read.is_error, Some(true));
    assert!(
        first_text(&read).contains("unknown handle"),
        "{}",
        first_text(&read)
    );
    for client in [alice, bob, session, other] {
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn anonymous_operation_limits_are_counted_per_address() {
    let dir = TempDir::new("owners-limits");
    let config = dir.file(
        "sluice.toml",
        &(toml_upstream("sample", &sample()) + "[operations]\nmax_running = 1\n"),
    );
    let sluice = HttpSluice::start(&["--config", &config.display().to_string()], &[]).await;
    let slow = json!({"seconds": 30, "quiet": true, "_timeout_s": 0.2});

    let first = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let started = call(&first, "slow_task", slow.clone()).await;
    assert!(
        meta(&started, "sluice/operation").is_some(),
        "{}",
        first_text(&started)
    );

    // Another client from the same address shares its share...
    let same_place = stateless_http_client(&sluice.url, from("127.0.0.1")).await;
    let refused = call(&same_place, "slow_task", slow.clone()).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        first_text(&refused).contains("`[operations] max_running`"),
        "{}",
        first_text(&refused)
    );
    // ...and the refusal does not name the running operation's id.
    let id = meta(&started, "sluice/operation").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !first_text(&refused).contains(&id),
        "{}",
        first_text(&refused)
    );

    // A client elsewhere is not held up by it.
    let elsewhere = stateless_http_client(&sluice.url, from("127.0.0.2")).await;
    let own = call(&elsewhere, "slow_task", slow).await;
    assert!(
        meta(&own, "sluice/operation").is_some(),
        "{}",
        first_text(&own)
    );
    for client in [first, same_place, elsewhere] {
        client.cancel().await.unwrap();
    }
}
