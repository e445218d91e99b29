//! A tool's result read as the upstream sent it: told apart from the other
//! answers a call can get, and measured from its bytes, without decoding it
//! into rmcp's types (a result that passes is forwarded as those bytes, and
//! nothing else needs it decoded).
//!
//! Only what governing needs is read, in place: each content block's `type`
//! and the text it sends (a text block's `text`, an image's or audio's
//! `data`, an embedded resource's `text` or `blob`; any other block counts
//! as its JSON as sent), `structuredContent` as sent, and the members that
//! make an answer something else than a tool's result (`task`,
//! `inputRequests`, a `resultType` other than `complete`). A text without
//! escapes is borrowed, not copied. Every other member is skipped.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use sluice_core::budget::{Budget, Size};

/// The members of a tool's result that governing reads.
#[derive(Deserialize)]
struct Members<'a> {
    #[serde(borrow, default)]
    content: Option<Vec<&'a RawValue>>,
    #[serde(rename = "structuredContent", borrow, default)]
    structured: Option<&'a RawValue>,
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<&'a RawValue>,
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<Text<'a>>,
    #[serde(default)]
    task: Option<IgnoredAny>,
    #[serde(rename = "inputRequests", default)]
    input_requests: Option<IgnoredAny>,
}

/// What a content block sends, as far as measuring goes.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: Text<'a>,
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    data: Option<Text<'a>>,
    #[serde(borrow, default)]
    resource: Option<Contents<'a>>,
}

/// An embedded resource's contents: a text or a base64 blob.
#[derive(Deserialize)]
struct Contents<'a> {
    #[serde(borrow, default)]
    text: Option<Text<'a>>,
    #[serde(borrow, default)]
    blob: Option<Text<'a>>,
}

/// A JSON string, borrowed from the text when it has no escapes (serde's
/// own `Cow<str>` always copies inside an `Option`). Read as bytes, which
/// serde_json lets hold a lone UTF-16 surrogate escape (`\ud800`, which
/// JavaScript's `JSON.stringify` writes for half a pair): valid JSON that
/// no Rust string holds, read here with U+FFFD in its place, so that such a
/// text is measured (and relayed as sent) instead of failing its call.
#[derive(PartialEq, Eq, Hash)]
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_bytes<E>(self, bytes: &'de [u8]) -> Result<Text<'de>, E> {
                // `from_utf8` first: its ASCII fast path is several times
                // quicker than `from_utf8_lossy`'s chunks on a large text.
                Ok(Text(match std::str::from_utf8(bytes) {
                    Ok(text) => Cow::Borrowed(text),
                    Err(_) => String::from_utf8_lossy(bytes),
                }))
            }
            fn visit_bytes<E>(self, bytes: &[u8]) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(match std::str::from_utf8(bytes) {
                    Ok(text) => text.to_owned(),
                    Err(_) => String::from_utf8_lossy(bytes).into_owned(),
                })))
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_bytes(Visitor)
    }
}

/// A tool's result as sent, read in place: what its content blocks send,
/// and its `structuredContent` as sent.
#[derive(Debug)]
pub struct SentCall<'a> {
    /// What each content block sends.
    parts: Vec<Cow<'a, str>>,
    /// Which blocks are text blocks.
    is_text: Vec<bool>,
    /// The `content` array as sent.
    content: Option<&'a str>,
    structured: Option<&'a str>,
    is_error: Option<bool>,
    /// Whether it says `"resultType": "complete"`.
    says_complete: bool,
    meta: Option<&'a str>,
}

impl<'a> SentCall<'a> {
    /// `result` (the JSON text of a response's `result`) read as a tool's
    /// result; `None` if it is another answer (a task, `input_required`) or
    /// does not read as a tool's result (a block without its `type` or with
    /// a text that is not a string), which is left to the decoder to say.
    pub fn read(result: &'a str) -> Option<SentCall<'a>> {
        // serde would read an array as the members in order.
        if !result.trim_start().starts_with('{') {
            return None;
        }
        let members: Members<'a> = serde_json::from_str(result).ok()?;
        let complete = members
            .result_type
            .as_ref()
            .is_none_or(|t| t.0 == "complete");
        if !complete || members.task.is_some() || members.input_requests.is_some() {
            return None;
        }
        let blocks = members.content.unwrap_or_default();
        let (parts, is_text): (Vec<_>, Vec<_>) = blocks
            .iter()
            .map(|block| sent_by(block))
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .unzip();
        Some(SentCall {
            parts,
            is_text,
            content: array_text(result, &blocks),
            structured: members.structured.map(RawValue::get),
            is_error: members.is_error,
            says_complete: members.result_type.is_some(),
            meta: members.meta.map(RawValue::get),
        })
    }

    /// Whether every block is a text block.
    fn all_text(&self) -> bool {
        self.is_text.iter().all(|&text| text)
    }

    /// Whether it says `"isError": true`.
    pub fn is_error(&self) -> bool {
        self.is_error == Some(true)
    }

    /// The texts of its text blocks.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.parts
            .iter()
            .zip(&self.is_text)
            .filter(|(_, text)| **text)
            .map(|(part, _)| part.as_ref())
    }

    /// The result taken apart for storing, as [`super::raw_of_call`] and
    /// [`super::one_copy`] take its decoding apart: one text block, that
    /// text; text blocks with `structuredContent`, the structured content
    /// as sent; else the blocks as sent. `size` is its size as sent.
    pub(super) fn kept(self, size: Size, budget: &Budget) -> super::Kept {
        let copy = self.one_copy(budget);
        let meta = self
            .meta
            .and_then(|meta| serde_json::from_str::<rmcp::model::MetaObject>(meta).ok());
        let raw = match (self.parts.len(), self.all_text(), self.structured) {
            (1, true, _) => super::Raw::Text(
                self.parts
                    .into_iter()
                    .next()
                    .unwrap_or_default()
                    .into_owned(),
            ),
            (_, true, Some(structured)) => super::Raw::Json(structured.to_owned()),
            _ => super::Raw::Blocks(self.content.unwrap_or("[]").to_owned()),
        };
        super::Kept {
            raw,
            sent_twice: copy.is_some(),
            size: copy.unwrap_or(size),
            is_error: self.is_error,
            result_type: self
                .says_complete
                .then_some(rmcp::model::ResultType::COMPLETE),
            meta,
        }
    }

    /// The size of one copy of the data when the result sent it twice (as
    /// [`super::one_copy`] tells from its decoding): one text block, and
    /// `structuredContent` holding that text (a string, or an object of one
    /// member) or the value the text serializes (the same compact bytes, or
    /// the same value parsed, up to [`super::COMPARE_PARSED_BYTES`]).
    pub(super) fn one_copy(&self, budget: &Budget) -> Option<Size> {
        let structured = self.structured?;
        let ([text], true) = (self.parts.as_slice(), self.all_text()) else {
            return None;
        };
        let text = text.as_ref();
        let holds_the_text = match structured.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<Text<'_>>(structured).is_ok_and(|s| s.0 == text),
            Some(b'{') => {
                serde_json::from_str::<std::collections::HashMap<Text<'_>, Text<'_>>>(structured)
                    .is_ok_and(|map| map.len() == 1 && map.values().all(|v| v.0 == text))
            }
            _ => false,
        };
        let same = holds_the_text || {
            let json = text.trim_start().starts_with(['{', '[']);
            json && (sluice_core::scan::minify(text) == sluice_core::scan::minify(structured)
                || (text.len() <= super::COMPARE_PARSED_BYTES
                    && serde_json::from_str::<serde_json::Value>(text).is_ok_and(|a| {
                        serde_json::from_str::<serde_json::Value>(structured).is_ok_and(|b| a == b)
                    })))
        };
        same.then(|| Size::of(&[text], budget))
    }

    /// The size of the result as the client receives it (see
    /// [`super::measure_parts`]).
    pub fn size(&self, budget: &Budget) -> Size {
        let parts: Vec<&str> = self.parts.iter().map(|p| p.as_ref()).collect();
        super::measure_parts(parts, self.structured.map(super::Structured::Sent), budget)
    }
}

/// The text of the array in `whole` whose items are `items` (slices of
/// `whole`), from its `[` to its `]`: found around the items, so that the
/// array is not scanned again. `None` for no items.
fn array_text<'a>(whole: &'a str, items: &[&'a RawValue]) -> Option<&'a str> {
    let offset = |item: &str| item.as_ptr() as usize - whole.as_ptr() as usize;
    let (first, last) = (items.first()?.get(), items.last()?.get());
    let open = whole[..offset(first)].trim_end().len().checked_sub(1)?;
    let after = offset(last) + last.len();
    let close = whole.len() - whole[after..].trim_start().len();
    let bytes = whole.as_bytes();
    (bytes.get(open) == Some(&b'[') && bytes.get(close) == Some(&b']'))
        .then(|| &whole[open..=close])
}

/// What `block` sends: its text or data, or for a block of another kind,
/// its JSON as sent; and whether it is a text block.
fn sent_by<'a>(block: &'a RawValue) -> Option<(Cow<'a, str>, bool)> {
    let read: Block<'a> = serde_json::from_str(block.get()).ok()?;
    let whole = Cow::Borrowed(block.get());
    let sent = match read.kind.0.as_ref() {
        "text" => return read.text.map(|t| (t.0, true)),
        "image" | "audio" => read.data?.0,
        "resource" => match read.resource {
            Some(Contents {
                text: Some(text), ..
            }) => text.0,
            Some(Contents {
                blob: Some(blob), ..
            }) => blob.0,
            _ => whole,
        },
        _ => whole,
    };
    Some((sent, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(result: &str) -> Option<Size> {
        SentCall::read(result).map(|call| call.size(&Budget::default()))
    }

    #[test]
    fn a_text_is_measured_unescaped_and_borrowed_when_it_has_no_escapes() {
        let plain = SentCall::read(r#"{"content":[{"type":"text","text":"héllo"}]}"#).unwrap();
        assert!(matches!(plain.parts[0], Cow::Borrowed("héllo")));
        let measured = plain.size(&Budget::default());
        assert_eq!((measured.bytes, measured.chars, measured.lines), (6, 5, 1));
        // Escapes count as the characters they stand for.
        let escaped = size(r#"{"content":[{"type":"text","text":"a\nb\u00e9"}]}"#).unwrap();
        assert_eq!((escaped.chars, escaped.lines), (4, 2));
    }

    #[test]
    fn structured_content_counts_as_sent_and_other_blocks_as_their_json() {
        let result = r#"{"content":[{"type":"text","text":"ab"},{"type":"image","data":"QUJD","mimeType":"image/png"},
            {"type":"resource","resource":{"uri":"a:b","blob":"Zm9v"}},{"type":"resource_link","uri":"a:c","name":"c"}],
            "structuredContent": {"n": 1.50},"x-trace":{"deep":[1,2]}}"#;
        let size = size(result).unwrap();
        let link = r#"{"type":"resource_link","uri":"a:c","name":"c"}"#;
        let structured = r#"{"n": 1.50}"#;
        assert_eq!(
            size.bytes as usize,
            2 + 4 + 4 + link.len() + structured.len()
        );
    }

    #[test]
    fn other_answers_and_unreadable_results_are_not_read_as_a_tool_result() {
        for other in [
            r#"{"task":{"taskId":"t","status":"working"}}"#,
            r#"{"resultType":"task","task":{"taskId":"t"}}"#,
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"content":[{"text":"no type"}]}"#,
            r#"{"content":[{"type":"text","text":7}]}"#,
            r#"{"content":{"type":"text"}}"#,
            r#"[]"#,
        ] {
            assert!(SentCall::read(other).is_none(), "{other}");
        }
        // A 2026-07-28 result says it is complete; one without content is
        // an empty result.
        assert!(size(r#"{"resultType":"complete","content":[]}"#).is_some());
        assert_eq!(size(r#"{"isError":true}"#).unwrap().bytes, 0);
    }

    #[test]
    fn the_content_array_is_kept_as_sent() {
        let result = r#"{"content" : [ {"type":"x-new","n":1.50} ,
            {"type":"text","text":"a"} ], "isError": true}"#;
        let call = SentCall::read(result).unwrap();
        assert_eq!(
            call.content,
            Some(
                r#"[ {"type":"x-new","n":1.50} ,
            {"type":"text","text":"a"} ]"#
            )
        );
        assert_eq!(call.is_error, Some(true));
        assert_eq!(SentCall::read(r#"{"content":[]}"#).unwrap().content, None);
    }

    #[test]
    fn a_lone_surrogate_is_measured_in_place_of_a_replacement_character() {
        let call = SentCall::read(r#"{"content":[{"type":"text","text":"a\ud800b"}]}"#).unwrap();
        assert!(call.parts[0].starts_with('a') && call.parts[0].ends_with('b'));
        assert!(call.parts[0].contains('\u{FFFD}'), "{:?}", call.parts[0]);
        // A pair is one character, as a string reads it.
        let pair =
            SentCall::read(r#"{"content":[{"type":"text","text":"\ud83d\ude00"}]}"#).unwrap();
        assert_eq!(pair.parts[0], "😀");
        // Neither a number nor an unterminated escape is a string.
        assert!(SentCall::read(r#"{"content":[{"type":"text","text":"\u12"}]}"#).is_none());
    }

    #[test]
    fn a_text_that_mentions_a_task_is_still_a_tool_result() {
        let result =
            r#"{"content":[{"type":"text","text":"{\"task\":1,\"resultType\":\"task\"}"}]}"#;
        assert!(size(result).is_some());
    }
}
