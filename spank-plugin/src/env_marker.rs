//! Telling the plugin's own variables from the user's.
//!
//! The batch step sets NCCL variables for the batch node; srun inside the
//! script passes the script's environment to every step, on every node.
//! Without a mark, each node would take those as the user's and keep them,
//! so a node whose port list differs (one port down) would get the batch
//! node's list. The plugin therefore records what it set in
//! `GPU_HEALTH_NCCL_SET` (`NAME:hash` of the value, comma separated): a
//! variable whose value still has the recorded hash is the plugin's and is
//! derived again for this node; one the user changed is kept.

pub const MARKER: &str = "GPU_HEALTH_NCCL_SET";

/// 64-bit FNV-1a: short, stable across builds and hosts.
fn hash(value: &str) -> u64 {
    value.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What a previous step of the job set: (name, hash of its value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetByPlugin(Vec<(String, u64)>);

impl SetByPlugin {
    /// Parse the marker's value; malformed entries are ignored (a user
    /// who edits the marker only loses the re-derivation).
    pub fn parse(marker: Option<&str>) -> Self {
        let entries = marker
            .unwrap_or_default()
            .split(',')
            .filter_map(|e| {
                let (name, h) = e.split_once(':')?;
                Some((name.to_string(), u64::from_str_radix(h, 16).ok()?))
            })
            .collect();
        SetByPlugin(entries)
    }

    /// Is `current` (the job's value of `name`) the one the plugin set?
    pub fn is_plugins(&self, name: &str, current: &str) -> bool {
        let h = hash(current);
        self.0.iter().any(|(n, v)| n == name && *v == h)
    }

    pub fn record(&mut self, name: &str, value: &str) {
        self.0.retain(|(n, _)| n != name);
        self.0.push((name.to_string(), hash(value)));
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn render(&self) -> String {
        self.0
            .iter()
            .map(|(n, h)| format!("{n}:{h:016x}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Whether to write `name` given its current value in the job.
pub fn should_write(current: Option<&str>, name: &str, forced: bool, set: &SetByPlugin) -> bool {
    match current {
        None => true,
        Some(_) if forced => true,
        Some(cur) => set.is_plugins(name, cur),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plugins_values_are_recognised_users_are_not() {
        let mut set = SetByPlugin::default();
        set.record("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1");
        set.record("NCCL_IB_TIMEOUT", "22");
        let parsed = SetByPlugin::parse(Some(&set.render()));
        assert_eq!(parsed, set);
        assert!(should_write(
            Some("=mlx5_0:1,mlx5_1:1"),
            "NCCL_IB_HCA",
            false,
            &parsed
        ));
        // The user changed it after the batch step set it: theirs now.
        assert!(!should_write(Some("19"), "NCCL_IB_TIMEOUT", false, &parsed));
        assert!(!should_write(Some("22"), "NCCL_IB_TC", false, &parsed));
        assert!(should_write(Some("19"), "NCCL_IB_TIMEOUT", true, &parsed));
        assert!(should_write(None, "NCCL_IB_TC", false, &parsed));
    }

    #[test]
    fn malformed_marker_is_ignored() {
        assert!(SetByPlugin::parse(Some("garbage,,A:zz,:")).is_empty());
        assert!(SetByPlugin::parse(None).is_empty());
    }

    proptest! {
        #[test]
        fn any_marker_text_parses_without_panic(s in any::<String>()) {
            let _ = SetByPlugin::parse(Some(&s)).render();
        }
    }
}
