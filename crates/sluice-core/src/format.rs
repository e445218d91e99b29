//! Numbers, sizes and times written for people (and models).

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

/// The most characters of an input (a client's or an upstream's) quoted
/// back in a message.
pub const QUOTED_CHARS: usize = 64;

/// `input` as quoted back in a message: whole when short, else its first
/// [`QUOTED_CHARS`] characters and its size (`abc… (1,048,576 bytes)`).
/// Every message that echoes an input uses it: a 1 MB bogus handle must
/// not come back as a 1 MB error.
pub fn quoted_cut(input: &str) -> Cow<'_, str> {
    cut(input, QUOTED_CHARS)
}

/// `text` whole when it has at most `chars` characters, else its first
/// `chars` and its size: for messages that carry an input somewhere inside
/// (a parser's error quoting the value it refused).
pub fn cut(text: &str, chars: usize) -> Cow<'_, str> {
    match text.char_indices().nth(chars) {
        None => Cow::Borrowed(text),
        Some((end, _)) => Cow::Owned(format!(
            "{}… ({} bytes)",
            &text[..end],
            group(text.len() as u64)
        )),
    }
}

/// `value` on one line, as a message quotes it: control characters (a
/// newline, an escape) written as escapes (`\n`, `\u{1b}`), the rest as is.
pub fn one_line(value: &str) -> String {
    let mut one_line = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_control() {
            one_line.extend(c.escape_default());
        } else {
            one_line.push(c);
        }
    }
    one_line
}

/// `12480` → `"12,480"`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` and its noun, as a count is written: `1 line`, `6,000 lines`.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{} {many}", group(n))
    }
}

/// `629_145` → `"614 KB"`; 1 KB = 1024 bytes.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if n < 1024 {
        return counted(n, "byte", "bytes");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// Ends a header line: ` · next: CALL`, or ` · last page`.
pub fn push_next(out: &mut String, next_call: Option<&str>) {
    match next_call {
        Some(call) => {
            out.push_str(" · next: ");
            out.push_str(call);
        }
        None => out.push_str(" · last page"),
    }
}

/// `t` as an RFC 3339 UTC timestamp, to the second.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A duration in the largest unit that keeps it short: `42 s`, `3 min`, `2 h`.
pub fn age(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7200 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    }
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_count_of_one_takes_the_singular() {
        assert_eq!(counted(1, "line", "lines"), "1 line");
        assert_eq!(counted(0, "line", "lines"), "0 lines");
        assert_eq!(counted(6_000, "entry", "entries"), "6,000 entries");
    }

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(12_480), "12,480");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn long_inputs_are_quoted_cut() {
        assert_eq!(quoted_cut("h_abc"), "h_abc");
        let exact = "é".repeat(QUOTED_CHARS);
        assert_eq!(quoted_cut(&exact), exact);
        let huge = "é".repeat(1 << 20);
        let cut = quoted_cut(&huge);
        assert_eq!(
            cut,
            format!("{}… (2,097,152 bytes)", "é".repeat(QUOTED_CHARS))
        );
    }

    #[test]
    fn sizes_are_short() {
        assert_eq!(bytes(500), "500 bytes");
        assert_eq!(bytes(1), "1 byte");
        assert_eq!(bytes(0), "0 bytes");
        assert_eq!(bytes(629_145), "614 KB");
        assert_eq!(bytes(5 * 1024 * 1024 + 1), "5.0 MB");
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_357_326);
        assert_eq!(timestamp(t), "2026-11-22T14:22:06Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
