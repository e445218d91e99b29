//! The gateway's side of `sluice_query`: a few warm `sluice jq-worker`
//! processes ([`crate::jq_worker`]), each running one filter at a time.
//!
//! A query takes an idle worker, preferring one that already holds its
//! document parsed, or starts one; at most `[query] workers` run at once, and
//! a query waits for a free one within its own time limit. A worker that
//! overruns the clock is killed; one that dies (stack overflow, memory limit)
//! is diagnosed from its stderr; either way the next query gets a fresh
//! process and the gateway never notices. Workers idle for
//! [`IDLE_LIFETIME`] exit, giving back the memory of the documents they kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sluice_core::document::Kind;
use sluice_core::query::{Outputs, QuerySettings};
use sluice_core::store::Stored;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Semaphore;

use crate::jq_worker::{Reply, Request};

/// How long an idle worker lives on.
pub const IDLE_LIFETIME: Duration = Duration::from_secs(300);

/// How much of a worker's stderr is kept to tell why it died.
const STDERR_KEPT: usize = 8 << 10;

/// What a query produced.
#[derive(Debug)]
pub struct Answer {
    /// The values.
    pub outputs: Outputs,
    /// Whether the document was parsed for this query (not kept parsed from
    /// an earlier one).
    pub parsed: bool,
}

/// What the pool has done since the gateway started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct JqStats {
    /// Queries run.
    pub queries: u64,
    /// Of those, answered over a document a worker kept parsed.
    pub kept_parsed: u64,
    /// Of those, stopped: by the clock, or because the worker died.
    pub stopped: u64,
    /// Workers waiting for a query.
    pub workers_idle: usize,
    /// Workers running a query.
    pub workers_busy: usize,
}

/// Warm jq workers.
pub struct JqPool {
    settings: QuerySettings,
    stats: Mutex<JqStats>,
    /// One permit per worker that may run.
    slots: Arc<Semaphore>,
    idle: Arc<Mutex<Vec<Worker>>>,
    reaper: std::sync::Once,
}

impl JqPool {
    /// A pool with no worker yet.
    pub fn new(settings: QuerySettings) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(settings.workers)),
            settings,
            stats: Default::default(),
            idle: Default::default(),
            reaper: std::sync::Once::new(),
        }
    }

    /// The `[query]` settings.
    pub fn settings(&self) -> &QuerySettings {
        &self.settings
    }

    /// What the pool has done, and its workers now.
    pub fn stats(&self) -> JqStats {
        let mut stats = *self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.workers_idle = self.lock().len();
        stats.workers_busy = self.settings.workers - self.slots.available_permits();
        stats
    }

    fn count(&self, kept_parsed: bool, stopped: bool) {
        let mut stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        stats.queries += 1;
        stats.kept_parsed += u64::from(kept_parsed);
        stats.stopped += u64::from(stopped);
    }

    /// Starts a worker in the background if none is running or idle, so that
    /// the next query does not wait for a process to start.
    pub fn warm(&self) {
        if self.slots.available_permits() < self.settings.workers || !self.lock().is_empty() {
            return;
        }
        self.start_reaper();
        let idle = Arc::downgrade(&self.idle);
        let workers = self.settings.workers;
        tokio::spawn(async move {
            if let (Ok(worker), Some(idle)) = (Worker::start(), idle.upgrade()) {
                let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
                if idle.len() < workers {
                    idle.push(worker);
                }
            }
        });
    }

    /// Runs `filter` over `doc` in a worker: the outputs, or a message for
    /// the model.
    pub async fn run(&self, filter: &str, doc: &Stored) -> Result<Answer, String> {
        self.start_reaper();
        let deadline = tokio::time::Instant::now() + self.settings.timeout;
        let Ok(Ok(permit)) = tokio::time::timeout_at(deadline, self.slots.acquire()).await else {
            return Err(format!(
                "all {} jq workers stayed busy for {}: try again, or raise `[query] workers` in the config",
                self.settings.workers,
                seconds(self.settings.timeout)
            ));
        };
        let mut worker = match self.take(&doc.handle) {
            Some(worker) => worker,
            None => Worker::start()?,
        };
        let request = Request {
            filter: filter.to_owned(),
            doc: doc.handle.clone(),
            doc_bytes: 0,
            lines: doc.doc.kind() == Kind::Text,
            max_outputs: self.settings.max_outputs,
            max_bytes: self.settings.max_output_bytes,
            memory_bytes: self.settings.max_memory_bytes,
            cache_bytes: self.settings.cache_bytes,
        };
        let body = doc.doc.text_str().as_bytes();
        let outcome = tokio::time::timeout_at(deadline, worker.query(request, body)).await;
        drop(permit);
        match outcome {
            Ok(Ok(answer)) => {
                self.put_back(worker);
                self.count(answer.as_ref().is_ok_and(|a| !a.parsed), false);
                answer
            }
            Ok(Err(died)) => {
                self.count(false, true);
                Err(worker.why_dead(died, &self.settings).await)
            }
            // Dropping the worker kills it.
            Err(_) => {
                self.count(false, true);
                Err(format!(
                    "the filter was stopped after {}: it may never end (e.g. a recursion without a base case, or `repeat`/`range` without a bound). Narrow it, or use `limit(n; …)` / `first(…)`.",
                    seconds(self.settings.timeout)
                ))
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Worker>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle worker, one holding `key` parsed if there is one.
    fn take(&self, key: &str) -> Option<Worker> {
        let mut idle = self.lock();
        let at = idle
            .iter()
            .position(|w| w.holds(key))
            .or_else(|| idle.len().checked_sub(1))?;
        Some(idle.swap_remove(at))
    }

    fn put_back(&self, mut worker: Worker) {
        worker.idle_since = Instant::now();
        let mut idle = self.lock();
        if idle.len() < self.settings.workers {
            idle.push(worker);
        }
    }

    /// Ends workers idle for longer than [`IDLE_LIFETIME`], once a minute,
    /// for as long as the pool lives.
    fn start_reaper(&self) {
        let idle: Weak<Mutex<Vec<Worker>>> = Arc::downgrade(&self.idle);
        self.reaper.call_once(|| {
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(60));
                loop {
                    tick.tick().await;
                    let Some(idle) = idle.upgrade() else { return };
                    let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
                    idle.retain(|w| w.idle_since.elapsed() < IDLE_LIFETIME);
                }
            });
        });
    }
}

/// `3 s`, `2.5 s`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s} s")
    } else {
        format!("{s:.1} s")
    }
}

/// Why a worker stopped answering.
#[derive(Debug)]
enum Died {
    /// Its pipes closed or broke.
    Gone,
    /// It answered something that is not the protocol.
    Garbled(String),
}

/// One worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: tokio::task::JoinHandle<()>,
    /// The documents it was sent, most recent last, with their sizes: what
    /// it most likely still holds (it says `missing` when not).
    sent: VecDeque<(String, u64)>,
    idle_since: Instant,
}

impl Worker {
    /// Starts `sluice jq-worker`.
    fn start() -> Result<Self, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find the sluice binary: {e}"))?;
        let mut child = tokio::process::Command::new(exe)
            .arg("jq-worker")
            .env("RUST_BACKTRACE", "0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start a jq worker: {e}"))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let mut err = child.stderr.take().expect("stderr is piped");
        let stderr: Arc<Mutex<VecDeque<u8>>> = Default::default();
        let kept = stderr.clone();
        let stderr_done = tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf).await {
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                kept.extend(&buf[..n]);
                let over = kept.len().saturating_sub(STDERR_KEPT);
                kept.drain(..over);
            }
        });
        Ok(Self {
            child,
            stdin,
            stdout,
            stderr,
            stderr_done,
            sent: VecDeque::new(),
            idle_since: Instant::now(),
        })
    }

    fn holds(&self, key: &str) -> bool {
        self.sent.iter().any(|(k, _)| k == key)
    }

    /// One query; `Ok(Err(..))` is the filter's own failure, the worker
    /// lives on.
    async fn query(
        &mut self,
        mut request: Request,
        body: &[u8],
    ) -> Result<Result<Answer, String>, Died> {
        let mut send_doc = !self.holds(&request.doc);
        loop {
            request.doc_bytes = if send_doc { body.len() as u64 } else { 0 };
            let mut line = serde_json::to_vec(&request).expect("a request serializes");
            line.push(b'\n');
            self.stdin.write_all(&line).await.map_err(|_| Died::Gone)?;
            if send_doc {
                self.stdin.write_all(body).await.map_err(|_| Died::Gone)?;
                self.remember(&request.doc, body.len() as u64, request.cache_bytes);
            }
            self.stdin.flush().await.map_err(|_| Died::Gone)?;
            let mut reply = String::new();
            match self.stdout.read_line(&mut reply).await {
                Ok(1..) => {}
                _ => return Err(Died::Gone),
            }
            match serde_json::from_str::<Reply>(&reply) {
                Ok(Reply::Outputs {
                    count,
                    bytes,
                    parsed,
                }) => {
                    let mut text = vec![0; bytes];
                    self.stdout
                        .read_exact(&mut text)
                        .await
                        .map_err(|_| Died::Gone)?;
                    let text = String::from_utf8(text)
                        .map_err(|_| Died::Garbled("output that is not UTF-8".into()))?;
                    return Ok(Ok(Answer {
                        outputs: Outputs { count, text },
                        parsed,
                    }));
                }
                Ok(Reply::Error(message)) => return Ok(Err(message)),
                Ok(Reply::Missing) if !send_doc => {
                    self.sent.retain(|(k, _)| *k != request.doc);
                    send_doc = true;
                }
                Ok(Reply::Missing) => {
                    return Err(Died::Garbled("`missing` for a sent document".into()));
                }
                Err(e) => return Err(Died::Garbled(e.to_string())),
            }
        }
    }

    /// Mirrors the worker's own bookkeeping of what it keeps parsed.
    fn remember(&mut self, key: &str, bytes: u64, limit: u64) {
        self.sent.retain(|(k, _)| k != key);
        if bytes > limit {
            return;
        }
        self.sent.push_back((key.to_owned(), bytes));
        while self.sent.iter().map(|(_, b)| b).sum::<u64>() > limit {
            self.sent.pop_front();
        }
    }

    /// What to tell the model about a worker that died during its query.
    async fn why_dead(mut self, died: Died, settings: &QuerySettings) -> String {
        let _ = self.child.start_kill();
        let status = self.child.wait().await;
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.stderr_done).await;
        let stderr = {
            let kept = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
            String::from_utf8_lossy(&kept.iter().copied().collect::<Vec<u8>>()).into_owned()
        };
        if stderr.contains("overflowed its stack") {
            return "the filter recursed too deep and was stopped (e.g. `def f: [f]; f`): give the recursion a base case, or use `recurse`/`..`.".into();
        }
        if stderr.contains("memory allocation") || stderr.contains("capacity overflow") {
            let mib = settings.max_memory_bytes >> 20;
            return format!(
                "the filter was stopped at {mib} MiB of memory: it builds something too large (e.g. `[repeat(1)]`). Narrow it, or use `limit(n; …)`; `[query] max_memory_mb` in the config sets the limit."
            );
        }
        let why = match died {
            Died::Gone => String::new(),
            Died::Garbled(what) => format!(", answering {what}"),
        };
        let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
        format!(
            "the jq worker ended without an answer ({status}{why}){}",
            stderr
                .lines()
                .last()
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        )
    }
}
