//! The answer a model gets instead of a result too large for it: what the
//! result is, its shape, a preview, and the exact calls that read the rest.
//!
//! The [`Overview`] (shape and preview material) is computed once when the
//! result is stored, from samples: a 100 MB array is not parsed whole, only
//! its first items and a spread of others. [`render`] then writes the
//! answer for one budget, cutting the preview until the answer fits.

use serde_json::Value;

use crate::budget::{Budget, count_chars, tokens_within};
use crate::document::{Document, Kind};
use crate::format::{bytes, counted, group};
use crate::shape::{Cut, Field, FieldValues, Recursion, Shape, Step, TreeSize, preview, tree_size};

/// What is known about a stored result besides its document.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredInfo {
    /// What produced it, e.g. `directory_tree` or `resources/read file:///x`.
    pub source: String,
    /// Bytes of what the upstream sent (before minifying).
    pub bytes: u64,
    /// Characters of what the upstream sent.
    pub chars: u64,
    /// Client tokens of what the upstream sent.
    pub tokens: u64,
    /// Whether `tokens` was extrapolated from samples (large results are
    /// not tokenized whole).
    pub tokens_estimated: bool,
    /// Whether the upstream flagged the result as an error.
    pub is_error: bool,
    /// Whether the upstream sent the same data twice, as text and as
    /// structured content: `bytes`, `chars` and `tokens` count it once.
    pub sent_twice: bool,
    /// Shape and preview material, sampled when stored.
    pub overview: Overview,
}

/// Items sampled from the start of the bulk array.
const FIRST_ITEMS: usize = 20;
/// Items sampled across the rest of it.
const SPREAD_ITEMS: usize = 60;
/// Bytes of items parsed for sampling, at most.
const SAMPLE_BYTES: usize = 8 << 20;
/// The largest document whose context around the bulk is parsed.
const CONTEXT_BYTES: usize = 4 << 20;
/// Items kept for previews.
const PREVIEW_ITEMS: usize = 5;
/// The o200k tokens the summary of a tree aims at: its preview is cut
/// until it is within.
pub const TREE_SUMMARY_AIM_TOKENS: u32 = 450;

/// What is known of a stored document's structure, from samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// The inferred shape, rendered at several depths (deepest first).
    shapes: Vec<String>,
    /// The array holding the bulk: pointer and item count.
    pub bulk: Option<(String, usize)>,
    /// Other large arrays (pointer, items), largest first.
    pub other_arrays: Vec<(String, usize)>,
    /// Ready-made jq filters over the bulk, from the sampled items: (filter,
    /// what it gives). For a tree, filters over its nodes at every depth.
    pub filters: Vec<(String, String)>,
    /// The tree, when the document's shape repeats inside itself.
    pub tree: Option<Tree>,
    /// Preview material: the document with the bulk array cut to its first
    /// items (JSON), or its first lines (text).
    material: Material,
}

#[derive(Debug, Clone, PartialEq)]
enum Material {
    Json(Value),
    Lines {
        first: Vec<String>,
        lines: u64,
        longest: u64,
    },
}

impl Overview {
    /// Samples `doc`.
    pub fn of(doc: &Document) -> Self {
        match doc.kind() {
            Kind::Text => Self::of_text(doc),
            Kind::Json | Kind::Blocks => Self::of_json(doc),
        }
    }

    fn of_text(doc: &Document) -> Self {
        let text = doc.text_str();
        let starts = doc.line_starts();
        let line = |i: usize| {
            let a = starts[i] as usize;
            let b = starts.get(i + 1).map_or(text.len(), |&s| s as usize);
            text[a..b].trim_end_matches(['\n', '\r'])
        };
        let longest = (0..starts.len())
            .map(|i| {
                let a = starts[i] as usize;
                starts.get(i + 1).map_or(text.len(), |&s| s as usize) - a
            })
            .max()
            .unwrap_or(0);
        let first = (0..starts.len().min(40))
            .map(|i| cut_line(line(i), 400))
            .collect();
        Self {
            shapes: vec![format!(
                "text, {} (the longest {})",
                counted(starts.len() as u64, "line", "lines"),
                bytes(longest as u64)
            )],
            bulk: None,
            other_arrays: Vec::new(),
            filters: Vec::new(),
            tree: None,
            material: Material::Lines {
                first,
                lines: starts.len() as u64,
                longest: longest as u64,
            },
        }
    }

    fn of_json(doc: &Document) -> Self {
        let text = doc.text_str();
        let bulk = doc.default_array().cloned();
        let items = bulk
            .as_ref()
            .and_then(|b| doc.items(&b.pointer).ok().flatten());
        let mut fields = Vec::new();
        // Whether the sampled value has the document's own structure (the
        // bulk array in its place), for a recursion's way to its nodes.
        let mut whole_structure = true;
        let (for_shape, for_preview) = match (&bulk, &items) {
            (Some(array), Some(items)) => {
                // Sample: the first items, then a spread of the rest.
                let n = items.len();
                let mut picks: Vec<usize> = (0..n.min(FIRST_ITEMS)).collect();
                if n > FIRST_ITEMS {
                    let step = ((n - FIRST_ITEMS) / SPREAD_ITEMS).max(1);
                    picks.extend((FIRST_ITEMS..n).step_by(step).take(SPREAD_ITEMS));
                }
                let mut budget = SAMPLE_BYTES;
                let mut sampled = Vec::new();
                for (k, i) in picks.iter().enumerate() {
                    let range = items.item(*i);
                    // The first item even when large, to have a shape, but
                    // not one so large that parsing it costs more than the
                    // answer is worth.
                    if range.len() > budget && (k > 0 || range.len() > 4 * SAMPLE_BYTES) {
                        continue;
                    }
                    budget = budget.saturating_sub(range.len());
                    if let Ok(v) = serde_json::from_str::<Value>(&text[range]) {
                        sampled.push(v);
                    }
                }
                let first: Vec<Value> =
                    sampled.iter().take(PREVIEW_ITEMS.min(n)).cloned().collect();
                let sampled = Value::Array(sampled);
                fields = Shape::of(&sampled).item_fields();
                let Value::Array(sampled) = sampled else {
                    unreachable!("made an array above")
                };
                let outside = text.len() - array.bytes();
                if outside <= CONTEXT_BYTES {
                    let with = |values: &[Value]| {
                        let mut s = String::with_capacity(outside + 64);
                        s.push_str(&text[..array.range.start]);
                        s.push_str(&Value::Array(values.to_vec()).to_string());
                        s.push_str(&text[array.range.end..]);
                        serde_json::from_str::<Value>(&s).unwrap_or(Value::Null)
                    };
                    (with(&sampled), with(&first))
                } else {
                    whole_structure = array.pointer.is_empty();
                    (Value::Array(sampled), Value::Array(first))
                }
            }
            _ => {
                let whole = serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
                (whole.clone(), whole)
            }
        };
        let mut shape = Shape::of(&for_shape);
        // A tree only when it holds the bulk: a small tree beside a large
        // flat array does not make the document a tree.
        let tree = shape
            .recursion()
            .filter(|r| {
                whole_structure && bulk.as_ref().is_none_or(|b| holds(&r.roots, &b.pointer))
            })
            .and_then(|recursion| {
                shape = shape.folded(&recursion);
                Tree::of(text, &recursion)
            });
        let shapes = (1..=5).rev().map(|d| shape.render(d)).collect();
        let material = preview(
            &for_preview,
            Cut {
                depth: 8,
                items: PREVIEW_ITEMS,
                string_chars: 400,
            },
        );
        let filters = match &tree {
            Some(tree) => tree.filters(),
            None => bulk
                .as_ref()
                .map(|b| suggested_filters(&b.pointer, &fields))
                .unwrap_or_default(),
        };
        Self {
            shapes,
            filters,
            tree,
            bulk: bulk.as_ref().map(|b| (b.pointer.clone(), b.items)),
            other_arrays: doc
                .notable_arrays()
                .into_iter()
                .filter(|a| Some(&a.pointer) != bulk.as_ref().map(|b| &b.pointer))
                .filter(|a| a.items > 1)
                .take(3)
                .map(|a| (a.pointer.clone(), a.items))
                .collect(),
            material: Material::Json(material),
        }
    }

    /// The shape, rendered: level 0 is the deepest (5 levels), 4 the shallowest.
    pub fn shape(&self, level: usize) -> &str {
        &self.shapes[level.min(self.shapes.len() - 1)]
    }

    /// The preview at `cut`, as text.
    fn preview(&self, cut: Cut) -> (String, String) {
        match &self.material {
            Material::Json(value) => {
                let mut cut_value = preview(value, cut);
                let mut label = format!("depth {}", cut.depth);
                if let Some((pointer, n)) = &self.bulk {
                    let shown = (*n).min(cut.items).min(PREVIEW_ITEMS);
                    if let Some(Value::Array(items)) = cut_value.pointer_mut(pointer) {
                        items.retain(|v| !v.as_str().is_some_and(|s| s.starts_with("… ")));
                        if *n > items.len() {
                            items.push(Value::String(format!(
                                "… {}",
                                counted((*n - items.len()) as u64, "more item", "more items")
                            )));
                        }
                    }
                    label = format!(
                        "{} of {}, {label}",
                        group(shown as u64),
                        counted(*n as u64, "item", "items")
                    );
                }
                let text = serde_json::to_string(&cut_value).unwrap_or_default();
                (label, text)
            }
            Material::Lines { first, lines, .. } => {
                let shown = first.len().min(cut.items * 4).max(1);
                let text: Vec<String> = first
                    .iter()
                    .take(shown)
                    .map(|l| cut_line(l, cut.string_chars))
                    .collect();
                (
                    format!(
                        "first {} of {}",
                        group(shown as u64),
                        counted(*lines, "line", "lines")
                    ),
                    text.join("\n"),
                )
            }
        }
    }
}

fn cut_line(line: &str, max: usize) -> String {
    let chars = count_chars(line);
    if chars <= max {
        line.to_owned()
    } else {
        let kept: String = line.chars().take(max).collect();
        format!("{kept}…(+{} chars)", group((chars - max) as u64))
    }
}

/// Whether the array at `pointer` is the one holding the nodes at `roots`,
/// or inside them.
fn holds(roots: &[Step], pointer: &str) -> bool {
    let holder = match roots {
        [init @ .., Step::Items] => init,
        all => all,
    };
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(crate::scan::unescape_token)
        .collect();
    tokens.len() >= holder.len()
        && holder.iter().zip(&tokens).all(|(step, token)| match step {
            Step::Items => token.parse::<usize>().is_ok(),
            Step::Member(key) => key == token,
        })
}

/// A document whose shape repeats inside itself (a directory tree, nested
/// comments, an AST): where its nodes are, what names and tells them apart,
/// and how many there are.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// jq for the outermost nodes: `.[]`, `.` or `.tree[]`.
    pub roots: String,
    /// How deep in the document the outermost nodes are (`.[]`: 1).
    pub roots_depth: usize,
    /// The key of a node's children (`children`).
    pub key: String,
    /// The key that names a node (`name`), and whether it is a number.
    pub name: Option<(String, bool)>,
    /// The key whose values tell nodes apart (`type`).
    pub kind: Option<String>,
    /// Its size, counted in the whole document.
    pub size: TreeSize,
}

/// Keys whose strings tell nodes apart even when they are many.
const KIND_KEYS: [&str; 5] = ["type", "kind", "category", "status", "role"];

/// Keys that name a node, the likeliest first.
const NAME_KEYS: [&str; 9] = [
    "name", "title", "path", "label", "filename", "file", "key", "id", "value",
];

impl Tree {
    /// The tree of `recursion` in the compact JSON `text`: its nodes are
    /// counted in one pass over the text. `None` if there is no node.
    fn of(text: &str, recursion: &Recursion) -> Option<Self> {
        let size = tree_size(text, recursion);
        if size.nodes == 0 {
            return None;
        }
        let fields = recursion.node.fields();
        let named = |f: &&Field| {
            matches!(
                f.values,
                FieldValues::Strings | FieldValues::Numbers | FieldValues::Enum(_)
            ) && f.name != recursion.key
        };
        let name = NAME_KEYS
            .iter()
            .find_map(|key| fields.iter().filter(named).find(|f| f.name == *key))
            .or_else(|| {
                fields
                    .iter()
                    .filter(named)
                    .find(|f| f.always && f.values == FieldValues::Strings)
            });
        // A field of a few values, the fewest first; else strings under a
        // name that says it (an AST's node types are many).
        let others = || {
            fields
                .iter()
                .filter(|f| Some(&f.name) != name.map(|n| &n.name))
        };
        let kind = others()
            .filter_map(|f| match &f.values {
                FieldValues::Enum(values) => Some((f, values.len())),
                _ => None,
            })
            .min_by_key(|(f, values)| (!f.always, *values))
            .map(|(f, _)| f)
            .or_else(|| {
                others().find(|f| {
                    f.values == FieldValues::Strings
                        && KIND_KEYS.contains(&f.name.to_ascii_lowercase().as_str())
                })
            })
            .map(|f| f.name.clone());
        let mut roots = String::from(".");
        for step in &recursion.roots {
            match step {
                Step::Items => roots.push_str("[]"),
                Step::Member(key) => {
                    if roots == "." {
                        roots.clear();
                    }
                    roots.push_str(&jq_key(key));
                }
            }
        }
        Some(Self {
            roots,
            roots_depth: recursion.roots.len(),
            key: recursion.key.clone(),
            name: name.map(|f| (f.name.clone(), f.values == FieldValues::Numbers)),
            kind,
            size,
        })
    }

    /// jq filters that work at every depth: counts by the kind, every node
    /// with its path (names joined with `/`), the nodes with the most
    /// children.
    fn filters(&self) -> Vec<(String, String)> {
        let children = jq_key(&self.key);
        let count_key = object_key(&self.key);
        let over_roots = |f: &str| {
            if self.roots == "." {
                f.to_owned()
            } else {
                format!("{} | {f}", self.roots)
            }
        };
        let every_node = over_roots(&format!("recurse({children}[]?)"));
        let mut filters = Vec::new();
        if let Some(kind) = &self.kind {
            let (key, label) = (jq_key(kind), object_key(kind));
            filters.push((
                format!(
                    "[{every_node}] | group_by({key}) | map({{{label}: .[0]{key}, count: length}})"
                ),
                format!("how many of each {kind}, at every depth"),
            ));
        }
        let Some((name, number)) = &self.name else {
            filters.push((
                format!(
                    "[{every_node}] | sort_by(-({children} | length)) | .[:10] | map(del({children}))"
                ),
                "the 10 nodes with the most children (without them)".to_owned(),
            ));
            return filters;
        };
        let name = if *number {
            format!("({} | tostring)", jq_key(name))
        } else {
            jq_key(name)
        };
        // Each node as an object with its path; the recursion carries the
        // path of its parent.
        let with_paths = |fields: &str| {
            format!(
                "def p($pre): ($pre + {name}) as $p | {{path: $p{fields}}}, ({children}[]? | p($p + \"/\")); [{}]",
                over_roots("p(\"\")")
            )
        };
        filters.push((
            format!(
                "{} | sort_by(-.{count_key}) | .[:10]",
                with_paths(&format!(", {count_key}: ({children} | length)"))
            ),
            "the 10 nodes with the most children, with their paths".to_owned(),
        ));
        let kind_field = self
            .kind
            .as_ref()
            .map(|kind| {
                if is_plain(kind) {
                    format!(", {kind}")
                } else {
                    format!(", {}: {}", object_key(kind), jq_key(kind))
                }
            })
            .unwrap_or_default();
        filters.push((
            with_paths(&kind_field),
            "every node with its path".to_owned(),
        ));
        filters
    }
}

/// How the answer is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A summary: shape, a short preview, next steps.
    Summary,
    /// The preview as the answer, as long as fits, marked as truncated.
    Truncated,
}

/// Everything the answer names.
#[derive(Debug, Clone)]
pub struct Answer<'a> {
    /// What was called, e.g. `directory_tree`.
    pub source: &'a str,
    /// The handle.
    pub handle: &'a str,
    /// The stored result's sizes.
    pub info: &'a StoredInfo,
    /// The document's kind.
    pub kind: Kind,
    /// Pages for the caller's budget.
    pub pages: usize,
    /// The name of the read tool (`sluice_read`).
    pub read_tool: &'a str,
    /// The name of the search tool (`sluice_search`), if there is one.
    pub search_tool: Option<&'a str>,
    /// The name of the jq tool (`sluice_query`), if there is one.
    pub query_tool: Option<&'a str>,
    /// Arguments of the upstream tool that narrow its result.
    pub narrowing: &'a [String],
    /// The deepest preview.
    pub preview_depth: usize,
    /// Summary or truncated preview.
    pub style: Style,
    /// The whole document, when it is small enough to be shown whole once
    /// compacted (pretty-printing and duplicates made the result too large).
    pub whole: Option<&'a str>,
    /// The size of the stored document (compact JSON, or the text).
    pub stored_bytes: u64,
}

/// The answer's text, fitted to `budget` (which should already leave room
/// for whatever is sent with it).
pub fn render(answer: &Answer<'_>, overview: &Overview, budget: &Budget) -> String {
    let d = answer.preview_depth.max(1);
    let cut = |depth: usize, items: usize, string_chars: usize| Cut {
        depth,
        items,
        string_chars,
    };
    // (preview cut, shape level), the richest first.
    let cuts = match &overview.tree {
        // A tree's preview shows its outermost nodes with their children,
        // whose own children are cut (the shape says what they hold).
        Some(tree) => {
            let nodes = tree.roots_depth;
            vec![
                (cut(nodes + 3, 2, 40), 0),
                (cut(nodes + 3, 1, 40), 0),
                (cut(nodes + 1, 2, 40), 1),
                (cut(nodes + 1, 1, 20), 2),
                (cut(0, 1, 20), 4),
            ]
        }
        None => vec![
            (cut(d, 5, 200), 0),
            (cut(d, 3, 120), 0),
            (cut(d.min(3), 2, 80), 1),
            (cut(d.min(2), 1, 60), 2),
            (cut(1, 1, 40), 3),
            (cut(0, 1, 20), 4),
        ],
    };
    // A summary is kept short even when the budget is large: it is read
    // once, the pages hold the data.
    let limit = match answer.style {
        Style::Summary => Budget {
            max_tokens: budget.max_tokens.min(3_000),
            max_chars: budget.max_chars.min(10_000),
            ..*budget
        },
        Style::Truncated => *budget,
    };
    if answer.style == Style::Summary && answer.whole.is_some() {
        let text = write(answer, overview, cuts[0].0, 0, true);
        if fits(&text, budget) {
            return text;
        }
    }
    // The richest text within the limit; for a tree's summary, the
    // richest within the aim if one is (its shape and filters say more than
    // a longer preview). Written one cut at a time, until one will do.
    let aims = answer.style == Style::Summary && overview.tree.is_some();
    let mut within_limit = None;
    let mut last = String::new();
    for (cut, shape_level) in &cuts {
        let text = write(answer, overview, *cut, *shape_level, false);
        if fits(&text, &limit) {
            if !aims || tokens_within(&text, 1.0, TREE_SUMMARY_AIM_TOKENS).is_some() {
                return text;
            }
            within_limit.get_or_insert(text);
        } else {
            last = text;
        }
    }
    if let Some(text) = within_limit {
        return text;
    }
    // Not even the smallest preview fits: the lines that fit, the first
    // one and the call that reads the result before the others.
    let lines: Vec<&str> = last.lines().collect();
    let read_line = lines
        .iter()
        .position(|l| l.contains(answer.handle) && l.contains(answer.read_tool));
    let mut kept = vec![false; lines.len()];
    for i in [0].into_iter().chain(read_line).chain(0..lines.len()) {
        if kept[i] {
            continue;
        }
        kept[i] = true;
        if !fits(&joined(&lines, &kept), budget) {
            kept[i] = false;
        }
    }
    joined(&lines, &kept)
}

/// The `kept` lines of `lines`, each ended by a newline.
fn joined(lines: &[&str], kept: &[bool]) -> String {
    let mut out = String::new();
    for (line, _) in lines.iter().zip(kept).filter(|(_, k)| **k) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn fits(text: &str, budget: &Budget) -> bool {
    budget.fits_text(text)
}

/// What was received and what is stored, each counted once: `812 KB of
/// JSON, sent both as text and as structuredContent; stored compact: 301 KB`.
fn sizes(answer: &Answer<'_>) -> String {
    let info = answer.info;
    let what = match answer.kind {
        Kind::Json => "JSON",
        Kind::Text => "text",
        Kind::Blocks => "content blocks",
    };
    let mut out = format!("{} of {what}", bytes(info.bytes));
    if info.sent_twice {
        out.push_str(", sent both as text and as structuredContent");
    }
    // Compacting a pretty-printed result makes it smaller: say so when it
    // matters (pages hold the compact form).
    if answer.stored_bytes.saturating_mul(10) < info.bytes.saturating_mul(9) {
        out.push_str(&format!("; stored compact: {}", bytes(answer.stored_bytes)));
    }
    out
}

fn write(
    answer: &Answer<'_>,
    overview: &Overview,
    cut: Cut,
    shape_level: usize,
    whole: bool,
) -> String {
    let info = answer.info;
    let tokens = format!(
        "{}{} tokens",
        if info.tokens_estimated { "≈" } else { "" },
        group(info.tokens)
    );
    let returned = if info.is_error {
        "returned an error of"
    } else {
        "returned"
    };
    let sizes = sizes(answer);
    let read = format!("{} {{\"handle\":\"{}\"}}", answer.read_tool, answer.handle);
    let (label, preview) = match answer.whole {
        Some(text) if whole => ("the whole result, compact".to_owned(), text.to_owned()),
        _ => overview.preview(cut),
    };
    let source = answer.source;
    let mut out = match answer.style {
        Style::Summary if whole => format!(
            "{source} {returned} {tokens} ({sizes}): over the budget as sent, but it fits once compacted, so it is shown whole below.\n"
        ),
        Style::Summary => format!("{source} {returned} {tokens} ({sizes}), too large to show.\n"),
        Style::Truncated => format!(
            "[TRUNCATED by sluice: {source} {returned} {tokens} ({sizes}). Below is a cut preview, not the whole result; the whole result is stored: {read} reads it in {} pages.]\n",
            group(answer.pages as u64)
        ),
    };
    out.push_str(&format!("Shape: {}", overview.shape(shape_level)));
    match (&overview.tree, &overview.bulk) {
        (Some(tree), _) => {
            let size = &tree.size;
            out.push_str(&format!(" — a tree of {} nodes", group(size.nodes)));
            if size.roots > 1 {
                out.push_str(&format!(" ({} at the top)", group(size.roots)));
            }
            out.push_str(&format!(", {} levels deep", group(size.depth)));
        }
        (None, Some((pointer, n))) => {
            let at = if pointer.is_empty() {
                "the root"
            } else {
                pointer
            };
            out.push_str(&format!(
                " — the bulk: {} at {at}",
                counted(*n as u64, "item", "items")
            ));
        }
        (None, None) => {}
    }
    out.push('\n');
    out.push_str(&format!("Preview ({label}):\n{preview}\n"));
    if answer.style == Style::Truncated {
        return out;
    }
    // The handle is written once, in the first call: the others take the
    // same (a scripted agent fills it in).
    out.push_str("Next, every call with the same handle:\n");
    out.push_str(&format!(
        "  {read} — {} page{}; add \"page\":N to jump",
        group(answer.pages as u64),
        if answer.pages == 1 { "" } else { "s" }
    ));
    if overview.bulk.is_some() {
        out.push_str(", or \"path\":\"/json/pointer\" to page another array");
    }
    out.push('\n');
    if let Some(search) = answer.search_tool {
        let what = if answer.kind == Kind::Text {
            "lines"
        } else {
            "strings, with their JSON paths,"
        };
        out.push_str(&format!(
            "  {search} {{\"pattern\":\"…\"}} — the {what} that match\n"
        ));
    }
    if let Some(query) = answer.query_tool {
        if overview.tree.is_none() {
            let (filter, what) = match &overview.bulk {
                Some((pointer, _)) if pointer.is_empty() => ("length".to_owned(), "jq over it"),
                Some((pointer, _)) => (format!("{} | length", jq_path(pointer)), "jq over it"),
                None if answer.kind == Kind::Text => ("length".to_owned(), "jq over its lines"),
                None => ("keys".to_owned(), "jq over it"),
            };
            let call = serde_json::json!({"filter": filter});
            out.push_str(&format!("  {query} {call} — {what}\n"));
        }
        for (filter, what) in &overview.filters {
            let call = serde_json::json!({"filter": filter});
            out.push_str(&format!("  {query} {call} — {what}\n"));
        }
    }
    if overview.tree.is_none() {
        for (pointer, n) in &overview.other_arrays {
            out.push_str(&format!(
                "  {} {{\"path\":{:?}}} — {}\n",
                answer.read_tool,
                pointer,
                counted(*n as u64, "item", "items")
            ));
        }
    }
    if !answer.narrowing.is_empty() {
        let args: Vec<String> = answer.narrowing.iter().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!(
            "  or call {} again with {} to narrow it.\n",
            answer.source,
            join_or(&args)
        ));
    }
    out
}

/// Names of fields that usually say what an item is.
const TELLING_NAMES: [&str; 22] = [
    "id",
    "name",
    "title",
    "path",
    "file",
    "filename",
    "type",
    "kind",
    "status",
    "state",
    "url",
    "key",
    "message",
    "level",
    "severity",
    "size",
    "count",
    "date",
    "time",
    "timestamp",
    "created_at",
    "updated_at",
];

/// Ready-made jq filters over the bulk array at `pointer`, from what its
/// sampled items hold: counts by a small-enum field, the items with one of
/// its values, and the few most telling fields of each item.
pub fn suggested_filters(pointer: &str, fields: &[Field]) -> Vec<(String, String)> {
    let at = jq_path(pointer);
    let over = |f: String| if at == "." { f } else { format!("{at} | {f}") };
    let mut filters = Vec::new();
    // The enum with the fewest values makes the shortest table.
    let group = fields
        .iter()
        .filter_map(|f| match &f.values {
            FieldValues::Enum(values) if f.always => Some((f, values)),
            _ => None,
        })
        .min_by_key(|(_, values)| values.len());
    if let Some((field, values)) = group {
        let key = jq_key(&field.name);
        let label = object_key(&field.name);
        let count = if field.name == "count" {
            "items"
        } else {
            "count"
        };
        filters.push((
            over(format!(
                "group_by({key}) | map({{{label}: .[0]{key}, {count}: length}})"
            )),
            format!("how many of each {}", field.name),
        ));
        // The rarest value: what a model usually looks for (the failures
        // among the passes).
        let (value, _) = values.last().expect("an enum has values");
        let literal = serde_json::to_string(value).unwrap_or_default();
        filters.push((
            over(format!("map(select({key} == {literal}))")),
            format!("the items whose {} is {literal}", field.name),
        ));
    } else if let Some(flag) = fields
        .iter()
        .find(|f| f.always && f.values == FieldValues::Booleans)
    {
        filters.push((
            over(format!("map(select({}))", jq_key(&flag.name))),
            format!("the items whose {} is true", flag.name),
        ));
    }
    if fields.len() > 5 {
        let score = |f: &Field| -> i32 {
            let kind = match f.values {
                FieldValues::Enum(_) => 3,
                FieldValues::Strings | FieldValues::Numbers => 2,
                FieldValues::Booleans => 1,
                FieldValues::Other => return i32::MIN,
            };
            let telling = TELLING_NAMES.contains(&f.name.to_ascii_lowercase().as_str());
            kind + 3 * i32::from(telling) - i32::from(!f.always)
        };
        let mut ranked: Vec<(usize, i32)> = fields
            .iter()
            .enumerate()
            .map(|(i, f)| (i, score(f)))
            .filter(|(_, s)| *s > i32::MIN)
            .collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut picked: Vec<usize> = ranked.iter().take(4).map(|(i, _)| *i).collect();
        picked.sort_unstable();
        if picked.len() >= 2 {
            let names: Vec<String> = picked
                .iter()
                .map(|&i| {
                    let name = &fields[i].name;
                    if is_plain(name) {
                        name.clone()
                    } else {
                        format!("{}: {}", object_key(name), jq_key(name))
                    }
                })
                .collect();
            filters.push((
                over(format!("map({{{}}})", names.join(", "))),
                format!("only {} of the {} fields", picked.len(), fields.len()),
            ));
        }
    }
    filters
}

/// Whether `key` can be written bare in jq (`.key`, `{key}`).
fn is_plain(key: &str) -> bool {
    const KEYWORDS: [&str; 17] = [
        "and", "or", "not", "if", "then", "elif", "else", "end", "as", "def", "reduce", "foreach",
        "try", "catch", "label", "import", "include",
    ];
    key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&key)
}

/// `.key`, or `."the key"`.
fn jq_key(key: &str) -> String {
    format!(".{}", object_key(key))
}

/// `key`, or `"the key"`, as an object key in jq.
fn object_key(key: &str) -> String {
    if is_plain(key) {
        key.to_owned()
    } else {
        serde_json::to_string(key).unwrap_or_default()
    }
}

/// A JSON Pointer as a jq path: `/rows/0/a b` → `.rows[0]."a b"`.
pub fn jq_path(pointer: &str) -> String {
    let mut out = String::new();
    for raw in pointer.split('/').skip(1) {
        let token = crate::scan::unescape_token(raw);
        if token.parse::<usize>().is_ok() {
            out.push_str(&format!("[{token}]"));
        } else {
            out.push_str(&jq_key(&token));
        }
    }
    if out.is_empty() || out.starts_with('[') {
        out.insert(0, '.');
    }
    out
}

fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// The arguments of a tool's input schema that narrow its result (`limit`,
/// `max_count`, `head`, `excludePatterns`…), as named in the schema.
pub fn narrowing_arguments(input_schema: &serde_json::Map<String, Value>) -> Vec<String> {
    const HINTS: [&str; 17] = [
        "limit", "max", "head", "tail", "exclude", "include", "filter", "query", "depth", "page",
        "offset", "since", "until", "pattern", "fields", "count", "context",
    ];
    let Some(Value::Object(properties)) = input_schema.get("properties") else {
        return Vec::new();
    };
    properties
        .keys()
        .filter(|name| {
            let lower = name.to_ascii_lowercase();
            HINTS.iter().any(|h| lower.contains(h))
        })
        .take(4)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(tokens: u64) -> StoredInfo {
        StoredInfo {
            source: "list_rows".into(),
            bytes: 1_000_000,
            chars: 1_000_000,
            tokens,
            tokens_estimated: false,
            is_error: false,
            sent_twice: false,
            overview: Overview::of(&Document::text(String::new())),
        }
    }

    #[test]
    fn a_summary_names_shape_bulk_preview_and_next_steps() {
        let rows: Vec<Value> = (0..5000)
            .map(|i| {
                let kind = ["a", "b"][i % 2];
                json!({"id": i, "kind": kind, "text": "lorem ipsum ".repeat(5)})
            })
            .collect();
        let doc =
            Document::json(json!({"count": 5000, "rows": rows, "tags": ["x", "y"]}).to_string())
                .unwrap();
        let overview = Overview::of(&doc);
        assert_eq!(overview.bulk, Some(("/rows".to_owned(), 5000)));
        let info = info(300_000);
        let narrowing = vec!["limit".to_owned()];
        let answer = Answer {
            source: "list_rows",
            handle: "h_x",
            info: &info,
            kind: Kind::Json,
            pages: 17,
            read_tool: "sluice_read",
            search_tool: Some("sluice_search"),
            query_tool: Some("sluice_query"),
            narrowing: &narrowing,
            preview_depth: 3,
            style: Style::Summary,
            whole: None,
            stored_bytes: 1_000_000,
        };
        let text = render(&answer, &overview, &Budget::default());
        assert!(
            text.starts_with(
                "list_rows returned 300,000 tokens (977 KB of JSON), too large to show.\n"
            ),
            "{text}"
        );
        assert!(text.contains(r#"Shape: {count: integer, rows: [{id: integer, kind: "a"|"b", text: string}], tags: ["x"|"y"]"#) || text.contains("Shape: {count: integer, rows: [{id: integer, kind: \"a\"|\"b\", text: string}], tags: [string]}"), "{text}");
        assert!(text.contains("the bulk: 5,000 items at /rows"), "{text}");
        assert!(overview.tree.is_none(), "rows are no tree");
        assert!(!text.contains("<recursive>") && !text.contains("a tree of"));
        assert!(
            text.contains("Preview (5 of 5,000 items, depth 3):"),
            "{text}"
        );
        assert!(text.contains("\"… 4,995 more items\""), "{text}");
        assert!(
            text.contains("Next, every call with the same handle:\n  sluice_read {\"handle\":\"h_x\"} — 17 pages"),
            "{text}"
        );
        assert_eq!(text.matches("h_x").count(), 1, "the handle once: {text}");
        let steps = next_steps(&text);
        let tools: Vec<&str> = steps.iter().map(|(tool, _, _)| tool.as_str()).collect();
        assert_eq!(
            tools,
            [
                "sluice_read",
                "sluice_search",
                "sluice_query",
                "sluice_query",
                "sluice_query",
                "sluice_read"
            ]
        );
        assert_eq!(steps[3].2, "how many of each kind");
        assert_eq!(steps[4].2, "the items whose kind is \"b\"");
        assert_eq!(steps[5].1, json!({"path": "/tags"}));
        assert!(
            text.contains("or call list_rows again with `limit` to narrow it."),
            "{text}"
        );

        // A document small enough once compact is shown whole.
        let small = Document::json(r#"{"a": [1, 2, 3]}"#.into()).unwrap();
        let whole = Answer {
            whole: Some(small.text_str()),
            ..answer.clone()
        };
        let text = render(&whole, &Overview::of(&small), &Budget::default());
        assert!(
            text.contains("it fits once compacted, so it is shown whole below"),
            "{text}"
        );
        assert!(
            text.contains("Preview (the whole result, compact):\n{\"a\":[1,2,3]}\n"),
            "{text}"
        );

        // A tiny budget still gets an answer that fits.
        let small = Budget {
            max_tokens: 200,
            max_chars: 700,
            ..Budget::default()
        };
        let text = render(&answer, &overview, &small);
        assert!(
            fits(&text, &small) && text.contains("sluice_read {\"handle\":\"h_x\"}"),
            "the call that reads it is kept: {text}"
        );
    }

    /// The next steps of an answer, as a scripted agent reads them: each
    /// line a built-in tool, one JSON object of arguments, ` — ` and what
    /// it gives.
    fn next_steps(text: &str) -> Vec<(String, Value, String)> {
        let steps = text.split_once("\nNext").expect("next steps").1;
        steps
            .lines()
            .skip(1)
            .filter_map(|line| {
                let (tool, rest) = line.trim().split_once(' ')?;
                tool.starts_with("sluice_").then_some(())?;
                let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
                let args = values.next()?.ok()?;
                let what = rest[values.byte_offset()..].strip_prefix(" — ")?;
                Some((tool.to_owned(), args, what.to_owned()))
            })
            .collect()
    }

    #[test]
    fn a_tree_gets_its_size_and_filters_that_work_at_every_depth() {
        // a/, a/b, a/c/, a/c/d, a/c/f, a/c/g, e
        let file = |name: &str| json!({"name": name, "type": "file"});
        let dir = |name: &str, children: Value| json!({"name": name, "type": "directory", "children": children});
        let entries = json!([
            dir(
                "a",
                json!([
                    file("b"),
                    dir("c", json!([file("d"), file("f"), file("g")]))
                ])
            ),
            file("e"),
        ]);
        let cases = [
            (entries.clone(), ".[]", "", 7, 2, 3),
            (dir("root", entries.clone()), ".", "root/", 8, 1, 4),
            (json!({"n": 7, "tree": entries}), ".tree[]", "", 7, 2, 3),
        ];
        let limits = crate::query::QuerySettings::default().output_limits();
        for (value, roots, prefix, nodes, top, depth) in cases {
            let text = value.to_string();
            let doc = Document::json(text.clone()).unwrap();
            let overview = Overview::of(&doc);
            let tree = overview.tree.clone().expect("a tree");
            assert_eq!(tree.roots, roots);
            assert_eq!(
                (tree.key.as_str(), tree.name.clone(), tree.kind.clone()),
                (
                    "children",
                    Some(("name".to_owned(), false)),
                    Some("type".to_owned())
                )
            );
            assert_eq!(
                (tree.size.nodes, tree.size.roots, tree.size.depth),
                (nodes, top, depth)
            );

            let info = info(50_000);
            let answer = Answer {
                source: "directory_tree",
                handle: "h_t",
                info: &info,
                kind: Kind::Json,
                pages: 3,
                read_tool: "sluice_read",
                search_tool: Some("sluice_search"),
                query_tool: Some("sluice_query"),
                narrowing: &[],
                preview_depth: 3,
                style: Style::Summary,
                whole: None,
                stored_bytes: 1_000_000,
            };
            let rendered = render(&answer, &overview, &Budget::default());
            let node = r#"{name: string, type: "directory"|"file", children?: [<recursive>]}"#;
            let at_top = if top > 1 {
                format!(" ({top} at the top)")
            } else {
                String::new()
            };
            assert!(
                rendered.contains(&format!(
                    "{node}{} — a tree of {nodes} nodes{at_top}, {depth} levels deep\n",
                    if roots == ".tree[]" {
                        "]}"
                    } else if roots == ".[]" {
                        "]"
                    } else {
                        ""
                    }
                )),
                "{rendered}"
            );
            assert_eq!(rendered.matches("h_t").count(), 1, "{rendered}");

            // Every filter offered runs, and gives the truth.
            let run = |filter: &str| crate::query::run(filter, text.as_bytes(), limits).unwrap();
            let steps = next_steps(&rendered);
            assert_eq!(steps[0].0, "sluice_read");
            assert_eq!(steps[0].1, json!({"handle": "h_t"}));
            let queries: Vec<(String, String)> = steps
                .iter()
                .filter(|(tool, _, _)| tool == "sluice_query")
                .map(|(_, args, what)| (args["filter"].as_str().unwrap().to_owned(), what.clone()))
                .collect();
            assert_eq!(queries.len(), 3, "{rendered}");
            let dirs = if prefix.is_empty() { 2 } else { 3 };
            assert_eq!(queries[0].1, "how many of each type, at every depth");
            assert_eq!(
                run(&queries[0].0),
                [format!(
                    r#"[{{"type":"directory","count":{dirs}}},{{"type":"file","count":5}}]"#
                )]
            );
            assert!(queries[1].1.contains("most children"), "{}", queries[1].1);
            let largest: Vec<Value> = serde_json::from_str(&run(&queries[1].0)[0]).unwrap();
            // Most children first: a/c has 3; a (and root) 2; the rest none.
            let children_of = |path: &str| match path.strip_prefix(prefix) {
                Some("a/c") => 3,
                Some("a") => 2,
                _ if path == "root" => 2,
                _ => 0,
            };
            assert_eq!(largest.len(), nodes as usize);
            assert_eq!(
                largest[0],
                json!({"path": format!("{prefix}a/c"), "children": 3})
            );
            let counts: Vec<u64> = largest
                .iter()
                .map(|n| n["children"].as_u64().unwrap())
                .collect();
            assert!(counts.is_sorted_by(|a, b| a >= b), "{counts:?}");
            for node in &largest {
                assert_eq!(
                    node["children"],
                    children_of(node["path"].as_str().unwrap()),
                    "{node}"
                );
            }
            assert!(queries[2].1.contains("with its path"), "{}", queries[2].1);
            let paths: Vec<Value> = serde_json::from_str(&run(&queries[2].0)[0]).unwrap();
            let mut want: Vec<Value> = [
                ("a", "directory"),
                ("a/b", "file"),
                ("a/c", "directory"),
                ("a/c/d", "file"),
                ("a/c/f", "file"),
                ("a/c/g", "file"),
                ("e", "file"),
            ]
            .iter()
            .map(|(path, kind)| json!({"path": format!("{prefix}{path}"), "type": kind}))
            .collect();
            if !prefix.is_empty() {
                want.insert(0, json!({"path": "root", "type": "directory"}));
            }
            assert_eq!(paths, want);
        }
    }

    #[test]
    fn a_small_tree_beside_the_bulk_does_not_make_a_tree() {
        let rows: Vec<Value> = (0..200).map(|i| json!({"id": i, "v": "x"})).collect();
        let menu = json!([{"name": "a", "items": [{"name": "b", "items": []}]}]);
        let doc = json!({"rows": rows, "menu": menu}).to_string();
        let overview = Overview::of(&Document::json(doc).unwrap());
        assert_eq!(overview.bulk, Some(("/rows".to_owned(), 200)));
        assert!(overview.tree.is_none());
        let inside = [Step::Member("tree".into()), Step::Items];
        assert!(holds(&inside, "/tree") && holds(&inside, "/tree/3/children"));
        assert!(!holds(&inside, "/rows") && !holds(&inside, ""));
        assert!(holds(&[Step::Items], "") && holds(&[], "/children"));
    }

    #[test]
    fn the_keys_of_a_tree_come_from_its_shape() {
        // An org chart: numbers as names, a key to quote, no field of few
        // values; a root object.
        let person = |id: u64, role: &str, reports: Value| json!({"id": id, "role": role, "direct reports": reports});
        let chart = person(
            1,
            "ceo",
            json!([
                person(
                    2,
                    "cto",
                    json!([person(4, "dev", json!([])), person(5, "dev", json!([]))])
                ),
                person(3, "cfo", json!([person(6, "clerk", json!([]))])),
            ]),
        );
        let text = chart.to_string();
        let overview = Overview::of(&Document::json(text.clone()).unwrap());
        let tree = overview.tree.clone().expect("a tree");
        assert_eq!(
            (
                tree.roots.as_str(),
                tree.key.as_str(),
                tree.name.clone(),
                tree.kind.clone()
            ),
            (
                ".",
                "direct reports",
                Some(("id".to_owned(), true)),
                Some("role".to_owned())
            )
        );
        assert_eq!(
            (tree.size.nodes, tree.size.depth, tree.size.most_children),
            (6, 3, 2)
        );
        let limits = crate::query::QuerySettings::default().output_limits();
        let run = |filter: &str| {
            let out = crate::query::run(filter, text.as_bytes(), limits).unwrap();
            serde_json::from_str::<Value>(&out[0]).unwrap()
        };
        let filters = &overview.filters;
        assert_eq!(filters.len(), 3, "{filters:?}");
        assert_eq!(
            run(&filters[0].0),
            json!([
                {"role": "ceo", "count": 1}, {"role": "cfo", "count": 1},
                {"role": "clerk", "count": 1}, {"role": "cto", "count": 1},
                {"role": "dev", "count": 2}
            ])
        );
        assert_eq!(
            run(&filters[1].0)[0],
            json!({"path": "1", "direct reports": 2})
        );
        assert_eq!(
            run(&filters[2].0),
            json!([
                {"path": "1", "role": "ceo"}, {"path": "1/2", "role": "cto"},
                {"path": "1/2/4", "role": "dev"}, {"path": "1/2/5", "role": "dev"},
                {"path": "1/3", "role": "cfo"}, {"path": "1/3/6", "role": "clerk"}
            ])
        );
    }

    #[test]
    fn text_documents_preview_their_first_lines() {
        let text: String = (0..1000).map(|i| format!("diff line {i}\n")).collect();
        let doc = Document::text(text);
        let overview = Overview::of(&doc);
        let info = info(9000);
        let answer = Answer {
            source: "git_diff",
            handle: "h_y",
            info: &info,
            kind: Kind::Text,
            pages: 3,
            read_tool: "sluice_read",
            search_tool: Some("sluice_search"),
            query_tool: Some("sluice_query"),
            narrowing: &[],
            preview_depth: 3,
            style: Style::Truncated,
            whole: None,
            stored_bytes: 1_000_000,
        };
        let out = render(&answer, &overview, &Budget::default());
        assert!(
            out.starts_with("[TRUNCATED by sluice: git_diff returned 9,000 tokens"),
            "{out}"
        );
        assert!(out.contains("Shape: text, 1,000 lines"), "{out}");
        assert!(
            out.contains("Preview (first 20 of 1,000 lines):\ndiff line 0\n"),
            "{out}"
        );
    }

    #[test]
    fn suggested_filters_follow_the_sampled_fields() {
        let items: Vec<Value> = (0..40)
            .map(|i| {
                let (count, status) = (["a", "b"][i % 2], ["ok", "ok", "failed"][i % 3]);
                serde_json::json!({
                    "id": i, "count": count, "status": status,
                    "if": i, "payload": {"x": i}, "notes": format!("free text {i}"),
                    "done": i % 2 == 0,
                })
            })
            .collect();
        let fields = Shape::of(&Value::Array(items)).item_fields();
        let filters: Vec<String> = suggested_filters("/data/items", &fields)
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(
            filters,
            [
                // `count` has two values, `status` three: the shorter table.
                ".data.items | group_by(.count) | map({count: .[0].count, items: length})",
                ".data.items | map(select(.count == \"b\"))",
                // `payload` is an object and never picked; `if` is quoted.
                ".data.items | map({id, count, status, \"if\": .\"if\"})",
            ]
        );
        // No enum: a boolean; five fields or fewer: no projection.
        let items: Vec<Value> = (0..10)
            .map(|i| serde_json::json!({"name": format!("n{i}"), "up": i > 3}))
            .collect();
        let fields = Shape::of(&Value::Array(items)).item_fields();
        assert_eq!(
            suggested_filters("", &fields),
            [(
                "map(select(.up))".to_owned(),
                "the items whose up is true".to_owned()
            )]
        );
    }

    #[test]
    fn pointers_become_jq_paths() {
        assert_eq!(jq_path(""), ".");
        assert_eq!(jq_path("/rows"), ".rows");
        assert_eq!(jq_path("/0/children"), ".[0].children");
        assert_eq!(jq_path("/a b/x~1y"), ".\"a b\".\"x/y\"");
    }

    #[test]
    fn narrowing_arguments_come_from_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "path": {"type": "string"}, "excludePatterns": {}, "max_count": {}, "head": {}
        }});
        let mut names = narrowing_arguments(schema.as_object().unwrap());
        names.sort();
        assert_eq!(names, ["excludePatterns", "head", "max_count"]);
    }
}
