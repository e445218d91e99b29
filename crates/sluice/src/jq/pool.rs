//! The gateway's side of `sluice_query`: a few warm `sluice jq-worker`
//! processes ([`super::worker`]), each running one filter at a time.
//!
//! A query takes an idle worker, preferring one that already holds its
//! document parsed, or starts one; at most `[query] workers` run at once.
//! Workers are shared fairly between owners ([`FairSlots`]): a query waits
//! for one for at most the time limit of a filter and a second, and an owner
//! holding more than half of them gives one back (its query runs again
//! later) when another owner waits, so that one session's never-ending
//! filters cannot keep another's from running. A worker that
//! overruns the clock is killed; one that dies (stack overflow, memory limit)
//! is diagnosed from its stderr; either way the next query gets a fresh
//! process and the gateway never notices. Workers idle for
//! [`IDLE_LIFETIME`] exit, giving back the memory of the documents they kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sluice_core::document::Kind;
use sluice_core::query::{Outputs, QuerySettings};
use sluice_core::store::{Owner, Stored};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::jq::worker::{Reply, Request};

/// How long an idle worker lives on.
pub const IDLE_LIFETIME: Duration = Duration::from_secs(300);

/// How much of a worker's stderr is kept to tell why it died.
const STDERR_KEPT: usize = 8 << 10;

/// A document at least this large, read by a worker within a query's time
/// limit, may have taken a good part of it (parsing runs at about 100 MB a
/// second when the machine is idle, far slower when it is not): a stopped
/// query says so.
const LARGE_UNREAD: usize = 1 << 20;

/// How long a query waits for a worker beyond the longest a filter may run:
/// by then one of the filters that held the workers has ended.
const WAIT_BEYOND_TIMEOUT: Duration = Duration::from_secs(1);

/// How many of one owner's queries may wait for a worker; more are told at
/// once that the workers are busy (waiting queries are served in a loop over
/// all of them: this keeps that loop short).
const MAX_WAITING_PER_OWNER: usize = 16;

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
    /// Queries that gave their worker back to another session and ran
    /// again (see [`FairSlots`]).
    pub preempted: u64,
    /// Workers waiting for a query.
    pub workers_idle: usize,
    /// Workers running a query.
    pub workers_busy: usize,
    /// Queries waiting for a worker.
    pub queries_waiting: usize,
}

/// Why a query gave no outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The filter's own error: it does not compile, or failed on the
    /// document (`cannot index …`). The model's to mend.
    Refused(String),
    /// It was stopped (its time or memory ran out, its worker died) or
    /// never ran (no worker came free).
    Stopped(String),
}

impl Failed {
    /// What to tell the model.
    pub fn message(&self) -> &str {
        match self {
            Failed::Refused(message) | Failed::Stopped(message) => message,
        }
    }
}

/// Warm jq workers.
pub struct JqPool {
    settings: QuerySettings,
    stats: Mutex<JqStats>,
    /// One slot per worker that may run, shared fairly between owners.
    slots: Arc<FairSlots<Owner>>,
    idle: Arc<Mutex<Vec<Worker>>>,
    reaper: std::sync::Once,
}

impl JqPool {
    /// A pool with no worker yet.
    pub fn new(settings: QuerySettings) -> Self {
        Self {
            slots: Arc::new(FairSlots::new(settings.workers)),
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
        (stats.workers_busy, stats.queries_waiting) = self.slots.load();
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
        if self.slots.load() != (0, 0) || !self.lock().is_empty() {
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

    /// Runs `filter` over `doc` in a worker, for the owner of `doc` (who
    /// asked: the store gives a document to its owner only): the outputs, or
    /// a message for the model.
    pub async fn run(&self, filter: &str, doc: &Stored) -> Result<Answer, Failed> {
        self.start_reaper();
        // The wait for a worker has a clock of its own: a filter that waited
        // still gets its whole time limit, and is never blamed for the wait.
        let wait = self.settings.timeout + WAIT_BEYOND_TIMEOUT;
        let request = || Request {
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
        let mut preemptible = true;
        let (worker, outcome, unread) = loop {
            let slot = match self.slots.acquire(&doc.owner, wait, preemptible).await {
                Ok(slot) => slot,
                Err(busy) => return Err(Failed::Stopped(busy.message(wait))),
            };
            let deadline = tokio::time::Instant::now() + self.settings.timeout;
            let mut worker = match self.take(&doc.handle) {
                Some(worker) => worker,
                None => Worker::start().map_err(Failed::Stopped)?,
            };
            // Its time limit holds sending and parsing the document too,
            // when this worker has not read it yet.
            let unread = !worker.holds(&doc.handle);
            let outcome = tokio::select! {
                outcome = tokio::time::timeout_at(deadline, worker.query(request(), body)) => outcome,
                // Another owner's turn: this query gets in line again (its
                // worker, stopped mid-query, is killed by dropping it).
                () = slot.preempted() => {
                    drop(worker);
                    self.stats.lock().unwrap_or_else(|p| p.into_inner()).preempted += 1;
                    preemptible = false;
                    continue;
                }
            };
            break (worker, outcome, unread);
        };
        match outcome {
            Ok(Ok(answer)) => {
                self.put_back(worker);
                self.count(answer.as_ref().is_ok_and(|a| !a.parsed), false);
                answer.map_err(Failed::Refused)
            }
            Ok(Err(died)) => {
                self.count(false, true);
                Err(Failed::Stopped(worker.why_dead(died, &self.settings).await))
            }
            // Dropping the worker kills it.
            Err(_) => {
                self.count(false, true);
                let mut why = format!(
                    "the filter was stopped after {}: it may never end (e.g. a recursion without a base case, or `repeat`/`range` without a bound). Narrow it, or use `limit(n; …)` / `first(…)`.",
                    seconds(self.settings.timeout)
                );
                if unread && body.len() >= LARGE_UNREAD {
                    why.push_str(&format!(
                        " That time also went to reading the document ({}), which this worker had not read yet: a document this large may need a longer `[query] timeout_s`.",
                        sluice_core::format::bytes(body.len() as u64)
                    ));
                }
                Err(Failed::Stopped(why))
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

/// Worker slots shared fairly between owners (keys: sessions, principals).
///
/// At most `workers` slots are held at once, and an owner alone may hold
/// them all. An owner's *share* is half the slots, rounded up. When an owner
/// holding less than its share must wait while another holds more than its
/// share, the most recent of that other owner's slots is *preempted*: its
/// holder is told ([`Slot::preempted`]) to give it back and get in line
/// again, so that one session's never-ending filters cannot keep another's
/// from running (a jq filter has no side effects: running it again later is
/// safe). A slot taken after waiting in line again is not preempted twice.
/// Waiting queries are served fewest-held owner first, then in order of
/// arrival. Generic over the key so that the owner type can change; the
/// rules need only equality.
pub struct FairSlots<K> {
    workers: usize,
    state: Mutex<SlotState<K>>,
}

struct SlotState<K> {
    held: Vec<Held<K>>,
    /// In order of arrival.
    waiting: VecDeque<Waiter<K>>,
    next_ticket: u64,
}

impl<K: Eq> SlotState<K> {
    fn held_by(&self, owner: &K) -> usize {
        self.held.iter().filter(|h| h.owner == *owner).count()
    }
}

struct Held<K> {
    ticket: u64,
    owner: K,
    preemptible: bool,
    preempt: CancellationToken,
}

struct Waiter<K> {
    ticket: u64,
    owner: K,
    preemptible: bool,
    granted: oneshot::Sender<CancellationToken>,
}

/// No slot came free in time, or the owner already has
/// [`MAX_WAITING_PER_OWNER`] queries waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    /// The slots there are.
    pub workers: usize,
    /// Of those, held by the owner that asked.
    pub held_by_owner: usize,
    /// Whether the owner's waiting line was full (it did not wait).
    pub line_full: bool,
}

impl Busy {
    /// What to tell the model: the workers were busy, how many, and to try
    /// again; its filter did not run.
    pub fn message(&self, waited: Duration) -> String {
        let own = match self.held_by_owner {
            0 => String::new(),
            n => format!(", {n} of them with your own queries,"),
        };
        let how = if self.line_full {
            format!("and you already have {MAX_WAITING_PER_OWNER} queries waiting for one")
        } else {
            format!("for {}", seconds(waited))
        };
        format!(
            "all {} jq workers were busy{own} {how}: the filter did not run (nothing is wrong with it). Try it again in a moment; `[query] workers` in the config sets how many queries run at once.",
            self.workers
        )
    }
}

impl<K: Clone + Eq> FairSlots<K> {
    /// `workers` slots, all free.
    pub fn new(workers: usize) -> Self {
        Self {
            workers,
            state: Mutex::new(SlotState {
                held: Vec::new(),
                waiting: VecDeque::new(),
                next_ticket: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Slots held, and queries waiting for one.
    pub fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.held.len(), state.waiting.len())
    }

    /// A slot for `owner`, waiting at most `wait` for one; given back when
    /// the [`Slot`] is dropped. A `preemptible` slot may be asked back for
    /// another owner (see [`FairSlots`]). Cancel-safe: a dropped wait leaves
    /// the line (or gives back the slot it was granted meanwhile).
    pub async fn acquire(
        self: &Arc<Self>,
        owner: &K,
        wait: Duration,
        preemptible: bool,
    ) -> Result<Slot<K>, Busy> {
        let (granted, rx) = oneshot::channel();
        let ticket = {
            let mut state = self.lock();
            let queued = state.waiting.iter().filter(|w| w.owner == *owner).count();
            if queued >= MAX_WAITING_PER_OWNER {
                return Err(self.busy(&state, owner, true));
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.waiting.push_back(Waiter {
                ticket,
                owner: owner.clone(),
                preemptible,
                granted,
            });
            self.dispatch(&mut state);
            if state.waiting.iter().any(|w| w.ticket == ticket) {
                self.preempt_for(&mut state, owner);
            }
            ticket
        };
        let mut waiting = Waiting {
            slots: self.clone(),
            ticket,
            rx: Some(rx),
        };
        let rx = waiting.rx.as_mut().expect("set above");
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(preempt)) => {
                waiting.rx = None;
                Ok(Slot {
                    slots: self.clone(),
                    ticket,
                    preempt,
                })
            }
            _ => {
                let busy = self.busy(&self.lock(), owner, false);
                // Dropping `waiting` leaves the line.
                drop(waiting);
                Err(busy)
            }
        }
    }

    fn busy(&self, state: &SlotState<K>, owner: &K, line_full: bool) -> Busy {
        Busy {
            workers: self.workers,
            held_by_owner: state.held_by(owner),
            line_full,
        }
    }

    /// Grants free slots to waiting queries, fewest-held owner first, then
    /// oldest first. Linear in the queries waiting per slot granted.
    fn dispatch(&self, state: &mut SlotState<K>) {
        while state.held.len() < self.workers {
            let next = state
                .waiting
                .iter()
                .enumerate()
                .min_by_key(|(at, w)| (state.held_by(&w.owner), *at))
                .map(|(at, _)| at);
            let Some(at) = next else { return };
            let waiter = state.waiting.remove(at).expect("found above");
            let preempt = CancellationToken::new();
            if waiter.granted.send(preempt.clone()).is_ok() {
                state.held.push(Held {
                    ticket: waiter.ticket,
                    owner: waiter.owner,
                    preemptible: waiter.preemptible,
                    preempt,
                });
            }
        }
    }

    /// `owner` waits: if it holds less than its share while another owner
    /// holds more than its own (not counting slots already asked back),
    /// asks back that owner's most recent preemptible slot.
    fn preempt_for(&self, state: &mut SlotState<K>, owner: &K) {
        let share = self.workers.div_ceil(2);
        if state.held_by(owner) >= share {
            return;
        }
        let keeps = |state: &SlotState<K>, o: &K| {
            state
                .held
                .iter()
                .filter(|h| h.owner == *o && !h.preempt.is_cancelled())
                .count()
        };
        let victim = state
            .held
            .iter()
            .filter(|h| h.owner != *owner && h.preemptible && !h.preempt.is_cancelled())
            .filter(|h| keeps(state, &h.owner) > share)
            .max_by_key(|h| (keeps(state, &h.owner), h.ticket));
        if let Some(victim) = victim {
            victim.preempt.cancel();
        }
    }

    /// Gives back the slot granted to `ticket` and serves the line.
    fn release(&self, ticket: u64) {
        let mut state = self.lock();
        state.held.retain(|h| h.ticket != ticket);
        self.dispatch(&mut state);
    }
}

/// A held slot; dropping it gives it back.
pub struct Slot<K: Clone + Eq> {
    slots: Arc<FairSlots<K>>,
    ticket: u64,
    preempt: CancellationToken,
}

impl<K: Clone + Eq> Slot<K> {
    /// Completes when the slot is asked back for another owner: its holder
    /// should stop, give it back, and get in line again.
    pub async fn preempted(&self) {
        self.preempt.cancelled().await;
    }
}

impl<K: Clone + Eq> Drop for Slot<K> {
    fn drop(&mut self) {
        self.slots.release(self.ticket);
    }
}

/// A query in line for a slot; dropped before it got one, it leaves the
/// line, or gives back the slot granted since.
struct Waiting<K: Clone + Eq> {
    slots: Arc<FairSlots<K>>,
    ticket: u64,
    /// `None` once the slot was taken.
    rx: Option<oneshot::Receiver<CancellationToken>>,
}

impl<K: Clone + Eq> Drop for Waiting<K> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let mut state = self.slots.lock();
        if let Some(at) = state.waiting.iter().position(|w| w.ticket == self.ticket) {
            state.waiting.remove(at);
            return;
        }
        drop(state);
        // Granted (under the lock, so the grant is visible now) but never
        // taken.
        if rx.try_recv().is_ok() {
            self.slots.release(self.ticket);
        }
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
    /// Starts `sluice jq-worker`, from the binary that runs
    /// ([`running_binary`](crate::upstream::tether::running_binary)): the
    /// path sluice started from may no longer hold it (deleted or
    /// replaced by an upgrade in place or a rebuild), and a worker of
    /// another version is not this one's.
    fn start() -> Result<Self, String> {
        let exe = match crate::upstream::tether::running_binary() {
            Some(exe) => exe,
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find the sluice binary: {e}"))?,
        };
        let mut child = tokio::process::Command::new(exe)
            .arg("jq-worker")
            .env("RUST_BACKTRACE", "0")
            // A worker's memory limit is `RLIMIT_AS`, which counts address
            // space. mimalloc reserves 1 GiB of it for its arenas when it
            // starts, before the limit is set, and a query allocating
            // inside that reservation would not meet the limit. Without
            // arenas every block is mapped when it is needed, and counted.
            .env("MIMALLOC_DISALLOW_ARENA_ALLOC", "1")
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

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(11);
    type Slots = Arc<FairSlots<&'static str>>;

    async fn held(slots: &Slots, owner: &'static str) -> Slot<&'static str> {
        slots.acquire(&owner, WAIT, true).await.unwrap()
    }

    type Waiter = tokio::task::JoinHandle<Result<Slot<&'static str>, Busy>>;

    /// A wait for a slot on a task of its own.
    fn waiter(slots: &Slots, owner: &'static str) -> Waiter {
        let slots = slots.clone();
        tokio::spawn(async move { slots.acquire(&owner, WAIT, true).await })
    }

    /// The slot a waiter got.
    async fn got(waiter: Waiter) -> Slot<&'static str> {
        waiter.await.unwrap().expect("a slot")
    }

    fn waiter_not_preemptible(slots: &Slots, owner: &'static str) -> Waiter {
        let slots = slots.clone();
        tokio::spawn(async move { slots.acquire(&owner, WAIT, false).await })
    }

    fn asked_back(slot: &Slot<&'static str>) -> bool {
        slot.preempt.is_cancelled()
    }

    #[tokio::test(start_paused = true)]
    async fn an_owner_alone_uses_every_slot_and_then_waits() {
        let slots = Arc::new(FairSlots::new(2));
        let (a1, a2) = (held(&slots, "a").await, held(&slots, "a").await);
        let refused = slots.acquire(&"a", WAIT, true).await.err().unwrap();
        assert_eq!(
            refused,
            Busy {
                workers: 2,
                held_by_owner: 2,
                line_full: false
            }
        );
        assert!(
            !asked_back(&a1) && !asked_back(&a2),
            "its own wait asks nothing back"
        );
        let message = refused.message(WAIT);
        assert!(
            message.starts_with("all 2 jq workers were busy, 2 of them with your own queries, for 11 s: the filter did not run (nothing is wrong with it). Try it again"),
            "{message}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_gets_the_most_recent_slot_of_an_owner_past_its_share() {
        let slots = Arc::new(FairSlots::new(2));
        let (a1, a2) = (held(&slots, "a").await, held(&slots, "a").await);
        let b = waiter(&slots, "b");
        a2.preempted().await;
        assert!(!asked_back(&a1), "a keeps its share");
        drop(a2);
        let b = got(b).await;
        // A query that gave its slot back waits in line again; the slot it
        // then gets is not asked back a second time.
        let again = waiter_not_preemptible(&slots, "a");
        drop(b);
        let again = again.await.unwrap().unwrap();
        let c = waiter(&slots, "c");
        tokio::task::yield_now().await;
        assert!(!asked_back(&again) && asked_back(&a1));
        drop(a1);
        got(c).await;
    }

    #[tokio::test(start_paused = true)]
    async fn shares_are_halves_rounded_up_and_owners_at_their_share_keep_it() {
        let slots = Arc::new(FairSlots::new(4));
        let mut a = Vec::new();
        for _ in 0..4 {
            a.push(held(&slots, "a").await);
        }
        let (b, c) = (waiter(&slots, "b"), waiter(&slots, "c"));
        tokio::task::yield_now().await;
        assert_eq!(
            a.iter().map(asked_back).collect::<Vec<_>>(),
            [false, false, true, true],
            "a keeps its share of 2"
        );
        let d = waiter(&slots, "d");
        tokio::task::yield_now().await;
        assert!(!asked_back(&a[1]));
        a.truncate(2);
        let (_b, _c) = (got(b).await, got(c).await);
        tokio::task::yield_now().await;
        assert!(!d.is_finished(), "d waits its turn");
        drop(a);
        got(d).await;
        // One slot: nothing to share, each in turn.
        let one = Arc::new(FairSlots::new(1));
        let a = held(&one, "a").await;
        let b = waiter(&one, "b");
        tokio::task::yield_now().await;
        assert!(!asked_back(&a));
        drop(a);
        got(b).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_line_is_served_fewest_held_owner_first() {
        let slots = Arc::new(FairSlots::new(2));
        let _a = held(&slots, "a").await;
        let b = held(&slots, "b").await;
        let a_again = waiter(&slots, "a");
        tokio::task::yield_now().await;
        let c = waiter(&slots, "c");
        tokio::task::yield_now().await;
        assert_eq!(slots.load(), (2, 2));
        assert!(!asked_back(&b), "no owner is past its share");
        // b's slot goes to c, which holds none, though a asked first.
        drop(b);
        let _c = got(c).await;
        tokio::task::yield_now().await;
        assert!(!a_again.is_finished());
        let refused = a_again.await.unwrap().err().unwrap();
        assert_eq!(refused.held_by_owner, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_given_up_leaves_the_line_and_a_full_line_is_refused_at_once() {
        let slots = Arc::new(FairSlots::new(1));
        let a = held(&slots, "a").await;
        // A client that cancels its query while it waits.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), held(&slots, "b")).await;
        assert!(gave_up.is_err());
        assert_eq!(slots.load(), (1, 0));
        let line: Vec<_> = (0..MAX_WAITING_PER_OWNER)
            .map(|_| waiter(&slots, "b"))
            .collect();
        tokio::task::yield_now().await;
        assert_eq!(slots.load(), (1, MAX_WAITING_PER_OWNER));
        let full = slots.acquire(&"b", WAIT, true).await.err().unwrap();
        assert!(full.line_full);
        assert!(
            full.message(WAIT)
                .contains("you already have 16 queries waiting")
        );
        drop(a);
        for waiter in line {
            drop(got(waiter).await);
        }
        assert_eq!(slots.load(), (0, 0));
    }
}
