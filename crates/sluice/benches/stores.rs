//! A page of a large stored result from each `[store]` backend, side by
//! side in one run: memory, disk (zstd frames) and Redis (a
//! `redis-server` of the bench's own on a free port, Debian's).
//!
//! For a JSON document of 100 MB (compact) and one of 1 MB: what storing
//! it takes (`put`: compressing, writing; MB/s of the compact text) and
//! weighs; the middle page read through the store as `sluice_read` reads
//! it (`Store::page`): first by an instance that has not read the document
//! (a fresh instance on the same disk directory or Redis, as after a
//! restart or on another instance; for the compressed memory store, once
//! its decoded copy is let go), then again (median of 21). Those read only
//! the frames the page spans, by the plan saved with the document: O(page),
//! 100 MB as 1 MB. Last, what reading the document back whole takes
//! (`Store::get` on a fresh instance: what `sluice_query` and
//! `sluice_search` need, and what a first page cost before).
//!
//! Run with `cargo bench -p sluice --bench stores`. Timings are reported,
//! never asserted; compare the ratios.

use std::time::{Duration, Instant};

use sluice::state::redis_store::RedisStore;
use sluice_core::budget::Budget;
use sluice_core::document::Document;
use sluice_core::pager::Start;
use sluice_core::store::{DiskStore, MemoryStore, Owner, PageAsk, Store, StoreLimits, StoredInfo};
use sluice_core::summary::Overview;

const LIMITS: StoreLimits = StoreLimits {
    max_bytes: 4 << 30,
    ttl: Duration::from_secs(3600),
};

/// A JSON document of about `bytes` (compact): `{"rows": [...], "n": N}`.
fn document(bytes: usize) -> Document {
    let mut text = String::with_capacity(bytes + 200);
    text.push_str("{\"rows\":[");
    let mut i = 0;
    while text.len() < bytes {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&format!(
            "{{\"id\":{i},\"name\":\"row {i} été\",\"kind\":\"{}\",\"score\":{}.5,\"tags\":[\"a\",\"b{}\"],\"owner\":{{\"team\":\"t{}\",\"since\":{}}}}}",
            ["alpha", "beta", "gamma"][i % 3],
            i % 97,
            i % 13,
            i % 7,
            1990 + i % 35
        ));
        i += 1;
    }
    text.push_str(&format!("],\"n\":{i}}}"));
    Document::json(text).unwrap()
}

fn info() -> StoredInfo {
    StoredInfo {
        source: "bench".into(),
        bytes: 0,
        chars: 0,
        tokens: 0,
        tokens_estimated: true,
        is_error: false,
        sent_twice: false,
        overview: Overview::of(&Document::text(String::new())),
    }
}

/// Page `n` of `handle` through `store`, as `sluice_read` reads it.
fn page(store: &dyn Store, handle: &str, n: u64) -> usize {
    let ask = PageAsk {
        path: None,
        budget: Budget::default(),
        start: Start::Page(n),
    };
    let page = store.page(&Owner::Anonymous, handle, &ask).unwrap();
    std::hint::black_box(page).data.len()
}

/// The median of 21 reads of page `n`.
fn median(store: &dyn Store, handle: &str, n: u64) -> Duration {
    let mut times: Vec<Duration> = (0..21)
        .map(|_| {
            let t = Instant::now();
            page(store, handle, n);
            t.elapsed()
        })
        .collect();
    times.sort();
    times[10]
}

/// A document of `text`, planned for its first reader (as the governor
/// plans it before it stores it), and its pages.
fn planned(text: &str) -> (Document, u64) {
    let doc = Document::json(text.to_owned()).unwrap();
    let pages = doc.plan(None, Budget::default()).unwrap().pages() as u64;
    (doc, pages)
}

struct Row {
    put: Duration,
    weight: u64,
    /// The first page read by a fresh instance.
    first: Option<Duration>,
    /// The page read again and again.
    page: Duration,
    /// A fresh instance reading the document whole (what a first read cost
    /// before pages were served from frames).
    whole: Option<Duration>,
}

/// Stores `text` through `store`; reads the middle page through it, and
/// first through `fresh` (another instance of the same store), and the
/// whole document through `whole` (a third).
fn measure(store: &dyn Store, text: &str, fresh: Option<(&dyn Store, &dyn Store)>) -> Row {
    let (doc, pages) = planned(text);
    let middle = pages.div_ceil(2);
    let t = Instant::now();
    let stored = store.put(&Owner::Anonymous, doc, info()).unwrap();
    let put = t.elapsed();
    let handle = stored.handle.clone();
    drop(stored);
    let weight = store.usage().1;
    let (first, page_time, whole) = match fresh {
        Some((fresh, whole)) => {
            let t = Instant::now();
            page(fresh, &handle, middle);
            let first = t.elapsed();
            let t = Instant::now();
            std::hint::black_box(whole.get(&Owner::Anonymous, &handle).unwrap());
            let read_whole = t.elapsed();
            (
                Some(first),
                median(fresh, &handle, middle),
                Some(read_whole),
            )
        }
        None => (None, median(store, &handle, middle), None),
    };
    Row {
        put,
        weight,
        first,
        page: page_time,
        whole,
    }
}

/// A `redis-server` on a free port; killed on drop.
struct Redis(std::process::Child, u16);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Killed and waited for on drop, once it answers (or here if it never does).
    let redis = Redis(
        std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (tests/peers/install.sh installs Debian's)"),
        port,
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return redis;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("redis-server did not start");
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let redis = redis();
    let url = format!("redis://127.0.0.1:{}/0", redis.1);
    // The Redis store runs its commands on the runtime, from a thread of
    // its own (as sluice calls a store with I/O on its blocking pool).
    let _entered = runtime.enter();
    println!(
        "stores: put (MB/s of the compact text), bytes kept; the middle page through the store (as sluice_read reads it): first by a fresh instance, then again (median of 21); a fresh instance reading the document whole"
    );
    println!(
        "{:<8} {:<15} {:>9} {:>7} {:>9} {:>9} {:>9} {:>12} {:>10}",
        "size",
        "backend",
        "put ms",
        "MB/s",
        "kept MB",
        "first ms",
        "page ms",
        "page/memory",
        "whole ms"
    );
    for target in [1_000_000, 100_000_000] {
        let text = document(target).text_str().to_owned();
        let bytes = text.len();
        let mut rows: Vec<(&str, Row)> = Vec::new();
        let memory = MemoryStore::new(LIMITS);
        rows.push(("memory", measure(&memory, &text, None)));
        drop(memory);
        let zstd = MemoryStore::new(LIMITS).compressed(true);
        rows.push(("memory (zstd)", measure_framed_memory(&zstd, &text)));
        drop(zstd);
        let dir = std::env::temp_dir().join(format!("sluice-bench-stores-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let (doc, pages) = planned(&text);
            let disk = DiskStore::open(&dir, LIMITS, true).unwrap();
            let t = Instant::now();
            let stored = disk.put(&Owner::Anonymous, doc, info()).unwrap();
            let put = t.elapsed();
            let handle = stored.handle.clone();
            drop(stored);
            let weight = disk.usage().1;
            drop(disk);
            // A fresh instance: the store opened again, as after a restart.
            let disk = DiskStore::open(&dir, LIMITS, true).unwrap();
            let t = Instant::now();
            page(&disk, &handle, pages.div_ceil(2));
            let first = t.elapsed();
            let page_time = median(&disk, &handle, pages.div_ceil(2));
            drop(disk);
            let disk = DiskStore::open(&dir, LIMITS, true).unwrap();
            let t = Instant::now();
            std::hint::black_box(disk.get(&Owner::Anonymous, &handle).unwrap());
            let whole = t.elapsed();
            rows.push((
                "disk (zstd)",
                Row {
                    put,
                    weight,
                    first: Some(first),
                    page: page_time,
                    whole: Some(whole),
                },
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b, c) = (
            RedisStore::new(&url, LIMITS, true).unwrap(),
            RedisStore::new(&url, LIMITS, true).unwrap(),
            RedisStore::new(&url, LIMITS, true).unwrap(),
        );
        let row = std::thread::scope(|s| {
            s.spawn(|| measure(&a, &text, Some((&b, &c))))
                .join()
                .unwrap()
        });
        rows.push(("redis (zstd)", row));
        let memory_page = rows[0].1.page;
        let shown = |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2}", ms(d)));
        for (name, row) in &rows {
            println!(
                "{:<8} {:<15} {:>9.1} {:>7.0} {:>9.1} {:>9} {:>9.2} {:>12.2} {:>10}",
                format!("{:.0} MB", bytes as f64 / 1e6),
                name,
                ms(row.put),
                bytes as f64 / 1e6 / row.put.as_secs_f64(),
                row.weight as f64 / 1e6,
                shown(row.first),
                ms(row.page),
                row.page.as_secs_f64() / memory_page.as_secs_f64(),
                shown(row.whole),
            );
        }
    }
}

/// The compressed memory store: the middle page once the document it
/// keeps decoded after a put is let go (as others push it out).
fn measure_framed_memory(store: &MemoryStore, text: &str) -> Row {
    let (doc, pages) = planned(text);
    let t = Instant::now();
    let stored = store.put(&Owner::Anonymous, doc, info()).unwrap();
    let put = t.elapsed();
    let handle = stored.handle.clone();
    drop(stored);
    store.forget_decoded();
    let weight = store.usage().1;
    let t = Instant::now();
    page(store, &handle, pages.div_ceil(2));
    let first = t.elapsed();
    Row {
        put,
        weight,
        first: Some(first),
        page: median(store, &handle, pages.div_ceil(2)),
        whole: None,
    }
}
