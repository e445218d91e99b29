//! Request correlation: the ids of requests sent, and who waits for each
//! answer.
//!
//! A connection numbers the requests it sends ([`Id::number`], from a
//! counter that never repeats, so a late answer to an old request can never
//! complete a new one), registers a waiter for each, and completes it when
//! the answer with that id arrives. Every way a call can end is covered, so
//! that nothing waits for ever:
//!
//! - the answer arrives: [`Pending::complete`];
//! - the answer arrives but cannot be read (its id salvaged):
//!   [`Pending::fail`] with the reason;
//! - the connection is lost: [`Pending::fail_all`];
//! - the caller stops waiting (its request was cancelled, its task
//!   dropped): dropping the [`Waiter`] removes the entry, so the map does
//!   not grow with abandoned calls and a late answer is recognised as one.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use super::message::{Id, MessageError};
use crate::FastMap;

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallFailed {
    /// The answer arrived but could not be read.
    #[error("the answer could not be read: {0}")]
    BadAnswer(#[from] MessageError),
    /// The connection was lost (or closed) before the answer came.
    #[error("the connection was lost before the answer came: {reason}")]
    ConnectionLost {
        /// What happened to it.
        reason: String,
    },
    /// An id was registered twice (the peer reused a request id that is
    /// still waiting for its answer).
    #[error("the request id {id} is already waiting for an answer; ids must be unique")]
    DuplicateId {
        /// The id.
        id: Id,
    },
}

type Sender<T> = oneshot::Sender<Result<T, CallFailed>>;

#[derive(Debug)]
struct Table<T> {
    /// The next id [`Pending::register`] gives.
    next: u64,
    /// The next registration's number: a waiter removes its entry only if
    /// the entry is still its own (a client may reuse an id once its
    /// first call is answered, while the first waiter still exists).
    serial: u64,
    /// How many answers came to ids never given (see [`Pending::stray`]).
    strays: u64,
    waiters: FastMap<Id, (u64, Sender<T>)>,
}

/// The calls waiting for answers on one connection. Cloning shares it.
#[derive(Debug)]
pub struct Pending<T> {
    table: Arc<Mutex<Table<T>>>,
}

impl<T> Clone for Pending<T> {
    fn clone(&self) -> Self {
        Pending {
            table: self.table.clone(),
        }
    }
}

impl<T> Default for Pending<T> {
    fn default() -> Self {
        Pending::new()
    }
}

/// Locks `table`. A panic while it was held cannot leave it inconsistent
/// (each change is one map operation), so a poisoned lock is used as is.
fn lock<T>(table: &Mutex<Table<T>>) -> std::sync::MutexGuard<'_, Table<T>> {
    table.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<T> Pending<T> {
    /// No calls yet; ids start at 1.
    pub fn new() -> Pending<T> {
        Pending {
            table: Arc::new(Mutex::new(Table {
                next: 1,
                serial: 0,
                strays: 0,
                waiters: FastMap::default(),
            })),
        }
    }

    /// A new id and the waiter for its answer.
    pub fn register(&self) -> (Id, Waiter<T>) {
        let mut table = lock(&self.table);
        let id = Id::number(table.next);
        table.next += 1;
        let waiter = self.insert(&mut table, id.clone());
        (id, waiter)
    }

    /// A waiter for the answer to `id`, an id chosen elsewhere (a client's
    /// request id). An error if that id is already waiting.
    pub fn register_id(&self, id: Id) -> Result<Waiter<T>, CallFailed> {
        let mut table = lock(&self.table);
        if table.waiters.contains_key(&id) {
            return Err(CallFailed::DuplicateId { id });
        }
        Ok(self.insert(&mut table, id))
    }

    fn insert(&self, table: &mut Table<T>, id: Id) -> Waiter<T> {
        let (sender, receiver) = oneshot::channel();
        let serial = table.serial;
        table.serial += 1;
        table.waiters.insert(id.clone(), (serial, sender));
        Waiter {
            id,
            serial,
            receiver,
            table: Arc::downgrade(&self.table),
        }
    }

    fn take(&self, id: &Id) -> Option<Sender<T>> {
        lock(&self.table)
            .waiters
            .remove(id)
            .map(|(_, sender)| sender)
    }

    /// Hands `answer` to the waiter of `id`. `false` when nobody waits for
    /// it (an unknown id, a late answer, a cancelled call): the answer is
    /// dropped.
    pub fn complete(&self, id: &Id, answer: T) -> bool {
        self.take(id)
            .is_some_and(|sender| sender.send(Ok(answer)).is_ok())
    }

    /// Fails the call `id` with `error`. `false` when nobody waits for it.
    pub fn fail(&self, id: &Id, error: CallFailed) -> bool {
        self.take(id)
            .is_some_and(|sender| sender.send(Err(error)).is_ok())
    }

    /// Fails every call waiting (the connection was lost). Ids keep
    /// counting, so calls registered afterwards never share an id with
    /// these.
    pub fn fail_all(&self, error: &CallFailed) {
        let waiters = std::mem::take(&mut lock(&self.table).waiters);
        for (_, (_, sender)) in waiters {
            let _ = sender.send(Err(error.clone()));
        }
    }

    /// What an answer to `id` that nobody waits for ([`Pending::complete`]
    /// gave `false`) answers: a request whose call was cancelled or gave
    /// up (an id [`Pending::register`] gave: `None`, nothing wrong), or
    /// one never sent, which is the peer's mistake (an id misspelled, a
    /// number sent back as a string): how many such answers came before
    /// this one.
    pub fn stray(&self, id: &Id) -> Option<u64> {
        let mut table = lock(&self.table);
        if id.as_u64().is_some_and(|n| n >= 1 && n < table.next) {
            return None;
        }
        table.strays += 1;
        Some(table.strays - 1)
    }

    /// The id [`Pending::register`] gave that `id` writes another way, if
    /// its call still waits: the same integer as a string (`"5"` for `5`)
    /// or as a number of another form (`5.0`, `5e0`). Those ids are the
    /// only ones given, so such an answer can only be that request's (from
    /// a server that writes ids back its own way, where JSON-RPC asks for
    /// them exactly as sent).
    pub fn respelled(&self, id: &Id) -> Option<Id> {
        let text = id.as_json();
        // Every answer comes here first: the ids given, plain integers,
        // are told at once and cost no parse.
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n = if id.is_string() {
            let inner = text.strip_prefix('"')?.strip_suffix('"')?;
            let n: u64 = inner.parse().ok()?;
            // Only the integer's own digits: not "+5", "05" or " 5".
            (inner == n.to_string()).then_some(n)?
        } else {
            let x: f64 = text.parse().ok()?;
            // Integers a double holds exactly.
            (x.fract() == 0.0 && (1.0..9_007_199_254_740_992.0).contains(&x)).then_some(x as u64)?
        };
        let own = Id::number(n);
        (own != *id && lock(&self.table).waiters.contains_key(&own)).then_some(own)
    }

    /// The id of the one call waiting, when exactly one is: the only
    /// request an answer that names none (an error whose id is `null`) can
    /// be for.
    pub fn only_waiting(&self) -> Option<Id> {
        let table = lock(&self.table);
        let mut ids = table.waiters.keys();
        match (ids.next(), ids.next()) {
            (Some(id), None) => Some(id.clone()),
            _ => None,
        }
    }

    /// How many calls are waiting.
    pub fn len(&self) -> usize {
        lock(&self.table).waiters.len()
    }

    /// Whether no call is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Waits for the answer to one call: a future of the answer, or of why
/// there is none. Dropping it stops waiting and removes the call from its
/// [`Pending`].
#[derive(Debug)]
pub struct Waiter<T> {
    id: Id,
    serial: u64,
    receiver: oneshot::Receiver<Result<T, CallFailed>>,
    /// Weak, so that a waiter does not keep a closed connection's table.
    table: std::sync::Weak<Mutex<Table<T>>>,
}

impl<T> Waiter<T> {
    /// The id of the call.
    pub fn id(&self) -> &Id {
        &self.id
    }
}

impl<T> Future for Waiter<T> {
    type Output = Result<T, CallFailed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.receiver).poll(cx).map(|received| {
            received.unwrap_or_else(|_| {
                Err(CallFailed::ConnectionLost {
                    reason: "the connection closed".to_owned(),
                })
            })
        })
    }
}

impl<T> Drop for Waiter<T> {
    fn drop(&mut self) {
        if let Some(table) = self.table.upgrade() {
            let mut table = lock(&table);
            if table
                .waiters
                .get(&self.id)
                .is_some_and(|(serial, _)| *serial == self.serial)
            {
                table.waiters.remove(&self.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_to_an_id_never_given_is_told_from_a_late_one() {
        let pending = Pending::<&str>::new();
        let (one, first) = pending.register();
        drop(first);
        // Late: its call gave up.
        assert!(!pending.complete(&one, "late"));
        assert_eq!(pending.stray(&one), None);
        // Never given: a string, a number not yet given, another spelling.
        for (n, id) in ["\"1\"", "2", "1.0", "-1", "0"].into_iter().enumerate() {
            let id = Id::from_json(id).unwrap();
            assert!(!pending.complete(&id, "stray"));
            assert_eq!(pending.stray(&id), Some(n as u64), "{id}");
        }
        let (two, second) = pending.register();
        assert_eq!(two.as_json(), "2");
        assert!(pending.complete(&two, "answer"));
        assert_eq!(second.await.unwrap(), "answer");
    }

    #[tokio::test]
    async fn an_answer_reaches_the_call_with_its_id() {
        let pending = Pending::<&str>::new();
        let (one, first) = pending.register();
        let (two, second) = pending.register();
        assert_eq!((one.as_json(), two.as_json()), ("1", "2"));
        assert!(pending.complete(&two, "second"));
        assert!(pending.complete(&one, "first"));
        assert_eq!(first.await, Ok("first"));
        assert_eq!(second.await, Ok("second"));
        assert!(!pending.complete(&one, "again"), "an answer counts once");
        assert!(pending.is_empty());
    }

    #[tokio::test]
    async fn an_unreadable_answer_fails_its_call_with_the_reason() {
        let pending = Pending::<()>::new();
        let (id, waiter) = pending.register();
        let error = CallFailed::BadAnswer(MessageError::TooDeep { limit: 127 });
        assert!(pending.fail(&id, error.clone()));
        assert_eq!(waiter.await, Err(error));
    }

    #[tokio::test]
    async fn a_lost_connection_fails_every_call_and_ids_go_on() {
        let pending = Pending::<()>::new();
        let (_, a) = pending.register();
        let (_, b) = pending.register();
        let lost = CallFailed::ConnectionLost {
            reason: "the server exited".to_owned(),
        };
        pending.fail_all(&lost);
        assert_eq!(a.await, Err(lost.clone()));
        assert_eq!(b.await, Err(lost));
        let (three, _c) = pending.register();
        assert_eq!(three, Id::number(3), "a new call never takes an old id");
    }

    #[tokio::test]
    async fn a_dropped_waiter_leaves_nothing_behind() {
        let pending = Pending::<u8>::new();
        let (id, waiter) = pending.register();
        assert_eq!(pending.len(), 1);
        drop(waiter);
        assert_eq!(pending.len(), 0);
        assert!(!pending.complete(&id, 1), "a late answer is dropped");

        let (_, orphan) = pending.register();
        drop(pending);
        assert!(matches!(
            orphan.await,
            Err(CallFailed::ConnectionLost { .. })
        ));
    }

    #[tokio::test]
    async fn the_one_call_waiting_is_named_only_when_it_is_alone() {
        let pending = Pending::<()>::new();
        assert_eq!(pending.only_waiting(), None);
        let (one, first) = pending.register();
        assert_eq!(pending.only_waiting(), Some(one.clone()));
        let (two, second) = pending.register();
        assert_eq!(pending.only_waiting(), None, "two wait: neither is named");
        drop(first);
        assert_eq!(pending.only_waiting(), Some(two));
        drop(second);
        assert_eq!(pending.only_waiting(), None);
    }

    #[tokio::test]
    async fn an_id_written_another_way_is_known_only_while_its_call_waits() {
        let pending = Pending::<()>::new();
        let (five, waiter) = {
            for _ in 0..4 {
                drop(pending.register());
            }
            pending.register()
        };
        assert_eq!(five.as_json(), "5");
        for other in [r#""5""#, "5.0", "5e0", "0.5e1", "5.000"] {
            let id = Id::from_json(other).unwrap();
            assert_eq!(pending.respelled(&id), Some(five.clone()), "{other}");
        }
        for not in [
            r#""05""#, r#""+5""#, r#"" 5""#, r#""5.0""#, "5.5", "4", r#""4""#, "5", "-5", "1e400",
            r#""abc""#,
        ] {
            let id = Id::from_json(not).unwrap();
            assert_eq!(pending.respelled(&id), None, "{not}");
        }
        drop(waiter);
        assert_eq!(
            pending.respelled(&Id::from_json(r#""5""#).unwrap()),
            None,
            "no longer waits"
        );
    }

    #[test]
    fn a_client_id_waits_once() {
        let pending = Pending::<()>::new();
        let id = Id::string("req-1");
        let first = pending.register_id(id.clone()).unwrap();
        assert_eq!(
            pending.register_id(id.clone()).unwrap_err(),
            CallFailed::DuplicateId { id: id.clone() }
        );
        // Once answered, the id may be used again; the first waiter going
        // away later does not remove the second call.
        assert!(pending.complete(&id, ()));
        let _second = pending.register_id(id.clone()).unwrap();
        drop(first);
        assert_eq!(pending.len(), 1);
    }
}
