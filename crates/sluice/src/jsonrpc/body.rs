//! An HTTP body collected under a byte limit.
//!
//! A plain-JSON HTTP answer (or a client's POST) is one message, read whole
//! before it is parsed. The limit is sluice's own (`[limits]
//! max_message_mb`), not a library's: a body whose declared length passes
//! it is refused before any of it is read, and one that passes it while
//! arriving is refused as soon as it does, without keeping the chunk that
//! took it over. A body that comes in one chunk is returned as that chunk,
//! not copied.

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Body;

use super::message::MessageError;

/// Why a body was not collected.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the limit.
    #[error(
        "a body of {bytes} bytes or more is over the limit of {limit} bytes; raise \
         `[limits] max_message_mb` in the configuration if messages this large are expected"
    )]
    TooLarge {
        /// Its declared length, or how many bytes had arrived when it passed
        /// the limit.
        bytes: u64,
        /// The limit, in bytes.
        limit: usize,
    },
    /// Reading it failed (the connection broke, a chunk was malformed).
    #[error("reading the body failed: {0}")]
    Read(Box<dyn std::error::Error + Send + Sync>),
}

impl BodyError {
    /// The message error this stands for, when it is one (`TooLarge`).
    pub fn as_message_error(&self) -> Option<MessageError> {
        match *self {
            BodyError::TooLarge { bytes, limit } => Some(MessageError::TooLarge {
                bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                limit,
            }),
            BodyError::Read(_) => None,
        }
    }
}

/// Reads all of `body`, at most `limit` bytes of data (trailers are
/// ignored).
pub async fn collect_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = body.size_hint().lower();
    if declared > limit as u64 {
        return Err(BodyError::TooLarge {
            bytes: declared,
            limit,
        });
    }
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    let mut len = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.into()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        len = len.saturating_add(data.len());
        if len > limit {
            return Err(BodyError::TooLarge {
                bytes: len as u64,
                limit,
            });
        }
        match first.take() {
            None if rest.is_empty() => first = Some(data),
            earlier => {
                if let Some(earlier) = earlier {
                    rest.reserve(earlier.len() + data.len());
                    rest.extend_from_slice(&earlier);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(rest)))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::{Full, StreamBody};
    use hyper::body::Frame;

    use super::*;

    fn chunked(chunks: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = Infallible> {
        let frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        StreamBody::new(futures::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_collected_whole() {
        let one = Bytes::from_static(b"{\"a\":1}");
        let got = collect_body(Full::new(one.clone()), 7).await.unwrap();
        assert_eq!(got, one);
        assert_eq!(got.as_ptr(), one.as_ptr(), "one chunk is not copied");
        let got = collect_body(chunked(&[b"{\"a\"", b"", b":1", b"}"]), 7)
            .await
            .unwrap();
        assert_eq!(got, one);
        assert_eq!(collect_body(chunked(&[]), 0).await.unwrap(), Bytes::new());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_as_soon_as_it_passes() {
        // A declared length is refused before reading.
        let error = collect_body(Full::new(Bytes::from_static(b"12345678")), 7)
            .await
            .unwrap_err();
        assert!(matches!(error, BodyError::TooLarge { bytes: 8, limit: 7 }));
        assert!(error.to_string().contains("`[limits] max_message_mb`"));
        // A stream that never ends is refused once past the limit.
        let endless = StreamBody::new(futures::stream::repeat_with(|| {
            Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"0123456789")))
        }));
        let error = collect_body(endless, 1000).await.unwrap_err();
        assert!(matches!(error, BodyError::TooLarge { bytes: 1010, .. }));
        assert_eq!(
            error.as_message_error(),
            Some(MessageError::TooLarge {
                bytes: 1010,
                limit: 1000
            })
        );
    }

    #[tokio::test]
    async fn a_broken_body_is_a_read_error() {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"{"))),
            Err(std::io::Error::other("connection reset")),
        ];
        let error = collect_body(StreamBody::new(futures::stream::iter(frames)), 100)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "reading the body failed: connection reset"
        );
    }
}
