//! Cursors: where the next page starts, sealed so a client can hold it but
//! not forge it.
//!
//! A cursor carries the handle, the paged path, the budget the pages were
//! planned for and a position, followed by an HMAC-SHA256 tag (truncated to
//! 128 bits) under a key that never leaves the process. A cursor that was
//! altered, cut, or sealed by another sluice fails to open.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::budget::Budget;
use crate::pager::Position;

/// The prefix of every page cursor (the version of the format).
const PREFIX: &str = "c1_";
/// The prefix of search cursors (`s2_`: context before and after).
const SEARCH_PREFIX: &str = "s2_";

/// Where the next page of a search starts.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchCursor {
    /// The stored result.
    pub handle: String,
    /// What is searched.
    pub query: crate::search::Query,
    /// Context lines before each text hit.
    pub before: u8,
    /// Context lines after each text hit.
    pub after: u8,
    /// The most hits per page.
    pub max_matches: u32,
    /// The caller's budget.
    pub budget: Budget,
    /// The first hit of the page.
    pub start: u64,
}
/// Bytes of the tag kept.
const TAG: usize = 16;

/// What a cursor says.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor {
    /// The stored result.
    pub handle: String,
    /// The paged path, as asked (`None`: the default target).
    pub path: Option<String>,
    /// The budget the page plan was made for.
    pub budget: Budget,
    /// Where the page starts.
    pub at: Position,
}

/// Why a cursor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorError {
    /// Not a cursor of this format.
    #[error(
        "this is not a sluice cursor of this kind (page cursors start with `{PREFIX}`, search cursors with `{SEARCH_PREFIX}`)"
    )]
    Malformed,
    /// The tag does not match: altered, or sealed by another process.
    #[error("this cursor was altered or comes from another sluice process")]
    Forged,
}

/// The key that seals cursors.
#[derive(Clone)]
pub struct CursorKey([u8; 32]);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(…)")
    }
}

impl CursorKey {
    /// A fresh random key.
    pub fn random() -> Self {
        let mut key = [0; 32];
        crate::store::random_bytes(&mut key);
        Self(key)
    }

    /// A key from given bytes (several instances sharing one key).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        Self(key)
    }

    /// The key derived from a secret of any length (`[store]
    /// secret_file`): its SHA-256.
    pub fn from_secret(secret: &[u8]) -> Self {
        use sha2::Digest as _;
        Self(sha2::Sha256::digest(secret).into())
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }

    /// `body` sealed, as an opaque string starting with `prefix`.
    fn seal_body(&self, prefix: &str, mut body: Vec<u8>) -> String {
        let mut mac = self.mac();
        mac.update(prefix.as_bytes());
        mac.update(&body);
        body.extend_from_slice(&mac.finalize().into_bytes()[..TAG]);
        format!("{prefix}{}", URL_SAFE_NO_PAD.encode(body))
    }

    /// The body of a string sealed with `prefix`.
    fn open_body(&self, prefix: &str, sealed: &str) -> Result<Vec<u8>, CursorError> {
        let raw = sealed
            .strip_prefix(prefix)
            .and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
            .ok_or(CursorError::Malformed)?;
        if raw.len() < TAG + 1 {
            return Err(CursorError::Malformed);
        }
        let (body, tag) = raw.split_at(raw.len() - TAG);
        let mut mac = self.mac();
        mac.update(prefix.as_bytes());
        mac.update(body);
        mac.verify_truncated_left(tag)
            .map_err(|_| CursorError::Forged)?;
        Ok(body.to_vec())
    }

    /// A search cursor as an opaque string.
    pub fn seal_search(&self, cursor: &SearchCursor) -> String {
        let mut body = Vec::with_capacity(96);
        push_handle(&mut body, &cursor.handle);
        body.extend_from_slice(&(cursor.query.pattern.len() as u32).to_le_bytes());
        body.extend_from_slice(cursor.query.pattern.as_bytes());
        body.push(u8::from(cursor.query.regex) | u8::from(cursor.query.case_sensitive) << 1);
        body.push(cursor.before);
        body.push(cursor.after);
        body.extend_from_slice(&cursor.max_matches.to_le_bytes());
        let b = &cursor.budget;
        for n in [
            b.max_tokens,
            b.max_chars,
            b.max_lines.unwrap_or(0),
            b.token_factor.to_bits(),
        ] {
            body.extend_from_slice(&n.to_le_bytes());
        }
        body.extend_from_slice(&cursor.start.to_le_bytes());
        self.seal_body(SEARCH_PREFIX, body)
    }

    /// Opens a sealed search cursor.
    pub fn open_search(&self, sealed: &str) -> Result<SearchCursor, CursorError> {
        let body = self.open_body(SEARCH_PREFIX, sealed)?;
        let mut r = Reader(&body);
        let read = |r: &mut Reader<'_>| -> Option<SearchCursor> {
            let handle = r.handle()?;
            let len = r.u32()? as usize;
            let pattern = r.string(len)?;
            let flags = r.u8()?;
            let before = r.u8()?;
            let after = r.u8()?;
            let max_matches = r.u32()?;
            let budget = Budget {
                max_tokens: r.u32()?,
                max_chars: r.u32()?,
                max_lines: Some(r.u32()?).filter(|&l| l > 0),
                token_factor: f32::from_bits(r.u32()?),
            };
            let start = r.u64()?;
            r.0.is_empty().then_some(SearchCursor {
                handle,
                query: crate::search::Query {
                    pattern,
                    regex: flags & 1 != 0,
                    case_sensitive: flags & 2 != 0,
                },
                before,
                after,
                max_matches,
                budget,
                start,
            })
        };
        read(&mut r).ok_or(CursorError::Malformed)
    }

    /// `cursor` as an opaque string.
    pub fn seal(&self, cursor: &Cursor) -> String {
        let mut body = Vec::with_capacity(96);
        push_handle(&mut body, &cursor.handle);
        match &cursor.path {
            None => body.push(0),
            Some(path) => {
                body.push(1);
                body.extend_from_slice(&(path.len() as u32).to_le_bytes());
                body.extend_from_slice(path.as_bytes());
            }
        }
        let b = &cursor.budget;
        body.extend_from_slice(&b.max_tokens.to_le_bytes());
        body.extend_from_slice(&b.max_chars.to_le_bytes());
        body.extend_from_slice(&b.max_lines.unwrap_or(0).to_le_bytes());
        body.extend_from_slice(&b.token_factor.to_bits().to_le_bytes());
        for n in [
            cursor.at.seg,
            cursor.at.unit,
            cursor.at.byte,
            cursor.at.char,
        ] {
            body.extend_from_slice(&n.to_le_bytes());
        }
        self.seal_body(PREFIX, body)
    }

    /// Opens a sealed cursor.
    pub fn open(&self, sealed: &str) -> Result<Cursor, CursorError> {
        let body = self.open_body(PREFIX, sealed)?;
        // Sealed by us: the layout is ours, but read it defensively anyway.
        Reader(&body).cursor().ok_or(CursorError::Malformed)
    }
}

/// Handles of fewer than 255 bytes (sluice's own are 24) are written after
/// their length in one byte; longer ones after `255` and their length in four.
const LONG_HANDLE: u8 = u8::MAX;

fn push_handle(body: &mut Vec<u8>, handle: &str) {
    match u8::try_from(handle.len()) {
        Ok(len) if len < LONG_HANDLE => body.push(len),
        _ => {
            body.push(LONG_HANDLE);
            body.extend_from_slice(&(handle.len() as u32).to_le_bytes());
        }
    }
    body.extend_from_slice(handle.as_bytes());
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }
    fn string(&mut self, n: usize) -> Option<String> {
        self.take(n)
            .and_then(|b| String::from_utf8(b.to_vec()).ok())
    }
    fn handle(&mut self) -> Option<String> {
        let len = match self.u8()? {
            LONG_HANDLE => self.u32()? as usize,
            len => len as usize,
        };
        self.string(len)
    }
    fn cursor(mut self) -> Option<Cursor> {
        let handle = self.handle()?;
        let path = match self.u8()? {
            0 => None,
            _ => {
                let len = self.u32()? as usize;
                Some(self.string(len)?)
            }
        };
        let max_tokens = self.u32()?;
        let max_chars = self.u32()?;
        let max_lines = Some(self.u32()?).filter(|&l| l > 0);
        let token_factor = f32::from_bits(self.u32()?);
        let at = Position {
            seg: self.u64()?,
            unit: self.u64()?,
            byte: self.u64()?,
            char: self.u64()?,
        };
        self.0.is_empty().then_some(Cursor {
            handle,
            path,
            budget: Budget {
                max_tokens,
                max_chars,
                max_lines,
                token_factor,
            },
            at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor() -> Cursor {
        Cursor {
            handle: "h_abcdefghijklmnopqrstuv".into(),
            path: Some("/tree/0/children".into()),
            budget: Budget {
                max_lines: Some(250),
                ..Budget::default()
            },
            at: Position {
                seg: 3,
                unit: 250,
                byte: 7,
                char: 5,
            },
        }
    }

    #[test]
    fn a_sealed_cursor_opens_to_itself() {
        let key = CursorKey::random();
        let sealed = key.seal(&cursor());
        assert!(sealed.starts_with("c1_"));
        assert_eq!(key.open(&sealed), Ok(cursor()));
        let plain = Cursor {
            path: None,
            budget: Budget::default(),
            ..cursor()
        };
        assert_eq!(key.open(&key.seal(&plain)), Ok(plain));
    }

    #[test]
    fn search_cursors_round_trip_and_are_not_page_cursors() {
        let key = CursorKey::random();
        let cursor = SearchCursor {
            handle: "h_x".into(),
            query: crate::search::Query {
                pattern: "a|b".into(),
                regex: true,
                case_sensitive: false,
            },
            before: 3,
            after: 0,
            max_matches: 50,
            budget: Budget::default(),
            start: 150,
        };
        let sealed = key.seal_search(&cursor);
        assert!(sealed.starts_with("s2_"));
        assert_eq!(key.open_search(&sealed), Ok(cursor));
        assert_eq!(key.open(&sealed), Err(CursorError::Malformed));
        // A cursor of the former format (`s1_`, one context) is not opened.
        let former = sealed.replacen("s2_", "s1_", 1);
        assert_eq!(key.open_search(&former), Err(CursorError::Malformed));
        let page = key.seal(&super::tests::cursor());
        assert_eq!(key.open_search(&page), Err(CursorError::Malformed));
    }

    #[test]
    fn handles_of_any_length_round_trip() {
        // A length that does not fit the short form (256 bytes was written
        // as 0) used to make the cursor unreadable.
        let key = CursorKey::random();
        for len in [0, 24, 254, 255, 256, 300, 70_000] {
            let long = Cursor {
                handle: "h".repeat(len),
                ..cursor()
            };
            assert_eq!(key.open(&key.seal(&long)), Ok(long), "{len}");
        }
    }

    #[test]
    fn altered_foreign_and_garbage_cursors_are_refused() {
        let key = CursorKey::random();
        let sealed = key.seal(&cursor());
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed[3..]).unwrap();
        bytes[30] ^= 1;
        let altered = format!("c1_{}", URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(key.open(&altered), Err(CursorError::Forged));
        assert_eq!(CursorKey::random().open(&sealed), Err(CursorError::Forged));
        assert_eq!(key.open("c1_!!!"), Err(CursorError::Malformed));
        assert_eq!(key.open("hello"), Err(CursorError::Malformed));
        // Cut short: three bytes fewer, re-encoded so that it still decodes.
        let cut = format!("c1_{}", URL_SAFE_NO_PAD.encode(&bytes[..bytes.len() - 3]));
        assert_eq!(key.open(&cut), Err(CursorError::Forged));
    }
}
