//! SEP-2243's `x-mcp-header`: the arguments of a tool that travel as
//! `Mcp-Param-*` headers as well as in the body, as the tool's input schema
//! marks them. Both sides read the marks: the upstream side sends the
//! headers of a call ([`mirrored`]) and leaves out of `tools/list` a tool
//! whose marks break the rules ([`annotation_fault`]); the downstream side
//! checks that a client's call carries them ([`annotated`]); the gateway
//! notes which tools mark any ([`marks_any`]). Schemas are the upstream's,
//! untrusted: [`annotated`] keeps its own stack; the other walks recurse
//! no deeper than the value, which serde_json reads at most 128 levels deep.

use std::borrow::Cow;

use http::HeaderName;
use serde_json::Value;

/// Every property of an input schema that `x-mcp-header` marks with a
/// non-empty name, reached from the root through `properties` alone and
/// at most `depth` properties deep: its path and the header's name, in the
/// schema's order.
///
/// Any non-empty string counts, valid header name or not, as rmcp counts
/// it: a call passing such an argument is then refused for the header it
/// cannot carry. The walk keeps its own stack, so a deep schema (it is the
/// upstream's) costs memory, not the thread's stack; no deeper than
/// `depth`, each path found is at most that long.
pub fn annotated(schema: &Value, depth: usize) -> Vec<(Vec<&str>, &str)> {
    let mut found = Vec::new();
    let mut path: Vec<&str> = Vec::new();
    // One iterator per `properties` object entered; `path` holds the
    // names of the properties whose `properties` are being walked.
    let mut levels = Vec::new();
    if let Some(Value::Object(properties)) = schema.get("properties") {
        levels.push(properties.iter());
    }
    while let Some(level) = levels.last_mut() {
        let Some((name, property)) = level.next() else {
            levels.pop();
            path.pop();
            continue;
        };
        path.push(name);
        if let Some(Value::String(header)) = property.get("x-mcp-header")
            && !header.is_empty()
        {
            found.push((path.clone(), header.as_str()));
        }
        match property.get("properties") {
            Some(Value::Object(inner)) if path.len() < depth => levels.push(inner.iter()),
            _ => {
                path.pop();
            }
        }
    }
    found
}

/// The marks the upstream side sends as headers: [`annotated`]'s, at
/// most [`ANNOTATION_DEPTH`] properties deep, whose `Mcp-Param-` name is a
/// valid header name (one that is not could not be sent).
pub fn mirrored(schema: &Value) -> Vec<(Vec<String>, String)> {
    annotated(schema, ANNOTATION_DEPTH)
        .into_iter()
        .filter(|(_, header)| HeaderName::try_from(format!("mcp-param-{header}")).is_ok())
        .map(|(path, header)| {
            (
                path.into_iter().map(str::to_owned).collect(),
                header.to_owned(),
            )
        })
        .collect()
}

/// A call's arguments read at the paths a tool marks. Asked in the
/// schema's order (depth first, as [`annotated`] and [`mirrored`] give
/// them), each object on the way is read once for all the marks under it,
/// its members found by name; asked in any other order, the texts are the
/// same, some objects read again. The arguments are the client's (up to
/// `[http] max_body_mb`) and a tool may mark many of them: read again for
/// each mark, they cost the marks times their size.
pub struct MarkedArguments<'a, 's> {
    /// The objects on the way to the path asked last: the arguments', then
    /// each member's on the way (`None`: absent, or not an object).
    way: Vec<Option<Members<'a>>>,
    /// The names of the members on the way.
    names: Vec<&'s str>,
    /// How many objects were read (the tests count them).
    reads: usize,
}

/// An object's members by name.
type Members<'a> = crate::FastMap<Cow<'a, str>, &'a str>;

impl<'a, 's> MarkedArguments<'a, 's> {
    /// The arguments' text (an object's, checked when its message was
    /// read), or `None` when the call has none.
    pub fn new(arguments: Option<&'a str>) -> Self {
        let mut marked = Self {
            way: Vec::new(),
            names: Vec::new(),
            reads: 0,
        };
        let root = marked.members(arguments);
        marked.way.push(root);
        marked
    }

    /// The text of the argument at `path` in its `Mcp-Param-*` header:
    /// strings as they are, booleans and numbers as JSON writes them;
    /// anything else (null, arrays, objects) has none, as an absent
    /// argument. Only the value found, one scalar, is decoded.
    pub fn text_at(&mut self, path: &[&'s str]) -> Option<String> {
        let (last, on_the_way) = path.split_last()?;
        let common = self
            .names
            .iter()
            .zip(on_the_way)
            .take_while(|(was, is)| was == is)
            .count();
        self.names.truncate(common);
        self.way.truncate(common + 1);
        for &name in &on_the_way[common..] {
            let value = self.way.last()?.as_ref().and_then(|m| m.get(name).copied());
            let members = self.members(value);
            self.names.push(name);
            self.way.push(members);
        }
        let raw = self.way.last()?.as_ref()?.get(*last).copied()?;
        if raw.starts_with(['{', '[']) {
            return None;
        }
        match serde_json::from_str(raw).ok()? {
            Value::String(text) => Some(text),
            Value::Bool(flag) => Some(flag.to_string()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        }
    }

    /// The members of `value` if it is an object.
    fn members(&mut self, value: Option<&'a str>) -> Option<Members<'a>> {
        let value = value.filter(|v| v.starts_with('{'))?;
        self.reads += 1;
        Some(
            crate::jsonrpc::RawObject::of_checked(value)
                .ok()?
                .into_members_by_name(),
        )
    }
}

/// How many properties deep an `x-mcp-header` is mirrored, and may sit in
/// a 2026-07-28 upstream's tool ([`annotation_fault`]): the upstream's
/// schema (untrusted) decides what its calls carry only that far.
pub const ANNOTATION_DEPTH: usize = 16;

/// What breaks SEP-2243's rules for `x-mcp-header` in a tool's input
/// schema, if anything: an annotation must sit on a property reached from
/// the root through `properties` alone (not on the root, nor under
/// `items`, `anyOf` and the like), at most as deep as sluice mirrors
/// headers; be a non-empty HTTP token, unique in the tool whatever its
/// case; and annotate a `string`, `integer` or `boolean` property.
pub fn annotation_fault(schema: &Value) -> Option<String> {
    let mut annotated = Vec::new();
    if let Err(fault) = find_annotations(schema, Some(&mut Vec::new()), &mut annotated) {
        return Some(fault);
    }
    let mut seen = std::collections::HashSet::new();
    for (path, property, header) in annotated {
        let at = path.join(".");
        let Value::String(header) = header else {
            return Some(format!("on `{at}` it is not a string"));
        };
        if header.is_empty() {
            return Some(format!("on `{at}` it is empty"));
        }
        if !header.bytes().all(is_token_byte) {
            return Some(format!("on `{at}`, {header:?} is not an HTTP token"));
        }
        if !seen.insert(header.to_ascii_lowercase()) {
            return Some(format!(
                "on `{at}`, {header:?} names a header another property names too"
            ));
        }
        if path.len() > ANNOTATION_DEPTH {
            return Some(format!(
                "`{at}` is deeper than {ANNOTATION_DEPTH} properties"
            ));
        }
        match property.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "boolean") => {}
            Some(other) => {
                return Some(format!(
                    "`{at}` is of type {other:?}, not string, integer or boolean"
                ));
            }
            None => return Some(format!("`{at}` declares no single type")),
        }
    }
    None
}

/// The annotated properties under `schema`, with their paths: `path` is
/// `Some` while `schema` is the root or a property reached from it through
/// `properties` alone. An annotation anywhere else is a fault.
fn find_annotations<'a>(
    schema: &'a Value,
    path: Option<&mut Vec<String>>,
    out: &mut Vec<(Vec<String>, &'a Value, &'a Value)>,
) -> Result<(), String> {
    match schema {
        Value::Array(items) => {
            for item in items {
                find_annotations(item, None, out)?;
            }
            Ok(())
        }
        Value::Object(members) => {
            let mut path = path;
            for (key, value) in members {
                match key.as_str() {
                    "x-mcp-header" => match path.as_deref() {
                        Some(path) if !path.is_empty() => {
                            out.push((path.clone(), schema, value));
                        }
                        Some(_) => return Err("it annotates the schema's root".to_owned()),
                        None => {
                            return Err(
                                "it annotates a schema not reached through `properties` alone"
                                    .to_owned(),
                            );
                        }
                    },
                    // Instance values, not schemas.
                    "default" | "const" | "enum" | "examples" => {}
                    "properties" => {
                        let Value::Object(properties) = value else {
                            continue;
                        };
                        for (name, property) in properties {
                            match path.as_deref_mut() {
                                Some(path) => {
                                    path.push(name.clone());
                                    let found = find_annotations(property, Some(path), out);
                                    path.pop();
                                    found?;
                                }
                                None => find_annotations(property, None, out)?,
                            }
                        }
                    }
                    _ => find_annotations(value, None, out)?,
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// RFC 9110's `tchar`.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Whether `value` (part of an input schema) holds an `x-mcp-header`
/// annotation anywhere.
pub fn marks_any(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.contains_key("x-mcp-header") || map.values().any(marks_any),
        Value::Array(items) => items.iter().any(marks_any),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_annotations_are_checked_as_sep_2243_says() {
        let fault = |schema: Value| annotation_fault(&schema);
        let property = |p: Value| json!({"type": "object", "properties": {"p": p}});
        // Valid: a primitive property reached through `properties` alone,
        // at any of its depths; an annotation inside an instance value is
        // not one.
        assert_eq!(
            fault(property(
                json!({"type": "string", "x-mcp-header": "Region"})
            )),
            None
        );
        assert_eq!(
            fault(
                json!({"properties": {"where": {"type": "object", "properties": {
                "zone": {"type": "integer", "x-mcp-header": "Zone"}}}}})
            ),
            None
        );
        assert_eq!(
            fault(property(
                json!({"type": "string", "default": {"x-mcp-header": "Q"}})
            )),
            None
        );
        assert_eq!(fault(json!({"type": "object"})), None);
        // Invalid, each with what is wrong.
        let bad = [
            (json!({"x-mcp-header": "Q", "properties": {}}), "root"),
            (
                property(
                    json!({"type": "array", "items": {"type": "string", "x-mcp-header": "Id"}}),
                ),
                "not reached",
            ),
            (
                property(json!({"anyOf": [{"type": "string", "x-mcp-header": "T"}]})),
                "not reached",
            ),
            (
                property(json!({"type": "string", "x-mcp-header": "Region Name"})),
                "token",
            ),
            (
                property(json!({"type": "string", "x-mcp-header": ""})),
                "empty",
            ),
            (
                property(json!({"type": "string", "x-mcp-header": 5})),
                "not a string",
            ),
            (
                property(json!({"type": "object", "x-mcp-header": "Scope"})),
                "\"object\"",
            ),
            (property(json!({"x-mcp-header": "Scope"})), "no single type"),
            (
                json!({"properties": {
                    "a": {"type": "string", "x-mcp-header": "Region"},
                    "b": {"type": "string", "x-mcp-header": "region"}}}),
                "another property",
            ),
        ];
        for (schema, says) in bad {
            let found = fault(schema.clone()).unwrap_or_else(|| panic!("no fault in {schema}"));
            assert!(found.contains(says), "{schema}: {found}");
        }
        // As deep as headers are mirrored, and deeper.
        let mut deep = json!({"type": "string", "x-mcp-header": "Deep"});
        for _ in 0..ANNOTATION_DEPTH {
            deep = json!({"type": "object", "properties": {"d": deep}});
        }
        assert_eq!(fault(deep.clone()), None);
        let deeper = json!({"type": "object", "properties": {"d": deep}});
        assert!(fault(deeper).unwrap().contains("deeper"));
    }

    #[test]
    fn annotations_are_found_in_schema_order_at_any_depth() {
        let schema = json!({
            "properties": {
                "a": {"x-mcp-header": "A", "properties": {
                    "b": {"properties": {"c": {"x-mcp-header": "C"}}},
                    "d": {"x-mcp-header": ""}
                }},
                "e": {"x-mcp-header": 5},
                "f": {"items": {"x-mcp-header": "F"}},
                "g": {"x-mcp-header": "G"}
            }
        });
        assert_eq!(
            annotated(&schema, usize::MAX),
            vec![
                (vec!["a"], "A"),
                (vec!["a", "b", "c"], "C"),
                (vec!["g"], "G"),
            ]
        );
    }

    /// The marked arguments' texts are those a path-by-path reading finds
    /// (each lookup from the arguments' top, as it was done per mark), and
    /// every object on the way is read once, whatever the marks under it.
    #[test]
    fn marked_arguments_are_read_once_for_all_their_marks() {
        let one_by_one = |arguments: &str, path: &[&str]| -> Option<String> {
            let raw = crate::jsonrpc::object::value_at(arguments, path)
                .filter(|raw| !raw.starts_with(['{', '[']))?;
            match serde_json::from_str(raw).ok()? {
                Value::String(text) => Some(text),
                Value::Bool(flag) => Some(flag.to_string()),
                Value::Number(number) => Some(number.to_string()),
                _ => None,
            }
        };
        let arguments = r#"{"a":"x","b":{"c":1.50,"d":{"e":true,"f":null},"g":[1]},"h":"y","h":"z","i":7,"k":{"l":"m"}}"#;
        // In the schema's order, depth first: shared ways, ways left and
        // entered again, absent members, values that are not objects.
        let paths: Vec<Vec<&str>> = vec![
            vec!["a"],
            vec!["b", "c"],
            vec!["b", "d", "e"],
            vec!["b", "d", "f"],
            vec!["b", "d", "none"],
            vec!["b", "g"],
            vec!["b", "g", "x"],
            vec!["h"],
            vec!["i", "j"],
            vec!["k", "l"],
            vec!["absent", "l"],
        ];
        let mut marked = MarkedArguments::new(Some(arguments));
        for path in &paths {
            assert_eq!(
                marked.text_at(path),
                one_by_one(arguments, path),
                "{path:?}"
            );
        }
        // The arguments, `b`, `b.d` and `k`: four objects, each read once.
        assert_eq!(marked.reads, 4);
        // In another order, the same texts.
        let mut backwards = MarkedArguments::new(Some(arguments));
        for path in paths.iter().rev() {
            assert_eq!(
                backwards.text_at(path),
                one_by_one(arguments, path),
                "{path:?}"
            );
        }
        assert_eq!(
            paths
                .iter()
                .map(|p| one_by_one(arguments, p))
                .collect::<Vec<_>>(),
            [
                Some("x".to_owned()),
                Some("1.5".to_owned()),
                Some("true".to_owned()),
                None,
                None,
                None,
                None,
                Some("z".to_owned()),
                None,
                Some("m".to_owned()),
                None,
            ]
        );
        let mut none = MarkedArguments::new(None);
        assert_eq!(none.text_at(&["a"]), None);
        assert_eq!(none.text_at(&[]), None);
        // Arguments that are not an object (a client's mistake) have no
        // marked argument, as with none.
        for not_an_object in [r#"[{"a":"x"}]"#, r#""a""#, "7"] {
            let mut marked = MarkedArguments::new(Some(not_an_object));
            assert_eq!(marked.text_at(&["a"]), None, "{not_an_object}");
            assert_eq!(marked.reads, 0);
        }
    }

    #[test]
    fn what_is_mirrored_is_what_a_header_can_carry_within_the_depth() {
        let mut deep = json!({"type": "string", "x-mcp-header": "Deep"});
        for _ in 1..ANNOTATION_DEPTH {
            deep = json!({"type": "object", "properties": {"d": deep}});
        }
        let schema = json!({"properties": {
            "a": {"type": "string", "x-mcp-header": "Region"},
            "b": {"type": "string", "x-mcp-header": "Region Name"},
            "c": {"type": "object", "properties": {"d": deep.clone()}},
            "e": deep,
        }});
        let mirrored = mirrored(&schema);
        let paths: Vec<usize> = mirrored.iter().map(|(path, _)| path.len()).collect();
        // `a`; not `b` (a space is no header name); not `c`'s, one deeper
        // than mirrored; `e`'s, as deep as mirrored.
        assert_eq!(paths, [1, ANNOTATION_DEPTH]);
        assert_eq!(mirrored[0], (vec!["a".to_owned()], "Region".to_owned()));
        assert_eq!(mirrored[1].1, "Deep");
        assert_eq!(annotated(&schema, usize::MAX).len(), 4);
        assert_eq!(annotated(&schema, ANNOTATION_DEPTH).len(), 3);
        assert!(marks_any(&schema) && !marks_any(&json!({"properties": {"a": {}}})));
    }
}
