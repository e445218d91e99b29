//! JSON Pointer resolution (`sluice_core::scan::resolve`): what
//! `sluice_read`'s and `sluice_query`'s `path` reaches.
//!
//! Over a compact document, any pointer either resolves to a range whose
//! text parses as the value serde_json's `Value::pointer` finds, or is an
//! error where serde_json finds nothing (a syntax error exactly when the
//! pointer is neither empty nor starts with `/`).
//!
//! RFC 6901 indexes are canonical (`0`, `1`, `10`: no sign, no leading
//! zero). serde_json finds nothing at `/01` or `/+0`; sluice answering such
//! a pointer with the canonical item is being changed into an error (issue
//! 14), so for now either answer is accepted for a non-canonical index.

use proptest::prelude::*;
use serde_json::Value;
use sluice_core::scan::{self, PointerError};

use crate::corpus::config;
use crate::json::{json_document, json_string, valid_seeds, values_with_pointers};
use crate::regressions;

/// Whether some token of `pointer` is a non-canonical array index at a step
/// where `value` has an array.
fn has_non_canonical_index(value: &Value, pointer: &str) -> bool {
    let Some(rest) = pointer.strip_prefix('/') else {
        return false;
    };
    let mut here = Some(value);
    for raw in rest.split('/') {
        let token = scan::unescape_token(raw);
        match here {
            Some(Value::Array(items)) => {
                // Signs and white space around digits: the spellings the
                // scanner refuses with the canonical one.
                let digits =
                    token.trim_matches(|c: char| c == '+' || c == '-' || c.is_whitespace());
                let numeric = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                let canonical =
                    token == "0" || (numeric && digits == token && !token.starts_with('0'));
                if numeric && !canonical {
                    return true;
                }
                here = token.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            Some(Value::Object(members)) => here = members.get(&token),
            _ => return false,
        }
    }
    false
}

/// `resolve` agrees with serde_json on `pointer` over `value` (as `doc`).
fn check(doc: &str, value: &Value, pointer: &str) -> Result<(), TestCaseError> {
    let expected = value.pointer(pointer);
    let lenient = has_non_canonical_index(value, pointer);
    match scan::resolve(doc, pointer) {
        Ok(range) => {
            let text = doc.get(range.clone()).ok_or_else(|| {
                TestCaseError::fail(format!(
                    "`{pointer}` gave {range:?}, not a slice of the text"
                ))
            })?;
            let found: Value = serde_json::from_str(text).map_err(|e| {
                TestCaseError::fail(format!("`{pointer}` gave `{text}`, not one value ({e})"))
            })?;
            if lenient && expected.is_none() {
                return Ok(());
            }
            prop_assert_eq!(Some(&found), expected, "at `{}`", pointer);
        }
        Err(PointerError::Syntax(p)) => {
            prop_assert_eq!(&p, pointer);
            prop_assert!(
                !pointer.is_empty() && !pointer.starts_with('/'),
                "`{}`",
                pointer
            );
            prop_assert_eq!(expected, None);
        }
        Err(e @ PointerError::Missing { .. }) => {
            prop_assert!(
                expected.is_none() || lenient,
                "`{}` is refused ({}) but serde_json finds {:?}",
                pointer,
                e,
                expected
            );
            let message = e.to_string();
            prop_assert!(message.contains("does not exist"), "{}", message);
        }
        // RFC 6901: one spelling per index; `/+0`, `/01` are refused with
        // the canonical one.
        Err(e @ PointerError::NotCanonical { .. }) => {
            prop_assert!(lenient, "`{}` refused as not canonical: {}", pointer, e);
        }
        Err(e @ PointerError::Escape(_)) => {
            let bad_escape = pointer
                .split('~')
                .skip(1)
                .any(|rest| !rest.starts_with('0') && !rest.starts_with('1'));
            prop_assert!(bad_escape, "`{}` refused for its escapes: {}", pointer, e);
        }
    }
    Ok(())
}

/// Pointers worth trying over `value`: every real one, and each of them
/// bent (a step added, an index made non-canonical or out of range, a key
/// changed, escapes broken).
fn pointers_over(value: &Value) -> Vec<String> {
    let mut pointers: Vec<String> = Vec::new();
    for (pointer, inner) in values_with_pointers(value) {
        pointers.push(pointer.clone());
        pointers.push(format!("{pointer}/"));
        pointers.push(format!("{pointer}/-"));
        pointers.push(format!("{pointer}/~"));
        pointers.push(format!("{pointer}/~2"));
        pointers.push(format!("{pointer}/a~1b"));
        if let Value::Array(items) = inner {
            let n = items.len();
            for token in [
                n.to_string(),
                format!("0{}", n.saturating_sub(1)),
                "+0".into(),
                "00".into(),
                "-0".into(),
                " 0".into(),
                "0x0".into(),
                "1e0".into(),
                "18446744073709551616".into(),
                "99999999999999999999999".into(),
            ] {
                pointers.push(format!("{pointer}/{token}"));
            }
        }
        if let Value::Object(members) = inner {
            for key in members.keys() {
                // The unescaped key where it needed escaping.
                pointers.push(format!("{pointer}/{key}"));
                pointers.push(format!("{pointer}/{}x", crate::json::escaped(key)));
            }
        }
    }
    pointers.extend(["x".into(), "#/a".into(), " /a".into()]);
    pointers
}

/// At most `n` of `pointers`, spread over them from `offset` on (each
/// resolution walks the document: all of them would take quadratic time).
fn some(pointers: Vec<String>, n: usize, offset: usize) -> Vec<String> {
    let step = pointers.len().div_ceil(n).max(1);
    pointers
        .into_iter()
        .skip(offset % step)
        .step_by(step)
        .collect()
}

#[test]
fn pointers_over_the_seed_documents_agree_with_serde_json() {
    for (name, text, value) in valid_seeds("json") {
        let doc = scan::minify(&text);
        for pointer in some(pointers_over(&value), 500, 0) {
            check(&doc, &value, &pointer).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        }
    }
}

proptest! {
    #![proptest_config(config(regressions!("pointer"), 256))]

    #[test]
    fn pointers_agree_with_serde_json(
        (value, text) in json_document(),
        arbitrary in prop::collection::vec(
            prop_oneof![
                "(/[0-9a-c~+-]{0,3}){0,4}",
                prop::collection::vec(json_string(), 0..4).prop_map(|tokens| {
                    tokens.iter().map(|t| format!("/{t}")).collect::<String>()
                }),
                ".{0,12}",
            ],
            0..8,
        ),
        offset in any::<usize>(),
    ) {
        let doc = scan::minify(&text);
        for pointer in some(pointers_over(&value), 64, offset).into_iter().chain(arbitrary) {
            check(&doc, &value, &pointer)?;
        }
    }
}
