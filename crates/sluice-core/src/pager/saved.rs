//! A page plan as a store keeps it beside a document's frames, and the
//! [`Window`] one page is served from: what makes a page of a document
//! kept outside memory (disk, Redis, zstd frames) O(page) to serve.
//!
//! A [`Plan`] made from the whole document is saved without its item
//! offsets ([`save`]): each planned page keeps the bytes it spans (its
//! extent) and how its container, lines or slice continue. Read back
//! ([`SavedPlan::restore`]), it tells which bytes one page needs
//! ([`SavedPlan::needs`]); a store reads only the frames holding them, and
//! the page's children or lines are found again in those bytes
//! ([`SavedPlan::window`]). The page served is the one the whole
//! document's plan serves: the same data, the same next cursor.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{AroundSpan, Container, Page, PageError, Plan, Planned, Position, Segment, Source};
use crate::budget::Budget;
use crate::document::{Document, Items, PlanKey};
use crate::scan;

/// The version of the saved form.
const FORMAT: u32 = 1;

/// What [`save`] writes (JSON).
#[derive(Serialize, Deserialize)]
struct Saved {
    format: u32,
    path: Option<String>,
    page_bytes: usize,
    sure_bytes: usize,
    /// `None`: no limit.
    max_lines: Option<usize>,
    /// Tokens, characters, lines (0: none), the token factor's bits.
    budget: (u32, u32, u32, u32),
    /// The whole text: bytes, characters, lines.
    bytes: usize,
    chars: u64,
    lines: u64,
    /// Pointer, object, start, end, how many children.
    containers: Vec<(String, bool, usize, usize, usize)>,
    pages: Vec<SavedPage>,
}

#[derive(Serialize, Deserialize)]
struct SavedPage {
    segment: SavedSegment,
    around: Vec<SavedAround>,
    extent: (usize, usize),
}

/// An [`AroundSpan`]: pointer, key, index, before, after.
type SavedAround = (String, String, usize, (usize, usize), (usize, usize));

#[derive(Serialize, Deserialize)]
enum SavedSegment {
    /// A container's index in `containers`, children `a..b`.
    Children(usize, u64, u64),
    Slice {
        pointer: String,
        value: (usize, usize),
        from: u64,
        to: u64,
        char_from: u64,
        chars: u64,
        deep: bool,
    },
    /// Lines `a..b`, from character `char_from`.
    Lines(u64, u64, u64),
    LineSlice {
        line: u64,
        from: u64,
        to: u64,
        char_from: u64,
        bytes: (usize, usize),
    },
}

fn pair(r: &Range<usize>) -> (usize, usize) {
    (r.start, r.end)
}

fn range((a, b): (usize, usize)) -> Range<usize> {
    a..b
}

/// The key a plan of `path` for page data within `budget` is kept under.
pub fn plan_key(path: Option<&str>, budget: Budget) -> String {
    key_text(&super::plan_key_of(path, budget))
}

/// [`plan_key`] of what a document keys its plans by (the path as asked:
/// `None` and `""` plan alike, but are asked apart).
fn key_text((path, tokens, chars, lines, factor): &PlanKey) -> String {
    format!(
        "{tokens}.{chars}.{lines}.{factor:x}{}",
        match path {
            None => "t".to_owned(),
            Some(p) => format!("p{p}"),
        }
    )
}

/// `plan` of `doc`, as a store keeps it beside the document's frames.
pub fn save(plan: &Plan, doc: &Document) -> Vec<u8> {
    let mut containers: Vec<(String, bool, usize, usize, usize)> = Vec::new();
    let mut seen: Vec<*const Container> = Vec::new();
    let pages = plan
        .pages
        .iter()
        .map(|planned| {
            let segment = match &planned.segment {
                Segment::Children { container, a, b } => {
                    let ptr = Arc::as_ptr(container);
                    let index = seen.iter().position(|&p| p == ptr).unwrap_or_else(|| {
                        seen.push(ptr);
                        containers.push((
                            container.pointer.clone(),
                            container.object,
                            container.range.start,
                            container.range.end,
                            container.total,
                        ));
                        containers.len() - 1
                    });
                    SavedSegment::Children(index, *a, *b)
                }
                Segment::Slice {
                    pointer,
                    value,
                    from,
                    to,
                    char_from,
                    chars,
                    deep,
                } => SavedSegment::Slice {
                    pointer: pointer.clone(),
                    value: pair(value),
                    from: *from,
                    to: *to,
                    char_from: *char_from,
                    chars: *chars,
                    deep: *deep,
                },
                Segment::Lines { a, b, char_from } => SavedSegment::Lines(*a, *b, *char_from),
                Segment::LineSlice {
                    line,
                    from,
                    to,
                    char_from,
                    bytes,
                } => SavedSegment::LineSlice {
                    line: *line,
                    from: *from,
                    to: *to,
                    char_from: *char_from,
                    bytes: pair(bytes),
                },
            };
            SavedPage {
                segment,
                around: planned
                    .around
                    .iter()
                    .map(|a| {
                        (
                            a.pointer.clone(),
                            a.key.clone(),
                            a.index,
                            pair(&a.before),
                            pair(&a.after),
                        )
                    })
                    .collect(),
                extent: pair(&planned.extent),
            }
        })
        .collect();
    let budget = plan.budget;
    let saved = Saved {
        format: FORMAT,
        path: plan.path.clone(),
        page_bytes: plan.page_bytes,
        sure_bytes: plan.sure_bytes,
        max_lines: (plan.max_lines != usize::MAX).then_some(plan.max_lines),
        budget: (
            budget.max_tokens,
            budget.max_chars,
            budget.max_lines.unwrap_or(0),
            budget.token_factor.to_bits(),
        ),
        bytes: doc.bytes(),
        chars: doc.chars(),
        lines: doc.line_starts().len() as u64,
        containers,
        pages,
    };
    serde_json::to_vec(&saved).unwrap_or_default()
}

/// The plans `doc` has made so far, saved, with their keys.
pub fn saved_plans(doc: &Document) -> Vec<(String, Vec<u8>)> {
    let plans = doc.lock_plans();
    plans
        .iter()
        .filter_map(|(key, plan)| Some((key, plan.clone().downcast::<Plan>().ok()?)))
        .map(|(key, plan)| (key_text(key), save(&plan, doc)))
        .collect()
}

/// A plan read back from a store, with what it knows of the whole text.
#[derive(Debug)]
pub struct SavedPlan {
    plan: Plan,
    bytes: usize,
    chars: u64,
    lines: u64,
}

/// Where a read starts: a page number, or a cursor's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Page `n`, 1-based.
    Page(u64),
    /// A position from a cursor.
    At(Position),
}

/// Why a page cannot be served from a saved plan.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    /// A page number past the plan.
    #[error(transparent)]
    Page(#[from] PageError),
    /// A position the plan could not have produced.
    #[error("the position is not in this plan")]
    Position,
    /// The bytes read back do not hold what the plan says (a damaged
    /// store, or a plan saved for another document).
    #[error("the stored document does not match its page plan: {0}")]
    Damaged(String),
}

impl SavedPlan {
    /// A plan [`save`] wrote, if `bytes` read as one whose every range is
    /// within the text it describes (else the caller plans again from the
    /// whole document).
    pub fn restore(bytes: &[u8]) -> Option<SavedPlan> {
        let saved: Saved = serde_json::from_slice(bytes).ok()?;
        let max_chars = saved.budget.1 as usize;
        if saved.format != FORMAT
            || saved.pages.is_empty()
            || saved.chars > saved.bytes as u64
            || saved.lines > saved.bytes as u64 + 1
            // What the plan's page sizes derive from (a page surely fits
            // its bytes up to `sure_bytes`: never more than the budget's).
            || saved.page_bytes > max_chars.max(16)
            || saved.sure_bytes > max_chars
        {
            return None;
        }
        let within = |r: (usize, usize)| r.0 <= r.1 && r.1 <= saved.bytes;
        // Bytes `from..to` of the value or line at `r`.
        let sliced = |r: (usize, usize), from: u64, to: u64| {
            within(r) && from <= to && to <= (r.1 - r.0) as u64
        };
        let containers: Vec<Arc<Container>> = saved
            .containers
            .into_iter()
            .map(|(pointer, object, start, end, total)| {
                // Brackets around children that are at least one byte each.
                (within((start, end)) && start.saturating_add(2).saturating_add(total) <= end).then(
                    || {
                        Arc::new(Container {
                            pointer,
                            object,
                            range: start..end,
                            total,
                            children: None,
                        })
                    },
                )
            })
            .collect::<Option<_>>()?;
        let mut pages = Vec::with_capacity(saved.pages.len());
        for page in saved.pages {
            if !within(page.extent) {
                return None;
            }
            let segment = match page.segment {
                SavedSegment::Children(index, a, b) => {
                    let container = containers.get(index)?;
                    let inside = container.range.start < page.extent.0
                        && page.extent.1 < container.range.end;
                    if a > b
                        || b > container.total as u64
                        || (a == b) != (page.extent.0 == page.extent.1)
                        || (a < b && !inside)
                    {
                        return None;
                    }
                    Segment::Children {
                        container: container.clone(),
                        a,
                        b,
                    }
                }
                SavedSegment::Slice {
                    pointer,
                    value,
                    from,
                    to,
                    char_from,
                    chars,
                    deep,
                } => {
                    if !sliced(value, from, to)
                        || page.extent != (value.0 + from as usize, value.0 + to as usize)
                        || char_from > chars
                        || chars > saved.bytes as u64
                    {
                        return None;
                    }
                    Segment::Slice {
                        pointer,
                        value: range(value),
                        from,
                        to,
                        char_from,
                        chars,
                        deep,
                    }
                }
                SavedSegment::Lines(a, b, char_from) => {
                    if a > b || b > saved.lines || char_from > saved.chars {
                        return None;
                    }
                    Segment::Lines { a, b, char_from }
                }
                SavedSegment::LineSlice {
                    line,
                    from,
                    to,
                    char_from,
                    bytes,
                } => {
                    if !sliced(bytes, from, to)
                        || page.extent != (bytes.0 + from as usize, bytes.0 + to as usize)
                        || line >= saved.lines
                        || char_from > saved.chars
                    {
                        return None;
                    }
                    Segment::LineSlice {
                        line,
                        from,
                        to,
                        char_from,
                        bytes: range(bytes),
                    }
                }
            };
            let mut around = Vec::with_capacity(page.around.len());
            for (pointer, key, index, before, after) in page.around {
                if !within(before) || !within(after) {
                    return None;
                }
                around.push(AroundSpan {
                    pointer,
                    key,
                    index,
                    before: range(before),
                    after: range(after),
                });
            }
            pages.push(Planned {
                segment,
                around,
                extent: range(page.extent),
            });
        }
        let (tokens, chars, lines, factor) = saved.budget;
        Some(SavedPlan {
            plan: Plan {
                path: saved.path,
                pages,
                page_bytes: saved.page_bytes,
                sure_bytes: saved.sure_bytes,
                max_lines: saved.max_lines.unwrap_or(usize::MAX),
                tokenize_left: 0,
                budget: Budget {
                    max_tokens: tokens,
                    max_chars: chars,
                    max_lines: (lines > 0).then_some(lines),
                    token_factor: f32::from_bits(factor),
                },
            },
            bytes: saved.bytes,
            chars: saved.chars,
            lines: saved.lines,
        })
    }

    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Bytes of the text it plans.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Memory held, approximately.
    pub fn memory(&self) -> usize {
        self.plan.memory()
    }

    /// The page `start` names (0-based) and the bytes of the document
    /// serving it reads, in order, none overlapping.
    pub fn needs(&self, start: Start) -> Result<(usize, Vec<Range<usize>>), WindowError> {
        let seg = match start {
            Start::Page(n) => self.plan.start_of(n)?.seg as usize,
            Start::At(at) => usize::try_from(at.seg)
                .ok()
                .filter(|&s| s < self.plan.pages())
                .ok_or(WindowError::Position)?,
        };
        let planned = &self.plan.pages[seg];
        let mut ranges: Vec<Range<usize>> = std::iter::once(planned.extent.clone())
            .chain(
                planned
                    .around
                    .iter()
                    .flat_map(|a| [a.before.clone(), a.after.clone()]),
            )
            .filter(|r| !r.is_empty())
            .collect();
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        Ok((seg, merged))
    }

    /// Page `start` served from `pieces`: the bytes [`SavedPlan::needs`]
    /// named for it, each with its offset in the document.
    pub fn serve(&self, start: Start, pieces: Vec<(usize, String)>) -> Result<Page, WindowError> {
        let (seg, _) = self.needs(start)?;
        let window = self.window(seg, pieces)?;
        let from = match start {
            Start::Page(n) => self.plan.start_of(n)?,
            Start::At(at) => {
                if !self.plan.holds_in(&window, at) {
                    return Err(WindowError::Position);
                }
                at
            }
        };
        Ok(self.plan.serve_in(&window, from))
    }

    /// The window of page `seg` over `pieces`: the page's children or
    /// lines found again in its bytes.
    fn window(&self, seg: usize, pieces: Vec<(usize, String)>) -> Result<Window, WindowError> {
        let mut window = Window {
            pieces,
            bytes: self.bytes,
            chars: self.chars,
            lines: self.lines,
            first_line: 0,
            line_starts: Vec::new(),
            children: None,
        };
        let planned = &self.plan.pages[seg];
        let extent = planned.extent.clone();
        let held = window.text(extent.clone());
        if held.len() != extent.len() {
            return Err(WindowError::Damaged(format!(
                "bytes {}..{} were not read back",
                extent.start, extent.end
            )));
        }
        let mut children = None;
        let mut first_line = 0;
        let mut line_starts = Vec::new();
        match &planned.segment {
            Segment::Children { container, a, b } => {
                let mut starts: Vec<u64> = scan::child_starts(held, container.object)
                    .into_iter()
                    .map(|s| s + extent.start as u64)
                    .collect();
                if starts.len() as u64 != b - a {
                    return Err(WindowError::Damaged(format!(
                        "page {} holds {} children, not {}",
                        seg + 1,
                        starts.len(),
                        b - a
                    )));
                }
                if (*b as usize) < container.total {
                    // Where the next child starts, past the comma: it ends
                    // the page's last one.
                    starts.push(extent.end as u64 + 1);
                }
                children = Some(Arc::new(Items::part(
                    container.range.clone(),
                    *a as usize,
                    container.total,
                    starts,
                )));
            }
            Segment::Lines { a, .. } => {
                first_line = *a;
                line_starts.push(extent.start as u64);
                line_starts.extend(
                    memchr::memchr_iter(b'\n', held.as_bytes())
                        .map(|i| (extent.start + i + 1) as u64)
                        .filter(|&s| (s as usize) < self.bytes),
                );
            }
            Segment::Slice { .. } | Segment::LineSlice { .. } => {}
        }
        window.children = children;
        window.first_line = first_line;
        window.line_starts = line_starts;
        Ok(window)
    }
}

/// The bytes of a document one page needs, each piece at its offset in the
/// document, and what is known of the whole.
#[derive(Debug)]
pub struct Window {
    /// By offset.
    pieces: Vec<(usize, String)>,
    bytes: usize,
    chars: u64,
    lines: u64,
    /// Text: where lines `first_line..` of the page start.
    first_line: u64,
    line_starts: Vec<u64>,
    /// JSON: the children of the page's container.
    children: Option<Arc<Items>>,
}

impl Window {
    /// The piece holding `at` (its end included).
    fn piece(&self, at: usize) -> Option<&(usize, String)> {
        let i = self.pieces.partition_point(|(base, _)| *base <= at);
        let piece = self.pieces.get(i.checked_sub(1)?)?;
        (at <= piece.0 + piece.1.len()).then_some(piece)
    }
}

impl Source for Window {
    fn text(&self, range: Range<usize>) -> &str {
        if range.is_empty() {
            return "";
        }
        self.piece(range.start)
            .and_then(|(base, text)| text.get(range.start - base..range.end.checked_sub(*base)?))
            .unwrap_or("")
    }

    fn is_char_boundary(&self, at: usize) -> bool {
        self.piece(at)
            .is_some_and(|(base, text)| text.is_char_boundary(at - base))
    }

    fn bytes(&self) -> usize {
        self.bytes
    }

    fn chars(&self) -> u64 {
        self.chars
    }

    fn line_start(&self, line: u64) -> Option<u64> {
        if line >= self.lines {
            return None;
        }
        let i = usize::try_from(line.checked_sub(self.first_line)?).ok()?;
        self.line_starts.get(i).copied()
    }

    fn lines(&self) -> u64 {
        self.lines
    }

    fn children(&self, container: &Container) -> Arc<Items> {
        self.children
            .clone()
            .unwrap_or_else(|| Arc::new(Items::part(container.range.clone(), 0, 0, Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget() -> Budget {
        Budget {
            max_tokens: 400,
            max_chars: 1600,
            max_lines: None,
            token_factor: 1.0,
        }
    }

    fn doc() -> Document {
        let rows: Vec<String> = (0..2000)
            .map(|i| format!(r#"{{"id":{i},"name":"row {i} é"}}"#))
            .collect();
        Document::json(format!(r#"{{"n":2000,"rows":[{}]}}"#, rows.join(","))).unwrap()
    }

    /// The bytes `needs` names for `start`, from `text`.
    fn pieces(saved: &SavedPlan, start: Start, text: &str) -> Vec<(usize, String)> {
        let (_, ranges) = saved.needs(start).unwrap();
        ranges
            .into_iter()
            .map(|r| (r.start, text[r].to_owned()))
            .collect()
    }

    #[test]
    fn a_plan_that_does_not_fit_its_text_is_not_read_back() {
        let doc = doc();
        let plan = doc.plan(None, budget()).unwrap();
        let bytes = save(&plan, &doc);
        assert!(SavedPlan::restore(&bytes).is_some());
        assert!(SavedPlan::restore(b"not json").is_none());
        assert!(SavedPlan::restore(b"{}").is_none());
        // A range past the text, a segment past its container, another
        // format: each refused, so the caller plans from the document.
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["pages"][0]["extent"][1] = (doc.bytes() + 1).into();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["pages"][0]["segment"]["Children"][2] = 1_000_000.into();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["pages"][1]["extent"][1] = value["pages"][1]["extent"][0].clone();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["containers"][0][2] = 0.into();
        value["containers"][0][3] = 0.into();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["sure_bytes"] = 1_000_000_000.into();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
        let mut value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        value["format"] = 99.into();
        assert!(SavedPlan::restore(&serde_json::to_vec(&value).unwrap()).is_none());
    }

    #[test]
    fn bytes_that_do_not_hold_the_page_are_refused_not_served() {
        let doc = doc();
        let text = doc.text_str();
        let plan = doc.plan(None, budget()).unwrap();
        let saved = SavedPlan::restore(&save(&plan, &doc)).unwrap();
        let start = Start::Page(3);
        let want = plan.serve(&doc, plan.start_of(3).unwrap());
        assert_eq!(
            saved.serve(start, pieces(&saved, start, text)).unwrap(),
            want
        );
        // Missing, shortened, or other bytes in their place.
        assert!(matches!(
            saved.serve(start, Vec::new()),
            Err(WindowError::Damaged(_))
        ));
        let mut short = pieces(&saved, start, text);
        short[0].1.pop();
        assert!(matches!(
            saved.serve(start, short),
            Err(WindowError::Damaged(_))
        ));
        let mut other = pieces(&saved, start, text);
        let len = other[0].1.len();
        other[0].1 = "x".repeat(len);
        assert!(matches!(
            saved.serve(start, other),
            Err(WindowError::Damaged(_))
        ));
        // A page past the end; a position outside the plan.
        assert!(matches!(
            saved.needs(Start::Page(100_000)),
            Err(WindowError::Page(PageError::OutOfRange { .. }))
        ));
        let outside = Position {
            seg: 2,
            unit: 0,
            byte: 0,
            char: 0,
        };
        assert_eq!(
            saved.serve(Start::At(outside), pieces(&saved, Start::At(outside), text)),
            Err(WindowError::Position)
        );
        let beyond = Position {
            seg: u64::MAX,
            ..outside
        };
        assert_eq!(saved.needs(Start::At(beyond)), Err(WindowError::Position));
    }
}
