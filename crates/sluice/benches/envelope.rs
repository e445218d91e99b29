//! What forwarding one answer costs in sluice's JSON-RPC layer, against
//! decoding it into a tree and encoding it again, side by side.
//!
//! For each message: `Message::parse` (UTF-8 check, nesting check, borrowed
//! envelope parse) then `with_id` (the client's id spliced in place of
//! sluice's own), vs `serde_json::from_slice::<Value>` then setting `id`
//! and `serde_json::to_vec`: what a typed relay does at the least. Messages:
//!
//! 1. a small `tools/call` answer (one short text block);
//! 2. a 1.2 MB answer whose text block holds pretty JSON (escaped quotes
//!    and line breaks, as servers that return JSON as text send it);
//! 3. a 1.2 MB answer with the same rows as `structuredContent` (many
//!    small members and numbers).
//!
//! Each is timed in rounds that alternate the two ways; the median round
//! gives ns per message, and the ratio typed / sluice. Then the parts of
//! sluice's way alone (parse, splice). The outputs are checked to be the
//! same JSON value.
//!
//! Run with `cargo bench -p sluice --bench envelope`. Figures vary with the
//! machine: compare the ratios, measured in one run.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use sluice::jsonrpc::{Id, Message};

fn small() -> Bytes {
    Bytes::from_static(
        br#"{"jsonrpc":"2.0","id":17,"result":{"content":[{"type":"text","text":"a small result"}],"isError":false}}"#,
    )
}

fn rows(n: usize) -> Value {
    Value::Array(
        (0..n)
            .map(|i| {
                serde_json::json!({
                    "id": i, "name": format!("row {i} été"), "kind": "beta",
                    "score": 12.5, "tags": ["a", "b"], "owner": {"team": "t3", "since": 2010}
                })
            })
            .collect(),
    )
}

/// Rows until the pretty text passes 1.2 MB.
fn large_rows() -> Value {
    let mut n = 1000;
    loop {
        let value = rows(n);
        if serde_json::to_string_pretty(&value).unwrap().len() >= 1_200_000 {
            return value;
        }
        n += 500;
    }
}

fn text_answer(rows: &Value) -> Bytes {
    let text = serde_json::to_string_pretty(rows).unwrap();
    let message = serde_json::json!({
        "jsonrpc": "2.0", "id": 17,
        "result": {"content": [{"type": "text", "text": text}], "isError": false}
    });
    Bytes::from(serde_json::to_vec(&message).unwrap())
}

fn structured_answer(rows: &Value) -> Bytes {
    let message = serde_json::json!({
        "jsonrpc": "2.0", "id": 17,
        "result": {"content": [{"type": "text", "text": "rows"}], "structuredContent": {"rows": rows}}
    });
    Bytes::from(serde_json::to_vec(&message).unwrap())
}

fn sluice_way(bytes: &Bytes, id: &Id) -> Bytes {
    Message::parse(bytes.clone())
        .expect("the bench's messages parse")
        .with_id(id)
        .into_bytes()
}

fn typed_way(bytes: &Bytes) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(bytes).expect("the bench's messages parse");
    value["id"] = Value::from(42u64);
    serde_json::to_vec(&value).expect("a value serializes")
}

/// The median of `rounds` timings of `iterations` runs of `f`, in ns per run.
fn median_ns(rounds: usize, iterations: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                f();
            }
            start.elapsed().as_nanos() as f64 / iterations as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[rounds / 2]
}

fn compare(name: &str, bytes: &Bytes, iterations: usize) {
    let id = Id::number(42);
    let ours: Value = serde_json::from_slice(&sluice_way(bytes, &id)).unwrap();
    assert_eq!(
        ours,
        serde_json::from_slice::<Value>(&typed_way(bytes)).unwrap()
    );

    // Alternate the two ways round by round, so that a busy moment of a
    // shared machine hits both alike.
    let rounds = 15;
    let mut sluice = Vec::new();
    let mut typed = Vec::new();
    for _ in 0..rounds {
        sluice.push(median_ns(1, iterations, || {
            black_box(sluice_way(black_box(bytes), &id));
        }));
        typed.push(median_ns(1, iterations, || {
            black_box(typed_way(black_box(bytes)));
        }));
    }
    sluice.sort_by(f64::total_cmp);
    typed.sort_by(f64::total_cmp);
    let (sluice, typed) = (sluice[rounds / 2], typed[rounds / 2]);
    let parse = median_ns(rounds, iterations, || {
        black_box(Message::parse(black_box(bytes).clone()).unwrap());
    });
    let message = Message::parse(bytes.clone()).unwrap();
    let splice = median_ns(rounds, iterations, || {
        black_box(black_box(&message).with_id(&id));
    });
    println!(
        "{name:<34} {:>9} B  sluice {:>12.0} ns (parse {:>10.0}, splice {:>10.0})  \
         typed {:>12.0} ns  typed/sluice {:>5.1}x",
        bytes.len(),
        sluice,
        parse,
        splice,
        typed,
        typed / sluice
    );
}

fn main() {
    let rows = large_rows();
    println!(
        "envelope parse + id splice (sluice) vs Value parse + to_vec (typed), median ns per message"
    );
    compare("small tools/call answer", &small(), 20_000);
    compare(
        "1.2 MB answer, JSON in a text block",
        &text_answer(&rows),
        20,
    );
    compare(
        "1.2 MB answer, structuredContent",
        &structured_answer(&rows),
        20,
    );
}
