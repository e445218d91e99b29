//! A JSON object edited without losing anything it had.
//!
//! sluice edits a few messages: it renames tools in `tools/list`, adds its
//! own properties to their input schemas, drops an `outputSchema`, merges
//! lists and `initialize` results. Parsing those into a typed model (or a
//! `Value`) and writing them back would drop members the model does not
//! know and respell numbers (`1.50`, `1e2`, `-0`). A [`RawObject`] is the
//! object's members in order, each value kept as its raw JSON text
//! (`RawValue`): whatever is not edited is written back as it came, byte for
//! byte; an untouched object is written out exactly as its input, down to
//! its whitespace.
//!
//! Duplicate keys are kept as received. Lookups see the last one, as
//! JavaScript's `JSON.parse`, Python's `json` and `serde_json` do, so what
//! sluice reads is what the client will read.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::span_in;

/// A JSON string's value from its raw text (quotes included), borrowed
/// when it has no escapes; `None` when the text is not a string.
pub(crate) fn unquote(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
}

/// One member of a [`RawObject`].
#[derive(Debug, Clone)]
struct Entry<'a> {
    /// The key, decoded: what lookups compare.
    key: Cow<'a, str>,
    /// The key as written, quotes and escapes included.
    key_json: Cow<'a, str>,
    /// The value's raw text (valid JSON: checked when parsed, or made by
    /// `serde_json` when set).
    value: Cow<'a, str>,
    /// The member's text as received, from its key's opening quote to its
    /// value's end (whitespace around the colon included), while neither
    /// key nor value has changed.
    text: Option<&'a str>,
}

impl Entry<'_> {
    fn write(&self, push: &mut impl FnMut(&str)) {
        match self.text {
            Some(text) => push(text),
            None => {
                push(&self.key_json);
                push(":");
                push(&self.value);
            }
        }
    }
}

/// Why an object could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The text is not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(#[from] serde_json::Error),
    /// A member on an edited path is not an object.
    #[error("`{path}` is {found}, not an object, so it cannot be edited as one")]
    NotAnObject {
        /// The path to it, keys joined with `.`.
        path: String,
        /// What it is instead ("an array", "null").
        found: &'static str,
    },
}

/// A JSON object as its ordered members, values kept as raw JSON text.
#[derive(Debug, Clone)]
pub struct RawObject<'a> {
    /// The text it was parsed from, while no member has changed: an
    /// untouched object writes this out.
    source: Option<&'a str>,
    members: Vec<Entry<'a>>,
}

/// The raw value at `path` (keys from `object`'s text down), walked one
/// object's members at a time: nothing on the way, and not the value found,
/// is decoded. `None` when a key is absent or a value on the way is not an
/// object. What a client or an upstream sends as payload (a call's
/// arguments) is found in this way, never decoded into a tree.
pub(crate) fn value_at<'a>(object: &'a str, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(object, |object, key| {
        RawObject::of_checked(object).ok()?.get_parsed(key)
    })
}

/// Collects an object's members as raw keys and raw values.
struct Members;

impl<'de> Visitor<'de> for Members {
    type Value = Vec<(&'de RawValue, &'de RawValue)>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(key) = map.next_key::<&'de RawValue>()? {
            members.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(members)
    }
}

/// The members of `text`, one JSON object, as raw keys (quotes included)
/// and raw values, in order. Values are skipped, not parsed.
pub(crate) fn raw_members(text: &str) -> Result<Vec<(&RawValue, &RawValue)>, serde_json::Error> {
    let mut parser = serde_json::Deserializer::from_str(text);
    let members = (&mut parser).deserialize_map(Members)?;
    parser.end()?;
    Ok(members)
}

impl<'a> RawObject<'a> {
    /// Parses `text`, one JSON object. Values are skipped, not parsed (one
    /// pass, no recursion, whatever their depth), and borrowed from `text`.
    /// The members are found by sluice's own check
    /// ([`sluice_core::check::object_members`], held to `serde_json`'s
    /// members by `jsonrpc::check`'s tests); what it refuses is read by
    /// `serde_json`, for its error (or its members, were it to take it).
    pub fn parse(text: &'a str) -> Result<RawObject<'a>, serde_json::Error> {
        let members = match sluice_core::check::object_members(text, usize::MAX) {
            Some(members) => members,
            None => raw_members(text)?
                .into_iter()
                .map(|(key, value)| (span_in(text, key.get()), span_in(text, value.get())))
                .collect(),
        };
        Ok(RawObject::of_members(text, members))
    }

    /// [`RawObject::parse`] of a part of a message (its params, its
    /// result, a value in them): text that was checked when the message
    /// was read, or made of such, so its members are found without reading
    /// it again ([`sluice_core::scan::object_members_of_valid`]). What is
    /// not an object is refused as [`RawObject::parse`] refuses it.
    pub(crate) fn of_checked(text: &'a str) -> Result<RawObject<'a>, serde_json::Error> {
        match sluice_core::scan::object_members_of_valid(text) {
            Some(members) => Ok(RawObject::of_members(text, members)),
            None => RawObject::parse(text),
        }
    }

    fn of_members(text: &'a str, members: Vec<(Range<usize>, Range<usize>)>) -> RawObject<'a> {
        let members = members
            .into_iter()
            .map(|(key, value)| {
                let key_json = &text[key.clone()];
                Entry {
                    key: unquote(key_json).unwrap_or(Cow::Borrowed(key_json)),
                    key_json: Cow::Borrowed(key_json),
                    value: Cow::Borrowed(&text[value.clone()]),
                    text: text.get(key.start..value.end),
                }
            })
            .collect();
        RawObject {
            source: Some(text),
            members,
        }
    }

    /// An empty object, to build one member by member.
    pub fn new() -> RawObject<'a> {
        RawObject {
            source: None,
            members: Vec::new(),
        }
    }

    /// How many members it has (duplicates counted).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether a member was inserted, removed or renamed since it was
    /// parsed (it then writes out in compact form between members).
    pub fn is_edited(&self) -> bool {
        self.source.is_none()
    }

    /// Its members in order: decoded keys, raw values.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.members.iter().map(|e| (&*e.key, &*e.value))
    }

    fn last(&self, key: &str) -> Option<usize> {
        self.members.iter().rposition(|e| e.key == key)
    }

    /// Its members by name, each value as parsed (a repeated key's last, as
    /// [`RawObject::get_parsed`] finds it), found in one step however many
    /// members it has.
    pub(crate) fn into_members_by_name(self) -> crate::FastMap<Cow<'a, str>, &'a str> {
        let mut by_name =
            crate::FastMap::with_capacity_and_hasher(self.members.len(), Default::default());
        for entry in self.members {
            match entry.value {
                Cow::Borrowed(value) => by_name.insert(entry.key, value),
                Cow::Owned(_) => by_name.remove(&entry.key),
            };
        }
        by_name
    }

    /// The value of `key` (the last, if the key is repeated).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.last(key).map(|i| &*self.members[i].value)
    }

    /// The value of `key` as it was parsed, borrowed from the parsed text:
    /// `None` if absent or replaced since.
    pub fn get_parsed(&self, key: &str) -> Option<&'a str> {
        match &self.members[self.last(key)?].value {
            Cow::Borrowed(value) => Some(value),
            Cow::Owned(_) => None,
        }
    }

    /// The value of `key` when it is a JSON string, decoded.
    pub fn get_str(&self, key: &str) -> Option<Cow<'_, str>> {
        unquote(self.get(key)?)
    }

    /// Sets `key` to `value`: in place if the key is there (its last
    /// occurrence), else as a new last member.
    pub fn insert(&mut self, key: &str, value: Box<RawValue>) {
        self.set(key, owned(value));
    }

    /// [`RawObject::insert`] of a value's text known to be valid JSON
    /// (written out from members that were).
    fn set(&mut self, key: &str, value: String) {
        self.source = None;
        match self.last(key) {
            Some(i) => {
                let entry = &mut self.members[i];
                entry.value = Cow::Owned(value);
                entry.text = None;
            }
            None => self.members.push(Entry {
                key: Cow::Owned(key.to_owned()),
                key_json: Cow::Owned(json_string(key)),
                value: Cow::Owned(value),
                text: None,
            }),
        }
    }

    /// Sets `key` to `value` serialized as JSON; see [`RawObject::insert`].
    pub fn insert_value<T: serde::Serialize + ?Sized>(
        &mut self,
        key: &str,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        self.insert(key, serde_json::value::to_raw_value(value)?);
        Ok(())
    }

    /// Removes every member named `key`; the value that counted (the
    /// last), if there was one.
    pub fn remove(&mut self, key: &str) -> Option<Cow<'a, str>> {
        let last = self.last(key)?;
        self.source = None;
        let value = self.members[last].value.clone();
        self.members.retain(|e| e.key != key);
        Some(value)
    }

    /// Renames the member `from` (its last occurrence) to `to`, in place.
    /// Afterwards there is no member `from`, and the renamed one is the only
    /// `to` (other members of either name are removed, as a rename over an
    /// existing key replaces it). `false` when there was no `from`.
    pub fn rename(&mut self, from: &str, to: &str) -> bool {
        let Some(renamed) = self.last(from) else {
            return false;
        };
        if from == to {
            return true;
        }
        self.source = None;
        let entry = &mut self.members[renamed];
        entry.key = Cow::Owned(to.to_owned());
        entry.key_json = Cow::Owned(json_string(to));
        entry.text = None;
        let mut index = 0;
        self.members.retain(|e| {
            let keep = index == renamed || (e.key != from && e.key != to);
            index += 1;
            keep
        });
        true
    }

    /// Edits the object found at `path` (keys from this one down, e.g.
    /// `["inputSchema", "properties"]`) with `f`, writing it back in place
    /// if `f` changed it. `Ok(None)` when a key on the path is absent; an
    /// error when a value on it is not an object.
    pub fn edit_path<R>(
        &mut self,
        path: &[&str],
        f: impl FnOnce(&mut RawObject<'_>) -> R,
    ) -> Result<Option<R>, ObjectError> {
        self.edit_path_from(path, 0, f)
    }

    fn edit_path_from<R>(
        &mut self,
        path: &[&str],
        depth: usize,
        f: impl FnOnce(&mut RawObject<'_>) -> R,
    ) -> Result<Option<R>, ObjectError> {
        let Some(key) = path.get(depth) else {
            return Ok(Some(f(self)));
        };
        let Some(i) = self.last(key) else {
            return Ok(None);
        };
        // A borrowed value is copied as a reference; one already replaced
        // is copied, so that the child does not borrow `self`.
        let value = self.members[i].value.clone();
        if !value.starts_with('{') {
            return Err(ObjectError::NotAnObject {
                path: path[..=depth].join("."),
                found: super::message::json_type(&value),
            });
        }
        let mut child = RawObject::of_checked(&value)?;
        let out = child.edit_path_from(path, depth + 1, f)?;
        if child.is_edited() {
            // Its members were valid JSON, and so is what they make: not
            // read again.
            self.set(key, child.to_json());
        }
        Ok(out)
    }

    fn write(&self, mut push: impl FnMut(&str)) {
        if let Some(source) = self.source {
            return push(source);
        }
        push("{");
        for (i, entry) in self.members.iter().enumerate() {
            if i > 0 {
                push(",");
            }
            entry.write(&mut push);
        }
        push("}");
    }

    /// Writes it out as JSON: the input exactly when untouched; otherwise
    /// each member as received (or as set), without whitespace between.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        self.write(|piece| out.extend_from_slice(piece.as_bytes()));
    }

    /// It as JSON text; see [`RawObject::write_to`].
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write(|piece| out.push_str(piece));
        out
    }

    /// It as a raw JSON value, to be set as another object's member.
    pub fn to_raw(&self) -> Result<Box<RawValue>, serde_json::Error> {
        RawValue::from_string(self.to_json())
    }
}

impl Default for RawObject<'_> {
    fn default() -> Self {
        RawObject::new()
    }
}

/// A raw value's text, owned.
fn owned(value: Box<RawValue>) -> String {
    String::from(Box::<str>::from(value))
}

/// `s` as a JSON string.
fn json_string(s: &str) -> String {
    // Serializing a string cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    const TOOL: &str = r#"{ "name" : "read", "x-vendor": {"a": 1.50},
  "inputSchema": {"type":"object","properties":{"path":{"type":"string"}},"x":1e2},
  "outputSchema": {"type":"object"}, "execution": {"taskSupport": "optional"}, "n": -0 }"#;

    #[test]
    fn an_untouched_object_writes_out_byte_identical() {
        let object = RawObject::parse(TOOL).unwrap();
        assert_eq!(object.to_json(), TOOL);
        assert_eq!(object.len(), 6);
        assert_eq!(object.get_str("name").as_deref(), Some("read"));
        assert_eq!(object.get("n").unwrap(), "-0");
    }

    #[test]
    fn edits_keep_every_other_members_raw_text() {
        let mut tool = RawObject::parse(TOOL).unwrap();
        tool.insert_value("name", "fs__read").unwrap();
        assert!(tool.remove("outputSchema").is_some());
        tool.edit_path(&["inputSchema", "properties"], |properties| {
            properties.insert("_timeout_s", raw(r#"{"type":"number"}"#));
        })
        .unwrap()
        .unwrap();
        assert_eq!(
            tool.to_json(),
            r#"{"name":"fs__read","x-vendor": {"a": 1.50},"inputSchema":{"type":"object","properties":{"path":{"type":"string"},"_timeout_s":{"type":"number"}},"x":1e2},"execution": {"taskSupport": "optional"},"n": -0}"#
        );
        let value: serde_json::Value = serde_json::from_str(&tool.to_json()).unwrap();
        assert_eq!(value["inputSchema"]["properties"]["path"]["type"], "string");
    }

    #[test]
    fn duplicates_are_kept_and_the_last_one_counts() {
        let text = r#"{"a":1,"b":2,"a":3}"#;
        let mut object = RawObject::parse(text).unwrap();
        assert_eq!(object.get("a").unwrap(), "3");
        object.insert("b", raw("20"));
        assert_eq!(object.to_json(), r#"{"a":1,"b":20,"a":3}"#);
        object.insert("a", raw("30"));
        assert_eq!(object.to_json(), r#"{"a":1,"b":20,"a":30}"#);
        assert_eq!(object.remove("a").unwrap(), "30");
        assert_eq!(object.to_json(), r#"{"b":20}"#);
    }

    #[test]
    fn rename_moves_the_value_to_the_new_key_in_place() {
        let mut object = RawObject::parse(r#"{"x":0,"old":1,"new":2,"old":3,"z":4}"#).unwrap();
        assert!(object.rename("old", "new"));
        assert_eq!(object.to_json(), r#"{"x":0,"new":3,"z":4}"#);
        assert!(!object.rename("gone", "new"));
    }

    #[test]
    fn keys_are_decoded_for_lookup_and_written_as_received() {
        let text = r#"{"\u006eame":"a\u0062","é":1}"#;
        let mut object = RawObject::parse(text).unwrap();
        assert_eq!(object.get_str("name").as_deref(), Some("ab"));
        assert!(object.get("é").is_some());
        object.insert("new", raw("true"));
        assert_eq!(
            object.to_json(),
            r#"{"\u006eame":"a\u0062","é":1,"new":true}"#
        );
    }

    #[test]
    fn a_path_through_a_non_object_is_an_error_and_a_missing_one_is_none() {
        let mut object = RawObject::parse(r#"{"a":{"b":[1]}}"#).unwrap();
        let error = object.edit_path(&["a", "b"], |_| ()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "`a.b` is an array, not an object, so it cannot be edited as one"
        );
        assert_eq!(object.edit_path(&["a", "c"], |_| ()).unwrap(), None);
        assert_eq!(object.to_json(), r#"{"a":{"b":[1]}}"#, "nothing changed");
    }

    #[test]
    fn what_is_not_an_object_is_refused() {
        for text in ["[1]", "1", "\"a\"", "{", "{} x", r#"{"a":}"#] {
            assert!(RawObject::parse(text).is_err(), "{text}");
        }
        // Deep values are skipped without recursion.
        let deep = format!(r#"{{"a":{}{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(RawObject::parse(&deep).unwrap().to_json(), deep);
    }
}
