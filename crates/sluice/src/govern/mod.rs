//! Governing results: every upstream result is measured as the client would
//! receive it; one within the client's budget passes untouched, one over it
//! is stored and answered with a summary, a preview and a handle.
//!
//! The MCP side of `sluice_core`'s budget, document, summary and store: this
//! module turns rmcp results into documents and answers back into rmcp
//! results. The built-in tools that read stored results are in
//! [`crate::tools`].

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, MetaObject, ReadResourceResult, Resource,
    ResourceContents,
};
use serde_json::{Value, json};
use sluice_core::budget::{
    Budget, Size, TOKEN_SAMPLE_BYTES, bytes_per_token_of, count_tokens, floor_boundary,
    token_samples,
};
use sluice_core::config::{BudgetConfig, Config, Mode};
use sluice_core::cursor::CursorKey;
use sluice_core::document::{Document, Kind};
use sluice_core::format::timestamp;
use sluice_core::pager::Page;
use sluice_core::search::{Hits, Query};
use sluice_core::store::{
    Listed, MemoryStore, Owner, PageAsk, ReadError, Store, StoreError, Stored, StoredInfo,
};
use sluice_core::summary::{self, Answer, Overview, Style};

mod sent;
use sent::KeptRead;
pub use sent::{SentCall, SentRead, plain_result};

/// What a page's wrapper (header line, `_meta`, cursor) may take of the
/// budget, in tokens and characters, besides the paged path (which the
/// header, the `_meta` and the cursor each repeat).
const PAGE_RESERVE: (u32, u32) = (600, 1000);

/// The budget of a page's data: the caller's, less its wrapper. `path` is
/// the path asked for, which the cursor repeats (the plan itself keeps room
/// for the path of each page and what is shown around it).
pub fn page_budget(budget: Budget, path: Option<&str>) -> Budget {
    let pointer = path.map_or(0, str::len) as u32;
    budget.less(PAGE_RESERVE.0 + pointer, PAGE_RESERVE.1 + 4 * pointer)
}
/// Where the bulk of a stored document is, as `_meta["sluice/stored"].path`
/// says: the array most pages go through (`""` for JSON without arrays),
/// `None` for text.
pub fn bulk_path(doc: &Document) -> Option<String> {
    match doc.kind() {
        Kind::Text => None,
        Kind::Json | Kind::Blocks => Some(
            doc.default_array()
                .map_or_else(String::new, |a| a.pointer.clone()),
        ),
    }
}

/// What the resource link and `_meta` of a stored answer may take.
const ANSWER_RESERVE: (u32, u32) = (300, 600);
/// The default depth of previews.
pub const DEFAULT_PREVIEW_DEPTH: usize = 3;
/// [`sluice_core::limits::BLOCKING_BYTES`], as the sizes here count: a
/// larger result is read, decoded and stored on a blocking thread, so that
/// a 100 MB result does not stall other calls.
const BLOCKING_BYTES: u64 = sluice_core::limits::BLOCKING_BYTES as u64;
/// Up to this size, the tokens of a stored result are counted exactly;
/// above, they are extrapolated from samples (counting runs at ~25 MB/s:
/// exact figures for a 1 MB result would add 40 ms to its answer).
const EXACT_TOKENS_BYTES: usize = 256 << 10;

/// The URI scheme of stored results.
pub use crate::contract::RESULT_URI;

/// The governor: budgets, the store and the cursor key.
pub struct Governor {
    store: Arc<dyn Store>,
    key: CursorKey,
    budgets: BudgetConfig,
    /// The hits of recent searches, so that their pages need no new search.
    searches: std::sync::Mutex<std::collections::VecDeque<(SearchKey, Arc<Hits>)>>,
    /// The jq workers of `sluice_query`.
    jq: crate::jq::pool::JqPool,
    /// What is counted for operators (`--admin`).
    metrics: Arc<crate::metrics::Metrics>,
}

/// What a search's hits depend on.
pub type SearchKey = (Owner, String, Query);

/// How many searches' hits are kept.
const SEARCHES_KEPT: usize = 8;

/// How one result is governed.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Who may read it back.
    pub owner: Owner,
    /// The caller's budget for this tool.
    pub budget: Budget,
    /// What was called, as the client named it.
    pub source: String,
    /// Buffer, truncate or pass through.
    pub mode: Mode,
    /// How deep previews go.
    pub preview_depth: usize,
    /// Arguments of the tool that narrow its result (found once per tool
    /// listing, shared by its calls).
    pub narrowing: Arc<[String]>,
}

/// A result taken apart for storing.
enum Raw {
    /// One text that may be JSON.
    Text(String),
    /// `structuredContent`, serialized.
    Json(String),
    /// Several content blocks (or resource contents), as a JSON array.
    Blocks(String),
}

/// A result over the budget, taken apart for storing.
struct Kept {
    /// What is stored.
    raw: Raw,
    /// The result's size as sent (one copy's, when it was `sent_twice`).
    size: Size,
    /// Whether it sent the same data as text and as `structuredContent`.
    sent_twice: bool,
    /// What the answer keeps of the result: its `isError`, `resultType`
    /// and `_meta`.
    is_error: Option<bool>,
    result_type: Option<rmcp::model::ResultType>,
    meta: Option<MetaObject>,
}

/// What governing made of a resource read from its bytes.
#[derive(Debug)]
pub enum GovernedRead {
    /// Within the budget: it goes as the response it came in.
    Passes(crate::jsonrpc::Message),
    /// Stored: the answer that stands for it.
    Stored(ReadResourceResult),
}

/// What governing made of a tool's result read from its bytes.
#[derive(Debug)]
pub enum Governed {
    /// Within the budget: it goes as the upstream sent it. `is_error`: the
    /// result says so.
    Passes {
        /// Its `isError` is true.
        is_error: bool,
    },
    /// Stored: the answer that stands for it.
    Stored(CallToolResult),
}

/// The error result of a result that could not be taken apart to be
/// stored (the blocking thread that did it failed).
fn store_failed(source: &str, why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "sluice failed to store the result of {source}: {why}. Call it again."
    ))])
}

impl Governor {
    /// A governor with the configured budgets, a memory store and a fresh
    /// cursor key (`[store]`'s other backends: [`Governor::with_state`]).
    pub fn new(config: &Config) -> Self {
        Self::with_state(
            config,
            crate::state::State {
                store: Arc::new(MemoryStore::with_clock(
                    config.store.limits,
                    Arc::new(crate::clock::RuntimeClock),
                )),
                key: CursorKey::random(),
                backing: None,
                asked: None,
            },
        )
    }

    /// A governor with the configured budgets, keeping results in `state`.
    pub fn with_state(config: &Config, state: crate::state::State) -> Self {
        Self {
            store: state.store,
            key: state.key,
            budgets: config.budget.clone(),
            searches: Default::default(),
            jq: crate::jq::pool::JqPool::new(config.query),
            metrics: Default::default(),
        }
    }

    /// What is counted for operators.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// The budget of a client, by its `clientInfo.name`.
    pub fn budget_for(&self, client: Option<&str>) -> Budget {
        self.budgets.for_client(client)
    }

    /// The jq workers.
    pub fn jq(&self) -> &crate::jq::pool::JqPool {
        &self.jq
    }

    /// `answer`, a stored answer made earlier, if `owner` can still read
    /// its handle; with the handle's new expiry (reading it counts as a use).
    pub async fn renewed(
        &self,
        mut answer: CallToolResult,
        owner: &Owner,
    ) -> Option<CallToolResult> {
        let handle = stored_handle(&answer)?.to_owned();
        // Renewed without reading the document back.
        let owner = owner.clone();
        let expires_at = self
            .on_store(move |store| store.touch(&owner, &handle).ok(), |_| None)
            .await?;
        if let Some(stored) = answer
            .meta
            .as_mut()
            .and_then(|m| m.0.get_mut(crate::contract::meta::STORED))
        {
            stored["expires_at"] = Value::String(timestamp(expires_at));
        }
        Some(answer)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// `owner`'s stored result `handle`, its life renewed; read on a
    /// blocking thread where the backend reads files (a document is read
    /// back whole on its first use after a restart).
    pub async fn stored(&self, owner: &Owner, handle: &str) -> Result<Listed, StoreError> {
        let (owner, handle) = (owner.clone(), handle.to_owned());
        let backend = self.store.backend();
        self.on_store(
            move |store| store.get(&owner, &handle),
            move |why| {
                Err(StoreError::Unavailable {
                    backend,
                    why: format!("reading failed: {why}"),
                })
            },
        )
        .await
    }

    /// Page `ask` of `owner`'s result `handle`: read in place from the
    /// memory store (off the request threads when the document is large,
    /// over [`BLOCKING_BYTES`]: a first plan of a path scans the value
    /// paged, and may tokenize up to 4 MB of it), on a blocking thread from
    /// a store that does I/O, which reads only the frames the page spans
    /// where it has the page's plan.
    pub async fn page_of(
        &self,
        owner: &Owner,
        handle: &str,
        ask: PageAsk,
    ) -> Result<Page, ReadError> {
        let backend = self.store.backend();
        if !self.store.in_place() {
            let (owner, handle) = (owner.clone(), handle.to_owned());
            return self
                .on_store(
                    move |store| store.page(&owner, &handle, &ask),
                    move |why| {
                        Err(ReadError::Store(StoreError::Unavailable {
                            backend,
                            why: format!("reading failed: {why}"),
                        }))
                    },
                )
                .await;
        }
        let stored = self.stored(owner, handle).await?.stored;
        if stored.doc.bytes() as u64 <= BLOCKING_BYTES {
            return ask.serve(&stored.doc);
        }
        tokio::task::spawn_blocking(move || ask.serve(&stored.doc))
            .await
            .unwrap_or_else(|e| {
                Err(ReadError::Store(StoreError::Unavailable {
                    backend,
                    why: format!("planning the page failed: {e}"),
                }))
            })
    }

    /// Runs `f` on the store: here for the memory store (no hop on the
    /// pass-through path), on a blocking thread for a backend that does
    /// I/O (a file, a Redis server); `failed` says what a lost thread gave.
    async fn on_store<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Store) -> T + Send + 'static,
        failed: impl FnOnce(String) -> T,
    ) -> T {
        crate::state::on_store(&self.store, f, failed).await
    }

    /// `owner`'s stored results, newest first, at most `limit`.
    pub async fn listed(&self, owner: &Owner, limit: usize) -> Vec<sluice_core::store::Brief> {
        let owner = owner.clone();
        self.on_store(move |store| store.list(&owner, limit), |_| Vec::new())
            .await
    }

    /// The store's entries and bytes.
    pub async fn usage(&self) -> (usize, u64) {
        self.on_store(|store| store.usage(), |_| (0, 0)).await
    }

    /// Stores `doc` for `owner`: written on a blocking thread where the
    /// backend writes files (compressed and synced before the handle is
    /// given).
    async fn put(
        &self,
        owner: &Owner,
        doc: Document,
        info: StoredInfo,
    ) -> Result<Arc<Stored>, StoreError> {
        let owner = owner.clone();
        let backend = self.store.backend();
        self.on_store(
            move |store| store.put(&owner, doc, info),
            move |why| {
                Err(StoreError::Unavailable {
                    backend,
                    why: format!("writing failed: {why}"),
                })
            },
        )
        .await
    }

    /// The hits of a recent search.
    pub fn recent_hits(&self, key: &SearchKey) -> Option<Arc<Hits>> {
        let searches = self.searches.lock().unwrap_or_else(|p| p.into_inner());
        searches
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, h)| h.clone())
    }

    /// Keeps the hits of a search for its next pages.
    pub fn keep_hits(&self, key: SearchKey, hits: Arc<Hits>) {
        let mut searches = self.searches.lock().unwrap_or_else(|p| p.into_inner());
        if searches.len() >= SEARCHES_KEPT {
            searches.pop_front();
        }
        searches.push_back((key, hits));
    }

    /// The key that seals cursors.
    pub fn key(&self) -> &CursorKey {
        &self.key
    }

    /// Governs a tool result.
    pub async fn tool_result(&self, result: CallToolResult, policy: Policy) -> CallToolResult {
        if policy.mode == Mode::Passthrough {
            return result;
        }
        let size = measure_call(&result, &policy.budget);
        if policy.budget.admits(&size) {
            return result;
        }
        self.kept_result(result, size, policy).await
    }

    /// Whether [`Self::tool_result`] gives `result` back unchanged: it is
    /// within the budget (or the tool is not governed). Such a result may
    /// be forwarded as the bytes the upstream sent.
    pub fn passes(&self, result: &CallToolResult, policy: &Policy) -> bool {
        policy.mode == Mode::Passthrough
            || policy.budget.admits(&measure_call(result, &policy.budget))
    }

    /// A result over the budget, stored: the answer that stands for it.
    async fn kept_result(
        &self,
        result: CallToolResult,
        size: Size,
        policy: Policy,
    ) -> CallToolResult {
        let (is_error, result_type, meta) = (
            result.is_error,
            result.result_type.clone(),
            result.meta.clone(),
        );
        // The same data sent twice (as text and as `structuredContent`) is
        // over the budget as sent, and described by one copy's size.
        let budget = policy.budget;
        let take_apart = move || {
            let copy = one_copy(&result, &budget);
            Kept {
                sent_twice: copy.is_some(),
                size: copy.unwrap_or(size),
                raw: raw_of_call(result),
                is_error,
                result_type,
                meta,
            }
        };
        let kept = if size.bytes > BLOCKING_BYTES {
            match tokio::task::spawn_blocking(take_apart).await {
                Ok(kept) => kept,
                Err(e) => return store_failed(&policy.source, &e.to_string()),
            }
        } else {
            take_apart()
        };
        self.stored_answer(kept, &policy).await
    }

    /// Governs a tool's result as the upstream sent it (`response`, whose
    /// `result` it is), from its bytes, never decoded: [`Governed::Passes`]
    /// when it is within the budget (it goes as those bytes), else stored
    /// and answered. `None` if the bytes do not read as a tool's result
    /// (see [`SentCall::read`]), which must then be decoded. A large result
    /// is read on a blocking thread.
    pub async fn sent_result(
        &self,
        response: &crate::jsonrpc::Message,
        policy: &Policy,
    ) -> Option<Governed> {
        let (budget, passthrough) = (policy.budget, policy.mode == Mode::Passthrough);
        let (is_error, kept) = read_result_kept(response, move |result, unescaped| {
            let call = SentCall::read_kept(result, unescaped)?;
            let size = call.size(&budget);
            if passthrough || budget.admits(&size) {
                return Some((call.is_error(), None));
            }
            Some((call.is_error(), Some(call.kept(size, &budget))))
        })
        .await?;
        Some(match kept {
            None => Governed::Passes { is_error },
            Some(kept) => Governed::Stored(self.stored_answer(kept, policy).await),
        })
    }

    /// Stores what was kept of a result over the budget: the answer that
    /// stands for it (or the error result that says why it could not be).
    async fn stored_answer(&self, kept: Kept, policy: &Policy) -> CallToolResult {
        let Kept {
            raw,
            size,
            sent_twice,
            is_error,
            result_type,
            meta,
        } = kept;
        let flagged = is_error == Some(true);
        let mut answer = match self.keep(raw, size, flagged, sent_twice, policy).await {
            Ok(stored) => {
                let (text, link, stored_meta) = self.answer(&stored, policy);
                let mut r = CallToolResult::success(vec![ContentBlock::text(text), link]);
                r.is_error = is_error;
                r.meta = Some(with_meta(meta, crate::contract::meta::STORED, stored_meta));
                r
            }
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        };
        answer.result_type = result_type;
        answer
    }

    /// Governs an upstream's JSON-RPC error to a tool call as results are
    /// governed: one within the budget passes unchanged; a larger one is
    /// stored whole (`{code, message, data}`, readable through its handle),
    /// and the client gets the same code with the head of the message, then
    /// what was cut, the upstream's name and the handle; its `data` becomes
    /// `{"sluice/stored": …}`. Without a store (it refused), the message is
    /// cut all the same and `data` dropped.
    pub async fn tool_error(
        &self,
        mut error: ErrorData,
        upstream: &str,
        policy: &Policy,
    ) -> ErrorData {
        if policy.mode == Mode::Passthrough {
            return error;
        }
        let data = error
            .data
            .as_ref()
            .map(|d| serde_json::to_string(d).unwrap_or_default())
            .unwrap_or_default();
        let size = Size::of(&[&error.message, &data], &policy.budget);
        if policy.budget.admits(&size) {
            return error;
        }
        let whole = json!({"code": error.code.0, "message": error.message, "data": error.data});
        let raw = Raw::Json(serde_json::to_string(&whole).unwrap_or_default());
        let message = std::mem::take(&mut error.message).into_owned();
        let what = match (message.len(), data.len()) {
            (_, 0) => format!(
                "a message of {}",
                sluice_core::format::bytes(message.len() as u64)
            ),
            (m, d) => format!(
                "a message of {} and data of {}",
                sluice_core::format::bytes(m as u64),
                sluice_core::format::bytes(d as u64)
            ),
        };
        let said = format!(
            "upstream `{upstream}` answered {} with a JSON-RPC error (code {}) too large to show: {what}",
            policy.source, error.code.0
        );
        let (tail, data) = match self.keep(raw, size, true, false, policy).await {
            Ok(stored) => {
                let handle = &stored.handle;
                let tail = format!(
                    "{said}. sluice stored it whole: sluice_read {{\"handle\":\"{handle}\"}} reads it (`/message`, `/data`)."
                );
                let pages = stored
                    .doc
                    .plan(None, page_budget(policy.budget, None))
                    .map_or(1, |p| p.pages());
                let expires_at = self
                    .store
                    .get(&stored.owner, handle)
                    .map(|l| timestamp(l.expires_at))
                    .unwrap_or_default();
                let path = bulk_path(&stored.doc);
                let meta = stored_meta(&stored, pages, path.as_deref(), &expires_at);
                (tail, Some(json!({crate::contract::meta::STORED: meta})))
            }
            Err(why) => (format!("{said}; {why}"), None),
        };
        error.message = head_within(&message, &tail, &policy.budget).into();
        error.data = data;
        error
    }

    /// Governs the result of `resources/read`, which came in the answer
    /// `raw`: `Ok` with the result and `raw` when it is within the budget (it
    /// may be forwarded as those bytes), `Err` with the answer that stands
    /// for it once stored (`raw` is let go first: held while the result was
    /// stored, a large resource was in memory once more).
    pub async fn resource_result(
        &self,
        result: ReadResourceResult,
        raw: crate::jsonrpc::Message,
        uri: &str,
        policy: Policy,
    ) -> Result<(ReadResourceResult, crate::jsonrpc::Message), ReadResourceResult> {
        let parts: Vec<Cow<'_, str>> = result.contents.iter().map(contents_text).collect();
        let size = Size::of(&borrow(&parts), &policy.budget);
        if policy.budget.admits(&size) {
            return Ok((result, raw));
        }
        drop(raw);
        let (result_type, meta) = (result.result_type.clone(), result.meta.clone());
        let mut contents = result.contents;
        let raw = match contents.as_mut_slice() {
            [ResourceContents::TextResourceContents { text, .. }] => {
                Raw::Text(std::mem::take(text))
            }
            _ => Raw::Blocks(serde_json::to_string(&contents).unwrap_or_default()),
        };
        let kept = KeptRead {
            raw,
            meta,
            says_complete: result_type.is_some(),
        };
        Err(self.stored_read(kept, size, uri, &policy).await)
    }

    /// Governs the result of `resources/read` as the upstream sent it in
    /// `response`, from its bytes, never decoded: [`GovernedRead::Passes`]
    /// with `response` when it is within the budget (it goes as those
    /// bytes), else stored and answered (`response` let go first, as
    /// [`Self::resource_result`] lets it go). `Err` with `response` if its
    /// bytes do not read as a resource's contents (see
    /// [`SentRead::read_kept`]), which must then be decoded. A large
    /// result is read on a blocking thread.
    pub async fn sent_resource(
        &self,
        response: crate::jsonrpc::Message,
        uri: &str,
        policy: &Policy,
    ) -> Result<GovernedRead, crate::jsonrpc::Message> {
        let budget = policy.budget;
        let read = read_result_kept(&response, move |result, unescaped| {
            let read = SentRead::read_kept(result, unescaped)?;
            let size = read.size(&budget);
            Some((!budget.admits(&size)).then(|| (read.kept(), size)))
        })
        .await;
        match read {
            None => Err(response),
            Some(None) => Ok(GovernedRead::Passes(response)),
            Some(Some((kept, size))) => {
                drop(response);
                Ok(GovernedRead::Stored(
                    self.stored_read(kept, size, uri, policy).await,
                ))
            }
        }
    }

    /// Stores what was kept of a resource read over the budget: the answer
    /// that stands for it (or the one that says why it could not be).
    async fn stored_read(
        &self,
        kept: KeptRead,
        size: Size,
        uri: &str,
        policy: &Policy,
    ) -> ReadResourceResult {
        let KeptRead {
            raw,
            meta,
            says_complete,
        } = kept;
        let mut answer = match self.keep(raw, size, false, false, policy).await {
            Ok(stored) => {
                let (text, _, stored_meta) = self.answer(&stored, policy);
                let mut r = ReadResourceResult::new(vec![ResourceContents::text(text, uri)]);
                r.meta = Some(with_meta(meta, crate::contract::meta::STORED, stored_meta));
                r
            }
            Err(message) => ReadResourceResult::new(vec![ResourceContents::text(message, uri)]),
        };
        answer.result_type = says_complete.then_some(rmcp::model::ResultType::COMPLETE);
        answer
    }

    /// Stores a result of `size` (one copy's, when it was `sent_twice`); the
    /// error is a message for the model.
    async fn keep(
        &self,
        raw: Raw,
        size: Size,
        is_error: bool,
        sent_twice: bool,
        policy: &Policy,
    ) -> Result<Arc<Stored>, String> {
        let factor = policy.budget.token_factor;
        let budget = policy.budget;
        // Everything proportional to the document happens here, once: the
        // index, the overview (sampled) and the caller's first page plan.
        let ingest = move || {
            let (doc, tokens, estimated) = ingest(raw, size, factor);
            // The overview and the first page plan each read the whole
            // document and neither needs the other: a large one's (made off
            // the async threads) are made at once, the plan on a second
            // thread, while the client waits.
            let (overview, ()) = sluice_core::parallel::both(
                size.bytes > BLOCKING_BYTES,
                || Overview::of(&doc),
                || {
                    let _ = doc.plan(None, page_budget(budget, None));
                },
            );
            (doc, tokens, estimated, overview)
        };
        let (doc, tokens, estimated, overview) = if size.bytes > BLOCKING_BYTES {
            tokio::task::spawn_blocking(ingest)
                .await
                .map_err(|e| format!("sluice failed to store the result: {e}"))?
        } else {
            ingest()
        };
        let info = StoredInfo {
            source: policy.source.clone(),
            bytes: size.bytes,
            chars: size.chars,
            tokens,
            tokens_estimated: estimated,
            is_error,
            sent_twice,
            overview,
        };
        // A stored result is often queried next: have a worker ready.
        self.jq.warm();
        self.put(&policy.owner, doc, info).await.map_err(|e| {
            format!(
                "{} returned a result too large to show, and sluice could not store it: {e}. Call {} with arguments that narrow the result.",
                policy.source, policy.source
            )
        })
    }

    /// The answer for a stored result: the text, the resource link and the
    /// `sluice/stored` metadata.
    fn answer(&self, stored: &Stored, policy: &Policy) -> (String, ContentBlock, Value) {
        let plan = stored.doc.plan(None, page_budget(policy.budget, None)).ok();
        let pages = plan.as_ref().map_or(1, |p| p.pages());
        // Where the bulk is: the array most pages go through.
        let path = bulk_path(&stored.doc);
        let style = match policy.mode {
            Mode::Truncate => Style::Truncated,
            _ => Style::Summary,
        };
        let answer = Answer {
            source: &policy.source,
            handle: &stored.handle,
            info: &stored.info,
            kind: stored.doc.kind(),
            pages,
            read_tool: crate::contract::tool::READ,
            search_tool: Some(crate::contract::tool::SEARCH),
            query_tool: Some(crate::contract::tool::QUERY),
            narrowing: &policy.narrowing,
            preview_depth: policy.preview_depth,
            style,
            // Small enough once compact (a pretty-printed or duplicated
            // result): shown whole, which spares the model a read.
            whole: (stored.doc.bytes() <= policy.budget.max_chars as usize)
                .then(|| stored.doc.text_str()),
            stored_bytes: stored.doc.bytes() as u64,
        };
        let budget = policy.budget.less(ANSWER_RESERVE.0, ANSWER_RESERVE.1);
        let text = summary::render(&answer, &stored.info.overview, &budget);
        // Just stored (or renewed): a ttl from now.
        let expires_at = timestamp(crate::clock::wall() + self.store.limits().ttl);
        let meta = stored_meta(stored, pages, path.as_deref(), &expires_at);
        let link = ContentBlock::resource_link(
            Resource::new(
                format!("{RESULT_URI}{}", stored.handle),
                stored.handle.clone(),
            )
            .with_description(format!(
                "The whole result of {}, stored by sluice; read it in pages.",
                policy.source
            ))
            .with_mime_type(mime_of(stored.doc.kind()))
            .with_size(stored.info.bytes),
        );
        // What the client's context was spared: the result's tokens less
        // those of everything that stands for it.
        let factor = policy.budget.token_factor;
        let (meta_text, link_text) = (
            meta.to_string(),
            serde_json::to_string(&link).unwrap_or_default(),
        );
        let answered = [text.as_str(), &meta_text, &link_text]
            .iter()
            .map(|part| u64::from(count_tokens(part, factor)))
            .sum::<u64>();
        self.metrics
            .saved(stored.info.tokens.saturating_sub(answered));
        (text, link, meta)
    }
}

/// At most this much of a message too large to show is kept at its head.
const MESSAGE_HEAD_BYTES: usize = 2000;

/// The head of `message`, as much of it as fits `budget` (less the wrapper)
/// with `tail` after it, then "… N more bytes." and `tail`. Halves the head
/// until it fits: O(head) work per try, at most [`MESSAGE_HEAD_BYTES`].
fn head_within(message: &str, tail: &str, budget: &Budget) -> String {
    let budget = budget.less(ANSWER_RESERVE.0, ANSWER_RESERVE.1);
    let mut keep = floor_boundary(message, MESSAGE_HEAD_BYTES);
    loop {
        let more = message.len() - keep;
        let cut = if more == 0 {
            format!("{message}\n{tail}")
        } else {
            format!(
                "{}… {} more bytes.\n{tail}",
                &message[..keep],
                sluice_core::format::group(more as u64)
            )
        };
        if keep == 0 || budget.fits_text(&cut) {
            return cut;
        }
        keep = floor_boundary(message, keep / 2);
    }
}

/// The `sluice/stored` metadata of a stored result: `tokens`, `chars` and
/// `bytes` of the result as sent (one copy of data sent twice, then
/// `sent_twice: true`), `stored_bytes` of the stored document.
pub fn stored_meta(stored: &Stored, pages: usize, path: Option<&str>, expires_at: &str) -> Value {
    let info = &stored.info;
    let mut meta = json!({
        "handle": stored.handle,
        "tokens": info.tokens,
        "chars": info.chars,
        "bytes": info.bytes,
        "stored_bytes": stored.doc.bytes(),
        "kind": stored.doc.kind().as_str(),
        "pages": pages,
        "path": path,
        "expires_at": expires_at,
    });
    if info.tokens_estimated {
        meta["tokens_estimated"] = Value::Bool(true);
    }
    if info.sent_twice {
        meta["sent_twice"] = Value::Bool(true);
    }
    if path.is_none() {
        // A text document has no path (as its pages have none).
        meta.as_object_mut().map(|m| m.remove("path"));
    }
    meta
}

/// The MIME type of a stored document.
pub fn mime_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Text => "text/plain",
        Kind::Json | Kind::Blocks => "application/json",
    }
}

/// What `read` makes of the `result` of `response`, read where it holds up
/// no other session: on a blocking thread when it is over
/// [`BLOCKING_BYTES`]. `None` if there is no result, `read` makes nothing
/// of it, or the blocking thread failed.
pub async fn read_result<T: Send + 'static>(
    response: &crate::jsonrpc::Message,
    read: impl FnOnce(&str) -> Option<T> + Send + 'static,
) -> Option<T> {
    read_result_kept(response, |text, _| read(text)).await
}

/// [`read_result`], `read` given the strings the response's parse kept
/// unescaped too (see [`crate::jsonrpc::walk::Keeping`]), which a walk
/// takes: the read that governs the result.
async fn read_result_kept<T: Send + 'static>(
    response: &crate::jsonrpc::Message,
    read: impl FnOnce(&str, crate::jsonrpc::walk::Kept<'_>) -> Option<T> + Send + 'static,
) -> Option<T> {
    let (text, kept) = response.result_kept()?;
    if text.len() as u64 <= BLOCKING_BYTES {
        return read(text, kept);
    }
    let response = response.clone();
    tokio::task::spawn_blocking(move || {
        let (text, kept) = response.result_kept()?;
        read(text, kept)
    })
    .await
    .ok()
    .flatten()
}

/// A tool's answer: one sluice made, or an upstream's result within the
/// budget as the response it came in (its bytes relayed as they are).
#[derive(Debug)]
pub enum ToolAnswer {
    /// Decoded, or sluice's own.
    Made(CallToolResult),
    /// The upstream's response, not decoded.
    Sent(crate::jsonrpc::Message),
}

/// The response `sent` with `key` set to `value` in its result's `_meta`
/// (made if absent), every other member as sent (the whitespace between
/// members goes). `None` if its result or its `_meta` is not an object.
pub fn with_meta_as_sent(
    sent: &crate::jsonrpc::Message,
    key: &str,
    value: &Value,
) -> Option<crate::jsonrpc::Message> {
    let mut result = crate::jsonrpc::RawObject::parse(sent.result()?).ok()?;
    if result.get("_meta").is_some() {
        result
            .edit_path(&["_meta"], |meta| meta.insert_value(key, value))
            .ok()??
            .ok()?;
    } else {
        result
            .insert_value("_meta", &serde_json::json!({ key: value }))
            .ok()?;
    }
    sent.with_result(&result.to_json()).ok()
}

/// `meta` (kept) with `key` set to `value`.
pub fn with_meta(meta: Option<MetaObject>, key: &str, value: Value) -> MetaObject {
    let mut meta = meta.unwrap_or_default();
    meta.0.insert(key.to_owned(), value);
    meta
}

/// The size of a tool result as the client receives it: every text block,
/// `structuredContent`, embedded resources, binary blocks by their encoded
/// size. Stops counting tokens once the characters alone are over budget.
fn measure_call(result: &CallToolResult, budget: &Budget) -> Size {
    let parts: Vec<Cow<'_, str>> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(t) => Cow::Borrowed(t.text.as_str()),
            ContentBlock::Image(i) => Cow::Borrowed(i.data.as_str()),
            ContentBlock::Audio(a) => Cow::Borrowed(a.data.as_str()),
            ContentBlock::Resource(r) => contents_text(&r.resource),
            other => Cow::Owned(serde_json::to_string(other).unwrap_or_default()),
        })
        .collect();
    let structured = result.structured_content.as_ref().map(Structured::Decoded);
    measure_parts(borrow(&parts), structured, budget)
}

/// A result's `structuredContent`: as the upstream sent it, or decoded
/// (counted as its compact JSON).
#[derive(Debug, Clone, Copy)]
enum Structured<'a> {
    Sent(&'a str),
    Decoded(&'a Value),
}

/// The size of what a result's content blocks send (`parts`) with its
/// `structuredContent`. Once the blocks alone are over the characters, the
/// structured content only adds to the figures: it is not serialized.
fn measure_parts(parts: Vec<&str>, structured: Option<Structured<'_>>, budget: &Budget) -> Size {
    let Some(structured) = structured else {
        return Size::of(&parts, budget);
    };
    let content_chars: usize = parts.iter().map(|p| p.len()).sum();
    if content_chars > budget.max_chars as usize {
        let mut size = Size::of(&parts, budget);
        let extra = match structured {
            Structured::Sent(text) => text.len() as u64,
            Structured::Decoded(value) => json_bytes(value),
        };
        size.bytes += extra;
        size.chars += extra;
        return size;
    }
    let serialized;
    let structured = match structured {
        Structured::Sent(text) => text,
        Structured::Decoded(value) => {
            serialized = serde_json::to_string(value).unwrap_or_default();
            serialized.as_str()
        }
    };
    let mut parts = parts;
    parts.push(structured);
    Size::of(&parts, budget)
}

/// The largest text parsed to tell whether `structuredContent` holds the
/// same data as a text that does not serialize it byte for byte.
const COMPARE_PARSED_BYTES: usize = 8 << 20;

/// The size of one copy of the data when `result` sent it twice: one text
/// block, and `structuredContent` holding that text (`{"content": text}`,
/// as server-filesystem sends) or the value the text serializes. `None`
/// when they differ. Linear in the result; a text up to
/// [`COMPARE_PARSED_BYTES`] that is not the same bytes is parsed once.
fn one_copy(result: &CallToolResult, budget: &Budget) -> Option<Size> {
    let structured = result.structured_content.as_ref()?;
    let [ContentBlock::Text(text)] = result.content.as_slice() else {
        return None;
    };
    let text = text.text.as_str();
    let holds_the_text = match structured {
        Value::String(s) => s == text,
        Value::Object(map) => map.len() == 1 && map.values().all(|v| v.as_str() == Some(text)),
        _ => false,
    };
    let same = holds_the_text || {
        let json = text.trim_start().starts_with(['{', '[']);
        json && {
            let compact = sluice_core::scan::minify(text);
            (compact.len() as u64 == json_bytes(structured)
                && serde_json::to_string(structured).is_ok_and(|s| s == compact))
                || (text.len() <= COMPARE_PARSED_BYTES
                    && serde_json::from_str::<Value>(text).is_ok_and(|v| &v == structured))
        }
    };
    same.then(|| Size::of(&[text], budget))
}

fn borrow<'a>(parts: &'a [Cow<'_, str>]) -> Vec<&'a str> {
    parts.iter().map(|p| p.as_ref()).collect()
}

/// What resource contents send: their text, or their base64 blob.
fn contents_text(contents: &ResourceContents) -> Cow<'_, str> {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => Cow::Borrowed(text.as_str()),
        ResourceContents::BlobResourceContents { blob, .. } => Cow::Borrowed(blob.as_str()),
        other => Cow::Owned(serde_json::to_string(other).unwrap_or_default()),
    }
}

/// The handle of a stored answer, if it is one.
pub fn stored_handle(answer: &CallToolResult) -> Option<&str> {
    answer
        .meta
        .as_ref()
        .and_then(|m| m.0.get(crate::contract::meta::STORED))
        .and_then(|s| s.get("handle"))
        .and_then(Value::as_str)
}

/// The compact JSON size of `value` without building the string.
pub fn json_bytes(value: &impl serde::Serialize) -> u64 {
    struct Counter(u64);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// Which part of a tool result is stored. One text block: that text (JSON
/// if it parses); text blocks with `structuredContent`: the structured
/// content (servers are asked to send its serialization as text too);
/// anything else: the content blocks as a JSON array.
fn raw_of_call(mut result: CallToolResult) -> Raw {
    let all_text = result
        .content
        .iter()
        .all(|b| matches!(b, ContentBlock::Text(_)));
    match result.content.as_mut_slice() {
        [ContentBlock::Text(t)] => Raw::Text(std::mem::take(&mut t.text)),
        _ if all_text && result.structured_content.is_some() => {
            Raw::Json(serde_json::to_string(&result.structured_content.take()).unwrap_or_default())
        }
        _ => Raw::Blocks(serde_json::to_string(&result.content).unwrap_or_default()),
    }
}

/// Builds the document; returns it with the client tokens of what was sent
/// and whether they were extrapolated.
fn ingest(raw: Raw, size: Size, factor: f32) -> (Document, u64, bool) {
    let text = match &raw {
        Raw::Text(t) | Raw::Json(t) | Raw::Blocks(t) => t.as_str(),
    };
    let sent_bytes = text.len();
    let exact = match size.tokens {
        Some(tokens) => Some(tokens),
        None if text.len() <= EXACT_TOKENS_BYTES && text.len() as u64 == size.bytes => {
            Some(u64::from(count_tokens(text, factor)))
        }
        None => None,
    };
    let make = |raw: Raw| match raw {
        Raw::Text(t) => (Document::json_or_text(t), true),
        Raw::Json(t) => Document::json(t)
            .map(|doc| (doc, true))
            .unwrap_or_else(|e| (Document::text(e.to_string()), false)),
        Raw::Blocks(t) => Document::blocks(t)
            .map(|doc| (doc, true))
            .unwrap_or_else(|e| (Document::text(e.to_string()), false)),
    };
    let Some(tokens) = exact else {
        // Estimated from samples of the text as sent, copied out (a few
        // KB) so that they are tokenized while the document is made: on a
        // second thread for a large one.
        let samples: Vec<String> = token_samples(text, TOKEN_SAMPLE_BYTES)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let ((doc, kept_as_sent), per_token) = sluice_core::parallel::both(
            sent_bytes > BLOCKING_BYTES as usize,
            || make(raw),
            || bytes_per_token_of(&samples),
        );
        let raw_tokens = size.bytes as f64 / f64::from(per_token).max(0.1);
        let tokens = (raw_tokens * f64::from(factor)).ceil() as u64;
        // A document that holds the text as sent (minifying, which only
        // takes bytes out, took none) has the bytes per token just
        // measured: its first page plan, made next, does not sample it
        // again.
        let doc = if kept_as_sent && doc.bytes() == sent_bytes {
            doc.knowing_bytes_per_token(per_token)
        } else {
            doc
        };
        return (doc, tokens, true);
    };
    (make(raw).0, tokens, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_texts_tokens_are_estimated_from_samples_of_it_as_sent() {
        let items: Vec<Value> = (0..12_000)
            .map(|i| json!({"id": i, "name": format!("item {i}"), "tags": ["a", "b"]}))
            .collect();
        let factor = 1.25;
        let expect = |text: &str| {
            let per_token = sluice_core::budget::bytes_per_token(text, TOKEN_SAMPLE_BYTES);
            ((text.len() as f64 / f64::from(per_token)) * f64::from(factor)).ceil() as u64
        };
        for text in [
            serde_json::to_string(&items).unwrap(),
            serde_json::to_string_pretty(&items).unwrap(),
        ] {
            assert!(text.len() > EXACT_TOKENS_BYTES && text.len() > BLOCKING_BYTES as usize);
            let size = Size {
                bytes: text.len() as u64,
                chars: text.len() as u64,
                lines: 1,
                tokens: None,
            };
            let (doc, tokens, estimated) = ingest(Raw::Text(text.clone()), size, factor);
            assert!(estimated);
            assert_eq!(tokens, expect(&text));
            assert_eq!(doc.kind(), Kind::Json);
            // The document's own figure: told when it holds the text as
            // sent, sampled from its compact text when minifying changed it.
            assert_eq!(
                doc.bytes_per_token(),
                sluice_core::budget::bytes_per_token(doc.text_str(), TOKEN_SAMPLE_BYTES)
            );
        }
    }

    #[test]
    fn measuring_counts_text_and_structured_content() {
        let budget = Budget::default();
        let mut result = CallToolResult::success(vec![ContentBlock::text("hello")]);
        result.structured_content = Some(json!({"a": "hello"}));
        let size = measure_call(&result, &budget);
        assert_eq!(size.chars, 5 + 13);
        assert_eq!(size.tokens, None, "a few bytes need no tokenizer");
        assert!(budget.admits(&size));
        // 40,000 characters of digits: within the characters, counted.
        let digits: String = (0..8000).map(|i| format!("{i:04} ")).collect();
        let mut counted = CallToolResult::success(vec![ContentBlock::text(digits.clone())]);
        counted.structured_content = Some(json!({"d": digits}));
        let size = measure_call(&counted, &budget);
        assert!(
            size.chars > 80_000 && size.tokens.is_none(),
            "text + structured: over the characters"
        );
        let size = measure_call(
            &CallToolResult::success(vec![ContentBlock::text(digits)]),
            &budget,
        );
        assert!(size.tokens.unwrap() > 10_000, "{size:?}");
        let big = CallToolResult::success(vec![ContentBlock::text("x".repeat(50_000))]);
        let size = measure_call(&big, &budget);
        assert_eq!((size.chars, size.tokens), (50_000, None));
    }

    #[test]
    fn a_result_measured_from_its_bytes_measures_as_decoded() {
        let budget = Budget::default();
        let digits: String = (0..4000).map(|i| format!("{i:04} ")).collect();
        let mut structured = CallToolResult::success(vec![ContentBlock::text("a\tb \"é\"")]);
        structured.structured_content = Some(json!({"rows": [1.5, "x\ny", null], "n": -2}));
        let mut over = CallToolResult::success(vec![ContentBlock::text("z".repeat(50_000))]);
        over.structured_content = Some(json!({"big": "y".repeat(1000)}));
        let embedded = ContentBlock::resource;
        let results = [
            CallToolResult::success(vec![ContentBlock::text("line one\nline two ✓")]),
            CallToolResult::success(vec![ContentBlock::text(digits.clone())]),
            CallToolResult::error(vec![ContentBlock::text(digits), ContentBlock::text("x")]),
            structured,
            over,
            CallToolResult::success(vec![
                ContentBlock::image("aGVsbG8=", "image/png"),
                embedded(ResourceContents::text("file text", "file:///a")),
                embedded(ResourceContents::blob("Zm9v", "file:///b")),
                ContentBlock::resource_link(Resource::new("file:///c", "c")),
            ]),
        ];
        for result in results {
            let sent = serde_json::to_string(&result).unwrap();
            let from_bytes = SentCall::read(&sent)
                .expect("a tool's result")
                .size(&budget);
            let decoded = measure_call(&result, &budget);
            assert_eq!(
                (
                    from_bytes.bytes,
                    from_bytes.chars,
                    from_bytes.lines,
                    from_bytes.tokens
                ),
                (decoded.bytes, decoded.chars, decoded.lines, decoded.tokens),
                "{sent:.200}"
            );
        }
    }

    #[test]
    fn data_sent_twice_is_measured_once() {
        let budget = Budget::default();
        let with = |text: &str, structured: Option<Value>| {
            let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
            result.structured_content = structured;
            let copy = one_copy(&result, &budget).map(|size| size.bytes);
            // Read from its bytes, the result tells the same.
            let sent = serde_json::to_string(&result).unwrap();
            let from_bytes = SentCall::read(&sent).unwrap().one_copy(&budget);
            assert_eq!(from_bytes.map(|size| size.bytes), copy, "{sent:.200}");
            copy
        };
        let log = "line ✓\n".repeat(1000);
        let bytes = log.len() as u64;
        // The text again as the one member of structuredContent
        // (server-filesystem, FastMCP's `{"result": …}`).
        assert_eq!(with(&log, Some(json!({"content": log}))), Some(bytes));
        assert_eq!(with(&log, Some(json!({"result": log}))), Some(bytes));
        // The text serializes structuredContent: pretty, or with escapes
        // that only parsing tells equal.
        let value = json!({"rows": [{"id": 1, "name": "été"}], "n": 1});
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        assert_eq!(
            with(&pretty, Some(value.clone())),
            Some(pretty.len() as u64)
        );
        let escaped = r#"{"rows": [{"id": 1, "name": "été"}], "n": 1}"#;
        assert_eq!(
            with(escaped, Some(value.clone())),
            Some(escaped.len() as u64)
        );
        // Different data, or not one text: each is counted.
        assert_eq!(with(&log, Some(json!({"content": "other"}))), None);
        assert_eq!(with(&log, Some(json!({"content": log, "n": 1}))), None);
        assert_eq!(with(&pretty, Some(json!({"rows": []}))), None);
        assert_eq!(with(&log, None), None);
        let mut two = CallToolResult::success(vec![
            ContentBlock::text(log.clone()),
            ContentBlock::text(log.clone()),
        ]);
        two.structured_content = Some(json!({"content": log}));
        assert_eq!(one_copy(&two, &budget), None);
    }

    #[tokio::test]
    async fn a_result_sent_twice_is_announced_at_its_size_once() {
        let governor = Governor::new(&Config::single_command(&["x".into()]).unwrap());
        let log: String = (0..60_000).map(|i| format!("{i} passed\n")).collect();
        let mut result = CallToolResult::success(vec![ContentBlock::text(log.clone())]);
        result.structured_content = Some(json!({"result": log}));
        let policy = Policy {
            owner: Owner::Session(1),
            budget: Budget::default(),
            source: "run_tests".into(),
            mode: Mode::Buffer,
            preview_depth: DEFAULT_PREVIEW_DEPTH,
            narrowing: Arc::default(),
        };
        let answer = governor.tool_result(result, policy).await;
        let stored = answer.meta.as_ref().unwrap().0[crate::contract::meta::STORED].clone();
        assert_eq!(stored["bytes"], log.len());
        assert_eq!(stored["chars"], log.len());
        assert_eq!(stored["stored_bytes"], log.len());
        assert_eq!(stored["sent_twice"], true);
        let tokens = f64::from(count_tokens(&log, 1.25));
        let said = stored["tokens"].as_f64().unwrap();
        assert!((said - tokens).abs() < tokens * 0.1, "{said} vs {tokens}");
        let text = answer.content[0].as_text().unwrap().text.clone();
        assert!(
            text.starts_with(&format!(
                "run_tests returned ≈{} tokens ({} of text, sent both as text and as structuredContent), too large to show.\n",
                sluice_core::format::group(said as u64),
                sluice_core::format::bytes(log.len() as u64)
            )),
            "{text}"
        );
    }

    #[tokio::test]
    async fn content_blocks_are_stored_as_an_array_and_read_back_whole() {
        let governor = Governor::new(&Config::single_command(&["x".into()]).unwrap());
        let mut blocks: Vec<ContentBlock> = (0..30)
            .map(|i| ContentBlock::text(format!("block {i} ").repeat(400)))
            .collect();
        blocks.push(ContentBlock::image("A".repeat(120_000), "image/png"));
        let want = serde_json::to_value(&blocks).unwrap();
        let policy = Policy {
            owner: Owner::Session(7),
            budget: Budget::default(),
            source: "gallery".into(),
            mode: Mode::Buffer,
            preview_depth: DEFAULT_PREVIEW_DEPTH,
            narrowing: Arc::default(),
        };
        let answer = governor
            .tool_result(CallToolResult::success(blocks), policy)
            .await;
        let stored = answer.meta.unwrap().0[crate::contract::meta::STORED].clone();
        assert_eq!(stored["kind"], "blocks");
        let mut request = json!({"handle": stored["handle"]});
        let (mut items, mut slice) = (Vec::new(), String::new());
        let mut around = serde_json::Map::new();
        loop {
            let args = request.as_object().cloned();
            let page = governor
                .read(args, &Owner::Session(7), Budget::default())
                .await
                .unwrap();
            let text = |i: usize| page.content[i].as_text().unwrap().text.clone();
            let meta = page.meta.as_ref().unwrap().0[crate::contract::meta::PAGE].clone();
            if meta["form"] == "items" {
                items.extend(serde_json::from_str::<Vec<Value>>(&text(0)).unwrap());
            } else {
                // The image's data is larger than a page: it comes in
                // slices, the block's other members around its first one.
                assert_eq!(meta["path"], format!("/{}/data", items.len()));
                if let Some(a) = meta["around"].get(0) {
                    assert_eq!(a["key"], "data");
                    around = a["members"].as_object().unwrap().clone();
                    assert!(text(1).contains("also holds: {\"type\":\"image\""));
                }
                slice.push_str(&text(0));
                if meta["end"] == meta["total"] {
                    around.insert("data".into(), serde_json::from_str(&slice).unwrap());
                    items.push(Value::Object(std::mem::take(&mut around)));
                    slice.clear();
                }
            }
            match meta["next_cursor"].as_str() {
                Some(c) => request = json!({"cursor": c}),
                None => break,
            }
        }
        assert_eq!(Value::Array(items), want);
        // Another owner cannot read it.
        let other = governor
            .read(
                json!({"handle": stored["handle"]}).as_object().cloned(),
                &Owner::Session(8),
                Budget::default(),
            )
            .await
            .or_else(crate::tools::ToolError::into_result)
            .unwrap();
        assert_eq!(other.is_error, Some(true));
    }

    #[tokio::test]
    async fn a_json_rpc_error_over_a_small_budget_is_cut_to_it_and_stored() {
        let governor = Governor::new(&Config::single_command(&["x".into()]).unwrap());
        let budget = Budget {
            max_tokens: 1_000,
            max_chars: 3_000,
            ..Budget::default()
        };
        let policy = Policy {
            owner: Owner::Session(3),
            budget,
            source: "search".into(),
            mode: Mode::Buffer,
            preview_depth: DEFAULT_PREVIEW_DEPTH,
            narrowing: Arc::default(),
        };
        let small = ErrorData::invalid_params("bad query", None);
        assert_eq!(
            governor.tool_error(small.clone(), "web", &policy).await,
            small
        );
        let message: String = (0..20_000).map(|i| format!("{i} ")).collect();
        let error = ErrorData::invalid_params(message.clone(), Some(json!({"at": 7})));
        let cut = governor.tool_error(error, "web", &policy).await;
        assert_eq!(cut.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        let sent = serde_json::to_string(&cut).unwrap();
        assert!(budget.fits_text(&sent), "{} chars: {sent}", sent.len());
        let head = cut.message.split('…').next().unwrap();
        assert!(!head.is_empty() && message.starts_with(head));
        assert!(
            cut.message.contains(
                "upstream `web` answered search with a JSON-RPC error (code -32602) too large to show"
            ),
            "{}",
            cut.message
        );
        let handle = cut.data.as_ref().unwrap()[crate::contract::meta::STORED]["handle"]
            .as_str()
            .unwrap();
        let stored = governor
            .store()
            .get(&Owner::Session(3), handle)
            .unwrap()
            .stored;
        let whole: Value = serde_json::from_str(stored.doc.text_str()).unwrap();
        assert_eq!(
            whole,
            json!({"code": -32602, "message": message, "data": {"at": 7}})
        );
        // Passed through untouched when the tool is configured so.
        let passthrough = Policy {
            mode: Mode::Passthrough,
            ..policy
        };
        let error = ErrorData::invalid_params(message.clone(), None);
        assert_eq!(
            governor
                .tool_error(error.clone(), "web", &passthrough)
                .await,
            error
        );
    }

    #[test]
    fn the_stored_part_is_chosen_by_the_rules() {
        let one = CallToolResult::success(vec![ContentBlock::text("[1,2]")]);
        assert!(matches!(raw_of_call(one), Raw::Text(t) if t == "[1,2]"));
        let mut two =
            CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        two.structured_content = Some(json!({"result": ["a", "b"]}));
        assert!(matches!(raw_of_call(two), Raw::Json(t) if t == r#"{"result":["a","b"]}"#));
        let mixed = CallToolResult::success(vec![
            ContentBlock::text("a"),
            ContentBlock::image("AAAA", "image/png"),
        ]);
        assert!(
            matches!(raw_of_call(mixed), Raw::Blocks(t) if t.starts_with(r#"[{"type":"text""#))
        );
    }
}
