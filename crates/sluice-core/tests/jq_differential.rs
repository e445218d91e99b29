//! Differential test: sluice's jq engine (jaq, through
//! `sluice_core::query::run`) against jq 1.6 (`/usr/bin/jq`, Debian's).
//!
//! Every line of `tests/jq/filters.txt` runs over one or more documents of
//! `tests/jq/` with both engines, and the outcomes are compared:
//!
//! - Both fail (jq exits non-zero, jaq returns `Err`): they agree. Error
//!   messages are not compared, nor are the outputs jq printed before failing
//!   (sluice drops everything when a query fails).
//! - One fails and the other does not: a difference.
//! - Both succeed: the outputs, parsed with `serde_json`, must be the same
//!   sequence of values. Numbers are compared as integers when both sides are
//!   integers (so lost precision in large integers shows), otherwise as `f64`
//!   with a relative tolerance of 1e-12 (so `1.0` equals `1` and `1e+100`
//!   equals `1e100`). Objects are compared with their key ORDER: serde_json's
//!   `Map` (an `IndexMap` here, with `preserve_order`) compares equal
//!   regardless of order, but key order is visible to sluice users (and jaq's
//!   deletions move keys around), so this test walks values itself.
//!
//! `tests/jq/differences.txt` lists the filter lines whose outcomes are known
//! to differ, each with a reason. The test fails if a line not listed differs
//! on any document, or a listed line no longer differs on any document (the
//! list must stay true), and names every such line with both outcomes.
//!
//! jq is `$JQ_DIFF_JQ` if set, else `/usr/bin/jq`, else `jq` on `PATH`.
//! Without it the test is skipped with a note, except under CI (`CI` set),
//! where it fails: install jq with `apt-get install jq`. The differences list
//! is for jq 1.6; another version is treated the same way.
//!
//! jq runs under a 128 MB address-space cap (`ulimit -v`) and a clock: jq
//! 1.6 loops forever, allocating, on a few filters (`indices("")`,
//! `gsub(""; …)`). A jq that is killed or crashes never agrees with jaq.
//!
//! `JQ_DIFF_VERBOSE=1 cargo test -p sluice-core --test jq_differential --
//! --nocapture` prints every difference, expected or not;
//! `JQ_DIFF_ONLY=<text>` runs only the lines containing `<text>` (and skips
//! the checks that need the whole suite).

#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_core::query::{self, OutputLimits};

/// The documents, `tests/jq/<name>.json`.
const DOCS: [&str; 5] = ["records", "nested", "lines", "mixed", "null"];

/// How long either engine may take over one filter and document.
const TIMEOUT: Duration = Duration::from_secs(10);

/// jq's address-space cap, in KiB.
const JQ_MEMORY_KB: u64 = 128 * 1024;

/// Generous limits: the suite's filters make few, small outputs.
const LIMITS: OutputLimits = OutputLimits {
    max_outputs: 100_000,
    max_bytes: 16 << 20,
};

/// At least this many comparisons must be made…
const MIN_COMPARISONS: usize = 300;
/// …and at least this many of them must have output on both sides.
const MIN_BOTH_OUTPUT: usize = 250;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/jq")
}

/// One line of `filters.txt`.
struct FilterLine {
    /// The line as written (trimmed): the key into `differences.txt`.
    text: String,
    /// The documents it runs over.
    docs: Vec<&'static str>,
    /// The jq program.
    filter: String,
    /// Its line number, for messages.
    number: usize,
}

/// Reads `filters.txt`: `[doc[,doc…]: ]filter`; no prefix means every
/// document. A prefix counts only when every name before the first `:` is a
/// document's name.
fn parse_filters(text: &str) -> Vec<FilterLine> {
    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        assert!(
            !line.contains('\t'),
            "filters.txt:{number}: no tabs in filters (differences.txt uses a tab as separator)"
        );
        assert!(
            seen.insert(line.to_owned()),
            "filters.txt:{number}: duplicate line `{line}`"
        );
        let (docs, filter) = match line.split_once(':') {
            Some((prefix, rest)) if prefix.split(',').all(|name| DOCS.contains(&name.trim())) => {
                let docs = prefix
                    .split(',')
                    .map(|name| *DOCS.iter().find(|d| **d == name.trim()).unwrap())
                    .collect();
                (docs, rest.trim())
            }
            _ => (DOCS.to_vec(), line),
        };
        assert!(!filter.is_empty(), "filters.txt:{number}: empty filter");
        // jq 1.6 takes an argument starting with `-` as an option, even after
        // the program's place; write `(-1)` instead.
        assert!(
            !filter.starts_with('-'),
            "filters.txt:{number}: a filter must not start with `-` (jq would read it as an option)"
        );
        lines.push(FilterLine {
            text: line.to_owned(),
            docs,
            filter: filter.to_owned(),
            number,
        });
    }
    lines
}

/// Reads `differences.txt`: `filter line<TAB>reason`.
fn parse_differences(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let (filter, reason) = line.split_once('\t').unwrap_or_else(|| {
            panic!(
                "differences.txt:{}: expected `filter line<TAB>reason`",
                i + 1
            )
        });
        let (filter, reason) = (filter.trim(), reason.trim());
        assert!(
            !reason.is_empty(),
            "differences.txt:{}: give a reason",
            i + 1
        );
        assert!(
            out.insert(filter.to_owned(), reason.to_owned()).is_none(),
            "differences.txt:{}: `{filter}` listed twice",
            i + 1
        );
    }
    out
}

/// What one engine did with one filter and document.
#[derive(Debug, Clone)]
enum Outcome {
    /// Outputs, as printed, and parsed (`None`: not JSON).
    Ok(Vec<(String, Option<Value>)>),
    /// An error (jq: non-zero exit; jaq: `Err`).
    Fail(String),
    /// Did not finish in time: always a difference.
    Timeout,
    /// jq was killed by a signal (an assertion, or out of memory under the
    /// cap), or failed to allocate memory: always a difference.
    Aborted(String),
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::Ok(outs) if outs.is_empty() => "(no output)".to_owned(),
            Outcome::Ok(outs) => {
                let all = outs
                    .iter()
                    .map(|(raw, _)| raw.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                if all.chars().count() > 300 {
                    format!("{}…", all.chars().take(300).collect::<String>())
                } else {
                    all
                }
            }
            Outcome::Fail(msg) => {
                let msg = msg.trim().lines().next().unwrap_or("").trim();
                let msg: String = msg.chars().take(160).collect();
                format!("error: {msg}")
            }
            Outcome::Timeout => format!("timed out after {TIMEOUT:?}"),
            Outcome::Aborted(msg) => {
                let msg = msg.trim().lines().last().unwrap_or("").trim();
                let msg: String = msg.chars().take(160).collect();
                format!("crashed or ran out of memory (under the cap): {msg}")
            }
        }
    }
}

/// Whether two outcomes agree: see the module's documentation.
fn agree(jq: &Outcome, jaq: &Outcome) -> bool {
    match (jq, jaq) {
        (Outcome::Fail(_), Outcome::Fail(_)) => true,
        (Outcome::Ok(a), Outcome::Ok(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (&x.1, &y.1) {
                    (Some(x), Some(y)) => same(x, y, true),
                    _ => false,
                })
        }
        _ => false,
    }
}

/// Whether `a` and `b` are the same value; `ordered`: objects' key order too.
fn same(a: &Value, b: &Value, ordered: bool) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return x == y;
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return x == y;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y, ordered))
        }
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            if ordered {
                x.iter()
                    .zip(y)
                    .all(|((kx, vx), (ky, vy))| kx == ky && same(vx, vy, ordered))
            } else {
                x.iter()
                    .all(|(k, vx)| y.get(k).is_some_and(|vy| same(vx, vy, ordered)))
            }
        }
        _ => false,
    }
}

/// Whether two successful outcomes differ only in objects' key order.
fn only_key_order(jq: &Outcome, jaq: &Outcome) -> bool {
    match (jq, jaq) {
        (Outcome::Ok(a), Outcome::Ok(b)) => {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (&x.1, &y.1) {
                    (Some(x), Some(y)) => same(x, y, false),
                    _ => false,
                })
        }
        _ => false,
    }
}

fn parse_outputs(raws: impl IntoIterator<Item = String>) -> Outcome {
    Outcome::Ok(
        raws.into_iter()
            .map(|raw| {
                let value = serde_json::from_str(&raw).ok();
                (raw, value)
            })
            .collect(),
    )
}

/// Finds jq: `$JQ_DIFF_JQ`, else `/usr/bin/jq`, else `jq` on `PATH`.
fn find_jq() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("JQ_DIFF_JQ") {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let usr = PathBuf::from("/usr/bin/jq");
    if usr.is_file() {
        return Some(usr);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("jq"))
        .find(|p| p.is_file())
}

fn run_jq(jq: &Path, filter: &str, doc: &Path) -> Outcome {
    // `sh -c 'ulimit -v …; exec "$0" "$@"' jq -c FILTER DOC`
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("ulimit -v {JQ_MEMORY_KB} && exec \"$0\" \"$@\""))
        .arg(jq)
        .arg("-c")
        .arg(filter)
        .arg(doc)
        .env("TZ", "UTC")
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run jq");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("cannot wait for jq") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let out = out_reader.join().unwrap();
    let err = err_reader.join().unwrap();
    match status {
        None => Outcome::Timeout,
        Some(status)
            if status.code().is_none()
                || String::from_utf8_lossy(&err).contains("memory allocation") =>
        {
            Outcome::Aborted(String::from_utf8_lossy(&err).into_owned())
        }
        Some(status) if !status.success() => Outcome::Fail(format!(
            "exit {:?}: {}",
            status.code(),
            String::from_utf8_lossy(&err)
        )),
        Some(_) => parse_outputs(
            String::from_utf8_lossy(&out)
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>(),
        ),
    }
}

/// Runs jaq in a thread of its own (a big stack; a clock: a runaway query's
/// thread is left behind, and the process ends with the test).
fn run_jaq(filter: &str, doc: &[u8]) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let (filter, doc) = (filter.to_owned(), doc.to_vec());
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let _ = tx.send(query::run(&filter, &doc, LIMITS));
        })
        .expect("cannot start a thread");
    match rx.recv_timeout(TIMEOUT) {
        Ok(Ok(outs)) => parse_outputs(outs),
        Ok(Err(err)) => Outcome::Fail(err.to_string()),
        Err(mpsc::RecvTimeoutError::Timeout) => Outcome::Timeout,
        Err(mpsc::RecvTimeoutError::Disconnected) => Outcome::Fail("jaq panicked".into()),
    }
}

/// One filter over one document.
struct Comparison {
    /// How long jq and jaq took.
    took: (Duration, Duration),
    doc: &'static str,
    jq: Outcome,
    jaq: Outcome,
}

/// Skips (returns `None`) or fails when jq 1.6 is missing, as the module says.
fn jq_or_skip() -> Option<PathBuf> {
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let problem = match find_jq() {
        None => "jq is not installed".to_owned(),
        Some(jq) => {
            let version = Command::new(&jq)
                .arg("--version")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            if version == "jq-1.6" {
                return Some(jq);
            }
            format!(
                "{} is `{version}`, but tests/jq/differences.txt is for jq 1.6",
                jq.display()
            )
        }
    };
    assert!(
        !ci,
        "{problem}: the jq differential test needs Debian's jq 1.6 (`apt-get install jq`)"
    );
    println!(
        "note: {problem}; skipping the jq differential test (install jq: `apt-get install jq`)"
    );
    None
}

#[test]
fn jaq_agrees_with_jq_except_where_listed() {
    let Some(jq) = jq_or_skip() else { return };
    let dir = data_dir();
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let only = std::env::var("JQ_DIFF_ONLY").ok();
    let filters: Vec<FilterLine> = parse_filters(&read("filters.txt"))
        .into_iter()
        .filter(|f| only.as_ref().is_none_or(|o| f.text.contains(o.as_str())))
        .collect();
    let expected = parse_differences(&read("differences.txt"));
    let docs: BTreeMap<&str, (PathBuf, Vec<u8>)> = DOCS
        .iter()
        .map(|name| {
            let path = dir.join(format!("{name}.json"));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}.json: {e}"));
            (*name, (path, bytes))
        })
        .collect();

    let known: HashSet<&str> = filters.iter().map(|f| f.text.as_str()).collect();
    if only.is_none() {
        let stale: Vec<&String> = expected
            .keys()
            .filter(|k| !known.contains(k.as_str()))
            .collect();
        assert!(
            stale.is_empty(),
            "differences.txt lists lines that are not in filters.txt: {stale:#?}"
        );
    }

    let jobs: Vec<(usize, &'static str)> = filters
        .iter()
        .enumerate()
        .flat_map(|(i, f)| f.docs.iter().map(move |d| (i, *d)))
        .collect();
    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::with_capacity(jobs.len()));
    let workers = std::thread::available_parallelism().map_or(4, |n| n.get().clamp(2, 8));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let j = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(i, doc)) = jobs.get(j) else { break };
                    let filter = &filters[i].filter;
                    let (path, bytes) = &docs[doc];
                    let start = Instant::now();
                    let jq = run_jq(&jq, filter, path);
                    let middle = Instant::now();
                    let jaq = run_jaq(filter, bytes);
                    let took = (middle - start, middle.elapsed());
                    results
                        .lock()
                        .unwrap()
                        .push((i, Comparison { took, doc, jq, jaq }));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, c)| (*i, DOCS.iter().position(|d| *d == c.doc)));

    let comparisons = results.len();
    let both_output = results
        .iter()
        .filter(|(_, c)| {
            matches!((&c.jq, &c.jaq), (Outcome::Ok(a), Outcome::Ok(b)) if !a.is_empty() && !b.is_empty())
        })
        .count();
    let both_fail = results
        .iter()
        .filter(|(_, c)| matches!((&c.jq, &c.jaq), (Outcome::Fail(_), Outcome::Fail(_))))
        .count();

    // The lines that differ, with their differing comparisons.
    let mut differing: BTreeMap<usize, Vec<&Comparison>> = BTreeMap::new();
    for (i, c) in &results {
        if !agree(&c.jq, &c.jaq) {
            differing.entry(*i).or_default().push(c);
        }
    }
    let verbose = std::env::var_os("JQ_DIFF_VERBOSE").is_some();
    let describe = |i: usize, cs: &[&Comparison]| {
        let mut s = format!("  filters.txt:{}: {}\n", filters[i].number, filters[i].text);
        for c in cs {
            let order = if only_key_order(&c.jq, &c.jaq) {
                " (only objects' key order differs)"
            } else {
                ""
            };
            s += &format!(
                "    on {}.json{order}:\n      jq:  {}\n      jaq: {}\n",
                c.doc,
                c.jq.describe(),
                c.jaq.describe()
            );
        }
        s
    };

    let mut unexpected = String::new();
    let mut listed_differing = BTreeSet::new();
    for (&i, cs) in &differing {
        let text = &filters[i].text;
        if let Some(reason) = expected.get(text) {
            listed_differing.insert(text.as_str());
            if verbose {
                println!("expected difference ({reason}):\n{}", describe(i, cs));
            }
        } else {
            unexpected += &describe(i, cs);
        }
    }
    let mut no_longer = String::new();
    for (text, reason) in &expected {
        if listed_differing.contains(text.as_str()) || !known.contains(text.as_str()) {
            continue;
        }
        let (i, f) = filters
            .iter()
            .enumerate()
            .find(|(_, f)| &f.text == text)
            .unwrap();
        no_longer += &format!("  filters.txt:{}: {}\t{reason}\n", f.number, f.text);
        for (_, c) in results.iter().filter(|(j, _)| *j == i) {
            no_longer += &format!("    on {}.json: both give {}\n", c.doc, c.jq.describe());
        }
    }

    println!(
        "jq differential: {} filters, {comparisons} comparisons ({both_output} with output on both sides, {both_fail} failing on both), {} lines differing ({} listed in differences.txt)",
        filters.len(),
        differing.len(),
        expected.len()
    );

    if verbose {
        let jq_total: Duration = results.iter().map(|(_, c)| c.took.0).sum();
        let jaq_total: Duration = results.iter().map(|(_, c)| c.took.1).sum();
        println!("time: jq {jq_total:?} in all, jaq {jaq_total:?}");
        let mut slow: Vec<_> = results.iter().collect();
        slow.sort_by_key(|(_, c)| std::cmp::Reverse(c.took.0 + c.took.1));
        for (i, c) in slow.iter().take(10) {
            println!(
                "slow: jq {:?}, jaq {:?}: {} on {}.json",
                c.took.0, c.took.1, filters[*i].text, c.doc
            );
        }
    }

    let mut failure = String::new();
    if !unexpected.is_empty() {
        failure += &format!(
            "jaq and jq 1.6 differ on lines not listed in tests/jq/differences.txt (fix sluice, or list the line with a reason: `<line><TAB><reason>`):\n{unexpected}"
        );
    }
    if !no_longer.is_empty() {
        failure += &format!(
            "lines listed in tests/jq/differences.txt now agree on every document (remove them from the list):\n{no_longer}"
        );
    }
    assert!(failure.is_empty(), "{failure}");
    if only.is_some() {
        return;
    }
    assert!(
        comparisons >= MIN_COMPARISONS,
        "only {comparisons} comparisons were made (want at least {MIN_COMPARISONS})"
    );
    assert!(
        both_output >= MIN_BOTH_OUTPUT,
        "only {both_output} comparisons had output from both engines (want at least {MIN_BOTH_OUTPUT})"
    );
}
