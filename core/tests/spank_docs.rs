//! docs/spank.md's tables of the plugin's plugstack.conf arguments and of
//! its user options, against the one table they come from
//! (`gpu_health_core::plugstack::options`): a row missing, extra, out of
//! order or differing in any cell fails here.

use std::path::PathBuf;

use gpu_health_core::plugstack::options::{arguments, user_options, PluginOption};

fn spank_md() -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/spank.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The body rows of the first table under the `## {section}` heading.
fn table_rows(doc: &str, section: &str) -> Vec<String> {
    let heading = format!("## {section}\n");
    let start = doc
        .find(&heading)
        .unwrap_or_else(|| panic!("docs/spank.md has no heading {heading:?}"));
    let body = &doc[start + heading.len()..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(str::to_string)
        .collect()
}

/// Every difference between the documented rows and the table's, in words.
fn differences(documented: &[String], expected: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, want) in expected.iter().enumerate() {
        match documented.get(i) {
            Some(got) if got == want => {}
            Some(got) => out.push(format!("row {}:\n  docs: {got}\n  code: {want}", i + 1)),
            None => out.push(format!("missing row {}: {want}", i + 1)),
        }
    }
    for extra in documented.iter().skip(expected.len()) {
        out.push(format!("row not in the code's table: {extra}"));
    }
    out
}

fn check(section: &str, entries: impl Iterator<Item = &'static PluginOption>) {
    let expected: Vec<String> = entries.map(PluginOption::docs_row).collect();
    let documented = table_rows(&spank_md(), section);
    let diff = differences(&documented, &expected);
    assert!(
        diff.is_empty(),
        "docs/spank.md, \"{section}\", against gpu_health_core::plugstack::options:\n{}",
        diff.join("\n")
    );
}

#[test]
fn plugstack_arguments_are_documented_as_the_table_says() {
    check("plugstack.conf", arguments());
}

#[test]
fn user_options_are_documented_as_the_table_says() {
    check("User options", user_options());
}

/// The check itself: a changed, a missing and an extra row are each
/// named.
#[test]
fn a_differing_row_is_named() {
    let rows = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let expected = rows(&["| `a` | 1 |", "| `b` | 2 |"]);
    assert!(differences(&expected, &expected).is_empty());
    let d = differences(&rows(&["| `a` | 9 |"]), &expected);
    assert_eq!(d.len(), 2, "{d:?}");
    assert!(d[0].contains("docs: | `a` | 9 |"), "{d:?}");
    assert!(d[1].starts_with("missing row 2"), "{d:?}");
    let d = differences(
        &rows(&["| `a` | 1 |", "| `b` | 2 |", "| `c` | 3 |"]),
        &expected,
    );
    assert_eq!(d, ["row not in the code's table: | `c` | 3 |"]);
}
