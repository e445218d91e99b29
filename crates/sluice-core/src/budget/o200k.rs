//! OpenAI's o200k_base tokenizer, for counting only, lean at rest.
//!
//! The counts are tiktoken's: text is split into pieces by o200k's
//! pre-tokenizing pattern, and each piece is encoded by byte-pair merges in
//! rank order (the lowest-ranked adjacent pair first, the leftmost on a
//! tie). `bpe-openai`, which counted before, embeds 32 MB of prebuilt
//! tables in the binary and holds 64 MB once loaded; this holds the
//! vocabulary's 1.6 MB (mapped from the binary) and a 2.8 MB index built in
//! a few tens of milliseconds on first use.
//!
//! `data/o200k_base.tokens` is the o200k_base vocabulary in rank order,
//! each token as one length byte then its bytes (made from tiktoken's
//! `o200k_base.tiktoken`; a test checks it token by token against
//! `bpe-openai`'s copy). The pattern is `bpe-openai`'s, which rewrites
//! tiktoken's negative look-ahead `\s+(?!\S)` as a pattern whose last
//! character is dropped from the match.
//!
//! Merging uses a heap, so a piece of n bytes costs O(n log n) whatever its
//! content (tiktoken's own loop is quadratic in a long piece, such as a
//! megabyte of letters without a space).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::LazyLock;

use regex_automata::meta::Regex;
use regex_automata::{Anchored, Input};

/// The vocabulary: for each rank, one length byte then the token's bytes.
static VOCABULARY: &[u8] = include_bytes!("../../data/o200k_base.tokens");

/// The longest token, in bytes: a longer span is no token.
const MAX_TOKEN_BYTES: usize = 128;

/// No rank: the bytes are not a token.
const NOT_A_TOKEN: u32 = u32::MAX;

/// o200k's pre-tokenizing patterns, and whether each ends in one character
/// of look-ahead that is not part of the piece.
const PATTERNS: [(&str, bool); 3] = [
    (
        concat!(
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"|\p{N}{1,3}",
            r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
            r"|\s*[\r\n]+",
            r"|\s+$",
        ),
        false,
    ),
    (r"\s+\s", true),
    (r"\s+", false),
];

static TOKENIZER: LazyLock<Tokenizer> = LazyLock::new(Tokenizer::load);

/// The o200k_base tokenizer, loaded on first use.
pub fn tokenizer() -> &'static Tokenizer {
    &TOKENIZER
}

/// Counts o200k_base tokens.
pub struct Tokenizer {
    ranks: RankIndex,
    pieces: Regex,
    lookahead: Vec<bool>,
}

impl Tokenizer {
    fn load() -> Self {
        let (patterns, lookahead): (Vec<&str>, Vec<bool>) = PATTERNS.into_iter().unzip();
        Self {
            ranks: RankIndex::new(VOCABULARY),
            pieces: Regex::new_many(&patterns).expect("o200k's pattern compiles"),
            lookahead,
        }
    }

    /// The tokens of `text`.
    pub fn count(&self, text: &str) -> usize {
        let mut merges = Merges::for_text(text);
        self.pieces(text)
            .map(|piece| merges.count(&self.ranks, piece.as_bytes()))
            .sum()
    }

    /// The tokens of `text` if they are at most `limit`; `None` as soon as
    /// the pieces counted so far exceed it.
    pub fn count_within(&self, text: &str, limit: usize) -> Option<usize> {
        let mut merges = Merges::for_text(text);
        let mut total = 0usize;
        for piece in self.pieces(text) {
            total += merges.count(&self.ranks, piece.as_bytes());
            if total > limit {
                return None;
            }
        }
        Some(total)
    }

    /// The pieces o200k encodes separately, in order; together they are `text`.
    ///
    /// Where the text is ASCII the pieces are found by hand
    /// ([`super::ascii_pieces`], some fifty times faster); the regex finds
    /// the others.
    pub(super) fn pieces<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let mut at = 0;
        std::iter::from_fn(move || {
            if at == text.len() {
                return None;
            }
            let start = at;
            at += match super::ascii_pieces::piece_len(&text.as_bytes()[at..]) {
                Some(len) => len,
                None => self.regex_piece_len(&text[at..])?,
            };
            Some(&text[start..at])
        })
    }

    /// The pieces of `text` by o200k's pattern alone (the reference the
    /// hand-written path is tested against).
    #[cfg(test)]
    pub(super) fn regex_pieces<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let mut at = 0;
        std::iter::from_fn(move || {
            let start = at;
            at += self.regex_piece_len(text.get(at..).filter(|rest| !rest.is_empty())?)?;
            Some(&text[start..at])
        })
    }

    /// The length of the first piece of `text` (not empty) by o200k's
    /// pattern itself.
    fn regex_piece_len(&self, text: &str) -> Option<usize> {
        let found = self.pieces.find(Input::new(text).anchored(Anchored::Yes))?;
        let mut end = found.range().end;
        if self.lookahead[found.pattern().as_usize()] {
            // Drop the look-ahead character; the pattern matches at least
            // two characters, so the piece keeps one.
            end -= text[..end].chars().next_back()?.len_utf8();
        }
        (end > 0).then_some(end)
    }
}

/// Token bytes → rank, an open-addressing table over the vocabulary.
struct RankIndex {
    /// Where each rank's bytes start in the vocabulary (its length is the byte before).
    starts: Vec<u32>,
    /// Rank + 1 at the slot of its bytes' hash (linear probing); 0: empty.
    slots: Vec<u32>,
    /// `64 - log2(slots.len())`: the hash's top bits pick the slot.
    shift: u32,
}

impl RankIndex {
    fn new(vocabulary: &'static [u8]) -> Self {
        let mut starts = Vec::with_capacity(200_000);
        let mut at = 0;
        while at < vocabulary.len() {
            let len = usize::from(vocabulary[at]);
            starts.push(at as u32 + 1);
            at += 1 + len;
        }
        // At most a quarter to half full: short probe runs.
        let bits = (starts.len() * 2).next_power_of_two().trailing_zeros();
        let mut index = Self {
            starts,
            slots: vec![0; 1 << bits],
            shift: 64 - bits,
        };
        for rank in 0..index.starts.len() {
            let mut slot = index.slot_of(index.token(rank as u32));
            while index.slots[slot] != 0 {
                slot = (slot + 1) & (index.slots.len() - 1);
            }
            index.slots[slot] = rank as u32 + 1;
        }
        index
    }

    fn token(&self, rank: u32) -> &'static [u8] {
        let start = self.starts[rank as usize] as usize;
        let len = usize::from(VOCABULARY[start - 1]);
        &VOCABULARY[start..start + len]
    }

    fn slot_of(&self, bytes: &[u8]) -> usize {
        // FxHash-style: fast on short keys; the table is fixed, so inputs
        // cannot lengthen its probe runs.
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut hash = bytes.len() as u64;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let word = u64::from_le_bytes(word.try_into().expect("8 bytes"));
            hash = (hash.rotate_left(5) ^ word).wrapping_mul(K);
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        hash = (hash.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
        (hash >> self.shift) as usize
    }

    /// The rank of `bytes`, or [`NOT_A_TOKEN`].
    fn rank(&self, bytes: &[u8]) -> u32 {
        if bytes.len() > MAX_TOKEN_BYTES {
            return NOT_A_TOKEN;
        }
        let mask = self.slots.len() - 1;
        let mut slot = self.slot_of(bytes);
        loop {
            match self.slots[slot] {
                0 => return NOT_A_TOKEN,
                stored if self.token(stored - 1) == bytes => return stored - 1,
                _ => slot = (slot + 1) & mask,
            }
        }
    }
}

/// Marks a part merged into the one before it.
const MERGED: u32 = u32::MAX;

/// Scratch space for merging one piece at a time (kept across pieces).
#[derive(Default)]
struct Merges {
    /// For each byte where a part starts: where the next part starts; [`MERGED`] if no part starts there.
    next: Vec<u32>,
    /// For each part: where the part before it starts.
    prev: Vec<u32>,
    /// For each part: the rank of it and the next part merged, or [`NOT_A_TOKEN`].
    pair_rank: Vec<u32>,
    /// Candidate merges, lowest rank then leftmost first; stale ones are skipped.
    heap: BinaryHeap<Reverse<(u32, u32)>>,
    /// The counts of short pieces met lately (a long text only).
    recent: Option<Recent>,
}

/// The shortest text whose pieces are memoized.
const RECENT_FROM: usize = 4096;

/// The counts of the short pieces met lately in one text, by their bytes.
///
/// JSON and prose repeat their pieces (keys and punctuation, common
/// words), and looking one up in the vocabulary's 2 MB table costs a few
/// cache misses (its slot, its start, its bytes): on JSON that was three
/// fifths of the time. This table is 48 KB, each piece of up to 15 bytes
/// in one slot (a later piece with the same slot takes it).
struct Recent {
    slots: Vec<Slot>,
}

/// A piece kept in [`Recent`] (its key's words and length; all zero for
/// none), and its count.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    words: [u64; 2],
    len: u32,
    count: u32,
}

/// A piece of 1 to 15 bytes, whole: its length, and its bytes read as two
/// words (the first and last bytes, overlapping where it is short, so
/// that with the length they give every byte).
#[derive(Debug, Clone, Copy)]
struct Key {
    words: [u64; 2],
    len: u32,
}

impl Key {
    fn of(piece: &[u8]) -> Option<Self> {
        let n = piece.len();
        let word = |i: usize| u64::from_le_bytes(piece[i..i + 8].try_into().expect("8 bytes"));
        let half = |i: usize| {
            u64::from(u32::from_le_bytes(
                piece[i..i + 4].try_into().expect("4 bytes"),
            ))
        };
        let words = match n {
            1..=3 => [
                u64::from(piece[0]) | u64::from(piece[n / 2]) << 8 | u64::from(piece[n - 1]) << 16,
                0,
            ],
            4..=7 => [half(0) | half(n - 4) << 32, 0],
            8..=15 => [word(0), word(n - 8)],
            _ => return None,
        };
        Some(Self {
            words,
            len: n as u32,
        })
    }
}

impl Recent {
    const SLOTS_LOG2: u32 = 11;

    fn new() -> Self {
        Self {
            slots: vec![Slot::default(); 1 << Self::SLOTS_LOG2],
        }
    }

    /// `piece`'s key and slot; `None` for a piece too long to be kept.
    fn slot_of(&self, piece: &[u8]) -> Option<(Key, usize)> {
        let key = Key::of(piece)?;
        let hash = (key.words[0] ^ key.words[1].rotate_left(29) ^ u64::from(key.len))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Some((key, (hash >> (64 - Self::SLOTS_LOG2)) as usize))
    }

    fn get(&self, key: Key, slot: usize) -> Option<usize> {
        let kept = self.slots[slot];
        (kept.words == key.words && kept.len == key.len).then_some(kept.count as usize)
    }

    fn put(&mut self, key: Key, slot: usize, count: usize) {
        self.slots[slot] = Slot {
            words: key.words,
            len: key.len,
            // At most the piece's 15 bytes.
            count: count as u32,
        };
    }
}

impl Merges {
    /// Scratch space for counting `text`, with a memo of pieces if it is
    /// long enough to repeat some.
    fn for_text(text: &str) -> Self {
        Self {
            recent: (text.len() >= RECENT_FROM).then(Recent::new),
            ..Self::default()
        }
    }

    /// The tokens byte-pair encoding gives `piece`.
    fn count(&mut self, ranks: &RankIndex, piece: &[u8]) -> usize {
        let Some(recent) = self.recent.as_mut() else {
            return self.merge(ranks, piece);
        };
        let Some((key, slot)) = recent.slot_of(piece) else {
            return self.merge(ranks, piece);
        };
        if let Some(count) = recent.get(key, slot) {
            return count;
        }
        let count = self.merge(ranks, piece);
        if let Some(recent) = self.recent.as_mut() {
            recent.put(key, slot, count);
        }
        count
    }

    /// The tokens byte-pair encoding gives `piece`, merged.
    fn merge(&mut self, ranks: &RankIndex, piece: &[u8]) -> usize {
        let n = piece.len();
        if n <= 1 || ranks.rank(piece) != NOT_A_TOKEN {
            return n.min(1);
        }
        if n <= SHORT_PIECE {
            return merge_short(ranks, piece);
        }
        self.merge_long(ranks, piece)
    }

    /// [`Merges::merge`] of a piece longer than [`SHORT_PIECE`] (not one
    /// token whole): candidate merges kept in a heap.
    fn merge_long(&mut self, ranks: &RankIndex, piece: &[u8]) -> usize {
        let n = piece.len();
        // Every byte starts as a part of its own (every byte is a token).
        self.next.clear();
        self.next.extend(1..=n as u32);
        self.prev.clear();
        self.prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        self.pair_rank.clear();
        self.heap.clear();
        for i in 0..n {
            let rank = if i + 2 <= n {
                ranks.rank(&piece[i..i + 2])
            } else {
                NOT_A_TOKEN
            };
            self.pair_rank.push(rank);
            if rank != NOT_A_TOKEN {
                self.heap.push(Reverse((rank, i as u32)));
            }
        }
        let mut parts = n;
        while let Some(Reverse((rank, at))) = self.heap.pop() {
            let i = at as usize;
            // A rank names one span from `i`, so an entry whose rank is no
            // longer the pair's is stale.
            if self.next[i] == MERGED || self.pair_rank[i] != rank {
                continue;
            }
            let second = self.next[i] as usize;
            let end = self.next[second] as usize;
            self.next[second] = MERGED;
            self.next[i] = end as u32;
            if end < n {
                self.prev[end] = i as u32;
            }
            parts -= 1;
            self.pair_rank[i] = if end < n {
                ranks.rank(&piece[i..self.next[end] as usize])
            } else {
                NOT_A_TOKEN
            };
            if self.pair_rank[i] != NOT_A_TOKEN {
                self.heap.push(Reverse((self.pair_rank[i], i as u32)));
            }
            if i > 0 {
                let before = self.prev[i] as usize;
                self.pair_rank[before] = ranks.rank(&piece[before..end]);
                if self.pair_rank[before] != NOT_A_TOKEN {
                    self.heap
                        .push(Reverse((self.pair_rank[before], before as u32)));
                }
            }
        }
        parts
    }
}

/// The longest piece merged by [`merge_short`]: most pieces (a word, a
/// number, JSON's punctuation) are this short.
const SHORT_PIECE: usize = 24;

/// [`Merges::merge`] of a piece of at most [`SHORT_PIECE`] bytes: the
/// lowest-ranked pair of parts (the leftmost of equals) found by looking
/// at each, not kept in a heap. On a piece this short the look costs less
/// than the heap's pushes and pops did (a fifth of the instructions o200k
/// spent on a stored result's samples).
fn merge_short(ranks: &RankIndex, piece: &[u8]) -> usize {
    let n = piece.len();
    // Where each part starts, then the piece's end; and the rank of each
    // part merged with the next (`pairs[k]`: parts `k` and `k + 1`).
    let mut starts = [0u8; SHORT_PIECE + 1];
    let mut pairs = [NOT_A_TOKEN; SHORT_PIECE];
    for (k, start) in starts.iter_mut().enumerate().take(n + 1) {
        *start = k as u8;
    }
    for (k, pair) in pairs.iter_mut().enumerate().take(n - 1) {
        *pair = ranks.rank(&piece[k..k + 2]);
    }
    let mut parts = n;
    loop {
        let mut best = 0;
        for k in 1..parts - 1 {
            if pairs[k] < pairs[best] {
                best = k;
            }
        }
        if pairs[best] == NOT_A_TOKEN {
            return parts;
        }
        // Parts `best` and `best + 1` become one: the later starts and
        // pairs move down one.
        starts.copy_within(best + 2..=parts, best + 1);
        if best + 3 <= parts {
            pairs.copy_within(best + 2..parts - 1, best + 1);
        }
        parts -= 1;
        let span = |k: usize| &piece[usize::from(starts[k])..usize::from(starts[k + 2])];
        pairs[best] = if best + 1 < parts {
            ranks.rank(span(best))
        } else {
            NOT_A_TOKEN
        };
        if best > 0 {
            pairs[best - 1] = ranks.rank(span(best - 1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(text: &str) -> usize {
        bpe_openai::o200k_base().count(text)
    }

    #[test]
    fn the_vocabulary_is_o200k_base_rank_by_rank() {
        let ours = &tokenizer().ranks;
        let theirs = &bpe_openai::o200k_base().bpe;
        assert_eq!(ours.starts.len(), theirs.num_tokens());
        for rank in 0..ours.starts.len() as u32 {
            assert_eq!(ours.token(rank), theirs.token_bytes(rank), "rank {rank}");
            assert_eq!(ours.rank(theirs.token_bytes(rank)), rank);
        }
        assert_eq!(ours.rank(b"no such token in o200k at all"), NOT_A_TOKEN);
    }

    #[test]
    fn counts_are_o200k_counts_on_prose_code_json_and_other_scripts() {
        let samples = [
            "",
            "hello",
            "hello world, this is a test",
            "héllo\nwörld   \n\n  indented\ttabs\r\n",
            "fn main() { println!(\"{}\", 1 + 2); } // comment",
            r#"{"id":1234567,"name":"Ünïcödé","tags":["a","b"],"n":-0.5e10,"ok":true}"#,
            "日本語のテキストと中文文本，还有한국어 텍스트.",
            "Здравствуй, мир! Γειά σου Κόσμε! مرحبا بالعالم",
            "emoji 👩‍👩‍👧‍👦 and 🇫🇷 flags, ZWJ\u{200d}joined",
            "I'm sure they've said we'd GO'S DON'T they'll",
            "123456789 3.14159 1,000,000 0x1F",
            "    \n\n\n     trailing spaces     ",
            "/usr/local/bin/../lib//x.so C:\\Windows\\System32",
            // Found by the property tests below against merges in the wrong
            // order or a neighbour's pair not updated.
            ">Dh",
            r"!\\\ͺ",
            ":::'}",
        ];
        for text in samples {
            assert_eq!(tokenizer().count(text), reference(text), "{text:?}");
        }
    }

    #[test]
    fn runs_of_one_pattern_count_the_same() {
        // Many equal pairs side by side, merged in rank then position order.
        for n in 1..=300 {
            for unit in ["a", "=", " ", "ab", "0", "é", "-_", "\n"] {
                let text = unit.repeat(n);
                assert_eq!(tokenizer().count(&text), reference(&text), "{unit:?} × {n}");
            }
        }
    }

    #[test]
    fn a_long_piece_counts_the_same() {
        // One piece of 200,000 letters: merged in O(n log n).
        let text = "abcdefghij".repeat(20_000);
        assert_eq!(tokenizer().count(&text), reference(&text));
        let digits_and_spaces = "1234567 ".repeat(10_000);
        assert_eq!(
            tokenizer().count(&digits_and_spaces),
            reference(&digits_and_spaces)
        );
    }

    #[test]
    fn counting_within_a_limit_stops_past_it() {
        let text = "word ".repeat(1000);
        let all = tokenizer().count(&text);
        assert_eq!(tokenizer().count_within(&text, all), Some(all));
        assert_eq!(tokenizer().count_within(&text, all - 1), None);
    }

    #[test]
    fn a_long_texts_pieces_are_memoized_and_counted_the_same() {
        // Long enough for the memo, with pieces that repeat (JSON's keys
        // and punctuation) and many that share a slot (numbers).
        let json: String = (0..3000)
            .map(|i| {
                format!(
                    r#"{{"id":{i},"name":"Item {i}","tags":["t{}","ünï"]}},"#,
                    i % 7
                )
            })
            .collect();
        let prose = "The quick brown fox's den, they'll say, isn't THERE. ".repeat(200);
        for text in [json.as_str(), prose.as_str()] {
            assert!(text.len() >= RECENT_FROM);
            let mut unmemoized = Merges::default();
            let by_merging: usize = tokenizer()
                .pieces(text)
                .map(|piece| unmemoized.count(&tokenizer().ranks, piece.as_bytes()))
                .sum();
            assert_eq!(tokenizer().count(text), by_merging);
            assert_eq!(tokenizer().count(text), reference(text));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// A short piece is merged as the heap merges it (words, numbers,
        /// JSON's punctuation and escapes, other scripts, any bytes).
        #[test]
        fn a_short_piece_merges_as_a_long_one_does(
            piece in prop_oneof![
                proptest::collection::vec(
                    prop_oneof![
                        Just(b'e'), Just(b't'), Just(b'h'), Just(b'i'), Just(b'n'),
                        Just(b' '), Just(b'"'), Just(b'\\'), Just(b'1'), Just(b':'),
                    ],
                    2..=SHORT_PIECE,
                ),
                "\\PC{1,8}".prop_map(String::into_bytes),
                proptest::collection::vec(any::<u8>(), 2..=SHORT_PIECE),
            ],
        ) {
            let ranks = &tokenizer().ranks;
            prop_assume!(piece.len() >= 2 && piece.len() <= SHORT_PIECE);
            prop_assume!(ranks.rank(&piece) == NOT_A_TOKEN);
            let short = merge_short(ranks, &piece);
            prop_assert_eq!(short, Merges::default().merge_long(ranks, &piece), "{:?}", piece);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn a_piece_is_found_in_the_memo_by_itself_alone(
            a in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8)], 1..16),
            at in 0usize..16,
            by in prop_oneof![Just(b'a'), Just(b'b'), Just(0u8)],
            change in 0..3,
        ) {
            // `b` is `a` with one byte replaced, added or dropped: the
            // pieces most alike.
            let mut b = a.clone();
            match change {
                0 => b[at % a.len()] = by,
                1 => b.insert(at % (a.len() + 1), by),
                _ => drop(b.remove(at % a.len())),
            }
            prop_assume!(!b.is_empty() && b.len() < 16);
            let mut recent = Recent::new();
            let (key, slot) = recent.slot_of(&a).unwrap();
            recent.put(key, slot, 7);
            let (key_b, _) = recent.slot_of(&b).unwrap();
            prop_assert_eq!(recent.get(key_b, slot), (a == b).then_some(7));
            prop_assert_eq!(recent.get(key, slot), Some(7));
        }
    }

    proptest! {
        // Long texts, each counted twice: fewer cases.
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn long_texts_count_as_o200k_counts_them(
            parts in proptest::collection::vec(
                "([a-zA-Z]{1,12}|[0-9]{1,5}|[ \\t\\n]{1,4}|[.,;:'\"(){}\\[\\]/-]{1,3}|[éüßç]|\\PC)",
                1..40,
            ),
            repeats in 1usize..400,
        ) {
            // The parts again and again, rotated: pieces repeat, and meet
            // new neighbours.
            let mut text = String::new();
            for r in 0..repeats {
                for i in 0..parts.len() {
                    text.push_str(&parts[(i + r) % parts.len()]);
                }
            }
            prop_assert_eq!(tokenizer().count(&text), reference(&text));
        }

        #[test]
        fn counts_are_o200k_counts_on_any_text(text in "\\PC{0,200}") {
            prop_assert_eq!(tokenizer().count(&text), reference(&text));
        }

        #[test]
        fn counts_are_o200k_counts_on_word_like_text(
            text in "([a-zA-Z]{1,12}|[0-9]{1,5}|[ \\t\\n]{1,4}|[.,;:'\"(){}\\[\\]/-]{1,3}|[éüßçñ]|[à-ÿ]{1,3}){0,60}"
        ) {
            prop_assert_eq!(tokenizer().count(&text), reference(&text));
        }
    }
}
