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
        let mut merges = Merges::default();
        self.pieces(text)
            .map(|piece| merges.count(&self.ranks, piece.as_bytes()))
            .sum()
    }

    /// The tokens of `text` if they are at most `limit`; `None` as soon as
    /// the pieces counted so far exceed it.
    pub fn count_within(&self, text: &str, limit: usize) -> Option<usize> {
        let mut merges = Merges::default();
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
    fn pieces<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        let mut at = 0;
        std::iter::from_fn(move || {
            let found = self
                .pieces
                .find(Input::new(&text[at..]).anchored(Anchored::Yes))?;
            let start = at;
            let mut end = at + found.range().end;
            if self.lookahead[found.pattern().as_usize()] {
                // Drop the look-ahead character; the pattern matches at least
                // two characters, so the piece keeps one.
                let last = text[start..end].chars().next_back()?;
                end -= last.len_utf8();
            }
            at = end;
            (end > start).then(|| &text[start..end])
        })
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
}

impl Merges {
    /// The tokens byte-pair encoding gives `piece`.
    fn count(&mut self, ranks: &RankIndex, piece: &[u8]) -> usize {
        let n = piece.len();
        if n <= 1 || ranks.rank(piece) != NOT_A_TOKEN {
            return n.min(1);
        }
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

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
