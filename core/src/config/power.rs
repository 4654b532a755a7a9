//! `[power]`: the racks a site wants power reports for. Plain settings;
//! `records::power` computes against them.

use serde::{Deserialize, Serialize};

use super::keys::check;

/// `[power]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PowerConfig {
    /// `[[power.racks]]`, each with its nodes and limits.
    pub racks: Vec<RackConfig>,
}

/// One rack: which nodes, what its feed supplies and its cooling removes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RackConfig {
    pub name: String,
    /// Node names; `gpu[001-004]` stands for gpu001..gpu004.
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

impl RackConfig {
    /// The rack's budget: the smaller of supply and cooling, in W.
    pub fn budget_w(&self) -> f64 {
        self.supply_kw.min(self.cooling_kw) * 1000.0
    }

    /// The node names, ranges expanded.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().flat_map(|n| expand(n)).collect()
    }
}

/// `gpu[001-004]` -> gpu001..gpu004 (one range, digits kept); anything
/// else as it is.
pub fn expand(pattern: &str) -> Vec<String> {
    let parsed = (|| {
        let (prefix, rest) = pattern.split_once('[')?;
        let (range, suffix) = rest.split_once(']')?;
        let (a, b) = range.split_once('-')?;
        let (lo, hi): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
        (lo <= hi && hi - lo < 100_000).then_some((prefix, suffix, lo, hi, a.len()))
    })();
    match parsed {
        Some((prefix, suffix, lo, hi, width)) => (lo..=hi)
            .map(|i| format!("{prefix}{i:0width$}{suffix}"))
            .collect(),
        None => vec![pattern.to_string()],
    }
}

impl PowerConfig {
    pub fn validate(&self) -> Result<(), String> {
        let mut seen_racks: Vec<&str> = Vec::new();
        let mut seen_nodes: Vec<String> = Vec::new();
        for r in &self.racks {
            if r.name.is_empty() || seen_racks.contains(&r.name.as_str()) {
                return Err(format!(
                    "power.racks: rack name {:?} empty or given twice",
                    r.name
                ));
            }
            seen_racks.push(&r.name);
            let ctx = |e: String| format!("power.racks {:?}: {e}", r.name);
            check("power.racks.supply_kw", r.supply_kw).map_err(ctx)?;
            check("power.racks.cooling_kw", r.cooling_kw).map_err(ctx)?;
            check("power.racks.node_overhead_w", r.node_overhead_w).map_err(ctx)?;
            let nodes = r.node_names();
            if nodes.is_empty() {
                return Err(ctx("no nodes".into()));
            }
            for n in nodes {
                if seen_nodes.contains(&n) {
                    return Err(ctx(format!("node {n} is in two racks")));
                }
                seen_nodes.push(n);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn racks_parse_expand_and_validate() {
        let c: PowerConfig = toml::from_str(
            "[[racks]]\nname = \"r01\"\nnodes = [\"gpu[001-003]\", \"spare\"]\nsupply_kw = 8.0\ncooling_kw = 10.0\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.racks[0].node_names(),
            ["gpu001", "gpu002", "gpu003", "spare"]
        );
        assert_eq!(c.racks[0].budget_w(), 8000.0);
        let mut twice = c.clone();
        twice.racks.push(RackConfig {
            name: "r02".into(),
            ..c.racks[0].clone()
        });
        assert!(twice.validate().unwrap_err().contains("two racks"));
        let mut bad = c.clone();
        bad.racks[0].supply_kw = 0.0;
        assert!(bad.validate().is_err());
        assert!(toml::from_str::<PowerConfig>(
            "[[racks]]\nname = \"x\"\nnodes = []\nsupply_kw = 1\ncooling_kw = 1\nbogus = 1\n"
        )
        .is_err());
    }
}
