//! Newline-delimited framing, as MCP's stdio transport uses: one message
//! per line, both directions.
//!
//! Reading, memory is bounded by the message size limit: a line that passes
//! it is reported at once ([`Frame::TooLarge`], with the id salvaged from
//! its start so that the call it answers can fail now), and the rest of it
//! is skipped as it arrives, never kept; the stream resynchronises at the
//! next line break. A line may end in `\n` or `\r\n`; blank lines are
//! skipped. [`LineSplitter`] does the splitting on chunks of any size;
//! [`LineReader`] drives it from an async reader.
//!
//! Writing, a message is put on one line: a line break inside valid JSON
//! can only be whitespace between tokens (strings cannot hold a raw one),
//! so [`write_line`] turns any into a space without changing the message.

use std::borrow::Cow;
use std::collections::VecDeque;

use bytes::Bytes;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::message::Id;
use super::scan::salvage_id;

/// What reading a line gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A complete line, without its line break (`\n` or `\r\n`).
    Message(Bytes),
    /// A line longer than the limit; its rest is being skipped.
    TooLarge {
        /// How many bytes of the line had arrived when it passed the limit
        /// (more than the limit; how many more depends on how the input
        /// was chunked).
        bytes_seen: usize,
        /// The top-level `"id"` found in its first `limit` bytes, if any.
        id: Option<Id>,
    },
}

/// Splits a byte stream into lines of at most `limit` bytes (the line break,
/// `\n` or `\r\n`, not counted), fed in chunks of any size. For any chunking of the same
/// input it gives the same frames (`bytes_seen` aside).
#[derive(Debug)]
pub struct LineSplitter {
    limit: usize,
    /// The start of the line being read.
    line: LineStart,
    /// Whether the rest of a line over the limit is being skipped.
    skipping: bool,
}

/// How large the parts of a [`LineStart`] are.
const PART: usize = 1 << 20;

/// The start of a line that came in several chunks, kept in parts of
/// [`PART`] bytes and put together once, at its exact size, when it ends.
/// Grown in one buffer, a line was copied each time the buffer doubled and
/// kept in a buffer up to twice its size: a 40 MB answer was held in
/// 64 MiB, after 96 MiB at once while it grew.
#[derive(Debug, Default)]
struct LineStart {
    parts: Vec<Vec<u8>>,
    len: usize,
}

impl LineStart {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn last(&self) -> Option<&u8> {
        self.parts.last().and_then(|part| part.last())
    }

    fn extend_from_slice(&mut self, mut piece: &[u8]) {
        self.len += piece.len();
        while !piece.is_empty() {
            let part = match self.parts.last_mut() {
                Some(part) if part.len() < PART => part,
                _ => {
                    // The first part grows as needed: most lines are small.
                    let capacity = if self.parts.is_empty() { 0 } else { PART };
                    self.parts.push(Vec::with_capacity(capacity));
                    self.parts.last_mut().expect("just pushed")
                }
            };
            let taken = (PART - part.len()).min(piece.len());
            part.extend_from_slice(&piece[..taken]);
            piece = &piece[taken..];
        }
    }

    /// The line so far, in one buffer of its size (each part freed once
    /// copied); the start is empty again.
    fn take(&mut self) -> Vec<u8> {
        let len = std::mem::take(&mut self.len);
        let mut parts = std::mem::take(&mut self.parts).into_iter();
        if parts.len() <= 1 {
            return parts.next().unwrap_or_default();
        }
        let mut whole = Vec::with_capacity(len);
        for part in parts {
            whole.extend_from_slice(&part);
        }
        whole
    }
}

/// A line without its `\r`; `None` when it is blank.
fn content(mut line: Bytes) -> Option<Bytes> {
    if line.last() == Some(&b'\r') {
        line.truncate(line.len() - 1);
    }
    (!line.trim_ascii().is_empty()).then_some(line)
}

impl LineSplitter {
    /// A splitter for lines of at most `limit` bytes.
    pub fn new(limit: usize) -> LineSplitter {
        LineSplitter {
            limit,
            line: LineStart::default(),
            skipping: false,
        }
    }

    /// The frames that `chunk` completes, in order.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        while !chunk.is_empty() {
            let newline = memchr::memchr(b'\n', chunk);
            if self.skipping {
                match newline {
                    Some(at) => {
                        self.skipping = false;
                        chunk = &chunk[at + 1..];
                        continue;
                    }
                    None => break,
                }
            }
            let piece = &chunk[..newline.unwrap_or(chunk.len())];
            if self.passes_limit(piece, newline.is_some()) {
                frames.push(self.too_large(piece));
                self.skipping = newline.is_none();
            } else if newline.is_none() {
                self.line.extend_from_slice(piece);
            } else {
                let line = if self.line.is_empty() {
                    Bytes::copy_from_slice(piece)
                } else {
                    self.line.extend_from_slice(piece);
                    Bytes::from(self.line.take())
                };
                frames.extend(content(line).map(Frame::Message));
            }
            match newline {
                Some(at) => chunk = &chunk[at + 1..],
                None => break,
            }
        }
        frames
    }

    /// Whether the line in `self.line` continued by `piece` is (`ended`)
    /// or will be longer than the limit, its `\r` not counted. A line
    /// whose `limit + 1`th byte is `\r` is undecided until the next byte.
    fn passes_limit(&self, piece: &[u8], ended: bool) -> bool {
        let total = self.line.len() + piece.len();
        let cr = piece.last().or(self.line.last()) == Some(&b'\r');
        if ended {
            total - usize::from(cr) > self.limit
        } else {
            total > self.limit + 1 || (total == self.limit + 1 && !cr)
        }
    }

    /// The last line, when the input ended without a line break after it.
    pub fn finish(&mut self) -> Option<Frame> {
        self.skipping = false;
        content(Bytes::from(self.line.take())).map(Frame::Message)
    }

    /// The frame for a line whose start is in `self.line` and whose next
    /// `piece` takes it past the limit. Its first `limit` bytes are kept
    /// just long enough to look for its id; then they are dropped.
    fn too_large(&mut self, piece: &[u8]) -> Frame {
        let bytes_seen = self.line.len() + piece.len();
        let room = self.limit.saturating_sub(self.line.len());
        let mut start = self.line.take();
        start.extend_from_slice(&piece[..room.min(piece.len())]);
        let id = salvage_id(&start[..self.limit.min(start.len())]);
        Frame::TooLarge { bytes_seen, id }
    }
}

/// Reads lines from an async buffered reader; see [`LineSplitter`].
/// Cancel-safe: a read dropped half-way (in a `select!`) loses nothing,
/// as what was consumed from the reader is kept here.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    splitter: LineSplitter,
    ready: VecDeque<Frame>,
    ended: bool,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// Reads from `reader` lines of at most `limit` bytes.
    pub fn new(reader: R, limit: usize) -> LineReader<R> {
        LineReader {
            reader,
            splitter: LineSplitter::new(limit),
            ready: VecDeque::new(),
            ended: false,
        }
    }

    /// The next frame, or `None` at the end of the input.
    pub async fn read_message(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            if let Some(frame) = self.ready.pop_front() {
                return Ok(Some(frame));
            }
            if self.ended {
                return Ok(None);
            }
            let buffer = self.reader.fill_buf().await?;
            if buffer.is_empty() {
                self.ended = true;
                self.ready.extend(self.splitter.finish());
                continue;
            }
            let n = buffer.len();
            let frames = self.splitter.feed(buffer);
            // No await between reading the buffer and consuming it.
            self.reader.consume(n);
            self.ready.extend(frames);
        }
    }

    /// The reader, taken back.
    pub fn into_inner(self) -> R {
        self.reader
    }
}

/// `message` on one line: its line breaks (whitespace, in valid JSON)
/// turned into spaces; borrowed when it has none.
pub fn one_line(message: &[u8]) -> Cow<'_, [u8]> {
    if memchr::memchr2(b'\n', b'\r', message).is_none() {
        return Cow::Borrowed(message);
    }
    Cow::Owned(
        message
            .iter()
            .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
            .collect(),
    )
}

/// Writes `message` (valid JSON) as one line, `\n`-terminated, and
/// flushes.
pub async fn write_line<W: AsyncWrite + Unpin>(
    writer: &mut W,
    message: &[u8],
) -> std::io::Result<()> {
    let line = one_line(message);
    // Small messages go in one write; a large one is not copied to append
    // the line break.
    if line.len() < 64 << 10 {
        let mut buffer = Vec::with_capacity(line.len() + 1);
        buffer.extend_from_slice(&line);
        buffer.push(b'\n');
        writer.write_all(&buffer).await?;
    } else {
        writer.write_all(&line).await?;
        writer.write_all(b"\n").await?;
    }
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> Frame {
        Frame::Message(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn lines_are_split_across_chunks_crlf_accepted_blank_lines_skipped() {
        let mut splitter = LineSplitter::new(100);
        let mut frames = splitter.feed(b"{\"a\":1}\r\n\n  \r\n{\"b\"");
        frames.extend(splitter.feed(b":2}\n{\"c\":"));
        frames.extend(splitter.feed(b"3}"));
        frames.extend(splitter.finish());
        assert_eq!(
            frames,
            [
                message(r#"{"a":1}"#),
                message(r#"{"b":2}"#),
                message(r#"{"c":3}"#)
            ]
        );
    }

    /// A line that comes in many chunks is kept in parts of [`PART`]
    /// bytes (never in a buffer that doubles), and arrives whole.
    #[test]
    fn a_long_line_is_kept_in_parts_and_arrives_whole() {
        let line: Vec<u8> = (0..PART * 7 / 2).map(|i| b'a' + (i % 26) as u8).collect();
        let mut splitter = LineSplitter::new(PART * 4);
        for chunk in line.chunks(60_000) {
            assert_eq!(splitter.feed(chunk), []);
        }
        assert_eq!(splitter.line.len(), line.len());
        assert_eq!(splitter.line.parts.len(), 4);
        assert!(
            splitter.line.parts[1..]
                .iter()
                .all(|part| part.capacity() == PART)
        );
        let frames = splitter.feed(b"\r\n{}\n");
        assert_eq!(
            frames,
            [Frame::Message(Bytes::from(line)), message("{}")],
            "whole, then the next line"
        );
        assert!(splitter.line.is_empty() && splitter.line.parts.is_empty());
    }

    #[test]
    fn a_line_over_the_limit_is_reported_at_once_and_skipped_without_keeping_it() {
        let mut splitter = LineSplitter::new(30);
        let head = br#"{"jsonrpc":"2.0","id":41,"result":"#;
        let frames = splitter.feed(head);
        assert_eq!(
            frames,
            [Frame::TooLarge {
                bytes_seen: head.len(),
                id: Some(Id::number(41))
            }],
            "reported before the line ends"
        );
        assert!(splitter.line.parts.is_empty(), "nothing of it is kept");
        for _ in 0..100 {
            assert_eq!(splitter.feed(&[b'x'; 1000]), []);
            assert!(splitter.line.parts.is_empty());
        }
        assert_eq!(
            splitter.feed(b"x\"}\n{\"ok\":1}\n"),
            [message(r#"{"ok":1}"#)],
            "the stream goes on after the line"
        );
        // A line over the limit that ends in the same chunk.
        assert!(matches!(
            &splitter.feed(&[b'y'; 31])[..],
            [Frame::TooLarge {
                bytes_seen: 31,
                id: None
            }]
        ));
        assert_eq!(splitter.feed(b"\n{}\n"), [message("{}")]);
        assert_eq!(splitter.feed(&[b'z'; 30]), []);
        assert_eq!(
            splitter.feed(b"\n"),
            [message(&"z".repeat(30))],
            "exactly the limit"
        );
        assert_eq!(splitter.feed(&[b'z'; 30]), []);
        assert_eq!(splitter.feed(b"\r"), [], "undecided");
        assert_eq!(
            splitter.feed(b"\n"),
            [message(&"z".repeat(30))],
            "the CR is not counted"
        );
        assert_eq!(splitter.feed(&[b'z'; 30]), []);
        assert_eq!(splitter.feed(b"\r"), []);
        assert!(matches!(
            &splitter.feed(b"z")[..],
            [Frame::TooLarge { bytes_seen: 32, .. }]
        ));
    }

    #[tokio::test]
    async fn the_reader_gives_frames_then_the_end() {
        let input: &[u8] = b"{\"a\":1}\n\xFF\xFE\n{\"b\":2}";
        let reader = tokio::io::BufReader::with_capacity(3, input);
        let mut lines = LineReader::new(reader, 1 << 20);
        let mut frames = Vec::new();
        while let Some(frame) = lines.read_message().await.unwrap() {
            frames.push(frame);
        }
        assert_eq!(
            frames,
            [
                message(r#"{"a":1}"#),
                Frame::Message(Bytes::from_static(b"\xFF\xFE")),
                message(r#"{"b":2}"#)
            ]
        );
    }

    #[tokio::test]
    async fn a_message_is_written_on_one_line() {
        let mut out = Vec::new();
        write_line(&mut out, b"{\n  \"a\": [1,\r\n 2]\n}")
            .await
            .unwrap();
        assert_eq!(out, b"{   \"a\": [1,   2] }\n");
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["a"][1], 2);
        let big = format!(r#"{{"s":"{}"}}"#, "x".repeat(100_000));
        let mut out = Vec::new();
        write_line(&mut out, big.as_bytes()).await.unwrap();
        assert_eq!(&out[..out.len() - 1], big.as_bytes());
        assert_eq!(out.last(), Some(&b'\n'));
    }
}
