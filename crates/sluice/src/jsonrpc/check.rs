//! The check of a message's JSON before anything of it is used: the
//! grammar, the depth limit and the top-level members in one pass, made by
//! [`sluice_core::check::object_members`]. Its tests here hold it to what
//! the envelope parse did before it (the nesting scan, then `serde_json`'s
//! borrowed members), on generated, mutated and random texts.

#[cfg(test)]
use sluice_core::check::object_members;
pub(crate) use sluice_core::check::object_members_reporting;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::object::raw_members;
    use crate::jsonrpc::scan::nests_deeper_than;
    use proptest::prelude::*;
    use std::ops::Range;

    /// What the envelope parse did before this check: the depth scan, then
    /// `serde_json`'s members, as ranges.
    fn serde_members(text: &str, max_depth: usize) -> Option<Vec<(Range<usize>, Range<usize>)>> {
        if nests_deeper_than(text.as_bytes(), max_depth) {
            return None;
        }
        let range = |part: &str| {
            let start = part.as_ptr() as usize - text.as_ptr() as usize;
            start..start + part.len()
        };
        raw_members(text).ok().map(|members| {
            members
                .into_iter()
                .map(|(k, v)| (range(k.get()), range(v.get())))
                .collect()
        })
    }

    fn agrees(text: &str, max_depth: usize) -> Result<(), TestCaseError> {
        let checked = object_members(text, max_depth);
        let serde = serde_members(text, max_depth);
        // Accepting what serde_json refuses is the one thing never allowed;
        // refusing what it accepts costs only a second parse, and is not
        // expected either.
        prop_assert_eq!(checked, serde, "{:?}", text);
        Ok(())
    }

    /// A JSON object's text written token by token: numbers in every form
    /// JSON has, strings with every escape as written, whitespace around
    /// any token, keys repeated at times.
    fn object_text() -> impl Strategy<Value = String> {
        let space = "[ \t\n\r]{0,2}";
        let key = "\"([a-zé]|\\\\[\"\\\\/n]|\\\\u00[0-7][0-9a-f]){0,3}\"";
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,2})?",
            "\"([a-z é🦀]|\\\\[\"\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}){0,8}\"",
        ];
        let value = leaf.prop_recursive(6, 48, 5, move |inner| {
            let items = prop::collection::vec((inner.clone(), space), 0..5).prop_map(|items| {
                let items: Vec<String> = items.iter().map(|(v, s)| format!("{s}{v}{s}")).collect();
                format!("[{}]", items.join(","))
            });
            prop_oneof![items, members(key, inner, space)]
        });
        members(key, value, space)
    }

    /// `text` with its character at `at` replaced by `token` (`edit` 0),
    /// taken out (1) or with `token` put in before it (2).
    fn edited(text: &str, at: prop::sample::Index, token: &str, edit: u8) -> String {
        let places: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let at = places[at.index(places.len())];
        let here = at..at + text[at..].chars().next().map_or(0, char::len_utf8);
        let mut edited = text.to_owned();
        match edit {
            0 => edited.replace_range(here, token),
            1 => edited.replace_range(here, ""),
            _ => edited.insert_str(at, token),
        }
        edited
    }

    /// An object of `value`s under `key`s, spaced by `space`.
    fn members(
        key: &'static str,
        value: impl Strategy<Value = String>,
        space: &'static str,
    ) -> impl Strategy<Value = String> {
        prop::collection::vec((key, value, space), 0..5).prop_map(|members| {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v, s)| format!("{s}{k}{s}:{s}{v}{s}"))
                .collect();
            format!("{{{}}}", members.join(","))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// Valid objects, then each with one character replaced, taken out
        /// or put in (at any place: most of them make it invalid), at depth
        /// limits around their own depth.
        #[test]
        fn the_check_agrees_with_serde_json(
            text in object_text(),
            at in any::<prop::sample::Index>(),
            token in "[\"\\\\,:{}\\[\\]0.eu \n\u{1f}a-]",
            edit in 0u8..3,
            max_depth in 1usize..8,
        ) {
            // What is generated is valid (and far less deep than 128).
            prop_assert!(object_members(&text, 128).is_some(), "{:?}", text);
            agrees(&text, 128)?;
            agrees(&text, max_depth)?;
            let edited = edited(&text, at, &token, edit);
            agrees(&edited, 128)?;
            agrees(&edited, max_depth)?;
        }

        /// Texts of JSON's punctuation, digits and letters, valid or not.
        #[test]
        fn any_text_is_checked_as_serde_json_reads_it(
            text in "\\{[\\[\\]{}\":, \n\t\\\\0-9.eE+\\-tfrulnsa\u{1}é]{0,60}",
            max_depth in 1usize..5,
        ) {
            agrees(&text, max_depth)?;
            agrees(&text, 128)?;
        }
    }

    /// What [`sluice_core::scan::object_members_of_valid`] gives for any
    /// text: ranges within it, on character boundaries, in order.
    fn trusted_within(text: &str) -> Result<(), TestCaseError> {
        let mut after = 0;
        for (key, value) in sluice_core::scan::object_members_of_valid(text).unwrap_or_default() {
            prop_assert!(after <= key.start && key.end <= value.start && value.start <= value.end);
            prop_assert!(text.get(key.clone()).is_some() && text.get(value.clone()).is_some());
            after = value.end;
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The members of a valid object found without validating it (the
        /// parts of a checked message: `RawObject::of_checked`) are the
        /// check's, spans and all; on any other text (one character
        /// replaced, taken out or put in) the scan still ends, with spans
        /// within the text.
        #[test]
        fn a_valid_objects_members_are_found_unchecked_as_the_check_finds_them(
            text in object_text(),
            at in any::<prop::sample::Index>(),
            token in "[\"\\\\,:{}\\[\\]0.eu \n\u{1f}a-]",
            edit in 0u8..3,
        ) {
            prop_assert_eq!(
                sluice_core::scan::object_members_of_valid(&text),
                object_members(&text, usize::MAX),
                "{:?}", text
            );
            let edited = edited(&text, at, &token, edit);
            trusted_within(&edited)?;
        }

        /// Any text of JSON's punctuation and more: the scan ends, spans
        /// within the text.
        #[test]
        fn any_text_is_scanned_unchecked_within_its_bounds(
            text in "[ ]?\\{[ \\{\\[\\]{}\":, \n\t\\\\0-9.eE+\\-tfrulnsa\u{1}é🦀]{0,60}",
        ) {
            trusted_within(&text)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A response whose text block is long enough to be unescaped
        /// while it is checked (and kept), then with one byte changed
        /// anywhere in it: refused where the check alone refuses it, and
        /// what is kept is the text serde_json reads.
        #[test]
        fn a_long_string_kept_while_checked_is_checked_as_the_check_does(
            records in 3_000usize..12_000,
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![
                Just("\u{1}"), Just("\n"), Just("\\"), Just("\""), Just("q"), Just("u"),
                Just("é"),
            ],
        ) {
            let body = r#"{\"id\":\"SKU-1\",\"n\":\"a\\\\b\u00e9\"},"#.repeat(records);
            let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"content":[{{"type":"text","text":"[{body}]"}}]}}}}"#);
            let mut edited = text.clone();
            // In the text block, past its first 64 KB or not.
            let place = 50 + at.index(text.len() - 60);
            if edited.is_char_boundary(place) {
                edited.insert_str(place, byte);
            }
            for text in [&text, &edited] {
                let mut keeping = crate::jsonrpc::walk::Keeping::default();
                let kept = object_members_reporting(text, 64, &mut keeping);
                prop_assert_eq!(&kept, &object_members(text, 64));
                if kept.is_some() {
                    let value: serde_json::Value = serde_json::from_str(text).unwrap();
                    let block = value["result"]["content"][0]["text"].as_str().unwrap();
                    for (_, _, kept) in &keeping.kept {
                        prop_assert_eq!(kept.as_str(), block);
                    }
                }
            }
        }
    }

    #[test]
    fn members_are_found_with_their_spans() {
        let text = " { \"a\" : [1, {\"b\": null}] ,\"\\u0063\":\"x\\\"y\", \"a\":-0.5e+3 } ";
        let members: Vec<(&str, &str)> = object_members(text, 128)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (&text[k], &text[v]))
            .collect();
        assert_eq!(
            members,
            [
                ("\"a\"", "[1, {\"b\": null}]"),
                ("\"\\u0063\"", "\"x\\\"y\""),
                ("\"a\"", "-0.5e+3"),
            ]
        );
        assert_eq!(object_members("{}", 1), Some(Vec::new()));
    }

    #[test]
    fn what_is_not_one_valid_object_within_the_depth_is_refused() {
        for text in [
            "",
            "[]",
            "{",
            "{} {}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":.5}",
            "{\"a\":1e}",
            "{\"a\":tru}",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":[1 2]}",
            "{\"a\":[1,]}",
            "{\"a\":{\"b\"}}",
            "{\"a\":[}",
            "{\"a\":\"unterminated}",
            "{'a':1}",
        ] {
            assert_eq!(object_members(text, 128), None, "{text:?}");
        }
        // Nesting: the object is the first level.
        assert!(object_members("{\"a\":[[1]]}", 3).is_some());
        assert_eq!(object_members("{\"a\":[[1]]}", 2), None);
        assert_eq!(object_members("{\"a\":[[]]}", 2), None);
        assert_eq!(object_members("{}", 0), None);
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(object_members(&deep, 128), None);
    }
}
