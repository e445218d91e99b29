//! Shapes and previews: what a model needs to know about a result it cannot
//! see whole.
//!
//! A [`Shape`] is a compact inferred schema (`{name: string, type:
//! "file"|"directory", children?: [...]}`) merged over sampled values; a
//! preview is the first values cut at a depth, with markers such as
//! `[Array: 212 items]` where the cut is.
//!
//! A shape that repeats inside itself (an object holding an array of
//! objects like itself: directory trees, nested comments, ASTs) is a
//! [`Recursion`]: its levels are merged into one node shape, written
//! `{name: string, children?: [<recursive>]}`, and [`tree_size`] counts its
//! nodes in one pass over the document's bytes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::scan::string_end;

/// The most distinct strings a field may have to be shown as an enum.
const ENUM_MAX: usize = 6;
/// The longest string shown as an enum value.
const ENUM_VALUE_MAX: usize = 24;
/// How deep a shape is inferred.
const SHAPE_DEPTH: usize = 8;

/// An inferred type.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shape {
    /// How many values were merged into it.
    seen: usize,
    null: bool,
    boolean: bool,
    integer: bool,
    float: bool,
    string: Option<Strings>,
    array: Option<Box<ArrayShape>>,
    object: Option<BTreeMap<String, Shape>>,
    /// Object keys in first-seen order.
    order: Vec<String>,
    /// Objects merged with their fields (to tell optional fields).
    objects: usize,
    /// Objects merged past the depth limit, fields unknown.
    unexplored: usize,
    /// Stands for the node shape it is inside of (`<recursive>`).
    recursive: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Strings {
    /// Distinct values while few and short; `None` once not an enum.
    values: Option<BTreeMap<String, usize>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct ArrayShape {
    min: usize,
    max: usize,
    item: Shape,
}

impl Shape {
    /// The shape of one value.
    pub fn of(value: &Value) -> Self {
        let mut shape = Self::default();
        shape.add(value, SHAPE_DEPTH);
        shape
    }

    /// Merges `value` into this shape.
    pub fn add(&mut self, value: &Value, depth: usize) {
        self.seen += 1;
        match value {
            Value::Null => self.null = true,
            Value::Bool(_) => self.boolean = true,
            Value::Number(n) if n.is_f64() => self.float = true,
            Value::Number(_) => self.integer = true,
            Value::String(s) => {
                let strings = self.string.get_or_insert_with(|| Strings {
                    values: Some(BTreeMap::new()),
                });
                if let Some(values) = &mut strings.values {
                    if s.chars().count() > ENUM_VALUE_MAX || s.contains('"') {
                        strings.values = None;
                    } else {
                        *values.entry(s.clone()).or_default() += 1;
                        if values.len() > ENUM_MAX {
                            strings.values = None;
                        }
                    }
                }
            }
            Value::Array(items) => {
                let array = self.array.get_or_insert_with(|| {
                    Box::new(ArrayShape {
                        min: items.len(),
                        ..Default::default()
                    })
                });
                array.min = array.min.min(items.len());
                array.max = array.max.max(items.len());
                if depth > 0 {
                    for item in items.iter().take(64) {
                        array.item.add(item, depth - 1);
                    }
                }
            }
            Value::Object(map) => {
                let fields = self.object.get_or_insert_with(BTreeMap::new);
                if depth == 0 {
                    self.unexplored += 1;
                } else {
                    self.objects += 1;
                    for (key, v) in map {
                        if !fields.contains_key(key) {
                            self.order.push(key.clone());
                        }
                        fields.entry(key.clone()).or_default().add(v, depth - 1);
                    }
                }
            }
        }
    }

    /// The shape written compactly, at most `depth` levels deep.
    pub fn render(&self, depth: usize) -> String {
        let mut out = String::new();
        self.write(&mut out, depth);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        if self.recursive {
            out.push_str("<recursive>");
            return;
        }
        let mut alternatives: Vec<String> = Vec::new();
        if let Some(fields) = &self.object {
            let mut s = String::new();
            if fields.is_empty() && self.objects > 0 {
                s.push_str("{}");
            } else if depth == 0 || fields.is_empty() {
                s.push_str("{…}");
            } else {
                s.push('{');
                for (i, key) in self.order.iter().enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    if i >= 24 {
                        s.push_str(&format!("… {} more", self.order.len() - i));
                        break;
                    }
                    let field = &fields[key];
                    s.push_str(&field_name(key));
                    if field.seen < self.objects {
                        s.push('?');
                    }
                    s.push_str(": ");
                    field.write(&mut s, depth - 1);
                }
                s.push('}');
            }
            alternatives.push(s);
        }
        if let Some(array) = &self.array {
            let mut s = String::from("[");
            if array.max == 0 {
                s.push(']');
            } else if depth == 0 {
                s.push_str("…]");
            } else {
                array.item.write(&mut s, depth - 1);
                s.push(']');
            }
            alternatives.push(s);
        }
        if let Some(strings) = &self.string {
            match &strings.values {
                // A few distinct values, each seen more than once: an enum.
                Some(values)
                    if !values.is_empty()
                        && values.len() < self.seen_strings(values)
                        && values.len() <= ENUM_MAX =>
                {
                    let list: Vec<String> = values.keys().map(|v| format!("{v:?}")).collect();
                    alternatives.push(list.join("|"));
                }
                _ => alternatives.push("string".into()),
            }
        }
        if self.float {
            alternatives.push("number".into());
        } else if self.integer {
            alternatives.push("integer".into());
        }
        if self.boolean {
            alternatives.push("boolean".into());
        }
        if self.null {
            alternatives.push("null".into());
        }
        if alternatives.is_empty() {
            alternatives.push("never".into());
        }
        out.push_str(&alternatives.join(" | "));
    }

    fn seen_strings(&self, values: &BTreeMap<String, usize>) -> usize {
        values.values().sum()
    }

    /// Merges `other` (another sample of the same values) into this shape.
    fn merge(&mut self, other: &Shape) {
        self.seen += other.seen;
        self.null |= other.null;
        self.boolean |= other.boolean;
        self.integer |= other.integer;
        self.float |= other.float;
        self.recursive |= other.recursive;
        if let Some(theirs) = &other.string {
            match &mut self.string {
                None => self.string = Some(theirs.clone()),
                Some(mine) => match (&mut mine.values, &theirs.values) {
                    (Some(values), Some(more)) => {
                        for (value, n) in more {
                            *values.entry(value.clone()).or_default() += n;
                        }
                        if values.len() > ENUM_MAX {
                            mine.values = None;
                        }
                    }
                    _ => mine.values = None,
                },
            }
        }
        if let Some(theirs) = &other.array {
            match &mut self.array {
                None => self.array = Some(theirs.clone()),
                Some(mine) => {
                    mine.min = mine.min.min(theirs.min);
                    mine.max = mine.max.max(theirs.max);
                    mine.item.merge(&theirs.item);
                }
            }
        }
        if let Some(theirs) = &other.object {
            let mine = self.object.get_or_insert_with(BTreeMap::new);
            for key in &other.order {
                if !mine.contains_key(key) {
                    self.order.push(key.clone());
                }
                mine.entry(key.clone()).or_default().merge(&theirs[key]);
            }
        }
        self.objects += other.objects;
        self.unexplored += other.unexplored;
    }

    /// The shape `steps` inside this one, if sampling saw it.
    fn at(&self, steps: &[Step]) -> Option<&Shape> {
        let Some((first, rest)) = steps.split_first() else {
            return Some(self);
        };
        let next = match first {
            Step::Items => &self.array.as_ref()?.item,
            Step::Member(key) => self.object.as_ref()?.get(key)?,
        };
        next.at(rest)
    }

    fn at_mut(&mut self, steps: &[Step]) -> Option<&mut Shape> {
        let Some((first, rest)) = steps.split_first() else {
            return Some(self);
        };
        let next = match first {
            Step::Items => &mut self.array.as_mut()?.item,
            Step::Member(key) => self.object.as_mut()?.get_mut(key)?,
        };
        next.at_mut(rest)
    }
}

/// One step from a value to the values inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Every item of an array.
    Items,
    /// One member of an object.
    Member(String),
}

/// A shape that repeats inside itself: objects ("nodes") that hold, under
/// one key, an array of objects of their own shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Recursion {
    /// The way from the document to the outermost nodes: `[Items]` when the
    /// document is an array of nodes, `[]` when it is a node itself,
    /// `[Member("tree"), Items]` for `{"tree": [nodes]}`.
    pub roots: Vec<Step>,
    /// The key of a node's children (`children`).
    pub key: String,
    /// What a node holds, merged over every level sampled; its children's
    /// items are marked `<recursive>`.
    pub node: Shape,
}

/// How many steps from the document a recursion is looked for.
const RECURSION_SEARCH_DEPTH: usize = 6;

impl Shape {
    /// Where this shape repeats inside itself, the outermost place first;
    /// `None` when it does not.
    pub fn recursion(&self) -> Option<Recursion> {
        let mut queue = std::collections::VecDeque::from([(self, Vec::new())]);
        while let Some((shape, steps)) = queue.pop_front() {
            if let Some(key) = shape.recursive_key() {
                return Some(Recursion {
                    node: shape.node_shape(&key),
                    roots: steps,
                    key,
                });
            }
            if steps.len() >= RECURSION_SEARCH_DEPTH {
                continue;
            }
            if let Some(array) = &shape.array {
                let mut next = steps.clone();
                next.push(Step::Items);
                queue.push_back((&array.item, next));
            }
            if let Some(fields) = &shape.object {
                for key in &shape.order {
                    let mut next = steps.clone();
                    next.push(Step::Member(key.clone()));
                    queue.push_back((&fields[key], next));
                }
            }
        }
        None
    }

    /// The key under which this object shape holds an array of objects
    /// like itself: the items have that key too, and share at least half
    /// of all the keys of both.
    fn recursive_key(&self) -> Option<String> {
        let fields = self.object.as_ref().filter(|f| !f.is_empty())?;
        self.order.iter().find_map(|key| {
            let item = &fields[key].array.as_ref()?.item;
            let theirs = item.object.as_ref()?;
            let common = theirs.keys().filter(|k| fields.contains_key(*k)).count();
            let all = fields.len() + theirs.len() - common;
            (theirs.contains_key(key) && common >= 2 && 2 * common >= all).then(|| key.clone())
        })
    }

    /// This node shape merged with its children's, level after level, the
    /// children's items then marked `<recursive>`.
    fn node_shape(&self, key: &str) -> Shape {
        let mut node = self.clone();
        let mut level = self
            .at(&[Step::Member(key.to_owned()), Step::Items])
            .cloned();
        while let Some(children) = level {
            level = children
                .at(&[Step::Member(key.to_owned()), Step::Items])
                .cloned();
            if children.objects > 0 {
                node.merge(&children);
            }
        }
        if let Some(items) = node.at_mut(&[Step::Member(key.to_owned()), Step::Items]) {
            *items = Shape {
                recursive: true,
                ..Shape::default()
            };
        }
        node
    }

    /// This shape with the node shape of `recursion` in place of its
    /// outermost nodes: what [`Shape::render`] writes with `<recursive>`.
    pub fn folded(&self, recursion: &Recursion) -> Shape {
        let mut folded = self.clone();
        if let Some(nodes) = folded.at_mut(&recursion.roots) {
            *nodes = recursion.node.clone();
        }
        folded
    }
}

/// What sampling saw of one field of the objects in an array.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Its key.
    pub name: String,
    /// In every sampled object.
    pub always: bool,
    /// Its values, as far as they are of one simple kind.
    pub values: FieldValues,
}

/// The values of a [`Field`].
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValues {
    /// A few distinct short strings, each seen more than once, with counts.
    Enum(Vec<(String, usize)>),
    /// Other strings.
    Strings,
    /// Numbers.
    Numbers,
    /// Booleans.
    Booleans,
    /// Objects, arrays, or a mix of kinds.
    Other,
}

impl Shape {
    /// The fields of the objects this shape's arrays hold, in first-seen
    /// order; empty when the items are not objects.
    pub fn item_fields(&self) -> Vec<Field> {
        self.array
            .as_ref()
            .map_or_else(Vec::new, |a| a.item.fields())
    }

    /// The fields of the objects of this shape, in first-seen order; empty
    /// when it has no objects.
    pub fn fields(&self) -> Vec<Field> {
        let item = self;
        let Some(fields) = &item.object else {
            return Vec::new();
        };
        item.order
            .iter()
            .map(|name| {
                let f = &fields[name];
                let only = |kind: bool, others: [bool; 5]| kind && others.iter().all(|o| !o);
                let is_string = f.string.is_some();
                let is_number = f.integer || f.float;
                let (array, object) = (f.array.is_some(), f.object.is_some());
                let values = if only(is_string, [is_number, f.boolean, array, object, f.null]) {
                    match &f.string.as_ref().and_then(|s| s.values.as_ref()) {
                        Some(v)
                            if v.len() > 1
                                && v.len() <= ENUM_MAX
                                && v.len() < f.seen_strings(v) =>
                        {
                            let mut counts: Vec<(String, usize)> =
                                v.iter().map(|(k, n)| (k.clone(), *n)).collect();
                            counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                            FieldValues::Enum(counts)
                        }
                        _ => FieldValues::Strings,
                    }
                } else if only(is_number, [is_string, f.boolean, array, object, f.null]) {
                    FieldValues::Numbers
                } else if only(f.boolean, [is_string, is_number, array, object, f.null]) {
                    FieldValues::Booleans
                } else {
                    FieldValues::Other
                };
                Field {
                    name: name.clone(),
                    always: f.seen == item.objects,
                    values,
                }
            })
            .collect()
    }
}

/// The size of a recursive document, counted in its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeSize {
    /// Nodes, at every depth.
    pub nodes: u64,
    /// The outermost nodes.
    pub roots: u64,
    /// The deepest node's level; the outermost nodes are level 1.
    pub depth: u64,
    /// The most children one node has.
    pub most_children: u64,
}

/// What a container being scanned is to the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// On the way to the outermost nodes, this many steps in.
    Toward(usize),
    /// A node at this level.
    Node(u64),
    /// The children of a node at this level.
    Children(u64),
    /// Anything else.
    Other,
}

/// One open container while scanning.
struct Open {
    array: bool,
    role: Role,
    /// Objects: whether the next string is a key.
    expect_key: bool,
    /// Objects: whether the current member's key is the one that leads on
    /// (the children's key in a node, the next step's on the way).
    leads_on: bool,
    /// Children: nodes inside so far.
    nodes: u64,
}

/// Counts the nodes of `recursion` in `json`, a valid JSON text: one pass
/// over its bytes (strings skipped with `memchr`), memory proportional to
/// its nesting, nothing parsed.
pub fn tree_size(json: &str, recursion: &Recursion) -> TreeSize {
    let b = json.as_bytes();
    let steps = &recursion.roots;
    let mut size = TreeSize::default();
    let mut stack: Vec<Open> = Vec::new();
    // The role of a container opened inside `parent`.
    let role_in = |parent: Option<&Open>, object: bool| -> Role {
        let reached = |k: usize| match (k == steps.len(), object) {
            (true, true) => Role::Node(1),
            (true, false) => Role::Other,
            (false, _) => Role::Toward(k),
        };
        let Some(parent) = parent else {
            return reached(0);
        };
        match parent.role {
            Role::Toward(k) => match &steps[k] {
                Step::Items if parent.array => reached(k + 1),
                Step::Member(_) if !parent.array && parent.leads_on => reached(k + 1),
                _ => Role::Other,
            },
            Role::Node(level) if !parent.array && parent.leads_on && !object => {
                Role::Children(level)
            }
            Role::Children(level) if object => Role::Node(level + 1),
            _ => Role::Other,
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let end = string_end(b, i);
                if let Some(top) = stack.last_mut().filter(|t| !t.array && t.expect_key) {
                    top.expect_key = false;
                    let wanted = match top.role {
                        Role::Toward(k) => match &steps[k] {
                            Step::Member(name) => Some(name.as_str()),
                            Step::Items => None,
                        },
                        Role::Node(_) => Some(recursion.key.as_str()),
                        _ => None,
                    };
                    top.leads_on = wanted.is_some_and(|w| key_is(&json[i..end], w));
                }
                i = end;
                continue;
            }
            open @ (b'[' | b'{') => {
                let role = role_in(stack.last(), open == b'{');
                if let Role::Node(level) = role {
                    size.nodes += 1;
                    size.roots += u64::from(level == 1);
                    size.depth = size.depth.max(level);
                    if let Some(parent) = stack.last_mut() {
                        parent.nodes += 1;
                    }
                }
                stack.push(Open {
                    array: open == b'[',
                    role,
                    expect_key: open == b'{',
                    leads_on: false,
                    nodes: 0,
                });
            }
            b']' | b'}' => {
                if let Some(closed) = stack.pop()
                    && matches!(closed.role, Role::Children(_))
                {
                    size.most_children = size.most_children.max(closed.nodes);
                }
            }
            b',' => {
                if let Some(top) = stack.last_mut().filter(|t| !t.array) {
                    top.expect_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    size
}

/// Whether the string literal `literal` (quotes included) is `key`.
fn key_is(literal: &str, key: &str) -> bool {
    let inner = &literal[1..literal.len().saturating_sub(1).max(1)];
    if inner.contains('\\') {
        serde_json::from_str::<String>(literal).is_ok_and(|s| s == key)
    } else {
        inner == key
    }
}

fn field_name(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '$');
    if plain {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// How a preview cuts values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// Containers deeper than this become markers.
    pub depth: usize,
    /// Items kept of each array (the rest become a marker).
    pub items: usize,
    /// Characters kept of each string.
    pub string_chars: usize,
}

/// `value` cut for a preview: containers past `cut.depth` become
/// `"[Array: 212 items]"` / `"[Object: 7 keys]"`, long arrays keep their
/// first items and a `"… 208 more items"` marker, long strings end with
/// `"…(+1,234 chars)"`. The result is valid JSON.
pub fn preview(value: &Value, cut: Cut) -> Value {
    preview_at(value, cut, 0)
}

fn preview_at(value: &Value, cut: Cut, level: usize) -> Value {
    use crate::format::{counted, group};
    match value {
        Value::Array(items) if level >= cut.depth && !items.is_empty() => Value::String(format!(
            "[Array: {}]",
            counted(items.len() as u64, "item", "items")
        )),
        Value::Object(map) if level >= cut.depth && !map.is_empty() => Value::String(format!(
            "[Object: {}]",
            counted(map.len() as u64, "key", "keys")
        )),
        Value::Array(items) => {
            let mut kept: Vec<Value> = items
                .iter()
                .take(cut.items)
                .map(|v| preview_at(v, cut, level + 1))
                .collect();
            if items.len() > cut.items {
                kept.push(Value::String(format!(
                    "… {}",
                    counted((items.len() - cut.items) as u64, "more item", "more items")
                )));
            }
            Value::Array(kept)
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), preview_at(v, cut, level + 1)))
                .collect::<Map<String, Value>>(),
        ),
        Value::String(s) => {
            let chars = s.chars().count();
            if chars <= cut.string_chars {
                value.clone()
            } else {
                let kept: String = s.chars().take(cut.string_chars).collect();
                Value::String(format!(
                    "{kept}…(+{} chars)",
                    group((chars - cut.string_chars) as u64)
                ))
            }
        }
        _ => value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes_merge_fields_enums_and_optionals() {
        let mut shape = Shape::default();
        for v in [
            json!({"name": "a", "type": "file"}),
            json!({"name": "b", "type": "directory", "children": [{"name": "c", "type": "file"}]}),
            json!({"name": "d", "type": "file", "size": 1.5}),
        ] {
            shape.add(&v, 8);
        }
        assert_eq!(
            shape.render(4),
            r#"{name: string, type: "directory"|"file", children?: [{name: string, type: string}], size?: number}"#
        );
        assert_eq!(
            shape.render(1),
            "{name: string, type: \"directory\"|\"file\", children?: […], size?: number}"
        );
        assert_eq!(
            Shape::of(&json!([1, null, "x"])).render(3),
            "[string | integer | null]"
        );
        assert_eq!(
            Shape::of(&json!({"weird key": []})).render(3),
            "{\"weird key\": []}"
        );
    }

    /// A small directory tree: `a/b`, `a/c/d`, `e`.
    fn entries() -> Value {
        json!([
            {"name": "a", "type": "directory", "children": [
                {"name": "b", "type": "file"},
                {"name": "c", "type": "directory", "children": [{"name": "d", "type": "file"}]},
            ]},
            {"name": "e", "type": "file"},
        ])
    }

    #[test]
    fn a_shape_that_repeats_inside_itself_is_a_recursion() {
        const NODE: &str = r#"{name: string, type: "directory"|"file", children?: [<recursive>]}"#;
        // A root array of nodes.
        let tree = entries();
        let shape = Shape::of(&tree);
        let recursion = shape.recursion().expect("recursive");
        assert_eq!(
            (recursion.roots.as_slice(), recursion.key.as_str()),
            ([Step::Items].as_slice(), "children")
        );
        assert_eq!(shape.folded(&recursion).render(5), format!("[{NODE}]"));
        let size = tree_size(&tree.to_string(), &recursion);
        assert_eq!(
            size,
            TreeSize {
                nodes: 5,
                roots: 2,
                depth: 3,
                most_children: 2
            }
        );

        // A root object that is a node itself.
        let root = json!({"name": "root", "type": "directory", "children": tree});
        let shape = Shape::of(&root);
        let recursion = shape.recursion().expect("recursive");
        assert!(recursion.roots.is_empty());
        assert_eq!(shape.folded(&recursion).render(5), NODE);
        assert_eq!(
            tree_size(&root.to_string(), &recursion),
            TreeSize {
                nodes: 6,
                roots: 1,
                depth: 4,
                most_children: 2
            }
        );

        // Nodes under a member, beside other fields; keys with escapes and
        // strings that look like JSON do not confuse the count.
        let wrapped = json!({"count": 5, "tree": tree, "note": "{\"children\": [{}]}"});
        let shape = Shape::of(&wrapped);
        let recursion = shape.recursion().expect("recursive");
        assert_eq!(recursion.roots, [Step::Member("tree".into()), Step::Items]);
        assert_eq!(
            shape.folded(&recursion).render(5),
            format!("{{count: integer, tree: [{NODE}], note: string}}")
        );
        assert_eq!(tree_size(&wrapped.to_string(), &recursion).nodes, 5);
        let escaped = r#"{"tree":[{"name":"x","childr\u0065n":[{"name":"y","children":[]}]}]}"#;
        let recursion = Recursion {
            roots: vec![Step::Member("tree".into()), Step::Items],
            key: "children".into(),
            node: Shape::default(),
        };
        assert_eq!(tree_size(escaped, &recursion).nodes, 2);
    }

    #[test]
    fn a_shape_that_does_not_repeat_is_no_recursion() {
        for value in [
            json!([{"name": "a", "items": [{"name": "b", "price": 1}]}]),
            json!({"rows": [{"id": 1, "tags": [{"id": 2, "name": "x"}]}]}),
            json!([{"id": 1, "parts": [{"id": 2, "parts": 3, "a": 1, "b": 2, "c": 3}]}]),
            json!([[1, 2], [3]]),
            json!("text"),
        ] {
            assert_eq!(Shape::of(&value).recursion(), None, "{value}");
        }
    }

    #[test]
    fn previews_cut_depth_arrays_and_strings() {
        let v = json!({"a": {"b": {"c": [1, 2]}}, "list": [1, 2, 3, 4], "s": "abcdefgh"});
        let cut = Cut {
            depth: 2,
            items: 2,
            string_chars: 3,
        };
        assert_eq!(
            preview(&v, cut),
            json!({"a": {"b": "[Object: 1 key]"}, "list": [1, 2, "… 2 more items"], "s": "abc…(+5 chars)"})
        );
    }
}
