//! o200k's pre-tokenizer on ASCII text, written out by hand.
//!
//! o200k splits text into pieces with a pattern of seven alternatives
//! (see [`super::o200k`]), tried in order at each position, the first that
//! matches winning. The regex engine runs it at ~250 instructions a byte
//! on JSON; on ASCII the alternatives reduce to a few runs of byte
//! classes, which this module follows at a few instructions a byte.
//!
//! [`piece_len`] gives the length of the piece at the start of a text only
//! when every byte it had to look at is ASCII. A byte of 0x80 or more may
//! be a letter, a digit, a mark or white space of Unicode's, which the
//! pattern's classes hold, so the function gives up (`None`) and the
//! caller asks the regex for that one piece. What it returns is therefore
//! what the regex returns: `tests::pieces_are_the_regexs_*` hold that.
//!
//! The alternatives, as they read on ASCII (`P` is any ASCII byte that is
//! not a letter, a digit or white space):
//!
//! 1. an optional prefix that is neither a letter, a digit, `\r` nor `\n`;
//!    upper-case letters; at least one lower-case letter; a contraction
//!    (`'s 't 're 've 'm 'll 'd`, any case);
//! 2. the same prefix; at least one upper-case letter; lower-case ones; a
//!    contraction;
//! 3. one to three digits;
//! 4. an optional space; a run of `P`; a run of `\r`, `\n` and `/`;
//! 5. white space up to and including its last `\r` or `\n`;
//! 6. white space to the end of the text;
//! 7. white space less its last character, or one white space character.

/// What one byte is to the pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// `A`–`Z`.
    Upper,
    /// `a`–`z`.
    Lower,
    /// `0`–`9`.
    Digit,
    /// `\r` or `\n`.
    Newline,
    /// Tab, vertical tab, form feed or space: white space, not a newline.
    Blank,
    /// Any other ASCII byte: punctuation, symbols, control characters.
    Other,
    /// The end of the text.
    End,
}

/// A byte of 0x80 or more was needed: the regex decides.
struct NotAscii;

/// The bytes of the text, each looked at only through [`Text::class`].
struct Text<'a>(&'a [u8]);

impl Text<'_> {
    fn class(&self, at: usize) -> Result<Class, NotAscii> {
        let Some(&b) = self.0.get(at) else {
            return Ok(Class::End);
        };
        Ok(match b {
            b'A'..=b'Z' => Class::Upper,
            b'a'..=b'z' => Class::Lower,
            b'0'..=b'9' => Class::Digit,
            b'\r' | b'\n' => Class::Newline,
            b'\t' | 0x0b | 0x0c | b' ' => Class::Blank,
            0x80.. => return Err(NotAscii),
            _ => Class::Other,
        })
    }

    /// Where the run of bytes of `class` starting at `at` ends.
    fn run(&self, mut at: usize, class: Class) -> Result<usize, NotAscii> {
        while self.class(at)? == class {
            at += 1;
        }
        Ok(at)
    }

    /// Where the run of white space starting at `at` ends, and where its
    /// last newline ends (if it has one).
    fn white_space(&self, mut at: usize) -> Result<(usize, Option<usize>), NotAscii> {
        let mut newline = None;
        loop {
            match self.class(at)? {
                Class::Newline => newline = Some(at + 1),
                Class::Blank => {}
                _ => return Ok((at, newline)),
            }
            at += 1;
        }
    }

    /// Where a contraction (`'s 't 're 've 'm 'll 'd`, in any case)
    /// starting at `at` ends; `at` if there is none.
    fn contraction(&self, at: usize) -> Result<usize, NotAscii> {
        if self.0.get(at) != Some(&b'\'') {
            return Ok(at);
        }
        // Only ASCII letters are looked for, but `(?i:s)` also matches
        // U+017F, so a non-ASCII byte here is the regex's to read.
        self.class(at + 1)?;
        let lower = |i: usize| self.0.get(i).map(u8::to_ascii_lowercase);
        Ok(match lower(at + 1) {
            Some(b's' | b't' | b'm' | b'd') => at + 2,
            Some(first @ (b'r' | b'v' | b'l')) => {
                self.class(at + 2)?;
                let second = if first == b'l' { b'l' } else { b'e' };
                if lower(at + 2) == Some(second) {
                    at + 3
                } else {
                    at
                }
            }
            _ => at,
        })
    }
}

/// The length of o200k's first piece of `text` (which is not empty), or
/// `None` if deciding it needs a byte that is not ASCII.
pub(super) fn piece_len(text: &[u8]) -> Option<usize> {
    piece(&Text(text)).ok()
}

fn piece(text: &Text<'_>) -> Result<usize, NotAscii> {
    let first = text.class(0)?;
    // Alternatives 1 and 2 take one prefix byte that is neither a letter,
    // a digit nor a newline; without it they start at a letter.
    let letters_from = match first {
        Class::Upper | Class::Lower => Some(0),
        Class::Blank | Class::Other => Some(1),
        Class::Digit | Class::Newline | Class::End => None,
    };
    if let Some(from) = letters_from {
        let uppers_end = text.run(from, Class::Upper)?;
        if text.class(uppers_end)? == Class::Lower {
            let lowers_end = text.run(uppers_end, Class::Lower)?;
            return text.contraction(lowers_end);
        }
        if uppers_end > from {
            // Alternative 2: no lower-case letter follows (alternative 1
            // would have taken it).
            return text.contraction(uppers_end);
        }
    }
    match first {
        Class::Digit => {
            let mut end = 1;
            while end < 3 && text.class(end)? == Class::Digit {
                end += 1;
            }
            return Ok(end);
        }
        Class::Other => return symbols(text, 0),
        Class::Blank if text.0[0] == b' ' && text.class(1)? == Class::Other => {
            return symbols(text, 1);
        }
        _ => {}
    }
    // White space (alternatives 5 to 7).
    let (end, last_newline) = text.white_space(0)?;
    Ok(match last_newline {
        Some(newline_end) => newline_end,
        None if text.class(end)? == Class::End => end,
        None if end >= 2 => end - 1,
        None => 1,
    })
}

/// Alternative 4 from its run of symbols at `at`: the run, then any
/// `\r`, `\n` and `/` after it.
fn symbols(text: &Text<'_>, at: usize) -> Result<usize, NotAscii> {
    let mut end = text.run(at, Class::Other)?;
    while matches!(text.0.get(end), Some(b'\r' | b'\n' | b'/')) {
        end += 1;
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::super::o200k::tokenizer;
    use super::piece_len;
    use proptest::prelude::*;

    /// The pieces of `text` by the hand-written path wherever it decides,
    /// and by the regex otherwise, with which path decided each.
    fn both(text: &str) -> (Vec<&str>, Vec<&str>) {
        let by_regex = tokenizer().regex_pieces(text).collect();
        let mixed = tokenizer().pieces(text).collect();
        (mixed, by_regex)
    }

    /// Characters that stand for every class the pattern tells apart:
    /// ASCII letters of both cases, digits, every ASCII white space and
    /// control and punctuation byte the alternatives treat differently
    /// (the apostrophe and contraction letters, `/`, space), and non-ASCII
    /// ones the classes hold (a lower- and upper-case letter, a title-case
    /// and a modifier letter, a mark, a digit, white space, a symbol,
    /// U+017F which `(?i:s)` matches).
    const ALPHABET: [char; 30] = [
        'a', 's', 'l', 'e', 'R', 'T', 'V', 'D', '7', '0', ' ', '\t', '\n', '\r', '\x0b', '\x1c',
        '\0', '\'', '/', '{', '"', '.', 'é', 'É', 'ǅ', 'ˆ', '\u{301}', '٣', '\u{a0}', 'ſ',
    ];

    #[test]
    fn pieces_are_the_regexs_on_every_short_text_of_the_alphabet() {
        // Every text of up to four characters: 837,930 texts.
        let mut text = String::new();
        let mut indices = Vec::new();
        loop {
            text.clear();
            text.extend(indices.iter().map(|&i: &usize| ALPHABET[i]));
            let (mixed, by_regex) = both(&text);
            assert_eq!(mixed, by_regex, "{text:?}");
            // The next combination, shortest first.
            let mut at = indices.len();
            loop {
                if at == 0 {
                    if indices.len() == 4 {
                        return;
                    }
                    indices = vec![0; indices.len() + 1];
                    break;
                }
                at -= 1;
                indices[at] += 1;
                if indices[at] < ALPHABET.len() {
                    break;
                }
                indices[at] = 0;
            }
        }
    }

    #[test]
    fn the_hand_written_path_decides_ascii_and_leaves_the_rest() {
        assert_eq!(piece_len(br#"{"name":"x"}"#), Some(2));
        assert_eq!(piece_len(br#""name":"x"}"#), Some(5));
        assert_eq!(piece_len(b"  hello"), Some(1));
        assert_eq!(piece_len(b" hello world"), Some(6));
        assert_eq!(piece_len(b"12345"), Some(3));
        assert_eq!(piece_len(b"they'll go"), Some(7));
        assert_eq!(piece_len(b"},\n\n/x"), Some(5));
        assert_eq!(piece_len(b" \n \n  x"), Some(4));
        assert_eq!(piece_len(b"   "), Some(3));
        // A letter run that ends at a non-ASCII byte may go on there.
        assert_eq!(piece_len("café".as_bytes()), None);
        assert_eq!(piece_len("ab\u{a0}".as_bytes()), None);
        assert_eq!(piece_len("it'ſ".as_bytes()), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn pieces_are_the_regexs_on_longer_texts(
            indices in proptest::collection::vec(0..ALPHABET.len(), 0..60)
        ) {
            let text: String = indices.iter().map(|&i| ALPHABET[i]).collect();
            let (mixed, by_regex) = both(&text);
            prop_assert_eq!(mixed, by_regex);
        }

        #[test]
        fn pieces_are_the_regexs_on_any_ascii(text in "[\\x00-\\x7f]{0,80}") {
            let (mixed, by_regex) = both(&text);
            prop_assert_eq!(mixed, by_regex);
        }

        #[test]
        fn pieces_are_the_regexs_on_word_like_text(
            text in "([a-zA-Z]{1,8}|[0-9]{1,5}|[ \\t\\n\\r]{1,4}|'[sStTrRvVlLmMdDeE]{0,2}|[.,;:\"(){}\\[\\]/-]{1,3}|[éüßÉ]|\\PC){0,40}"
        ) {
            let (mixed, by_regex) = both(&text);
            prop_assert_eq!(mixed, by_regex);
        }
    }
}
