//! Slow calls as operations: a tool call still running at its timeout goes
//! on in the background, and the client gets an operation id at once;
//! `sluice_result` reads (or waits for) its end, `sluice_cancel` stops it.
//!
//! The call itself runs in a task of the gateway's ([`crate::gateway`]);
//! this module keeps what is known of it: the latest progress the upstream
//! reported (the partial result), and its outcome once it ends. Operations
//! belong to the session that started them, like stored results, and are
//! kept `[operations] retention_h` after they end: at most `max_ended` of a
//! client's and `max_ended_total` in all, the latest (an ended operation
//! holds its result; a client could otherwise make them without end).
//!
//! With `[store] backend = "redis"` an operation is seen by every instance
//! ([`crate::state::shared`]): the instance that runs the call owns it and
//! writes its record (status, what the upstream reported, and its outcome)
//! when it starts, when what it reported changed (at most every
//! [`PUBLISH_EVERY`]) and when it ends. Another instance reads the record,
//! waits for its changes as announced (no polling: a message per change,
//! and a look at the record and the owner's heartbeat every [`LOOK_EVERY`]), and
//! asks the owner to cancel it. An operation whose owner's heartbeat lapsed
//! is reported failed, with that reason.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

// The runtime's clock (see `crate::clock`): retention and ages follow a
// paused test clock too.
use tokio::time::Instant;

use rmcp::model::{
    CallToolResult, ContentBlock, DetailedTask, ErrorCode, ErrorData, GetTaskResult, JsonObject,
    ProgressNotificationParam, Task, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use sluice_core::format::timestamp;
use sluice_core::operation::OperationSettings;
use sluice_core::store::Owner;
use tokio_util::sync::CancellationToken;

use crate::caller::Quota;
use crate::govern::{ToolAnswer, with_meta, with_meta_as_sent};
use crate::state::backing::Backing;
use crate::state::shared::{HEARTBEAT_EVERY, Shared};

/// How often the owner of running operations writes what changed in them
/// (and renews its heartbeat: a third of its lease).
const PUBLISH_EVERY: Duration = Duration::from_secs(2);
/// How often a wait for another instance's operation reads its record
/// again, besides when told it changed: to see that its owner died.
const LOOK_EVERY: Duration = Duration::from_secs(3);
/// How long a new operation's answer waits for its record to be written.
const RECORD_FIRST_WAIT: Duration = Duration::from_secs(1);
/// How long `sluice_cancel` on another instance than the owner waits to
/// see the operation cancelled.
const REMOTE_CANCEL_WAIT: Duration = Duration::from_secs(5);
/// How often starting an operation sweeps the ones kept, at most (unless
/// they grew past twice what `[operations]` keeps): see
/// [`Operations::try_start`].
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The `_meta` key of everything about an operation.
pub const META: &str = crate::contract::meta::OPERATION;

/// What the upstream reported while a call ran: shared with the call's
/// notification loop.
#[derive(Debug, Default)]
pub struct Partial {
    progress: Mutex<Option<ProgressNotificationParam>>,
    /// The latest status message of an upstream task (a tool that must be
    /// called as an MCP task reports this instead of progress).
    status: Mutex<Option<String>>,
    /// The last log lines routed to the call, oldest first.
    logs: Mutex<std::collections::VecDeque<String>>,
    detached: AtomicBool,
    /// Counts changes, for the owner to write them to other instances.
    changes: std::sync::atomic::AtomicU64,
}

/// How many characters of an upstream's status, log or progress message
/// an operation keeps (and the engine reads of a progress message: see
/// `upstream::rpc`): enough to read, while a message may be as large as a
/// notification may be.
pub const STATUS_CHARS: usize = 300;

/// Log lines a partial result keeps.
const LOG_LINES: usize = 5;

impl Partial {
    /// Keeps the latest progress.
    pub fn progress(&self, params: &ProgressNotificationParam) {
        *lock(&self.progress) = Some(params.clone());
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps an upstream task's latest status message.
    pub fn status(&self, message: &str) {
        *lock(&self.status) = Some(message.chars().take(STATUS_CHARS).collect());
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps a log line (the last [`LOG_LINES`], each cut at [`STATUS_CHARS`]).
    pub fn log(&self, logged: &crate::hub::Logged) {
        let data = logged.data().unwrap_or_default();
        // Cut before it is lowercased: the data may be as large as a
        // message may be.
        let data: String = data.chars().take(STATUS_CHARS).collect();
        let line: String = format!("{:?}: {data}", logged.level)
            .to_lowercase()
            .chars()
            .take(STATUS_CHARS)
            .collect();
        let mut logs = lock(&self.logs);
        if logs.len() == LOG_LINES {
            logs.pop_front();
        }
        logs.push_back(line);
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the call went on in the background: its client has its
    /// answer and hears no more about it.
    pub fn detached(&self) -> bool {
        self.detached.load(Ordering::Relaxed)
    }

    /// What it holds, for the operation's record.
    fn record(&self) -> Value {
        json!({
            "progress": self.json(),
            "status": self.status_message(),
            "logs": lock(&self.logs).iter().collect::<Vec<_>>(),
        })
    }

    /// The partial result an operation's record holds.
    fn from_record(record: &Value) -> Partial {
        let partial = Partial::default();
        if let Some(progress) = record.get("progress").filter(|p| p.is_object()) {
            let mut progress = progress.clone();
            progress["progressToken"] = json!(0);
            if let Ok(params) = serde_json::from_value(progress) {
                *lock(&partial.progress) = Some(params);
            }
        }
        if let Some(status) = record.get("status").and_then(Value::as_str) {
            partial.status(status);
        }
        if let Some(logs) = record.get("logs").and_then(Value::as_array) {
            let mut kept = lock(&partial.logs);
            for line in logs.iter().filter_map(Value::as_str).take(LOG_LINES) {
                kept.push_back(line.chars().take(STATUS_CHARS).collect());
            }
        }
        partial
    }

    /// `{progress, total?, message?}`, if the upstream reported any.
    fn json(&self) -> Option<Value> {
        // Whole numbers as integers, as upstreams usually mean them.
        let n = |x: f64| {
            if x.fract() == 0.0 && x.abs() < 1e15 {
                json!(x as i64)
            } else {
                json!(x)
            }
        };
        lock(&self.progress).as_ref().map(|p| {
            let mut v = json!({"progress": n(p.progress)});
            if let Some(total) = p.total {
                v["total"] = n(total);
            }
            if let Some(message) = &p.message {
                v["message"] = json!(message);
            }
            v
        })
    }

    /// The upstream task's latest status message, if any.
    fn status_message(&self) -> Option<String> {
        lock(&self.status).clone()
    }

    /// " Progress: 3/5 (step 3)." and the last log lines, if any.
    fn describe(&self) -> String {
        let logs = lock(&self.logs);
        let logs = if logs.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = logs.iter().map(String::as_str).collect();
            format!("\nLast log lines: {}", lines.join(" | "))
        };
        let status = self
            .status_message()
            .map(|m| format!(" Status: {m}"))
            .unwrap_or_default();
        let progress = lock(&self.progress).as_ref().map_or_else(
            || {
                if status.is_empty() {
                    " The tool has reported no progress.".to_owned()
                } else {
                    String::new()
                }
            },
            |p| {
                let mut s = format!(" Progress: {}", number(p.progress));
                if let Some(total) = p.total {
                    s.push_str(&format!("/{}", number(total)));
                }
                if let Some(message) = &p.message {
                    s.push_str(&format!(" ({message})"));
                }
                s.push('.');
                s
            },
        );
        status + &progress + &logs
    }
}

/// `0.5 s`, `12 s`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// How a call ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The upstream answered (the result is governed; it may be a tool error).
    Completed(CallToolResult),
    /// The upstream's result, within the budget, as the response it came
    /// in: answered as those bytes, never decoded (but for a task's
    /// payload where rmcp's server writes it: a `tasks/get` sluice's own
    /// layer does not take).
    Relayed(crate::jsonrpc::Message),
    /// The call failed: the upstream crashed, or answered with an error.
    Failed(String),
}

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Still running.
    Running,
    /// Ended with a result.
    Completed,
    /// Ended without one.
    Failed,
    /// Stopped by `sluice_cancel`.
    Cancelled,
}

impl Status {
    /// As in `_meta`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug)]
struct State {
    status: Status,
    outcome: Option<Outcome>,
    ended: Option<Instant>,
}

/// One call that outlived its timeout.
#[derive(Debug)]
pub struct Operation {
    /// `op_` and 128 random bits.
    pub id: String,
    owner: Owner,
    /// Whose share of `[operations] max_running` it takes; `None` for
    /// another instance's, read from its record (it takes no share here).
    quota: Option<Quota>,
    /// The tool, as the client named it.
    pub tool: String,
    started_at: SystemTime,
    started: Instant,
    partial: Arc<Partial>,
    cancel: CancellationToken,
    state: Mutex<State>,
    done: tokio::sync::watch::Sender<bool>,
    /// Where its record goes, when instances share operations.
    shared: Option<Sharing>,
    /// The instance that owns it, when it is another's (read from its
    /// record): it cannot be stopped here, only asked to stop.
    remote: Option<String>,
    /// The record of its end was written (else the owner writes it again
    /// until it is: a record left "running" would be read so for ever).
    end_written: AtomicBool,
    /// Held while its record is written.
    writing: tokio::sync::Mutex<()>,
    /// Told when it ends: a call waiting for room among the operations
    /// running (`[operations] max_running`) tries again. `None` for
    /// another instance's.
    freed: Option<Arc<tokio::sync::Notify>>,
}

/// What an operation needs to write its record.
#[derive(Clone)]
struct Sharing {
    link: Backing,
    retention: Duration,
}

impl std::fmt::Debug for Sharing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sharing")
    }
}

impl Operation {
    /// Whether it is this instance's, other instances read it, and the
    /// record of its end is not written yet.
    fn end_unshared(&self) -> bool {
        self.shared.is_some() && self.remote.is_none() && !self.end_written.load(Ordering::Relaxed)
    }

    /// Records the end, unless it ended already (a cancelled call's late
    /// answer changes nothing).
    pub fn finish(self: &Arc<Self>, outcome: Outcome) {
        let mut state = lock(&self.state);
        if state.status != Status::Running {
            return;
        }
        state.status = match outcome {
            Outcome::Completed(_) | Outcome::Relayed(_) => Status::Completed,
            Outcome::Failed(_) => Status::Failed,
        };
        state.outcome = Some(outcome);
        state.ended = Some(Instant::now());
        drop(state);
        self.tell_ended();
        self.publish();
    }

    /// Tells whoever waits that it ended: its [`Operation::wait`]ers, and
    /// the calls waiting for room among the operations running.
    fn tell_ended(&self) {
        self.done.send_replace(true);
        if let Some(freed) = &self.freed {
            freed.notify_waiters();
        }
    }

    /// Writes its record for the other instances, in the background.
    fn publish(self: &Arc<Self>) {
        if self.shared.is_none() || self.remote.is_some() {
            return;
        }
        let op = self.clone();
        tokio::spawn(async move { op.write_record().await });
    }

    /// Writes its record as it is when the write begins: one write at a
    /// time, so that a record of its end is never followed by an older one.
    async fn write_record(&self) {
        let Some(sharing) = &self.shared else { return };
        let _one_at_a_time = self.writing.lock().await;
        if self.end_written.load(Ordering::Relaxed) {
            return;
        }
        let ended = self.status() != Status::Running;
        let (record, life) = self.record(sharing);
        if sharing
            .link
            .operation_write(&self.id, record, life)
            .await
            .is_ok()
            && ended
        {
            self.end_written.store(true, Ordering::Relaxed);
        }
    }

    /// Its record (JSON) and how long the record lives: the retention
    /// after it ends; while it runs, the retention and one more write.
    fn record(&self, sharing: &Sharing) -> (String, Duration) {
        let state = lock(&self.state);
        let ended = state
            .ended
            .map(|e| crate::clock::wall() - e.elapsed())
            .map(sluice_core::store::framed::millis);
        let outcome = match &state.outcome {
            Some(Outcome::Completed(result)) => json!({"completed": result}),
            Some(Outcome::Relayed(sent)) => {
                json!({"relayed": sent.as_str()})
            }
            Some(Outcome::Failed(why)) => json!({"failed": why}),
            None => Value::Null,
        };
        let record = json!({
            "v": 1,
            "instance": sharing.link.instance(),
            "owner": self.owner.key(),
            "tool": self.tool,
            "started_ms": sluice_core::store::framed::millis(self.started_at),
            "ended_ms": ended,
            "status": state.status.as_str(),
            "partial": self.partial.record(),
            "outcome": outcome,
        });
        let life = match state.status {
            Status::Running => sharing.retention + PUBLISH_EVERY * 30,
            _ => sharing.retention,
        };
        (record.to_string(), life)
    }

    /// The operation another instance owns, as its `record` says; failed
    /// if it runs and its instance was `lost` (why).
    fn from_record(id: &str, record: &Value, lost: Option<String>) -> Option<Self> {
        if record.get("v") != Some(&json!(1)) {
            return None;
        }
        let text = |k: &str| record.get(k).and_then(Value::as_str);
        let at = |k: &str| {
            record
                .get(k)
                .and_then(Value::as_u64)
                .map(sluice_core::store::framed::at_millis)
        };
        let instance = text("instance")?.to_owned();
        let owner = Owner::from_key(text("owner")?)?;
        let started_at = at("started_ms")?;
        let ago = |t: SystemTime| {
            let age = crate::clock::wall().duration_since(t).unwrap_or_default();
            Instant::now().checked_sub(age).unwrap_or_else(Instant::now)
        };
        let mut status = match text("status")? {
            "running" => Status::Running,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            _ => return None,
        };
        let outcome = record.get("outcome");
        let mut outcome = match outcome
            .and_then(Value::as_object)
            .and_then(|o| o.iter().next())
        {
            Some((k, v)) if k == "completed" => {
                Some(Outcome::Completed(serde_json::from_value(v.clone()).ok()?))
            }
            Some((k, Value::String(sent))) if k == "relayed" => Some(Outcome::Relayed(
                crate::jsonrpc::Message::parse(bytes::Bytes::from(sent.clone())).ok()?,
            )),
            Some((k, Value::String(why))) if k == "failed" => Some(Outcome::Failed(why.clone())),
            _ => None,
        };
        let mut ended = at("ended_ms").map(ago);
        if status == Status::Running
            && let Some(why) = lost
        {
            status = Status::Failed;
            outcome = Some(Outcome::Failed(why));
            ended = Some(Instant::now());
        }
        let partial = record
            .get("partial")
            .map(Partial::from_record)
            .unwrap_or_default();
        let done = tokio::sync::watch::Sender::new(status != Status::Running);
        Some(Operation {
            id: id.to_owned(),
            owner,
            quota: None,
            tool: text("tool")?.to_owned(),
            started_at,
            started: ago(started_at),
            partial: Arc::new(partial),
            cancel: CancellationToken::new(),
            state: Mutex::new(State {
                status,
                outcome,
                ended,
            }),
            done,
            shared: None,
            remote: Some(instance),
            end_written: AtomicBool::default(),
            writing: tokio::sync::Mutex::default(),
            freed: None,
        })
    }

    /// Where it is now.
    pub fn status(&self) -> Status {
        lock(&self.state).status
    }

    /// Seconds from the start to the end, or to now.
    fn elapsed(&self) -> Duration {
        let ended = lock(&self.state).ended;
        ended.unwrap_or_else(Instant::now) - self.started
    }

    /// `_meta["sluice/operation"]`.
    pub fn meta(&self) -> Value {
        let mut meta = json!({
            "id": self.id,
            "status": self.status().as_str(),
            "tool": self.tool,
            "started_at": timestamp(self.started_at),
            "elapsed_s": (self.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        });
        if let Some(progress) = self.partial.json() {
            meta["progress"] = progress;
        }
        if let Some(message) = self.partial.status_message() {
            meta["status_message"] = json!(message);
        }
        meta
    }

    /// The operation as an MCP task (SEP-2663): its id is the task id.
    pub fn task(&self, retention: Duration) -> Task {
        let (status, ended) = {
            let state = lock(&self.state);
            (state.status, state.ended)
        };
        let lived = ended.unwrap_or_else(Instant::now) - self.started;
        let status = match status {
            Status::Running => TaskStatus::Working,
            Status::Completed => TaskStatus::Completed,
            Status::Failed => TaskStatus::Failed,
            Status::Cancelled => TaskStatus::Cancelled,
        };
        let message = self.partial.describe();
        let mut task = Task::new(
            self.id.clone(),
            status,
            timestamp(self.started_at),
            timestamp(self.started_at + lived),
        )
        // Kept `retention` after it ends: counted from its creation.
        .with_ttl_ms((lived + retention).as_millis() as u64)
        .with_poll_interval_ms(TASK_POLL_MS);
        if !message.trim().is_empty() {
            task = task.with_status_message(message.trim());
        }
        task
    }

    /// The task with what its status carries: the result of a completed
    /// call (`finish` turns it into the client's era), the error of a
    /// failed one. A result kept as the response it came in is given as
    /// that response beside a task whose `result` is empty, when `as_sent`;
    /// else decoded.
    fn detailed_task(
        &self,
        retention: Duration,
        finish: impl FnOnce(CallToolResult) -> CallToolResult,
        as_sent: bool,
    ) -> (DetailedTask, Option<crate::jsonrpc::Message>) {
        let task = self.task(retention);
        let mut sent = None;
        let outcome = match lock(&self.state).outcome.clone() {
            Some(Outcome::Relayed(response)) if as_sent && task.status == TaskStatus::Completed => {
                sent = Some(response);
                let payload = TaskPayload::Completed {
                    result: JsonObject::new(),
                };
                return (DetailedTask::new(task, payload), sent);
            }
            Some(Outcome::Relayed(response)) => Some(Outcome::Completed(decoded(&response))),
            outcome => outcome,
        };
        let payload = match (task.status, outcome) {
            (TaskStatus::Completed, Some(Outcome::Completed(result))) => {
                let result = serde_json::to_value(finish(result))
                    .ok()
                    .and_then(|v| match v {
                        Value::Object(o) => Some(o),
                        _ => None,
                    })
                    .unwrap_or_default();
                TaskPayload::Completed { result }
            }
            (TaskStatus::Failed, Some(Outcome::Failed(why))) => {
                let mut error = JsonObject::new();
                error.insert("code".into(), json!(ErrorCode::INTERNAL_ERROR.0));
                error.insert(
                    "message".into(),
                    json!(format!(
                        "operation {} (`{}`) failed: {why}",
                        self.id, self.tool
                    )),
                );
                TaskPayload::Failed { error }
            }
            (TaskStatus::Cancelled, _) => TaskPayload::Cancelled,
            _ => TaskPayload::Working,
        };
        (DetailedTask::new(task, payload), sent.take())
    }

    /// Waits until the operation ends or `wait` passes, without polling.
    pub async fn wait(&self, wait: Duration) {
        let mut done = self.done.subscribe();
        let _ = tokio::time::timeout(wait, done.wait_for(|ended| *ended)).await;
    }

    /// One line about it, for lists.
    fn line(&self) -> String {
        format!(
            "{} `{}` {} {:.0} s",
            self.id,
            self.tool,
            self.status().as_str(),
            self.elapsed().as_secs_f64()
        )
    }
}

type ById = Arc<Mutex<HashMap<String, Arc<Operation>>>>;

/// The operations of every session.
pub struct Operations {
    settings: OperationSettings,
    ops: ById,
    /// The operations started here not yet seen to end: what
    /// [`Operations::try_start`] counts. Bounded by the limits
    /// it enforces, where `ops` keeps every operation of the last
    /// `retention_h` (within `max_ended`, `max_ended_total`).
    running: Mutex<Vec<Arc<Operation>>>,
    /// Where records of operations go (other instances read them there;
    /// on disk, a restarted sluice), if anywhere.
    shared: Option<Backing>,
    /// When `ops` was last swept ([`sweep`]).
    swept: Mutex<Instant>,
    /// Told whenever an operation started here ends.
    freed: Arc<tokio::sync::Notify>,
}

/// Which limit keeps a call from becoming an operation, and how many run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The client's share (`[operations] max_running`): its operations.
    Client(usize),
    /// sluice's (`[operations] max_running_total`): everyone's.
    All(usize),
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let counted = |n: usize| sluice_core::format::counted(n as u64, "operation", "operations");
        match *self {
            Full::Client(n) => write!(
                f,
                "its client has {} running, the most allowed (`[operations] max_running`)",
                counted(n)
            ),
            Full::All(n) => write!(
                f,
                "sluice is running {} for all its clients, the most allowed (`[operations] max_running_total`)",
                counted(n)
            ),
        }
    }
}

impl Operations {
    /// No operations yet; their records kept in `shared`, if given: with
    /// the cancellations other instances ask of this one (`asked`), when
    /// it is shared with them.
    pub fn new(
        settings: OperationSettings,
        shared: Option<Backing>,
        asked: Option<tokio::sync::mpsc::Receiver<String>>,
    ) -> Self {
        let ops = ById::default();
        if let Some(link) = &shared {
            if !link.exclusive() {
                tokio::spawn(beat(Arc::downgrade(&ops), link.clone()));
            }
            tokio::spawn(keep_shared(Arc::downgrade(&ops), link.clone(), asked));
        }
        Self {
            settings,
            ops,
            running: Mutex::default(),
            shared,
            swept: Mutex::new(Instant::now()),
            freed: Arc::default(),
        }
    }

    /// The `[operations]` settings.
    pub fn settings(&self) -> &OperationSettings {
        &self.settings
    }

    /// Makes a call that outlived its timeout an operation, if its
    /// `quota` (an owner's key, or an anonymous client's address) and
    /// sluice have room for one more running: else which limit is reached
    /// (the call then goes on with its client waiting, and tries again when
    /// one ends: [`Operations::freed`]). The caller finishes it (with
    /// [`Operation::finish`]) when the call ends; `cancel` stops the call.
    ///
    /// The limits count what runs without a client waiting for it: a call
    /// is counted when it becomes an operation, never before it is sent
    /// (operations that never end would otherwise hold a client's every
    /// call, of any tool, refused).
    pub fn try_start(
        &self,
        owner: Owner,
        quota: Quota,
        tool: &str,
        partial: Arc<Partial>,
        cancel: CancellationToken,
        started: Instant,
    ) -> Result<Arc<Operation>, Full> {
        // Held until the operation is counted: two calls at their
        // timeouts at once do not both take the last place.
        let mut running = lock(&self.running);
        running.retain(|o| o.status() == Status::Running);
        let mine = running
            .iter()
            .filter(|o| o.quota.as_ref() == Some(&quota))
            .count();
        if mine >= self.settings.max_running {
            return Err(Full::Client(mine));
        }
        if running.len() >= self.settings.max_running_total {
            return Err(Full::All(running.len()));
        }
        partial.detached.store(true, Ordering::Relaxed);
        let id = sluice_core::store::random_id("op_");
        let op = Arc::new(Operation {
            id: id.clone(),
            owner,
            quota: Some(quota),
            tool: tool.to_owned(),
            started_at: crate::clock::wall() - started.elapsed(),
            started,
            partial,
            cancel,
            state: Mutex::new(State {
                status: Status::Running,
                outcome: None,
                ended: None,
            }),
            done: tokio::sync::watch::Sender::new(false),
            shared: self.shared.clone().map(|link| Sharing {
                link,
                retention: self.settings.retention,
            }),
            remote: None,
            end_written: AtomicBool::default(),
            writing: tokio::sync::Mutex::default(),
            freed: Some(self.freed.clone()),
        });
        let mut ops = lock(&self.ops);
        ops.insert(id, op.clone());
        // Operations only come in here: swept at most once a second (and
        // whenever they are twice what is kept), `ops` holds at most twice
        // `max_ended_total` + `max_running_total`, however fast a client
        // makes operations (a tiny `_timeout_s`, a task per call).
        let kept = self.settings.max_ended_total + self.settings.max_running_total;
        let mut swept = lock(&self.swept);
        if swept.elapsed() >= SWEEP_EVERY || ops.len() > 2 * kept {
            *swept = Instant::now();
            drop(swept);
            sweep(&mut ops, &self.settings);
        }
        drop(ops);
        running.push(op.clone());
        Ok(op)
    }

    /// Fires when one of this instance's operations ends (and so may have
    /// made room under `[operations] max_running`): enable it before
    /// [`Operations::try_start`], so that an end between the two is not
    /// missed.
    pub fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// Writes the record of `op`, just started, before its id is given (as
    /// a stored result is synced before its handle is), so that a crash
    /// right after does not leave an id nobody knows: waits at most
    /// [`RECORD_FIRST_WAIT`], else the periodic writes make it.
    pub async fn recorded(&self, op: &Arc<Operation>) {
        if self.shared.is_some() {
            let _ = tokio::time::timeout(RECORD_FIRST_WAIT, op.write_record()).await;
        }
    }

    /// Whether `op` is still kept: running, or ended within the retention
    /// (the sweep forgets the others later).
    fn kept(&self, op: &Operation) -> bool {
        within_retention(op, self.settings.retention)
    }

    /// `owner`'s operation `id`: this instance's, or (when operations are
    /// shared) another's, as its record says now.
    pub async fn get(&self, owner: &Owner, id: &str) -> Result<Arc<Operation>, String> {
        // The lock is released before the hint takes it again.
        let found = lock(&self.ops)
            .get(id)
            .filter(|o| o.owner == *owner && self.kept(o))
            .cloned();
        if let Some(op) = found {
            return Ok(op);
        }
        if let Some(link) = &self.shared {
            match read_remote(link, id).await {
                Ok(Some(op)) if op.owner == *owner => return Ok(Arc::new(op)),
                Ok(_) => {}
                Err(why) => {
                    return Err(format!(
                        "operation `{}` is not this instance's, and the operations of the others cannot be read: {why}",
                        sluice_core::format::quoted_cut(id)
                    ));
                }
            }
        }
        Err({
            format!(
                "unknown operation `{}`: it was never started by you, or it ended more than {} h ago, or more than {} of yours (`[operations] max_ended`), or {} in all, ended after it. {}",
                sluice_core::format::quoted_cut(id),
                self.settings.retention.as_secs() / 3600,
                self.settings.max_ended,
                self.settings.max_ended_total,
                self.list_hint(owner)
            )
        })
    }

    /// Waits until `op` ends or `wait` passes, without polling; `op` as it
    /// is then (another instance's, read again).
    pub async fn wait(&self, op: Arc<Operation>, wait: Duration) -> Arc<Operation> {
        let (Some(link), Some(_)) = (&self.shared, &op.remote) else {
            op.wait(wait).await;
            return op;
        };
        let deadline = Instant::now() + wait;
        let mut op = op;
        while op.status() == Status::Running {
            let changed = link.topic(&Shared::operation_topic(&op.id));
            let changed = changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Ok(Some(now)) = read_remote(link, &op.id).await {
                op = Arc::new(now);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if op.status() != Status::Running || left.is_zero() {
                break;
            }
            // Woken by a change; else, a heartbeat's lease later, to see
            // whether the owner still lives.
            let _ = tokio::time::timeout(left.min(LOOK_EVERY), changed).await;
        }
        op
    }

    /// Cancels a running `op` (this instance's, or asks its owner), and
    /// gives it as it is then; the status it had if it had already ended.
    pub async fn cancel(&self, op: Arc<Operation>) -> Result<Arc<Operation>, Status> {
        let (Some(link), Some(instance)) = (&self.shared, &op.remote) else {
            return stop(&op).map(|()| op);
        };
        if op.status() != Status::Running {
            return Err(op.status());
        }
        // Not heard: the owner died, which its heartbeat will soon say.
        let _ = link.ask_cancel(instance, &op.id).await;
        Ok(self.wait(op, REMOTE_CANCEL_WAIT).await)
    }

    /// `owner`'s operations, newest first; none for an anonymous owner,
    /// whose operation ids are capabilities.
    pub fn list(&self, owner: &Owner) -> Vec<Arc<Operation>> {
        if !owner.may_list() {
            return Vec::new();
        }
        let mut mine: Vec<Arc<Operation>> = lock(&self.ops)
            .values()
            .filter(|o| o.owner == *owner && self.kept(o))
            .cloned()
            .collect();
        mine.sort_by_key(|o| std::cmp::Reverse(o.started));
        mine
    }

    /// Every operation this instance keeps, whoever owns it, newest first
    /// (for the operator's view: `--admin`).
    pub fn all(&self) -> Vec<Arc<Operation>> {
        let mut all: Vec<Arc<Operation>> = lock(&self.ops)
            .values()
            .filter(|o| self.kept(o))
            .cloned()
            .collect();
        all.sort_by_key(|o| std::cmp::Reverse(o.started));
        all
    }

    /// "Your operations: …" for `sluice_info {}` and errors.
    pub fn list_hint(&self, owner: &Owner) -> String {
        if !owner.may_list() {
            return String::new();
        }
        let mine = self.list(owner);
        if mine.is_empty() {
            return "You have no operations here.".into();
        }
        let lines: Vec<String> = mine.iter().take(20).map(|o| o.line()).collect();
        format!("Your operations: {}.", lines.join("; "))
    }

    /// The answer of a call that became an operation.
    pub fn started_answer(&self, op: &Operation) -> CallToolResult {
        let text = format!(
            "`{}` is still running after {}, so it goes on in the background as operation {}.{}\nNext: sluice_result {} — waits up to 60 s for its result (add nothing to just look); sluice_cancel {{\"operation\":\"{}\"}} stops it.",
            op.tool,
            seconds(op.elapsed()),
            op.id,
            op.partial.describe(),
            json!({"operation": op.id, "wait_s": 60}),
            op.id,
        );
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.meta = Some(with_meta(None, META, op.meta()));
        result
    }

    /// `tasks/get` (SEP-2663): the operation `task_id` as a task; `finish`
    /// puts a completed call's result in the client's era.
    pub async fn get_task(
        &self,
        task_id: &str,
        owner: &Owner,
        finish: impl FnOnce(CallToolResult) -> CallToolResult,
    ) -> Result<GetTaskResult, ErrorData> {
        self.task_state(task_id, owner, finish, false)
            .await
            .map(|(result, _)| result)
    }

    /// [`Self::get_task`], but a completed call's result kept as the
    /// response it came in is given as that response, beside a task whose
    /// `result` is empty (for whoever writes the answer's bytes: the
    /// result goes in as sent).
    pub async fn get_task_as_sent(
        &self,
        task_id: &str,
        owner: &Owner,
        finish: impl FnOnce(CallToolResult) -> CallToolResult,
    ) -> Result<(GetTaskResult, Option<crate::jsonrpc::Message>), ErrorData> {
        self.task_state(task_id, owner, finish, true).await
    }

    async fn task_state(
        &self,
        task_id: &str,
        owner: &Owner,
        finish: impl FnOnce(CallToolResult) -> CallToolResult,
        as_sent: bool,
    ) -> Result<(GetTaskResult, Option<crate::jsonrpc::Message>), ErrorData> {
        let op = self.get(owner, task_id).await.map_err(task_error)?;
        let (task, sent) = op.detailed_task(self.settings.retention, finish, as_sent);
        let mut result = GetTaskResult::new(task);
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(META.into(), op.meta());
        result.meta = Some(meta);
        Ok((result, sent))
    }

    /// `tasks/cancel` (SEP-2663): cancels the operation `task_id`, as
    /// `sluice_cancel` does.
    pub async fn cancel_task(&self, task_id: &str, owner: &Owner) -> Result<(), ErrorData> {
        let op = self.get(owner, task_id).await.map_err(task_error)?;
        let id = op.id.clone();
        self.cancel(op).await.map(|_| ()).map_err(|status| {
            ErrorData::invalid_params(
                format!(
                    "task {id} already ended ({}): nothing to cancel",
                    status.as_str()
                ),
                None,
            )
        })
    }
}

/// Suggested interval between two `tasks/get` of a client (SEP-2663).
const TASK_POLL_MS: u64 = 1000;

/// An unknown task is an invalid `taskId` (SEP-2663: -32602).
fn task_error(message: String) -> ErrorData {
    ErrorData::invalid_params(
        message.replacen("unknown operation", "unknown task", 1),
        None,
    )
}

/// Marks a running operation cancelled and stops its call; the status it
/// had if it had already ended.
pub fn stop(op: &Arc<Operation>) -> Result<(), Status> {
    {
        let mut state = lock(&op.state);
        if state.status != Status::Running {
            return Err(state.status);
        }
        state.status = Status::Cancelled;
        state.ended = Some(Instant::now());
    }
    op.tell_ended();
    // The call's task sees the token and cancels the upstream request.
    op.cancel.cancel();
    op.publish();
    Ok(())
}

/// Operation `id` as its owner's record says, if another instance wrote
/// one: failed if the owner's heartbeat lapsed.
async fn read_remote(link: &Backing, id: &str) -> Result<Option<Operation>, String> {
    let Some(record) = link.operation_read(id).await? else {
        return Ok(None);
    };
    let Ok(record) = serde_json::from_str::<Value>(&record) else {
        return Ok(None);
    };
    // Only a running operation's owner needs to be alive.
    let lost = match (
        record.get("instance").and_then(Value::as_str),
        record.get("status").and_then(Value::as_str),
    ) {
        (Some(instance), Some("running")) if instance != link.instance() => {
            link.lost(instance).await?
        }
        _ => None,
    };
    Ok(Operation::from_record(id, &record, lost))
}

/// Whether `op` is running, or ended less than `retention` ago.
fn within_retention(op: &Operation, retention: Duration) -> bool {
    lock(&op.state)
        .ended
        .is_none_or(|e| e.elapsed() < retention)
}

/// Forgets the operations of `ops` that ended longer ago than the
/// retention, then, past `max_ended` of a client's or `max_ended_total` in
/// all, those that ended first. Linear in `ops`, but for sorting the ended
/// ones when there are more than a client may keep. A forgotten
/// operation's id is unknown here; with shared operations, its record is
/// still read (until it expires).
fn sweep(ops: &mut HashMap<String, Arc<Operation>>, settings: &OperationSettings) {
    ops.retain(|_, o| within_retention(o, settings.retention));
    let mut ended: Vec<(Instant, &Arc<Operation>)> = ops
        .values()
        .filter_map(|o| Some((lock(&o.state).ended?, o)))
        .collect();
    if ended.len() <= settings.max_ended.min(settings.max_ended_total) {
        return;
    }
    // Newest first: each client keeps its latest.
    ended.sort_unstable_by_key(|(ended, _)| std::cmp::Reverse(*ended));
    let mut per_client: HashMap<Option<&Quota>, usize> = HashMap::new();
    let mut kept = 0;
    // Ends other instances have not been told of (Redis was down): kept
    // past the caps, up to `max_ended_total` more, until `keep_shared`
    // writes them; forgotten, other instances would read them "running"
    // until their records expire, a day later (or not at all, if Redis
    // came back empty).
    let mut unwritten = 0;
    let mut forgotten = Vec::new();
    for (_, op) in ended {
        let theirs = per_client.entry(op.quota.as_ref()).or_default();
        if *theirs < settings.max_ended && kept < settings.max_ended_total {
            *theirs += 1;
            kept += 1;
        } else if op.end_unshared() && unwritten < settings.max_ended_total {
            unwritten += 1;
        } else {
            forgotten.push(op.id.clone());
        }
    }
    for id in forgotten {
        ops.remove(&id);
    }
}

/// While the operations live: renews this instance's heartbeat, in a task
/// of its own so that slow writes of records never hold it up.
async fn beat(ops: std::sync::Weak<Mutex<HashMap<String, Arc<Operation>>>>, link: Backing) {
    let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if ops.strong_count() == 0 {
            return;
        }
        let _ = link.heartbeat().await;
    }
}

/// Writes `op`'s record in a task of its own, unless a write of it is
/// under way; whether it began one.
fn write_in_background(op: &Arc<Operation>) -> bool {
    if op.writing.try_lock().is_err() {
        return false;
    }
    let op = op.clone();
    tokio::spawn(async move { op.write_record().await });
    true
}

/// While the operations live: writes the ends not written yet (a full
/// disk, Redis down), what changed in running operations (for other
/// instances: not on disk), and cancels those another instance asks it to.
async fn keep_shared(
    ops: std::sync::Weak<Mutex<HashMap<String, Arc<Operation>>>>,
    link: Backing,
    mut asked: Option<tokio::sync::mpsc::Receiver<String>>,
) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Each running operation's change count when its record was written.
    let mut written: HashMap<String, (u64, Instant)> = HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Some(ops) = ops.upgrade() else { return };
                let (running, unwritten): (Vec<Arc<Operation>>, Vec<Arc<Operation>>) = lock(&ops)
                    .values()
                    .filter(|o| o.status() == Status::Running || !o.end_written.load(Ordering::Relaxed))
                    .cloned()
                    .partition(|o| o.status() == Status::Running);
                drop(ops);
                // Ends whose record could not be written (Redis was down).
                for op in &unwritten {
                    write_in_background(op);
                }
                if link.exclusive() {
                    continue;
                }
                written.retain(|id, _| running.iter().any(|o| o.id == *id));
                // Cancellations asked while this instance's listener was
                // away (their messages lost): kept for it to find.
                let ids: Vec<String> = running.iter().map(|o| o.id.clone()).collect();
                if let Ok(asked) = link.cancels_asked(&ids).await {
                    for op in running.iter().filter(|o| asked.contains(&o.id)) {
                        if stop(op).is_ok() {
                            tracing::info!(operation = %op.id, "cancelled at another instance's request");
                        }
                    }
                }
                for op in running {
                    let changes = op.partial.changes.load(Ordering::Relaxed);
                    let stale = written.get(&op.id).is_none_or(|(seen, at)| {
                        *seen != changes || at.elapsed() >= PUBLISH_EVERY * 15
                    });
                    if stale && write_in_background(&op) {
                        written.insert(op.id.clone(), (changes, Instant::now()));
                    }
                }
            }
            id = async {
                match &mut asked {
                    Some(asked) => asked.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some(id) = id else { return };
                let Some(ops) = ops.upgrade() else { return };
                let op = lock(&ops).get(&id).cloned();
                drop(ops);
                if let Some(op) = op {
                    tracing::info!(operation = %op.id, "cancelled at another instance's request");
                    let _ = stop(&op);
                }
            }
        }
    }
}

/// What `sluice_result` (and `sluice_cancel`) say about `op` now: an
/// upstream's result as it sent it, with the operation's `_meta` added.
pub fn answer(op: &Operation) -> ToolAnswer {
    // Before the state's lock: `elapsed` takes it too.
    let elapsed = seconds(op.elapsed());
    let state = lock(&op.state);
    let mut result = match (&state.status, &state.outcome) {
        (Status::Completed, Some(Outcome::Relayed(sent))) => {
            // An ended operation's state no longer changes; `meta` takes
            // the lock too.
            let sent = sent.clone();
            drop(state);
            return match with_meta_as_sent(&sent, META, &op.meta()) {
                Some(sent) => ToolAnswer::Sent(sent),
                // Not reachable: sluice relayed its result as an object.
                None => ToolAnswer::Made(decoded(&sent)),
            };
        }
        (Status::Completed, Some(Outcome::Completed(result))) => result.clone(),
        (Status::Failed, Some(Outcome::Failed(why))) => error(format!(
            "operation {} (`{}`) failed after {elapsed}: {why}",
            op.id, op.tool
        )),
        (Status::Cancelled, _) => CallToolResult::success(vec![ContentBlock::text(format!(
            "operation {} (`{}`) was cancelled after {elapsed}.{}",
            op.id,
            op.tool,
            op.partial.describe()
        ))]),
        _ => CallToolResult::success(vec![ContentBlock::text(format!(
            "operation {} (`{}`) is still running: {elapsed} so far.{}\nNext: sluice_result {} waits up to 60 s more; sluice_cancel {{\"operation\":\"{}\"}} stops it.",
            op.id,
            op.tool,
            op.partial.describe(),
            json!({"operation": op.id, "wait_s": 60}),
            op.id
        ))]),
    };
    drop(state);
    result.meta = Some(with_meta(result.meta.take(), META, op.meta()));
    ToolAnswer::Made(result)
}

/// The result of an upstream's response `sent`, decoded; an error result
/// that says why if rmcp's types cannot hold it (a content block of a kind
/// they do not know).
fn decoded(sent: &crate::jsonrpc::Message) -> CallToolResult {
    serde_json::from_str(sent.result().unwrap_or("{}"))
        .unwrap_or_else(|e| error(format!("the upstream's result could not be read: {e}")))
}

pub fn operation_arg<'a>(args: &'a JsonObject, tool: &str) -> Result<&'a str, String> {
    match args.get("operation") {
        // Copied from a line of text, with what surrounds it: no id sluice
        // issues holds a space.
        Some(Value::String(id)) => Ok(id.trim()),
        Some(other) => Err(format!(
            "{tool}: `operation` must be an operation id string (op_…), not {}",
            sluice_core::format::quoted_cut(&other.to_string())
        )),
        None => Err(format!(
            "{tool}: missing `operation`: {{\"operation\":\"op_…\"}}, the id a call that outlived its timeout answered with"
        )),
    }
}

fn error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `try_start` counts the operations running, by quota and in all, and
    /// reads only those: the ended ones, kept for their retention, are
    /// dropped from what it reads. A call waiting for room is told when
    /// one ends.
    #[tokio::test]
    async fn operations_start_within_their_limits_and_an_end_makes_room() {
        use futures::FutureExt as _;
        let settings = OperationSettings {
            max_running: 2,
            max_running_total: 3,
            ..OperationSettings::default()
        };
        let ops = Operations::new(settings, None, None);
        let session = Owner::Session(1);
        let mine = Quota::Owner(session.clone());
        let start = |owner: &Owner, quota: &Quota| {
            ops.try_start(
                owner.clone(),
                quota.clone(),
                "slow",
                Arc::default(),
                CancellationToken::new(),
                Instant::now(),
            )
        };
        for _ in 0..100 {
            start(&session, &mine)
                .unwrap()
                .finish(Outcome::Failed("ended".into()));
        }
        let first = start(&session, &mine).unwrap();
        assert_eq!(lock(&ops.running).len(), 1, "the ended are not read again");
        assert_eq!(lock(&ops.ops).len(), 101, "and are kept");

        let _second = start(&session, &mine).unwrap();
        assert_eq!(start(&session, &mine).unwrap_err(), Full::Client(2));
        let address = Quota::Address(std::net::Ipv4Addr::LOCALHOST.into());
        let _third = start(&Owner::Anonymous, &address).unwrap();
        let other = Owner::Session(2);
        let full = start(&other, &Quota::Owner(other.clone())).unwrap_err();
        assert_eq!(full, Full::All(3));
        assert_eq!(
            full.to_string(),
            "sluice is running 3 operations for all its clients, the most allowed (`[operations] max_running_total`)"
        );
        assert_eq!(lock(&ops.running).len(), 3, "refused, not counted");

        let mut freed = std::pin::pin!(ops.freed());
        freed.as_mut().enable();
        assert!(freed.as_mut().now_or_never().is_none(), "none ended yet");
        first.finish(Outcome::Failed("ended".into()));
        assert!(freed.now_or_never().is_some(), "told of the end");
        assert!(start(&session, &mine).is_ok());
        assert_eq!(lock(&ops.running).len(), 3);
    }

    /// Ended operations are kept within `max_ended` per client and
    /// `max_ended_total` in all, the latest first, and forgotten after the
    /// retention; however fast they are made, the map stays within twice
    /// what is kept.
    #[tokio::test(start_paused = true)]
    async fn ended_operations_are_kept_within_their_caps_the_latest_first() {
        let settings = OperationSettings {
            max_running_total: 3,
            max_ended: 2,
            max_ended_total: 3,
            ..OperationSettings::default()
        };
        let ops = Operations::new(settings, None, None);
        let start = |owner: &Owner| {
            ops.try_start(
                owner.clone(),
                Quota::Owner(owner.clone()),
                "slow",
                Arc::default(),
                CancellationToken::new(),
                Instant::now(),
            )
            .expect("within the limits")
        };
        let (a, b) = (Owner::Session(1), Owner::Session(2));
        let mut ended = Vec::new();
        for owner in [&a, &a, &a, &a, &b] {
            let op = start(owner);
            tokio::time::advance(Duration::from_millis(10)).await;
            op.finish(Outcome::Failed("ended".into()));
            ended.push(op);
        }
        // The next start sweeps (a second later).
        tokio::time::advance(SWEEP_EVERY).await;
        let running = start(&b);
        let known = async |owner: &Owner, op: &Arc<Operation>| ops.get(owner, &op.id).await.is_ok();
        // `a` keeps its 2 latest; `b` its one; the running one is there.
        for (i, expected) in [false, false, true, true].into_iter().enumerate() {
            assert_eq!(known(&a, &ended[i]).await, expected, "a's operation {i}");
        }
        assert!(known(&b, &ended[4]).await);
        assert!(known(&b, &running).await);
        let why = ops.get(&a, &ended[0].id).await.unwrap_err();
        assert!(why.contains("`[operations] max_ended`"), "{why}");

        // Past `max_ended_total`: the one that ended first in all goes.
        tokio::time::advance(Duration::from_millis(10)).await;
        running.finish(Outcome::Failed("ended".into()));
        tokio::time::advance(SWEEP_EVERY).await;
        let _trigger = start(&b);
        assert!(!known(&a, &ended[2]).await, "3 ended after it");
        assert!(known(&a, &ended[3]).await);
        assert!(known(&b, &ended[4]).await && known(&b, &running).await);

        // Past the retention, the ended ones are unknown at once, and the
        // next sweep forgets them.
        tokio::time::advance(settings.retention).await;
        assert!(!known(&b, &running).await);
        let _trigger = start(&a);
        assert_eq!(lock(&ops.ops).len(), 2, "the two running ones");

        // Made as fast as can be (no time passing, no sweep due): swept
        // whenever they are twice what is kept (3 + 3).
        for _ in 0..100 {
            start(&a).finish(Outcome::Failed("ended".into()));
            assert!(lock(&ops.ops).len() <= 2 * 6 + 1);
        }
    }
}
