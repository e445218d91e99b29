//! The notifications an upstream sends about one request, held on their way
//! to the task that forwards them to its client (the gateway's `send_as`).
//!
//! The upstream's reader must never wait for a client: the upstream is
//! shared, and one client that reads slowly would stall every call on it.
//! Nor may such a client make sluice hold all the upstream keeps sending: a
//! tool that reports progress as it works, for minutes, to a client that
//! does not read its stream (3,000 progress notifications of 16 KiB grew
//! sluice's peak by 110 MB, where a direct connection makes the server
//! wait on its own socket). So a request's notifications are held to [`HELD`] of
//! them and [`HELD_BYTES`]. Beyond that, progress supersedes progress (the
//! newest takes the place of the last one held: progress only goes forward,
//! and the client still hears the latest before the answer) and a log
//! message is dropped. What was superseded or dropped is counted
//! ([`NoticeQueue::lost`]), for sluice's log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::Notice;

/// The most notifications held for one request.
pub const HELD: usize = 64;

/// The most bytes of notifications held for one request (a notification
/// larger than this alone is held, alone).
pub const HELD_BYTES: usize = 4 << 20;

/// Whether a notification of `size` bytes may join `held` of them holding
/// `bytes`: within [`HELD`] and [`HELD_BYTES`], or alone. The one bound of
/// what waits for a client (a session's backlog holds its log messages by
/// it too).
pub fn has_room(held: usize, bytes: usize, size: usize) -> bool {
    held == 0 || (held < HELD && bytes + size <= HELD_BYTES)
}

/// A new queue: where an upstream's notifications about one request are
/// sent, and where its forwarder takes them.
pub fn queue() -> (NoticeRoute, NoticeQueue) {
    let shared = Arc::new(Shared::default());
    (NoticeRoute(shared.clone()), NoticeQueue(shared))
}

/// Where an upstream's notifications about one request go (the hub keeps
/// one for each request a client waits on). Sending never waits.
#[derive(Debug, Clone)]
pub struct NoticeRoute(Arc<Shared>);

/// The notifications about one request, in the order they came, taken by
/// the task that forwards them to its client.
#[derive(Debug)]
pub struct NoticeQueue(Arc<Shared>);

/// What a [`NoticeQueue`] did not hold: its client did not take its
/// notifications as fast as the upstream sent them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    /// Progress notifications replaced by a later one before they were
    /// forwarded.
    pub superseded: u64,
    /// Log messages dropped.
    pub logs: u64,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    ready: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Each notification with its size.
    held: VecDeque<(Notice, usize)>,
    bytes: usize,
    lost: Lost,
    /// The forwarder is gone: nothing is held any more.
    closed: bool,
}

impl State {
    fn push(&mut self, notice: Notice, size: usize) {
        self.bytes += size;
        self.held.push_back((notice, size));
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    // Nothing panics while holding it (a push or a pop), so a poisoned
    // lock is still usable.
    shared
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Notice {
    /// Its size as sent: what holding it costs, about.
    fn size(&self) -> usize {
        match self {
            Notice::Progress(_, raw) => raw.as_bytes().len(),
            Notice::Log(logged) => logged.raw.as_bytes().len(),
        }
    }
}

impl NoticeRoute {
    /// Queues `notice` for its request, or supersedes or drops it when
    /// the queue is full (see the module's comment); `false` when no one
    /// forwards the request's notifications any more.
    pub fn send(&self, notice: Notice) -> bool {
        let size = notice.size();
        let mut state = lock(&self.0);
        if state.closed {
            return false;
        }
        if !has_room(state.held.len(), state.bytes, size) {
            match notice {
                Notice::Log(_) => {
                    state.lost.logs += 1;
                    return true;
                }
                // In the place of the last one held if that is progress;
                // else in one place more than the bound (the next takes it).
                Notice::Progress(..) => {
                    if matches!(state.held.back(), Some((Notice::Progress(..), _))) {
                        let (_, replaced) = state.held.pop_back().expect("the last one held");
                        state.bytes -= replaced;
                        state.lost.superseded += 1;
                    }
                    state.push(notice, size);
                }
            }
        } else {
            state.push(notice, size);
        }
        drop(state);
        self.0.ready.notify_one();
        true
    }
}

impl NoticeQueue {
    /// The next notification, when one comes. Cancel-safe: a notification
    /// is taken only when this returns it.
    pub async fn recv(&self) -> Notice {
        loop {
            if let Some(notice) = self.try_recv() {
                return notice;
            }
            // A send between the look above and this wait leaves a permit:
            // no notification is missed.
            self.0.ready.notified().await;
        }
    }

    /// The next notification held, if there is one.
    pub fn try_recv(&self) -> Option<Notice> {
        let mut state = lock(&self.0);
        let (notice, size) = state.held.pop_front()?;
        state.bytes -= size;
        Some(notice)
    }

    /// What was superseded or dropped so far.
    pub fn lost(&self) -> Lost {
        lock(&self.0).lost
    }
}

impl Drop for NoticeQueue {
    fn drop(&mut self) {
        let mut state = lock(&self.0);
        state.closed = true;
        state.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::Logged;
    use crate::jsonrpc::Message;

    fn progress(n: u32, pad: usize) -> Notice {
        let text = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":"t","progress":{n},"message":"{}"}}}}"#,
            "p".repeat(pad)
        );
        let raw = Message::parse(bytes::Bytes::from(text)).unwrap();
        let params = serde_json::from_str(raw.params().unwrap()).unwrap();
        Notice::Progress(Box::new(params), raw)
    }

    fn log(n: u32) -> Notice {
        let text = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{n}}}}}"#
        );
        let raw = Message::parse(bytes::Bytes::from(text)).unwrap();
        Notice::Log(Arc::new(Logged::read(&raw).unwrap()))
    }

    /// What each notification taken says: `p3` for progress 3, `l4` for
    /// the log message whose data is 4.
    fn taken(queue: &NoticeQueue) -> Vec<String> {
        std::iter::from_fn(|| queue.try_recv())
            .map(|notice| match notice {
                Notice::Progress(params, _) => format!("p{}", params.progress),
                Notice::Log(logged) => format!("l{}", logged.data().unwrap()),
            })
            .collect()
    }

    #[test]
    fn within_the_bound_every_notification_is_held_in_order() {
        let (route, queue) = queue();
        for n in 0..HELD as u32 / 2 {
            assert!(route.send(progress(n, 0)));
            assert!(route.send(log(n)));
        }
        let expected: Vec<String> = (0..HELD / 2)
            .flat_map(|n| [format!("p{n}"), format!("l{n}")])
            .collect();
        assert_eq!(taken(&queue), expected);
        assert_eq!(queue.lost(), Lost::default());
    }

    #[test]
    fn beyond_the_bound_progress_supersedes_progress_and_logs_are_dropped() {
        let (route, queue) = queue();
        for n in 0..HELD as u32 {
            route.send(log(n));
        }
        // Full: the first progress takes one place more, each later one
        // takes its place; log messages are dropped.
        for n in 0..10 {
            assert!(route.send(progress(n, 0)));
            assert!(route.send(log(100 + n)));
        }
        let held = taken(&queue);
        assert_eq!(held.len(), HELD + 1);
        assert_eq!(held.last().unwrap(), "p9", "the latest progress is held");
        assert_eq!(
            queue.lost(),
            Lost {
                superseded: 9,
                logs: 10
            }
        );
        // Room again: held as they come.
        route.send(log(7));
        assert_eq!(taken(&queue), ["l7"]);
    }

    #[test]
    fn the_bound_counts_bytes_too_and_one_large_notification_is_held_alone() {
        let (route, queue) = queue();
        route.send(progress(1, HELD_BYTES * 2));
        route.send(progress(2, 10));
        route.send(progress(3, 10));
        assert_eq!(
            taken(&queue),
            ["p2", "p3"],
            "the first held alone, then superseded"
        );
        assert_eq!(queue.lost().superseded, 1);
    }

    #[tokio::test]
    async fn recv_waits_for_the_next_and_a_closed_queue_refuses() {
        let (route, queue) = queue();
        let sender = route.clone();
        let waiting = tokio::spawn(async move { matches!(queue.recv().await, Notice::Log(_)) });
        tokio::task::yield_now().await;
        assert!(sender.send(log(1)));
        assert!(waiting.await.unwrap(), "recv returned the log message");
        assert!(!route.send(log(2)), "its queue is gone: refused");
    }
}
