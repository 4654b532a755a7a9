//! Where in a configuration file something is: the line, the column, the
//! table (`[dcgm]`, `[xid.rules.31]`) and the line's text, for errors an
//! admin can go to. A light reading of TOML's layout (table headers and
//! `key =` lines), enough for gpu-health.toml; it never decides what the
//! file means (toml does).

use std::fmt;
use std::ops::Range;

/// A place in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    /// The table the line is in, as its header names it (`dcgm`,
    /// `xid.rules.31`, `power.racks`); `None` at the top level.
    pub table: Option<String>,
    /// The line as written (control characters replaced, cut when long).
    pub text: String,
    /// How many characters from `column` the fault covers (at least 1).
    pub width: usize,
}

impl Place {
    /// `[dcgm]`, or `top level`.
    pub fn table_name(&self) -> String {
        match &self.table {
            Some(t) => format!("[{t}]"),
            None => "top level".into(),
        }
    }

    /// The line and a caret under the fault, for a terminal:
    /// `   12 | levle = 2` and `      | ^^^^^`.
    pub fn caret(&self) -> String {
        let num = self.line.to_string();
        format!(
            "{:>5} | {}\n{:>5} | {}{}",
            num,
            self.text,
            "",
            " ".repeat(self.column.saturating_sub(1)),
            "^".repeat(self.width)
        )
    }
}

impl fmt::Display for Place {
    /// `line 12, column 1 (in [dcgm]: levle = 2)`: one line, for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = match &self.table {
            Some(t) => format!("in [{t}]"),
            None => "top level".into(),
        };
        write!(f, "line {}, column {} ({table}", self.line, self.column)?;
        match self.text.trim_start() {
            "" => write!(f, ")"),
            text => write!(f, ": {text})"),
        }
    }
}

/// Lines longer than this are cut in messages.
const MAX_SHOWN: usize = 100;

fn shown(line: &str) -> String {
    let line = crate::text::printable(line.trim_end()).into_owned();
    if line.chars().count() <= MAX_SHOWN {
        return line;
    }
    let cut: String = line.chars().take(MAX_SHOWN - 3).collect();
    format!("{cut}...")
}

/// The place of byte range `span` of `text`.
pub fn place_of(text: &str, span: Range<usize>) -> Place {
    let start = floor_boundary(text, span.start.min(text.len()));
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let end = floor_boundary(text, span.end.clamp(start, line_end));
    Place {
        line,
        column,
        table: table_at(text, line),
        text: shown(&text[line_start..line_end]),
        width: text[start..end].chars().count().max(1),
    }
}

/// The place of 1-based line `line` (the whole line).
pub fn place_of_line(text: &str, line: usize) -> Option<Place> {
    let raw = text.lines().nth(line.checked_sub(1)?)?;
    let indent = raw.len() - raw.trim_start().len();
    Some(Place {
        line,
        column: raw[..indent].chars().count() + 1,
        table: table_at(text, line),
        text: shown(raw),
        width: raw.trim().chars().count().max(1),
    })
}

fn floor_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The header path of a table header line (`[dcgm]` -> `dcgm`,
/// `[[power.racks]]` -> `power.racks`), `None` for other lines.
pub fn header(line: &str) -> Option<String> {
    let l = line.trim();
    let inner = l
        .strip_prefix("[[")
        .and_then(|r| r.split("]]").next())
        .or_else(|| l.strip_prefix('[').and_then(|r| r.split(']').next()))?;
    let path: Vec<String> = inner
        .split('.')
        .map(|p| p.trim().trim_matches('"').trim_matches('\'').to_string())
        .collect();
    (!path.iter().any(String::is_empty)).then(|| path.join("."))
}

/// The table 1-based line `line` is in: the last header at or above it.
pub fn table_at(text: &str, line: usize) -> Option<String> {
    text.lines().take(line).filter_map(header).last()
}

/// The key a `key = value` line sets (dotted keys joined), `None` for
/// other lines.
fn key_of(line: &str) -> Option<String> {
    let l = line.trim_start();
    if l.starts_with('#') || l.starts_with('[') {
        return None;
    }
    let (key, _) = l.split_once('=')?;
    let parts: Vec<String> = key
        .split('.')
        .map(|p| p.trim().trim_matches('"').trim_matches('\'').to_string())
        .collect();
    (!parts.iter().any(String::is_empty)).then(|| parts.join("."))
}

/// The 1-based line that sets dotted `key` (`brake.settle_ms`), the last
/// one when several do; else the line of the table it names (`[brake]`
/// for `brake.settle_ms`, `[xid.rules.31]` for `xid.rules.31.repeat`).
pub fn locate_key(text: &str, key: &str) -> Option<usize> {
    let mut table: Option<String> = None;
    let mut found = None;
    let mut table_line = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(h) = header(line) {
            if key == h || key.starts_with(&format!("{h}.")) {
                table_line = Some(i + 1);
            }
            table = Some(h);
            continue;
        }
        let Some(k) = key_of(line) else { continue };
        let full = match &table {
            Some(t) => format!("{t}.{k}"),
            None => k,
        };
        if full == key {
            found = Some(i + 1);
        }
    }
    found.or(table_line)
}

/// The 1-based line of the `n`th (1-based) header named `name`
/// (`[[power.racks]]` number 2).
pub fn nth_header(text: &str, name: &str, n: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| header(l).as_deref() == Some(name))
        .nth(n.checked_sub(1)?)
        .map(|(i, _)| i + 1)
}

/// Which top-level section each line belongs to: `""` before the first
/// header, else the header's first name (`xid` for `[xid.rules.31]`).
pub fn sections(text: &str) -> Vec<String> {
    let mut current = String::new();
    text.lines()
        .map(|l| {
            if let Some(h) = header(l) {
                current = h.split('.').next().unwrap_or("").to_string();
            }
            current.clone()
        })
        .collect()
}

/// `text` with the 1-based lines `lines` replaced by empty ones: the
/// other lines keep their numbers.
pub fn blank_lines(text: &str, keep: impl Fn(usize) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, l) in text.lines().enumerate() {
        if keep(i + 1) {
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "state_dir = \"/x\"\n[dcgm]\nlevle = 2\n[xid.rules.31]\nrepeat = 0\n[[power.racks]]\nname = \"a\"\n[[power.racks]]\nname = \"b\"\n";

    #[test]
    fn places_name_line_column_and_table() {
        let at = TEXT.find("levle").unwrap();
        let p = place_of(TEXT, at..at + 5);
        assert_eq!((p.line, p.column, p.width), (3, 1, 5));
        assert_eq!(p.table.as_deref(), Some("dcgm"));
        assert_eq!(p.to_string(), "line 3, column 1 (in [dcgm]: levle = 2)");
        let p = place_of(TEXT, 0..1);
        assert_eq!(p.table, None);
        assert_eq!(p.table_name(), "top level");
    }

    #[test]
    fn keys_and_headers_are_found() {
        assert_eq!(locate_key(TEXT, "state_dir"), Some(1));
        assert_eq!(locate_key(TEXT, "xid.rules.31.repeat"), Some(5));
        assert_eq!(locate_key(TEXT, "dcgm.level"), Some(2), "the table's line");
        assert_eq!(locate_key(TEXT, "brake.settle_ms"), None);
        assert_eq!(nth_header(TEXT, "power.racks", 2), Some(8));
        assert_eq!(header("[ \"xid\" . rules ]"), Some("xid.rules".into()));
        assert_eq!(
            sections(TEXT),
            ["", "dcgm", "dcgm", "xid", "xid", "power", "power", "power", "power"]
        );
    }
}
