//! What storing and paging a large JSON result costs, measured side by side.
//!
//! Documents of 1, 10 and 100 MB are generated: `{"count": N, "rows": [...]}`
//! with rows such as `{"id": i, "name": "row i été", "kind": "beta",
//! "score": 12.5, "tags": ["a", "b"], "owner": {"team": "t3", "since": 2010}}`,
//! pretty-printed with a 1-space indent (as Python's `json.dumps(indent=1)`),
//! so that minifying has work to do.
//!
//! 1. Ingest: `Document::json` (validate, minify, find the largest arrays),
//!    `Overview::of` (sampled shape and preview; it also indexes the items of
//!    the bulk array) and the first `doc.plan(None, page budget)`; median of
//!    several runs, in ms and MB/s of the pretty input, per stage and in all;
//!    then the json stage's parts timed alone (validating with `IgnoredAny`,
//!    `scan::minify`, `scan::largest_arrays`).
//! 2. Serving the middle page of each document from a built plan:
//!    `plan.serve(&doc, plan.start_of(k))`, median of 51 rounds that
//!    interleave the three documents (so a busy moment of a shared machine
//!    hits all sizes alike), with the time of counting that page's tokens
//!    alone (`tokens_within`) beside it; the ratio of the 100 MB page to the
//!    1 MB page (goal: at most 2).
//! 3. The seed's way of serving the same page: parse the whole (pretty)
//!    text into a `serde_json::Value`, take `rows`, serialize the same items
//!    (and drop the tree); the ratio seed / sluice (goal: at least 1000× at
//!    100 MB). The two pages are checked to hold the same items.
//! 4. Resident memory of a stored 100 MB document: `VmRSS` growth, measured
//!    in a child process (`pages --rss BYTES`) so that nothing else this
//!    bench allocated is counted; from before the text is generated (the
//!    tokenizer tables already loaded) to after the document is in a
//!    `MemoryStore` with its plan, the text it came from dropped. Divided by
//!    the JSON bytes, pretty and compact (goal: at most 1.2×).
//! 5. Token counting: `count_tokens` on 1 and 10 MB of compact JSON, MB/s.
//! 6. Search: `search::search` over 100 MB as JSON strings and as text
//!    lines, MB/s, vs `grep -c` and `rg -c -j1` on the same lines.
//!
//! The page budget is `Budget::default().less(600, 1000)`, as the gateway
//! reserves room for a page's wrapper. MB are 10^6 bytes.
//!
//! 7. Trees (`-- --tree` alone): a directory tree of 1, 10 and 100 MB whose
//!    root entries are larger than a page, planned (sluice descends into
//!    them) and served; and 120 levels of nesting around 10 MB, planned.
//!
//! 8. Stores (`-- --store` alone): 1 and 100 MB documents stored in a
//!    `MemoryStore` and in a `DiskStore` (zstd frames, and uncompressed):
//!    what `put` takes (ingest throughput: compressing, writing, syncing)
//!    and the bytes on disk; then the middle page read through the store
//!    (`get` + `plan` + `serve`), median of 21, from memory and from disk
//!    once read back (warm); and the first read after the store is opened
//!    again (cold: the document is read back whole). Then resident memory:
//!    `VmRSS` of a child process that opens a disk store holding 20 ×
//!    10 MB before and after reading its ledger, and after reading one
//!    document back; and of a child that stores 20 × 10 MB in a
//!    `MemoryStore`, plain and compressed (`compress = true`): growth per
//!    stored MB of compact JSON (goal with compression: at most 0.35×).
//!    The memory store's zstd row is its warm page (decoded once).
//!
//! Run with `cargo bench -p sluice-core --bench pages` (`-- --search` for
//! section 6 alone). Figures vary with the
//! machine: compare the ratios, measured in one run. Timings are reported,
//! never asserted; only the seed and sluice pages are checked to hold the
//! same items.

use std::hint::black_box;
use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::IgnoredAny;
use serde::ser::SerializeSeq as _;
use serde_json::Value;
use sluice_core::budget::{self, Budget, count_tokens};
use sluice_core::document::Document;
use sluice_core::pager::{Form, Page, Plan, Position};
use sluice_core::scan;
use sluice_core::store::{MemoryStore, Store, StoreLimits, StoredInfo};
use sluice_core::summary::Overview;

const MB: f64 = 1e6;
const SIZES: [usize; 3] = [1_000_000, 10_000_000, 100_000_000];
/// Rounds of serving the middle pages, timed, and untimed before them.
const ROUNDS: usize = 51;
const WARM_UP: usize = 5;

#[derive(Serialize)]
struct Row {
    id: usize,
    name: String,
    kind: &'static str,
    score: f64,
    tags: [&'static str; 2],
    owner: Owner,
}

#[derive(Serialize)]
struct Owner {
    team: String,
    since: usize,
}

fn row(i: usize) -> Row {
    Row {
        id: i,
        name: format!("row {i} été"),
        kind: ["alpha", "beta", "gamma"][i % 3],
        score: (i % 10_007) as f64 * 0.731 + 0.5,
        tags: ["a", "b"],
        owner: Owner {
            team: format!("t{}", i % 8),
            since: 2010 + i % 15,
        },
    }
}

/// The `rows` array, generated while it is serialized.
struct Rows(usize);

impl Serialize for Rows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0))?;
        for i in 0..self.0 {
            seq.serialize_element(&row(i))?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct Top {
    count: usize,
    rows: Rows,
}

fn pretty(value: &impl Serialize, capacity: usize) -> String {
    let mut out = Vec::with_capacity(capacity);
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    value.serialize(&mut ser).unwrap();
    String::from_utf8(out).unwrap()
}

/// A pretty JSON document of about `target` bytes.
fn generate(target: usize) -> String {
    let sample = 1000;
    let per_row = pretty(
        &Top {
            count: sample,
            rows: Rows(sample),
        },
        0,
    )
    .len() as f64
        / sample as f64;
    let n = (target as f64 / per_row) as usize;
    pretty(
        &Top {
            count: n,
            rows: Rows(n),
        },
        target + target / 8,
    )
}

fn page_budget() -> Budget {
    Budget::default().less(600, 1000)
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / MB / d.as_secs_f64()
}

fn label(bytes: usize) -> String {
    format!("{:.0} MB", bytes as f64 / MB)
}

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn proc_status(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
        .and_then(|kb| kb.parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn info(bytes: usize, overview: Overview) -> StoredInfo {
    StoredInfo {
        source: "bench".into(),
        bytes: bytes as u64,
        chars: 0,
        tokens: 0,
        tokens_estimated: true,
        is_error: false,
        sent_twice: false,
        overview,
    }
}

/// One generated document, ingested.
struct Sample {
    pretty: String,
    doc: Document,
    plan: Arc<Plan>,
}

/// Section 1: ingest, median of `reps`; returns the last document.
fn ingest(target: usize, reps: usize) -> Sample {
    let pretty = generate(target);
    let (mut json, mut overview, mut plan_t, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..reps {
        let text = pretty.clone();
        let t0 = Instant::now();
        let doc = Document::json(text).unwrap();
        let t1 = Instant::now();
        let ov = black_box(Overview::of(&doc));
        let t2 = Instant::now();
        let plan = doc.plan(None, page_budget()).unwrap();
        let t3 = Instant::now();
        json.push(t1 - t0);
        overview.push(t2 - t1);
        plan_t.push(t3 - t2);
        total.push(t3 - t0);
        drop(ov);
        last = Some((doc, plan));
    }
    let (doc, plan) = last.unwrap();
    let bytes = pretty.len();
    let (j, o, p, t) = (
        median(&mut json),
        median(&mut overview),
        median(&mut plan_t),
        median(&mut total),
    );
    println!(
        "{:<7} {:>9.2} MB {:>9.2} MB {:>6} | json {:>7.1} ms {:>6.0} MB/s | overview {:>6.1} ms {:>7.0} MB/s | plan {:>6.2} ms {:>8.0} MB/s | ingest {:>7.1} ms {:>5.0} MB/s",
        label(target),
        bytes as f64 / MB,
        doc.bytes() as f64 / MB,
        plan.pages(),
        ms(j),
        mb_per_s(bytes, j),
        ms(o),
        mb_per_s(bytes, o),
        ms(p),
        mb_per_s(bytes, p),
        ms(t),
        mb_per_s(bytes, t),
    );
    // The json stage's parts, each timed alone (the same median).
    let (mut validate, mut minify, mut arrays) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let t0 = Instant::now();
        black_box(serde_json::from_str::<IgnoredAny>(black_box(&pretty)).unwrap());
        let t1 = Instant::now();
        let compact = black_box(scan::minify(black_box(&pretty)));
        let t2 = Instant::now();
        black_box(scan::largest_arrays(black_box(&compact), 12));
        let t3 = Instant::now();
        validate.push(t1 - t0);
        minify.push(t2 - t1);
        arrays.push(t3 - t2);
    }
    let (v, m, a) = (
        median(&mut validate),
        median(&mut minify),
        median(&mut arrays),
    );
    println!(
        "{:<39} |   of which: validate (IgnoredAny) {:>6.1} ms {:>6.0} MB/s | minify {:>6.1} ms {:>6.0} MB/s | largest_arrays {:>6.1} ms {:>6.0} MB/s",
        "",
        ms(v),
        mb_per_s(bytes, v),
        ms(m),
        mb_per_s(bytes, m),
        ms(a),
        mb_per_s(bytes, a),
    );
    Sample { pretty, doc, plan }
}

/// The middle page of a document: where it starts and the page served.
struct Middle {
    k: u64,
    at: Position,
    page: Page,
}

fn middle(sample: &Sample) -> Middle {
    let Sample { doc, plan, .. } = sample;
    let k = plan.pages().div_ceil(2) as u64;
    let at = plan.start_of(k).unwrap();
    let page = plan.serve(doc, at);
    assert_eq!(page.form, Form::Items);
    Middle { k, at, page }
}

/// Section 2: the middle page of every document, served in interleaved
/// rounds (so that a busy moment of the machine hits all sizes alike);
/// medians of serving it and of counting its tokens alone.
fn serve_all(samples: &[Sample], middles: &[Middle]) -> Vec<(Duration, Duration)> {
    let budget = page_budget();
    let mut serve = vec![Vec::new(); samples.len()];
    let mut count = vec![Vec::new(); samples.len()];
    for round in 0..ROUNDS + WARM_UP {
        for (i, (sample, m)) in samples.iter().zip(middles).enumerate() {
            let t = Instant::now();
            let page = black_box(sample.plan.serve(&sample.doc, black_box(m.at)));
            let served = t.elapsed();
            drop(page);
            let t = Instant::now();
            black_box(budget::tokens_within(
                black_box(&m.page.data),
                budget.token_factor,
                budget.max_tokens,
            ));
            let counted = t.elapsed();
            if round >= WARM_UP {
                serve[i].push(served);
                count[i].push(counted);
            }
        }
    }
    serve
        .iter_mut()
        .zip(&mut count)
        .map(|(s, c)| (median(s), median(c)))
        .collect()
}

/// The seed's page: the whole text parsed, the page's items serialized.
fn seed_page(text: &str, a: usize, b: usize) -> String {
    let value: Value = serde_json::from_str(text).unwrap();
    let rows = value["rows"].as_array().unwrap();
    serde_json::to_string(&rows[a..b]).unwrap()
}

/// Section 3 for one document, and its line of the table.
fn seed(target: usize, sample: &Sample, m: &Middle, times: (Duration, Duration), reps: usize) {
    let (a, b) = (m.page.start as usize, m.page.end as usize);
    let seed = seed_page(&sample.pretty, a, b);
    let same = serde_json::from_str::<Value>(&seed).unwrap()
        == serde_json::from_str::<Value>(&m.page.data).unwrap();
    assert!(same, "the seed and sluice pages differ");
    let mut seed_times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        black_box(seed_page(black_box(&sample.pretty), a, b));
        seed_times.push(t.elapsed());
    }
    let seed = median(&mut seed_times);
    let (sluice, tokens) = times;
    println!(
        "{:<7} page {:>4}/{:<5} items {:>6}..{:<6} {:>6} B | sluice {:>7.1} µs (counting its tokens {:>6.1} µs) | seed {:>7.1} ms (median of {:>2}) | seed/sluice {:>6.0}×",
        label(target),
        m.k,
        sample.plan.pages(),
        a,
        b,
        m.page.data.len(),
        micros(sluice),
        micros(tokens),
        ms(seed),
        reps,
        seed.as_secs_f64() / sluice.as_secs_f64(),
    );
}

/// `pages --rss BYTES`: stores one document of BYTES and prints
/// `pretty compact rss_before rss_after hwm memory store_bytes`.
fn rss_child(target: usize) {
    budget::warm_up();
    let store = MemoryStore::new(StoreLimits::default());
    let before = proc_status("VmRSS");
    let text = generate(target);
    let pretty_bytes = text.len();
    let doc = Document::json(text).unwrap();
    let overview = Overview::of(&doc);
    doc.plan(None, page_budget()).unwrap();
    let compact = doc.bytes();
    let memory = doc.memory();
    let stored = store
        .put(
            &sluice_core::store::Owner::Session(1),
            doc,
            info(pretty_bytes, overview),
        )
        .unwrap();
    let after = proc_status("VmRSS");
    let hwm = proc_status("VmHWM");
    let (_, store_bytes) = store.usage();
    println!(
        "{pretty_bytes} {compact} {before} {after} {hwm} {memory} {store_bytes} {}",
        stored.doc.bytes()
    );
    std::io::stdout().flush().unwrap();
}

/// Section 4, in a child process.
fn rss(target: usize) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--rss", &target.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "the --rss child failed");
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let (pretty, compact, before, after, hwm, memory, store_bytes) =
        (v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    let growth = after - before;
    println!(
        "{:<7} pretty {:>6.1} MB  compact {:>6.1} MB | RSS {:>6.1} → {:>6.1} MB, growth {:>6.1} MB = {:.2}× pretty, {:.2}× compact | peak {:>6.1} MB above start | doc.memory() {:>6.1} MB, store.usage() {:>6.1} MB",
        label(target),
        pretty / MB,
        compact / MB,
        before / MB,
        after / MB,
        growth / MB,
        growth / pretty,
        growth / compact,
        (hwm - before) / MB,
        memory / MB,
        store_bytes / MB,
    );
}

/// Section 5: tokens per second on the first `bytes` of `text`.
fn tokens(text: &str, bytes: usize, reps: usize) {
    let piece = budget::char_slice(text, 0, bytes);
    let mut times = Vec::new();
    let mut count = 0;
    for _ in 0..reps {
        let t = Instant::now();
        count = black_box(count_tokens(black_box(piece), 1.0));
        times.push(t.elapsed());
    }
    let d = median(&mut times);
    println!(
        "{:<7} compact JSON | {:>9} o200k tokens ({:.2} bytes/token) | {:>7.1} ms {:>5.1} MB/s (median of {reps})",
        label(bytes),
        count,
        piece.len() as f64 / f64::from(count.max(1)),
        ms(d),
        mb_per_s(piece.len(), d),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss") {
        return rss_child(args[i + 1].parse().unwrap());
    }
    if let Some(i) = args.iter().position(|a| a == "--memory-rss") {
        return memory_rss_child(&args[i + 1]);
    }
    if let Some(i) = args.iter().position(|a| a == "--store-rss") {
        return store_rss_child(std::path::Path::new(&args[i + 1]));
    }
    if args.iter().any(|a| a == "--store") {
        budget::warm_up();
        return store_bench();
    }
    if args.iter().any(|a| a == "--tree") {
        budget::warm_up();
        return tree_bench();
    }
    if args.iter().any(|a| a == "--search") {
        let pretty = generate(SIZES[2]);
        let compact = Document::json(pretty).unwrap().text_str().to_owned();
        println!(
            "6. search over 100 MB: sluice_search's matching vs grep and rg on the same text (median of 3)"
        );
        return search_bench(compact);
    }
    budget::warm_up();
    let budget = page_budget();
    println!(
        "sluice pages: page budget {} tokens (×{}) / {} chars; MB = 10^6 bytes",
        budget.max_tokens, budget.token_factor, budget.max_chars
    );

    println!(
        "\n1. ingest = Document::json + Overview::of + first plan; median; MB/s of the pretty input (9, 5, 3 runs)"
    );
    println!("size       pretty     compact  pages");
    let samples: Vec<Sample> = SIZES
        .iter()
        .zip([9, 5, 3])
        .map(|(&size, reps)| ingest(size, reps))
        .collect();

    println!(
        "\n2-3. the middle page: sluice plan.serve (median of {ROUNDS} interleaved rounds) vs seed (parse all, take rows, serialize the page's items)"
    );
    let middles: Vec<Middle> = samples.iter().map(middle).collect();
    let times = serve_all(&samples, &middles);
    for (i, reps) in [15, 7, 3].into_iter().enumerate() {
        seed(SIZES[i], &samples[i], &middles[i], times[i], reps);
    }
    let pages: Vec<Duration> = times.iter().map(|t| t.0).collect();
    println!(
        "page(100 MB) / page(1 MB) = {:.2} (goal ≤ 2); page(10 MB) / page(1 MB) = {:.2}",
        pages[2].as_secs_f64() / pages[0].as_secs_f64(),
        pages[1].as_secs_f64() / pages[0].as_secs_f64(),
    );

    let compact = samples[2].doc.text_str().to_owned();
    drop(samples);

    println!(
        "\n4. resident memory of a stored document (child process; text dropped; goal ≤ 1.2× JSON bytes)"
    );
    rss(SIZES[2]);

    println!("\n5. count_tokens (o200k, bpe-openai)");
    tokens(&compact, 1_000_000, 5);
    tokens(&compact, 10_000_000, 3);

    println!(
        "\n6. search over 100 MB: sluice_search's matching vs grep and rg on the same text (median of 3)"
    );
    search_bench(compact);
    tree_bench();
}

/// A directory tree as server-filesystem's `directory_tree` writes it
/// (compact): 9 entries at the root, 6 of them directories with `breadth`
/// subdirectories over `depth` levels and `files` files in each.
fn tree_text(depth: usize, breadth: usize, files: usize) -> String {
    fn dir(out: &mut String, name: &str, depth: usize, breadth: usize, files: usize) {
        out.push_str(&format!(
            r#"{{"name":"{name}","type":"directory","children":["#
        ));
        for f in 0..files {
            if f > 0 {
                out.push(',');
            }
            out.push_str(&format!(r#"{{"name":"file_{f}.txt","type":"file"}}"#));
        }
        if depth > 0 {
            for d in 0..breadth {
                out.push(',');
                dir(out, &format!("dir_{depth}_{d}"), depth - 1, breadth, files);
            }
        }
        out.push_str("]}");
    }
    let mut out = String::from("[");
    for i in 0..9 {
        if i > 0 {
            out.push(',');
        }
        if i < 6 {
            dir(&mut out, &format!("dir_0_{i}"), depth, breadth, files);
        } else {
            out.push_str(&format!(r#"{{"name":"file_{i}.txt","type":"file"}}"#));
        }
    }
    out.push(']');
    out
}

/// Section 7, trees: planning a document whose elements are larger than a
/// page (sluice descends into them) and serving its pages, at 1, 10 and
/// 100 MB; and the cost of nesting built to make descending expensive.
fn tree_bench() {
    println!(
        "\n7. trees (directory_tree-like, 9 root entries): Document::json + plan (median of 3), pages, serving the first and middle page (median of {ROUNDS})"
    );
    let budget = page_budget();
    for (files, label) in [(6, "1 MB"), (73, "10 MB"), (748, "100 MB")] {
        let text = tree_text(3, 8, files);
        let bytes = text.len();
        let mut build = Vec::new();
        let mut last = None;
        for _ in 0..3 {
            let t = Instant::now();
            let doc = Document::json(text.clone()).unwrap();
            let plan = doc.plan(None, budget).unwrap();
            build.push(t.elapsed());
            last = Some((doc, plan));
        }
        let (doc, plan) = last.unwrap();
        let serve = |k: u64| {
            let at = plan.start_of(k).unwrap();
            let mut times: Vec<Duration> = (0..ROUNDS)
                .map(|_| {
                    let t = Instant::now();
                    black_box(plan.serve(&doc, black_box(at)));
                    t.elapsed()
                })
                .collect();
            median(&mut times)
        };
        let middle = plan.serve(
            &doc,
            plan.start_of(plan.pages().div_ceil(2) as u64).unwrap(),
        );
        serde_json::from_str::<IgnoredAny>(&middle.data).expect("a tree page is valid JSON");
        let build = median(&mut build);
        println!(
            "{label:<7} {:>7.2} MB  plan+ingest {:>7.1} ms {:>5.0} MB/s  {:>6} pages  first {:>6.0} µs  middle {:>6.0} µs ({} {}–{} at {})",
            bytes as f64 / 1e6,
            ms(build),
            mb_per_s(bytes, build),
            plan.pages(),
            micros(serve(1)),
            micros(serve(plan.pages().div_ceil(2) as u64)),
            middle.form.as_str(),
            middle.start,
            middle.end,
            middle.path.as_deref().unwrap_or("")
        );
    }
    // Nesting made to be expensive: 120 levels of `[i, …]` around 10 MB
    // (serde_json refuses more than 128 when the document is stored),
    // every level larger than a page. Descent stops at MAX_DESCENT levels.
    let mut text = String::new();
    let levels = 120;
    for i in 0..levels {
        text.push_str(&format!("[{i},"));
    }
    text.push_str(&format!("\"{}\"", "x".repeat(10_000_000)));
    text.push_str(&"]".repeat(levels));
    let t = Instant::now();
    let doc = Document::json(text).unwrap();
    let ingest = t.elapsed();
    let t = Instant::now();
    let plan = doc.plan(None, budget).unwrap();
    println!(
        "nested {levels} levels around 10 MB: Document::json {:.1} ms, plan {:.1} ms ({} pages)",
        ms(ingest),
        ms(t.elapsed()),
        plan.pages()
    );
}

/// Section 6: `search::search` over the 100 MB document as JSON (strings
/// with their paths) and as text (one record per line), vs `grep -c` and
/// `rg -c` on one thread (sluice searches on one).
fn search_bench(compact: String) {
    use sluice_core::search::{Matcher, Query, search};
    let json_doc = Document::json(compact.clone()).unwrap();
    // The same records as lines: one compact record per line.
    let lines: String = compact
        .trim_start_matches(|c| c != '[')
        .trim_start_matches('[')
        .replace("},{\"id\"", "}\n{\"id\"");
    let path = std::env::temp_dir().join(format!("sluice-search-bench-{}.txt", std::process::id()));
    std::fs::write(&path, &lines).unwrap();
    let text_doc = Document::text(lines);
    for (pattern, regex) in [("gamma", false), (r"row \d*77 ", true)] {
        let query = Query {
            pattern: pattern.into(),
            regex,
            case_sensitive: true,
        };
        let run = |doc: &Document| {
            let matcher = Matcher::new(&query, doc.kind()).unwrap();
            let mut times = Vec::new();
            let mut total = 0;
            for _ in 0..3 {
                let t = Instant::now();
                total = black_box(search(doc, &matcher)).total;
                times.push(t.elapsed());
            }
            (median(&mut times), total)
        };
        let (json_t, json_n) = run(&json_doc);
        let (text_t, text_n) = run(&text_doc);
        // `grep -c` and `rg -c` (if installed) count the matching lines.
        let count_lines = |program: &str, args: &[&str]| {
            let mut times = Vec::new();
            let mut n = String::new();
            for _ in 0..3 {
                let t = Instant::now();
                let out = std::process::Command::new(program)
                    .args(args)
                    .arg(&path)
                    .output()
                    .ok()?;
                times.push(t.elapsed());
                n = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            }
            Some((median(&mut times), n))
        };
        let grep_pattern = pattern.replace(r"\d", "[0-9]");
        let flag = if regex { "-E" } else { "-F" };
        let grep = count_lines("grep", &["-c", flag, &grep_pattern]);
        let rg_flag = if regex { "-e" } else { "-F" };
        let rg = count_lines("rg", &["-c", "-j1", rg_flag, pattern]);
        let bytes = text_doc.bytes();
        let show = |tool: &str, run: &Option<(Duration, String)>| match run {
            Some((t, n)) => format!(
                "{tool} {:>7.0} MB/s ({n} lines), text/{tool} {:.2}",
                mb_per_s(bytes, *t),
                t.as_secs_f64() / text_t.as_secs_f64()
            ),
            None => format!("{tool}: not installed"),
        };
        println!(
            "{pattern:<14} json (strings + paths) {:>7.0} MB/s ({json_n} strings) | text {:>7.0} MB/s ({text_n} lines) | {} | {}",
            mb_per_s(json_doc.bytes(), json_t),
            mb_per_s(bytes, text_t),
            show("grep -c", &grep),
            show("rg -c -j1", &rg),
        );
    }
    let _ = std::fs::remove_file(path);
}

/// A directory of its own for section 8, removed when dropped.
struct BenchDir(std::path::PathBuf);

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bench_dir(name: &str) -> BenchDir {
    let dir = std::env::temp_dir().join(format!("sluice-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    BenchDir(dir)
}

/// `doc` put in `store` for an anonymous owner, and how long that took.
fn put_timed(
    store: &dyn sluice_core::store::Store,
    doc: Document,
) -> (Arc<sluice_core::store::Stored>, Duration) {
    let bytes = doc.bytes();
    let t = Instant::now();
    let stored = store
        .put(
            &sluice_core::store::Owner::Anonymous,
            doc,
            info(bytes, Overview::of(&Document::text(String::new()))),
        )
        .unwrap();
    (stored, t.elapsed())
}

/// The middle page of `handle`, read through `store` as `sluice_read` does.
fn page_through(store: &dyn sluice_core::store::Store, handle: &str) -> usize {
    let stored = store
        .get(&sluice_core::store::Owner::Anonymous, handle)
        .unwrap()
        .stored;
    let plan = stored.doc.plan(None, page_budget()).unwrap();
    let page = plan.serve(
        &stored.doc,
        plan.start_of(plan.pages().div_ceil(2) as u64).unwrap(),
    );
    black_box(page).data.len()
}

/// Section 8.
fn store_bench() {
    use sluice_core::store::{DiskStore, MemoryStore, Store, StoreLimits};
    let limits = StoreLimits {
        max_bytes: 4 << 30,
        ttl: Duration::from_secs(3600),
    };
    println!(
        "8. stores: put (ingest: compress, write, sync), bytes kept, the middle page through the store (get + plan + serve, median of 21)"
    );
    println!(
        "{:<8} {:<16} {:>10} {:>10} {:>12} {:>12} {:>14}",
        "size", "backend", "put ms", "MB/s", "kept MB", "page µs", "cold read ms"
    );
    for target in [SIZES[0], SIZES[2]] {
        let doc = Document::json(generate(target)).unwrap();
        let text = doc.text_str().to_owned();
        let bytes = text.len();
        let page_median = |store: &dyn Store, handle: &str| {
            let mut times: Vec<Duration> = (0..21)
                .map(|_| {
                    let t = Instant::now();
                    page_through(store, handle);
                    t.elapsed()
                })
                .collect();
            median(&mut times)
        };
        let memory = MemoryStore::new(limits);
        let (stored, put) = put_timed(&memory, doc);
        let mem_page = page_median(&memory, &stored.handle);
        println!(
            "{:<8} {:<16} {:>10.1} {:>10.0} {:>12.1} {:>12.1} {:>14}",
            label(bytes),
            "memory",
            ms(put),
            mb_per_s(bytes, put),
            memory.usage().1 as f64 / 1e6,
            micros(mem_page),
            "-"
        );
        drop((memory, stored));
        let memory = MemoryStore::new(limits).compressed(true);
        let (stored, put) = put_timed(&memory, Document::json(text.clone()).unwrap());
        let zstd_page = page_median(&memory, &stored.handle);
        println!(
            "{:<8} {:<16} {:>10.1} {:>10.0} {:>12.1} {:>12.1} {:>14}   warm page {:.2}× memory's",
            label(bytes),
            "memory (zstd)",
            ms(put),
            mb_per_s(bytes, put),
            memory.usage().1 as f64 / 1e6,
            micros(zstd_page),
            "-",
            zstd_page.as_secs_f64() / mem_page.as_secs_f64()
        );
        drop((memory, stored));
        for (name, compress) in [("disk (zstd)", true), ("disk (plain)", false)] {
            let dir = bench_dir("store");
            let store = DiskStore::open(&dir.0, limits, compress).unwrap();
            let (stored, put) = put_timed(&store, Document::json(text.clone()).unwrap());
            let handle = stored.handle.clone();
            drop(stored);
            let kept = store.usage().1;
            drop(store);
            let store = DiskStore::open(&dir.0, limits, compress).unwrap();
            let t = Instant::now();
            page_through(&store, &handle);
            let cold = t.elapsed();
            let warm = page_median(&store, &handle);
            println!(
                "{:<8} {:<16} {:>10.1} {:>10.0} {:>12.1} {:>12.1} {:>14.1}   warm page {:.2}× memory's",
                label(bytes),
                name,
                ms(put),
                mb_per_s(bytes, put),
                kept as f64 / 1e6,
                micros(warm),
                ms(cold),
                warm.as_secs_f64() / mem_page.as_secs_f64()
            );
        }
    }
    // Resident memory: a child opens a store of 10, then 40 documents of
    // 10 MB (pretty; ~7 MB compact): what it holds must not grow with them.
    let text = Document::json(generate(SIZES[1]))
        .unwrap()
        .text_str()
        .to_owned();
    // And a memory store of 20 such documents, plain and compressed:
    // resident memory per stored (compact JSON) MB.
    for compress in [false, true] {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--memory-rss", if compress { "zstd" } else { "plain" }])
            .output()
            .unwrap();
        assert!(out.status.success(), "the --memory-rss child failed");
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    for count in [10, 40] {
        let dir = bench_dir("store-rss");
        {
            let store = DiskStore::open(&dir.0, limits, true).unwrap();
            let mut handles = String::new();
            for _ in 0..count {
                let (stored, _) = put_timed(&store, Document::json(text.clone()).unwrap());
                handles.push_str(&stored.handle);
                handles.push('\n');
            }
            std::fs::write(dir.0.join("handles"), handles).unwrap();
        }
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--store-rss", dir.0.to_str().unwrap()])
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

/// Section 8's child: `VmRSS` growth of a memory store (`zstd` or
/// `plain`) as it takes 20 documents of 10 MB (pretty), each planned and
/// its middle page served as a first answer would be, per stored MB of
/// compact JSON; the text they were made of is allocated before and not
/// counted.
fn memory_rss_child(how: &str) {
    use sluice_core::store::{MemoryStore, Store, StoreLimits};
    budget::warm_up();
    let limits = StoreLimits {
        max_bytes: 8 << 30,
        ttl: Duration::from_secs(3600),
    };
    let store = MemoryStore::new(limits).compressed(how == "zstd");
    let text = Document::json(generate(SIZES[1]))
        .unwrap()
        .text_str()
        .to_owned();
    let before = proc_status("VmRSS");
    let mut compact = 0;
    for _ in 0..20 {
        let doc = Document::json(text.clone()).unwrap();
        compact += doc.bytes();
        let (stored, _) = put_timed(&store, doc);
        page_through(&store, &stored.handle);
    }
    let after = proc_status("VmRSS");
    let (entries, held) = store.usage();
    println!(
        "resident memory, a memory store ({how}) of {entries} documents, {:.0} MB of compact JSON: +{:.1} MB = {:.2}× (store.usage() {:.1} MB)",
        compact as f64 / 1e6,
        after.saturating_sub(before) as f64 / 1e6,
        after.saturating_sub(before) as f64 / compact as f64,
        held as f64 / 1e6,
    );
}

/// Section 8's child: `VmRSS` before and after opening the disk store in
/// `dir`, and after reading one document back.
fn store_rss_child(dir: &std::path::Path) {
    use sluice_core::store::{DiskStore, Owner, Store, StoreLimits};
    let limits = StoreLimits {
        max_bytes: 4 << 30,
        ttl: Duration::from_secs(3600),
    };
    let before = proc_status("VmRSS");
    let store = DiskStore::open(dir, limits, true).unwrap();
    let opened = proc_status("VmRSS");
    let (entries, kept) = store.usage();
    let handles = std::fs::read_to_string(dir.join("handles")).unwrap();
    let first = handles.lines().next().unwrap();
    let stored = store.get(&Owner::Anonymous, first).unwrap().stored;
    let read = proc_status("VmRSS");
    println!(
        "resident memory, a disk store of {entries} documents of {:.0} MB ({:.0} MB on disk): {:.1} MB before opening, +{:.1} MB once open (its ledger), +{:.1} MB more after reading one back",
        stored.doc.bytes() as f64 / 1e6,
        kept as f64 / 1e6,
        before as f64 / 1e6,
        (opened.saturating_sub(before)) as f64 / 1e6,
        (read.saturating_sub(opened)) as f64 / 1e6,
    );
}
