//! Every configuration key's default and range, as documented in
//! docs/configuration.md, the gpu-health.toml(5) man page and the shipped
//! example configuration, against the code: the defaults of
//! `Config::default()` and the range table `config::RANGES`. A default or
//! range changed in one place and not the others fails here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpu_health_core::config::{self, Config};

fn doc(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Keys whose default is "unset" (an `Option`); documented in words.
const OPTIONAL: &[&str] = &[
    "nvml_library",
    "records_dir",
    "prometheus_textfile",
    "expected_gpus",
    "log_file",
    "rdma.expected_count",
    "rdma.expected_rate_gbps",
    "rdma.action",
    "xid.journal_path",
];

/// Per-code maps, documented by example rather than by default.
const MAPS: &[&str] = &[
    "xid.actions",
    "xid.rules",
    "power.racks",
    "acceptance.models",
];

/// `section.key` -> default, from the code.
fn defaults() -> BTreeMap<String, toml::Value> {
    let v = toml::Value::try_from(Config::default()).unwrap();
    let mut out = BTreeMap::new();
    flatten("", &v, &mut out);
    out
}

fn flatten(prefix: &str, v: &toml::Value, out: &mut BTreeMap<String, toml::Value>) {
    let toml::Value::Table(t) = v else { return };
    for (k, v) in t {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(_) if !MAPS.contains(&key.as_str()) => flatten(&key, v, out),
            _ if MAPS.contains(&key.as_str()) => {}
            _ => {
                out.insert(key, v.clone());
            }
        }
    }
}

/// Every key gpu-health understands (so a documented key is a real one).
fn known() -> Vec<String> {
    let mut k: Vec<String> = defaults().into_keys().collect();
    k.extend(OPTIONAL.iter().map(|s| s.to_string()));
    k.extend(MAPS.iter().map(|s| s.to_string()));
    k
}

/// One documented key: its default as written, and the text around it
/// (which must hold its range, when it has one).
#[derive(Debug)]
struct Documented {
    key: String,
    default: String,
    text: String,
}

fn same_value(written: &str, code: &toml::Value) -> bool {
    let written = written.trim().trim_matches('`');
    match code {
        toml::Value::String(s) => written.trim_matches('"') == s,
        toml::Value::Float(f) => written.parse::<f64>().is_ok_and(|w| w == *f),
        toml::Value::Integer(i) => written.parse::<i64>().is_ok_and(|w| w == *i),
        toml::Value::Boolean(b) => written.parse::<bool>().is_ok_and(|w| w == *b),
        toml::Value::Array(a) if a.is_empty() => written == "[]",
        other => written == other.to_string(),
    }
}

/// Check one document's list of keys against the code.
fn check(name: &str, found: &[Documented], all_keys_required: bool) {
    let defaults = defaults();
    let known = known();
    let mut problems = Vec::new();
    for d in found {
        if !known.contains(&d.key) {
            problems.push(format!("{}: not a configuration key", d.key));
            continue;
        }
        match defaults.get(&d.key) {
            Some(v) if !same_value(&d.default, v) => problems.push(format!(
                "{}: documented default {:?}, the code's is {v}",
                d.key, d.default
            )),
            _ => {}
        }
        let ranges: Vec<&str> = range_words(&d.text);
        match config::range_of(&d.key) {
            Some(r) if !ranges.contains(&r.describe().as_str()) => problems.push(format!(
                "{}: the code's range {} is not documented (found {ranges:?})",
                d.key,
                r.describe()
            )),
            Some(r) if ranges.iter().any(|w| *w != r.describe()) => problems.push(format!(
                "{}: documented range {ranges:?}, the code's is {}",
                d.key,
                r.describe()
            )),
            None if !ranges.is_empty() => problems.push(format!(
                "{}: documents a range {ranges:?} the code does not have",
                d.key
            )),
            _ => {}
        }
    }
    if all_keys_required {
        for k in known.iter().filter(|k| !MAPS.contains(&k.as_str())) {
            if !found.iter().any(|d| &d.key == k) {
                problems.push(format!("{k}: not documented"));
            }
        }
    }
    assert!(problems.is_empty(), "{name}:\n  {}", problems.join("\n  "));
}

/// `100..=10000` style ranges in a text.
fn range_words(text: &str) -> Vec<&str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')'))
        .filter(|w| w.contains("..="))
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()))
        .collect()
}

/// docs/configuration.md: `| \`key\` | default | meaning |` rows, under
/// `### \`[section]\`` headings (top-level keys before the first).
fn configuration_md() -> Vec<Documented> {
    let text = doc("docs/configuration.md");
    let mut section = String::new();
    let mut out = Vec::new();
    let mut in_keys = false;
    for line in text.lines() {
        if line.starts_with("## ") {
            in_keys = line == "## Keys";
            continue;
        }
        if !in_keys {
            continue;
        }
        if let Some(h) = line.strip_prefix("### `[") {
            section = h.trim_end_matches("]`").to_string();
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') || cells[1] == "key" {
            continue;
        }
        let key = cells[1].trim_matches('`');
        out.push(Documented {
            key: if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            },
            default: cells[2].to_string(),
            text: cells[3..].join(" "),
        });
    }
    out
}

/// The man page: `.BR key " (default, range)"` lines in `.SH KEYS`,
/// under `.SS [section]`.
fn man_page() -> Vec<Documented> {
    let text = doc("packaging/man/gpu-health.toml.5");
    let mut section = String::new();
    let mut out = Vec::new();
    let mut in_keys = false;
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(h) = line.strip_prefix(".SH ") {
            in_keys = h == "KEYS";
            continue;
        }
        if !in_keys {
            continue;
        }
        if let Some(h) = line.strip_prefix(".SS [") {
            section = h.trim_end_matches(']').to_string();
            continue;
        }
        let Some(rest) = line.strip_prefix(".BR ") else {
            continue;
        };
        let Some((key, paren)) = rest.split_once(" \"") else {
            continue;
        };
        if lines.get(i.wrapping_sub(1)) != Some(&".TP") {
            continue;
        }
        let inside = paren
            .trim_end_matches('"')
            .trim()
            .trim_start_matches('(')
            .trim_end_matches(')');
        // An array default (`["a", "b"]`) holds commas of its own.
        let default = match inside.rfind(']') {
            Some(end) if inside.starts_with('[') => &inside[..=end],
            _ => inside.split(", ").next().unwrap_or(""),
        };
        let default = default.replace("\\(dq", "\"").replace("\\-", "-");
        out.push(Documented {
            key: if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            },
            default,
            text: inside.to_string(),
        });
    }
    out
}

/// The example configuration: `#key = value` lines under `[section]`,
/// with the comment lines just above them as their text.
fn example_config() -> Vec<Documented> {
    let text = doc("packaging/etc/gpu-health.toml");
    let mut section = String::new();
    let mut comment = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let header = line.strip_prefix('#').unwrap_or(line);
        if header.starts_with('[') {
            section = header.trim_matches(['[', ']']).to_string();
            comment.clear();
            continue;
        }
        if let Some(kv) = line.strip_prefix('#') {
            if let Some((k, v)) = kv.split_once(" = ") {
                if !k.contains(' ') && !k.is_empty() {
                    let in_map = MAPS
                        .iter()
                        .any(|m| section == *m || section.starts_with(&format!("{m}.")));
                    if !in_map {
                        out.push(Documented {
                            key: if section.is_empty() {
                                k.to_string()
                            } else {
                                format!("{section}.{k}")
                            },
                            default: v.to_string(),
                            text: std::mem::take(&mut comment),
                        });
                    }
                    continue;
                }
            }
            comment.push_str(kv);
            comment.push(' ');
        } else if line.trim().is_empty() {
            comment.clear();
        }
    }
    out
}

#[test]
fn configuration_md_matches_the_code() {
    check("docs/configuration.md", &configuration_md(), true);
}

#[test]
fn the_man_page_matches_the_code() {
    check("packaging/man/gpu-health.toml.5", &man_page(), true);
}

#[test]
fn the_example_configuration_matches_the_code() {
    let found = example_config();
    // Optional keys show an example value, not a default.
    let shown: Vec<Documented> = found
        .into_iter()
        .map(|mut d| {
            if OPTIONAL.contains(&d.key.as_str()) {
                d.default.clear();
            }
            d
        })
        .collect();
    check("packaging/etc/gpu-health.toml", &shown, true);
    // And it parses: uncommented, it is a valid configuration.
    let text = doc("packaging/etc/gpu-health.toml");
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(kv) if kv.contains(" = ") && !kv.starts_with(' ') => kv,
            Some(h) if h.starts_with('[') => h,
            _ if l.starts_with('#') => "",
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let example = config::parse(std::path::Path::new("example"), &uncommented, None)
        .unwrap_or_else(|e| panic!("the example, uncommented: {e}\n{uncommented}"));
    // Its racks too, which only `gpu-health report --power` parses.
    let racks = example
        .power
        .racks()
        .unwrap_or_else(|e| panic!("the example's racks, uncommented: {e}"));
    assert_eq!(racks.len(), 1);
}

/// The rack example of docs/configuration.md is a valid rack.
#[test]
fn the_documented_rack_example_parses() {
    let text = doc("docs/configuration.md");
    let section = &text[text
        .find("### `[[power.racks]]`")
        .expect("the racks section")..];
    let start = section.find("```toml\n").expect("a toml example") + "```toml\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let c = config::parse(std::path::Path::new("docs"), block, None)
        .unwrap_or_else(|e| panic!("{e}\n{block}"));
    let racks = c.power.racks().unwrap_or_else(|e| panic!("{e}\n{block}"));
    assert_eq!(
        racks[0].nodes,
        ["gpu001", "gpu002", "gpu003", "gpu004", "gpu017"]
    );
}

#[test]
fn xid_rule_ranges_are_documented() {
    for (key, file) in [
        ("xid.rules.repeat", "docs/xid-policy.md"),
        ("xid.rules.window_minutes", "docs/xid-policy.md"),
        ("xid.rules.repeat", "packaging/man/gpu-health.toml.5"),
        ("xid.rules.escalate_after", "docs/xid-policy.md"),
        ("xid.rules.escalate_window_hours", "docs/xid-policy.md"),
        ("xid.rules.escalate_burst_seconds", "docs/xid-policy.md"),
        (
            "xid.rules.escalate_after",
            "packaging/man/gpu-health.toml.5",
        ),
        (
            "xid.rules.escalate_window_hours",
            "packaging/man/gpu-health.toml.5",
        ),
        (
            "xid.rules.escalate_burst_seconds",
            "packaging/man/gpu-health.toml.5",
        ),
        ("power.racks.supply_kw", "docs/configuration.md"),
        ("acceptance.models.all_reduce_gbs", "docs/configuration.md"),
        ("acceptance.models.h2d_gbs", "docs/configuration.md"),
        ("acceptance.models.rdma_gbps", "docs/configuration.md"),
        ("acceptance.models.rdma_fraction", "docs/configuration.md"),
        (
            "acceptance.models.all_reduce_gbs",
            "packaging/man/gpu-health.toml.5",
        ),
        (
            "acceptance.models.rdma_fraction",
            "packaging/man/gpu-health.toml.5",
        ),
        ("power.racks.cooling_kw", "docs/configuration.md"),
        ("power.racks.node_overhead_w", "docs/configuration.md"),
        ("power.racks.supply_kw", "packaging/man/gpu-health.toml.5"),
        (
            "xid.rules.window_minutes",
            "packaging/man/gpu-health.toml.5",
        ),
    ] {
        let r = config::range_of(key).unwrap().describe();
        assert!(doc(file).contains(&r), "{file}: {key} {r}");
    }
}
