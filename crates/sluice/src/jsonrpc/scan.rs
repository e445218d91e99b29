//! Byte scans over JSON that has not been (or could not be) parsed.
//!
//! Two questions are asked of raw bytes before, or instead of, a parse:
//!
//! - How deep does it nest? `serde_json`'s borrowed parse (`RawValue`)
//!   skips values without recursion and so has no depth limit of its own,
//!   while every typed or `Value` parse refuses the 128th level. The
//!   envelope parse checks [`nests_deeper_than`] first, so that sluice
//!   never forwards a message that it (or a Rust SDK on the other side)
//!   could not parse later.
//! - What is the id of a message that failed to parse? An answer with one
//!   bad byte, or cut short, or nested a million levels deep still names
//!   the request it answers. [`salvage_id`] finds that top-level `"id"` so
//!   that the call waiting for the answer fails at once with the reason,
//!   instead of waiting for an answer that will never be read.
//!
//! Both are one forward pass over the bytes, with no recursion and no
//! allocation beyond the id found; neither ever panics, whatever the bytes.

use super::message::Id;

/// The index just past the string whose opening quote is at `quote`, or
/// `None` when the bytes end inside it. Escapes are skipped, not checked.
pub(crate) fn string_end(bytes: &[u8], quote: usize) -> Option<usize> {
    let mut i = quote + 1;
    while i <= bytes.len() {
        let at = sluice_core::scan::quote_or_backslash(bytes, i)?;
        if bytes[at] == b'\\' {
            i = at + 2;
        } else {
            return Some(at + 1);
        }
    }
    None
}

/// Whether the arrays and objects in `json` nest more than `limit` levels
/// deep (brackets inside strings are not counted). The bytes need not be
/// valid JSON; on invalid JSON the answer only has to be safe, not right
/// (the parse refuses it anyway).
///
/// This runs on every message, so it is fast: a message with no more than
/// `limit` opening brackets in all (most of them) is answered by counting
/// bytes, which the compiler vectorizes; any other is scanned 64 bytes at a
/// time with word-wide bit operations ([`Blocks`]), not byte by byte, so
/// long strings dense with escapes (JSON inside a text block) cost little.
pub(crate) fn nests_deeper_than(json: &[u8], limit: usize) -> bool {
    let opening = sluice_core::budget::count_bytes(json, |b| b | 0x20 == b'{');
    if opening <= limit {
        return false;
    }
    let mut blocks = Blocks::default();
    let mut depth: i64 = 0;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut chunks = json.chunks_exact(64);
    for chunk in chunks.by_ref() {
        let mut block = [0u8; 64];
        block.copy_from_slice(chunk);
        if blocks.deeper(&block, &mut depth, limit) {
            return true;
        }
    }
    // The tail, padded with spaces (which change nothing).
    let rest = chunks.remainder();
    let mut block = [b' '; 64];
    block[..rest.len()].copy_from_slice(rest);
    blocks.deeper(&block, &mut depth, limit)
}

/// The state carried from one 64-byte block to the next while scanning for
/// nesting: whether the block starts escaped, or inside a string. Each byte
/// of a block is one bit of a `u64` mask (bit `i` for byte `i`), as in
/// simdjson's first stage, computed here with portable word operations.
#[derive(Debug, Default)]
struct Blocks {
    /// All ones when the previous block ended inside a string.
    in_string: u64,
    /// 1 when the previous block ended with an escaping backslash.
    escaped: u64,
}

/// One bit per byte of `word` (8 bytes, little-endian) that equals the
/// byte repeated in `pattern`: the exact zero-byte test on `word ^ pattern`
/// (no false positives), its high bits gathered by a multiplication.
#[inline(always)]
fn equal_bits(word: u64, pattern: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let y = word ^ pattern;
    let zero_high = !(((y & LOW7) + LOW7) | y) & HIGH;
    (zero_high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56
}

impl Blocks {
    /// The masks of the bytes of `block` equal to each of `bytes`
    /// (`[` and `]` are folded onto `{` and `}`, from which they differ
    /// only in bit 5, when `fold` is set).
    #[inline(always)]
    fn masks(block: &[u8; 64], bytes: [u8; 2], fold: bool) -> [u64; 2] {
        const ONES: u64 = 0x0101_0101_0101_0101;
        let fold = if fold { ONES * 0x20 } else { 0 };
        let patterns = bytes.map(|b| ONES * u64::from(b));
        let mut masks = [0u64; 2];
        for (k, word) in block.chunks_exact(8).enumerate() {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(word);
            let word = u64::from_le_bytes(eight) | fold;
            masks[0] |= equal_bits(word, patterns[0]) << (k * 8);
            masks[1] |= equal_bits(word, patterns[1]) << (k * 8);
        }
        masks
    }

    /// The bytes of the block that a backslash escapes, given the mask of
    /// its backslashes: simdjson's escape scanner (runs of backslashes
    /// escape in pairs; an odd run escapes the byte after it).
    #[inline(always)]
    fn escaped(&mut self, backslash: u64) -> u64 {
        const ODD: u64 = 0xAAAA_AAAA_AAAA_AAAA;
        let potential = backslash & !self.escaped;
        let maybe_escaped = potential << 1;
        let codes = (maybe_escaped | ODD).wrapping_sub(potential) ^ ODD;
        let escaped = codes ^ (backslash | self.escaped);
        self.escaped = (codes & backslash) >> 63;
        escaped
    }

    /// Follows the nesting through `block`; `true` as soon as `depth`
    /// passes `limit`.
    fn deeper(&mut self, block: &[u8; 64], depth: &mut i64, limit: i64) -> bool {
        let [quote, backslash] = Blocks::masks(block, [b'"', b'\\'], false);
        let quote = quote & !self.escaped(backslash);
        // Inside a string: between an opening quote and its closing one,
        // the prefix XOR of the quote bits.
        let mut in_string = quote;
        for shift in [1, 2, 4, 8, 16, 32] {
            in_string ^= in_string << shift;
        }
        in_string ^= self.in_string;
        self.in_string = 0u64.wrapping_sub(in_string >> 63);
        // A block inside one string (most of a long text) has no brackets
        // that count: they are not even looked for.
        if in_string == u64::MAX {
            return false;
        }
        let [open, close] = Blocks::masks(block, [b'{', b'}'], true);
        let opens = open & !in_string;
        let closes = close & !in_string;
        if opens | closes == 0 {
            return false;
        }
        // Even if every opening bracket came first, this block stays within
        // the limit: no need to follow it bracket by bracket.
        if *depth + i64::from(opens.count_ones()) <= limit {
            *depth += i64::from(opens.count_ones()) - i64::from(closes.count_ones());
            return false;
        }
        let mut brackets = opens | closes;
        while brackets != 0 {
            let bit = brackets & brackets.wrapping_neg();
            if opens & bit != 0 {
                *depth += 1;
                if *depth > limit {
                    return true;
                }
            } else {
                *depth -= 1;
            }
            brackets ^= bit;
        }
        false
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|&b| is_space(b)) {
        i += 1;
    }
    i
}

/// Whether the quoted key `raw` (quotes included) names `id`, spelled plainly
/// or with escapes (`"\u0069d"`).
fn key_is_id(raw: &[u8]) -> bool {
    if raw == b"\"id\"" {
        return true;
    }
    // An escaped spelling of a two-letter key is short; a longer key is
    // not decoded at all, which keeps the scan linear.
    raw.len() <= 32
        && raw.contains(&b'\\')
        && std::str::from_utf8(raw)
            .ok()
            .and_then(|text| serde_json::from_str::<String>(text).ok())
            .is_some_and(|key| key == "id")
}

/// The index just past the value that starts at `i`: a string, a whole
/// array or object (brackets counted outside strings, not matched), or a
/// scalar up to the next delimiter. `None` when the bytes end first.
fn skip_value(bytes: &[u8], i: usize) -> Option<usize> {
    match *bytes.get(i)? {
        b'"' => string_end(bytes, i),
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < bytes.len() {
                match bytes[j] {
                    b'"' => {
                        j = string_end(bytes, j)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let end = scalar_end(bytes, i);
            (end > i).then_some(end)
        }
    }
}

/// The end of the scalar (number, `true`, `null`…) that starts at `i`.
fn scalar_end(bytes: &[u8], i: usize) -> usize {
    let mut end = i;
    while bytes
        .get(end)
        .is_some_and(|&b| !is_space(b) && !matches!(b, b',' | b'}' | b']' | b'"'))
    {
        end += 1;
    }
    end
}

/// The id whose value starts at `i`, if it is a whole string or number.
fn id_at(bytes: &[u8], i: usize) -> Option<Id> {
    let end = match *bytes.get(i)? {
        b'"' => string_end(bytes, i)?,
        b'-' | b'0'..=b'9' => {
            let end = scalar_end(bytes, i);
            // A number that runs to the end of the bytes may have been cut
            // short (`12` of `123`): only a delimiter after it proves it
            // whole. Naming the wrong call would be worse than naming none.
            bytes.get(end)?;
            end
        }
        _ => return None,
    };
    Id::from_json(std::str::from_utf8(&bytes[i..end]).ok()?)
}

/// The top-level `"id"` of `bytes`, a JSON-RPC message that may not parse:
/// invalid UTF-8 elsewhere in it, nested too deep, cut short, or too large
/// to keep. `None` when there is no such member before the damage, or its
/// value is not a whole string or number (`null`, cut inside the id).
///
/// One forward scan: members before the id are skipped by counting brackets
/// outside strings, so the cost is linear in the bytes before the id, the
/// memory constant, and nothing recurses however deep the nesting. The
/// first top-level `"id"` wins (a parse refuses messages with two).
pub fn salvage_id(bytes: &[u8]) -> Option<Id> {
    let start = if bytes.starts_with(b"\xEF\xBB\xBF") {
        3
    } else {
        0
    };
    let mut i = skip_space(bytes, start);
    if bytes.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_space(bytes, i);
        if bytes.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(bytes, i)?;
        let is_id = key_is_id(&bytes[i..key_end]);
        i = skip_space(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(bytes, i + 1);
        if is_id {
            return id_at(bytes, i);
        }
        i = skip_space(bytes, skip_value(bytes, i)?);
        if bytes.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(bytes: &[u8]) -> Option<String> {
        salvage_id(bytes).map(|id| id.to_string())
    }

    #[test]
    fn the_id_of_a_whole_message_is_found_wherever_it_stands() {
        assert_eq!(
            id(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#).as_deref(),
            Some("7")
        );
        assert_eq!(
            id(br#"{"result":{"a":[1,{"id":5}],"s":"}]\"{"},"id":"x\"y","jsonrpc":"2.0"}"#)
                .as_deref(),
            Some(r#""x\"y""#),
            "nested ids and brackets inside strings are skipped"
        );
        assert_eq!(
            id(b"\xEF\xBB\xBF {\r\n \"id\" : -1.5e3 }").as_deref(),
            Some("-1.5e3"),
            "a BOM, whitespace and a number's spelling are kept"
        );
        assert_eq!(
            id(br#"{"\u0069d":3}"#).as_deref(),
            Some("3"),
            "an escaped key"
        );
    }

    #[test]
    fn the_id_of_a_damaged_message_is_found_when_it_comes_before_the_damage() {
        let mut bad_utf8 = br#"{"jsonrpc":"2.0","id":12,"result":{"text":""#.to_vec();
        bad_utf8.extend(b"\xFF\xFE");
        bad_utf8.extend(br#""}}"#);
        assert_eq!(id(&bad_utf8).as_deref(), Some("12"));

        let mut deep = br#"{"id":"deep","result":"#.to_vec();
        deep.extend(std::iter::repeat_n(b'[', 1_000_000));
        assert_eq!(id(&deep).as_deref(), Some(r#""deep""#));

        let mut before = br#"{"jsonrpc":"2.0","result":{"a":"#.to_vec();
        before.extend(std::iter::repeat_n(b'[', 10_000));
        before.extend(std::iter::repeat_n(b']', 10_000));
        before.extend(b"\xC0\xC1},\"id\":99}");
        assert_eq!(
            id(&before).as_deref(),
            Some("99"),
            "damage and nesting before the id are skipped"
        );
    }

    #[test]
    fn a_cut_id_is_not_guessed() {
        assert_eq!(id(br#"{"id":123"#), None, "12 of 123 must not be named");
        assert_eq!(id(br#"{"id":123,"#).as_deref(), Some("123"));
        assert_eq!(id(br#"{"id":"ab"#), None);
        assert_eq!(id(br#"{"id":null,"result":1}"#), None);
        assert_eq!(id(br#"{"id":[1],"result":1}"#), None);
        assert_eq!(id(br#"{"id":1x,"result":1}"#), None, "not a number");
        assert_eq!(id(br#"[{"id":1}]"#), None, "a batch is no message");
        assert_eq!(id(br#"{"result":{"id":1}"#), None);
    }

    /// The byte-by-byte meaning of [`nests_deeper_than`].
    fn deeper_byte_by_byte(json: &[u8], limit: usize) -> bool {
        let (mut depth, mut in_string, mut escaped) = (0i64, false, false);
        for &b in json {
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    if depth > limit as i64 {
                        return true;
                    }
                }
                b']' | b'}' => depth -= 1,
                _ => {}
            }
        }
        false
    }

    /// Brackets, letters and strings (whose content is escapes, quotes
    /// and brackets): backslashes only inside strings, as in JSON; the
    /// brackets need not balance.
    fn tokens() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece =
            prop::sample::select(vec![&br"\\"[..], br#"\""#, b"[", b"]", b"{", b"a", br"\n"]);
        let string = prop::collection::vec(piece, 0..100).prop_map(|pieces| {
            let mut string = b"\"".to_vec();
            string.extend(pieces.concat());
            string.push(b'"');
            string
        });
        let token = prop_oneof![
            prop::sample::select(vec![&b"["[..], b"]", b"{", b"}", b"a", b" "])
                .prop_map(<[u8]>::to_vec),
            string,
        ];
        prop::collection::vec(token, 0..60).prop_map(|tokens| tokens.concat())
    }

    proptest::proptest! {
        #[test]
        fn the_block_scan_agrees_with_the_byte_by_byte_one(
            json in tokens(),
            cut in proptest::sample::select(vec![0usize, 1, 2]),
            limit in 0usize..12,
        ) {
            // Also cut short, possibly inside a string.
            let json = &json[..json.len().saturating_sub(cut)];
            proptest::prop_assert_eq!(
                nests_deeper_than(json, limit),
                deeper_byte_by_byte(json, limit)
            );
        }
    }

    #[test]
    fn escapes_across_block_boundaries_are_followed() {
        for at in 55..75 {
            for run in 1..6 {
                let mut json = vec![b' '; at];
                json[0] = b'"';
                json.extend(std::iter::repeat_n(b'\\', run));
                json.extend(b"\"[[[[]]]]\"[[[");
                for limit in [2, 3, 4, 6, 7] {
                    assert_eq!(
                        nests_deeper_than(&json, limit),
                        deeper_byte_by_byte(&json, limit),
                        "quote at 0, {run} backslashes at {at}, limit {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(!nests_deeper_than(br#"{"a":[[1]]}"#, 3));
        assert!(nests_deeper_than(br#"{"a":[[[1]]]}"#, 3));
        assert!(!nests_deeper_than(br#"{"a":"[[[[[[","b":"\"[[[["}"#, 1));
        let deep = vec![b'['; 1_000_000];
        assert!(nests_deeper_than(&deep, 127));
    }
}
