//! `[power]`: the racks a site wants power reports for. Report-only: the
//! configuration keeps the section as written ([`PowerSection`]) and only
//! `gpu-health report --power` parses and checks it
//! ([`PowerSection::racks`]). The Prolog, Epilog, health check and SPANK
//! plugin never do: a long rack list costs them nothing, and a mistake in
//! it can neither make their configuration invalid nor stop a drain.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::keys::check;
use super::ConfigError;

/// Node names all racks together may expand to. A cluster has far fewer
/// nodes; a range that expands to more is a typo (`gpu[1-999999999]`),
/// refused before a single name is made.
pub const MAX_POWER_NODES: usize = 100_000;

/// `[power]` as the configuration file has it, unparsed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PowerSection {
    raw: toml::Value,
    /// The file that gave the section (the node's drop-in when it has
    /// one), for the errors of [`PowerSection::racks`].
    #[serde(skip)]
    source: Option<PathBuf>,
}

impl Default for PowerSection {
    fn default() -> Self {
        PowerSection {
            raw: toml::Value::Table(toml::Table::new()),
            source: None,
        }
    }
}

/// The section's shape (`racks` is checked one rack at a time, so that
/// an error can name the rack).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Shape {
    #[serde(default)]
    racks: Vec<toml::Value>,
}

/// One `[[power.racks]]` table as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackConfig {
    pub name: String,
    /// Node names; `gpu[001-004]` stands for gpu001..gpu004,
    /// `gpu[001-004,010]` for those and gpu010.
    pub nodes: Vec<String>,
    /// What the rack's power feed supplies, in kW.
    pub supply_kw: f64,
    /// What its cooling removes, in kW (air cooling ends near 10-12 kW).
    pub cooling_kw: f64,
    /// Power of each node besides its GPUs (CPUs, NICs, fans), in W: the
    /// records measure the GPUs only.
    #[serde(default)]
    pub node_overhead_w: f64,
}

/// A checked rack: names expanded, each node in this rack only.
#[derive(Debug, Clone, PartialEq)]
pub struct Rack {
    pub name: String,
    pub nodes: Vec<String>,
    pub supply_kw: f64,
    pub cooling_kw: f64,
    pub node_overhead_w: f64,
}

impl Rack {
    /// The rack's budget: the smaller of supply and cooling, in W.
    pub fn budget_w(&self) -> f64 {
        self.supply_kw.min(self.cooling_kw) * 1000.0
    }
}

impl PowerSection {
    /// The section as the file `source` has it (tests, tools).
    pub fn from_value(raw: toml::Value, source: Option<PathBuf>) -> PowerSection {
        PowerSection { raw, source }
    }

    pub(super) fn set_source(&mut self, source: Option<PathBuf>) {
        self.source = source;
    }

    /// The racks, parsed and checked; the error names the file, the rack
    /// and what is wrong. Only the power report calls this.
    pub fn racks(&self) -> Result<Vec<Rack>, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: self
                .source
                .clone()
                .unwrap_or_else(|| PathBuf::from("the configuration")),
            message,
        };
        let shape = Shape::deserialize(self.raw.clone())
            .map_err(|e| invalid(format!("[power]: {}", one_line(&e.to_string()))))?;
        let mut configs = Vec::with_capacity(shape.racks.len());
        for (i, raw) in shape.racks.into_iter().enumerate() {
            let name = raw
                .get("name")
                .and_then(toml::Value::as_str)
                .map_or_else(String::new, |n| format!(" ({n:?})"));
            let rack = RackConfig::deserialize(raw).map_err(|e| {
                invalid(format!(
                    "[[power.racks]] #{}{name}: {}",
                    i + 1,
                    one_line(&e.to_string())
                ))
            })?;
            configs.push(rack);
        }
        check_racks(&configs).map_err(invalid)
    }

    /// The file that gave the section, when one did.
    pub fn source(&self) -> Option<&Path> {
        self.source.as_deref()
    }
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Racks as written to checked racks: names and limits in range, every
/// `nodes` entry expanded (at most [`MAX_POWER_NODES`] names in all), a
/// rack name and a node given once. Linear in the names (hash sets).
pub fn check_racks(configs: &[RackConfig]) -> Result<Vec<Rack>, String> {
    let mut rack_names: HashSet<&str> = HashSet::new();
    // Node name -> the rack it is in (an index into `out`).
    let mut rack_of: HashMap<String, usize> = HashMap::new();
    let mut left = MAX_POWER_NODES;
    let mut out: Vec<Rack> = Vec::with_capacity(configs.len());
    for r in configs {
        if r.name.is_empty() {
            return Err("power.racks: a rack without a name".into());
        }
        if !rack_names.insert(&r.name) {
            return Err(format!("power.racks: rack name {:?} given twice", r.name));
        }
        let ctx = |e: String| format!("power.racks {:?}: {e}", r.name);
        check("power.racks.supply_kw", r.supply_kw).map_err(ctx)?;
        check("power.racks.cooling_kw", r.cooling_kw).map_err(ctx)?;
        check("power.racks.node_overhead_w", r.node_overhead_w).map_err(ctx)?;
        let mut nodes = Vec::new();
        for entry in &r.nodes {
            let names = expand(entry, left).map_err(ctx)?;
            left -= names.len();
            nodes.extend(names);
        }
        if nodes.is_empty() {
            return Err(ctx("no nodes".into()));
        }
        let here = out.len();
        for n in &nodes {
            if let Some(&other) = rack_of.get(n) {
                return Err(ctx(if other == here {
                    format!("node {n} is listed twice")
                } else {
                    format!("node {n} is in rack {:?} too", out[other].name)
                }));
            }
            rack_of.insert(n.clone(), here);
        }
        out.push(Rack {
            name: r.name.clone(),
            nodes,
            supply_kw: r.supply_kw,
            cooling_kw: r.cooling_kw,
            node_overhead_w: r.node_overhead_w,
        });
    }
    Ok(out)
}

/// One `nodes` entry to names, at most `limit` of them: `gpu017` as it
/// is; `gpu[001-004]` to gpu001..gpu004 and `gpu[001-004,010]` to those
/// and gpu010 (each number as wide as the first of its range, as Slurm
/// writes them). One bracket group per entry; anything malformed, or more
/// than `limit` names, is an error, never a literal name. The count is
/// known before any name is made.
pub fn expand(entry: &str, limit: usize) -> Result<Vec<String>, String> {
    let bad = |why: &str| format!("node entry {entry:?}: {why}");
    let (prefix, list, suffix) = match (entry.find('['), entry.find(']')) {
        (None, None) => {
            check_name_part(entry).map_err(&bad)?;
            if entry.is_empty() {
                return Err(bad("empty"));
            }
            return if limit == 0 {
                Err(bad(&format!(
                    "more than {MAX_POWER_NODES} node names in all"
                )))
            } else {
                Ok(vec![entry.to_string()])
            };
        }
        (Some(open), Some(close)) if open < close => {
            (&entry[..open], &entry[open + 1..close], &entry[close + 1..])
        }
        _ => return Err(bad("unbalanced brackets")),
    };
    if suffix.contains(['[', ']']) {
        return Err(bad("one bracket group per entry"));
    }
    check_name_part(prefix).map_err(&bad)?;
    check_name_part(suffix).map_err(&bad)?;
    // Each part: (first, last, width); the count before any name.
    let mut parts = Vec::new();
    let mut count: usize = 0;
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi) = (
            number(a).map_err(|w| bad(&w))?,
            number(b).map_err(|w| bad(&w))?,
        );
        if lo > hi {
            return Err(bad(&format!("range {part} goes down")));
        }
        let n = usize::try_from(hi - lo)
            .ok()
            .and_then(|d| d.checked_add(1))
            .and_then(|n| count.checked_add(n))
            .filter(|total| *total <= limit);
        count = n.ok_or_else(|| {
            bad(&format!(
                "expands to more than {limit} names (all racks together may name \
                 {MAX_POWER_NODES})"
            ))
        })?;
        parts.push((lo, hi, a.len()));
    }
    let mut names = Vec::with_capacity(count);
    for (lo, hi, width) in parts {
        names.extend((lo..=hi).map(|i| format!("{prefix}{i:0width$}{suffix}")));
    }
    Ok(names)
}

/// A number of a range: digits only, fitting u64.
fn number(digits: &str) -> Result<u64, String> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{digits:?} is not a number"));
    }
    digits
        .parse()
        .map_err(|_| format!("{digits} is too large a number"))
}

/// The text around a range (or a whole name): no white space, control
/// characters, commas or brackets.
fn check_name_part(s: &str) -> Result<(), &'static str> {
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, ',' | '[' | ']'))
    {
        Err("a node name has no white space, control characters, commas or brackets")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> PowerSection {
        let raw: toml::Value = toml::from_str::<toml::Table>(text).unwrap().into();
        PowerSection::from_value(raw, Some(PathBuf::from("/etc/slurm/gpu-health.toml")))
    }

    fn rack_error(text: &str) -> String {
        section(text).racks().unwrap_err().to_string()
    }

    const R01: &str = "[[racks]]\nname = \"r01\"\nsupply_kw = 8.0\ncooling_kw = 10.0\n";

    #[test]
    fn racks_parse_expand_and_validate() {
        let racks = section(&format!("{R01}nodes = [\"gpu[001-003]\", \"spare\"]\n"))
            .racks()
            .unwrap();
        assert_eq!(racks[0].nodes, ["gpu001", "gpu002", "gpu003", "spare"]);
        assert_eq!(racks[0].budget_w(), 8000.0);
        assert!(PowerSection::default().racks().unwrap().is_empty());
        let two = format!("{R01}nodes = [\"a\", \"b\"]\n{R01}nodes = [\"c\"]\n")
            .replacen("\"r01\"", "\"r02\"", 1);
        assert!(section(&two).racks().is_ok());
    }

    #[test]
    fn errors_name_the_file_the_rack_and_the_fault() {
        let e = rack_error(&format!("{R01}nodes = [\"a\"]\nbogus = 1\n"));
        assert!(
            e.starts_with("/etc/slurm/gpu-health.toml: [[power.racks]] #1 (\"r01\"): ")
                && e.contains("bogus"),
            "{e}"
        );
        let e = rack_error(&format!(
            "{R01}nodes = [\"a\"]\n{}nodes = [\"b\", \"a\"]\n",
            R01.replace("r01", "r02")
        ));
        assert!(
            e.ends_with("power.racks \"r02\": node a is in rack \"r01\" too"),
            "{e}"
        );
        let e = rack_error(&format!("{R01}nodes = [\"gpu[1-3]\", \"gpu2\"]\n"));
        assert!(e.ends_with("node gpu2 is listed twice"), "{e}");
        let e = rack_error(&format!("{R01}nodes = [\"a\"]\n{R01}nodes = [\"b\"]\n"));
        assert!(e.contains("rack name \"r01\" given twice"), "{e}");
        let e = rack_error(&format!("{}nodes = [\"a\"]\n", R01.replace("8.0", "0.0")));
        assert!(
            e.ends_with("power.racks \"r01\": power.racks.supply_kw = 0 is outside 0.1..=1000"),
            "{e}"
        );
        let e = rack_error(&format!("{R01}nodes = []\n"));
        assert!(e.ends_with("no nodes"), "{e}");
        let e = rack_error("racks = 5\n");
        assert!(e.contains("[power]: "), "{e}");
        let e = rack_error("rack = []\n");
        assert!(e.contains("rack"), "{e}");
    }

    #[test]
    fn ranges_are_bounded_and_malformed_ones_are_errors() {
        assert_eq!(expand("gpu[8-10]", 10).unwrap(), ["gpu8", "gpu9", "gpu10"]);
        assert_eq!(
            expand("n[01-02,7]-ib", 10).unwrap(),
            ["n01-ib", "n02-ib", "n7-ib"]
        );
        assert_eq!(expand("gpu[5]", 1).unwrap(), ["gpu5"]);
        assert_eq!(expand("[1-2]", 2).unwrap(), ["1", "2"]);
        assert_eq!(
            expand("gpu[00000-99999]", MAX_POWER_NODES).unwrap().len(),
            MAX_POWER_NODES
        );
        for (entry, why) in [
            ("gpu[1-999999999]", "expands to more than 100000"),
            ("gpu[0-18446744073709551615]", "expands to more than"),
            ("gpu[1-99999999999999999999]", "too large a number"),
            ("gpu[1-3", "unbalanced brackets"),
            ("gpu1-3]", "unbalanced brackets"),
            ("gpu]1-3[", "unbalanced brackets"),
            ("gpu[3-1]", "goes down"),
            ("gpu[a-b]", "not a number"),
            ("gpu[]", "not a number"),
            ("gpu[1,,2]", "not a number"),
            ("gpu[-3]", "not a number"),
            ("gpu[1-2][1-2]", "one bracket group"),
            ("gpu 1", "white space"),
            ("a,b", "commas"),
            ("", "empty"),
        ] {
            let e = expand(entry, MAX_POWER_NODES).unwrap_err();
            assert!(e.contains(why), "{entry}: {e}");
        }
        // The limit counts over entries: the caller passes what is left.
        assert!(expand("gpu[1-4]", 3).unwrap_err().contains("more than 3"));
        assert!(expand("gpu1", 0).is_err());
    }

    #[test]
    fn the_limit_holds_over_all_racks_together() {
        let half = MAX_POWER_NODES / 2;
        let e = rack_error(&format!(
            "{R01}nodes = [\"a[1-{half}]\"]\n{}nodes = [\"b[0-{half}]\"]\n",
            R01.replace("r01", "r02")
        ));
        assert!(e.contains("expands to more than"), "{e}");
    }
}
