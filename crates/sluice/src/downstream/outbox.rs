//! [`channel`]: how what sluice writes to a client beside an answer
//! reaches the task that writes it (a request's notifications, on the
//! stream that carries its answer; a session's messages of no call, on a
//! stdio connection or an HTTP session's GET stream), bounded in messages
//! and in bytes.
//!
//! A client that does not read leaves its messages waiting here. Bounded in
//! messages alone, the channels held as much as their count of the largest
//! messages an upstream sent: 150 progress notifications of 8 MiB to a
//! stdio client that read nothing grew sluice's peak by 628 MB, for one
//! request. Each message now takes room for its bytes too
//! ([`ROOM_BYTES`] per channel); one larger than that waits until the
//! channel is empty and goes alone.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

/// How many bytes of messages one channel holds at most (a message larger
/// than that is held alone).
pub const ROOM_BYTES: usize = 4 << 20;

/// A channel of at most `messages` messages and [`ROOM_BYTES`] bytes.
pub fn channel(messages: usize) -> (Sender, Receiver) {
    let (tx, rx) = mpsc::channel(messages);
    let sender = Sender {
        messages: tx,
        room: Arc::new(Semaphore::new(ROOM_BYTES)),
    };
    (sender, Receiver { messages: rx })
}

/// A message and the room it takes, given back when it is received (none
/// for a message bounded otherwise: [`Sender::try_send_unmetered`]).
struct Held {
    bytes: Bytes,
    _room: Option<OwnedSemaphorePermit>,
}

/// The room `bytes` takes: its length, at least 1 (an empty message still
/// counts), at most the whole channel's.
fn room_for(bytes: &Bytes) -> u32 {
    // ROOM_BYTES fits in a u32.
    bytes.len().clamp(1, ROOM_BYTES) as u32
}

/// Why a message was not sent; it is given back.
#[derive(Debug, thiserror::Error)]
pub enum TrySendError {
    /// No room for it now.
    #[error("the client's channel is full")]
    Full(Bytes),
    /// The receiver is gone.
    #[error("the client's channel is closed")]
    Closed(Bytes),
}

impl TrySendError {
    /// The message that was not sent.
    pub fn into_inner(self) -> Bytes {
        match self {
            TrySendError::Full(bytes) | TrySendError::Closed(bytes) => bytes,
        }
    }
}

/// The receiver is gone.
#[derive(Debug, thiserror::Error)]
#[error("the client's channel is closed")]
pub struct Closed;

/// The sending side of a [`channel`]; clones send to the same receiver.
#[derive(Clone)]
pub struct Sender {
    messages: mpsc::Sender<Held>,
    room: Arc<Semaphore>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("outbox::Sender")
            .field("room", &self.room.available_permits())
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// Sends `bytes`, waiting for room (messages are sent in the order
    /// their senders began to wait). Cancel-safe: cancelled, it sent
    /// nothing.
    pub async fn send(&self, bytes: Bytes) -> Result<(), Closed> {
        // Never closed: room is only taken and given back.
        let room = self
            .room
            .clone()
            .acquire_many_owned(room_for(&bytes))
            .await
            .map_err(|_| Closed)?;
        self.messages
            .send(Held {
                bytes,
                _room: Some(room),
            })
            .await
            .map_err(|_| Closed)
    }

    /// Sends `bytes` if there is room now.
    pub fn try_send(&self, bytes: Bytes) -> Result<(), TrySendError> {
        if self.messages.is_closed() {
            return Err(TrySendError::Closed(bytes));
        }
        let Ok(room) = self.room.clone().try_acquire_many_owned(room_for(&bytes)) else {
            return Err(TrySendError::Full(bytes));
        };
        self.try_send_with(bytes, Some(room))
    }

    /// Sends `bytes` if the channel has room for one more message, taking
    /// none of its room in bytes: for what is bounded otherwise. What a
    /// session's link held for its next GET stream ([`HELD`](super::link::HELD)
    /// notifications of [`HELD_BYTES`](super::link::HELD_BYTES), and its
    /// requests) all goes first on the new stream; a request of no call is
    /// refused rather than kept waiting when the stream has no room, and
    /// refused for the bytes of the notifications ahead of it, a large one
    /// never got through a stream in use.
    pub fn try_send_unmetered(&self, bytes: Bytes) -> Result<(), TrySendError> {
        self.try_send_with(bytes, None)
    }

    fn try_send_with(
        &self,
        bytes: Bytes,
        room: Option<OwnedSemaphorePermit>,
    ) -> Result<(), TrySendError> {
        self.messages
            .try_send(Held { bytes, _room: room })
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(held) => TrySendError::Full(held.bytes),
                mpsc::error::TrySendError::Closed(held) => TrySendError::Closed(held.bytes),
            })
    }

    /// Whether `other` sends to the same receiver.
    pub fn same_channel(&self, other: &Sender) -> bool {
        self.messages.same_channel(&other.messages)
    }
}

/// The receiving side of a [`channel`].
pub struct Receiver {
    messages: mpsc::Receiver<Held>,
}

impl Receiver {
    /// The next message; `None` once every sender is gone and nothing is
    /// left. Its room is given back as it is taken.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.messages.recv().await.map(|held| held.bytes)
    }

    /// Polls for the next message (as [`Self::recv`]).
    pub fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Bytes>> {
        self.messages
            .poll_recv(cx)
            .map(|held| held.map(|held| held.bytes))
    }

    /// The next message if one is waiting.
    pub fn try_recv(&mut self) -> Result<Bytes, mpsc::error::TryRecvError> {
        self.messages.try_recv().map(|held| held.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sized(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    /// Room is counted in bytes as well as messages: what fills the bytes
    /// makes the next sender wait until a message is taken; a message
    /// larger than the whole room goes alone; order is kept.
    #[tokio::test]
    async fn a_channel_holds_its_bytes_and_its_count_at_most() {
        let (sender, mut receiver) = channel(8);
        sender.send(sized(ROOM_BYTES / 2)).await.unwrap();
        sender.send(sized(ROOM_BYTES / 2)).await.unwrap();
        assert!(matches!(
            sender.try_send(sized(1)),
            Err(TrySendError::Full(_))
        ));
        let waiting = {
            let sender = sender.clone();
            tokio::spawn(async move { sender.send(sized(3)).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits for room");
        assert_eq!(receiver.recv().await.unwrap().len(), ROOM_BYTES / 2);
        waiting.await.unwrap().unwrap();
        assert_eq!(receiver.recv().await.unwrap().len(), ROOM_BYTES / 2);
        assert_eq!(receiver.recv().await.unwrap().len(), 3);

        // Larger than the room: alone, once the channel is empty.
        sender.send(sized(1)).await.unwrap();
        let large = {
            let sender = sender.clone();
            tokio::spawn(async move { sender.send(sized(3 * ROOM_BYTES)).await })
        };
        tokio::task::yield_now().await;
        assert!(!large.is_finished());
        assert_eq!(receiver.recv().await.unwrap().len(), 1);
        large.await.unwrap().unwrap();
        assert!(sender.try_send(sized(1)).is_err(), "the large one fills it");
        assert_eq!(receiver.recv().await.unwrap().len(), 3 * ROOM_BYTES);

        // Small messages: the count bounds them.
        for _ in 0..8 {
            sender.try_send(sized(1)).unwrap();
        }
        assert!(matches!(
            sender.try_send(sized(1)),
            Err(TrySendError::Full(_))
        ));
        for _ in 0..8 {
            receiver.try_recv().unwrap();
        }
        assert!(receiver.try_recv().is_err());
    }

    /// A receiver gone: what waited is given back, and what waits for room
    /// ends rather than waiting for ever.
    #[tokio::test]
    async fn a_sender_waiting_for_room_ends_with_the_receiver() {
        let (sender, receiver) = channel(8);
        sender.send(sized(ROOM_BYTES)).await.unwrap();
        let waiting = {
            let sender = sender.clone();
            tokio::spawn(async move { sender.send(sized(1)).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(receiver);
        assert!(waiting.await.unwrap().is_err());
        assert!(matches!(
            sender.try_send(sized(1)),
            Err(TrySendError::Closed(_))
        ));
    }
}
