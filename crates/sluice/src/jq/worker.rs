//! `sluice jq-worker`: the process that runs jq filters, so that a bad
//! filter cannot take the gateway down.
//!
//! jaq has no resource limits: `def f: [f]; f` overflows the stack and
//! aborts the process, `def f: f; f` never ends, `[repeat(1)]` eats memory.
//! A worker runs one query at a time under a memory limit (`RLIMIT_AS`, set
//! afresh before each query); the gateway's [`super::pool`] kills it when
//! its time is up and starts another. A worker lives on between queries and
//! keeps the documents it read parsed, so that the next query over the same
//! stored result skips the parse, which is most of the cost.
//!
//! The protocol, over stdin and stdout, one query at a time:
//! - request: one JSON line ([`Request`]), then `doc_bytes` bytes of the
//!   document (0 when the gateway expects the worker to have it parsed);
//! - reply: one JSON line ([`Reply`]); after `outputs`, `bytes` bytes of
//!   compact JSON values separated by `\n`.
//!
//! The worker exits when its stdin ends.

use std::collections::VecDeque;
use std::io::{BufRead, Read, Write};

use serde::{Deserialize, Serialize};
use sluice_core::query::{self, OutputLimits, Parsed, QueryError};

/// Bytes of memory per byte of compact JSON that reading a document may
/// take (measured: a worker holding a 106 MB inventory parsed has 2.1 GB
/// resident, about 20 per byte).
pub const PARSE_FACTOR: u64 = 24;

/// One query.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    /// The jq program.
    pub filter: String,
    /// The document's key (its handle): the same key is the same bytes.
    pub doc: String,
    /// Bytes of the document that follow this line; 0 to use the parsed copy.
    pub doc_bytes: u64,
    /// The document is text, queried as the array of its lines.
    pub lines: bool,
    /// Output caps.
    pub max_outputs: usize,
    /// Output caps.
    pub max_bytes: usize,
    /// What the filter may allocate beyond the parsed document and what
    /// the worker holds already.
    pub memory_bytes: u64,
    /// Stored bytes of the documents to keep parsed.
    pub cache_bytes: u64,
}

/// The answer to one query.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Reply {
    /// The filter ran; its output follows.
    Outputs {
        /// Values.
        count: usize,
        /// Bytes that follow.
        bytes: usize,
        /// Whether the document was parsed for this query (not kept from before).
        parsed: bool,
    },
    /// The filter or the document failed: a message for the model.
    Error(String),
    /// `doc_bytes` was 0 but the worker does not hold the document: send it.
    Missing,
}

/// The documents a worker keeps parsed, least recently used first.
#[derive(Default)]
struct Kept {
    docs: VecDeque<(String, u64, Parsed)>,
}

impl Kept {
    fn take(&mut self, key: &str) -> Option<(u64, Parsed)> {
        let at = self.docs.iter().position(|(k, _, _)| k == key)?;
        self.docs.remove(at).map(|(_, bytes, doc)| (bytes, doc))
    }

    fn keep(&mut self, key: String, bytes: u64, doc: Parsed, limit: u64) {
        if bytes > limit {
            return;
        }
        self.docs.push_back((key, bytes, doc));
        while self.docs.iter().map(|(_, b, _)| b).sum::<u64>() > limit {
            self.docs.pop_front();
        }
    }
}

/// `sluice jq-worker`: answers queries until stdin ends.
pub fn main() -> std::process::ExitCode {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut kept = Kept::default();
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return std::process::ExitCode::SUCCESS,
            Ok(_) => {}
            Err(_) => return std::process::ExitCode::FAILURE,
        }
        let request: Request = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(e) => {
                // The stream is out of step: nothing after this can be trusted.
                let _ = reply(
                    &mut output,
                    Reply::Error(format!("bad worker request: {e}")),
                    "",
                );
                return std::process::ExitCode::FAILURE;
            }
        };
        // Reading the document: its bytes, then its parsed values, which take
        // up to ~PARSE_FACTOR times as much; the query's own allowance on top.
        limit_memory(
            request
                .memory_bytes
                .saturating_add(request.doc_bytes.saturating_mul(1 + PARSE_FACTOR)),
        );
        let mut doc_bytes = vec![0; request.doc_bytes as usize];
        if input.read_exact(&mut doc_bytes).is_err() {
            return std::process::ExitCode::FAILURE;
        }
        let (text, answer) = answer(&request, doc_bytes, &mut kept);
        if reply(&mut output, answer, &text).is_err() {
            return std::process::ExitCode::FAILURE;
        }
    }
}

/// Runs one request: the reply and the output text.
fn answer(request: &Request, doc_bytes: Vec<u8>, kept: &mut Kept) -> (String, Reply) {
    let (size, doc, parsed) = if request.doc_bytes == 0 {
        match kept.take(&request.doc) {
            Some((size, doc)) => (size, doc, false),
            None => return (String::new(), Reply::Missing),
        }
    } else {
        let doc = if request.lines {
            // `from_utf8` first: on a large text its ASCII fast path is far
            // quicker than `from_utf8_lossy`'s chunks (a stored text is
            // valid UTF-8; the lossy read only guards the pipe).
            Ok(Parsed::lines(&match std::str::from_utf8(&doc_bytes) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(&doc_bytes),
            }))
        } else {
            Parsed::json(&doc_bytes)
        };
        match doc {
            Ok(doc) => (doc_bytes.len() as u64, doc, true),
            Err(e) => return (String::new(), Reply::Error(e.to_string())),
        }
    };
    drop(doc_bytes);
    // The query's own allocations count from here, the document aside.
    limit_memory(request.memory_bytes);
    let limits = OutputLimits {
        max_outputs: request.max_outputs,
        max_bytes: request.max_bytes,
    };
    let result = query::run_parsed(&request.filter, &doc, limits);
    kept.keep(request.doc.clone(), size, doc, request.cache_bytes);
    match result {
        Ok(outputs) => {
            let reply = Reply::Outputs {
                count: outputs.count,
                bytes: outputs.text.len(),
                parsed,
            };
            (outputs.text, reply)
        }
        Err(QueryError::Input(e)) => (String::new(), Reply::Error(e)),
        Err(e) => (String::new(), Reply::Error(e.to_string())),
    }
}

fn reply(out: &mut impl Write, reply: Reply, text: &str) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, &reply)?;
    out.write_all(b"\n")?;
    if matches!(reply, Reply::Outputs { .. }) {
        out.write_all(text.as_bytes())?;
    }
    out.flush()
}

/// Lets the process grow by `bytes` of address space from its size now.
/// Only the soft limit moves, so that the next query can raise it again.
fn limit_memory(bytes: u64) {
    let now = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024);
    let hard = rlimit::getrlimit(rlimit::Resource::AS).map_or(rlimit::INFINITY, |(_, hard)| hard);
    let _ = rlimit::setrlimit(rlimit::Resource::AS, (now + bytes).min(hard), hard);
}
