//! The newline-delimited transport: a child's stdout and stdin (stdio
//! upstreams), or a pipe to a server run in memory.
//!
//! Every line is read by sluice's JSON-RPC layer under `[limits]
//! max_message_mb`. A line that is not a message sluice can read (not
//! UTF-8, nested deeper than [`jsonrpc::MAX_DEPTH`], over the limit) is
//! reported with the id found in it, so that the call it answers fails at
//! once and the next one works; a line over the limit without an id ends
//! the connection (it is restarted rather than left out of step).

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use sluice_core::limits::BLOCKING_BYTES;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::transport::{INBOUND_CAPACITY, Inbound, SendError, Transport};
use crate::jsonrpc::{self, Frame, Message, MessageError};

/// How much of an upstream's output one read takes: a pipe's whole
/// default capacity on Linux (64 KiB), so that a 1 MB answer is read in 16
/// system calls, not the 128 of `BufReader`'s default 8 KiB.
const READ_BUFFER: usize = 64 << 10;

/// A newline-delimited connection.
pub struct LinesTransport<W> {
    writer: tokio::sync::Mutex<Option<W>>,
    stop: CancellationToken,
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
    let stop = CancellationToken::new();
    tokio::spawn(read(upstream.to_owned(), reader, limit, tx, stop.clone()));
    let transport = Arc::new(LinesTransport {
        writer: tokio::sync::Mutex::new(Some(writer)),
        stop,
    });
    (transport, rx)
}

async fn read<R: AsyncRead + Unpin>(
    upstream: String,
    reader: R,
    limit: usize,
    tx: mpsc::Sender<Inbound>,
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
        if tx.send(item).await.is_err() || last {
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
