//! What the plugin needs to know from Slurm's headers, read at build time
//! by build.rs (and unit-tested by the library: `crate::build_facts`).
//! Slurm's headers are C: only what a plain reading of them can tell is
//! used, and a header that cannot be read that way fails the build with
//! a message rather than guessing.

/// The text without C comments (`/* */` and `//`), so that a commented
/// declaration or example does not count.
pub fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = match rest[b + 2..].find("*/") {
                    Some(e) => &rest[b + 2 + e + 2..],
                    None => "",
                };
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = match rest[l..].find('\n') {
                    Some(e) => &rest[l + e..],
                    None => "",
                };
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

/// `SLURM_VERSION_NUMBER` of slurm_version.h (`0xMMmmuu`).
pub fn version_number(slurm_version_h: &str) -> Option<u32> {
    strip_comments(slurm_version_h)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .find_map(|v| parse_int(v.trim()).and_then(|n| u32::try_from(n).ok()))
}

/// Does spank.h declare `slurm_spank_init_failure_mode` (Slurm 25.05 and
/// later: a plugin that defines it decides what a failing
/// `slurm_spank_init` does)?
pub fn declares_init_failure_mode(spank_h: &str) -> bool {
    strip_comments(spank_h).lines().any(|l| {
        let words: Vec<&str> = l
            .split(|c: char| c.is_whitespace() || c == ';')
            .filter(|w| !w.is_empty())
            .collect();
        words.last() == Some(&"slurm_spank_init_failure_mode") && words.contains(&"int")
    })
}

/// The value of the C enumerator `name` in `header`: its own `= N`, or
/// one more than the enumerator before it. `None` when it is not there or
/// its value is an expression this reading does not evaluate.
pub fn enum_value(header: &str, name: &str) -> Option<i64> {
    let text = strip_comments(header);
    let mut rest = text.as_str();
    while let Some(start) = find_word(rest, "enum") {
        rest = &rest[start + 4..];
        let (Some(open), Some(close)) = (rest.find('{'), rest.find('}')) else {
            break;
        };
        if close < open {
            continue;
        }
        // enum [tag] { body }: nothing but a tag between `enum` and `{`.
        if !rest[..open]
            .trim()
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let body = &rest[open + 1..close];
        rest = &rest[close + 1..];
        let mut next: Option<i64> = Some(0);
        for item in body.split(',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (item_name, value) = match item.split_once('=') {
                Some((n, v)) => (n.trim(), parse_int(v.trim())),
                None => (item, next),
            };
            if item_name == name {
                return value;
            }
            next = value.and_then(|v| v.checked_add(1));
        }
    }
    None
}

fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        let after = text[i + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident(c));
        before && after
    })
}

fn parse_int(v: &str) -> Option<i64> {
    let v = v.trim_end_matches(['u', 'U', 'l', 'L']);
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}
