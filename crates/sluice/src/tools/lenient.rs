//! sluice's own tools' arguments as models and clients write them: an
//! integer as a number or as the string of its digits (`"page": "2"`, which
//! some clients send for every argument), a boolean as `true` or `"true"`,
//! a handle, cursor or operation id with spaces or a newline around it
//! (copied from a line of text). Each is read as what it plainly means;
//! the schemas still say integer, boolean, string. Anything else is
//! refused with what was expected, as before.

use std::fmt;

use serde::Deserializer;
use serde::de::{self, Visitor};

/// An optional integer: a JSON number with no fraction, or a string of its
/// digits (spaces around them ignored). Use with `#[serde(default,
/// deserialize_with = "lenient::integer")]`.
pub(super) fn integer<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    struct Integer<T>(std::marker::PhantomData<T>);
    impl<T: TryFrom<u64>> Integer<T> {
        fn of<E: de::Error>(n: u64) -> Result<Option<T>, E> {
            T::try_from(n)
                .map(Some)
                .map_err(|_| E::custom(format!("{n} is too large")))
        }
    }
    impl<'de, T: TryFrom<u64>> Visitor<'de> for Integer<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a whole number (or a string of its digits)")
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
            Self::of(n)
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<Self::Value, E> {
            match u64::try_from(n) {
                Ok(n) => Self::of(n),
                Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
            }
        }
        fn visit_f64<E: de::Error>(self, x: f64) -> Result<Self::Value, E> {
            // `2.0`: a whole number written with a fraction.
            if x.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&x) {
                return Self::of(x as u64);
            }
            Err(E::invalid_value(de::Unexpected::Float(x), &self))
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            let digits = text.trim();
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(E::invalid_value(de::Unexpected::Str(text), &self));
            }
            match digits.parse::<u64>() {
                Ok(n) => Self::of(n),
                Err(_) => Err(E::custom(format!("{digits} is too large"))),
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(Integer(std::marker::PhantomData))
}

/// A whole number given as a JSON number or as a string of its digits.
pub(super) fn whole(value: &serde_json::Value) -> Option<u64> {
    use serde::de::IntoDeserializer as _;
    let read: Result<Option<u64>, serde_json::Error> = integer(value.into_deserializer());
    read.ok().flatten()
}

/// An optional boolean: `true`, `false`, or the same as a string. Use with
/// `#[serde(default, deserialize_with = "lenient::boolean")]`.
pub(super) fn boolean<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<bool>, D::Error> {
    struct Boolean;
    impl Visitor<'_> for Boolean {
        type Value = Option<bool>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("true or false")
        }
        fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
            Ok(Some(b))
        }
        fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
            match text.trim() {
                "true" => Ok(Some(true)),
                "false" => Ok(Some(false)),
                _ => Err(E::invalid_value(de::Unexpected::Str(text), &self)),
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    deserializer.deserialize_any(Boolean)
}

/// An optional id (a handle, a cursor): a string, without the spaces or
/// newlines around it (no id sluice issues holds any). Use with
/// `#[serde(default, deserialize_with = "lenient::id")]`.
pub(super) fn id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    let text: Option<String> = serde::Deserialize::deserialize(deserializer)?;
    Ok(text.map(trimmed))
}

/// An id that must be given, as [`id`] reads it. Use with
/// `#[serde(deserialize_with = "lenient::required_id")]`.
pub(super) fn required_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let text: String = serde::Deserialize::deserialize(deserializer)?;
    Ok(trimmed(text))
}

/// `text` without the spaces or newlines around it, reusing it when there
/// are none.
pub(super) fn trimmed(text: String) -> String {
    match text.trim() {
        same if same.len() == text.len() => text,
        inner => inner.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Args {
        #[serde(default, deserialize_with = "super::integer")]
        page: Option<u64>,
        #[serde(default, deserialize_with = "super::integer")]
        small: Option<u32>,
        #[serde(default, deserialize_with = "super::boolean")]
        flag: Option<bool>,
        #[serde(default, deserialize_with = "super::id")]
        handle: Option<String>,
    }

    fn read(json: &str) -> Result<Args, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// What a model plainly means is read so; anything else is refused
    /// with what was expected.
    #[test]
    fn an_argument_is_read_as_it_plainly_means() {
        let args = read(r#"{"page":"2","small":" 7 ","flag":"true","handle":" h_abc\n"}"#).unwrap();
        assert_eq!(
            args,
            Args {
                page: Some(2),
                small: Some(7),
                flag: Some(true),
                handle: Some("h_abc".into()),
            }
        );
        let args = read(r#"{"page":3.0,"small":null,"flag":false}"#).unwrap();
        assert_eq!(
            (args.page, args.small, args.flag),
            (Some(3), None, Some(false))
        );
        assert_eq!(read("{}").unwrap().page, None);
        for (json, expected) in [
            (
                r#"{"page":"two"}"#,
                r#"invalid value: string "two", expected a whole number"#,
            ),
            (r#"{"page":"-2"}"#, r#"invalid value: string "-2""#),
            (r#"{"page":""}"#, r#"invalid value: string """#),
            (r#"{"page":-1}"#, "invalid value: integer `-1`"),
            (r#"{"page":2.5}"#, "invalid value: floating point `2.5`"),
            (
                r#"{"page":[2]}"#,
                "invalid type: sequence, expected a whole number",
            ),
            (r#"{"small":"4294967296"}"#, "4294967296 is too large"),
            (
                r#"{"page":"99999999999999999999"}"#,
                "99999999999999999999 is too large",
            ),
            (
                r#"{"flag":"yes"}"#,
                r#"invalid value: string "yes", expected true or false"#,
            ),
            (
                r#"{"flag":1}"#,
                "invalid type: integer `1`, expected true or false",
            ),
            (
                r#"{"handle":5}"#,
                "invalid type: integer `5`, expected a string",
            ),
        ] {
            let error = read(json).unwrap_err();
            assert!(error.contains(expected), "{json}: {error}");
        }
    }
}
