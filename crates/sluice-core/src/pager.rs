//! Pages: cutting a stored document into answers that fit a budget,
//! losslessly and in time proportional to the page.
//!
//! A document is paged by *units*: the items of one array (JSON), or the
//! lines of a text. A [`Plan`] groups units into pages for one budget by
//! their byte sizes (known from the index, so planning never tokenizes the
//! document); a unit larger than a page is cut into slices at character
//! boundaries. Serving a page copies only that page and counts its tokens
//! exactly; if the plan's estimate was too generous, the page is shortened
//! and its remainder becomes a continuation reached by the next cursor.
//! Following cursors from the first page therefore yields every unit once,
//! in order, whatever the estimates.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::budget::{Budget, bytes_per_token, count_chars, floor_boundary, tokens_within};
use crate::document::{Document, Items, Kind};
use crate::scan::PointerError;

/// What part of a document is paged.
#[derive(Debug, Clone)]
pub enum Target {
    /// The items of the array at `pointer`.
    Items {
        /// JSON Pointer of the array.
        pointer: String,
        /// Its index.
        items: Arc<Items>,
    },
    /// The lines of a text document.
    Lines,
    /// One JSON value (not an array), as slices of its compact text.
    Value {
        /// JSON Pointer of the value.
        pointer: String,
        /// Its bytes.
        range: Range<usize>,
    },
}

impl Target {
    /// The JSON Pointer paged, `None` for text.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            Target::Items { pointer, .. } | Target::Value { pointer, .. } => Some(pointer),
            Target::Lines => None,
        }
    }
}

/// A place in a paged target: a unit, and an offset inside it when the unit
/// is sliced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    /// The unit (item or line) index.
    pub unit: u64,
    /// Byte offset inside the unit.
    pub byte: u64,
    /// Character offset: into the whole text for lines, into the unit for
    /// a sliced item or value.
    pub char: u64,
}

/// How a page's data is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A JSON array of whole items `start..end` of the array at `path`.
    Items,
    /// The exact substring `start..end` (characters) of a text, or of the
    /// compact JSON of the value at `path`.
    Text,
}

impl Form {
    /// `items` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            Form::Items => "items",
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
    /// The path leads to something that is not an array.
    #[error(
        "`{pointer}` is {what}, not an array{}; `path: \"\"` reads the whole document as text",
        list_arrays(arrays)
    )]
    NotAnArray {
        /// The path.
        pointer: String,
        /// What is there (`a string`, `an object`…).
        what: &'static str,
        /// The document's largest arrays (pointer, items).
        arrays: Vec<(String, usize)>,
    },
    /// A text document was given a path.
    #[error("this stored result is text: it has no `path`; page it with `page` or the cursor")]
    PathInText,
}

fn list_arrays(arrays: &[(String, usize)]) -> String {
    if arrays.is_empty() {
        return ". It has no arrays".into();
    }
    let list: Vec<String> = arrays
        .iter()
        .take(6)
        .map(|(p, n)| format!("`{}` ({} items)", if p.is_empty() { "\"\"" } else { p }, n))
        .collect();
    format!(". Arrays: {}", list.join(", "))
}

/// Chooses what to page: the array at `path`, else the root array, else the
/// largest array, else the whole value as text.
pub fn target(doc: &Document, path: Option<&str>) -> Result<Target, PageError> {
    if doc.kind() == Kind::Text {
        return match path {
            None | Some("") => Ok(Target::Lines),
            Some(_) => Err(PageError::PathInText),
        };
    }
    let pointer = match path {
        Some(p) => p.to_owned(),
        None => match doc.default_array() {
            Some(array) => array.pointer.clone(),
            None => String::new(),
        },
    };
    match doc.items(&pointer)? {
        Some(items) => Ok(Target::Items { pointer, items }),
        None if pointer.is_empty() => Ok(Target::Value {
            pointer,
            range: 0..doc.bytes(),
        }),
        None => {
            let range = doc.resolve(&pointer)?;
            let what = match doc.text_str().as_bytes().get(range.start) {
                Some(b'{') => "an object",
                Some(b'"') => "a string",
                Some(b't' | b'f') => "a boolean",
                Some(b'n') => "null",
                _ => "a number",
            };
            Err(PageError::NotAnArray {
                pointer,
                what,
                arrays: doc
                    .notable_arrays()
                    .iter()
                    .map(|a| (a.pointer.clone(), a.items))
                    .collect(),
            })
        }
    }
}

/// The pages of one target for one budget.
#[derive(Debug)]
pub struct Plan {
    target: Target,
    /// Where each page starts.
    starts: Vec<Position>,
    /// Just past the last unit.
    end: Position,
    /// The byte size a page aims at.
    page_bytes: usize,
    /// The most units in one page (lines, for line-limited clients).
    max_units: usize,
    /// Characters of the units cut into slices, by unit.
    sliced_chars: HashMap<u64, u64>,
    /// The budget of a page's data.
    budget: Budget,
}

/// The most bytes of a document sampled to estimate bytes per token.
const SAMPLE: usize = 8 * 1024;

impl Plan {
    /// Plans the pages of `target` in `doc` for data within `budget` (the
    /// caller's budget less what the page's wrapper takes).
    pub fn new(doc: &Document, target: Target, budget: Budget) -> Self {
        let text = doc.text_str();
        let sample = match &target {
            Target::Items { items, .. } => &text[items.range.clone()],
            Target::Value { range, .. } => &text[range.clone()],
            Target::Lines => text,
        };
        let per_token = bytes_per_token(sample, SAMPLE);
        // 10 % below the estimate: serving shortens a page that still does
        // not fit, but that costs a continuation.
        let by_tokens = f64::from(budget.max_tokens) / f64::from(budget.token_factor.max(0.01))
            * f64::from(per_token)
            * 0.9;
        // Bytes never undercount characters.
        let page_bytes = (by_tokens as usize)
            .min(budget.max_chars as usize)
            .saturating_sub(2) // the brackets of an items page
            .max(16);
        let max_units = match (&target, budget.max_lines) {
            (Target::Lines, Some(lines)) => lines.max(1) as usize,
            _ => usize::MAX,
        };
        let mut plan = Self {
            target,
            starts: Vec::new(),
            end: Position::default(),
            page_bytes,
            max_units,
            sliced_chars: HashMap::new(),
            budget,
        };
        plan.lay_out(doc);
        plan
    }

    /// Groups units into pages, greedily by bytes.
    fn lay_out(&mut self, doc: &Document) {
        let units = self.units(doc);
        let mut chars = 0u64; // running characters, for lines
        let mut page_bytes = 0usize;
        let mut page_units = 0usize;
        for unit in 0..units {
            let range = self.unit(doc, unit);
            let len = range.len();
            let separator =
                usize::from(matches!(self.target, Target::Items { .. }) && page_units > 0);
            let unit_chars = || count_chars(&doc.text_str()[range.clone()]) as u64;
            if len > self.page_bytes {
                // A unit larger than a page: its own pages, one slice each.
                let unit_text = &doc.text_str()[range.clone()];
                let mut byte = 0;
                let mut char_in_unit = 0u64;
                while byte < len {
                    let end = floor_boundary(unit_text, byte + self.page_bytes);
                    let end = if end <= byte {
                        next_boundary(unit_text, byte)
                    } else {
                        end
                    };
                    let base = if matches!(self.target, Target::Lines) {
                        chars
                    } else {
                        0
                    };
                    self.starts.push(Position {
                        unit: unit as u64,
                        byte: byte as u64,
                        char: base + char_in_unit,
                    });
                    char_in_unit += count_chars(&unit_text[byte..end]) as u64;
                    byte = end;
                }
                self.sliced_chars.insert(unit as u64, char_in_unit);
                chars += char_in_unit;
                page_bytes = 0;
                page_units = 0;
                continue;
            }
            if page_units == 0
                || page_bytes + separator + len > self.page_bytes
                || page_units >= self.max_units
            {
                self.starts.push(Position {
                    unit: unit as u64,
                    byte: 0,
                    char: chars,
                });
                page_bytes = len;
                page_units = 1;
            } else {
                page_bytes += separator + len;
                page_units += 1;
            }
            if matches!(self.target, Target::Lines) {
                chars += unit_chars();
            }
        }
        if self.starts.is_empty() {
            // An empty array or text still has one (empty) page.
            self.starts.push(Position::default());
        }
        self.end = Position {
            unit: units as u64,
            byte: 0,
            char: chars,
        };
    }

    fn units(&self, doc: &Document) -> usize {
        match &self.target {
            Target::Items { items, .. } => items.len(),
            Target::Lines => doc.line_starts().len(),
            Target::Value { .. } => 1,
        }
    }

    /// The bytes of unit `i` in the document.
    fn unit(&self, doc: &Document, i: usize) -> Range<usize> {
        match &self.target {
            Target::Items { items, .. } => items.item(i),
            Target::Lines => {
                let starts = doc.line_starts();
                let start = starts[i] as usize;
                let end = starts.get(i + 1).map_or(doc.bytes(), |&s| s as usize);
                start..end
            }
            Target::Value { range, .. } => range.clone(),
        }
    }

    /// How many pages.
    pub fn pages(&self) -> usize {
        self.starts.len()
    }

    /// What is paged.
    pub fn target(&self) -> &Target {
        &self.target
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
            .and_then(|i| self.starts.get(i).copied())
            .ok_or(PageError::OutOfRange {
                page,
                pages: self.pages(),
            })
    }

    /// The 1-based page that holds `at`.
    fn page_of(&self, at: Position) -> usize {
        self.starts
            .partition_point(|s| (s.unit, s.byte) <= (at.unit, at.byte))
            .max(1)
    }

    /// Whether `at` is a position this plan could have produced.
    pub fn holds(&self, doc: &Document, at: Position) -> bool {
        if at.unit >= self.end.unit {
            return false;
        }
        let range = self.unit(doc, at.unit as usize);
        (at.byte as usize) < range.len().max(1)
            && doc
                .text_str()
                .is_char_boundary(range.start + at.byte as usize)
    }

    /// Serves the page that starts at `from`.
    pub fn serve(&self, doc: &Document, from: Position) -> Page {
        let page = self.page_of(from);
        let planned_end = self.starts.get(page).copied().unwrap_or(self.end);
        let unit = from.unit as usize;
        let sliced = from.byte > 0 || self.sliced_chars.contains_key(&from.unit);
        let mut served = if sliced {
            None
        } else {
            self.serve_units(doc, from, planned_end)
        };
        if served.is_none() {
            served = Some(self.serve_slice(doc, from, planned_end, unit));
        }
        let mut served = served.expect("a page is always served");
        served.page = page;
        served.pages = self.pages();
        served.continued = self.starts.get(page - 1) != Some(&from);
        served.next = (served.next_at.unit < self.end.unit).then_some(served.next_at);
        served
    }

    /// Whole units `from..planned_end`, as many as fit; `None` when not even
    /// the first one fits (it is then sliced).
    fn serve_units(&self, doc: &Document, from: Position, planned_end: Position) -> Option<Page> {
        let first = from.unit as usize;
        let last = (planned_end.unit as usize)
            .max(first + 1)
            .min(self.units(doc));
        if first >= last {
            // An empty target: one empty page.
            return Some(self.units_page(doc, from, first, first));
        }
        let mut n = last - first;
        let mut page = self.units_page(doc, from, first, first + n);
        if self.fits(&page.data) {
            return Some(page);
        }
        // Shorten: the largest count that fits (binary search).
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if self.fits(&self.units_page(doc, from, first, first + mid).data) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            return None;
        }
        n = lo;
        page = self.units_page(doc, from, first, first + n);
        Some(page)
    }

    fn units_page(&self, doc: &Document, from: Position, a: usize, b: usize) -> Page {
        let text = doc.text_str();
        match &self.target {
            Target::Items { pointer, items } => {
                let data = if a == b {
                    "[]".to_owned()
                } else {
                    let span = &text[items.span(a, b)];
                    let mut data = String::with_capacity(span.len() + 2);
                    data.push('[');
                    data.push_str(span);
                    data.push(']');
                    data
                };
                Page::new(
                    data,
                    Form::Items,
                    Some(pointer.clone()),
                    a as u64,
                    b as u64,
                    items.len() as u64,
                )
                .next_at(Position {
                    unit: b as u64,
                    byte: 0,
                    char: 0,
                })
            }
            Target::Lines => {
                let range = if a == b {
                    0..0
                } else {
                    self.unit(doc, a).start..self.unit(doc, b - 1).end
                };
                let data = text[range].to_owned();
                let end_char = from.char + count_chars(&data) as u64;
                let mut page = Page::new(data, Form::Text, None, from.char, end_char, doc.chars())
                    .next_at(Position {
                        unit: b as u64,
                        byte: 0,
                        char: end_char,
                    });
                page.lines = Some((a as u64, b as u64, doc.line_starts().len() as u64));
                page
            }
            Target::Value { .. } => unreachable!("a value is always sliced"),
        }
    }

    /// A slice of unit `unit` from `from.byte`, as long as fits.
    fn serve_slice(
        &self,
        doc: &Document,
        from: Position,
        planned_end: Position,
        unit: usize,
    ) -> Page {
        let range = self.unit(doc, unit);
        let unit_text = &doc.text_str()[range];
        let start = from.byte as usize;
        let mut end = if planned_end.unit == from.unit && planned_end.byte > from.byte {
            planned_end.byte as usize
        } else {
            unit_text.len().min(start + self.page_bytes)
        };
        end = floor_boundary(unit_text, end);
        if end <= start {
            end = next_boundary(unit_text, start);
        }
        if !self.fits(&unit_text[start..end]) {
            // Shorten to the longest prefix that fits (binary search on bytes).
            let (mut lo, mut hi) = (start, end);
            while hi - lo > 1 {
                let mid = floor_boundary(unit_text, lo + (hi - lo) / 2);
                if mid <= lo {
                    break;
                }
                if self.fits(&unit_text[start..mid]) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            end = if lo > start {
                lo
            } else {
                next_boundary(unit_text, start)
            };
        }
        let data = unit_text[start..end].to_owned();
        let chars = count_chars(&data) as u64;
        let (path, total) = match &self.target {
            Target::Items { pointer, .. } => {
                let mut path = pointer.clone();
                path.push('/');
                path.push_str(&unit.to_string());
                (Some(path), self.unit_chars(doc, unit))
            }
            Target::Value { pointer, .. } => (Some(pointer.clone()), self.unit_chars(doc, unit)),
            Target::Lines => (None, doc.chars()),
        };
        let next_at = if end >= unit_text.len() {
            let char = if matches!(self.target, Target::Lines) {
                from.char + chars
            } else {
                0
            };
            Position {
                unit: from.unit + 1,
                byte: 0,
                char,
            }
        } else {
            Position {
                unit: from.unit,
                byte: end as u64,
                char: from.char + chars,
            }
        };
        let mut page =
            Page::new(data, Form::Text, path, from.char, from.char + chars, total).next_at(next_at);
        page.slice_of = Some(from.unit);
        if matches!(self.target, Target::Lines) {
            page.lines = Some((from.unit, from.unit + 1, doc.line_starts().len() as u64));
        }
        page
    }

    fn unit_chars(&self, doc: &Document, unit: usize) -> u64 {
        self.sliced_chars
            .get(&(unit as u64))
            .copied()
            .unwrap_or_else(|| count_chars(&doc.text_str()[self.unit(doc, unit)]) as u64)
    }

    /// Whether `data` fits the page budget.
    fn fits(&self, data: &str) -> bool {
        if data.len() as u64 > u64::from(self.budget.max_chars)
            && count_chars(data) as u64 > u64::from(self.budget.max_chars)
        {
            return false;
        }
        if self.max_units != usize::MAX
            && memchr::memchr_iter(b'\n', data.as_bytes()).count() > self.max_units
        {
            return false;
        }
        tokens_within(data, self.budget.token_factor, self.budget.max_tokens).is_some()
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
    /// The array (items) or the value (a slice) paged; `None` for text.
    pub path: Option<String>,
    /// First item, or first character.
    pub start: u64,
    /// Past the last item, or past the last character.
    pub end: u64,
    /// Items in the array, or characters in the text or value.
    pub total: u64,
    /// Text documents: lines `start..end` of `total`.
    pub lines: Option<(u64, u64, u64)>,
    /// Set when this is a slice of one unit (item or line), its index.
    pub slice_of: Option<u64>,
    /// 1-based page number.
    pub page: usize,
    /// Pages in the plan.
    pub pages: usize,
    /// Whether this page began inside a planned page (a continuation).
    pub continued: bool,
    /// Where the next page starts; `None` after the last.
    pub next: Option<Position>,
    next_at: Position,
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
            page: 1,
            pages: 1,
            continued: false,
            next: None,
            next_at: Position::default(),
        }
    }

    fn next_at(mut self, at: Position) -> Self {
        self.next_at = at;
        self
    }

    /// The one-line context header: where this page is and how to go on,
    /// e.g. `items 251–500 of 12,480 at /tree · page 2 of 50 · next: …`.
    pub fn header(&self, next_call: Option<&str>) -> String {
        use crate::format::group;
        let mut out = match (self.form, &self.lines) {
            (Form::Items, _) => format!(
                "items {}–{} of {} at {}",
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
            out.push_str(" (one ");
            out.push_str(if self.lines.is_some() {
                "line"
            } else {
                "value"
            });
            out.push_str(" too large for a page, in slices)");
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
        out
    }
}

fn display_path(path: Option<&str>) -> &str {
    match path {
        Some("") | None => "the root",
        Some(p) => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(tokens: u32, chars: u32) -> Budget {
        Budget {
            max_tokens: tokens,
            max_chars: chars,
            max_lines: None,
            token_factor: 1.25,
        }
    }

    /// Follows the cursor chain from page 1 and returns every page.
    fn all_pages(doc: &Document, plan: &Plan) -> Vec<Page> {
        let mut pages = Vec::new();
        let mut at = Some(plan.start_of(1).unwrap());
        while let Some(from) = at {
            let page = plan.serve(doc, from);
            assert!(
                plan.fits(&page.data),
                "page over budget: {}",
                page.data.len()
            );
            at = page.next;
            pages.push(page);
            assert!(pages.len() < 100_000, "no progress");
        }
        pages
    }

    /// Reassembles the paged array from items pages and slices.
    fn reassemble_items(pages: &[Page]) -> Vec<serde_json::Value> {
        let mut items = Vec::new();
        let mut slice = String::new();
        for page in pages {
            match page.form {
                Form::Items => {
                    let v: Vec<serde_json::Value> = serde_json::from_str(&page.data).unwrap();
                    items.extend(v);
                }
                Form::Text => {
                    slice.push_str(&page.data);
                    if page.end == page.total {
                        items.push(serde_json::from_str(&slice).unwrap());
                        slice.clear();
                    }
                }
            }
        }
        items
    }

    #[test]
    fn an_array_of_records_reassembles_exactly() {
        let rows: Vec<serde_json::Value> = (0..2000)
            .map(|i| serde_json::json!({"id": i, "name": format!("row {i} é"), "tags": ["a", "b"]}))
            .collect();
        let json = serde_json::to_string_pretty(&serde_json::json!({"count": 2000, "rows": rows}))
            .unwrap();
        let doc = Document::json(json).unwrap();
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(2000, 6000));
        assert!(plan.pages() > 5);
        let pages = all_pages(&doc, &plan);
        assert_eq!(
            pages.len(),
            plan.pages(),
            "estimates held: no continuation needed"
        );
        assert_eq!(reassemble_items(&pages), rows);
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

    #[test]
    fn items_too_large_are_sliced_and_reassemble() {
        let big = "x".repeat(30_000);
        let items = serde_json::json!([{"a": 1}, {"big": big, "n": "ü".repeat(5000)}, {"b": 2}]);
        let doc = Document::json(items.to_string()).unwrap();
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(1000, 4000));
        let pages = all_pages(&doc, &plan);
        assert!(
            pages
                .iter()
                .any(|p| p.form == Form::Text && p.path.as_deref() == Some("/1"))
        );
        assert_eq!(reassemble_items(&pages), items.as_array().unwrap().clone());
        let slice = pages.iter().find(|p| p.form == Form::Text).unwrap();
        assert!(
            slice
                .header(None)
                .contains("of the compact JSON at /1 (one value too large")
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
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), b);
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
        // Digits tokenize badly: make the estimate wrong by sampling text
        // of another kind, then check nothing is lost.
        let mut rows: Vec<serde_json::Value> = (0..50)
            .map(|i| serde_json::json!(format!("word {i}")))
            .collect();
        rows.extend(
            (0..300).map(|i| serde_json::json!(format!("{:x}{:x}", i * 7919, i * 104_729))),
        );
        rows.extend((0..50).map(|i| serde_json::json!(format!("word {i}"))));
        let doc = Document::json(serde_json::Value::Array(rows.clone()).to_string()).unwrap();
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(300, 100_000));
        let pages = all_pages(&doc, &plan);
        assert_eq!(reassemble_items(&pages), rows);
    }

    #[test]
    fn paths_choose_arrays_and_refuse_other_values() {
        let doc = Document::json(r#"{"a":[1,2,3],"b":{"c":[4]},"s":"x"}"#.into()).unwrap();
        assert!(matches!(
            target(&doc, Some("/b/c")),
            Ok(Target::Items { .. })
        ));
        assert!(matches!(target(&doc, Some("")), Ok(Target::Value { .. })));
        let err = target(&doc, Some("/s")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`/s` is a string, not an array. Arrays: `/a` (3 items), `/b/c` (1 items); `path: \"\"` reads the whole document as text"
        );
        assert!(matches!(
            target(&doc, Some("/nope")),
            Err(PageError::Pointer(_))
        ));
        let text = Document::text("a\nb".into());
        assert_eq!(
            target(&text, Some("/a")).unwrap_err(),
            PageError::PathInText
        );
    }

    #[test]
    fn a_document_without_arrays_is_sliced_whole() {
        let value = serde_json::json!({"text": "y".repeat(10_000), "n": 1});
        let doc = Document::json(value.to_string()).unwrap();
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(1000, 3000));
        let pages = all_pages(&doc, &plan);
        let joined: String = pages.iter().map(|p| p.data.as_str()).collect();
        assert_eq!(joined, doc.text_str());
        assert!(
            pages
                .iter()
                .all(|p| p.form == Form::Text && p.path.as_deref() == Some(""))
        );
    }

    #[test]
    fn empty_targets_have_one_empty_page() {
        let doc = Document::json("[]".into()).unwrap();
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(100, 100));
        let pages = all_pages(&doc, &plan);
        assert_eq!((pages.len(), pages[0].data.as_str()), (1, "[]"));
        let doc = Document::text(String::new());
        let plan = Plan::new(&doc, target(&doc, None).unwrap(), budget(100, 100));
        assert_eq!(all_pages(&doc, &plan)[0].data, "");
    }
}
