//! Notifications an upstream sends on its own: list changes, resource
//! updates, log messages, each reaching the client through sluice.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, LoggingLevel, SetLevelRequestParams, SubscribeRequestParams,
};

use crate::support::*;

const TEN_SECONDS: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_tool_added_upstream_is_announced_and_callable() {
    let (client, inbox) = connect(&via_sluice(&py_server())).await;
    let before = client.list_all_tools().await.unwrap().len();
    let added = client
        .call_tool(
            CallToolRequestParams::new("add_tool")
                .with_arguments(args(serde_json::json!({"name": "extra"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&added), "added extra");
    eventually(TEN_SECONDS, "tools/list_changed", || {
        inbox.lock().unwrap().tool_list_changed > 0
    })
    .await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), before + 1);
    let extra = client
        .call_tool(
            CallToolRequestParams::new("extra")
                .with_arguments(args(serde_json::json!({"text": "hi"}))),
        )
        .await
        .unwrap();
    assert_eq!(first_text(&extra), "extra: hi");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_subscribed_resource_update_reaches_the_client() {
    let fixture = conformance_fixture();
    let (client, inbox) = connect(&via_sluice(&fixture)).await;
    client
        .subscribe(SubscribeRequestParams::new("test://watched-resource"))
        .await
        .unwrap();
    let notified = client
        .call_tool(CallToolRequestParams::new("test_notify_watched_resource"))
        .await
        .unwrap();
    assert_eq!(first_text(&notified), "subscribed=true");
    eventually(TEN_SECONDS, "notifications/resources/updated", || {
        !inbox.lock().unwrap().resource_updated.is_empty()
    })
    .await;
    assert_eq!(
        inbox.lock().unwrap().resource_updated,
        ["test://watched-resource"]
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn log_messages_reach_the_client_at_the_level_it_set() {
    let (client, inbox) = connect(&via_sluice(&py_server())).await;
    client
        .set_level(SetLevelRequestParams::new(LoggingLevel::Warning))
        .await
        .unwrap();
    for (level, message) in [("debug", "too quiet"), ("error", "loud enough")] {
        client
            .call_tool(CallToolRequestParams::new("log").with_arguments(args(
                serde_json::json!({"level": level, "message": message}),
            )))
            .await
            .unwrap();
    }
    eventually(TEN_SECONDS, "notifications/message", || {
        !inbox.lock().unwrap().logs.is_empty()
    })
    .await;
    let logs: Vec<String> = inbox
        .lock()
        .unwrap()
        .logs
        .iter()
        .map(|l| l.data.to_string())
        .collect();
    assert_eq!(logs, ["\"loud enough\""]);
    client.cancel().await.unwrap();
}
