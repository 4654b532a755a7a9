//! Text that came from outside (environment, kernel log, records, Slurm)
//! made safe to show on an admin's terminal or in a log line.

use std::borrow::Cow;

/// `s` with every control character (C0, DEL, C1: newlines, escape
/// sequences, carriage returns) replaced by `?`, so that a value cannot
/// move the cursor, recolour the terminal or forge a log line.
pub fn printable(s: &str) -> Cow<'_, str> {
    if s.chars().any(char::is_control) {
        Cow::Owned(
            s.chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_replaced() {
        assert!(matches!(printable("plain text"), Cow::Borrowed(_)));
        assert_eq!(printable("a\x1b[2Jb\r\nc\u{9b}d\x7f"), "a?[2Jb??c?d?");
    }
}
