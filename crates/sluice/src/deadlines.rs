//! [`Deadlines`]: many waits with a deadline (every tool call's timeout),
//! kept by one timer.
//!
//! A tokio timer registered with a deadline earlier than the one the
//! runtime's driver will wake for makes the driver wake up at once to
//! recompute (an eventfd write, then one more turn of `epoll_wait`). A
//! call's timeout registered per call does that on every call: about a
//! quarter of the system calls sluice makes for a small call over stdio.
//! Here the deadlines wait in one ordered map and one task sleeps until the
//! earliest; a new deadline wakes that task only when it is earlier than
//! the one it sleeps for, which, calls having the same timeout, almost never
//! happens: the task wakes once per timeout while calls come and go, finds
//! nothing due, and sleeps again.
//!
//! Deadlines are on tokio's clock: exact under a paused clock too.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The deadlines of one gateway, and the task that keeps them (started on
/// first use, on the runtime of that use; stopped when this is dropped).
#[derive(Debug, Default)]
pub struct Deadlines {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// A deadline earlier than the keeper's wake-up arrived.
    changed: Notify,
    stop: CancellationToken,
}

#[derive(Debug, Default)]
struct State {
    /// By deadline, then by arrival (two deadlines may be equal).
    waiting: BTreeMap<(Instant, u64), oneshot::Sender<()>>,
    arrivals: u64,
    /// When the keeper will wake next, if it sleeps with a deadline.
    wake_at: Option<Instant>,
    keeper: Option<JoinHandle<()>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Deadlines {
    /// No deadlines yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A future that completes `after` from now; dropping it forgets the
    /// deadline. Must be called inside a tokio runtime (the keeper runs on
    /// it).
    pub fn after(&self, after: Duration) -> Deadline {
        let at = Instant::now() + after;
        let (fire, fired) = oneshot::channel();
        let mut state = self.shared.lock();
        let key = (at, state.arrivals);
        state.arrivals += 1;
        state.waiting.insert(key, fire);
        let keeper_gone = state.keeper.as_ref().is_none_or(JoinHandle::is_finished);
        if keeper_gone {
            state.wake_at = None;
            state.keeper = Some(tokio::spawn(keep(self.shared.clone())));
        }
        let sooner = state.wake_at.is_none_or(|wake| at < wake);
        drop(state);
        if sooner {
            self.shared.changed.notify_one();
        }
        Deadline {
            fired,
            key,
            shared: self.shared.clone(),
        }
    }

    /// How many deadlines wait.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.lock().waiting.len()
    }
}

impl Drop for Deadlines {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// The keeper: fires what is due, then sleeps until the earliest deadline
/// (or until an earlier one arrives).
async fn keep(shared: Arc<Shared>) {
    loop {
        let wake_at = {
            let mut state = shared.lock();
            let now = Instant::now();
            while let Some(entry) = state.waiting.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                // The waiter may have gone since: nothing to tell.
                let _ = entry.remove().send(());
            }
            state.wake_at = state.waiting.first_key_value().map(|((at, _), _)| *at);
            state.wake_at
        };
        let sleep = async {
            match wake_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = shared.changed.notified() => {}
            () = sleep => {}
        }
    }
}

/// One deadline ([`Deadlines::after`]).
#[derive(Debug)]
pub struct Deadline {
    fired: oneshot::Receiver<()>,
    key: (Instant, u64),
    shared: Arc<Shared>,
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match Pin::new(&mut self.fired).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            // The keeper stopped (its gateway is gone): never due.
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Closed first: a sender dropped while its receiver waits wakes the
        // receiver's task, the one dropping this (a spurious poll, and on a
        // multi-threaded runtime a worker woken to steal it).
        self.fired.close();
        self.shared.lock().waiting.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each deadline completes at its exact time, in order, whichever came
    /// first; a dropped one is forgotten.
    #[tokio::test(start_paused = true)]
    async fn deadlines_complete_at_their_exact_times() {
        let deadlines = Deadlines::new();
        let start = Instant::now();
        let late = deadlines.after(Duration::from_secs(10));
        let early = deadlines.after(Duration::from_secs(3));
        let forgotten = deadlines.after(Duration::from_secs(1));
        drop(forgotten);
        assert_eq!(deadlines.len(), 2);
        early.await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        late.await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(deadlines.len(), 0);
    }

    /// Calls that come and go with the same timeout: each deadline that
    /// outlives its time completes at it, though the keeper last slept for
    /// an older one.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_after_many_forgotten_ones_still_completes_on_time() {
        let deadlines = Deadlines::new();
        for _ in 0..100 {
            let deadline = deadlines.after(Duration::from_secs(5));
            tokio::time::sleep(Duration::from_millis(70)).await;
            drop(deadline);
        }
        let start = Instant::now();
        deadlines.after(Duration::from_secs(5)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    /// A deadline earlier than the one the keeper sleeps for wakes it.
    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_wakes_the_keeper() {
        let deadlines = Deadlines::new();
        let start = Instant::now();
        let _late = deadlines.after(Duration::from_secs(60));
        tokio::task::yield_now().await;
        deadlines.after(Duration::from_secs(2)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    /// Dropping a deadline its task waits on does not wake that task (a
    /// spurious poll per call, and on a multi-threaded runtime a worker
    /// woken for nothing).
    #[tokio::test]
    async fn dropping_a_deadline_wakes_no_one() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl futures::task::ArcWake for Count {
            fn wake_by_ref(me: &Arc<Self>) {
                me.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let deadlines = Deadlines::new();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = futures::task::waker(count.clone());
        let mut deadline = deadlines.after(Duration::from_secs(60));
        let polled = Pin::new(&mut deadline).poll(&mut Context::from_waker(&waker));
        assert!(polled.is_pending());
        drop(deadline);
        assert_eq!(deadlines.len(), 0);
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "the waiting task was woken"
        );
    }
}
