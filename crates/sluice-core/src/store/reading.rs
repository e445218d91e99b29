//! A page read from a store: what is asked ([`PageAsk`]), why it fails
//! ([`ReadError`]), and the two ways it is served: from a whole document
//! ([`PageAsk::serve`]), or from the frames of a document kept outside
//! memory, with its saved plan ([`FramedPlan::page`]), reading only the
//! frames the page spans.

use crate::budget::Budget;
use crate::document::Document;
use crate::pager::{Page, PageError, SavedPlan, Start, WindowError, plan_key};

use super::StoreError;
use super::framed::{FRAME_BYTES, Meta, decode_frame};

/// The most page plans saved with one result: the one made for the client
/// that stored it, and those of the next paths and budgets asked. A path or
/// budget past them is planned from the document read back whole (then
/// kept decoded among the documents read lately) on each instance.
pub const PLANS_PER_RESULT: usize = 4;
/// The largest plan saved after a result was stored (a tiny page budget
/// over a huge document makes a plan of many pages): over it, it is not.
pub const SAVED_PLAN_BYTES: usize = 1 << 20;

/// A page asked of a stored result.
#[derive(Debug, Clone)]
pub struct PageAsk {
    /// The path paged (`None`: the whole document).
    pub path: Option<String>,
    /// The budget of the page's data (the caller's, less the page's wrapper).
    pub budget: Budget,
    /// Where the page starts.
    pub start: Start,
}

/// Why a page cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ReadError {
    /// The result is not available.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The page cannot be served (a page past the end, a bad path).
    #[error(transparent)]
    Page(#[from] PageError),
    /// A cursor's position that its result's plan could not have produced.
    #[error("the position is not in the result's pages")]
    Cursor,
}

impl PageAsk {
    /// The key its plan is kept under; `None` for a path too long to be
    /// worth keeping a plan of (over 1 KB), which is planned each time.
    pub fn key(&self) -> Option<String> {
        (self.path.as_ref().is_none_or(|p| p.len() <= 1024))
            .then(|| plan_key(self.path.as_deref(), self.budget))
    }

    /// The page, served from the whole document.
    pub fn serve(&self, doc: &Document) -> Result<Page, ReadError> {
        let plan = doc.plan(self.path.as_deref(), self.budget)?;
        let from = match self.start {
            Start::Page(n) => plan.start_of(n)?,
            Start::At(at) => {
                if !plan.holds(doc, at) {
                    return Err(ReadError::Cursor);
                }
                at
            }
        };
        Ok(plan.serve(doc, from))
    }

    /// The page, served from the whole document, and the plan serving it
    /// made, saved ([`crate::pager::save`]), for a store to keep beside the
    /// document's frames for the next first read: `None` when the document
    /// had that plan already (kept then, or saved when stored) or it is
    /// over [`SAVED_PLAN_BYTES`].
    pub fn serve_and_save(&self, doc: &Document) -> Result<(Page, Option<Vec<u8>>), ReadError> {
        let new = !doc.has_plan(self.path.as_deref(), self.budget);
        let page = self.serve(doc)?;
        let saved = new
            .then(|| doc.plan(self.path.as_deref(), self.budget).ok())
            .flatten()
            .map(|plan| crate::pager::save(&plan, doc))
            .filter(|saved| saved.len() <= SAVED_PLAN_BYTES);
        Ok((page, saved))
    }
}

/// A saved plan of a document kept in frames.
#[derive(Debug)]
pub struct FramedPlan {
    plan: SavedPlan,
    /// Whether the frames are zstd frames.
    compressed: bool,
    /// How many frames.
    frames: u32,
}

impl FramedPlan {
    /// The plan saved as `bytes` for the document `meta` describes, if it
    /// reads as one of that document.
    pub fn of(meta: &Meta, bytes: &[u8]) -> Option<FramedPlan> {
        let plan = SavedPlan::restore(bytes)?;
        (plan.bytes() as u64 == meta.text_bytes).then_some(FramedPlan {
            plan,
            compressed: meta.compressed,
            frames: meta.frames,
        })
    }

    /// Memory held, approximately.
    pub fn memory(&self) -> usize {
        self.plan.memory()
    }

    /// Page `start`, from the frames `fetch` reads (the frames of the
    /// numbers given, in that order): only those the page spans. Bytes that
    /// do not read back as the plan says fail as `backend` being damaged.
    pub fn page(
        &self,
        start: Start,
        backend: &'static str,
        fetch: impl FnOnce(&[u32]) -> Result<Vec<Vec<u8>>, StoreError>,
    ) -> Result<Page, ReadError> {
        let damaged = |why: String| {
            ReadError::Store(StoreError::Unavailable {
                backend,
                why: format!("a stored document is damaged: {why}"),
            })
        };
        let (_, ranges) = self.plan.needs(start).map_err(|e| match e {
            WindowError::Page(e) => ReadError::Page(e),
            WindowError::Position => ReadError::Cursor,
            WindowError::Damaged(why) => damaged(why),
        })?;
        let mut numbers: Vec<u32> = ranges
            .iter()
            .flat_map(|r| (r.start / FRAME_BYTES) as u32..=((r.end - 1) / FRAME_BYTES) as u32)
            .collect();
        numbers.dedup();
        if numbers.last().is_some_and(|&n| n >= self.frames) {
            return Err(damaged(format!(
                "its plan names frame {numbers:?} of {}",
                self.frames
            )));
        }
        let frames = fetch(&numbers)?;
        if frames.len() != numbers.len() {
            return Err(damaged(format!(
                "{} of {} frames read back",
                frames.len(),
                numbers.len()
            )));
        }
        let mut decoded = Vec::with_capacity(frames.len());
        for (n, frame) in numbers.iter().zip(&frames) {
            let bytes = decode_frame(frame, self.compressed)
                .map_err(|e| damaged(format!("frame {n}: {e}")))?;
            decoded.push((*n as usize * FRAME_BYTES, bytes));
        }
        let mut pieces = Vec::with_capacity(ranges.len());
        for r in ranges {
            let mut bytes = Vec::with_capacity(r.len());
            for (base, frame) in &decoded {
                let (a, b) = (r.start.max(*base), r.end.min(base + frame.len()));
                if a < b {
                    bytes.extend_from_slice(&frame[a - base..b - base]);
                }
            }
            if bytes.len() != r.len() {
                return Err(damaged(format!(
                    "bytes {}..{} read back as {}",
                    r.start,
                    r.end,
                    bytes.len()
                )));
            }
            let text = String::from_utf8(bytes)
                .map_err(|e| damaged(format!("bytes {}..{}: {e}", r.start, r.end)))?;
            pieces.push((r.start, text));
        }
        self.plan.serve(start, pieces).map_err(|e| match e {
            WindowError::Page(e) => ReadError::Page(e),
            WindowError::Position => ReadError::Cursor,
            WindowError::Damaged(why) => damaged(why),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::framed::{self, Encoded};
    use crate::store::{Owner, Stored, StoredInfo};
    use crate::summary::Overview;

    /// A tree whose bulk is one member: its first page carries `Around`.
    fn stored() -> Stored {
        let rows: Vec<String> = (0..3000)
            .map(|i| format!(r#"{{"id":{i},"name":"row {i} é"}}"#))
            .collect();
        let doc = Document::json(format!(
            r#"{{"name":"root","kind":"table","rows":[{}]}}"#,
            rows.join(",")
        ))
        .unwrap();
        doc.plan(None, budget()).unwrap();
        let info = StoredInfo {
            source: "t".into(),
            bytes: 0,
            chars: 0,
            tokens: 0,
            tokens_estimated: false,
            is_error: false,
            sent_twice: false,
            overview: Overview::of(&doc),
        };
        Stored::new(&Owner::Anonymous, doc, info, std::time::SystemTime::now())
    }

    fn budget() -> Budget {
        Budget {
            max_tokens: 1500,
            max_chars: 6000,
            max_lines: None,
            token_factor: 1.0,
        }
    }

    #[test]
    fn frames_that_do_not_hold_a_page_are_a_damaged_store_not_a_page() {
        let stored = stored();
        let Encoded {
            meta,
            frames,
            plans,
            ..
        } = framed::encode(&stored, false).unwrap();
        let meta = Meta::parse(&meta).unwrap();
        let plan = FramedPlan::of(&meta, &plans[0].1).expect("the plan made before the put");
        let whole = stored.doc.plan(None, budget()).unwrap();
        let want = whole.serve(&stored.doc, whole.start_of(1).unwrap());
        assert!(!want.around.is_empty(), "the first page carries Around");
        let fetch = |numbers: &[u32]| -> Result<Vec<Vec<u8>>, StoreError> {
            Ok(numbers
                .iter()
                .map(|&n| frames[n as usize].clone())
                .collect())
        };
        assert_eq!(plan.page(Start::Page(1), "disk", fetch).unwrap(), want);
        let damaged = |result: Result<Page, ReadError>| matches!(result, Err(ReadError::Store(StoreError::Unavailable { backend: "disk", ref why })) if why.contains("damaged"));
        // A frame cut short, a frame missing, a frame of other bytes.
        assert!(damaged(plan.page(Start::Page(1), "disk", |numbers| {
            let mut got = fetch(numbers)?;
            // Past the Around's members, short of the page's items.
            got[0].truncate(40);
            Ok(got)
        })));
        assert!(damaged(plan.page(Start::Page(1), "disk", |numbers| {
            let mut got = fetch(numbers)?;
            got.pop();
            Ok(got)
        })));
        assert!(damaged(plan.page(Start::Page(1), "disk", |numbers| {
            Ok(fetch(numbers)?
                .into_iter()
                .map(|f| vec![b'x'; f.len()])
                .collect())
        })));
        // What the store says passes through.
        let gone = StoreError::Unknown("h_x".into());
        assert_eq!(
            plan.page(Start::Page(1), "disk", |_| Err(gone.clone())),
            Err(ReadError::Store(gone))
        );
    }
}
