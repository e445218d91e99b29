//! What sluice counts for its operators: the figures `--admin` serves at
//! `GET /metrics` (the Prometheus text format, 0.0.4) and on its page.
//!
//! Two kinds of figures:
//! - **counted as they happen** (tool calls by outcome and their durations,
//!   tokens saved, pages, queries, searches): recorded by whoever makes them
//!   happen, through [`Metrics`], which the [`crate::govern::Governor`]
//!   owns;
//! - **read when scraped** (stored results, operations, the cache, the
//!   upstreams, sessions, jq workers): what other parts already keep,
//!   passed in a [`Snapshot`] to [`Metrics::encode`], so that nothing is
//!   counted twice.
//!
//! No label carries a value a client or an upstream chooses freely: tools
//! are labelled only once routed (an upstream's listed tool), at most
//! [`MAX_TOOL_SERIES`] of them; an unknown tool's calls are counted under
//! [`UNKNOWN`], and tools past the bound under [`OTHER`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// The `Content-Type` of `GET /metrics`.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How many (upstream, tool) pairs get series of their own; calls of
/// tools past it are counted under [`OTHER`].
pub const MAX_TOOL_SERIES: usize = 1_000;

/// The `upstream` and `tool` of a call to a tool no upstream lists.
pub const UNKNOWN: &str = "(unknown)";

/// The `tool` of calls to tools past [`MAX_TOOL_SERIES`].
pub const OTHER: &str = "(other)";

/// How long the tokens-saved history reaches back, at one point per
/// [`HISTORY_STEP`].
const HISTORY_POINTS: usize = 720;

/// How often the admin server adds a point to the history.
pub const HISTORY_STEP: Duration = Duration::from_secs(5);

/// The bounds (seconds) of the call duration histogram's buckets: from a
/// relayed call to one that became an operation.
const DURATION_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// How a tool call ended, as `sluice_tool_calls_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its result reached the client as the upstream sent it.
    Passed,
    /// Its result was over the budget: stored, and the client got a handle.
    Stored,
    /// It outlived its timeout: the client got an operation (or a task).
    Operation,
    /// The cache answered it.
    Cached,
    /// No result: a JSON-RPC error, sluice refused it, the upstream was
    /// down or the call was cancelled; or the tool's result says
    /// `isError`.
    Error,
}

impl Outcome {
    /// Every outcome, in the order of [`Outcome::index`].
    pub const ALL: [Outcome; 5] = [
        Outcome::Passed,
        Outcome::Stored,
        Outcome::Operation,
        Outcome::Cached,
        Outcome::Error,
    ];

    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Stored => "stored",
            Outcome::Operation => "operation",
            Outcome::Cached => "cached",
            Outcome::Error => "error",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a `sluice_query` ended (`sluice_queries_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryOutcome {
    /// It answered.
    Answered,
    /// The model's mistake: a filter that does not compile, an unknown
    /// handle, bad arguments.
    Refused,
    /// It ran out of time or memory, or its worker died.
    Stopped,
}

impl QueryOutcome {
    fn as_str(self) -> &'static str {
        match self {
            QueryOutcome::Answered => "answered",
            QueryOutcome::Refused => "refused",
            QueryOutcome::Stopped => "stopped",
        }
    }
}

/// The series of one (upstream, tool): its calls by outcome, and their
/// durations. Held by the call while it runs: recording takes no lock.
pub struct ToolSeries {
    outcomes: [IntCounter; 5],
    duration: Histogram,
}

impl ToolSeries {
    /// Records one call that ended as `outcome` after `took` (until its
    /// client had an answer).
    pub fn record(&self, outcome: Outcome, took: Duration) {
        self.outcomes[outcome.index()].inc();
        self.duration.observe(took.as_secs_f64());
    }
}

/// What is read from the rest of sluice when the metrics are scraped.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Stored results, and the bytes they hold.
    pub stored_results: u64,
    /// Bytes of stored documents.
    pub store_bytes: u64,
    /// Operations this instance knows, by status (`running`, …).
    pub operations: Vec<(&'static str, u64)>,
    /// Calls the cache answered, and those that went upstream for want of
    /// an entry (counters), and the bytes it holds.
    pub cache_hits: u64,
    /// See `cache_hits`.
    pub cache_misses: u64,
    /// See `cache_hits`.
    pub cache_bytes: u64,
    /// Each upstream: its name, whether it is connected, how often it was
    /// started again.
    pub upstreams: Vec<(String, bool, u64)>,
    /// Open client sessions.
    pub sessions: u64,
    /// Whether the store's last write succeeded.
    pub store_healthy: bool,
    /// jq workers running a query, and waiting for one.
    pub jq_busy: u64,
    /// See `jq_busy`.
    pub jq_idle: u64,
}

/// A limit a client's request or connection was refused at, as
/// `sluice_refusals_total` labels it: the key that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `[limits] max_requests_in_flight`: one client's requests answered
    /// at once (stdio, HTTP).
    RequestsInFlight,
    /// `[limits] requests_per_minute`.
    RequestsPerMinute,
    /// `[http] max_connections`.
    Connections,
    /// `[http] max_sessions`.
    Sessions,
    /// `[http] max_sessions_per_principal`.
    SessionsPerPrincipal,
    /// `[http] max_body_mb`.
    Body,
    /// `[operations] max_running`, `max_running_total`: operations running
    /// (a call past its timeout kept in the foreground, its client waiting).
    RunningOperations,
}

impl Limit {
    /// Every limit, each labelled from the start (at 0).
    pub const ALL: [Limit; 7] = [
        Limit::RequestsInFlight,
        Limit::RequestsPerMinute,
        Limit::Connections,
        Limit::Sessions,
        Limit::SessionsPerPrincipal,
        Limit::Body,
        Limit::RunningOperations,
    ];

    /// Its label: the key that sets it.
    pub fn label(self) -> &'static str {
        match self {
            Limit::RequestsInFlight => "max_requests_in_flight",
            Limit::RequestsPerMinute => "requests_per_minute",
            Limit::Connections => "max_connections",
            Limit::Sessions => "max_sessions",
            Limit::SessionsPerPrincipal => "max_sessions_per_principal",
            Limit::Body => "max_body_mb",
            Limit::RunningOperations => "max_running",
        }
    }
}

/// The figures, and the registry that writes them.
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    durations: HistogramVec,
    tokens_saved: IntCounter,
    pages_served: IntCounter,
    queries: IntCounterVec,
    searches: IntCounter,
    stored_results: IntGauge,
    store_bytes: IntGauge,
    store_healthy: IntGauge,
    operations: IntGaugeVec,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
    cache_bytes: IntGauge,
    upstream_up: IntGaugeVec,
    upstream_restarts: IntCounterVec,
    sessions: IntGauge,
    jq_workers: IntGaugeVec,
    build_info: IntGaugeVec,
    refusals: IntCounterVec,
    /// The series of each tool called, by the name clients call it by.
    tools: RwLock<HashMap<String, Arc<ToolSeries>>>,
    /// Scrapes one at a time: the figures read from elsewhere are set,
    /// then written.
    scraping: Mutex<()>,
    /// Tokens saved over time: (Unix ms, the total then), oldest first.
    history: Mutex<VecDeque<(u64, u64)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Self {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "sluice_tool_calls_total",
                "Tool calls routed to an upstream, by how they ended: passed (as sent), stored (over the budget), operation (outlived its timeout), cached (answered from the cache), error.",
            ),
            &["upstream", "tool", "outcome"],
        )
        .expect("valid metric");
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "sluice_tool_call_duration_seconds",
                "How long tool calls took until their client had an answer (a stored result's handle, an operation's id).",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
            &["upstream", "tool"],
        )
        .expect("valid metric");
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let metrics = Self {
            calls,
            durations,
            tokens_saved: counter(
                "sluice_tokens_saved_total",
                "Client tokens of stored results minus the tokens of the answers that stood for them.",
            ),
            pages_served: counter(
                "sluice_pages_served_total",
                "Pages of stored results served (sluice_read, resource reads).",
            ),
            queries: IntCounterVec::new(
                Opts::new(
                    "sluice_queries_total",
                    "sluice_query calls, by outcome: answered, refused (the model's mistake), stopped (time, memory, or the worker died).",
                ),
                &["outcome"],
            )
            .expect("valid metric"),
            searches: counter("sluice_searches_total", "sluice_search calls answered."),
            stored_results: gauge("sluice_stored_results", "Results in the store."),
            store_bytes: gauge(
                "sluice_store_bytes",
                "Bytes of the documents in the store.",
            ),
            store_healthy: gauge(
                "sluice_store_healthy",
                "1 while the store works (its last write succeeded), else 0: the store's figures are 0 while it fails.",
            ),
            operations: IntGaugeVec::new(
                Opts::new(
                    "sluice_operations",
                    "Operations (calls that outlived their timeout) this instance keeps, by status.",
                ),
                &["status"],
            )
            .expect("valid metric"),
            cache_hits: counter(
                "sluice_cache_hits_total",
                "Tool calls answered from the cache.",
            ),
            cache_misses: counter(
                "sluice_cache_misses_total",
                "Calls of cached tools that went upstream for want of an entry.",
            ),
            cache_bytes: gauge("sluice_cache_bytes", "Bytes of the cache's entries."),
            upstream_up: IntGaugeVec::new(
                Opts::new(
                    "sluice_upstream_up",
                    "1 while sluice is connected to the upstream, else 0.",
                ),
                &["upstream"],
            )
            .expect("valid metric"),
            upstream_restarts: IntCounterVec::new(
                Opts::new(
                    "sluice_upstream_restarts_total",
                    "Connections made to an upstream after its first (it died or was lost).",
                ),
                &["upstream"],
            )
            .expect("valid metric"),
            sessions: gauge("sluice_sessions", "Open client sessions."),
            jq_workers: IntGaugeVec::new(
                Opts::new(
                    "sluice_jq_workers",
                    "jq worker processes of sluice_query, by state (busy, idle).",
                ),
                &["state"],
            )
            .expect("valid metric"),
            build_info: IntGaugeVec::new(
                Opts::new("sluice_build_info", "Always 1; `version` is sluice's."),
                &["version"],
            )
            .expect("valid metric"),
            refusals: IntCounterVec::new(
                Opts::new(
                    "sluice_refusals_total",
                    "Client requests and connections refused at a limit, by the limit's key: max_requests_in_flight, requests_per_minute, max_connections, max_sessions, max_sessions_per_principal, max_body_mb, max_running.",
                ),
                &["limit"],
            )
            .expect("valid metric"),
            registry,
            tools: RwLock::default(),
            scraping: Mutex::default(),
            history: Mutex::default(),
        };
        let collectors: [Box<dyn Collector>; 19] = [
            Box::new(metrics.calls.clone()),
            Box::new(metrics.durations.clone()),
            Box::new(metrics.tokens_saved.clone()),
            Box::new(metrics.pages_served.clone()),
            Box::new(metrics.queries.clone()),
            Box::new(metrics.searches.clone()),
            Box::new(metrics.stored_results.clone()),
            Box::new(metrics.store_bytes.clone()),
            Box::new(metrics.store_healthy.clone()),
            Box::new(metrics.operations.clone()),
            Box::new(metrics.cache_hits.clone()),
            Box::new(metrics.cache_misses.clone()),
            Box::new(metrics.cache_bytes.clone()),
            Box::new(metrics.upstream_up.clone()),
            Box::new(metrics.upstream_restarts.clone()),
            Box::new(metrics.sessions.clone()),
            Box::new(metrics.jq_workers.clone()),
            Box::new(metrics.build_info.clone()),
            Box::new(metrics.refusals.clone()),
        ];
        for collector in collectors {
            metrics
                .registry
                .register(collector)
                .expect("metric names are unique");
        }
        // Present from the start, so that a dashboard sees zeros.
        for outcome in [
            QueryOutcome::Answered,
            QueryOutcome::Refused,
            QueryOutcome::Stopped,
        ] {
            metrics.queries.with_label_values(&[outcome.as_str()]);
        }
        for limit in Limit::ALL {
            metrics.refusals.with_label_values(&[limit.label()]);
        }
        metrics
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        metrics
    }

    /// The series of a call of `exposed` (the name clients call). For a
    /// name not seen yet, `route` says the upstream it was routed to
    /// (`None`: none) and its tool there if the upstream lists it (`None`:
    /// a name it does not list, counted as [`UNKNOWN`]); it is asked only
    /// then, so a call of a known tool takes one read lock here.
    pub fn tool<'a>(
        &self,
        exposed: &str,
        route: impl FnOnce() -> (Option<&'a str>, Option<&'a str>),
    ) -> Arc<ToolSeries> {
        if let Some(series) = read(&self.tools).get(exposed) {
            return series.clone();
        }
        let (upstream, tool) = route();
        let upstream = upstream.unwrap_or(UNKNOWN);
        // Unknown names and those past the bound are not kept by name (the
        // map would grow with every name a client makes up), and take no
        // write lock: the registry keeps their few series.
        let Some(tool) = tool else {
            return Arc::new(self.series(upstream, UNKNOWN));
        };
        let mut tools = write(&self.tools);
        if let Some(series) = tools.get(exposed) {
            return series.clone();
        }
        if tools.len() >= MAX_TOOL_SERIES {
            return Arc::new(self.series(upstream, OTHER));
        }
        let series = Arc::new(self.series(upstream, tool));
        tools.insert(exposed.to_owned(), series.clone());
        series
    }

    fn series(&self, upstream: &str, tool: &str) -> ToolSeries {
        ToolSeries {
            outcomes: Outcome::ALL
                .map(|o| self.calls.with_label_values(&[upstream, tool, o.as_str()])),
            duration: self.durations.with_label_values(&[upstream, tool]),
        }
    }

    /// Counts the tokens a stored result kept out of the client's context.
    pub fn saved(&self, tokens: u64) {
        self.tokens_saved.inc_by(tokens);
    }

    /// A client's request or connection was refused at `limit`.
    pub fn refused(&self, limit: Limit) {
        self.refusals.with_label_values(&[limit.label()]).inc();
    }

    /// The requests and connections refused at each limit since the start,
    /// by its key, every limit listed.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        Limit::ALL
            .iter()
            .map(|limit| {
                let counter = self.refusals.with_label_values(&[limit.label()]);
                (limit.label(), counter.get())
            })
            .collect()
    }

    /// Counts a page served.
    pub fn page_served(&self) {
        self.pages_served.inc();
    }

    /// Counts a `sluice_query`.
    pub fn query(&self, outcome: QueryOutcome) {
        self.queries.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Counts a `sluice_search` answered.
    pub fn search(&self) {
        self.searches.inc();
    }

    /// Tokens saved so far.
    pub fn tokens_saved(&self) -> u64 {
        self.tokens_saved.get()
    }

    /// Pages served, queries (all outcomes) and searches so far.
    pub fn reads(&self) -> (u64, u64, u64) {
        let queries = [
            QueryOutcome::Answered,
            QueryOutcome::Refused,
            QueryOutcome::Stopped,
        ]
        .iter()
        .map(|o| self.queries.with_label_values(&[o.as_str()]).get())
        .sum();
        (self.pages_served.get(), queries, self.searches.get())
    }

    /// Tool calls so far by outcome, in the order of [`Outcome::ALL`].
    pub fn calls_by_outcome(&self) -> [u64; 5] {
        let mut totals = [0; 5];
        for family in self.calls.collect() {
            for metric in family.get_metric() {
                let outcome = metric
                    .get_label()
                    .iter()
                    .find(|l| l.name() == "outcome")
                    .and_then(|l| Outcome::ALL.iter().find(|o| o.as_str() == l.value()));
                if let Some(outcome) = outcome {
                    totals[outcome.index()] += metric.get_counter().get_value() as u64;
                }
            }
        }
        totals
    }

    /// Adds a point (now, tokens saved so far) to the history.
    pub fn sample(&self, at: SystemTime) {
        let ms = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut history = lock(&self.history);
        if history.len() == HISTORY_POINTS {
            history.pop_front();
        }
        history.push_back((ms, self.tokens_saved()));
    }

    /// Tokens saved over time: (Unix ms, total), oldest first.
    pub fn history(&self) -> Vec<(u64, u64)> {
        lock(&self.history).iter().copied().collect()
    }

    /// Every metric in the Prometheus text format (0.0.4), with the figures
    /// read from elsewhere set from `now`.
    pub fn encode(&self, now: &Snapshot) -> String {
        let _one_at_a_time = lock(&self.scraping);
        self.stored_results.set(gauge_value(now.stored_results));
        self.store_bytes.set(gauge_value(now.store_bytes));
        self.store_healthy.set(i64::from(now.store_healthy));
        self.operations.reset();
        for status in ["running", "completed", "failed", "cancelled"] {
            self.operations.with_label_values(&[status]);
        }
        for (status, n) in &now.operations {
            self.operations
                .with_label_values(&[status])
                .set(gauge_value(*n));
        }
        // Counters kept elsewhere move here by what they moved since.
        catch_up(&self.cache_hits, now.cache_hits);
        catch_up(&self.cache_misses, now.cache_misses);
        self.cache_bytes.set(gauge_value(now.cache_bytes));
        for (name, up, restarts) in &now.upstreams {
            self.upstream_up
                .with_label_values(&[name])
                .set(i64::from(*up));
            catch_up(
                &self.upstream_restarts.with_label_values(&[name]),
                *restarts,
            );
        }
        self.sessions.set(gauge_value(now.sessions));
        self.jq_workers
            .with_label_values(&["busy"])
            .set(gauge_value(now.jq_busy));
        self.jq_workers
            .with_label_values(&["idle"])
            .set(gauge_value(now.jq_idle));
        let mut text = String::new();
        prometheus::TextEncoder::new()
            .encode_utf8(&self.registry.gather(), &mut text)
            .expect("the text encoder writes to a String");
        text
    }
}

/// Moves `counter` up to `total` (a count kept elsewhere, which only grows).
fn catch_up(counter: &IntCounter, total: u64) {
    let behind = total.saturating_sub(counter.get());
    if behind > 0 {
        counter.inc_by(behind);
    }
}

fn gauge_value(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
    }

    #[test]
    fn calls_are_counted_by_tool_and_outcome_and_names_past_the_bound_share_one_series() {
        let metrics = Metrics::new();
        let echo = metrics.tool("demo__echo", || (Some("demo"), Some("echo")));
        echo.record(Outcome::Passed, Duration::from_millis(3));
        echo.record(Outcome::Stored, Duration::from_millis(30));
        metrics
            .tool("demo__echo", || (Some("demo"), Some("echo")))
            .record(Outcome::Passed, Duration::from_millis(1));
        metrics
            .tool("made_up", || (None, None))
            .record(Outcome::Error, Duration::ZERO);
        // Routed (one upstream takes every name) but not listed by it.
        metrics
            .tool("made_up_too", || (Some("demo"), None))
            .record(Outcome::Error, Duration::ZERO);
        let text = metrics.encode(&Snapshot::default());
        assert_eq!(
            sample(
                &text,
                "sluice_tool_calls_total{outcome=\"passed\",tool=\"echo\",upstream=\"demo\"}"
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                "sluice_tool_calls_total{outcome=\"error\",tool=\"(unknown)\",upstream=\"(unknown)\"}"
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                "sluice_tool_call_duration_seconds_count{tool=\"echo\",upstream=\"demo\"}"
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(
                &text,
                "sluice_tool_calls_total{outcome=\"error\",tool=\"(unknown)\",upstream=\"demo\"}"
            ),
            Some(1.0)
        );
        assert_eq!(metrics.calls_by_outcome(), [2, 1, 0, 0, 2]);
        assert!(!text.contains("made_up"), "{text}");

        for n in 0..MAX_TOOL_SERIES + 50 {
            let tool = format!("t{n}");
            metrics
                .tool(&format!("demo__t{n}"), || (Some("demo"), Some(&tool)))
                .record(Outcome::Passed, Duration::ZERO);
        }
        let text = metrics.encode(&Snapshot::default());
        let tools = text
            .lines()
            .filter(|l| l.starts_with("sluice_tool_calls_total{outcome=\"passed\""))
            .count();
        assert_eq!(
            tools,
            MAX_TOOL_SERIES + 3,
            "the bound, `(other)`, and the two series of unknown names"
        );
        assert_eq!(
            sample(
                &text,
                "sluice_tool_calls_total{outcome=\"passed\",tool=\"(other)\",upstream=\"demo\"}"
            ),
            Some(51.0),
            "`echo` was the first; 51 came past the bound"
        );
    }

    #[test]
    fn figures_kept_elsewhere_are_set_when_scraped_and_counters_never_go_back() {
        let metrics = Metrics::new();
        let mut now = Snapshot {
            stored_results: 3,
            store_bytes: 1_000,
            operations: vec![("running", 2)],
            cache_hits: 5,
            cache_misses: 2,
            cache_bytes: 700,
            upstreams: vec![("fs".into(), true, 1)],
            sessions: 4,
            jq_busy: 1,
            jq_idle: 2,
            store_healthy: true,
        };
        let text = metrics.encode(&now);
        for (series, value) in [
            ("sluice_stored_results", 3.0),
            ("sluice_store_bytes", 1_000.0),
            ("sluice_store_healthy", 1.0),
            ("sluice_operations{status=\"running\"}", 2.0),
            ("sluice_operations{status=\"failed\"}", 0.0),
            ("sluice_cache_hits_total", 5.0),
            ("sluice_cache_misses_total", 2.0),
            ("sluice_cache_bytes", 700.0),
            ("sluice_upstream_up{upstream=\"fs\"}", 1.0),
            ("sluice_upstream_restarts_total{upstream=\"fs\"}", 1.0),
            ("sluice_sessions", 4.0),
            ("sluice_jq_workers{state=\"busy\"}", 1.0),
            ("sluice_jq_workers{state=\"idle\"}", 2.0),
            ("sluice_queries_total{outcome=\"answered\"}", 0.0),
        ] {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(text.contains("# TYPE sluice_cache_hits_total counter"));
        now.cache_hits = 9;
        now.operations = vec![("completed", 2)];
        now.upstreams = vec![("fs".into(), false, 1)];
        let text = metrics.encode(&now);
        assert_eq!(sample(&text, "sluice_cache_hits_total"), Some(9.0));
        assert_eq!(
            sample(&text, "sluice_operations{status=\"running\"}"),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, "sluice_upstream_up{upstream=\"fs\"}"),
            Some(0.0)
        );
        // A figure kept elsewhere that went back (a restarted cache) does
        // not make the counter go back.
        now.cache_hits = 1;
        let text = metrics.encode(&now);
        assert_eq!(sample(&text, "sluice_cache_hits_total"), Some(9.0));
    }

    #[test]
    fn the_history_keeps_the_latest_points() {
        let metrics = Metrics::new();
        for n in 0..HISTORY_POINTS + 10 {
            metrics.saved(1);
            metrics.sample(SystemTime::UNIX_EPOCH + Duration::from_secs(n as u64));
        }
        let history = metrics.history();
        assert_eq!(history.len(), HISTORY_POINTS);
        assert_eq!(history[0], (10_000, 11));
        assert_eq!(
            history.last(),
            Some(&(
                (HISTORY_POINTS as u64 + 9) * 1_000,
                HISTORY_POINTS as u64 + 10
            ))
        );
    }
}
