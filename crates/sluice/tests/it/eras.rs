//! Upstreams of both protocol eras, and more real servers: mcp-server-git
//! (Python SDK, speaks 2026-07-28) reached in either era, and
//! server-filesystem (TypeScript SDK, 2025-11-25) with a large result.

use rmcp::model::CallToolRequestParams;

use crate::support::*;

/// A git repository with two commits, in a fresh directory.
fn git_repo(dir: &TempDir) -> std::path::PathBuf {
    let repo = dir.0.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| git_in(&repo, args);
    git(&["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "first\n").unwrap();
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "first commit"]);
    std::fs::write(repo.join("a.txt"), "second\n").unwrap();
    git(&["commit", "-q", "-am", "second commit"]);
    repo
}

fn mcp_server_git() -> String {
    peers().join("py/bin/mcp-server-git").display().to_string()
}

async fn git_log_through(protocol: &str) {
    let dir = TempDir::new(&format!("git-{protocol}"));
    let repo = git_repo(&dir);
    let config = dir.file(
        "sluice.toml",
        &format!(
            "[upstreams.git]\ncommand = {:?}\nargs = [\"--repository\", {:?}]\nprotocol = {protocol:?}\n",
            mcp_server_git(),
            repo.display().to_string()
        ),
    );
    let (client, _) = connect(&via_config(&config)).await;
    let tools = tool_names(&client).await;
    assert!(tools.contains(&"git_log".to_owned()), "{tools:?}");
    let log = client
        .call_tool(
            CallToolRequestParams::new("git_log")
                .with_arguments(args(serde_json::json!({"repo_path": repo, "max_count": 5}))),
        )
        .await
        .unwrap();
    let text = first_text(&log);
    assert!(
        text.contains("second commit") && text.contains("first commit"),
        "{text}"
    );
    // The same call made directly gives the same result.
    let (direct, _) = connect(&cmd(&[
        &mcp_server_git(),
        "--repository",
        repo.to_str().unwrap(),
    ]))
    .await;
    let want = direct
        .call_tool(
            CallToolRequestParams::new("git_log")
                .with_arguments(args(serde_json::json!({"repo_path": repo, "max_count": 5}))),
        )
        .await
        .unwrap();
    assert_eq!(log.content, want.content);
    client.cancel().await.unwrap();
    direct.cancel().await.unwrap();
}

#[tokio::test]
async fn a_2026_upstream_serves_an_initialize_era_client() {
    git_log_through("2026-07-28").await;
}

#[tokio::test]
async fn the_same_upstream_reached_by_initialize() {
    git_log_through("2025-11-25").await;
}

#[tokio::test]
async fn auto_picks_an_era_the_upstream_speaks() {
    git_log_through("auto").await;
}

#[tokio::test]
async fn server_filesystem_directory_tree_is_the_same_through_sluice() {
    let root = repo().display().to_string();
    let server = server_filesystem(&root);
    let (direct, _) = connect(&server).await;
    let (proxied, _) = connect(&via_sluice(&server)).await;
    assert_eq!(
        upstream_part(proxied.list_all_tools().await.unwrap()),
        as_listed_by_sluice(direct.list_all_tools().await.unwrap())
    );
    let params = CallToolRequestParams::new("directory_tree").with_arguments(args(
        serde_json::json!({"path": root, "excludePatterns": ["target", ".git", "node_modules"]}),
    ));
    let want = direct.call_tool(params.clone()).await.unwrap();
    let got = proxied.call_tool(params).await.unwrap();
    assert!(first_text(&want).len() > 1000);
    if meta(&got, "sluice/stored").is_some() {
        let whole: serde_json::Value =
            serde_json::from_str(&restore(&proxied, &got).await).unwrap();
        let direct: serde_json::Value = serde_json::from_str(&first_text(&want)).unwrap();
        assert_eq!(whole, direct);
    } else {
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap()
        );
    }
    direct.cancel().await.unwrap();
    proxied.cancel().await.unwrap();
}
