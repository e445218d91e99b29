//! A page of a large stored result from each `[store]` backend, side by
//! side in one run: memory, disk (zstd frames) and Redis (a
//! `redis-server` of the bench's own on a free port, Debian's).
//!
//! For a JSON document of about 100 MB (pretty) / 68 MB (compact) and one
//! of 1 MB: what storing it takes (`put`: compressing, writing; MB/s of the
//! compact text) and weighs; the middle page read through the store as
//! `sluice_read` does (`get` + plan + serve), median of 21, once the
//! document is held decoded ("warm"); and the first read by a store that
//! has not read it yet ("cold": a fresh instance on the same disk
//! directory or Redis, as after a restart or on another instance), which
//! reads the document back whole.
//!
//! Run with `cargo bench -p sluice --bench stores`. Timings are reported,
//! never asserted; compare the ratios.

use std::time::{Duration, Instant};

use sluice::state::redis_store::RedisStore;
use sluice_core::budget::Budget;
use sluice_core::document::Document;
use sluice_core::store::{DiskStore, MemoryStore, Owner, Store, StoreLimits, StoredInfo};
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

/// The middle page of `handle` through `store`, as `sluice_read` reads it.
fn page(store: &dyn Store, handle: &str) -> usize {
    let stored = store.get(&Owner::Anonymous, handle).unwrap().stored;
    let plan = stored.doc.plan(None, Budget::default()).unwrap();
    let at = plan.start_of(plan.pages().div_ceil(2) as u64).unwrap();
    std::hint::black_box(plan.serve(&stored.doc, at)).data.len()
}

fn median(store: &dyn Store, handle: &str) -> Duration {
    let mut times: Vec<Duration> = (0..21)
        .map(|_| {
            let t = Instant::now();
            page(store, handle);
            t.elapsed()
        })
        .collect();
    times.sort();
    times[10]
}

struct Row {
    put: Duration,
    weight: u64,
    warm: Duration,
    cold: Option<Duration>,
}

/// Stores `doc` in `store`, reads its middle page cold through `again()`
/// (another instance of the same store) and warm through `store`.
fn measure(store: &dyn Store, doc: Document, again: Option<&dyn Store>) -> Row {
    let t = Instant::now();
    let stored = store.put(&Owner::Anonymous, doc, info()).unwrap();
    let put = t.elapsed();
    let handle = stored.handle.clone();
    drop(stored);
    let weight = store.usage().1;
    let cold = again.map(|again| {
        let t = Instant::now();
        page(again, &handle);
        t.elapsed()
    });
    Row {
        put,
        weight,
        warm: median(store, &handle),
        cold,
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
        "stores: put (MB/s of the compact text), bytes kept, the middle page through the store (get + plan + serve): warm (median of 21) and cold (a fresh instance)"
    );
    println!(
        "{:<8} {:<14} {:>9} {:>8} {:>10} {:>10} {:>10} {:>11}",
        "size", "backend", "put ms", "MB/s", "kept MB", "warm ms", "cold ms", "warm/memory"
    );
    for target in [1_000_000, 68_000_000] {
        let doc = document(target);
        let text = doc.text_str().to_owned();
        let bytes = text.len();
        let mut rows: Vec<(&str, Row)> = Vec::new();
        let memory = MemoryStore::new(LIMITS);
        rows.push(("memory", measure(&memory, doc, None)));
        drop(memory);
        let dir = std::env::temp_dir().join(format!("sluice-bench-stores-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let disk = DiskStore::open(&dir, LIMITS, true).unwrap();
            let doc = Document::json(text.clone()).unwrap();
            let t = Instant::now();
            let stored = disk.put(&Owner::Anonymous, doc, info()).unwrap();
            let put = t.elapsed();
            let handle = stored.handle.clone();
            drop(stored);
            let weight = disk.usage().1;
            drop(disk);
            // Cold: the store opened again, as after a restart.
            let disk = DiskStore::open(&dir, LIMITS, true).unwrap();
            let t = Instant::now();
            page(&disk, &handle);
            let cold = t.elapsed();
            rows.push((
                "disk (zstd)",
                Row {
                    put,
                    weight,
                    warm: median(&disk, &handle),
                    cold: Some(cold),
                },
            ));
        }
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b) = (
            RedisStore::new(&url, LIMITS, true).unwrap(),
            RedisStore::new(&url, LIMITS, true).unwrap(),
        );
        let row = std::thread::scope(|s| {
            s.spawn(|| measure(&a, Document::json(text.clone()).unwrap(), Some(&b)))
                .join()
                .unwrap()
        });
        rows.push(("redis (zstd)", row));
        let memory_warm = rows[0].1.warm;
        for (name, row) in &rows {
            println!(
                "{:<8} {:<14} {:>9.1} {:>8.0} {:>10.1} {:>10.2} {:>10} {:>11.2}",
                format!("{:.0} MB", bytes as f64 / 1e6),
                name,
                ms(row.put),
                bytes as f64 / 1e6 / row.put.as_secs_f64(),
                row.weight as f64 / 1e6,
                ms(row.warm),
                row.cold.map_or("-".to_owned(), |c| format!("{:.1}", ms(c))),
                row.warm.as_secs_f64() / memory_warm.as_secs_f64()
            );
        }
    }
}
