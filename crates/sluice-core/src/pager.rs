//! Pages: cutting a stored document into answers that fit a budget,
//! losslessly, as valid JSON, and in time proportional to the page.
//!
//! A JSON document is paged by walking it from the value asked for (the
//! root by default). A container that fits a page is one page. One that
//! does not is paged by its children: an array by whole items
//! (`form: "items"`), an object by whole members (`form: "members"`). A
//! child too large for a page is descended into in turn, so every page is
//! valid JSON on its own. An object too large whose bulk is one member (a
//! directory node and its `children`, a response and its `rows`) is not
//! paged by members: its small members ride along, as JSON, in the header
//! of the first page of that member (an [`Around`]), and the member is
//! paged. Only a single scalar larger than a page (a 1 MB string) is cut into
//! text slices of its compact JSON; so is, as a last resort, a value nested
//! deeper than [`MAX_DESCENT`] levels of values too large for a page.
//!
//! A text is paged by whole lines; a line too long is sliced.
//!
//! A [`Plan`] lays these pages out once per path and budget from byte sizes
//! (a child that might not fit by its bytes is tokenized once, so every
//! planned child fits alone). Serving a page copies only that page and
//! counts its tokens exactly; if the plan's estimate for a group of
//! children was too generous, the page is shortened and its remainder
//! becomes a continuation reached by the next cursor. Following cursors
//! from the first page therefore visits every value once, in order.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use crate::budget::{
    Budget, TOKEN_SAMPLE_BYTES, bytes_per_token, count_chars, floor_boundary, tokens_within,
};
use crate::document::{Document, Items, Kind, PlanKey, Recent};
use crate::scan::{self, PointerError};

mod saved;
pub use saved::{SavedPlan, Start, Window, WindowError, plan_key, save, saved_plans};

/// How many levels of values too large for a page are descended into; a
/// value nested deeper is sliced as text. Each level rescans its value,
/// so this bounds planning to this many passes over the document.
pub const MAX_DESCENT: usize = 64;

/// A place in a plan: a planned page (`seg`), and where in it a
/// continuation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    /// The planned page (0-based).
    pub seg: u64,
    /// The child (item, member) or line index.
    pub unit: u64,
    /// Byte offset inside a sliced value or line.
    pub byte: u64,
    /// Character offset: into the whole text for lines, into the value for
    /// a slice.
    pub char: u64,
}

/// What serving a page reads of a document: the whole [`Document`], or the
/// [`Window`] of it that one page spans (read back from a store's frames).
/// Offsets are the whole document's.
pub(crate) trait Source {
    /// Bytes `range` of the text; empty where the source does not hold
    /// them (a window asked outside its page, which serving never does).
    fn text(&self, range: Range<usize>) -> &str;
    /// Whether `at` is a character boundary (`false` where the source does
    /// not hold the bytes around it).
    fn is_char_boundary(&self, at: usize) -> bool;
    /// Bytes of the whole text.
    fn bytes(&self) -> usize;
    /// Characters of the whole text.
    fn chars(&self) -> u64;
    /// Text: where line `line` starts (`None` past the last line).
    fn line_start(&self, line: u64) -> Option<u64>;
    /// Text: how many lines.
    fn lines(&self) -> u64;
    /// The children of `container` (those of the page, for a window).
    fn children(&self, container: &Container) -> Arc<Items>;
}

impl Source for Document {
    fn text(&self, range: Range<usize>) -> &str {
        &self.text_str()[range]
    }

    fn is_char_boundary(&self, at: usize) -> bool {
        self.text_str().is_char_boundary(at)
    }

    fn bytes(&self) -> usize {
        Document::bytes(self)
    }

    fn chars(&self) -> u64 {
        Document::chars(self)
    }

    fn line_start(&self, line: u64) -> Option<u64> {
        usize::try_from(line)
            .ok()
            .and_then(|i| self.line_starts().get(i).copied())
    }

    fn lines(&self) -> u64 {
        self.line_starts().len() as u64
    }

    fn children(&self, container: &Container) -> Arc<Items> {
        container.children.clone().unwrap_or_else(|| {
            // A plan read back from a store, served from the whole
            // document after all.
            let range = container.range.clone();
            let text = self.text_str();
            Arc::new(Items::new(
                range.clone(),
                if container.object {
                    self.member_starts(range)
                } else {
                    scan::item_starts(text, range)
                },
            ))
        })
    }
}

/// How a page's data is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A JSON array: items `start..end` of the array at `path`.
    Items,
    /// A JSON object: members `start..end` (in document order) of the
    /// object at `path`.
    Members,
    /// The exact substring `start..end` (characters) of a text, or of the
    /// compact JSON of the value at `path`.
    Text,
}

impl Form {
    /// `items`, `members` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Items => "items",
            Form::Members => "members",
            Form::Text => "text",
        }
    }
}

/// Why a page cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PageError {
    /// The page number is past the plan.
    #[error("page {page} does not exist: there {}", if *pages == 1 { "is 1 page".to_owned() } else { format!("are {pages} pages (1 to {pages})") })]
    OutOfRange {
        /// Asked for.
        page: u64,
        /// How many exist.
        pages: usize,
    },
    /// The path does not lead to a value.
    #[error(transparent)]
    Pointer(#[from] PointerError),
    /// The path leads to a scalar small enough to be read with its parent.
    #[error(
        "`{}` is {what} that fits in a page: there is nothing to page there; page the value around it (`\"path\":{:?}`) or read it with jq{}",
        crate::format::quoted_cut(.pointer),
        crate::format::quoted_cut(.parent),
        list_arrays(arrays)
    )]
    Scalar {
        /// The path.
        pointer: String,
        /// What is there (`a string`, `a number`…).
        what: &'static str,
        /// The pointer of the value that holds it.
        parent: String,
        /// The document's largest arrays (pointer, items).
        arrays: Vec<(String, usize)>,
    },
    /// A text document was given a path.
    #[error("this stored result is text: it has no `path`; page it with `page` or the cursor")]
    PathInText,
}

fn list_arrays(arrays: &[(String, usize)]) -> String {
    if arrays.is_empty() {
        return String::new();
    }
    let list: Vec<String> = arrays
        .iter()
        .take(6)
        .map(|(p, n)| {
            format!(
                "`{}` ({})",
                if p.is_empty() { "\"\"" } else { p },
                crate::format::counted(*n as u64, "item", "items")
            )
        })
        .collect();
    format!(". Arrays: {}", list.join(", "))
}

/// An array or object whose children are paged.
#[derive(Debug)]
pub(crate) struct Container {
    /// Its JSON Pointer.
    pub(crate) pointer: String,
    /// An object (members), else an array (items).
    pub(crate) object: bool,
    /// Its bytes, `[` to `]` or `{` to `}`.
    pub(crate) range: Range<usize>,
    /// How many children it has.
    pub(crate) total: usize,
    /// Where its children start: `None` in a plan read back from a store,
    /// whose pages are served from windows that find them.
    pub(crate) children: Option<Arc<Items>>,
}

/// The members of an object around the member being paged: shown, as JSON,
/// with the first page of that member, so that they are visited too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Around {
    /// The object's JSON Pointer.
    pub pointer: String,
    /// The key of the member paged.
    pub key: String,
    /// Its position among the object's members.
    pub index: usize,
    /// The object's other members, in order, as a compact JSON object.
    pub members: String,
}

/// The members of an object other than one, by their bytes.
#[derive(Debug, Clone)]
struct AroundSpan {
    pointer: String,
    key: String,
    index: usize,
    before: Range<usize>,
    after: Range<usize>,
}

/// What naming a page's path takes beyond what the caller's page budget
/// keeps for the path asked: the header and `_meta` each repeat it.
fn path_cost(pointer: &str) -> usize {
    2 * pointer.len() + 8
}

/// What one `Around` line takes in a page's header, in bytes at most.
fn around_cost(pointer: &str, key: &str, members_bytes: usize) -> usize {
    // In the header: "\n{pointer} also holds: {members} (its {key:?} is
    // paged here)", with room for the key's escapes; in `_meta`:
    // {"path":…,"key":…,"members":…}.
    2 * (pointer.len() + 2 * key.len() + members_bytes) + 80
}

impl Around {
    /// What its line takes in a page's header, in bytes at most.
    pub fn cost(&self) -> usize {
        around_cost(&self.pointer, &self.key, self.members.len())
    }
}

/// What `spans` take in a page's header.
fn spans_cost(spans: &[AroundSpan]) -> usize {
    spans.iter().map(AroundSpan::len).sum()
}

impl AroundSpan {
    fn len(&self) -> usize {
        around_cost(
            &self.pointer,
            &self.key,
            self.before.len() + self.after.len() + 3,
        )
    }

    fn render(&self, src: &dyn Source) -> Around {
        let mut members = String::with_capacity(self.before.len() + self.after.len() + 3);
        members.push('{');
        members.push_str(src.text(self.before.clone()));
        if !self.before.is_empty() && !self.after.is_empty() {
            members.push(',');
        }
        members.push_str(src.text(self.after.clone()));
        members.push('}');
        Around {
            pointer: self.pointer.clone(),
            key: self.key.clone(),
            index: self.index,
            members,
        }
    }
}

/// What one planned page covers.
#[derive(Debug, Clone)]
enum Segment {
    /// Children `a..b` of a container, whole.
    Children {
        container: Arc<Container>,
        a: u64,
        b: u64,
    },
    /// Bytes `from..to` of the compact JSON of one value too large for a
    /// page (relative to `value`), starting at character `char_from`.
    Slice {
        pointer: String,
        value: Range<usize>,
        from: u64,
        to: u64,
        char_from: u64,
        /// Characters in the whole value.
        chars: u64,
        /// Sliced although a container: nested too deep.
        deep: bool,
    },
    /// Lines `a..b` of a text, starting at character `char_from`.
    Lines { a: u64, b: u64, char_from: u64 },
    /// Bytes `from..to` of line `line` (one line too long for a page),
    /// which is at `bytes`.
    LineSlice {
        line: u64,
        from: u64,
        to: u64,
        char_from: u64,
        bytes: Range<usize>,
    },
}

/// One planned page: what it covers, and the objects around it whose other
/// members it shows (only on the first page inside them).
#[derive(Debug, Clone)]
struct Planned {
    segment: Segment,
    around: Vec<AroundSpan>,
    /// The bytes of the document its segment spans (all that serving it
    /// reads, but for `around`).
    extent: Range<usize>,
}

/// The pages of one path of a document for one budget.
#[derive(Debug)]
pub struct Plan {
    /// The path paged: `None` for text.
    path: Option<String>,
    pages: Vec<Planned>,
    /// The byte size a page aims at.
    page_bytes: usize,
    /// Bytes that surely fit a page whatever they hold (a token is at
    /// least a byte); larger children are tokenized before they are
    /// planned as whole.
    sure_bytes: usize,
    /// The most lines in one page (line-limited clients).
    max_lines: usize,
    /// Bytes planning may still tokenize (see [`TOKENIZED_WHEN_PLANNING`]).
    tokenize_left: usize,
    /// The budget of a page's data (its `Around` included).
    budget: Budget,
}

/// The most bytes planning tokenizes to decide whether a child fits a page
/// whole (≈ 0.2 s); past it, a child that only counting could tell is
/// descended into, which is always valid, just in smaller pages.
const TOKENIZED_WHEN_PLANNING: usize = 4 << 20;

impl Plan {
    /// Plans the pages of `path` (`None`: the whole document) in `doc` for
    /// data within `budget` (the caller's budget less what the page's
    /// wrapper takes).
    pub fn new(doc: &Document, path: Option<&str>, budget: Budget) -> Result<Self, PageError> {
        let text = doc.text_str();
        // What is paged, before anything is laid out.
        let (pointer, range) = match doc.kind() {
            Kind::Text => match path {
                None | Some("") => (None, 0..doc.bytes()),
                Some(_) => return Err(PageError::PathInText),
            },
            Kind::Json | Kind::Blocks => {
                let pointer = path.unwrap_or_default().to_owned();
                let range = doc.resolve(&pointer)?;
                (Some(pointer), range)
            }
        };
        // The whole document's is measured once, for every plan of it.
        let per_token = if range == (0..text.len()) {
            doc.bytes_per_token()
        } else {
            bytes_per_token(&text[range.clone()], TOKEN_SAMPLE_BYTES)
        };
        let raw_tokens = f64::from(budget.max_tokens) / f64::from(budget.token_factor.max(0.01));
        // 10 % below the estimate: serving shortens a page that still does
        // not fit, but that costs a continuation.
        let by_tokens = raw_tokens * f64::from(per_token) * 0.9;
        let page_bytes = (by_tokens as usize)
            .min(budget.max_chars as usize)
            .saturating_sub(2) // the brackets of an items page
            .max(16);
        let sure_bytes = (raw_tokens as usize)
            .min(budget.max_chars as usize)
            .saturating_sub(2)
            // Unicode normalization before counting may lengthen a text a
            // little: keep a margin.
            / 2;
        let mut plan = Self {
            path: pointer.clone(),
            pages: Vec::new(),
            page_bytes,
            sure_bytes,
            max_lines: budget.max_lines.map_or(usize::MAX, |l| l.max(1) as usize),
            tokenize_left: TOKENIZED_WHEN_PLANNING,
            budget,
        };
        match pointer {
            None => plan.lay_out_lines(doc),
            Some(pointer) => {
                let first = text.as_bytes().get(range.start).copied();
                if !matches!(first, Some(b'[' | b'{'))
                    && !pointer.is_empty()
                    && range.len() <= page_bytes
                {
                    return Err(scalar_error(doc, &pointer, first));
                }
                plan.lay_out_value(doc, pointer, range, Vec::new(), 0);
            }
        }
        // Every layout plans at least one page (an empty text or container
        // has one empty page).
        Ok(plan)
    }

    /// Plans `range` (the value at `pointer`), with `around` to show on its
    /// first page.
    fn lay_out_value(
        &mut self,
        doc: &Document,
        pointer: String,
        range: Range<usize>,
        around: Vec<AroundSpan>,
        depth: usize,
    ) {
        let text = doc.text_str();
        let first = text.as_bytes().get(range.start).copied();
        let object = first == Some(b'{');
        if !matches!(first, Some(b'[' | b'{')) || depth > MAX_DESCENT {
            let deep = matches!(first, Some(b'[' | b'{'));
            self.lay_out_slices(doc, pointer, range, around, deep);
            return;
        }
        let children = match doc.cached_items(&range) {
            // The bulk array's index is usually made already (for the
            // summary); deeper ones are the plan's alone.
            Some(items) if !object => items,
            _ => Arc::new(Items::new(
                range.clone(),
                if object {
                    doc.member_starts(range.clone())
                } else {
                    scan::item_starts(text, range.clone())
                },
            )),
        };
        let around_bytes = spans_cost(&around);
        let own = around_bytes + path_cost(&pointer);
        if object && !children.is_empty() && !self.fits_alone(text, &range, own) {
            // The bulk in one member: page that member, the rest around it.
            let (largest, (key, value)) = (0..children.len())
                .map(|i| (i, scan::member_parts(text, children.item(i))))
                .max_by_key(|(i, (_, v))| (v.len(), std::cmp::Reverse(*i)))
                .expect("not empty");
            let span = AroundSpan {
                key: key.into_owned(),
                before: if largest == 0 {
                    0..0
                } else {
                    children.span(0, largest)
                },
                after: if largest + 1 == children.len() {
                    0..0
                } else {
                    children.span(largest + 1, children.len())
                },
                pointer: pointer.clone(),
                index: largest,
            };
            // Only a member that needs paging itself is worth it: else
            // the object is paged by members.
            let bulky = matches!(text.as_bytes().get(value.start), Some(b'[' | b'{'))
                || !self.fits_alone(text, &value, own + span.len() + span.key.len());
            if bulky && around_bytes + span.len() <= self.around_limit() {
                let mut child = pointer;
                child.push('/');
                scan::escape_token(&span.key, &mut child);
                let mut around = around;
                around.push(span);
                self.lay_out_value(doc, child, value, around, depth + 1);
                return;
            }
        }
        let container = Arc::new(Container {
            pointer,
            object,
            range,
            total: children.len(),
            children: Some(children),
        });
        self.lay_out_children(doc, container, around, depth);
    }

    /// The most bytes of `Around` a page carries: a quarter of what surely
    /// fits, so that the page keeps room for its data.
    fn around_limit(&self) -> usize {
        (self.sure_bytes / 2).min(4096)
    }

    /// Groups the children of `container` into pages, greedily by bytes; a
    /// child that does not fit a page alone is descended into.
    fn lay_out_children(
        &mut self,
        doc: &Document,
        container: Arc<Container>,
        around: Vec<AroundSpan>,
        depth: usize,
    ) {
        let text = doc.text_str();
        let children = Source::children(doc, &container);
        let mut around = Some(around);
        let mut group: Option<(usize, usize)> = None; // first child, bytes
        let mut emitted = false;
        let flush = |plan: &mut Self,
                     group: &mut Option<(usize, usize)>,
                     end: usize,
                     around: &mut Option<Vec<AroundSpan>>| {
            if let Some((a, _)) = group.take() {
                plan.pages.push(Planned {
                    segment: Segment::Children {
                        container: container.clone(),
                        a: a as u64,
                        b: end as u64,
                    },
                    around: around.take().unwrap_or_default(),
                    extent: if a == end {
                        0..0
                    } else {
                        children.span(a, end)
                    },
                });
            }
        };
        for i in 0..children.len() {
            let range = children.item(i);
            let around_bytes =
                spans_cost(around.as_deref().unwrap_or_default()) + path_cost(&container.pointer);
            if !self.fits_alone(text, &range, around_bytes) {
                flush(self, &mut group, i, &mut around);
                let (pointer, value) = child_value(doc, &container, &children, i);
                self.lay_out_value(
                    doc,
                    pointer,
                    value,
                    around.take().unwrap_or_default(),
                    depth + 1,
                );
                emitted = true;
                continue;
            }
            let room = self.page_bytes.saturating_sub(around_bytes);
            if let Some((_, bytes)) = &mut group {
                if *bytes + 1 + range.len() > room {
                    flush(self, &mut group, i, &mut around);
                } else {
                    *bytes += 1 + range.len();
                    continue;
                }
            }
            group = Some((i, range.len()));
            emitted = true;
        }
        if !emitted {
            // An empty container: one empty page.
            group = Some((0, 0));
        }
        flush(self, &mut group, children.len(), &mut around);
    }

    /// Whether the bytes at `range`, bracketed, fit a page with
    /// `around_bytes` of `Around`. Up to [`Plan::sure_bytes`] they surely
    /// do; over the page's byte size they are descended into without
    /// counting; up to half of it the sampled bytes per token say so (a
    /// child that still does not fit is sliced when served, which takes
    /// text less than half as dense in tokens as the sample); between, the
    /// tokens are counted, each byte at most once and at most
    /// [`TOKENIZED_WHEN_PLANNING`] bytes in all (then it is descended into).
    fn fits_alone(&mut self, text: &str, range: &Range<usize>, around_bytes: usize) -> bool {
        let len = range.len() + 2 + around_bytes;
        if len <= self.sure_bytes {
            return true;
        }
        if len > self.page_bytes.max(self.sure_bytes) {
            return false;
        }
        if len <= self.page_bytes / 2 {
            return true;
        }
        if len > self.tokenize_left {
            return false;
        }
        self.tokenize_left -= len;
        let mut data = String::with_capacity(len);
        data.push('[');
        data.push_str(&text[range.clone()]);
        data.push(']');
        self.fits_with(&data, around_bytes)
    }

    /// Slices of the compact JSON of one value.
    fn lay_out_slices(
        &mut self,
        doc: &Document,
        pointer: String,
        value: Range<usize>,
        around: Vec<AroundSpan>,
        deep: bool,
    ) {
        let unit = &doc.text_str()[value.clone()];
        let chars = count_chars(unit) as u64;
        let mut around = Some(around);
        let mut byte = 0;
        let mut char_from = 0;
        loop {
            let around_bytes =
                spans_cost(around.as_deref().unwrap_or_default()) + path_cost(&pointer);
            let room = self.page_bytes.saturating_sub(around_bytes).max(16);
            let mut end = floor_boundary(unit, (byte + room).min(unit.len()));
            if end <= byte {
                end = next_boundary(unit, byte);
            }
            let slice_chars = count_chars(&unit[byte..end]) as u64;
            self.pages.push(Planned {
                segment: Segment::Slice {
                    pointer: pointer.clone(),
                    value: value.clone(),
                    from: byte as u64,
                    to: end as u64,
                    char_from,
                    chars,
                    deep,
                },
                around: around.take().unwrap_or_default(),
                extent: value.start + byte..value.start + end,
            });
            char_from += slice_chars;
            byte = end;
            if byte >= unit.len() {
                return;
            }
        }
    }

    /// Groups lines into pages, greedily by bytes; a line too long for a
    /// page is sliced.
    fn lay_out_lines(&mut self, doc: &Document) {
        let text = doc.text_str();
        let starts = doc.line_starts();
        let line = |i: usize| {
            let a = starts[i] as usize;
            a..starts.get(i + 1).map_or(text.len(), |&s| s as usize)
        };
        let mut chars = 0u64;
        let mut group: Option<(usize, usize, u64)> = None; // first line, bytes, its char
        for i in 0..starts.len() {
            let range = line(i);
            let line_chars = count_chars(&text[range.clone()]) as u64;
            if !self.fits_alone(text, &range, 0) {
                if let Some((a, _, char_from)) = group.take() {
                    self.push_lines(a, i, char_from, doc);
                }
                let unit = &text[range.clone()];
                let mut byte = 0;
                let mut char_from = chars;
                while byte < unit.len() {
                    let mut end = floor_boundary(unit, (byte + self.page_bytes).min(unit.len()));
                    if end <= byte {
                        end = next_boundary(unit, byte);
                    }
                    self.pages.push(Planned {
                        segment: Segment::LineSlice {
                            line: i as u64,
                            from: byte as u64,
                            to: end as u64,
                            char_from,
                            bytes: range.clone(),
                        },
                        around: Vec::new(),
                        extent: range.start + byte..range.start + end,
                    });
                    char_from += count_chars(&unit[byte..end]) as u64;
                    byte = end;
                }
                chars += line_chars;
                continue;
            }
            match &mut group {
                Some((a, bytes, _))
                    if *bytes + range.len() <= self.page_bytes && i - *a < self.max_lines =>
                {
                    *bytes += range.len();
                }
                _ => {
                    if let Some((a, _, char_from)) = group.take() {
                        self.push_lines(a, i, char_from, doc);
                    }
                    group = Some((i, range.len(), chars));
                }
            }
            chars += line_chars;
        }
        if let Some((a, _, char_from)) = group {
            self.push_lines(a, starts.len(), char_from, doc);
        }
    }

    fn push_lines(&mut self, a: usize, b: usize, char_from: u64, doc: &Document) {
        let start_of = |i: usize| {
            doc.line_starts()
                .get(i)
                .map_or(doc.bytes(), |&s| s as usize)
        };
        self.pages.push(Planned {
            segment: Segment::Lines {
                a: a as u64,
                b: b as u64,
                char_from,
            },
            around: Vec::new(),
            extent: if a == b {
                0..0
            } else {
                start_of(a)..start_of(b)
            },
        });
    }

    /// How many pages.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Memory held, approximately: its pages, and the child indexes of the
    /// containers they go through (each counted once).
    pub fn memory(&self) -> usize {
        let mut containers = std::collections::HashSet::new();
        let mut bytes = std::mem::size_of::<Self>()
            + self.path.as_ref().map_or(0, String::capacity)
            + self.pages.capacity() * std::mem::size_of::<Planned>();
        for page in &self.pages {
            bytes += page
                .around
                .iter()
                .map(|a| {
                    std::mem::size_of::<AroundSpan>() + a.pointer.capacity() + a.key.capacity()
                })
                .sum::<usize>();
            match &page.segment {
                Segment::Children { container, .. } => {
                    if containers.insert(Arc::as_ptr(container)) {
                        bytes += std::mem::size_of::<Container>()
                            + container.pointer.capacity()
                            + container.children.as_ref().map_or(0, |c| c.memory());
                    }
                }
                Segment::Slice { pointer, .. } => bytes += pointer.capacity(),
                Segment::Lines { .. } | Segment::LineSlice { .. } => {}
            }
        }
        bytes
    }

    /// The path paged (`""`: the whole JSON document); `None` for text.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The budget a page's data keeps to.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Where page `page` (1-based) starts.
    pub fn start_of(&self, page: u64) -> Result<Position, PageError> {
        usize::try_from(page)
            .ok()
            .and_then(|p| p.checked_sub(1))
            .and_then(|i| self.pages.get(i).map(|p| start(i, &p.segment)))
            .ok_or(PageError::OutOfRange {
                page,
                pages: self.pages(),
            })
    }

    /// Whether `at` is a position this plan could have produced.
    pub fn holds(&self, doc: &Document, at: Position) -> bool {
        self.holds_in(doc, at)
    }

    /// Whether `at` is a position this plan could have produced, read in
    /// `src` (which holds page `at.seg`, if it is a window).
    pub(crate) fn holds_in(&self, src: &dyn Source, at: Position) -> bool {
        let Some(planned) = usize::try_from(at.seg).ok().and_then(|s| self.pages.get(s)) else {
            return false;
        };
        match &planned.segment {
            Segment::Children { container, a, b } => {
                let child = *a <= at.unit && at.unit < *b;
                if at.byte == 0 {
                    child || (a == b && at.unit == *a)
                } else {
                    // Inside a child served in slices.
                    child && {
                        let items = src.children(container);
                        let (_, value) = child_value(src, container, &items, at.unit as usize);
                        (at.byte as usize) < value.len()
                            && src.is_char_boundary(value.start + at.byte as usize)
                    }
                }
            }
            Segment::Lines { a, b, .. } => {
                at.byte == 0 && *a <= at.unit && (at.unit < *b || (a == b && at.unit == *a))
            }
            Segment::Slice {
                value, from, to, ..
            } => {
                at.unit == 0
                    && *from <= at.byte
                    && at.byte < *to
                    && src.is_char_boundary(value.start + at.byte as usize)
            }
            Segment::LineSlice {
                line,
                from,
                to,
                bytes,
                ..
            } => {
                at.unit == *line
                    && *from <= at.byte
                    && at.byte < *to
                    && src.is_char_boundary(bytes.start + at.byte as usize)
            }
        }
    }

    /// Serves the page that starts at `from` (a position [`Plan::holds`]).
    pub fn serve(&self, doc: &Document, from: Position) -> Page {
        self.serve_in(doc, from)
    }

    /// Serves the page that starts at `from` (a position
    /// [`Plan::holds_in`] `src`) from `src`.
    pub(crate) fn serve_in(&self, src: &dyn Source, from: Position) -> Page {
        let seg = from.seg as usize;
        let planned = &self.pages[seg];
        let first = start(seg, &planned.segment);
        let around: Vec<Around> = if from == first {
            planned.around.iter().map(|a| a.render(src)).collect()
        } else {
            Vec::new()
        };
        let around_text: usize = around.iter().map(Around::cost).sum();
        let (mut page, rest) = match &planned.segment {
            Segment::Children { container, b, .. } => self.serve_children(
                src,
                container,
                from,
                *b,
                around_text + path_cost(&container.pointer),
            ),
            Segment::Lines { b, .. } => self.serve_lines(src, from, *b),
            Segment::Slice {
                pointer,
                value,
                to,
                chars,
                deep,
                ..
            } => {
                let (mut page, rest) = self.serve_slice(
                    src,
                    value.clone(),
                    from,
                    *to,
                    around_text + path_cost(pointer),
                );
                page.path = Some(pointer.clone());
                page.total = *chars;
                page.deep = *deep;
                (page, rest)
            }
            Segment::LineSlice {
                line, to, bytes, ..
            } => {
                let (mut page, rest) = self.serve_slice(src, bytes.clone(), from, *to, 0);
                // Characters count into the whole text here.
                page.total = src.chars();
                page.lines = Some((*line, line + 1, src.lines()));
                page.slice_of = Some(*line);
                (page, rest)
            }
        };
        page.around = around;
        page.page = seg + 1;
        page.pages = self.pages();
        page.continued = from != first;
        page.next = rest.or_else(|| {
            self.pages
                .get(seg + 1)
                .map(|next| start(seg + 1, &next.segment))
        });
        page
    }

    /// Children `from.unit..b` of `container`, as many as fit; the rest of
    /// the segment, if any, is the continuation.
    fn serve_children(
        &self,
        src: &dyn Source,
        container: &Container,
        from: Position,
        b: u64,
        around_bytes: usize,
    ) -> (Page, Option<Position>) {
        let items = src.children(container);
        let a = from.unit as usize;
        let b = b as usize;
        if from.byte > 0 || (b > a && !self.child_fits(src, container, &items, a, around_bytes)) {
            return self.serve_child_slice(src, container, &items, from, b, around_bytes);
        }
        let make = |end: usize| {
            let data = children_data(src, container, &items, a, end);
            Page::new(
                data,
                if container.object {
                    Form::Members
                } else {
                    Form::Items
                },
                Some(container.pointer.clone()),
                a as u64,
                end as u64,
                items.len() as u64,
            )
        };
        let fits = |data: &str| self.fits_with(data, around_bytes);
        let mut page = make(b);
        let mut end = b;
        if b > a + 1 && !fits(&page.data) {
            // Shorten: the most children that fit (binary search); the
            // first one does (checked above).
            let (mut lo, mut hi) = (a + 1, b - 1);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(&children_data(src, container, &items, a, mid)) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            end = lo;
            page = make(end);
        }
        let rest = (end < b).then_some(Position {
            seg: from.seg,
            unit: end as u64,
            byte: 0,
            char: 0,
        });
        (page, rest)
    }

    /// Whether child `i` of `container` alone fits a page.
    fn child_fits(
        &self,
        src: &dyn Source,
        container: &Container,
        items: &Items,
        i: usize,
        around: usize,
    ) -> bool {
        let range = items.item(i);
        if range.len() + 2 + around <= self.sure_bytes {
            return true;
        }
        self.fits_with(&children_data(src, container, items, i, i + 1), around)
    }

    /// A slice of child `from.unit`'s value, from `from.byte`: the last
    /// resort for a child that fitted a page by its bytes but not by its
    /// tokens (far less dense than the document's sample).
    fn serve_child_slice(
        &self,
        src: &dyn Source,
        container: &Container,
        items: &Items,
        from: Position,
        b: usize,
        around_bytes: usize,
    ) -> (Page, Option<Position>) {
        let i = from.unit as usize;
        let (pointer, value) = child_value(src, container, items, i);
        let (mut page, rest) = self.serve_slice(
            src,
            value.clone(),
            from,
            value.len() as u64,
            around_bytes + path_cost(&pointer),
        );
        page.path = Some(pointer);
        page.total = count_chars(src.text(value)) as u64;
        page.slice_of = Some(from.unit);
        let rest = rest.or_else(|| {
            (i + 1 < b).then_some(Position {
                seg: from.seg,
                unit: from.unit + 1,
                byte: 0,
                char: 0,
            })
        });
        (page, rest)
    }

    /// Lines `from.unit..b`, as many as fit.
    fn serve_lines(&self, src: &dyn Source, from: Position, b: u64) -> (Page, Option<Position>) {
        let a = from.unit as usize;
        let b = b as usize;
        let start_of = |i: usize| src.line_start(i as u64).map_or(src.bytes(), |s| s as usize);
        let range = |end: usize| {
            if a == end {
                0..0
            } else {
                start_of(a)..start_of(end)
            }
        };
        let mut end = b;
        if b > a + 1 && !self.fits(src.text(range(b))) {
            let (mut lo, mut hi) = (a + 1, b - 1);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if self.fits(src.text(range(mid))) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            end = lo;
        }
        let data = src.text(range(end)).to_owned();
        let end_char = from.char + count_chars(&data) as u64;
        let mut page = Page::new(data, Form::Text, None, from.char, end_char, src.chars());
        page.lines = Some((a as u64, end as u64, src.lines()));
        let rest = (end < b).then_some(Position {
            seg: from.seg,
            unit: end as u64,
            byte: 0,
            char: end_char,
        });
        (page, rest)
    }

    /// Bytes `from.byte..to` of the value at `value`, as many as fit.
    fn serve_slice(
        &self,
        src: &dyn Source,
        value: Range<usize>,
        from: Position,
        to: u64,
        around_bytes: usize,
    ) -> (Page, Option<Position>) {
        let (base, len) = (value.start, value.len());
        // Character boundaries in the value, read where they are (a window
        // holds only the bytes of its page).
        let floor = |at: usize| {
            let mut at = at.min(len);
            while at > 0 && !src.is_char_boundary(base + at) {
                at -= 1;
            }
            at
        };
        let next = |at: usize| {
            let mut i = (at + 1).min(len);
            while i < len && !src.is_char_boundary(base + i) {
                i += 1;
            }
            i
        };
        let text = |a: usize, b: usize| src.text(base + a..base + b);
        let start = from.byte as usize;
        let mut end = floor(to as usize);
        if end <= start {
            end = next(start);
        }
        if !self.fits_with(text(start, end), around_bytes) {
            // The longest prefix that fits (binary search on bytes).
            let (mut lo, mut hi) = (start, end);
            while hi - lo > 1 {
                let mid = floor(lo + (hi - lo) / 2);
                if mid <= lo {
                    break;
                }
                if self.fits_with(text(start, mid), around_bytes) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            end = if lo > start { lo } else { next(start) };
        }
        let data = text(start, end).to_owned();
        let chars = count_chars(&data) as u64;
        let mut page = Page::new(data, Form::Text, None, from.char, from.char + chars, 0);
        page.slice_of = Some(from.unit);
        let rest = ((end as u64) < to).then_some(Position {
            seg: from.seg,
            unit: from.unit,
            byte: end as u64,
            char: from.char + chars,
        });
        (page, rest)
    }

    /// Whether `data` fits the page budget.
    fn fits(&self, data: &str) -> bool {
        self.fits_with(data, 0)
    }

    /// Whether `data` fits the page budget beside `around_bytes` of
    /// `Around` (counted as that many characters and, at worst, tokens).
    fn fits_with(&self, data: &str, around_bytes: usize) -> bool {
        // A byte of `Around` is at most one token before the factor.
        let tokens = (around_bytes as f64 * f64::from(self.budget.token_factor)).ceil();
        let budget = self.budget.less(
            tokens.min(f64::from(u32::MAX)) as u32,
            u32::try_from(around_bytes).unwrap_or(u32::MAX),
        );
        if data.len() as u64 > u64::from(budget.max_chars)
            && count_chars(data) as u64 > u64::from(budget.max_chars)
        {
            return false;
        }
        if self.max_lines != usize::MAX
            && memchr::memchr_iter(b'\n', data.as_bytes()).count() > self.max_lines
        {
            return false;
        }
        tokens_within(data, budget.token_factor, budget.max_tokens).is_some()
    }
}

/// Where a planned page starts.
fn start(seg: usize, segment: &Segment) -> Position {
    let seg = seg as u64;
    match segment {
        Segment::Children { a, .. } => Position {
            seg,
            unit: *a,
            byte: 0,
            char: 0,
        },
        Segment::Lines { a, char_from, .. } => Position {
            seg,
            unit: *a,
            byte: 0,
            char: *char_from,
        },
        Segment::Slice {
            from, char_from, ..
        } => Position {
            seg,
            unit: 0,
            byte: *from,
            char: *char_from,
        },
        Segment::LineSlice {
            line,
            from,
            char_from,
            ..
        } => Position {
            seg,
            unit: *line,
            byte: *from,
            char: *char_from,
        },
    }
}

/// The pointer and the bytes of the value of child `i` of `container`
/// (whose children are `items`).
fn child_value(
    src: &dyn Source,
    container: &Container,
    items: &Items,
    i: usize,
) -> (String, Range<usize>) {
    let range = items.item(i);
    let mut pointer = container.pointer.clone();
    pointer.push('/');
    if container.object {
        let member = src.text(range.clone());
        let (key, value) = scan::member_parts(member, 0..member.len());
        scan::escape_token(&key, &mut pointer);
        (pointer, range.start + value.start..range.start + value.end)
    } else {
        pointer.push_str(&i.to_string());
        (pointer, range)
    }
}

/// Children `a..b` of `container` (whose children are `items`) as a JSON
/// array or object.
fn children_data(
    src: &dyn Source,
    container: &Container,
    items: &Items,
    a: usize,
    b: usize,
) -> String {
    let (open, close) = if container.object {
        ('{', '}')
    } else {
        ('[', ']')
    };
    if a == b {
        return format!("{open}{close}");
    }
    let span = src.text(items.span(a, b));
    let mut data = String::with_capacity(span.len() + 2);
    data.push(open);
    data.push_str(span);
    data.push(close);
    data
}

/// The error for a path to a scalar that fits a page.
fn scalar_error(doc: &Document, pointer: &str, first: Option<u8>) -> PageError {
    let what = match first {
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    };
    let parent = pointer
        .rfind('/')
        .map_or_else(String::new, |i| pointer[..i].to_owned());
    PageError::Scalar {
        pointer: pointer.to_owned(),
        what,
        parent,
        arrays: doc
            .notable_arrays()
            .iter()
            .map(|a| (a.pointer.clone(), a.items))
            .collect(),
    }
}

/// The smallest character boundary after `at` (at least one character).
fn next_boundary(text: &str, at: usize) -> usize {
    let mut i = (at + 1).min(text.len());
    while !text.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// One served page.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// What `content[0]` carries.
    pub data: String,
    /// How to read `data`.
    pub form: Form,
    /// The container (items, members) or the value (a slice) paged; `None`
    /// for text.
    pub path: Option<String>,
    /// First child, or first character.
    pub start: u64,
    /// Past the last child, or past the last character.
    pub end: u64,
    /// Children of the container, or characters in the text or value.
    pub total: u64,
    /// Text documents: lines `start..end` of `total`.
    pub lines: Option<(u64, u64, u64)>,
    /// Set when this is a slice of one line or value too large for a page.
    pub slice_of: Option<u64>,
    /// A slice of a container nested too deep to descend into.
    pub deep: bool,
    /// The objects around the value paged, with their other members: on
    /// the first page inside them only, so each is shown once.
    pub around: Vec<Around>,
    /// 1-based page number.
    pub page: usize,
    /// Pages in the plan.
    pub pages: usize,
    /// Whether this page began inside a planned page (a continuation).
    pub continued: bool,
    /// Where the next page starts; `None` after the last.
    pub next: Option<Position>,
}

impl Page {
    fn new(
        data: String,
        form: Form,
        path: Option<String>,
        start: u64,
        end: u64,
        total: u64,
    ) -> Self {
        Self {
            data,
            form,
            path,
            start,
            end,
            total,
            lines: None,
            slice_of: None,
            deep: false,
            around: Vec::new(),
            page: 1,
            pages: 1,
            continued: false,
            next: None,
        }
    }

    /// The context header: where this page is and how to go on, e.g.
    /// `items 251–500 of 12,480 at /tree · page 2 of 50 · next: …`, then
    /// one line per object around it with its other members, e.g.
    /// `/2 also holds: {"name":"src","type":"directory"} (its "children" are paged here)`.
    pub fn header(&self, next_call: Option<&str>) -> String {
        use crate::format::group;
        let mut out = match (self.form, &self.lines) {
            (Form::Items | Form::Members, _) => format!(
                "{} {}–{} of {} at {}",
                self.form.as_str(),
                group(self.start + 1),
                group(self.end),
                group(self.total),
                display_path(self.path.as_deref())
            ),
            (Form::Text, Some((a, b, n))) => format!(
                "chars {}–{} of {} (lines {}–{} of {})",
                group(self.start + 1),
                group(self.end),
                group(self.total),
                group(a + 1),
                group(*b),
                group(*n)
            ),
            (Form::Text, None) => format!(
                "chars {}–{} of {} of the compact JSON at {}",
                group(self.start + 1),
                group(self.end),
                group(self.total),
                display_path(self.path.as_deref())
            ),
        };
        if self.slice_of.is_some() {
            out.push_str(match (self.lines.is_some(), self.deep) {
                (true, _) => " (one line too large for a page, in slices)",
                (false, false) => " (one value too large for a page, in slices)",
                (false, true) => " (nested too deep to page by items, in slices)",
            });
        }
        if self.form == Form::Items && self.start == self.end && self.total > 0 {
            out.push_str(" (none)");
        }
        out.push_str(&format!(
            " · page {} of {}",
            group(self.page as u64),
            group(self.pages as u64)
        ));
        if self.continued {
            out.push_str(" (continued)");
        }
        crate::format::push_next(&mut out, next_call);
        for around in &self.around {
            let key = serde_json::to_string(&around.key).unwrap_or_default();
            let at = display_path(Some(&around.pointer));
            if around.members == "{}" {
                out.push_str(&format!("\n{at} holds only {key}, paged here"));
            } else {
                out.push_str(&format!(
                    "\n{at} also holds: {} (its {key} is paged here)",
                    around.members
                ));
            }
        }
        out
    }
}

fn display_path(path: Option<&str>) -> &str {
    match path {
        Some("") | None => "the root",
        Some(p) => p,
    }
}

/// What a document keys its plan of `path` for `budget` by.
fn plan_key_of(path: Option<&str>, budget: Budget) -> PlanKey {
    (
        path.map(str::to_owned),
        budget.max_tokens,
        budget.max_chars,
        budget.max_lines.unwrap_or(0),
        budget.token_factor.to_bits(),
    )
}

/// Page plans are made here and kept with their document.
impl Document {
    /// The page plan of `path` (`None`: the whole document) for page data
    /// within `budget`, made on first use and kept.
    pub fn plan(&self, path: Option<&str>, budget: Budget) -> Result<Arc<Plan>, PageError> {
        let key = plan_key_of(path, budget);
        if let Some(plan) = self.lock_plans().get(&key)
            && let Ok(plan) = plan.downcast::<Plan>()
        {
            return Ok(plan);
        }
        let plan = Arc::new(Plan::new(self, path, budget)?);
        let bytes = plan.memory() + key.0.as_ref().map_or(0, String::capacity);
        let delta = self.lock_plans().put(key, plan.clone(), bytes);
        self.count_index_bytes(delta);
        Ok(plan)
    }

    /// Whether the plan of `path` for `budget` was made already (and is
    /// still kept).
    pub fn has_plan(&self, path: Option<&str>, budget: Budget) -> bool {
        let key = plan_key_of(path, budget);
        self.lock_plans().iter().any(|(k, _)| *k == key)
    }

    pub(crate) fn lock_plans(
        &self,
    ) -> std::sync::MutexGuard<'_, Recent<PlanKey, dyn Any + Send + Sync>> {
        self.plans.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn budget(tokens: u32, chars: u32) -> Budget {
        Budget {
            max_tokens: tokens,
            max_chars: chars,
            max_lines: None,
            token_factor: 1.25,
        }
    }

    fn plan(doc: &Document, path: Option<&str>, b: Budget) -> Plan {
        Plan::new(doc, path, b).unwrap()
    }

    #[test]
    fn the_whole_documents_bytes_per_token_is_sampled_once_and_may_be_told() {
        let items: Vec<Value> = (0..4000)
            .map(|i| json!({"id": i, "name": format!("item {i}"), "tags": ["a", "b"]}))
            .collect();
        let text = serde_json::to_string(&json!({ "items": items })).unwrap();
        let doc = Document::json_or_text(text.clone());
        assert_eq!(
            doc.bytes_per_token(),
            bytes_per_token(&text, TOKEN_SAMPLE_BYTES)
        );
        // Planning the whole document uses the figure it was told (here a
        // wrong one, ten times too high: pages ten times too long in
        // tokens, so far fewer of them); a path inside it is sampled anew.
        let b = budget(2_000, 1_000_000);
        let measured = plan(&doc, None, b).pages();
        let told =
            Document::json_or_text(text).knowing_bytes_per_token(doc.bytes_per_token() * 10.0);
        assert!(plan(&told, None, b).pages() * 5 < measured, "{measured}");
        let inside = plan(&doc, Some("/items"), b).pages();
        assert!(inside > 1, "{inside}");
        assert_eq!(plan(&told, Some("/items"), b).pages(), inside);
    }

    /// Follows the cursor chain from page 1 and returns every page; checks
    /// that each is served the same from the plan saved and read back, over
    /// only the bytes it says the page needs, by page number and by cursor.
    fn all_pages(doc: &Document, plan: &Plan) -> Vec<Page> {
        let saved = SavedPlan::restore(&save(plan, doc)).expect("a saved plan reads back");
        assert_eq!(saved.plan().pages(), plan.pages());
        let from_window = |start: Start| {
            let (_, ranges) = saved.needs(start).unwrap();
            let pieces = ranges
                .iter()
                .map(|r| (r.start, doc.text_str()[r.clone()].to_owned()))
                .collect();
            saved.serve(start, pieces).unwrap()
        };
        for n in 1..=plan.pages() as u64 {
            let from = plan.start_of(n).unwrap();
            assert_eq!(
                from_window(Start::Page(n)),
                plan.serve(doc, from),
                "page {n}"
            );
        }
        let mut pages = Vec::new();
        let mut at = Some(plan.start_of(1).unwrap());
        while let Some(from) = at {
            assert!(plan.holds(doc, from), "{from:?}");
            let page = plan.serve(doc, from);
            assert_eq!(from_window(Start::At(from)), page, "at {from:?}");
            let around: usize = page.around.iter().map(Around::cost).sum::<usize>()
                + page.path.as_deref().map_or(0, path_cost);
            assert!(
                plan.fits_with(&page.data, around),
                "page over budget: {}",
                page.data.len()
            );
            at = page.next;
            pages.push(page);
            assert!(pages.len() < 100_000, "no progress");
        }
        pages
    }

    /// Rebuilds a JSON document from its pages, checking that each value is
    /// placed once and that every items or members page is the slice of the
    /// original it names.
    fn rebuild(original: &Value, pages: &[Page]) -> Value {
        let mut placed: Vec<(String, Value)> = Vec::new();
        let mut slices: std::collections::HashMap<String, String> = Default::default();
        for page in pages {
            for around in &page.around {
                let members: serde_json::Map<String, Value> =
                    serde_json::from_str(&around.members).unwrap();
                for (k, v) in members {
                    let mut p = around.pointer.clone();
                    p.push('/');
                    scan::escape_token(&k, &mut p);
                    placed.push((p, v));
                }
            }
            let path = page.path.clone().unwrap();
            match page.form {
                Form::Items => {
                    let items: Vec<Value> = serde_json::from_str(&page.data).unwrap();
                    let whole = original.pointer(&path).unwrap().as_array().unwrap();
                    assert_eq!(
                        items,
                        whole[page.start as usize..page.end as usize],
                        "an items page is the slice it names"
                    );
                    for (k, v) in items.into_iter().enumerate() {
                        placed.push((format!("{path}/{}", page.start as usize + k), v));
                    }
                }
                Form::Members => {
                    let members: serde_json::Map<String, Value> =
                        serde_json::from_str(&page.data).unwrap();
                    assert_eq!(members.len() as u64, page.end - page.start);
                    for (k, v) in members {
                        let mut p = path.clone();
                        p.push('/');
                        scan::escape_token(&k, &mut p);
                        placed.push((p, v));
                    }
                }
                Form::Text => {
                    let s = slices.entry(path.clone()).or_default();
                    assert_eq!(count_chars(s) as u64, page.start, "slices in order");
                    s.push_str(&page.data);
                    if page.end == page.total {
                        let v = serde_json::from_str(s).unwrap();
                        placed.push((path, v));
                    }
                }
            }
        }
        // Every leaf placed once: the placed values, put back, make the
        // original; no pointer is placed twice.
        let mut pointers: Vec<String> = placed.iter().map(|(p, _)| p.clone() + "/").collect();
        pointers.sort();
        for pair in pointers.windows(2) {
            assert!(!pair[1].starts_with(&pair[0]), "{} visited twice", pair[1]);
        }
        let mut seen = std::collections::HashSet::new();
        let mut out = original.clone();
        blank(&mut out);
        for (p, v) in placed {
            assert!(seen.insert(p.clone()), "{p} visited twice");
            *out.pointer_mut(&p).unwrap_or_else(|| panic!("{p}")) = v;
        }
        out
    }

    /// Every scalar and empty container replaced by a marker.
    fn blank(v: &mut Value) {
        match v {
            Value::Array(a) if !a.is_empty() => a.iter_mut().for_each(blank),
            Value::Object(o) if !o.is_empty() => o.values_mut().for_each(blank),
            _ => *v = json!("<not visited>"),
        }
    }

    fn check_whole(value: &Value, b: Budget) -> Vec<Page> {
        let doc = Document::json(value.to_string()).unwrap();
        let plan = plan(&doc, None, b);
        let pages = all_pages(&doc, &plan);
        assert_eq!(&rebuild(value, &pages), value);
        for p in &pages {
            if p.form != Form::Text {
                serde_json::from_str::<Value>(&p.data).expect("a page is valid JSON");
            }
        }
        pages
    }

    #[test]
    fn an_array_of_records_reassembles_exactly() {
        let rows: Vec<Value> = (0..2000)
            .map(|i| json!({"id": i, "name": format!("row {i} é"), "tags": ["a", "b"]}))
            .collect();
        let whole = json!({"count": 2000, "rows": rows});
        let json = serde_json::to_string_pretty(&whole).unwrap();
        let doc = Document::json(json).unwrap();
        let plan = plan(&doc, None, budget(2000, 6000));
        assert!(plan.pages() > 5);
        let pages = all_pages(&doc, &plan);
        assert_eq!(
            pages.len(),
            plan.pages(),
            "estimates held: no continuation needed"
        );
        assert_eq!(rebuild(&whole, &pages), whole);
        // The count rides along with the first page of the rows.
        assert_eq!(
            pages[0].around,
            [Around {
                pointer: String::new(),
                key: "rows".into(),
                index: 1,
                members: r#"{"count":2000}"#.into()
            }]
        );
        assert!(
            pages[0]
                .header(None)
                .ends_with("\nthe root also holds: {\"count\":2000} (its \"rows\" is paged here)")
        );
        assert!(pages[1].around.is_empty());
        assert_eq!(pages[1].page, 2);
        assert_eq!(pages[1].start, pages[0].end);
        assert!(
            pages[1]
                .header(Some("sluice_read {…}"))
                .starts_with(&format!(
                    "items {}–{} of 2,000 at /rows · page 2 of {}",
                    pages[1].start + 1,
                    pages[1].end,
                    plan.pages()
                ))
        );
        // Random access agrees with the chain.
        let third = plan.serve(&doc, plan.start_of(3).unwrap());
        assert_eq!(third, pages[2]);
        assert_eq!(
            plan.start_of(plan.pages() as u64 + 1),
            Err(PageError::OutOfRange {
                page: plan.pages() as u64 + 1,
                pages: plan.pages()
            })
        );
        assert!(plan.start_of(0).is_err());
    }

    /// A directory tree: nodes with a name, a type and children.
    fn tree(depth: usize, breadth: usize, files: usize, name: &str) -> Value {
        let mut children: Vec<Value> = (0..files)
            .map(|f| json!({"name": format!("file_{f}.txt"), "type": "file"}))
            .collect();
        if depth > 0 {
            children.extend(
                (0..breadth).map(|d| tree(depth - 1, breadth, files, &format!("dir_{depth}_{d}"))),
            );
        }
        json!({"name": name, "type": "directory", "children": children})
    }

    #[test]
    fn trees_are_descended_and_every_page_is_valid_json() {
        let root: Vec<Value> = (0..9)
            .map(|i| {
                if i < 3 {
                    tree(3, 4, 6, &format!("dir_0_{i}"))
                } else {
                    json!({"name": format!("file_{i}.txt"), "type": "file"})
                }
            })
            .collect();
        let root = Value::Array(root);
        let pages = check_whole(&root, budget(1500, 5000));
        assert!(pages.len() > 10, "{}", pages.len());
        assert!(pages.iter().all(|p| p.form == Form::Items), "no slices");
        // A deep page says where it is and what is around it.
        let deep = pages
            .iter()
            .find(|p| p.path.as_deref() == Some("/0/children/6/children"))
            .unwrap();
        assert_eq!(deep.around.len(), 1);
        assert_eq!(
            deep.around[0].members,
            r#"{"name":"dir_3_0","type":"directory"}"#
        );
        // Around a descended node: each object's members once, with the
        // first page inside it.
        let first_inside = pages
            .iter()
            .find(|p| p.path.as_deref() == Some("/0/children"))
            .unwrap();
        assert_eq!(first_inside.around[0].pointer, "/0");
    }

    #[test]
    fn objects_without_a_bulk_member_are_paged_by_members() {
        let map: serde_json::Map<String, Value> = (0..400)
            .map(|i| {
                (
                    format!("pkg/{i}~x"),
                    json!({"version": format!("1.{i}.0"), "deps": ["a", "b", "c"]}),
                )
            })
            .collect();
        let value = json!({"lockfileVersion": 3, "packages": map, "other": {"k": [1, 2, 3]}});
        let pages = check_whole(&value, budget(600, 3000));
        assert!(pages.iter().any(|p| p.form == Form::Members
            && p.path.as_deref() == Some("/packages")
            && p.header(None).starts_with("members ")));
    }

    #[test]
    fn only_scalars_larger_than_a_page_are_sliced() {
        let big = "x".repeat(30_000);
        let value = json!([{"a": 1}, {"big": big, "n": "ü".repeat(20)}, {"b": 2}]);
        let pages = check_whole(&value, budget(1000, 4000));
        let slices: Vec<&Page> = pages.iter().filter(|p| p.form == Form::Text).collect();
        assert!(!slices.is_empty());
        assert!(slices.iter().all(|p| p.path.as_deref() == Some("/1/big")));
        assert!(
            slices[0]
                .header(None)
                .contains("of the compact JSON at /1/big (one value too large")
        );
        // The string's siblings ride along with its first slice.
        assert_eq!(slices[0].around[0].pointer, "/1");
        assert!(slices[0].around[0].members.contains("ü"));
        // A lone string document is sliced.
        let s = Value::String("y".repeat(10_000));
        let pages = check_whole(&s, budget(1000, 3000));
        assert!(pages.iter().all(|p| p.form == Form::Text));
    }

    #[test]
    fn nesting_beyond_the_descent_limit_is_sliced_not_rescanned() {
        let mut value = json!("leaf ".repeat(2000));
        for i in 0..(MAX_DESCENT + 20) {
            value = json!([i, value]);
        }
        let pages = check_whole(&value, budget(1000, 3000));
        assert!(
            pages
                .iter()
                .any(|p| p.deep && p.header(None).contains("nested too deep"))
        );
    }

    #[test]
    fn text_is_paged_by_lines_and_long_lines_sliced() {
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!("line {i}: some words here ✓\n"));
        }
        text.push_str(&"long ".repeat(5000));
        text.push_str("\ntail without newline");
        let doc = Document::text(text.clone());
        let mut b = budget(800, 3000);
        b.max_lines = Some(40);
        let plan = plan(&doc, None, b);
        let pages = all_pages(&doc, &plan);
        let joined: String = pages.iter().map(|p| p.data.as_str()).collect();
        assert_eq!(joined, text);
        let mut char = 0;
        for p in &pages {
            assert_eq!(p.start, char);
            char = p.end;
            assert!(p.data.matches('\n').count() <= 40);
        }
        assert_eq!(char, doc.chars());
        assert!(pages.iter().any(|p| p.slice_of.is_some()));
    }

    #[test]
    fn a_plan_that_underestimates_serves_continuations() {
        // Hex digits tokenize worse than words: the plan samples the start,
        // middle and end (words) and overestimates what fits of the rest.
        let word = |i: usize| json!(format!("word {}", i % 10));
        let hex = |i: usize| json!(format!("{:x}{:x}", i * 7919, i * 104_729));
        let rows: Vec<Value> = (0..6000)
            .map(|i| match i {
                1000..2500 | 3500..5000 => hex(i),
                _ => word(i),
            })
            .collect();
        let value = Value::Array(rows);
        let pages = check_whole(&value, budget(300, 100_000));
        assert!(pages.iter().any(|p| p.continued));
    }

    #[test]
    fn a_child_far_denser_in_tokens_than_the_sample_is_sliced_when_served() {
        // Words sample at ~3.5 bytes per token; Egyptian hieroglyphs take a
        // token per byte: planned whole by its bytes, the string does not
        // fit by its tokens.
        let mut rows: Vec<Value> = (0..3000)
            .map(|i| json!(format!("word {i} and more words")))
            .collect();
        // Away from the sampled start, middle and end.
        rows.insert(700, json!("𓀀".repeat(300)));
        let value = Value::Array(rows);
        let doc = Document::json(value.to_string()).unwrap();
        let plan = plan(&doc, None, budget(1000, 100_000));
        assert!(
            plan.pages
                .iter()
                .all(|p| matches!(p.segment, Segment::Children { .. })),
            "planned whole by its bytes"
        );
        let pages = check_whole(&value, budget(1000, 100_000));
        let slices: Vec<&Page> = pages.iter().filter(|p| p.form == Form::Text).collect();
        assert!(slices.len() > 1, "the dense string comes in slices");
        assert!(slices.iter().all(|p| p.path.as_deref() == Some("/700")));
        assert!(pages.len() > plan.pages());
    }

    #[test]
    fn paths_choose_containers_and_refuse_small_scalars() {
        let doc = Document::json(r#"{"a":[1,2,3],"b":{"c":[4]},"s":"x"}"#.into()).unwrap();
        let b = budget(1000, 4000);
        assert_eq!(plan(&doc, Some("/b/c"), b).path(), Some("/b/c"));
        assert_eq!(plan(&doc, Some("/b"), b).pages(), 1);
        let err = Plan::new(&doc, Some("/s"), b).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/s` is a string that fits in a page: there is nothing to page there; page the value around it (`\"path\":\"\"`) or read it with jq. Arrays: `/a` (3 items), `/b/c` (1 item)"
        );
        assert!(matches!(
            Plan::new(&doc, Some("/nope"), b),
            Err(PageError::Pointer(_))
        ));
        assert!(matches!(
            Plan::new(&doc, Some("/s/x"), b),
            Err(PageError::Pointer(_))
        ));
        let text = Document::text("a\nb".into());
        assert_eq!(
            Plan::new(&text, Some("/a"), b).unwrap_err(),
            PageError::PathInText
        );
    }

    #[test]
    fn positions_outside_the_plan_are_not_held() {
        let value = json!({"rows": (0..500).collect::<Vec<_>>(), "s": "z".repeat(9000)});
        let doc = Document::json(value.to_string()).unwrap();
        let plan = plan(&doc, None, budget(500, 2000));
        let last = plan.pages() as u64;
        assert!(plan.holds(&doc, plan.start_of(last).unwrap()));
        assert!(!plan.holds(
            &doc,
            Position {
                seg: last,
                ..Position::default()
            }
        ));
        let first = plan.start_of(1).unwrap();
        assert!(!plan.holds(
            &doc,
            Position {
                unit: 10_000,
                ..first
            }
        ));
        assert!(!plan.holds(&doc, Position { byte: 3, ..first }));
    }

    #[test]
    fn empty_targets_have_one_empty_page() {
        for (text, data) in [("[]", "[]"), ("{}", "{}"), (r#"{"a":[]}"#, r#"{"a":[]}"#)] {
            let doc = Document::json(text.into()).unwrap();
            let plan = plan(&doc, None, budget(100, 100));
            let pages = all_pages(&doc, &plan);
            assert_eq!((pages.len(), pages[0].data.as_str()), (1, data));
        }
        let doc = Document::text(String::new());
        let plan = plan(&doc, None, budget(100, 100));
        assert_eq!(all_pages(&doc, &plan)[0].data, "");
    }
}
