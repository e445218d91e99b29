//! Shapes and previews: what a model needs to know about a result it cannot
//! see whole.
//!
//! A [`Shape`] is a compact inferred schema (`{name: string, type:
//! "file"|"directory", children?: [...]}`) merged over sampled values; a
//! preview is the first values cut at a depth, with markers such as
//! `[Array: 212 items]` where the cut is.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

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
    /// Objects merged (to tell optional fields).
    objects: usize,
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
                self.objects += 1;
                let fields = self.object.get_or_insert_with(BTreeMap::new);
                if depth > 0 {
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
        let mut alternatives: Vec<String> = Vec::new();
        if let Some(fields) = &self.object {
            let mut s = String::new();
            if depth == 0 || fields.is_empty() {
                s.push_str(if fields.is_empty() { "{}" } else { "{…}" });
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
        let Some(item) = self.array.as_ref().map(|a| &a.item) else {
            return Vec::new();
        };
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
    use crate::format::group;
    match value {
        Value::Array(items) if level >= cut.depth && !items.is_empty() => {
            Value::String(format!("[Array: {} items]", group(items.len() as u64)))
        }
        Value::Object(map) if level >= cut.depth && !map.is_empty() => {
            Value::String(format!("[Object: {} keys]", group(map.len() as u64)))
        }
        Value::Array(items) => {
            let mut kept: Vec<Value> = items
                .iter()
                .take(cut.items)
                .map(|v| preview_at(v, cut, level + 1))
                .collect();
            if items.len() > cut.items {
                kept.push(Value::String(format!(
                    "… {} more items",
                    group((items.len() - cut.items) as u64)
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
            json!({"a": {"b": "[Object: 1 keys]"}, "list": [1, 2, "… 2 more items"], "s": "abc…(+5 chars)"})
        );
    }
}
