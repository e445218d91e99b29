//! Token-counting throughput (o200k): `bpe-openai` 0.3 against `tiktoken-rs`,
//! with `sluice_core::budget::count_tokens(text, 1.0)` (sluice's own counter,
//! `budget/o200k.rs`) as a third column; then inputs made to be costly
//! (one piece of megabytes, long runs of one kind of character) for
//! bpe-openai and sluice only (tiktoken-rs is quadratic in one long piece),
//! each at 1 and 4 MB, whose time ratio shows the cost is linear.
//!
//! Run (its own workspace, release build):
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-tokens cargo run --release \
//!     --manifest-path /work/main/benches/tokens/Cargo.toml [-- REPS]
//! ```
//!
//! Inputs, all generated deterministically:
//! - `json-1MB`, `json-10MB`: a compact JSON array of records such as
//!   `{"id":7,"name":"row 7 été ✓","kind":"beta","score":1.23,
//!   "tags":["t7","u0"],"owner":{"team":"team-3","since":2010}}`;
//! - `prose-1MB`: English-like sentences and paragraphs from a word list;
//! - `diff-1MB`: a unified git diff of Rust-like code (`diff --git`, `@@`
//!   hunks, lines starting with `+`, `-` or a space).
//!
//! Sizes are in decimal MB (10^6 bytes), as is MB/s. Each tokenizer is
//! built (and warmed up) once, outside the timing. For every repetition the
//! three counters run one after another on each input (bpe-openai,
//! tiktoken-rs, sluice, bpe-openai, ...), so a busy moment of a shared
//! machine hits all alike; the table shows the median of REPS (default 7,
//! at least 5) timings. tiktoken-rs is timed with `encode_ordinary(text)
//! .len()` (no special tokens), which also allocates the token vector:
//! it has no count-only API.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::json;

const MB: usize = 1_000_000;

/// splitmix64: a small deterministic generator, no dependency needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// A compact JSON array of records, at most `target` bytes.
fn json_records(target: usize) -> String {
    const KINDS: [&str; 3] = ["alpha", "beta", "gamma"];
    let mut out = String::with_capacity(target);
    out.push('[');
    for i in 0u64.. {
        let record = json!({
            "id": i,
            "name": format!("row {i} été ✓"),
            "kind": KINDS[(i % 3) as usize],
            "score": (i % 1000) as f64 / 100.0 + 0.01,
            "tags": [format!("t{}", i % 10), format!("u{}", i % 7)],
            "owner": {"team": format!("team-{}", i % 9), "since": 2000 + i % 25},
        });
        let text = serde_json::to_string(&record).expect("serializable");
        // one byte for the separator, one for the closing bracket
        if out.len() + 1 + text.len() + 1 > target {
            break;
        }
        if i > 0 {
            out.push(',');
        }
        out.push_str(&text);
    }
    out.push(']');
    debug_assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
    out
}

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "time",
    "people",
    "year",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "good",
    "new",
    "first",
    "last",
    "long",
    "great",
    "little",
    "own",
    "other",
    "old",
    "big",
    "high",
    "different",
    "small",
    "large",
    "next",
    "early",
    "young",
    "important",
    "few",
    "public",
    "bad",
    "same",
    "able",
    "say",
    "make",
    "go",
    "know",
    "take",
    "see",
    "come",
    "think",
    "look",
    "want",
    "give",
    "use",
    "find",
    "tell",
    "ask",
    "seem",
    "feel",
    "try",
    "leave",
    "call",
    "quietly",
    "however",
    "because",
    "although",
    "during",
    "between",
    "without",
    "through",
    "against",
    "river",
    "mountain",
    "window",
    "garden",
    "letter",
    "evening",
    "journey",
    "silence",
    "answer",
    "village",
    "harbour",
    "lantern",
    "weather",
];

/// English-like prose of exactly `target` bytes (ASCII only).
fn prose(target: usize) -> String {
    let mut rng = Rng(0x5EED_0001);
    let mut out = String::with_capacity(target + 256);
    while out.len() < target {
        let sentences = 3 + rng.below(5);
        for s in 0..sentences {
            if s > 0 {
                out.push(' ');
            }
            let words = 6 + rng.below(16);
            for w in 0..words {
                let word = rng.pick(WORDS);
                if w == 0 {
                    let mut chars = word.chars();
                    let first = chars.next().expect("non-empty word");
                    out.push(first.to_ascii_uppercase());
                    out.push_str(chars.as_str());
                } else {
                    out.push(' ');
                    out.push_str(word);
                }
                if w + 1 < words && rng.below(9) == 0 {
                    out.push(',');
                }
            }
            out.push(match rng.below(12) {
                0 => '?',
                1 => '!',
                _ => '.',
            });
        }
        out.push_str("\n\n");
    }
    out.truncate(target);
    out
}

const IDENTS: &[&str] = &[
    "count", "limit", "offset", "buffer", "page", "items", "token", "budget", "plan", "doc",
    "index", "result", "value", "state", "config", "name", "len", "start", "end", "cursor",
];
const TYPES: &[&str] = &[
    "usize",
    "u32",
    "String",
    "&str",
    "Vec<u8>",
    "Option<u32>",
    "bool",
];
const CALLS: &[&str] = &[
    "compute",
    "serve",
    "split_at",
    "push_str",
    "extend_from_slice",
    "get",
    "insert",
    "parse",
    "trim",
    "to_string",
    "len",
    "is_empty",
    "next",
    "min",
    "max",
];

/// One line of Rust-like code (without its diff prefix or newline).
fn code_line(rng: &mut Rng) -> String {
    let indent = "    ".repeat(1 + rng.below(3));
    let a = rng.pick(IDENTS);
    let b = rng.pick(IDENTS);
    let f = rng.pick(CALLS);
    let n = rng.below(4096);
    match rng.below(10) {
        0 => format!("{indent}let {a}: {} = {b}.{f}({n});", rng.pick(TYPES)),
        1 => format!("{indent}let mut {a} = {b}.{f}()?;"),
        2 => format!("{indent}if {a} > {b} + {n} {{"),
        3 => format!("{indent}}}"),
        4 => format!("{indent}return Err(Error::new(\"{a} out of range: {{}}\", {b}));"),
        5 => format!("{indent}{a}.{f}(&{b}[..{n}]);"),
        6 => format!("{indent}// {a} is at most {b}, see {f}"),
        7 => format!("{indent}for {a} in {b}.iter().take({n}) {{"),
        8 => format!("{indent}self.{a} = {b}.{f}().unwrap_or({n});"),
        _ => format!("{indent}assert_eq!({a}.{f}(), {n});"),
    }
}

/// A unified git diff of about `target` bytes (cut at a line end).
fn git_diff(target: usize) -> String {
    let mut rng = Rng(0x5EED_0002);
    let mut out = String::with_capacity(target + 4096);
    let mut file = 0;
    while out.len() < target {
        file += 1;
        let path = format!("crates/sluice-core/src/{}_{file}.rs", rng.pick(IDENTS));
        out.push_str(&format!("diff --git a/{path} b/{path}\n"));
        out.push_str(&format!(
            "index {:07x}..{:07x} 100644\n--- a/{path}\n+++ b/{path}\n",
            rng.next() & 0xFFF_FFFF,
            rng.next() & 0xFFF_FFFF
        ));
        let mut line = 1 + rng.below(50);
        for _ in 0..1 + rng.below(4) {
            let (context, removed, added) = (3 + rng.below(4), rng.below(6), 1 + rng.below(8));
            out.push_str(&format!(
                "@@ -{line},{} +{line},{} @@ fn {}_{}(&self) -> {} {{\n",
                context + removed,
                context + added,
                rng.pick(CALLS),
                rng.pick(IDENTS),
                rng.pick(TYPES),
            ));
            for _ in 0..context / 2 {
                out.push_str(&format!(" {}\n", code_line(&mut rng)));
            }
            for _ in 0..removed {
                out.push_str(&format!("-{}\n", code_line(&mut rng)));
            }
            for _ in 0..added {
                out.push_str(&format!("+{}\n", code_line(&mut rng)));
            }
            for _ in context / 2..context {
                out.push_str(&format!(" {}\n", code_line(&mut rng)));
            }
            line += context + added + 20 + rng.below(200);
        }
    }
    let cut = out[..target].rfind('\n').map_or(target, |i| i + 1);
    out.truncate(cut);
    out
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn mb_per_s(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / MB as f64 / time.as_secs_f64()
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("REPS must be a number"))
        .unwrap_or(7)
        .max(5);

    // Build both tokenizers once, outside the timing.
    let started = Instant::now();
    let bpe = bpe_openai::o200k_base();
    black_box(bpe.count("warm up"));
    let bpe_setup = started.elapsed();
    let started = Instant::now();
    let tiktoken = tiktoken_rs::o200k_base().expect("o200k_base");
    black_box(tiktoken.encode_ordinary("warm up").len());
    let tiktoken_setup = started.elapsed();
    let started = Instant::now();
    black_box(sluice_core::budget::count_tokens("warm up", 1.0));
    let sluice_setup = started.elapsed();

    let inputs: Vec<(&str, String)> = vec![
        ("json-1MB", json_records(MB)),
        ("json-10MB", json_records(10 * MB)),
        ("prose-1MB", prose(MB)),
        ("diff-1MB", git_diff(MB)),
    ];

    let n = inputs.len();
    let mut counts = vec![(0usize, 0usize, 0u32); n];
    let mut times = vec![(Vec::new(), Vec::new(), Vec::new()); n];
    for _ in 0..reps {
        for (k, (_, text)) in inputs.iter().enumerate() {
            let text = black_box(text.as_str());

            let t = Instant::now();
            let a = black_box(bpe.count(text));
            times[k].0.push(t.elapsed());

            let t = Instant::now();
            let b = black_box(tiktoken.encode_ordinary(text).len());
            times[k].1.push(t.elapsed());

            let t = Instant::now();
            let c = black_box(sluice_core::budget::count_tokens(text, 1.0));
            times[k].2.push(t.elapsed());

            counts[k] = (a, b, c);
        }
    }

    println!(
        "o200k token counting, median of {reps} interleaved runs (MB = 10^6 bytes); \
         setup outside timing: bpe-openai {:.0} ms, tiktoken-rs {:.0} ms, sluice {:.0} ms",
        bpe_setup.as_secs_f64() * 1e3,
        tiktoken_setup.as_secs_f64() * 1e3,
        sluice_setup.as_secs_f64() * 1e3,
    );
    println!();
    println!(
        "| {:<9} | {:>10} | {:>10} | {:>10} | {:>10} | {:>9} | {:>9} | {:>9} | {:>9} | {:<11} |",
        "input",
        "bytes",
        "tok bpe",
        "tok tikt",
        "tok sluice",
        "MB/s bpe",
        "MB/s tikt",
        "MB/s slc",
        "bpe/tikt",
        "counts",
    );
    println!(
        "|{:-<11}|{:->12}|{:->12}|{:->12}|{:->12}|{:->11}|{:->11}|{:->11}|{:->11}|{:-<13}|",
        "", "", "", "", "", "", "", "", "", ""
    );
    let mut all_agree = true;
    for (k, (name, text)) in inputs.iter().enumerate() {
        let (a, b, c) = counts[k];
        let (ta, tb, tc) = &mut times[k];
        let (ma, mb, mc) = (median(ta), median(tb), median(tc));
        let (sa, sb, sc) = (
            mb_per_s(text.len(), ma),
            mb_per_s(text.len(), mb),
            mb_per_s(text.len(), mc),
        );
        let mut verdict = if a == b {
            "agree".to_string()
        } else {
            format!("bpe-tikt={:+}", a as i64 - b as i64)
        };
        if c as usize != a {
            verdict.push_str(&format!(" sluice-bpe={:+}", c as i64 - a as i64));
        }
        all_agree &= a == b && c as usize == a;
        println!(
            "| {:<9} | {:>10} | {:>10} | {:>10} | {:>10} | {:>9.2} | {:>9.2} | {:>9.2} | {:>8.2}x | {:<11} |",
            name,
            text.len(),
            a,
            b,
            c,
            sa,
            sb,
            sc,
            sa / sb,
            verdict,
        );
    }
    println!();
    println!(
        "token counts: {}",
        if all_agree {
            "bpe-openai, tiktoken-rs and sluice agree on every input"
        } else {
            "DIFFER (see the counts column)"
        }
    );
    costly_inputs(reps, &bpe);
}

/// Inputs made to be costly, at 1 and 4 MB: bpe-openai against sluice.
fn costly_inputs(reps: usize, bpe: &bpe_openai::Tokenizer) {
    let kinds: [(&str, fn(usize) -> String); 6] = [
        ("letters", |n| "abcdefghij".repeat(n / 10)),
        ("spaces", |n| format!("{}x", " ".repeat(n - 1))),
        ("digits", |n| "0123456789".repeat(n / 10)),
        ("punct", |n| "!?#$%&*+-=".repeat(n / 10)),
        ("upper", |n| "ABCDEFGHIJ".repeat(n / 10)),
        ("lines", |n| "\n \n\t".repeat(n / 4)),
    ];
    println!();
    println!(
        "costly inputs, median of {reps} interleaved runs: bpe-openai and sluice (tiktoken-rs is quadratic in one long piece)"
    );
    println!();
    println!(
        "| {:<8} | {:>12} | {:>12} | {:>12} | {:>12} | {:>10} | {:<6} |",
        "input",
        "MB/s bpe 1MB",
        "MB/s slc 1MB",
        "MB/s bpe 4MB",
        "MB/s slc 4MB",
        "slc 4MB/1MB",
        "counts"
    );
    println!(
        "|{:-<10}|{:->14}|{:->14}|{:->14}|{:->14}|{:->12}|{:-<8}|",
        "", "", "", "", "", "", ""
    );
    for (name, make) in kinds {
        let texts = [make(MB), make(4 * MB)];
        let mut times = [[Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
        let mut agree = true;
        for _ in 0..reps {
            for (k, text) in texts.iter().enumerate() {
                let t = Instant::now();
                let a = black_box(bpe.count(black_box(text)));
                times[k][0].push(t.elapsed());
                let t = Instant::now();
                let b = black_box(sluice_core::budget::count_tokens(black_box(text), 1.0));
                times[k][1].push(t.elapsed());
                agree &= a == b as usize;
            }
        }
        let mut m = |k: usize, c: usize| median(&mut times[k][c]);
        let (b1, s1, b4, s4) = (m(0, 0), m(0, 1), m(1, 0), m(1, 1));
        println!(
            "| {:<8} | {:>12.2} | {:>12.2} | {:>12.2} | {:>12.2} | {:>9.2}x | {:<6} |",
            name,
            mb_per_s(texts[0].len(), b1),
            mb_per_s(texts[0].len(), s1),
            mb_per_s(texts[1].len(), b4),
            mb_per_s(texts[1].len(), s4),
            s4.as_secs_f64() / s1.as_secs_f64(),
            if agree { "agree" } else { "DIFFER" },
        );
    }
}
