//! The result cache's policy: which calls may be answered from the cache,
//! for how long, and under which key.
//!
//! Nothing is cached unless the configuration says so, per tool
//! (`[upstreams.NAME.tools.TOOL] cache = { ttl_s, idle_s, refresh_at,
//! per_session }`) or for every tool annotated read-only and idempotent
//! (`[cache] annotated = true`). The entries themselves, single flight and
//! refresh-ahead live in the gateway crate (`sluice::cache`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

/// sluice's own argument of a cached tool: `true` bypasses the entry and
/// refreshes it. Stripped before the call is forwarded, and from the key.
pub const FRESH_ARG: &str = "_fresh";

/// How long one kind of call stays cached.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachePolicy {
    /// Absolute lifetime, from the upstream's answer.
    pub ttl: Duration,
    /// Sliding expiry: an entry nobody reads for this long goes.
    pub idle: Duration,
    /// The fraction of `ttl` after which a hit also refreshes the entry in
    /// the background (1 never does).
    pub refresh_at: f64,
    /// Entries are kept per client session instead of shared.
    pub per_session: bool,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3600),
            idle: Duration::from_secs(900),
            refresh_at: 0.8,
            per_session: false,
        }
    }
}

impl CachePolicy {
    /// The age past which a hit starts a background refresh.
    pub fn refresh_after(&self) -> Duration {
        self.ttl.mul_f64(self.refresh_at)
    }
}

/// The `[cache]` table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheSettings {
    /// Cache every tool annotated `readOnlyHint` and `idempotentHint`.
    pub annotated: bool,
    /// The most bytes of results kept, least recently used evicted first.
    pub max_bytes: u64,
    /// The policy of annotated tools, and what a tool's `cache` table
    /// leaves out.
    pub defaults: CachePolicy,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            annotated: false,
            max_bytes: 256 << 20,
            defaults: CachePolicy::default(),
        }
    }
}

/// A `cache = { … }` table, of a tool or of `[cache]`: every field may be
/// left to the defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFields {
    /// Absolute lifetime in seconds.
    pub ttl_s: Option<f64>,
    /// Idle expiry in seconds.
    pub idle_s: Option<f64>,
    /// Fraction of the lifetime after which hits refresh (0 < r ≤ 1).
    pub refresh_at: Option<f64>,
    /// Keep entries per session.
    pub per_session: Option<bool>,
}

/// The longest lifetime or idle time accepted: a year.
const MAX_SECONDS: f64 = 365.0 * 86_400.0;

impl CacheFields {
    /// `base` with these fields over it; `table` names the table in errors.
    pub fn over(&self, base: &CachePolicy, table: &str) -> Result<CachePolicy, String> {
        let seconds = |key: &str, v: Option<f64>, default: Duration| match v {
            None => Ok(default),
            Some(s) if s > 0.0 && s <= MAX_SECONDS => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(format!(
                "{table}: `{key} = {s}` is out of range: more than 0, at most {MAX_SECONDS} (seconds)"
            )),
        };
        let refresh_at = match self.refresh_at {
            None => base.refresh_at,
            Some(r) if r > 0.0 && r <= 1.0 => r,
            Some(r) => {
                return Err(format!(
                    "{table}: `refresh_at = {r}` must be a fraction of the lifetime, more than 0 and at most 1 (1 never refreshes ahead)"
                ));
            }
        };
        Ok(CachePolicy {
            ttl: seconds("ttl_s", self.ttl_s, base.ttl)?,
            idle: seconds("idle_s", self.idle_s, base.idle)?,
            refresh_at,
            per_session: self.per_session.unwrap_or(base.per_session),
        })
    }
}

/// The key of a call: upstream, tool, the owner's key for per-session
/// entries ([`crate::store::Owner::key`]),
/// and the arguments in canonical form (keys sorted at every level,
/// numbers normalised, sluice's own arguments left out).
pub fn key(
    upstream: &str,
    tool: &str,
    owner: Option<&str>,
    arguments: Option<&Map<String, Value>>,
) -> String {
    let mut key = String::with_capacity(64);
    canonical_string(upstream, &mut key);
    key.push(' ');
    canonical_string(tool, &mut key);
    key.push(' ');
    if let Some(owner) = owner {
        canonical_string(owner, &mut key);
    }
    key.push(' ');
    let mut object = Map::new();
    if let Some(arguments) = arguments {
        for (k, v) in arguments {
            if k != FRESH_ARG && k != crate::operation::TIMEOUT_ARG {
                object.insert(k.clone(), v.clone());
            }
        }
    }
    canonical(&Value::Object(object), &mut key);
    key
}

/// `value` as JSON with object keys sorted and numbers in one form: an
/// integral number is written as an integer (`1.0`, `1e2` and `100` are
/// one key), any other as the shortest float that reads back the same.
pub fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                let x = n.as_f64().unwrap_or(0.0);
                // Integral floats within f64's exact integers become integers.
                if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
                    out.push_str(&(x as i64).to_string());
                } else {
                    out.push_str(
                        &serde_json::Number::from_f64(x)
                            .map_or_else(|| "null".to_owned(), |n| n.to_string()),
                    );
                }
            }
        }
        Value::String(s) => canonical_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_string(k, out);
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
    }
}

/// Whether the JSON `text` repeats a key in one of its objects, at any
/// depth (`false` for text that is not JSON). The key reads the last of a
/// repeated key, as serde_json, Python and JavaScript do; an upstream whose
/// parser keeps the first would answer another call than the key says,
/// and its result would then be handed to every caller of that key. Such
/// a call is not cached.
pub fn repeats_a_key(text: &str) -> bool {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    /// A visit that fails at the first repeated key.
    struct Unique;
    impl<'de> DeserializeSeed<'de> for Unique {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Unique {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if !seen.insert(key) {
                    return Err(serde::de::Error::custom("a repeated key"));
                }
                map.next_value_seed(Unique)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(Unique)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    match Unique.deserialize(&mut reader) {
        Ok(()) => false,
        // Not JSON at all is for the caller's parse to say.
        Err(e) => e.is_data() && serde_json::from_str::<IgnoredAny>(text).is_ok(),
    }
}

fn canonical_string(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_repeated_key_is_found_at_any_depth() {
        for (text, repeats) in [
            (r#"{"path":"/a","n":1}"#, false),
            (r#"{"path":"/secret","path":"/public"}"#, true),
            (r#"{"a":{"b":[{"c":1},{"c":2,"c":3}]}}"#, true),
            (r#"{"a":{"b":1},"c":{"b":1}}"#, false),
            // The same key written two ways is one key.
            (r#"{"path":1,"p\u0061th":2}"#, true),
            (r#"[1,"x",null,true,{"k":[]}]"#, false),
            ("not json", false),
        ] {
            assert_eq!(repeats_a_key(text), repeats, "{text}");
        }
    }

    #[test]
    fn keys_ignore_key_order_number_forms_and_sluices_arguments() {
        let a = key(
            "up",
            "t",
            None,
            Some(&args(json!({"b": {"y": 2, "x": [1.0, "s"]}, "a": 100}))),
        );
        let b = key(
            "up",
            "t",
            None,
            Some(&args(
                json!({"a": 1e2, "_timeout_s": 3, "_fresh": true, "b": {"x": [1, "s"], "y": 2.0}}),
            )),
        );
        assert_eq!(a, b);
        assert_eq!(a, r#""up" "t"  {"a":100,"b":{"x":[1,"s"],"y":2}}"#);
        // Different values, tools, upstreams and owners are different keys.
        let c = key("up", "t", None, Some(&args(json!({"a": 100.5}))));
        assert!(c.ends_with(r#"{"a":100.5}"#), "{c}");
        assert_ne!(key("up", "t", None, None), key("up", "u", None, None));
        assert_ne!(key("up", "t", None, None), key("other", "t", None, None));
        assert_ne!(
            key("up", "t", Some("session:1"), None),
            key("up", "t", Some("session:2"), None)
        );
        assert_eq!(
            key("up", "t", None, None),
            key("up", "t", None, Some(&Map::new()))
        );
        // Names cannot run into each other.
        assert_ne!(key("a b", "c", None, None), key("a", "b c", None, None));
    }

    #[test]
    fn fields_override_the_defaults_and_bad_values_are_refused() {
        let base = CachePolicy::default();
        let p = CacheFields {
            ttl_s: Some(60.0),
            refresh_at: Some(0.5),
            ..Default::default()
        }
        .over(&base, "t")
        .unwrap();
        assert_eq!(p.ttl, Duration::from_secs(60));
        assert_eq!(p.idle, base.idle);
        assert_eq!(p.refresh_after(), Duration::from_secs(30));
        for (fields, message) in [
            (
                CacheFields {
                    ttl_s: Some(-1.0),
                    ..Default::default()
                },
                "`ttl_s = -1` is out of range",
            ),
            (
                CacheFields {
                    idle_s: Some(0.0),
                    ..Default::default()
                },
                "`idle_s = 0` is out of range",
            ),
            (
                CacheFields {
                    refresh_at: Some(1.5),
                    ..Default::default()
                },
                "`refresh_at = 1.5` must be a fraction",
            ),
            (
                CacheFields {
                    refresh_at: Some(0.0),
                    ..Default::default()
                },
                "`refresh_at = 0` must be a fraction",
            ),
        ] {
            let e = fields.over(&base, "[cache]").unwrap_err();
            assert!(e.starts_with("[cache]: ") && e.contains(message), "{e}");
        }
    }
}
