//! sluice's own JSON-RPC layer: every message is kept as the bytes it
//! arrived as, and only its envelope is understood.
//!
//! # Why
//!
//! Decoding each message into an SDK's typed model and encoding it again
//! loses what the model does not know (unknown members, a tool's
//! `execution`, `x-` extensions), respells numbers (`1.50` becomes `1.5`),
//! imposes the SDK's limits (nesting, body sizes) and, when an answer cannot
//! be decoded, drops it without a word so that the call waits for ever. This
//! layer does none of that:
//!
//! - A [`Message`] is its received bytes plus the byte ranges of its
//!   envelope members (`id`, `method`, `params`, `result`, `error`), found
//!   by one pass that checks the whole message's JSON. A message sluice does not change is forwarded
//!   as those bytes; one whose id or progress token changes is spliced
//!   ([`splice`]), every other byte kept.
//! - What sluice does edit (tool lists, `initialize` results) is edited as
//!   a [`RawObject`]: ordered members whose values stay raw JSON text, so
//!   nothing is dropped and no number is respelled.
//! - Limits are sluice's own: a message over the size limit
//!   (`[limits] max_message_mb`) or nested deeper than [`MAX_DEPTH`] is
//!   refused with a [`MessageError`] that says so, and [`salvage_id`] finds
//!   the id of an answer that could not be parsed, so that the call waiting
//!   for it fails at once instead of hanging.
//!
//! # Parts
//!
//! - [`message`]: [`Message`], [`Id`], [`MessageError`], the envelope parse.
//! - `check`: the one-pass check of a message's JSON (grammar, depth, its
//!   top-level members) that the envelope parse makes first.
//! - [`scan`]: byte scans that work on input that failed to parse:
//!   [`salvage_id`] and the nesting check.
//! - [`splice`]: edits to a message's raw text that keep every other byte.
//! - [`object`]: [`RawObject`], a JSON object edited without losing members.
//! - [`frame`]: newline-delimited framing (stdio), both directions.
//! - [`sse`]: Server-Sent Events, parsed incrementally and written.
//! - [`walk`]: a [`Walker`](walk::Walker) through JSON this layer has
//!   already checked (a tool's result read where it lies, in one pass).
//! - [`body`]: an HTTP body collected under a byte limit.
//! - [`pending`]: request correlation: outgoing ids and their waiters.
//!
//! Every input here comes from a client or an upstream and is untrusted:
//! each function is linear in its input, bounded in memory by the limit it
//! is given, recursion-free on input-derived structure (a message nested a
//! million levels deep is refused, not a stack overflow), and never panics.

pub mod body;
mod check;
pub mod frame;
pub mod message;
pub mod object;
pub mod pending;
pub mod scan;
pub mod splice;
pub mod sse;
pub mod walk;

pub use body::{BodyError, collect_body};
pub use frame::{Frame, LineReader, LineSplitter, write_line};
pub use message::{
    Id, Kind, MAX_DEPTH, Member, Message, MessageError, PROTOCOL_VERSION_META, Routing,
};
pub use object::{ObjectError, RawObject};
pub use pending::{CallFailed, Pending, Waiter};
pub use scan::salvage_id;
pub use splice::{SpliceError, params_with_meta, params_with_progress_token, splice};
pub use sse::{Event, SseError, SseParser, write_event};

/// The byte range that `inner`, a slice borrowed from `outer`, covers in
/// `outer`. `serde_json`'s borrowed values (`&RawValue`, `&str`) point into
/// the text they were parsed from, so their place is found without a scan.
fn span_in(outer: &str, inner: &str) -> std::ops::Range<usize> {
    debug_assert!(
        outer.as_ptr() <= inner.as_ptr()
            && inner.as_ptr() as usize + inner.len() <= outer.as_ptr() as usize + outer.len(),
        "a slice of the text"
    );
    let start = (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize);
    start..start + inner.len()
}
