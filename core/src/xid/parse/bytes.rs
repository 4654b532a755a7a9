//! Byte-level helpers shared by the wrapper and time-stamp parsers: a
//! decimal number at the start of a slice, and spaces and tabs trimmed.

pub(super) fn take_number(s: &[u8]) -> Option<(u64, &[u8])> {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if n == 0 || n > 19 {
        return None;
    }
    let v = std::str::from_utf8(&s[..n]).ok()?.parse().ok()?;
    Some((v, &s[n..]))
}

pub(super) fn trim_spaces_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

pub(super) fn trim_spaces(s: &[u8]) -> &[u8] {
    let mut s = trim_spaces_start(s);
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}
