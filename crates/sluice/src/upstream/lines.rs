//! The newline-delimited transport: a child's stdout and stdin (stdio
//! upstreams), or a pipe to a server run in memory.
//!
//! Every line is read by sluice's JSON-RPC layer under `[limits]
//! max_message_mb`. A line that is not a message sluice can read (not
//! UTF-8, nested deeper than [`jsonrpc::MAX_DEPTH`], over the limit) is
//! reported with the id found in it, so that the call it answers fails at
//! once and the next one works; a line over the limit without an id ends
//! the connection (it is restarted rather than left out of step).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use futures::FutureExt as _;
use futures::future::BoxFuture;
use sluice_core::limits::BLOCKING_BYTES;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::transport::{Answers, INBOUND_CAPACITY, Inbound, SendError, Transport};
use crate::jsonrpc::{self, Frame, Message, MessageError};

/// How much of an upstream's output one read takes: a pipe's whole
/// default capacity on Linux (64 KiB), so that a 1 MB answer is read in 16
/// system calls, not the 128 of `BufReader`'s default 8 KiB.
const READ_BUFFER: usize = 64 << 10;

/// A newline-delimited connection.
pub struct LinesTransport<W> {
    writer: tokio::sync::Mutex<Option<W>>,
    stop: CancellationToken,
    /// Where an answer goes straight to its call ([`Transport::hand_answers_to`]).
    answers: Arc<OnceLock<Answers>>,
    /// The items handed to the engine that it has not handled yet
    /// ([`Transport::handled`]).
    queued: Arc<AtomicUsize>,
}

impl<W> Drop for LinesTransport<W> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Opens a connection that reads `reader` and writes `writer`; `upstream`
/// names it in messages.
pub fn open<R, W>(
    upstream: &str,
    reader: R,
    writer: W,
    limit: usize,
) -> (Arc<LinesTransport<W>>, mpsc::Receiver<Inbound>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(INBOUND_CAPACITY);
    let transport = Arc::new(LinesTransport {
        writer: tokio::sync::Mutex::new(Some(writer)),
        stop: CancellationToken::new(),
        answers: Arc::default(),
        queued: Arc::default(),
    });
    let handing = Handing {
        tx,
        answers: transport.answers.clone(),
        queued: transport.queued.clone(),
    };
    tokio::spawn(read(
        upstream.to_owned(),
        reader,
        limit,
        handing,
        transport.stop.clone(),
    ));
    (transport, rx)
}

/// How the reader hands over what it read: an answer straight to its call
/// when the engine has handled everything read before it (so that it
/// cannot overtake a progress notification or a log message about its
/// call, which the engine routes), everything else to the engine, in
/// order. One hop less for every call: the engine's channel and task.
struct Handing {
    tx: mpsc::Sender<Inbound>,
    answers: Arc<OnceLock<Answers>>,
    queued: Arc<AtomicUsize>,
}

impl Handing {
    /// Hands `item` over; `false` once the engine is gone.
    async fn hand(&self, item: Inbound) -> bool {
        // Acquire: what the engine did with the items it handled is done.
        let item = match self.answers.get() {
            Some(answers) if self.queued.load(Ordering::Acquire) == 0 => match answers(item) {
                None => return true,
                Some(item) => item,
            },
            _ => item,
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.tx.send(item).await.is_ok()
    }
}

async fn read<R: AsyncRead + Unpin>(
    upstream: String,
    reader: R,
    limit: usize,
    handing: Handing,
    stop: CancellationToken,
) {
    let mut lines = jsonrpc::LineReader::new(BufReader::with_capacity(READ_BUFFER, reader), limit);
    loop {
        let frame = tokio::select! {
            frame = lines.read_message() => frame,
            () = stop.cancelled() => return,
        };
        let item = match frame {
            Ok(Some(frame)) if frame_bytes(&frame) > BLOCKING_BYTES => {
                let name = upstream.clone();
                match tokio::task::spawn_blocking(move || checked(&name, frame, limit)).await {
                    Ok(item) => item,
                    Err(_) => return,
                }
            }
            Ok(Some(frame)) => checked(&upstream, frame, limit),
            Ok(None) => Inbound::Closed {
                why: "closed its stdout".to_owned(),
            },
            Err(e) => Inbound::Closed {
                why: format!("could not be read: {e}"),
            },
        };
        let last = matches!(item, Inbound::Closed { .. });
        if !handing.hand(item).await || last {
            return;
        }
    }
}

/// The bytes of a line as read (for a line over the limit: none kept).
fn frame_bytes(frame: &Frame) -> usize {
    match frame {
        Frame::Message(line) => line.len(),
        Frame::TooLarge { .. } => 0,
    }
}

/// What one line is for the engine.
fn checked(upstream: &str, frame: Frame, limit: usize) -> Inbound {
    let (error, id) = match frame {
        Frame::Message(line) => match Message::parse(line.clone()) {
            Ok(message) => {
                return Inbound::Message {
                    message,
                    stream_of: None,
                };
            }
            Err(error) => (error, jsonrpc::salvage_id(&line)),
        },
        Frame::TooLarge { bytes_seen, id } => (
            MessageError::TooLarge {
                bytes: bytes_seen,
                limit,
            },
            id,
        ),
    };
    match id {
        None if matches!(error, MessageError::TooLarge { .. }) => Inbound::Closed {
            why: format!(
                "sent a message without a request id that sluice cannot read ({error}); sluice starts it again"
            ),
        },
        id => Inbound::Unreadable {
            id,
            why: format!("upstream `{upstream}` sent an answer sluice cannot read: {error}"),
        },
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> Transport for LinesTransport<W> {
    fn hand_answers_to(&self, answers: Answers) {
        let _ = self.answers.set(answers);
    }

    fn handled(&self) {
        // Release: what the engine did with the item is seen by the reader
        // that finds nothing queued.
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    fn send(&self, message: Message) -> BoxFuture<'_, Result<(), SendError>> {
        async move {
            let mut writer = self.writer.lock().await;
            let Some(writer) = writer.as_mut() else {
                return Err(SendError::Closed("was closed by sluice".into()));
            };
            jsonrpc::write_line(writer, message.as_bytes())
                .await
                .map_err(|e| SendError::Closed(format!("closed its stdin (a write failed: {e})")))
        }
        .boxed()
    }

    fn one_stream(&self) -> bool {
        true
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            // Dropping the writer closes the child's stdin (or the pipe),
            // which tells a well-behaved server to exit.
            if let Some(mut writer) = self.writer.lock().await.take() {
                let _ = tokio::io::AsyncWriteExt::shutdown(&mut writer).await;
            }
            self.stop.cancel();
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::jsonrpc::Kind;

    /// Far longer than a message takes through a pipe in memory.
    const WAIT: std::time::Duration = std::time::Duration::from_secs(10);

    /// An answer goes straight to its call only when the engine has
    /// handled everything read before it: behind a notification it waits
    /// its turn in the engine's channel, so that the notification (a
    /// progress about its call) is routed first.
    #[tokio::test]
    async fn an_answer_goes_straight_to_its_call_only_when_nothing_waits_before_it() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (read, write) = tokio::io::split(ours);
        let (transport, mut inbound) = open("fake", read, write, 1 << 20);
        let (straight, mut went_straight) = mpsc::unbounded_channel();
        transport.hand_answers_to(Arc::new(move |item| match item {
            Inbound::Message { message, .. } if message.kind() == Kind::Response => {
                straight.send(message.id()).unwrap();
                None
            }
            other => Some(other),
        }));
        let (_, mut far) = tokio::io::split(theirs);
        far.write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\
              {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n",
        )
        .await
        .unwrap();
        let kinds = [Kind::Notification, Kind::Response];
        for kind in kinds {
            let received = tokio::time::timeout(WAIT, inbound.recv()).await;
            match received {
                Ok(Some(Inbound::Message { message, .. })) => assert_eq!(message.kind(), kind),
                _ => panic!(
                    "the engine got no message of kind {kind:?} (went straight: {:?})",
                    went_straight.try_recv()
                ),
            }
        }
        assert!(
            went_straight.try_recv().is_err(),
            "an answer overtook the notification before it"
        );
        // The engine handled both: the next answer has nothing before it.
        transport.handled();
        transport.handled();
        far.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n")
            .await
            .unwrap();
        let id = tokio::time::timeout(WAIT, went_straight.recv())
            .await
            .expect("the answer went straight to its call")
            .unwrap()
            .unwrap();
        assert_eq!(id.as_json(), "2");
        assert!(inbound.try_recv().is_err());
    }
}
