//! What one health check gives the acceptance tier after a boot: Slurm's
//! limit for the HealthCheckProgram (60 s; `HealthCheckTimeout` on 26.05
//! and later) less what the run spent before the tier and what it needs
//! after it (a second look at NVML and the kernel log, its turn and its
//! Slurm calls, each bounded by its own limit). A step runs whenever its
//! own limit fits in that; one that does not waits for the next health
//! check, and a warn-level line says so when nothing ran.

use std::time::Duration;

use crate::slurm::show_config::HEALTH_CHECK_TIMEOUT_S;
use crate::slurm::Scontrol;

use super::super::RunContext;

/// Kept beyond the limits of what follows the tier (process exit, logs).
const MARGIN: Duration = Duration::from_secs(1);

pub(super) struct TierBudget {
    /// Slurm's limit for the health check, seconds.
    pub limit_s: u64,
    /// What the run spent before the tier.
    pub spent: Duration,
    /// What the run keeps for after the tier.
    pub reserve: Duration,
}

impl TierBudget {
    /// Read now, just before the tier starts.
    pub fn now(ctx: &RunContext) -> TierBudget {
        let cfg = ctx.config();
        let limit_s = limit_s(ctx);
        TierBudget {
            limit_s,
            spent: ctx.started.elapsed(),
            reserve: Duration::from_millis(cfg.nvml_deadline_ms + cfg.scontrol_timeout_ms) + MARGIN,
        }
    }

    /// What the tier may spend.
    pub fn left(&self) -> Duration {
        Duration::from_secs(self.limit_s).saturating_sub(self.spent + self.reserve)
    }

    pub fn describe(&self) -> String {
        format!(
            "{} s left of the health check's {} s ({:.1} s spent before the tier, {:.1} s kept for the check and the return after it)",
            self.left().as_secs(),
            self.limit_s,
            self.spent.as_secs_f64(),
            self.reserve.as_secs_f64()
        )
    }
}

/// Slurm's limit for the HealthCheckProgram: `HealthCheckTimeout` where
/// the series prints it, else 60 s.
fn limit_s(ctx: &RunContext) -> u64 {
    if ctx.slurm.is_some() {
        // A run given its Slurm (tests of the run layer) has no scontrol.
        return HEALTH_CHECK_TIMEOUT_S;
    }
    let cfg = ctx.config();
    let scontrol = Scontrol::new(
        &cfg.scontrol,
        Duration::from_millis(cfg.scontrol_timeout_ms),
    );
    match scontrol.health_check_timeout_s() {
        Ok(Some(s)) => s,
        Ok(None) => HEALTH_CHECK_TIMEOUT_S,
        Err(e) => {
            log::warn!(
                "{}: cannot read HealthCheckTimeout from Slurm ({e}); the acceptance tier counts with {HEALTH_CHECK_TIMEOUT_S} s",
                ctx.node
            );
            HEALTH_CHECK_TIMEOUT_S
        }
    }
}
