//! The last lines an upstream wrote to stderr.
//!
//! When an upstream dies, the error the client gets quotes these lines: they
//! usually say why (a missing module, a bad flag, a stack trace).

use std::collections::VecDeque;

/// A bounded buffer of the most recent lines.
#[derive(Debug, Clone)]
pub struct Tail {
    lines: VecDeque<String>,
    capacity: usize,
}

/// The longest line kept, in bytes; longer lines are cut at a char boundary.
const MAX_LINE: usize = 1000;

impl Tail {
    /// A buffer keeping at most `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        Self {
            lines: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    /// Records one line, forgetting the oldest when full.
    pub fn push(&mut self, line: &str) {
        if self.capacity == 0 {
            return;
        }
        if self.lines.len() == self.capacity {
            self.lines.pop_front();
        }
        let mut end = line.len().min(MAX_LINE);
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        self.lines.push_back(line[..end].to_owned());
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().map(String::as_str)
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines() {
        let mut tail = Tail::new(2);
        for line in ["a", "b", "c"] {
            tail.push(line);
        }
        assert_eq!(tail.lines().collect::<Vec<_>>(), ["b", "c"]);
    }

    #[test]
    fn cuts_long_lines_at_char_boundaries() {
        let mut tail = Tail::new(1);
        tail.push(&"é".repeat(MAX_LINE));
        let kept = tail.lines().next().unwrap();
        assert!(kept.len() <= MAX_LINE && kept.chars().all(|c| c == 'é'));
    }
}
