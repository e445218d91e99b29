//! The client's end of a stdio connection, driven by the I/O reactor
//! wherever the kind of file allows it.
//!
//! tokio's `Stdin` and `Stdout` run every read and every write on the
//! blocking thread pool: a thread hand-off each way per message, which on a
//! small call costs more than everything sluice does with it. MCP clients
//! start their servers with pipes (Python's `subprocess`, Rust's `Command`)
//! or with Unix socket pairs (Node's `child_process`, which Claude Code,
//! Cursor and the TypeScript SDK use). Both are read and written here
//! without blocking:
//!
//! - a pipe is reopened through `/proc/self/fd` (Linux), which gives sluice
//!   an open file description of its own in non-blocking mode, so fds 0 and 1
//!   keep their flags;
//! - a socket cannot be reopened: its descriptor is duplicated and put in
//!   non-blocking mode, which the duplicate shares with fd 0 or 1. Nothing
//!   else in sluice uses those, and no child inherits them (upstreams and
//!   jq workers get pipes of their own);
//! - anything else (a terminal, a file) keeps tokio's blocking handles.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::net::unix::pipe;

/// What a standard stream is, as far as driving it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fifo,
    Socket,
    Other,
}

fn kind_of(fd: BorrowedFd<'_>) -> Kind {
    use std::os::unix::fs::FileTypeExt as _;
    let Ok(file) = fd.try_clone_to_owned().map(std::fs::File::from) else {
        return Kind::Other;
    };
    match file.metadata().map(|m| m.file_type()) {
        Ok(t) if t.is_fifo() => Kind::Fifo,
        Ok(t) if t.is_socket() => Kind::Socket,
        _ => Kind::Other,
    }
}

/// `fd`, duplicated, as a non-blocking socket the reactor drives.
fn socket(fd: BorrowedFd<'_>) -> io::Result<UnixStream> {
    let owned: OwnedFd = fd.try_clone_to_owned()?;
    let stream = std::os::unix::net::UnixStream::from(owned);
    stream.set_nonblocking(true)?;
    UnixStream::from_std(stream)
}

/// The path that reopens `fd` (Linux's `/proc`).
fn reopened(fd: BorrowedFd<'_>) -> String {
    use std::os::fd::AsRawFd as _;
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// The client's side of this process's stdin.
#[derive(Debug)]
pub enum ClientReader {
    /// A pipe, on a non-blocking file description of sluice's own.
    Pipe(pipe::Receiver),
    /// A Unix socket (Node's child processes get socket pairs).
    Socket(UnixStream),
    /// A terminal or a file: tokio's blocking handle.
    Blocking(tokio::io::Stdin),
}

/// The client's side of this process's stdout.
#[derive(Debug)]
pub enum ClientWriter {
    /// A pipe, on a non-blocking file description of sluice's own.
    Pipe(pipe::Sender),
    /// A Unix socket.
    Socket(UnixStream),
    /// A terminal or a file: tokio's blocking handle.
    Blocking(tokio::io::Stdout),
}

/// This process's stdin and stdout, each driven by the reactor where it is
/// a pipe or a socket. Must run inside a tokio runtime with I/O enabled.
pub fn client_stdio() -> (ClientReader, ClientWriter) {
    let stdin = io::stdin();
    let stdout = io::stdout();
    (reader(stdin.as_fd()), writer(stdout.as_fd()))
}

fn reader(fd: BorrowedFd<'_>) -> ClientReader {
    driven(
        fd,
        |path| {
            pipe::OpenOptions::new()
                .open_receiver(path)
                .map(ClientReader::Pipe)
        },
        ClientReader::Socket,
        || ClientReader::Blocking(tokio::io::stdin()),
    )
}

fn writer(fd: BorrowedFd<'_>) -> ClientWriter {
    driven(
        fd,
        |path| {
            pipe::OpenOptions::new()
                .open_sender(path)
                .map(ClientWriter::Pipe)
        },
        ClientWriter::Socket,
        || ClientWriter::Blocking(tokio::io::stdout()),
    )
}

/// `fd` as the reactor drives it: a pipe reopened at its `/proc` path
/// (`fifo`), a socket duplicated (`socket`); anything else, or a failure to
/// do either, tokio's blocking handle (`blocking`).
fn driven<T>(
    fd: BorrowedFd<'_>,
    fifo: impl FnOnce(String) -> io::Result<T>,
    socket_of: impl FnOnce(UnixStream) -> T,
    blocking: impl FnOnce() -> T,
) -> T {
    let driven = match kind_of(fd) {
        Kind::Fifo => fifo(reopened(fd)),
        Kind::Socket => socket(fd).map(socket_of),
        Kind::Other => return blocking(),
    };
    driven.unwrap_or_else(|e| {
        tracing::debug!("a standard stream is driven through tokio's blocking pool: {e}");
        blocking()
    })
}

impl AsyncRead for ClientReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientReader::Pipe(r) => Pin::new(r).poll_read(cx, buf),
            ClientReader::Socket(r) => Pin::new(r).poll_read(cx, buf),
            ClientReader::Blocking(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientWriter::Pipe(w) => Pin::new(w).poll_write(cx, buf),
            ClientWriter::Socket(w) => Pin::new(w).poll_write(cx, buf),
            ClientWriter::Blocking(w) => Pin::new(w).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientWriter::Pipe(w) => Pin::new(w).poll_flush(cx),
            ClientWriter::Socket(w) => Pin::new(w).poll_flush(cx),
            ClientWriter::Blocking(w) => Pin::new(w).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            // A socket's write side is shut down (the client reads its
            // end); a pipe closes when dropped.
            ClientWriter::Pipe(w) => Pin::new(w).poll_shutdown(cx),
            ClientWriter::Socket(w) => Pin::new(w).poll_shutdown(cx),
            ClientWriter::Blocking(w) => Pin::new(w).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds a client's stdio can be, told apart from the descriptor.
    #[test]
    fn pipes_sockets_and_files_are_told_apart() {
        let (read, write) = std::io::pipe().unwrap();
        assert_eq!(kind_of(read.as_fd()), Kind::Fifo);
        assert_eq!(kind_of(write.as_fd()), Kind::Fifo);
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(kind_of(a.as_fd()), Kind::Socket);
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert_eq!(kind_of(file.as_fd()), Kind::Other);
    }

    /// A socket's duplicate, driven by the reactor, reads what its peer
    /// wrote and writes what the peer reads.
    #[tokio::test]
    async fn a_socket_is_driven_by_the_reactor_both_ways() {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut stream = socket(ours.as_fd()).unwrap();
        let theirs = tokio::net::UnixStream::from_std({
            theirs.set_nonblocking(true).unwrap();
            theirs
        })
        .unwrap();
        let (their_read, mut their_write) = theirs.into_split();
        their_write.write_all(b"ping\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(&mut stream)
            .read_line(&mut line)
            .await
            .unwrap();
        assert_eq!(line, "ping\n");
        stream.write_all(b"pong\n").await.unwrap();
        let mut answer = String::new();
        BufReader::new(their_read)
            .read_line(&mut answer)
            .await
            .unwrap();
        assert_eq!(answer, "pong\n");
    }
}
