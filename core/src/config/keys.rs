//! The allowed range of every numeric key: one table, used by validation
//! and checked against docs/configuration.md, the man page and the
//! example configuration by the tests (the defaults come from
//! `Config::default()` itself).

/// `key` (dotted, `section.key`) must lie within `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyRange {
    pub key: &'static str,
    pub min: f64,
    pub max: f64,
}

const fn range(key: &'static str, min: f64, max: f64) -> KeyRange {
    KeyRange { key, min, max }
}

/// Real NVML on a healthy node with persistence mode answers a probe in
/// tens of ms; without it `nvmlInit` can take hundreds. A deadline below
/// this would drain healthy nodes, so it is a configuration error.
pub const NVML_DEADLINE_FLOOR_MS: u64 = 200;

pub const RANGES: &[KeyRange] = &[
    range("nvml_deadline_ms", NVML_DEADLINE_FLOOR_MS as f64, 120_000.0),
    range("scontrol_timeout_ms", 500.0, 120_000.0),
    range("expected_gpus", 0.0, 64.0),
    range("thresholds.max_temperature_c", 30.0, 150.0),
    range("thresholds.min_power_limit_ratio", 0.0, 1.0),
    range("thresholds.near_oom_share", 0.5, 1.0),
    range("thresholds.leftover_memory_mib", 0.0, 1_048_576.0),
    range("power.racks.supply_kw", 0.1, 1000.0),
    range("power.racks.cooling_kw", 0.1, 1000.0),
    range("power.racks.node_overhead_w", 0.0, 100_000.0),
    range("xid.lookback_hours", 1.0, 8784.0),
    range("xid.journal_timeout_ms", 100.0, 60_000.0),
    range("xid.rules.repeat", 1.0, 1000.0),
    range("xid.rules.window_minutes", 1.0, 10_080.0),
    range("xid.rules.escalate_after", 0.0, 1000.0),
    range("xid.rules.escalate_window_hours", 1.0, 8784.0),
    range("xid.rules.escalate_burst_seconds", 0.0, 86_400.0),
    range("brake.max_drained_fraction", 0.0, 1.0),
    range("brake.settle_ms", 100.0, 10_000.0),
    range("brake.claim_timeout_ms", 200.0, 60_000.0),
    range("brake.max_drained", 0.0, 1_000_000.0),
    range("brake.window_minutes", 0.0, 1440.0),
    range("brake.max_window_fraction", 0.0, 1.0),
    range("recovery.quiet_time_s", 0.0, 604_800.0),
    range("recovery.escalate_after_returns", 0.0, 100.0),
    range("recovery.escalate_window_hours", 1.0, 8784.0),
    range("remediation.max_reboots", 1.0, 100.0),
    range("remediation.window_hours", 1.0, 8784.0),
    range("dcgm.level", 1.0, 4.0),
    range("dcgm.timeout_ms", 1.0, 600_000.0),
    range("rdma.expected_count", 0.0, 64.0),
    range("rdma.expected_rate_gbps", 1.0, 10_000.0),
    range("step_end.timeout_ms", 200.0, 60_000.0),
    range("acceptance.timeout_s", 60.0, 21_600.0),
    range("acceptance.dcgm_level", 1.0, 4.0),
    range("acceptance.dcgm_timeout_s", 10.0, 7_200.0),
    range("acceptance.all_reduce_timeout_s", 10.0, 3_600.0),
    range("acceptance.nvbandwidth_timeout_s", 10.0, 3_600.0),
    range("acceptance.ib_bw_timeout_s", 5.0, 600.0),
    range("acceptance.rdma_min_fraction", 0.05, 1.0),
    range("acceptance.models.all_reduce_gbs", 1.0, 10_000.0),
    range("acceptance.models.h2d_gbs", 1.0, 10_000.0),
    range("acceptance.models.rdma_gbps", 1.0, 10_000.0),
    range("acceptance.models.rdma_fraction", 0.05, 1.0),
];

/// The range of `key`, when it has one.
pub fn range_of(key: &str) -> Option<&'static KeyRange> {
    RANGES.iter().find(|r| r.key == key)
}

impl KeyRange {
    /// `200..=120000`, as the documentation writes it.
    pub fn describe(&self) -> String {
        format!("{}..={}", self.min, self.max)
    }
}

/// Refuse `value` for `key` when it is outside the key's range (NaN
/// included). A key without a range accepts anything.
pub fn check(key: &str, value: f64) -> Result<(), String> {
    match range_of(key) {
        Some(r) if !(r.min..=r.max).contains(&value) => {
            Err(format!("{key} = {value} is outside {}", r.describe()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        assert!(check("nvml_deadline_ms", 199.0).is_err());
        assert!(check("nvml_deadline_ms", 200.0).is_ok());
        assert!(check("brake.max_drained_fraction", f64::NAN).is_err());
        assert_eq!(
            check("brake.settle_ms", 20_000.0).unwrap_err(),
            "brake.settle_ms = 20000 is outside 100..=10000"
        );
        assert!(check("no.such.key", 1e99).is_ok());
        assert_eq!(range_of("dcgm.level").unwrap().describe(), "1..=4");
    }
}
