//! What an admin reads first (issue 37): the shipped configuration's
//! advice, the Xid catalog's notes.

use std::path::Path;
use std::process::Command;

use gpu_health_testkit::output;

fn gpu_health(args: &[&str], config: &Path) -> (i32, String, String) {
    output(
        Command::new(gpu_health_testkit::program(env!(
            "CARGO_BIN_EXE_gpu-health"
        )))
        .args(args)
        .env_clear()
        .env("GPU_HEALTH_CONFIG", config),
    )
}

fn shipped_config() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/etc/gpu-health.toml")
}

/// It said to test a change with `check` (a node's health, which takes a
/// broken file for the defaults) instead of `config check`.
#[test]
fn the_shipped_config_says_to_test_changes_with_config_check() {
    let text = std::fs::read_to_string(shipped_config()).unwrap();
    let advice = text
        .lines()
        .skip_while(|l| !l.contains("Check a change"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        advice.contains("`gpu-health config check`"),
        "the advice: {advice:?}"
    );
    // What it recommends accepts the file as shipped.
    let (code, out, err) = gpu_health(&["config", "check"], &shipped_config());
    assert_eq!(code, 0, "{out}{err}");
}

/// `xids --catalog 31` spoke of "the project's mission" (the note in
/// `why`, shown with `--json` and in docs/xid-policy.md): an admin needs
/// what the node goes through.
#[test]
fn the_catalog_speaks_to_the_admin() {
    for code in ["31", "43"] {
        let (status, out, err) =
            gpu_health(&["xids", "--catalog", "--json", code], &shipped_config());
        assert_eq!(status, 0, "{out}{err}");
        let row: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON row");
        let why = row["why"].as_str().unwrap_or_default();
        assert!(
            !why.contains("mission") && !why.contains("project"),
            "{code}: {why}"
        );
        assert!(why.contains("returns by itself"), "{code}: {why}");
    }
    let (_, all, _) = gpu_health(&["xids", "--catalog", "--json"], &shipped_config());
    assert!(all.lines().count() > 100, "{all}");
    assert!(
        !all.contains("mission") && !all.contains("the project"),
        "{all}"
    );
}
