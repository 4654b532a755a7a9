//! docs/operations.md's lifecycle table against the one table it comes
//! from (`gpu_health_core::ledger::lifecycle::TABLE`): every row, in
//! order, cell for cell.

use std::path::PathBuf;

use gpu_health_core::ledger::lifecycle::markdown;

#[test]
fn the_docs_show_the_lifecycle_table_as_the_code_has_it() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let doc = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let start = doc
        .find("## Node lifecycle\n")
        .expect("docs/operations.md has a Node lifecycle section");
    let section = &doc[start..];
    let documented: Vec<&str> = section
        .lines()
        .skip_while(|l| !l.starts_with("| from |"))
        .take_while(|l| l.starts_with('|'))
        .collect();
    let table = markdown();
    let expected: Vec<&str> = table.lines().collect();
    let differing: Vec<String> = expected
        .iter()
        .enumerate()
        .filter(|(i, want)| documented.get(*i) != Some(*want))
        .map(|(i, want)| format!("row {i}: code has {want}\n  docs: {:?}", documented.get(i)))
        .collect();
    assert!(
        differing.is_empty() && documented.len() == expected.len(),
        "docs/operations.md's lifecycle table differs from the code's ({} rows documented, {} in the code):\n{}\n\nthe table as it should read:\n{table}",
        documented.len(),
        expected.len(),
        differing.join("\n")
    );
}
