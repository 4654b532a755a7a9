//! What gpu-health reads of `scontrol show config`: the time Slurm gives
//! the HealthCheckProgram. Slurm 26.05 added `HealthCheckTimeout`
//! (seconds, default 60); the series before it kill the program after a
//! fixed 60 s and do not print the key.

use super::{Scontrol, SlurmError};

/// What Slurm gives a health check where it does not say (every series
/// before 26.05).
pub const HEALTH_CHECK_TIMEOUT_S: u64 = 60;

/// The largest `HealthCheckTimeout` Slurm accepts.
const MAX_HEALTH_CHECK_TIMEOUT_S: u64 = 65_535;

impl Scontrol<'_> {
    /// The health check's time limit as this Slurm prints it (`None`: the
    /// series has no such key).
    pub fn health_check_timeout_s(&self) -> Result<Option<u64>, SlurmError> {
        Ok(health_check_timeout_s(&self.run(&["show", "config"])?))
    }
}

/// `HealthCheckTimeout = 120 sec` (the `key = value` lines of `scontrol
/// show config`; the unit is printed after the number).
pub fn health_check_timeout_s(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        if key.trim() != "HealthCheckTimeout" {
            return None;
        }
        let n: u64 = value.split_whitespace().next()?.parse().ok()?;
        (1..=MAX_HEALTH_CHECK_TIMEOUT_S).contains(&n).then_some(n)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_where_the_series_prints_it() {
        let text = "Configuration data as of 2026-12-01T10:00:00\n\
                    HealthCheckInterval     = 300 sec\n\
                    HealthCheckNodeState    = ANY\n\
                    HealthCheckProgram      = /usr/sbin/gpu-health-prolog\n\
                    HealthCheckTimeout      = 120 sec\n";
        assert_eq!(health_check_timeout_s(text), Some(120));
        assert_eq!(health_check_timeout_s("HealthCheckTimeout=90\n"), Some(90));
        // 22.05 and 24.11 print no such key.
        assert_eq!(health_check_timeout_s(&text.replace("Timeout", "X")), None);
        for bad in [
            "HealthCheckTimeout = x",
            "HealthCheckTimeout = 0 sec",
            "HealthCheckTimeout = 99999999",
        ] {
            assert_eq!(health_check_timeout_s(bad), None, "{bad}");
        }
    }
}
