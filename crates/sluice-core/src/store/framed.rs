//! How a stored result is kept outside this process's memory (on disk, in
//! Redis): its document's text in frames of 64 KiB, each compressed with
//! zstd (with zstd's checksum) unless told not to, and what is known of
//! it ([`Meta`], JSON) beside them. A document is read back from its
//! frames and its saved index.

use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Brief, Owner, Stored};
use crate::document::{Document, Kind, SavedIndex};
use crate::summary::{Overview, StoredInfo};

/// Bytes of a document's text per frame.
pub const FRAME_BYTES: usize = 64 << 10;
/// The zstd level of frames: fast, and JSON still shrinks 4–10×.
const LEVEL: i32 = 3;
/// The version of [`Meta`]'s layout.
pub const FORMAT: u32 = 1;

/// What is kept of a stored result beside its frames.
#[derive(Debug, Serialize, Deserialize)]
pub struct Meta {
    /// [`FORMAT`].
    pub format: u32,
    /// [`Owner::key`].
    pub owner: String,
    /// When it was stored, Unix ms.
    pub created_ms: u64,
    /// [`Kind::as_str`].
    pub kind: String,
    /// Bytes of the document's text.
    pub text_bytes: u64,
    /// How many frames.
    pub frames: u32,
    /// Whether they are zstd frames.
    pub compressed: bool,
    /// Bytes of its frames on disk (its weight in `max_bytes` adds this
    /// entry's own bytes).
    pub stored_bytes: u64,
    /// The document's index, so that reading it back skips its scans
    /// (made again if it does not read).
    #[serde(default, deserialize_with = "lenient")]
    pub index: Option<SavedIndex>,
    /// [`StoredInfo::source`].
    pub source: String,
    /// [`StoredInfo::bytes`].
    pub bytes: u64,
    /// [`StoredInfo::chars`].
    pub chars: u64,
    /// [`StoredInfo::tokens`].
    pub tokens: u64,
    /// [`StoredInfo::tokens_estimated`].
    pub tokens_estimated: bool,
    /// [`StoredInfo::is_error`].
    pub is_error: bool,
    /// [`StoredInfo::sent_twice`].
    pub sent_twice: bool,
}

/// `Some` index if it reads as one, else `None`.
fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SavedIndex>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).ok())
}

impl Meta {
    /// The meta of `bytes`, if they read as one of this [`FORMAT`].
    pub fn parse(bytes: &[u8]) -> Option<Meta> {
        serde_json::from_slice::<Meta>(bytes)
            .ok()
            .filter(|meta| meta.format == FORMAT)
    }

    /// Its owner and its brief (expiring at `expires_at`), if they read.
    pub fn brief(&self, handle: &str, expires_at: SystemTime) -> Option<(Owner, Brief)> {
        Some((
            Owner::from_key(&self.owner)?,
            Brief {
                handle: handle.to_owned(),
                kind: Kind::parse(&self.kind)?,
                source: self.source.clone(),
                bytes: self.bytes,
                tokens: self.tokens,
                tokens_estimated: self.tokens_estimated,
                created: at_millis(self.created_ms),
                expires_at,
            },
        ))
    }
}

/// A stored result made ready to be kept.
pub struct Encoded {
    /// What is known of it, as JSON.
    pub meta: Vec<u8>,
    /// Its document's frames.
    pub frames: Vec<Vec<u8>>,
    /// The page plans made of it so far, saved ([`crate::pager::save`]),
    /// by their keys: they make its pages O(page) to read back.
    pub plans: Vec<(String, Vec<u8>)>,
    /// What it weighs: the frames and the meta.
    pub weight: u64,
}

/// `stored`, in frames (compressed if `compress`) and its meta.
pub fn encode(stored: &Stored, compress: bool) -> std::io::Result<Encoded> {
    let text = stored.doc.text_str().as_bytes();
    let mut frames = Vec::with_capacity(text.len().div_ceil(FRAME_BYTES));
    for chunk in text.chunks(FRAME_BYTES) {
        frames.push(if compress {
            compress_frame(chunk)?
        } else {
            chunk.to_vec()
        });
    }
    let stored_bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    let info = &stored.info;
    let meta = Meta {
        format: FORMAT,
        owner: stored.owner.key(),
        created_ms: millis(stored.created),
        kind: stored.doc.kind().as_str().to_owned(),
        text_bytes: text.len() as u64,
        frames: frames.len() as u32,
        compressed: compress,
        stored_bytes,
        index: Some(stored.doc.saved_index()),
        source: info.source.clone(),
        bytes: info.bytes,
        chars: info.chars,
        tokens: info.tokens,
        tokens_estimated: info.tokens_estimated,
        is_error: info.is_error,
        sent_twice: info.sent_twice,
    };
    let meta = serde_json::to_vec(&meta)?;
    let plans = crate::pager::saved_plans(&stored.doc);
    let plan_bytes: u64 = plans.iter().map(|(k, p)| (k.len() + p.len()) as u64).sum();
    Ok(Encoded {
        weight: stored_bytes + meta.len() as u64 + plan_bytes,
        meta,
        frames,
        plans,
    })
}

/// The result `handle` read back from its `meta` and `frames`; why not.
pub fn decode(handle: &str, meta: Meta, frames: &[impl AsRef<[u8]>]) -> Result<Stored, String> {
    if frames.len() != meta.frames as usize {
        return Err(format!(
            "{handle} has {} frames, not {}",
            frames.len(),
            meta.frames
        ));
    }
    let mut text = Vec::with_capacity(meta.text_bytes as usize);
    for (n, frame) in frames.iter().enumerate() {
        if meta.compressed {
            let mut decoder = zstd::stream::read::Decoder::new(frame.as_ref())
                .map_err(|e| format!("frame {n} of {handle}: {e}"))?;
            std::io::copy(&mut decoder, &mut text)
                .map_err(|e| format!("frame {n} of {handle}: {e}"))?;
            if text.len() > (n + 1) * FRAME_BYTES {
                return Err(format!("frame {n} of {handle} is larger than a frame"));
            }
        } else {
            text.extend_from_slice(frame.as_ref());
        }
    }
    if text.len() as u64 != meta.text_bytes {
        return Err(format!(
            "{handle} read back as {} bytes, not {}",
            text.len(),
            meta.text_bytes
        ));
    }
    let text = String::from_utf8(text).map_err(|e| format!("{handle}: {e}"))?;
    let kind = Kind::parse(&meta.kind).ok_or_else(|| format!("unknown kind {:?}", meta.kind))?;
    let owner =
        Owner::from_key(&meta.owner).ok_or_else(|| format!("unknown owner {:?}", meta.owner))?;
    let doc = Document::restored(kind, text, meta.index);
    let overview = Overview::of(&doc);
    Ok(Stored {
        handle: handle.to_owned(),
        owner,
        doc,
        info: StoredInfo {
            source: meta.source,
            bytes: meta.bytes,
            chars: meta.chars,
            tokens: meta.tokens,
            tokens_estimated: meta.tokens_estimated,
            is_error: meta.is_error,
            sent_twice: meta.sent_twice,
            overview,
        },
        created: at_millis(meta.created_ms),
    })
}

/// The bytes of one frame (`compressed`: a zstd frame, checked against its
/// checksum, at most [`FRAME_BYTES`] once decompressed).
pub fn decode_frame(frame: &[u8], compressed: bool) -> std::io::Result<Vec<u8>> {
    if !compressed {
        return Ok(frame.to_vec());
    }
    let mut out = Vec::with_capacity(FRAME_BYTES);
    let decoder = zstd::stream::read::Decoder::new(frame)?;
    std::io::Read::read_to_end(
        &mut std::io::Read::take(decoder, FRAME_BYTES as u64 + 1),
        &mut out,
    )?;
    if out.len() > FRAME_BYTES {
        return Err(std::io::Error::other("larger than a frame"));
    }
    Ok(out)
}

/// One frame, compressed, with zstd's checksum.
fn compress_frame(chunk: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = zstd::stream::write::Encoder::new(Vec::new(), LEVEL)?;
    encoder.include_checksum(true)?;
    encoder.include_contentsize(true)?;
    std::io::Write::write_all(&mut encoder, chunk)?;
    encoder.finish()
}

/// `t` in Unix milliseconds.
pub fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The time of Unix milliseconds `ms`.
pub fn at_millis(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
