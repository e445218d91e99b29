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

use crate::jsonrpc::walk;
use sluice_core::budget::{Budget, Size};

/// A string member's value: the text, or `None` for `null`; `None`
/// (outside) for any other value or an escape that cannot be read.
fn string_or_null(read: Option<walk::StringValue<'_>>) -> Option<Option<Cow<'_, str>>> {
    match read? {
        walk::StringValue::Text(text) => Some(Some(text)),
        walk::StringValue::Null => Some(None),
        walk::StringValue::Other => None,
    }
}

/// A value that may be `null` (which is the member left out), as sent.
fn unless_null(value: &str) -> Option<&str> {
    (value != "null").then_some(value)
}

/// What a content block sends, and whether it is a text block.
type Sent<'a> = (Cow<'a, str>, bool);

/// An embedded resource's `text` and `blob`.
type Contents<'a> = (Option<Cow<'a, str>>, Option<Cow<'a, str>>);

/// The array at the walk's position (a result's `content`, a read's
/// `contents`), read where it lies (each item's members walked into by
/// `item`, not skipped first): what each item sends and whether it is a
/// text, and the array's text when it has items. `None` when it is not an
/// array (or `null`) of items that read.
fn items<'a>(
    walker: &mut walk::Walker<'a>,
    result: &'a str,
    item: fn(&mut walk::Walker<'a>, &'a str) -> Option<Sent<'a>>,
) -> Option<(Vec<Sent<'a>>, Option<&'a str>)> {
    if walker.peek() == Some(b'n') {
        return (walker.value() == "null").then(|| (Vec::new(), None));
    }
    let start = walker.position();
    if !walker.enter(b'[') {
        return None;
    }
    let mut blocks = Vec::new();
    while walker.item() {
        blocks.push(item(walker, result)?);
    }
    let text = result
        .get(start..walker.position())
        .filter(|_| !blocks.is_empty());
    Some((blocks, text))
}

/// What the block at the walk's position sends, read where it lies: its
/// text or data, or for a block of another kind, its JSON as sent; and
/// whether it is a text block. `None` when it is not an object, or a member
/// read is of the wrong type or appears twice.
fn sent_by<'a>(walker: &mut walk::Walker<'a>, result: &'a str) -> Option<Sent<'a>> {
    let start = walker.position();
    if !walker.enter(b'{') {
        return None;
    }
    let (mut kind, mut text, mut data, mut resource) = (None, None, None, None);
    let mut seen = [false; 4];
    let wanted = ["\"type\"", "\"text\"", "\"data\"", "\"resource\""];
    while let Some(slot) = walker.wanted(&wanted, &mut seen) {
        match slot.ok()? {
            0 => kind = string_or_null(walker.string())?,
            1 => text = string_or_null(walker.string())?,
            2 => data = string_or_null(walker.string())?,
            _ => resource = unless_null(walker.value()),
        }
    }
    let whole = Cow::Borrowed(result.get(start..walker.position())?);
    let sent = match kind?.as_ref() {
        "text" => return text.map(|t| (t, true)),
        "image" | "audio" => data?,
        "resource" => match resource.map(contents) {
            Some(Some((Some(text), _))) => text,
            Some(Some((None, Some(blob)))) => blob,
            Some(None) => return None,
            _ => whole,
        },
        _ => whole,
    };
    Some((sent, false))
}

/// An embedded resource's contents: its `text` or base64 `blob`; `None`
/// when it is not an object or either is not a string.
fn contents(resource: &str) -> Option<Contents<'_>> {
    contents_of(&mut walk::members(resource)?)
}

/// The `text` and `blob` of the resource contents whose members the walk
/// is in; `None` when either is not a string.
fn contents_of<'a>(walker: &mut walk::Walker<'a>) -> Option<Contents<'a>> {
    let (mut text, mut blob) = (None, None);
    let mut seen = [false; 2];
    while let Some(slot) = walker.wanted(&["\"text\"", "\"blob\""], &mut seen) {
        let slot = if slot.ok()? == 0 {
            &mut text
        } else {
            &mut blob
        };
        *slot = string_or_null(walker.string())?;
    }
    Some((text, blob))
}

/// Whether `result` (a response's `result` as sent) is a plain result, no
/// other answer: an object without `task` or `inputRequests` (but `null`),
/// whose `resultType` is `complete`, `null` or absent. Any other (one of
/// those members of the wrong type, or sent twice) is left to the decoder.
pub fn plain_result(result: &str) -> bool {
    let Some(mut walker) = walk::members(result) else {
        return false;
    };
    let mut seen = [false; 3];
    let wanted = ["\"resultType\"", "\"task\"", "\"inputRequests\""];
    while let Some(slot) = walker.wanted(&wanted, &mut seen) {
        let plain = match slot {
            Ok(0) => match string_or_null(walker.string()) {
                Some(None) => true,
                Some(Some(kind)) => kind == "complete",
                None => false,
            },
            Ok(_) => unless_null(walker.value()).is_none(),
            Err(_) => false,
        };
        if !plain {
            return false;
        }
    }
    true
}

/// What the resource contents at the walk's position send, read where they
/// lie: their `text` (a text), else their base64 `blob`, else their JSON as
/// sent. `None` when they are not an object, or `text` or `blob` is there
/// and not a string or is there twice.
fn sent_contents<'a>(walker: &mut walk::Walker<'a>, result: &'a str) -> Option<Sent<'a>> {
    let start = walker.position();
    if !walker.enter(b'{') {
        return None;
    }
    Some(match contents_of(walker)? {
        (Some(text), _) => (text, true),
        (None, Some(blob)) => (blob, false),
        (None, None) => (Cow::Borrowed(result.get(start..walker.position())?), false),
    })
}

/// A `_meta` as sent, read as the object it is (`None` if it is not one).
fn meta_object(meta: Option<&str>) -> Option<rmcp::model::MetaObject> {
    meta.and_then(|meta| serde_json::from_str(meta).ok())
}

/// The result of `resources/read` as sent, read in place: what each of its
/// contents sends (as [`super::contents_text`] tells from its decoding).
#[derive(Debug)]
pub struct SentRead<'a> {
    /// What each of the contents sends, and whether it is a text.
    contents_sent: Vec<Sent<'a>>,
    /// The `contents` array as sent.
    contents: Option<&'a str>,
    /// Whether it says `"resultType": "complete"`.
    says_complete: bool,
    meta: Option<&'a str>,
}

/// What is stored of a resource read over the budget, and what its answer
/// keeps of it: its `_meta`, and whether it said it is complete.
pub(super) struct KeptRead {
    pub(super) raw: super::Raw,
    pub(super) meta: Option<rmcp::model::MetaObject>,
    pub(super) says_complete: bool,
}

impl<'a> SentRead<'a> {
    /// `result` (the JSON text of a response's `result`, its long strings
    /// taken from those `kept` unescaped when the response was checked)
    /// read as a resource's contents; `None` if it is another answer
    /// (`input_required`) or does not read as a resource's contents (a
    /// member of the wrong type, or twice), which is left to the decoder
    /// to say.
    pub fn read_kept(result: &'a str, kept: walk::Kept<'a>) -> Option<SentRead<'a>> {
        let mut walker = walk::members_kept(result, kept)?;
        let (mut sent, mut contents) = (Vec::new(), None);
        let (mut meta, mut result_type, mut other_answer) = (None, None, false);
        let mut seen = [false; 4];
        let wanted = [
            "\"contents\"",
            "\"_meta\"",
            "\"resultType\"",
            "\"inputRequests\"",
        ];
        while let Some(slot) = walker.wanted(&wanted, &mut seen) {
            match slot.ok()? {
                0 => (sent, contents) = items(&mut walker, result, sent_contents)?,
                1 => meta = unless_null(walker.value()),
                2 => result_type = string_or_null(walker.string())?,
                _ => other_answer = unless_null(walker.value()).is_some(),
            }
        }
        if other_answer || result_type.as_ref().is_some_and(|t| t != "complete") {
            return None;
        }
        Some(SentRead {
            contents_sent: sent,
            contents,
            says_complete: result_type.is_some(),
            meta,
        })
    }

    /// Its size as the client receives it: what its contents send.
    pub fn size(&self, budget: &Budget) -> Size {
        let parts: Vec<&str> = self.contents_sent.iter().map(|(p, _)| p.as_ref()).collect();
        Size::of(&parts, budget)
    }

    /// Taken apart for storing, as [`super::Governor::resource_result`]
    /// takes its decoding apart: one text, that text; else the contents as
    /// sent.
    pub(super) fn kept(self) -> KeptRead {
        let raw = match <[Sent<'a>; 1]>::try_from(self.contents_sent) {
            Ok([(text, true)]) => super::Raw::Text(text.into_owned()),
            _ => super::Raw::Blocks(self.contents.unwrap_or("[]").to_owned()),
        };
        KeptRead {
            raw,
            meta: meta_object(self.meta),
            says_complete: self.says_complete,
        }
    }
}

/// A tool's result as sent, read in place: what its content blocks send,
/// and its `structuredContent` as sent.
#[derive(Debug)]
pub struct SentCall<'a> {
    /// What each content block sends, and whether it is a text block.
    blocks: Vec<Sent<'a>>,
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
        Self::read_kept(result, walk::Kept::NONE)
    }

    /// [`SentCall::read`], its long text blocks taken from those `kept`
    /// unescaped when the response was checked.
    pub fn read_kept(result: &'a str, kept: walk::Kept<'a>) -> Option<SentCall<'a>> {
        let mut walker = walk::members_kept(result, kept)?;
        let (mut blocks, mut content_text) = (Vec::new(), None);
        let (mut structured, mut is_error, mut meta, mut result_type) = (None, None, None, None);
        // A `task` or `inputRequests` (not `null`): another answer.
        let mut other_answer = false;
        let mut seen = [false; 7];
        let wanted = [
            "\"content\"",
            "\"structuredContent\"",
            "\"isError\"",
            "\"_meta\"",
            "\"resultType\"",
            "\"task\"",
            "\"inputRequests\"",
        ];
        while let Some(slot) = walker.wanted(&wanted, &mut seen) {
            match slot.ok()? {
                0 => (blocks, content_text) = items(&mut walker, result, sent_by)?,
                1 => structured = unless_null(walker.value()),
                2 => {
                    is_error = match walker.value() {
                        "null" => None,
                        "true" => Some(true),
                        "false" => Some(false),
                        _ => return None,
                    }
                }
                3 => meta = unless_null(walker.value()),
                4 => result_type = string_or_null(walker.string())?,
                _ => other_answer |= unless_null(walker.value()).is_some(),
            }
        }
        if other_answer || result_type.as_ref().is_some_and(|t| t != "complete") {
            return None;
        }
        Some(SentCall {
            blocks,
            content: content_text,
            structured,
            is_error,
            says_complete: result_type.is_some(),
            meta,
        })
    }

    /// Whether every block is a text block.
    fn all_text(&self) -> bool {
        self.blocks.iter().all(|&(_, text)| text)
    }

    /// Whether it says `"isError": true`.
    pub fn is_error(&self) -> bool {
        self.is_error == Some(true)
    }

    /// The texts of its text blocks.
    pub fn texts(&self) -> impl Iterator<Item = &str> {
        self.blocks
            .iter()
            .filter(|(_, text)| *text)
            .map(|(part, _)| part.as_ref())
    }

    /// The result taken apart for storing, as [`super::raw_of_call`] and
    /// [`super::one_copy`] take its decoding apart: one text block, that
    /// text; text blocks with `structuredContent`, the structured content
    /// as sent; else the blocks as sent. `size` is its size as sent.
    pub(super) fn kept(self, size: Size, budget: &Budget) -> super::Kept {
        let copy = self.one_copy(budget);
        let meta = meta_object(self.meta);
        let raw = match (self.blocks.len(), self.all_text(), self.structured) {
            (1, true, _) => super::Raw::Text(
                self.blocks
                    .into_iter()
                    .next()
                    .map(|(part, _)| part)
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
        let [(text, true)] = self.blocks.as_slice() else {
            return None;
        };
        let text = text.as_ref();
        let holds_the_text = match structured.as_bytes().first() {
            Some(b'"') => walk::string_at(structured, 0).is_some_and(|(_, s)| s == text),
            Some(b'{') => walk::members(structured).is_some_and(|mut m| {
                let one = m.key().is_some()
                    && m.string() == Some(walk::StringValue::Text(Cow::Borrowed(text)));
                one && m.key().is_none()
            }),
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
        let parts: Vec<&str> = self.blocks.iter().map(|(p, _)| p.as_ref()).collect();
        super::measure_parts(parts, self.structured.map(super::Structured::Sent), budget)
    }
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
        assert!(matches!(plain.blocks[0].0, Cow::Borrowed("héllo")));
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
    fn a_member_of_the_wrong_type_or_sent_twice_leaves_the_result_to_the_decoder() {
        for unread in [
            r#"{"isError":"yes","content":[]}"#,
            r#"{"content":[],"content":[]}"#,
            r#"{"resultType":7}"#,
            r#"{"content":[{"type":"text","text":"a","text":"b"}]}"#,
            r#"{"content":[["text","a"]]}"#,
            r#"{"content":[{"type":7,"text":"a"}]}"#,
            r#"{"content":[{"type":"image","data":null}]}"#,
            r#"{"content":[{"type":"resource","resource":7}]}"#,
            r#"{"content":[{"type":"resource","resource":{"text":1}}]}"#,
        ] {
            assert!(SentCall::read(unread).is_none(), "{unread}");
        }
        // A key spelled with escapes is the key it spells: a result cannot
        // hide its content from the budget that way, and the same key
        // twice, spelled two ways, is still twice.
        let escaped = r#"{"\u0063ontent":[{"type":"te\u0078t","t\u0065xt":"abc"}]}"#;
        assert_eq!(size(escaped).unwrap().bytes, 3);
        assert!(SentCall::read(r#"{"content":[],"\u0063ontent":[]}"#).is_none());
        // `null` is the member left out.
        for read in [
            r#"{"task":null,"inputRequests":null,"resultType":null,"content":null}"#,
            r#"{"isError":null,"structuredContent":null,"_meta":null}"#,
        ] {
            let call = SentCall::read(read).unwrap();
            assert_eq!(call.size(&Budget::default()).bytes, 0, "{read}");
            assert!(!call.says_complete && call.structured.is_none() && call.meta.is_none());
        }
        // A resource without text or blob counts as its JSON.
        let block = r#"{"type":"resource","resource":{"uri":"a:b"}}"#;
        let result = format!(r#"{{"content":[{block}]}}"#);
        let call = SentCall::read(&result).unwrap();
        assert_eq!(call.blocks[0].0, block);
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
        assert!(call.blocks[0].0.starts_with('a') && call.blocks[0].0.ends_with('b'));
        assert!(
            call.blocks[0].0.contains('\u{FFFD}'),
            "{:?}",
            call.blocks[0].0
        );
        // A pair is one character, as a string reads it.
        let pair =
            SentCall::read(r#"{"content":[{"type":"text","text":"\ud83d\ude00"}]}"#).unwrap();
        assert_eq!(pair.blocks[0].0, "😀");
        // Neither a number nor an unterminated escape is a string.
        assert!(SentCall::read(r#"{"content":[{"type":"text","text":"\u12"}]}"#).is_none());
    }

    /// A read's contents are measured as its decoding was (their text,
    /// else their blob, else their JSON as sent), and kept for storing as
    /// sent: one text alone as that text, several as the array sent.
    #[test]
    fn a_reads_contents_are_measured_and_kept_as_sent() {
        let read = |result| SentRead::read_kept(result, walk::Kept::NONE);
        let result = r#"{"contents":[{"uri":"a:1","text":"h\u00e9llo","x-c":1.50},
            {"uri":"a:2","blob":"QUJD"},{"uri":"a:3","x-new":[-0]}],"x-read":1e2}"#;
        let sent = read(result).unwrap();
        let other = r#"{"uri":"a:3","x-new":[-0]}"#;
        let size = sent.size(&Budget::default());
        assert_eq!(size.bytes as usize, "héllo".len() + 4 + other.len());
        let super::super::Raw::Blocks(kept) = sent.kept().raw else {
            panic!("several contents are kept as the array sent");
        };
        assert!(kept.starts_with(r#"[{"uri":"a:1","text":"h\u00e9llo","x-c":1.50},"#));
        assert!(
            kept.ends_with(other) || kept.ends_with(&format!("{other}]")),
            "{kept}"
        );
        let one = read(
            r#"{"contents":[{"uri":"a:1","text":"a\nb"}],"_meta":{"k":1},"resultType":"complete"}"#,
        )
        .unwrap()
        .kept();
        assert!(matches!(one.raw, super::super::Raw::Text(ref t) if t == "a\nb"));
        assert!(one.says_complete && one.meta.is_some_and(|m| m.0.contains_key("k")));
        // No contents, or `null`: nothing to measure.
        for empty in [r#"{}"#, r#"{"contents":null}"#, r#"{"contents":[]}"#] {
            assert_eq!(
                read(empty).unwrap().size(&Budget::default()).bytes,
                0,
                "{empty}"
            );
        }
    }

    /// What is another answer (`input_required`), or does not read as a
    /// resource's contents, is left to the decoder, which says what is
    /// wrong.
    #[test]
    fn a_read_that_is_another_answer_or_unreadable_is_left_to_the_decoder() {
        for unread in [
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"inputRequests":{"a":{}}}"#,
            r#"{"contents":{"uri":"a:1","text":"t"}}"#,
            r#"{"contents":[["a:1","t"]]}"#,
            r#"{"contents":[{"uri":"a:1","text":7}]}"#,
            r#"{"contents":[{"uri":"a:1","blob":false}]}"#,
            r#"{"contents":[{"uri":"a:1","text":"a","text":"b"}]}"#,
            r#"{"contents":[],"contents":[]}"#,
            r#"[]"#,
        ] {
            assert!(
                SentRead::read_kept(unread, walk::Kept::NONE).is_none(),
                "{unread}"
            );
        }
    }

    /// A result is relayed as sent unless it may be another answer, which
    /// the decoder tells apart.
    #[test]
    fn a_plain_result_is_told_from_other_answers() {
        for plain in [
            r#"{"messages":[],"x-p":1e2}"#,
            r#"{"resultType":"complete","completion":{"values":[]}}"#,
            r#"{"resultType":null,"task":null,"inputRequests":null}"#,
            r#"{"description":"{\"task\":1,\"inputRequests\":{}}"}"#,
            r#"{"\u0078":1}"#,
        ] {
            assert!(plain_result(plain), "{plain}");
        }
        for other in [
            r#"{"resultType":"input_required","inputRequests":{}}"#,
            r#"{"inputRequests":{"a":{}}}"#,
            r#"{"task":{"taskId":"t"}}"#,
            r#"{"resultType":"task"}"#,
            r#"{"resultType":7}"#,
            r#"{"resultType":"complete","resultType":"complete"}"#,
            r#"{"\u0074ask":{}}"#,
            r#"[]"#,
            r#""complete""#,
        ] {
            assert!(!plain_result(other), "{other}");
        }
    }

    #[test]
    fn a_text_that_mentions_a_task_is_still_a_tool_result() {
        let result =
            r#"{"content":[{"type":"text","text":"{\"task\":1,\"resultType\":\"task\"}"}]}"#;
        assert!(size(result).is_some());
    }
}
