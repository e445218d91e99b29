//! Recursive documents: server-filesystem's `directory_tree` of a real tree
//! on disk. The stored answer says it is a tree (its shape, node count and
//! depth), offers jq filters that work at every depth, and every one of
//! them, run through `sluice_query`, gives what the direct result holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};
use sluice_core::budget::count_tokens;

use crate::support::*;

/// A deterministic tree of 4,436 entries, 9 at the root: 564 directories
/// on three levels (`dir_0_0/dir_1_2/dir_2_7`), 3,872 files
/// (`file_3.txt`), six directories empty.
fn directory_tree_on_disk(root: &Path) {
    let (mut level_1, mut level_2) = (0, 0);
    let files = |dir: &Path, n: usize| {
        std::fs::create_dir_all(dir).unwrap();
        for f in 0..n {
            std::fs::write(dir.join(format!("file_{f}.txt")), "").unwrap();
        }
    };
    files(root, 3);
    for a in 0..6 {
        let dir_a = root.join(format!("dir_0_{a}"));
        files(&dir_a, 2);
        for b in 0..3 + a % 3 {
            let dir_b = dir_a.join(format!("dir_1_{b}"));
            files(&dir_b, 3);
            for c in 0..22 + usize::from(level_1 % 4 == 0) {
                let n = if level_2 % 89 == 88 {
                    0
                } else {
                    7 + usize::from(level_2 < 90)
                };
                files(&dir_b.join(format!("dir_2_{c}")), n);
                level_2 += 1;
            }
            level_1 += 1;
        }
    }
}

/// What the direct result holds, computed in Rust: every entry's path
/// (names joined with `/`) with its type and number of children.
fn entries(tree: &Value) -> BTreeMap<String, (String, u64)> {
    fn walk(nodes: &Value, prefix: &str, out: &mut BTreeMap<String, (String, u64)>) {
        for node in nodes.as_array().expect("an array of entries") {
            let path = format!("{prefix}{}", node["name"].as_str().unwrap());
            let kind = node["type"].as_str().unwrap().to_owned();
            let children = node
                .get("children")
                .map_or(0, |c| c.as_array().unwrap().len());
            out.insert(path.clone(), (kind, children as u64));
            if let Some(children) = node.get("children") {
                walk(children, &format!("{path}/"), out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(tree, "", &mut out);
    out
}

/// The next steps of a stored answer, as a scripted agent reads them: a
/// built-in tool, one JSON object of arguments, ` — ` and what it gives.
fn next_steps(text: &str) -> Vec<(String, Value, String)> {
    text.lines()
        .filter_map(|line| {
            let (tool, rest) = line.trim().split_once(' ')?;
            BUILTINS.contains(&tool).then_some(())?;
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            let args = values.next()?.ok()?;
            let what = rest[values.byte_offset()..]
                .strip_prefix(" — ")
                .unwrap_or_else(|| panic!("no ` — ` after the arguments: {line}"));
            Some((tool.to_owned(), args, what.to_owned()))
        })
        .collect()
}

/// The outputs of a query: its one value, read back whole when the answer
/// was stored in turn.
async fn query_value(client: &Client, handle: &str, filter: &str) -> Value {
    let result = call(
        client,
        "sluice_query",
        json!({"handle": handle, "filter": filter}),
    )
    .await;
    assert_ne!(
        result.is_error,
        Some(true),
        "{filter}: {}",
        first_text(&result)
    );
    if meta(&result, "sluice/stored").is_some() {
        return serde_json::from_str(&restore(client, &result).await).unwrap();
    }
    serde_json::from_str(&first_text(&result)).unwrap_or_else(|e| {
        panic!(
            "{filter}: one JSON value expected ({e}): {}",
            first_text(&result)
        )
    })
}

#[tokio::test]
async fn a_directory_tree_is_a_tree_and_every_filter_offered_is_true_at_every_depth() {
    let dir = TempDir::new("recursive-tree");
    let root = dir.0.join("tree");
    directory_tree_on_disk(&root);
    let root = root.display().to_string();
    let server = server_filesystem(&root);

    let (direct, _) = connect(&server).await;
    let sent = call(&direct, "directory_tree", json!({"path": root})).await;
    let sent_text = first_text(&sent);
    let want: Value = serde_json::from_str(&sent_text).unwrap();
    assert_eq!(
        sent.structured_content,
        Some(json!({"content": sent_text})),
        "server-filesystem sends the tree twice: as text and as structuredContent"
    );
    let truth = entries(&want);
    let count = |kind: &str| truth.values().filter(|(k, _)| k == kind).count();
    assert_eq!(
        (truth.len(), want.as_array().unwrap().len(), count("file")),
        (4436, 9, 3872)
    );

    let (client, _) = connect(&via_sluice(&server)).await;
    let answer = call(&client, "directory_tree", json!({"path": root})).await;
    let text = first_text(&answer);
    let handle = stored_handle(&answer);
    let link = serde_json::to_string(&answer.content[1]).unwrap();
    println!(
        "the answer ({} tokens; {} with its link):\n{text}\n{link}",
        count_tokens(&text, 1.0),
        count_tokens(&format!("{text}{link}"), 1.0)
    );

    // Short: what the model reads, the handle written three times at most.
    assert!(count_tokens(&text, 1.0) <= 450, "{text}");
    assert!(
        text.matches(&handle).count() + link.matches(&handle).count() <= 3,
        "{text}\n{link}"
    );

    // The shape says it is a tree; the sizes are the document's.
    assert!(
        text.contains(
            r#"Shape: [{name: string, type: "directory"|"file", children?: [<recursive>]}] — a tree of 4,436 nodes (9 at the top), 4 levels deep"#
        ),
        "{text}"
    );

    // Sizes: the data once, said to have been sent twice.
    let stored = meta(&answer, "sluice/stored").unwrap();
    assert_eq!(stored["bytes"], sent_text.len());
    assert_eq!(stored["chars"], sent_text.chars().count());
    assert_eq!(stored["sent_twice"], true);
    let compact = serde_json::to_string(&want).unwrap();
    assert_eq!(stored["stored_bytes"], compact.len());
    let tokens = f64::from(count_tokens(&sent_text, 1.25));
    let said = stored["tokens"].as_f64().unwrap();
    assert!(
        (said - tokens).abs() <= tokens * 0.1,
        "{said} tokens said for {tokens} in one copy"
    );
    assert!(
        text.contains(&format!(
            "tokens ({} of JSON, sent both as text and as structuredContent; stored compact: {})",
            sluice_core::format::bytes(sent_text.len() as u64),
            sluice_core::format::bytes(compact.len() as u64),
        )),
        "{text}"
    );

    // The first step reads the result; every jq filter offered is run and
    // checked against the direct result.
    let steps = next_steps(&text);
    assert_eq!(
        (steps[0].0.as_str(), &steps[0].1),
        ("sluice_read", &json!({"handle": handle}))
    );
    assert!(steps[0].2.contains("page"), "{}", steps[0].2);
    let first_page = call(&client, "sluice_read", steps[0].1.clone()).await;
    assert_ne!(first_page.is_error, Some(true));
    let mut checked = BTreeSet::new();
    for (tool, args, what) in &steps[1..] {
        if tool != "sluice_query" {
            continue;
        }
        assert_eq!(
            args.as_object().unwrap().len(),
            1,
            "only the filter: {args}"
        );
        let filter = args["filter"].as_str().unwrap();
        let got = query_value(&client, &handle, filter).await;
        if what.contains("how many of each type") {
            assert_eq!(
                got,
                json!([
                    {"type": "directory", "count": count("directory")},
                    {"type": "file", "count": count("file")},
                ])
            );
            checked.insert("counts");
        } else if what.contains("most children") {
            let got = got.as_array().unwrap();
            assert_eq!(got.len(), 10, "{what}");
            let mut most: Vec<u64> = truth.values().map(|(_, n)| *n).collect();
            most.sort_unstable_by(|a, b| b.cmp(a));
            let said: Vec<u64> = got
                .iter()
                .map(|n| n["children"].as_u64().unwrap())
                .collect();
            assert_eq!(said, most[..10], "{got:?}");
            for node in got {
                let path = node["path"].as_str().unwrap();
                assert_eq!(truth[path].1, node["children"].as_u64().unwrap(), "{path}");
            }
            checked.insert("largest");
        } else if what.contains("with its path") {
            let got: BTreeMap<String, String> = got
                .as_array()
                .unwrap()
                .iter()
                .map(|n| {
                    (
                        n["path"].as_str().unwrap().to_owned(),
                        n["type"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let paths: BTreeMap<String, String> = truth
                .iter()
                .map(|(path, (kind, _))| (path.clone(), kind.clone()))
                .collect();
            assert_eq!(got, paths);
            assert!(got.contains_key("dir_0_0/dir_1_2/dir_2_7/file_3.txt"));
            checked.insert("paths");
        } else {
            panic!("a filter the test does not check: {what}: {filter}");
        }
    }
    assert_eq!(
        checked,
        BTreeSet::from(["counts", "largest", "paths"]),
        "{text}"
    );
    direct.cancel().await.unwrap();
    client.cancel().await.unwrap();
}
