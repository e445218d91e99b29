//! Generated JSON documents, written out in many equivalent ways.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Strings that stress keys and values: quotes, backslashes, `/` and `~`
/// (escaped in pointers), control characters, non-ASCII and astral
/// characters, digit strings (that look like indexes), and short keys that
/// collide.
pub fn json_string() -> impl Strategy<Value = String> {
    let tricky = prop_oneof![
        Just('"'),
        Just('\\'),
        Just('/'),
        Just('~'),
        Just('0'),
        Just('1'),
        Just('\n'),
        Just('\r'),
        Just('\t'),
        Just('\u{0}'),
        Just('\u{1f}'),
        Just('é'),
        Just('\u{2028}'),
        Just('😀'),
        Just(' '),
        Just(','),
        Just(':'),
        Just('['),
        Just('}'),
        any::<char>(),
    ];
    prop_oneof![
        3 => "[a-c]{0,2}",
        1 => "[0-9+-]{1,3}",
        3 => prop::collection::vec(tricky, 0..8).prop_map(String::from_iter),
    ]
}

/// Any JSON value: nested up to 6 levels, numbers of every kind.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite numbers only", |f| {
            serde_json::Number::from_f64(f).map(Value::Number)
        }),
        json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((json_string(), inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A text of a generated document (whitespace between tokens: spaces,
/// tabs, CR, LF; characters of strings written as `\uXXXX` escapes,
/// surrogate pairs for astral ones, or `\/`, as `seed` decides) and the
/// value serde_json reads from it. (Read back, not the value generated: the
/// last digit of a float may differ, serde_json's parsing not being exact
/// without its `float_roundtrip` feature.)
pub fn json_document() -> impl Strategy<Value = (Value, String)> {
    (json_value(), any::<u64>(), 0u8..4).prop_map(|(value, seed, style)| {
        let text = match style {
            0 => value.to_string(),
            1 => serde_json::to_string_pretty(&value).expect("a Value serializes"),
            _ => {
                let mut out = String::new();
                Writer {
                    rng: seed | 1,
                    out: &mut out,
                }
                .value(&value);
                out
            }
        };
        let read = serde_json::from_str(&text).expect("a generated document is JSON");
        (read, text)
    })
}

/// Writes JSON with random whitespace and escapes (xorshift, seeded).
struct Writer<'a> {
    rng: u64,
    out: &'a mut String,
}

impl Writer<'_> {
    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn space(&mut self) {
        while self.next().is_multiple_of(3) {
            let c = [' ', '\n', '\r', '\t'][(self.next() % 4) as usize];
            self.out.push(c);
        }
    }

    fn value(&mut self, value: &Value) {
        self.space();
        match value {
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.space();
                self.out.push(']');
            }
            Value::Object(members) => {
                self.out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.space();
                    self.string(key);
                    self.space();
                    self.out.push(':');
                    self.value(item);
                }
                self.space();
                self.out.push('}');
            }
            Value::String(s) => self.string(s),
            other => self.out.push_str(&other.to_string()),
        }
        self.space();
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            let escape = self.next().is_multiple_of(4);
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '/' if escape => self.out.push_str("\\/"),
                c if (c as u32) < 0x20 || escape => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// `token` escaped for a JSON Pointer (`~` → `~0`, `/` → `~1`).
pub fn escaped(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Every value of `value` in document order, with its pointer (the root
/// first).
pub fn values_with_pointers(value: &Value) -> Vec<(String, &Value)> {
    fn walk<'a>(value: &'a Value, pointer: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((pointer.clone(), value));
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{pointer}/{i}"), out);
                }
            }
            Value::Object(members) => {
                for (key, item) in members {
                    walk(item, format!("{pointer}/{}", escaped(key)), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// The seeds of `dir` that are JSON documents serde_json reads, as text
/// and value (others are skipped: they are for robustness only).
pub fn valid_seeds(dir: &str) -> Vec<(String, String, Value)> {
    crate::corpus::seeds(dir)
        .into_iter()
        .filter_map(|(name, bytes)| {
            let text = String::from_utf8(bytes).ok()?;
            let value = serde_json::from_str(&text).ok()?;
            Some((name, text, value))
        })
        .collect()
}
