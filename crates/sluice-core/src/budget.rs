//! Budgets: how much of a result a client can take, and how it is measured.
//!
//! A budget is tokens **and** characters (and, for some clients, lines).
//! Tokens are counted with OpenAI's o200k BPE ([`o200k`]: its vocabulary is
//! inside the binary, nothing downloaded, and loaded on first use) times a
//! safety factor, because Claude's tokenizer, which no one can run offline,
//! counts 20–35 % more. `chars / 4` is not used anywhere: on JSON it is off
//! by −40 % to +59 %. Results small enough that their bytes prove they fit
//! are never tokenized, so a gateway that only sees those never loads it.

mod ascii_pieces;
pub mod o200k;

use std::collections::BTreeMap;

/// How much one answer may hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Tokens, as counted by [`count_tokens`] (o200k × `token_factor`).
    pub max_tokens: u32,
    /// Characters (Unicode scalar values).
    pub max_chars: u32,
    /// Lines, for clients that cut by lines (Codex); `None`: no limit.
    pub max_lines: Option<u32>,
    /// The multiplier from o200k tokens to the client's tokens.
    pub token_factor: f32,
}

impl Default for Budget {
    /// 18,000 tokens and 45,000 characters: under Claude Code's 25,000-token
    /// limit and its 50,000-character spill, with room for the wrapper.
    fn default() -> Self {
        Self {
            max_tokens: 18_000,
            max_chars: 45_000,
            max_lines: None,
            token_factor: 1.25,
        }
    }
}

/// A partial budget: the fields a preset or a tool setting overrides.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetOverride {
    /// See [`Budget::max_tokens`].
    pub max_tokens: Option<u32>,
    /// See [`Budget::max_chars`].
    pub max_chars: Option<u32>,
    /// See [`Budget::max_lines`].
    pub max_lines: Option<u32>,
    /// See [`Budget::token_factor`].
    pub token_factor: Option<f32>,
}

impl Budget {
    /// This budget with `o`'s fields replacing its own.
    pub fn with(self, o: &BudgetOverride) -> Self {
        Self {
            max_tokens: o.max_tokens.unwrap_or(self.max_tokens),
            max_chars: o.max_chars.unwrap_or(self.max_chars),
            max_lines: o.max_lines.or(self.max_lines),
            token_factor: o.token_factor.unwrap_or(self.token_factor),
        }
    }

    /// This budget, never larger than `o`'s limits (a tool may ask for less
    /// than its client takes, never for more).
    pub fn narrowed(self, o: &BudgetOverride) -> Self {
        Self {
            max_tokens: o
                .max_tokens
                .map_or(self.max_tokens, |t| t.min(self.max_tokens)),
            max_chars: o
                .max_chars
                .map_or(self.max_chars, |c| c.min(self.max_chars)),
            max_lines: match (self.max_lines, o.max_lines) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            token_factor: self.token_factor,
        }
    }

    /// Whether `size` fits.
    pub fn admits(&self, size: &Size) -> bool {
        size.chars <= u64::from(self.max_chars)
            && size.tokens.map_or_else(
                || size.fits_by_bytes(self),
                |t| t <= u64::from(self.max_tokens),
            )
            && self.max_lines.is_none_or(|l| size.lines <= u64::from(l))
    }

    /// Whether `text` alone fits: characters, lines and tokens (counted
    /// only when its bytes do not prove they fit, and then only until over).
    pub fn fits_text(&self, text: &str) -> bool {
        count_chars(text) as u64 <= u64::from(self.max_chars)
            && self
                .max_lines
                .is_none_or(|l| text.lines().count() as u64 <= u64::from(l))
            && (self.bytes_prove_fit(text.len() as u64)
                || tokens_within(text, self.token_factor, self.max_tokens).is_some())
    }

    /// Whether `bytes` of text fit the tokens whatever they hold: an o200k
    /// token is at least one byte. Counting is the slow part of measuring:
    /// a stored result's 1.4 KB summary was counted for 66 µs of the 2.7 ms
    /// from the upstream's last byte to its answer before this spared it.
    pub fn bytes_prove_fit(&self, bytes: u64) -> bool {
        bytes as f64 * f64::from(self.token_factor) <= f64::from(self.max_tokens)
    }

    /// The budget left after `reserve` tokens and characters.
    pub fn less(&self, tokens: u32, chars: u32) -> Self {
        Self {
            max_tokens: self.max_tokens.saturating_sub(tokens).max(1),
            max_chars: self.max_chars.saturating_sub(chars).max(1),
            ..*self
        }
    }
}

/// The built-in per-client presets, by `clientInfo.name` (compared
/// case-insensitively). Unknown clients get the `[budget]` defaults.
pub fn builtin_presets() -> BTreeMap<String, BudgetOverride> {
    let claude_code = BudgetOverride {
        // Claude Code refuses results over 25,000 tokens and spills those
        // over 50,000 characters to a file the model sees 2 KB of.
        max_tokens: Some(18_000),
        max_chars: Some(45_000),
        ..Default::default()
    };
    let codex = BudgetOverride {
        // Codex keeps 10 KiB and 256 lines of a tool result.
        max_tokens: Some(4_000),
        max_chars: Some(9 * 1024),
        max_lines: Some(250),
        ..Default::default()
    };
    BTreeMap::from([
        ("claude-code".to_owned(), claude_code),
        ("codex-mcp-client".to_owned(), codex),
        ("codex".to_owned(), codex),
    ])
}

/// The size of something sent to a client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    /// UTF-8 bytes.
    pub bytes: u64,
    /// Characters (Unicode scalar values).
    pub chars: u64,
    /// Lines (newlines + 1 per text).
    pub lines: u64,
    /// Tokens (o200k × factor), counted only when they decide: `None`
    /// when the characters alone exceed the budget, or when the bytes alone
    /// prove the tokens fit (an o200k token is at least one byte).
    pub tokens: Option<u64>,
}

impl Size {
    /// The size of `parts` sent together, measured against `budget`.
    pub fn of(parts: &[&str], budget: &Budget) -> Self {
        let mut size = Self::default();
        for text in parts {
            size.bytes += text.len() as u64;
            size.chars += count_chars(text) as u64;
            size.lines += memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64 + 1;
        }
        if size.chars <= u64::from(budget.max_chars) && !size.fits_by_bytes(budget) {
            let raw: usize = parts.iter().map(|t| o200k::tokenizer().count(t)).sum();
            size.tokens = Some(u64::from(scale(raw, budget.token_factor)));
        }
        size
    }

    /// Whether the bytes alone prove the tokens fit.
    fn fits_by_bytes(&self, budget: &Budget) -> bool {
        budget.bytes_prove_fit(self.bytes)
    }
}

/// The number of characters (Unicode scalar values) in `text`.
pub fn count_chars(text: &str) -> usize {
    // Every byte that is not a UTF-8 continuation byte starts a character.
    count_bytes(text.as_bytes(), |b| (b as i8) >= -0x40)
}

/// How many of `bytes` are ones that `matches`.
///
/// Counted 64 bytes at a time into a one-byte tally, a loop the compiler
/// turns into vector instructions: `iter().filter(…).count()`, which it
/// does not, took 420 µs per MB where this takes 22 µs (a micro-benchmark
/// of [`count_chars`] on this VM). A stored result's characters are
/// counted twice while its client waits, and every message's brackets once.
pub fn count_bytes(bytes: &[u8], matches: impl Fn(u8) -> bool) -> usize {
    let mut chunks = bytes.chunks_exact(64);
    let mut count = 0;
    for chunk in chunks.by_ref() {
        // At most 64: fits a byte.
        let mut tally = 0u8;
        for &b in chunk {
            tally += u8::from(matches(b));
        }
        count += usize::from(tally);
    }
    count + chunks.remainder().iter().filter(|&&b| matches(b)).count()
}

/// The tokens of `text` for a client: o200k tokens × `factor`, rounded up.
pub fn count_tokens(text: &str, factor: f32) -> u32 {
    scale(o200k::tokenizer().count(text), factor)
}

/// Whether `text` is at most `limit` client tokens, stopping early when it
/// is not (cheaper than counting a large text whole).
pub fn tokens_within(text: &str, factor: f32, limit: u32) -> Option<u32> {
    let raw_limit = (f64::from(limit) / f64::from(factor.max(0.01))).floor() as usize;
    o200k::tokenizer()
        .count_within(text, raw_limit + 1)
        .map(|raw| scale(raw, factor))
        .filter(|&t| t <= limit)
}

/// How many bytes of a text [`bytes_per_token`] samples, at most three
/// times, to estimate its tokens without counting them all.
pub const TOKEN_SAMPLE_BYTES: usize = 8 * 1024;

/// o200k tokens per byte of `text`, measured on up to three samples of
/// `sample` bytes (start, middle, end), for planning pages without counting
/// the whole document.
pub fn bytes_per_token(text: &str, sample: usize) -> f32 {
    bytes_per_token_of(&token_samples(text, sample))
}

/// The samples [`bytes_per_token`] measures in `text`: the whole text when
/// it is at most three samples long, else `sample` bytes at its start, its
/// middle and its end.
pub fn token_samples(text: &str, sample: usize) -> Vec<&str> {
    let len = text.len();
    if len <= sample * 3 {
        return vec![text];
    }
    [0, len / 2 - sample / 2, len - sample]
        .iter()
        .map(|&start| char_slice(text, start, start + sample))
        .collect()
}

/// o200k bytes per token of `samples` taken together.
pub fn bytes_per_token_of(samples: &[impl AsRef<str>]) -> f32 {
    let tokenizer = o200k::tokenizer();
    let (bytes, tokens) = samples.iter().fold((0, 0), |(bytes, tokens), sample| {
        let sample = sample.as_ref();
        (bytes + sample.len(), tokens + tokenizer.count(sample))
    });
    bytes.max(1) as f32 / tokens.max(1) as f32
}

/// `text[start..end]`, with both ends moved back to character boundaries.
pub fn char_slice(text: &str, start: usize, end: usize) -> &str {
    let start = floor_boundary(text, start);
    let end = floor_boundary(text, end).max(start);
    &text[start..end]
}

/// The largest character boundary of `text` at or before `at`.
pub fn floor_boundary(text: &str, at: usize) -> usize {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn scale(raw: usize, factor: f32) -> u32 {
    let scaled = (raw as f64 * f64::from(factor)).ceil();
    if scaled >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        scaled as u32
    }
}

/// Loads the tokenizer's tables now rather than on first use (benches).
pub fn warm_up() {
    let _ = o200k::tokenizer().count("warm up");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_are_counted_as_rust_counts_them_at_every_length() {
        // Lengths around the 64-byte chunks, and a tally of 64 in one.
        let text: String = (0..300)
            .map(|i| ["a", "é", "日", "😀", "\u{7f}"][i % 5])
            .collect();
        for end in (0..=text.len()).filter(|&end| text.is_char_boundary(end)) {
            let part = &text[..end];
            assert_eq!(count_chars(part), part.chars().count(), "{end} bytes");
        }
        let ascii = "x".repeat(64 * 3 + 5);
        assert_eq!(count_chars(&ascii), ascii.len());
        assert_eq!(count_bytes(b"{[a{]}[", |b| b | 0x20 == b'{'), 4);
    }

    #[test]
    fn tokens_are_counted_with_the_factor() {
        let raw = o200k::tokenizer().count("hello world, this is a test");
        assert!(raw > 3);
        assert_eq!(
            count_tokens("hello world, this is a test", 1.25) as usize,
            (raw as f64 * 1.25).ceil() as usize
        );
        assert_eq!(
            count_tokens("hello world, this is a test", 1.0) as usize,
            raw
        );
    }

    #[test]
    fn tokens_within_stops_at_the_limit() {
        let text = "word ".repeat(1000);
        let all = count_tokens(&text, 1.25);
        assert_eq!(tokens_within(&text, 1.25, all), Some(all));
        assert_eq!(tokens_within(&text, 1.25, all - 2), None);
    }

    #[test]
    fn sizes_count_tokens_only_when_they_decide() {
        let budget = Budget {
            max_tokens: 8,
            max_chars: 20,
            ..Budget::default()
        };
        // 6 bytes × 1.25 ≤ 8 tokens: fits without tokenizing.
        let size = Size::of(&["héllo"], &budget);
        assert_eq!(
            (size.bytes, size.chars, size.lines, size.tokens),
            (6, 5, 1, None)
        );
        assert!(budget.admits(&size));
        // 17 bytes could be over 8 tokens: counted.
        let size = Size::of(&["héllo", "hello\nworld"], &budget);
        assert_eq!(size.lines, 3);
        let raw = o200k::tokenizer().count("héllo") + o200k::tokenizer().count("hello\nworld");
        assert_eq!(size.tokens, Some((raw as f64 * 1.25).ceil() as u64));
        assert_eq!(budget.admits(&size), size.tokens.unwrap() <= 8);
        // Over the characters: not counted, not admitted.
        let size = Size::of(&["x".repeat(30).as_str()], &budget);
        assert_eq!(size.tokens, None);
        assert!(!budget.admits(&size));
    }

    #[test]
    fn a_text_fits_by_its_bytes_or_else_by_its_counted_tokens() {
        // What the shortcut rests on: no text has more o200k tokens than
        // bytes (whitespace runs, digits, CJK, emoji, control characters,
        // pretty JSON, characters from a generator).
        let mut state = 0x2545_f491_u32;
        let generated: String = (0..4000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                char::from_u32(state % 0x3_0000).unwrap_or('\u{fffd}')
            })
            .collect();
        let texts = [
            "word ".repeat(400),
            " ".repeat(2000),
            "\n\t \r".repeat(300),
            "0123456789".repeat(100),
            "日本語のテキスト".repeat(100),
            "😀🙃👍🏽".repeat(100),
            "\u{1}\u{7f}\u{80}".repeat(200),
            serde_json::to_string_pretty(
                &(0..40)
                    .map(|i| serde_json::json!({"id": i, "name": "a"}))
                    .collect::<Vec<_>>(),
            )
            .unwrap(),
            generated,
        ];
        for text in &texts {
            assert!(o200k::tokenizer().count(text) <= text.len(), "{text:.40}");
        }
        // fits_text is the whole rule, whichever way it decides: around the
        // limit, where the bytes decide and where they cannot.
        for text in &texts {
            let raw = o200k::tokenizer().count(text) as u32;
            for max_tokens in [
                raw.saturating_sub(1).max(1),
                raw,
                raw + 1,
                text.len() as u32,
            ] {
                let budget = Budget {
                    max_tokens,
                    max_chars: u32::MAX,
                    max_lines: None,
                    token_factor: 1.0,
                };
                assert_eq!(
                    budget.fits_text(text),
                    raw <= max_tokens,
                    "{max_tokens} tokens, {raw} counted, {} bytes",
                    text.len()
                );
            }
        }
        // Bytes that prove it: 100 bytes × 1.25 within 125 tokens, not 124.
        let budget = Budget {
            max_tokens: 125,
            ..Budget::default()
        };
        assert!(budget.bytes_prove_fit(100));
        assert!(!budget.less(1, 0).bytes_prove_fit(100));
    }

    #[test]
    fn narrowing_never_widens() {
        let b = Budget::default().narrowed(&BudgetOverride {
            max_tokens: Some(100_000),
            max_chars: Some(1000),
            max_lines: Some(10),
            token_factor: None,
        });
        assert_eq!(
            (b.max_tokens, b.max_chars, b.max_lines),
            (18_000, 1000, Some(10))
        );
    }

    #[test]
    fn char_slices_stay_on_boundaries() {
        assert_eq!(char_slice("héllo", 0, 2), "h");
        assert_eq!(char_slice("héllo", 2, 4), "él");
    }
}
