//! Slow calls as operations: a tool call still running at its timeout goes
//! on in the background, and the client gets an operation id at once;
//! `sluice_result` reads (or waits for) its end, `sluice_cancel` stops it.
//!
//! The call itself runs in a task of the gateway's ([`crate::gateway`]);
//! this module keeps what is known of it: the latest progress the upstream
//! reported (the partial result), and its outcome once it ends. Operations
//! belong to the session that started them, like stored results, and are
//! kept `[operations] retention_h` after they end.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, LoggingMessageNotificationParam,
    ProgressNotificationParam,
};
use serde_json::{Value, json};
use sluice_core::format::timestamp;
use sluice_core::operation::OperationSettings;
use sluice_core::store::Owner;
use tokio_util::sync::CancellationToken;

use crate::govern::with_meta;

/// The `_meta` key of everything about an operation.
pub const META: &str = "sluice/operation";

/// What the upstream reported while a call ran: shared with the call's
/// notification loop.
#[derive(Debug, Default)]
pub struct Partial {
    progress: Mutex<Option<ProgressNotificationParam>>,
    /// The last log lines routed to the call, oldest first.
    logs: Mutex<std::collections::VecDeque<String>>,
    detached: AtomicBool,
}

/// Log lines a partial result keeps.
const LOG_LINES: usize = 5;

impl Partial {
    /// Keeps the latest progress.
    pub fn progress(&self, params: &ProgressNotificationParam) {
        *lock(&self.progress) = Some(params.clone());
    }

    /// Keeps a log line (the last [`LOG_LINES`], each cut at 300 characters).
    pub fn log(&self, params: &LoggingMessageNotificationParam) {
        let data = match &params.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let line: String = format!("{:?}: {data}", params.level)
            .to_lowercase()
            .chars()
            .take(300)
            .collect();
        let mut logs = lock(&self.logs);
        if logs.len() == LOG_LINES {
            logs.pop_front();
        }
        logs.push_back(line);
    }

    /// Whether the call went on in the background: its client has its
    /// answer and hears no more about it.
    pub fn detached(&self) -> bool {
        self.detached.load(Ordering::Relaxed)
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

    /// " Progress: 3/5 (step 3)." and the last log lines, if any.
    fn describe(&self) -> String {
        let logs = lock(&self.logs);
        let logs = if logs.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = logs.iter().map(String::as_str).collect();
            format!("\nLast log lines: {}", lines.join(" | "))
        };
        let progress = lock(&self.progress).as_ref().map_or_else(
            || " The tool has reported no progress.".to_owned(),
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
        progress + &logs
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
    /// The tool, as the client named it.
    pub tool: String,
    started_at: SystemTime,
    started: Instant,
    partial: Arc<Partial>,
    cancel: CancellationToken,
    state: Mutex<State>,
    done: tokio::sync::watch::Sender<bool>,
}

impl Operation {
    /// Records the end, unless it ended already (a cancelled call's late
    /// answer changes nothing).
    pub fn finish(&self, outcome: Outcome) {
        let mut state = lock(&self.state);
        if state.status != Status::Running {
            return;
        }
        state.status = match outcome {
            Outcome::Completed(_) => Status::Completed,
            Outcome::Failed(_) => Status::Failed,
        };
        state.outcome = Some(outcome);
        state.ended = Some(Instant::now());
        drop(state);
        self.done.send_replace(true);
    }

    fn status(&self) -> Status {
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
        meta
    }

    /// Waits until the operation ends or `wait` passes, without polling.
    async fn wait(&self, wait: Duration) {
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

/// The operations of every session.
pub struct Operations {
    settings: OperationSettings,
    ops: Mutex<HashMap<String, Arc<Operation>>>,
}

impl Operations {
    /// No operations yet.
    pub fn new(settings: OperationSettings) -> Self {
        Self {
            settings,
            ops: Mutex::default(),
        }
    }

    /// The `[operations]` settings.
    pub fn settings(&self) -> &OperationSettings {
        &self.settings
    }

    /// Refuses a call when `owner`, or sluice, has as many operations
    /// running as allowed: a message for the model.
    pub fn admit(&self, owner: Owner) -> Result<(), String> {
        let ops = self.live();
        let running: Vec<&Arc<Operation>> = ops
            .values()
            .filter(|o| o.status() == Status::Running)
            .collect();
        let mine = running.iter().filter(|o| o.owner == owner).count();
        if mine >= self.settings.max_running {
            return Err(format!(
                "{mine} operations of this session are running, the most allowed (`[operations] max_running`): wait for one (sluice_result {{\"operation\":\"…\",\"wait_s\":60}}) or stop one (sluice_cancel), then call again. Running: {}",
                running
                    .iter()
                    .filter(|o| o.owner == owner)
                    .map(|o| o.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if running.len() >= self.settings.max_running_total {
            return Err(format!(
                "{} operations are running in sluice, the most allowed (`[operations] max_running_total`): try again when one has ended.",
                running.len()
            ));
        }
        Ok(())
    }

    /// Registers a call that outlived its timeout. The caller finishes it
    /// (with [`Operation::finish`]) when the call ends; `cancel` stops the
    /// call.
    pub fn start(
        &self,
        owner: Owner,
        tool: &str,
        partial: Arc<Partial>,
        cancel: CancellationToken,
        started: Instant,
    ) -> Arc<Operation> {
        partial.detached.store(true, Ordering::Relaxed);
        let id = sluice_core::store::random_id("op_");
        let op = Arc::new(Operation {
            id: id.clone(),
            owner,
            tool: tool.to_owned(),
            started_at: SystemTime::now() - started.elapsed(),
            started,
            partial,
            cancel,
            state: Mutex::new(State {
                status: Status::Running,
                outcome: None,
                ended: None,
            }),
            done: tokio::sync::watch::Sender::new(false),
        });
        lock(&self.ops).insert(id, op.clone());
        op
    }

    /// The operations, once those ended longer ago than the retention are
    /// dropped.
    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Operation>>> {
        let mut ops = lock(&self.ops);
        let retention = self.settings.retention;
        ops.retain(|_, o| lock(&o.state).ended.is_none_or(|e| e.elapsed() < retention));
        ops
    }

    fn get(&self, owner: Owner, id: &str) -> Result<Arc<Operation>, String> {
        // The lock is released before the hint takes it again.
        let found = self.live().get(id).filter(|o| o.owner == owner).cloned();
        found.ok_or_else(|| {
                format!(
                    "unknown operation `{id}`: it was never started in this session, or it ended more than {} h ago. {}",
                    self.settings.retention.as_secs() / 3600,
                    self.list_hint(owner)
                )
            })
    }

    /// `owner`'s operations, newest first.
    pub fn list(&self, owner: Owner) -> Vec<Arc<Operation>> {
        let mut mine: Vec<Arc<Operation>> = self
            .live()
            .values()
            .filter(|o| o.owner == owner)
            .cloned()
            .collect();
        mine.sort_by_key(|o| std::cmp::Reverse(o.started));
        mine
    }

    /// "Operations of this session: …" for `sluice_info {}` and errors.
    pub fn list_hint(&self, owner: Owner) -> String {
        let mine = self.list(owner);
        if mine.is_empty() {
            return "This session has no operations.".into();
        }
        let lines: Vec<String> = mine.iter().take(20).map(|o| o.line()).collect();
        format!("Operations of this session: {}.", lines.join("; "))
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

    /// `sluice_result {operation, wait_s?}`.
    pub async fn result(&self, arguments: Option<JsonObject>, owner: Owner) -> CallToolResult {
        let args = arguments.unwrap_or_default();
        let op = match operation_arg(&args, "sluice_result").and_then(|id| self.get(owner, id)) {
            Ok(op) => op,
            Err(message) => return error(message),
        };
        if let Some(unknown) = args
            .keys()
            .find(|k| !["operation", "wait_s"].contains(&k.as_str()))
        {
            return error(format!(
                "sluice_result: unknown argument `{unknown}`: it takes {{\"operation\":\"op_…\",\"wait_s\":N}}"
            ));
        }
        let wait = match self.settings.wait(args.get("wait_s")) {
            Ok(wait) => wait,
            Err(message) => return error(format!("sluice_result: {message}")),
        };
        if !wait.is_zero() {
            op.wait(wait).await;
        }
        answer(&op)
    }

    /// `sluice_cancel {operation}`.
    pub fn cancel(&self, arguments: Option<JsonObject>, owner: Owner) -> CallToolResult {
        let args = arguments.unwrap_or_default();
        let op = match operation_arg(&args, "sluice_cancel").and_then(|id| self.get(owner, id)) {
            Ok(op) => op,
            Err(message) => return error(message),
        };
        {
            let mut state = lock(&op.state);
            if state.status != Status::Running {
                let status = state.status.as_str();
                drop(state);
                let mut result = error(format!(
                    "operation {} already ended ({status}): nothing to cancel. sluice_result {{\"operation\":\"{}\"}} gives its result.",
                    op.id, op.id
                ));
                result.meta = Some(with_meta(None, META, op.meta()));
                return result;
            }
            state.status = Status::Cancelled;
            state.ended = Some(Instant::now());
        }
        op.done.send_replace(true);
        // The call's task sees the token and cancels the upstream request.
        op.cancel.cancel();
        answer(&op)
    }
}

/// What `sluice_result` (and `sluice_cancel`) say about `op` now.
fn answer(op: &Operation) -> CallToolResult {
    // Before the state's lock: `elapsed` takes it too.
    let elapsed = seconds(op.elapsed());
    let state = lock(&op.state);
    let mut result = match (&state.status, &state.outcome) {
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
    result
}

fn operation_arg<'a>(args: &'a JsonObject, tool: &str) -> Result<&'a str, String> {
    match args.get("operation") {
        Some(Value::String(id)) => Ok(id),
        Some(other) => Err(format!(
            "{tool}: `operation` must be an operation id string (op_…), not {other}"
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
