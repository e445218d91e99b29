//! What sluice costs a model on every turn: its own tools, and what it adds
//! to each upstream tool, measured on server-filesystem's `tools/list`
//! directly and through sluice (o200k tokens of the compact JSON of each
//! tool's name, description and input schema, as a client shows them).

use rmcp::model::Tool;
use serde_json::json;
use sluice_core::budget::count_tokens;

use crate::support::*;

/// sluice's six tools together.
const BUILTINS_AT_MOST: u32 = 550;
/// `_timeout_s`, and `_fresh` on a cached tool, each.
const PER_TOOL_AT_MOST: u32 = 10;
/// server-filesystem's whole list, through sluice minus direct.
const LIST_OVERHEAD_AT_MOST: u32 = 700;

/// A tool as a model reads it, in o200k tokens.
fn tokens(tool: &Tool) -> u32 {
    let listed = json!({
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
    });
    count_tokens(&listed.to_string(), 1.0)
}

/// The tokens each upstream tool gained through sluice.
fn added(direct: &[Tool], proxied: &[Tool]) -> Vec<(String, u32)> {
    direct
        .iter()
        .map(|d| {
            let p = proxied
                .iter()
                .find(|p| p.name == d.name)
                .unwrap_or_else(|| panic!("{} is not listed through sluice", d.name));
            (d.name.to_string(), tokens(p).saturating_sub(tokens(d)))
        })
        .collect()
}

#[tokio::test]
async fn the_tool_list_through_sluice_stays_lean() {
    let dir = TempDir::new("tool-list");
    let server = server_filesystem(&dir.0.display().to_string());
    let (direct, _) = connect(&server).await;
    let direct_tools = direct.list_all_tools().await.unwrap();
    let (client, _) = connect(&via_sluice(&server)).await;
    let proxied_tools = client.list_all_tools().await.unwrap();

    let builtins: u32 = proxied_tools
        .iter()
        .filter(|t| BUILTINS.contains(&t.name.as_ref()))
        .map(tokens)
        .sum();
    let timeout = added(&direct_tools, &proxied_tools);
    let direct_total: u32 = direct_tools.iter().map(tokens).sum();
    let proxied_total: u32 = proxied_tools.iter().map(tokens).sum();
    let overhead = proxied_total - direct_total;

    // The same upstream with two tools cached: they take `_fresh` too.
    let config = dir.file(
        "cached.toml",
        &format!(
            "{}[upstreams.fs.tools.read_text_file]\ncache = {{ ttl_s = 60 }}\n\n[upstreams.fs.tools.list_directory]\ncache = {{ ttl_s = 60 }}\n",
            toml_upstream("fs", &server)
        ),
    );
    let (cached_client, _) = connect(&via_config(&config)).await;
    let cached_tools = cached_client.list_all_tools().await.unwrap();
    let takes_fresh = |name: &str| {
        cached_tools
            .iter()
            .find(|t| t.name == name)
            .is_some_and(|t| t.input_schema["properties"].get("_fresh").is_some())
    };
    // Both added, minus what `_timeout_s` alone adds (the same order).
    let fresh: Vec<(String, u32)> = added(&direct_tools, &cached_tools)
        .into_iter()
        .zip(&timeout)
        .filter(|((name, _), _)| takes_fresh(name))
        .map(|((name, both), (_, alone))| (name, both.saturating_sub(*alone)))
        .collect();

    println!("built-in tools: {builtins} tokens (at most {BUILTINS_AT_MOST})");
    println!("_timeout_s per upstream tool: {timeout:?} (at most {PER_TOOL_AT_MOST} each)");
    println!("_fresh per cached tool: {fresh:?} (at most {PER_TOOL_AT_MOST} each)");
    println!(
        "server-filesystem tools/list: {direct_total} direct, {proxied_total} through sluice: +{overhead} (at most {LIST_OVERHEAD_AT_MOST})"
    );

    assert_eq!(timeout.len(), direct_tools.len());
    assert_eq!(fresh.len(), 2, "{fresh:?}");
    assert!(builtins <= BUILTINS_AT_MOST, "built-in tools: {builtins}");
    for (name, n) in timeout.iter().chain(&fresh) {
        assert!(*n > 0 && *n <= PER_TOOL_AT_MOST, "{name}: {n} tokens added");
    }
    assert!(
        overhead <= LIST_OVERHEAD_AT_MOST,
        "the list costs +{overhead}"
    );
    direct.cancel().await.unwrap();
    client.cancel().await.unwrap();
    cached_client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_lean_list_still_says_what_changes_a_models_call() {
    let dir = TempDir::new("tool-list-words");
    let (client, _) = connect(&via_sluice(&server_filesystem(
        &dir.0.display().to_string(),
    )))
    .await;
    let tools = client.list_all_tools().await.unwrap();
    let listed = |name: &str| -> String {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        json!({"description": tool.description, "inputSchema": tool.input_schema}).to_string()
    };
    // Where handles and cursors come from, what a text is to jq, what
    // `path` is, the context on each side, and the arguments sluice adds.
    for (tool, words) in [
        ("sluice_read", "handle"),
        ("sluice_read", "next_cursor"),
        ("sluice_read", "JSON Pointer"),
        ("sluice_search", "before"),
        ("sluice_search", "after"),
        ("sluice_search", "context"),
        ("sluice_query", "array of lines"),
        ("sluice_result", "_timeout_s"),
        ("sluice_result", "_fresh"),
    ] {
        assert!(
            listed(tool).contains(words),
            "{tool}: {words}: {}",
            listed(tool)
        );
    }
    assert!(
        !listed("sluice_read").contains("as text"),
        "`path: \"\"` is no longer promised to page the document as text"
    );
    client.cancel().await.unwrap();
}
