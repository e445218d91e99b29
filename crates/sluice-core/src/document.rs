//! A stored result: its text and the index that lets a page be served
//! without reading the rest.
//!
//! A document is built once, when a result is stored: JSON is validated,
//! minified (pages carry compact JSON: whitespace costs tokens) and scanned
//! for its largest arrays; text gets a line index. Arrays other than the
//! default one are indexed the first time a page of them is asked for, and
//! kept: a few of them and a few page plans, the least recently used
//! dropped first, their bytes counted in [`Document::memory`] (and so in the
//! store's bound).

use std::any::Any;
use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::budget::{TOKEN_SAMPLE_BYTES, bytes_per_token, count_chars};
use crate::scan::{self, ArraySpan, PointerError};

/// What a document holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One JSON value.
    Json,
    /// Plain text, paged by lines.
    Text,
    /// A list of MCP content blocks, held as a JSON array.
    Blocks,
}

impl Kind {
    /// Its name in `_meta` and in texts: `json`, `text` or `blocks`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Json => "json",
            Kind::Text => "text",
            Kind::Blocks => "blocks",
        }
    }

    /// The kind named `name` (see [`Kind::as_str`]).
    pub fn parse(name: &str) -> Option<Kind> {
        [Kind::Json, Kind::Text, Kind::Blocks]
            .into_iter()
            .find(|k| k.as_str() == name)
    }
}

/// How many of a document's largest arrays are remembered.
const ARRAYS_KEPT: usize = 12;

/// A stored document and its index.
#[derive(Debug)]
pub struct Document {
    kind: Kind,
    text: String,
    chars: u64,
    /// JSON: the largest arrays, largest first.
    arrays: Vec<ArraySpan>,
    /// Text: the byte offset where every line starts.
    line_starts: Vec<u64>,
    /// JSON: item offsets of the arrays read lately, by where the array
    /// starts (not by the pointer's spelling: one index per array).
    items: Mutex<Recent<usize, Items>>,
    /// Page plans made lately, by path and budget. They are `pager::Plan`s,
    /// made and read back by `Document::plan` in pager.rs: kept here so they
    /// are counted and dropped with the document, held as `Any` so the
    /// document does not depend on the pager that reads it.
    pub(crate) plans: Mutex<Recent<PlanKey, dyn Any + Send + Sync>>,
    /// Bytes held by `items` and `plans`.
    index_bytes: AtomicUsize,
    /// Bytes per o200k token of the whole text, sampled once (see
    /// [`Document::bytes_per_token`]).
    per_token: OnceLock<f32>,
}

/// What a page plan depends on besides the document.
pub(crate) type PlanKey = (Option<String>, u32, u32, u32, u32);

/// The most page plans kept per document (one per budget and path asked).
const PLANS_KEPT: usize = 16;
/// The most arrays whose item offsets are kept per document.
const ITEMS_KEPT: usize = 16;
/// How many of the largest arrays keep the item offsets found while the
/// document was indexed: the two that a stored result's overview and first
/// page plan split (the largest, and the one inside it when it is one item
/// around it); the others' are dropped, as they would be made again only if
/// read.
const ITEMS_SPLIT_WHILE_INDEXING: usize = 2;

/// The few values used last, each with the bytes it holds; the least
/// recently used is dropped first.
#[derive(Debug)]
pub(crate) struct Recent<K, V: ?Sized> {
    /// Most recently used last.
    entries: Vec<(K, Arc<V>, usize)>,
    capacity: usize,
}

impl<K: PartialEq, V: ?Sized> Recent<K, V> {
    fn new(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// Every entry, the most recently used last.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &Arc<V>)> {
        self.entries.iter().map(|(k, v, _)| (k, v))
    }

    /// The value of `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<Arc<V>> {
        let at = self.entries.iter().position(|(k, _, _)| k == key)?;
        let entry = self.entries.remove(at);
        let value = entry.1.clone();
        self.entries.push(entry);
        Some(value)
    }

    /// Keeps `value` (holding `bytes`) under `key`; returns the bytes held
    /// now less the bytes held before (entries dropped to make room, or
    /// the one replaced).
    pub(crate) fn put(&mut self, key: K, value: Arc<V>, bytes: usize) -> isize {
        let mut freed = 0;
        if let Some(at) = self.entries.iter().position(|(k, _, _)| *k == key) {
            freed += self.entries.remove(at).2;
        }
        while self.entries.len() >= self.capacity.max(1) {
            freed += self.entries.remove(0).2;
        }
        self.entries.push((key, value, bytes));
        bytes as isize - freed as isize
    }
}

/// The children of one container: where each item of an array, or each
/// member (`"key":value`) of an object, starts. All of them, or (served
/// from a window of the document) those of one page.
#[derive(Debug)]
pub struct Items {
    /// The container's bytes, `[` to `]` (or `{` to `}`).
    pub range: Range<usize>,
    /// Where each child from `first` on starts: every child's, or those of
    /// children `first..b` and then where child `b` starts (if there is one).
    starts: Vec<u64>,
    /// The first child `starts` holds.
    first: usize,
    /// How many children the container has.
    total: usize,
}

impl Items {
    /// Every child of the container at `range`, from where each starts.
    pub fn new(range: Range<usize>, starts: Vec<u64>) -> Self {
        Self {
            range,
            total: starts.len(),
            starts,
            first: 0,
        }
    }

    /// Children `first..` of the `total` of the container at `range`, from
    /// where each starts (those of a page, and then where the next child
    /// starts, if there is one): only they may be asked for.
    pub fn part(range: Range<usize>, first: usize, total: usize, starts: Vec<u64>) -> Self {
        Self {
            range,
            starts,
            first,
            total,
        }
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.total
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Memory held, approximately.
    pub fn memory(&self) -> usize {
        self.starts.capacity() * 8 + std::mem::size_of::<Self>()
    }

    /// The bytes of child `i` (without the comma that follows it).
    pub fn item(&self, i: usize) -> Range<usize> {
        let at = i - self.first;
        let start = self.starts[at] as usize;
        let end = self
            .starts
            .get(at + 1)
            .map_or(self.range.end - 1, |&next| next as usize - 1);
        start..end
    }

    /// The bytes of children `a..b` and the commas between them.
    pub fn span(&self, a: usize, b: usize) -> Range<usize> {
        self.item(a).start..self.item(b - 1).end
    }
}

/// A document's index as a store keeps it ([`Document::saved_index`]):
/// its characters and its largest arrays (pointer, start, end, items).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedIndex {
    /// Characters of the text.
    pub chars: u64,
    /// The largest arrays: pointer, byte range, items.
    pub arrays: Vec<(String, usize, usize, usize)>,
}

impl SavedIndex {
    /// Whether it can be the index of `text`: every array within it, where
    /// an array starts and ends.
    fn fits(&self, text: &str) -> bool {
        let bytes = text.as_bytes();
        self.chars <= text.len() as u64
            && self.arrays.iter().all(|(_, start, end, _)| {
                start < end
                    && *end <= bytes.len()
                    && bytes[*start] == b'['
                    && bytes[*end - 1] == b']'
            })
    }
}

/// The index of a JSON document: made by scans that assume valid JSON and
/// never fail on other text (see [`scan`]).
struct JsonIndex {
    /// The text without whitespace outside strings, if it had any.
    compact: Option<String>,
    /// The largest arrays of the compact text.
    arrays: Vec<ArraySpan>,
    /// Where each item of the first [`ITEMS_SPLIT_WHILE_INDEXING`] of them
    /// starts, in the same order.
    item_starts: Vec<Vec<u64>>,
    /// The compact text's characters.
    chars: u64,
}

impl JsonIndex {
    /// The index of `text`, taken to be valid JSON (a large text, while it
    /// is checked on another thread; a document read back from a store; one
    /// `serde_json` reads though the check refused it).
    fn of(text: &str) -> Self {
        Self::from_scan(text, scan::minified_and_indexed(text, ARRAYS_KEPT))
    }

    /// The index of `text` if it is valid JSON, made while its grammar is
    /// checked, in one pass; `None` if it is not.
    fn checked(text: &str) -> Option<Self> {
        scan::checked_minified_and_indexed(text, ARRAYS_KEPT)
            .map(|scan| Self::from_scan(text, scan))
    }

    fn from_scan(text: &str, (compact, indexed): scan::Indexed<'_>) -> Self {
        let (arrays, mut item_starts): (Vec<_>, Vec<_>) = indexed.into_iter().unzip();
        item_starts.truncate(ITEMS_SPLIT_WHILE_INDEXING);
        let compact = match compact {
            Cow::Borrowed(_) => None,
            Cow::Owned(mut compact) => {
                // Minifying allocated for the input's size: give back the rest.
                compact.shrink_to_fit();
                Some(compact)
            }
        };
        let text = compact.as_deref().unwrap_or(text);
        Self {
            arrays,
            item_starts,
            chars: count_chars(text) as u64,
            compact,
        }
    }
}

/// How large a JSON text must be for its check and its index to be made
/// on two threads at once ([`Document::checked_json`]): the size from
/// which sluice works on a result off its async threads (below it, a
/// thread costs more than it saves).
const PARALLEL_BYTES: usize = crate::limits::BLOCKING_BYTES;

/// Why a text the one-pass check refused is not JSON, in serde_json's
/// words; `None` should serde_json read it after all (then it is indexed
/// as JSON).
fn not_json(text: &str) -> Option<NotJson> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .err()
        .map(|e| NotJson(e.to_string()))
}

/// Why a JSON text could not be stored as JSON.
#[derive(Debug, thiserror::Error)]
#[error("not JSON: {0}")]
pub struct NotJson(String);

impl Document {
    /// A JSON document from JSON text (any whitespace); an error if the
    /// text is not one valid JSON value.
    pub fn json(text: String) -> Result<Self, NotJson> {
        Self::json_kind(text, Kind::Json)
    }

    /// A JSON document if `text` is one JSON object or array, else a text
    /// document.
    pub fn json_or_text(text: String) -> Self {
        let first = text.trim_start().as_bytes().first().copied();
        if !matches!(first, Some(b'{' | b'[')) {
            return Self::text(text);
        }
        match Self::checked_json(text, Kind::Json) {
            Ok(doc) => doc,
            Err((text, _)) => Self::text(text),
        }
    }

    /// A document of content blocks, from their JSON array.
    pub fn blocks(json_array: String) -> Result<Self, NotJson> {
        Self::json_kind(json_array, Kind::Blocks)
    }

    fn json_kind(text: String, kind: Kind) -> Result<Self, NotJson> {
        Self::checked_json(text, kind).map_err(|(_, e)| e)
    }

    /// A JSON document of `text` if it is valid JSON, else `text` back
    /// with why not.
    ///
    /// The check of its grammar ([`crate::check`]) makes the index as it
    /// reads ([`JsonIndex::checked`]): one pass where a check and then the
    /// index's scan read it twice (a quarter fewer instructions on a
    /// document of records). A large text's check and index are made
    /// apart, at once on two threads, all the same: the one pass is longer
    /// than either, and the client waits for the longest (a megabyte of
    /// records: 16.4 M instructions checked and indexed at once, 12.7 M
    /// indexed while 11.5 M are checked on the other thread).
    fn checked_json(text: String, kind: Kind) -> Result<Self, (String, NotJson)> {
        if text.len() <= PARALLEL_BYTES {
            if let Some(index) = JsonIndex::checked(&text) {
                return Ok(Self::indexed(text, kind, index));
            }
            return match not_json(&text) {
                None => Ok(Self::valid_json(text, kind)),
                Some(e) => Err((text, e)),
            };
        }
        let (index, valid) = crate::parallel::both(
            true,
            || JsonIndex::of(&text),
            || crate::check::is_json(&text),
        );
        match if valid { None } else { not_json(&text) } {
            None => Ok(Self::indexed(text, kind, index)),
            Some(e) => Err((text, e)),
        }
    }

    /// A document read back from a store: `text` is what
    /// [`Document::text_str`] gave when it was stored (JSON already
    /// validated and minified), with the index [`Document::saved_index`]
    /// gave then: taken as it is where it fits the text, made again where
    /// it does not (or is `None`).
    pub fn restored(kind: Kind, text: String, saved: Option<SavedIndex>) -> Self {
        let mut doc = match (kind, saved) {
            (Kind::Text, _) => Self::text(text),
            (Kind::Json | Kind::Blocks, Some(saved)) if saved.fits(&text) => Self {
                kind,
                chars: saved.chars,
                arrays: saved
                    .arrays
                    .into_iter()
                    .map(|(pointer, start, end, items)| ArraySpan {
                        pointer,
                        range: start..end,
                        items,
                    })
                    .collect(),
                text,
                line_starts: Vec::new(),
                items: Mutex::new(Recent::new(ITEMS_KEPT)),
                plans: Mutex::new(Recent::new(PLANS_KEPT)),
                index_bytes: AtomicUsize::new(0),
                per_token: OnceLock::new(),
            },
            (Kind::Json | Kind::Blocks, _) => Self::valid_json(text, kind),
        };
        doc.kind = kind;
        doc
    }

    /// What a store keeps of this document's index beside its text, so
    /// that reading it back skips the scans that made it.
    pub fn saved_index(&self) -> SavedIndex {
        SavedIndex {
            chars: self.chars,
            arrays: self
                .arrays
                .iter()
                .map(|a| (a.pointer.clone(), a.range.start, a.range.end, a.items))
                .collect(),
        }
    }

    /// A JSON document of `text`, which is known to be valid JSON.
    fn valid_json(text: String, kind: Kind) -> Self {
        let index = JsonIndex::of(&text);
        Self::indexed(text, kind, index)
    }

    /// A JSON document of valid JSON `text` and its index. The largest
    /// arrays' items, split while indexing, are kept as if read already
    /// (the smallest first, so the largest are the last dropped).
    fn indexed(text: String, kind: Kind, index: JsonIndex) -> Self {
        let doc = Self {
            kind,
            chars: index.chars,
            text: index.compact.unwrap_or(text),
            arrays: index.arrays,
            line_starts: Vec::new(),
            items: Mutex::new(Recent::new(ITEMS_KEPT)),
            plans: Mutex::new(Recent::new(PLANS_KEPT)),
            index_bytes: AtomicUsize::new(0),
            per_token: OnceLock::new(),
        };
        for (span, starts) in doc.arrays.iter().zip(index.item_starts).rev() {
            doc.keep_items(Items::new(span.range.clone(), starts));
        }
        doc
    }

    /// A text document.
    pub fn text(text: String) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            memchr::memchr_iter(b'\n', text.as_bytes())
                .map(|i| i as u64 + 1)
                .filter(|&i| (i as usize) < text.len()),
        );
        Self {
            kind: Kind::Text,
            chars: count_chars(&text) as u64,
            text,
            arrays: Vec::new(),
            line_starts,
            items: Mutex::new(Recent::new(ITEMS_KEPT)),
            plans: Mutex::new(Recent::new(PLANS_KEPT)),
            index_bytes: AtomicUsize::new(0),
            per_token: OnceLock::new(),
        }
    }

    /// What it holds.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Its text: compact JSON, or the text as received.
    pub fn text_str(&self) -> &str {
        &self.text
    }

    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.text.len()
    }

    /// Bytes per o200k token of its whole text, measured on samples of
    /// [`TOKEN_SAMPLE_BYTES`] (see [`bytes_per_token`]) once: the plan of
    /// its pages and the estimate of its tokens both need it, and sampling
    /// tokenizes up to three samples.
    pub fn bytes_per_token(&self) -> f32 {
        *self
            .per_token
            .get_or_init(|| bytes_per_token(&self.text, TOKEN_SAMPLE_BYTES))
    }

    /// The document, told its bytes per token by one who measured its text
    /// before it was made (the same text: [`Document::bytes_per_token`]
    /// would find the same).
    pub fn knowing_bytes_per_token(self, per_token: f32) -> Self {
        let _ = self.per_token.set(per_token);
        self
    }

    /// Its size in characters.
    pub fn chars(&self) -> u64 {
        self.chars
    }

    /// Text: where each line starts.
    pub fn line_starts(&self) -> &[u64] {
        &self.line_starts
    }

    /// JSON: its largest arrays, largest first.
    pub fn arrays(&self) -> &[ArraySpan] {
        &self.arrays
    }

    /// JSON: the arrays worth naming to a model, largest first: those not
    /// inside another named array, and any holding a tenth of the document.
    pub fn notable_arrays(&self) -> Vec<&ArraySpan> {
        let mut named: Vec<&ArraySpan> = Vec::new();
        for array in &self.arrays {
            let inside = named.iter().any(|n| {
                array.pointer.starts_with(&n.pointer)
                    && array.pointer[n.pointer.len()..].starts_with('/')
            });
            if !inside || array.bytes() * 10 >= self.text.len() {
                named.push(array);
            }
        }
        named
    }

    /// JSON: the array paged when no path is given: the root array, else the
    /// largest one; `None` when there is no array. A root array of one item
    /// (`[[…]]`, `[{"rows": […]}]`) gives way to the largest array inside it.
    pub fn default_array(&self) -> Option<&ArraySpan> {
        self.arrays
            .iter()
            .find(|a| a.pointer.is_empty() && a.items > 1)
            .or_else(|| {
                self.arrays
                    .iter()
                    .find(|a| !a.pointer.is_empty())
                    .or_else(|| self.arrays.first())
            })
    }

    /// Memory held, approximately: the text, its indexes, and the item
    /// offsets and page plans kept (which grow as it is read, within
    /// [`ITEMS_KEPT`] and [`PLANS_KEPT`] entries).
    pub fn memory(&self) -> usize {
        self.text.capacity()
            + self.line_starts.capacity() * 8
            + self
                .arrays
                .iter()
                .map(|a| a.pointer.capacity() + std::mem::size_of::<ArraySpan>())
                .sum::<usize>()
            + self.index_bytes.load(Ordering::Relaxed)
            + 256
    }

    /// Counts `delta` more (or fewer) bytes of kept indexes.
    pub(crate) fn count_index_bytes(&self, delta: isize) {
        if delta >= 0 {
            self.index_bytes
                .fetch_add(delta.unsigned_abs(), Ordering::Relaxed);
        } else {
            self.index_bytes
                .fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// The bytes of the value at `pointer`. Values the index knows the end
    /// of (the root, the largest arrays) are skipped without reading them.
    pub fn resolve(&self, pointer: &str) -> Result<Range<usize>, PointerError> {
        scan::resolve_knowing(&self.text, pointer, &|start| self.known_end(start))
    }

    /// Where each member of the object at `range` starts (see
    /// [`scan::member_starts`]), skipping the values the index knows the
    /// end of: an object that holds the bulk in one array (the usual
    /// `{"items":[…],"total":…}`) has its members found without reading
    /// that array.
    pub fn member_starts(&self, range: Range<usize>) -> Vec<u64> {
        scan::member_starts_knowing(&self.text, range, &|start| self.known_end(start))
    }

    /// Where the value starting at byte `start` ends, when the index knows
    /// without reading it: a JSON document's text is its value, compact,
    /// so the root ends where the text does; and the largest arrays' spans
    /// were found when it was indexed.
    fn known_end(&self, start: usize) -> Option<usize> {
        if self.kind == Kind::Text {
            return None;
        }
        if start == 0 {
            return Some(self.text.len());
        }
        self.arrays
            .iter()
            .find(|a| a.range.start == start)
            .map(|a| a.range.end)
    }

    /// The items of the array at `pointer` (indexed on first use), or
    /// `Ok(None)` when the value there is not an array.
    pub fn items(&self, pointer: &str) -> Result<Option<Arc<Items>>, PointerError> {
        let range = match self.arrays.iter().find(|a| a.pointer == pointer) {
            Some(a) => a.range.clone(),
            None => self.resolve(pointer)?,
        };
        if self.text.as_bytes().get(range.start) != Some(&b'[') {
            return Ok(None);
        }
        if let Some(items) = self.cached_items(&range) {
            return Ok(Some(items));
        }
        Ok(Some(self.keep_items(Items::new(
            range.clone(),
            scan::item_starts(&self.text, range),
        ))))
    }

    /// Keeps `items` among those read lately, counted in its memory.
    fn keep_items(&self, items: Items) -> Arc<Items> {
        let items = Arc::new(items);
        let delta = self
            .lock_items()
            .put(items.range.start, items.clone(), items.memory());
        self.count_index_bytes(delta);
        items
    }

    /// The items of the array at `range` if they were indexed already.
    pub fn cached_items(&self, range: &Range<usize>) -> Option<Arc<Items>> {
        self.lock_items()
            .get(&range.start)
            .filter(|items| items.range == *range)
    }

    fn lock_items(&self) -> std::sync::MutexGuard<'_, Recent<usize, Items>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;

    #[test]
    fn a_large_text_is_checked_and_indexed_at_once_and_one_that_fails_stays_text() {
        let items: Vec<serde_json::Value> = (0..6000)
            .map(|i| serde_json::json!({"id": i, "name": format!("item {i}")}))
            .collect();
        let pretty = serde_json::to_string_pretty(&serde_json::json!({ "items": items })).unwrap();
        assert!(pretty.len() > PARALLEL_BYTES);
        let compact = scan::minify(&pretty).into_owned();
        let doc = Document::json_or_text(pretty.clone());
        assert_eq!(doc.kind(), Kind::Json);
        assert_eq!(doc.text_str(), compact);
        assert_eq!(doc.arrays, scan::largest_arrays(&compact, ARRAYS_KEPT));
        assert_eq!(doc.chars(), count_chars(&compact) as u64);
        // The same as a small text gets, checked and then indexed.
        let small = Document::valid_json(pretty.clone(), Kind::Json);
        assert_eq!(
            (small.text_str(), &small.arrays),
            (doc.text_str(), &doc.arrays)
        );
        // Cut short: not JSON, though its index was made meanwhile.
        let broken = pretty[..pretty.len() - 1].to_owned();
        let text = Document::json_or_text(broken.clone());
        assert_eq!(text.kind(), Kind::Text);
        assert_eq!(text.text_str(), broken);
        assert!(Document::json(broken.clone()).is_err());
        assert!(Document::blocks(broken).is_err());
    }

    /// The index of a large text is made before its check says whether it
    /// is JSON at all (and a text read back from a store is taken to be
    /// JSON): it must read any text without failing.
    #[test]
    fn the_index_reads_every_prefix_of_json_without_failing() {
        let json = r#"{"a": [1, {"b\\\"": ["x", [], {}]}, "é\u00e9"], "c": {"d": [[2, 3], "]"]}}"#;
        for end in (0..=json.len()).filter(|&end| json.is_char_boundary(end)) {
            let index = JsonIndex::of(&json[..end]);
            let text = index.compact.as_deref().unwrap_or(&json[..end]);
            assert!(index.arrays.iter().all(|a| a.range.end <= text.len()));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        #[test]
        fn the_index_reads_any_text_without_failing(
            text in "[\\[\\]{}\":,\\\\ a1é]{0,120}|\\PC{0,120}"
        ) {
            let index = JsonIndex::of(&text);
            let indexed = index.compact.as_deref().unwrap_or(&text);
            proptest::prop_assert!(index.arrays.iter().all(|a| a.range.end <= indexed.len()));
            // What is not JSON is kept as the text it is.
            if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() {
                let doc = Document::json_or_text(text.clone());
                proptest::prop_assert_eq!(doc.kind(), Kind::Text);
                proptest::prop_assert_eq!(doc.text_str(), text.as_str());
            }
        }
    }

    #[test]
    fn json_is_minified_and_its_arrays_indexed() {
        let doc =
            Document::json("{ \"n\": 2, \"rows\": [ {\"a\": 1}, {\"a\": 2} ] }".into()).unwrap();
        assert_eq!(doc.text_str(), r#"{"n":2,"rows":[{"a":1},{"a":2}]}"#);
        assert_eq!(doc.default_array().unwrap().pointer, "/rows");
        // The root array, unless it is one item around a larger array.
        let root = |text: &str| Document::json(text.into()).unwrap();
        assert_eq!(root("[[1,2,3],[4]]").default_array().unwrap().pointer, "");
        assert_eq!(root("[[1,2,3]]").default_array().unwrap().pointer, "/0");
        assert_eq!(
            root(r#"[{"r":[1,2]}]"#).default_array().unwrap().pointer,
            "/0/r"
        );
        assert_eq!(root(r#"[{"r":1}]"#).default_array().unwrap().pointer, "");
        let items = doc.items("/rows").unwrap().unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(&doc.text_str()[items.item(1)], r#"{"a":2}"#);
        assert_eq!(&doc.text_str()[items.span(0, 2)], r#"{"a":1},{"a":2}"#);
        assert!(doc.items("/n").unwrap().is_none());
        assert!(doc.items("/zz").is_err());
    }

    #[test]
    fn values_the_index_knows_are_skipped_not_read() {
        let text =
            r#"{"total":3,"items":[{"a":[1,2]},{"a":[3]},{"a":[]}],"next":{"x":[4,5,6,7,8,9,10]}}"#;
        let doc = Document::json(text.into()).unwrap();
        for pointer in [
            "",
            "/items",
            "/items/1",
            "/items/2/a",
            "/next",
            "/next/x",
            "/next/x/6",
        ] {
            assert_eq!(
                doc.resolve(pointer),
                scan::resolve(text, pointer),
                "{pointer}"
            );
        }
        for pointer in ["", "/items/0", "/next"] {
            let range = doc.resolve(pointer).unwrap();
            assert_eq!(
                doc.member_starts(range.clone()),
                scan::member_starts(text, range),
                "{pointer}"
            );
        }
        assert!(doc.resolve("/none").is_err());
        // Read back with an index that says /a ends one byte early, at the
        // inner array's `]`: what the index says is what is used.
        let text = r#"{"a":[1,[2]],"b":3}"#;
        let saved = SavedIndex {
            chars: text.len() as u64,
            arrays: vec![("/a".into(), 5, 11, 2)],
        };
        let doc = Document::restored(Kind::Json, text.into(), Some(saved));
        assert_eq!(doc.resolve("/a"), Ok(5..11));
        assert_eq!(scan::resolve(text, "/a"), Ok(5..12));
    }

    #[test]
    fn invalid_json_is_refused() {
        assert_eq!(
            Document::json_or_text("{\"a\": [1, 2".into()).kind(),
            Kind::Text
        );
        assert_eq!(
            Document::json_or_text("\"a string\"".into()).kind(),
            Kind::Text
        );
        assert_eq!(Document::json_or_text(" [1]".into()).kind(), Kind::Json);
        assert!(Document::json("{\"a\": [1, 2".into()).is_err());
        assert!(Document::json("".into()).is_err());
    }

    #[test]
    fn deep_nesting_is_stored_summarised_and_planned() {
        // What an upstream returning fetched JSON may send: `[[[…]]]`, 200 KB
        // and 1 MB of it. Ingest (validation, minifying, the largest
        // arrays, the overview, the first page plan) must be linear: this
        // took over a minute for 200 KB when pointers were rebuilt per array.
        for depth in [100_000, 500_000] {
            let text = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let doc = Document::json_or_text(text);
            assert_eq!(doc.kind(), Kind::Json);
            assert_eq!(doc.arrays().len(), ARRAYS_KEPT);
            assert!(
                doc.arrays()
                    .iter()
                    .all(|a| a.pointer.len() <= 2 * scan::NAMED_DEPTH)
            );
            let overview = crate::summary::Overview::of(&doc);
            assert!(!overview.shape(0).is_empty());
            let plan = doc.plan(None, Budget::default()).unwrap();
            assert!(plan.pages() >= 1);
            // Reading a page that deep resolves in one pass too.
            let deep = "/0".repeat(depth - 1);
            assert_eq!(doc.items(&deep).unwrap().unwrap().len(), 1);
        }
    }

    #[test]
    fn each_array_has_one_index_and_few_are_kept() {
        let rows: Vec<String> = (0..100).map(|i| format!("[{i},{i},{i}]")).collect();
        let doc = Document::json(format!("[{}]", rows.join(","))).unwrap();
        let bare = doc.memory();
        // The two largest arrays' items were split while indexing: kept and
        // counted from the start.
        let counted = |doc: &Document| {
            doc.lock_items().entries.iter().map(|e| e.2).sum::<usize>()
                + doc.lock_plans().entries.iter().map(|e| e.2).sum::<usize>()
        };
        let split = counted(&doc);
        assert_eq!(doc.lock_items().entries.len(), ITEMS_SPLIT_WHILE_INDEXING);
        assert!(doc.cached_items(&doc.resolve("").unwrap()).is_some());
        assert!(split > 100 * 8, "{split} bytes for the root's 100 items");
        // One array, spelled every way a pointer can: one spelling works.
        assert!(doc.items("/7").unwrap().is_some());
        for alias in ["/+7", "/07", "/ 7", "/007", "/7 "] {
            assert!(
                matches!(doc.items(alias), Err(PointerError::NotCanonical { .. })),
                "{alias}"
            );
        }
        let one = doc.memory() - bare;
        assert!(one > 0, "the index is counted");
        doc.items("/7").unwrap();
        assert_eq!(doc.memory() - bare, one, "and made once");
        // Many arrays and budgets: a few indexes and plans are kept.
        for i in 0..100 {
            doc.items(&format!("/{i}")).unwrap();
            let budget = Budget {
                max_tokens: 1000 + i,
                ..Budget::default()
            };
            doc.plan(Some(&format!("/{i}")), budget).unwrap();
        }
        let kept = doc.memory() - bare;
        assert_eq!(doc.lock_items().entries.len(), ITEMS_KEPT);
        assert_eq!(doc.lock_plans().entries.len(), PLANS_KEPT);
        assert!(
            kept < 40 * one + PLANS_KEPT * 4096,
            "{kept} bytes for {one} per index"
        );
        assert_eq!(
            kept + split,
            counted(&doc),
            "what is kept is what is counted"
        );
    }

    #[test]
    fn a_document_read_back_keeps_its_saved_index_only_where_it_fits() {
        let doc = Document::json(r#"{"a": [1, 2, 3], "b": {"c": [[4], [5, 6]]}, "é": "x"}"#.into())
            .unwrap();
        let saved = doc.saved_index();
        let text = doc.text_str().to_owned();
        let again = Document::restored(Kind::Json, text.clone(), Some(saved.clone()));
        assert_eq!(again.arrays(), doc.arrays());
        assert_eq!(again.chars(), doc.chars());
        assert_eq!(again.kind(), Kind::Json);
        // An index that does not fit the text is made again.
        let mut wrong = saved.clone();
        wrong.arrays[1].1 += 1; // `/a` from its first item, not its `[`
        let made = Document::restored(Kind::Blocks, text.clone(), Some(wrong));
        assert_eq!(made.arrays(), doc.arrays());
        assert_eq!(made.kind(), Kind::Blocks);
        let made = Document::restored(Kind::Json, text, None);
        assert_eq!(made.arrays(), doc.arrays());
        let lines = Document::restored(Kind::Text, "a\nb".into(), Some(saved));
        assert_eq!(lines.line_starts(), [0, 2]);
    }

    #[test]
    fn text_lines_are_indexed() {
        let doc = Document::text("a\nbb\n\nccc\n".into());
        assert_eq!(doc.line_starts(), [0, 2, 5, 6]);
        let doc = Document::text("no newline".into());
        assert_eq!(doc.line_starts(), [0]);
        assert_eq!(doc.chars(), 10);
    }
}
