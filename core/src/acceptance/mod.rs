//! The acceptance tier: gates that prove an idle node before it returns
//! to service (docs/acceptance.md). Each gate runs one tool with a time
//! limit and no shell, its output is parsed here (`nccl`, `nvbandwidth`,
//! `perftest`; DCGM's by `checks::dcgm`) and judged against the model's
//! thresholds (`thresholds`). Judging is pure (`judge`); running is in
//! `tier`.
//!
//! Three verdicts per gate: passed, failed (figure below threshold, or a
//! wrong result) and not judged (tool missing, time-out, exit status,
//! output it cannot read, no threshold). A not-judged gate is never a
//! pass and never a hardware verdict: it holds the node drained with its
//! reason (except "no threshold", which only says so), and an admin
//! decides.
//!
//! The tier never runs while a job runs on the node, and never on a job's
//! start path: the caller says whether a job runs.

pub mod coverage;
pub mod judge;
pub mod nccl;
pub mod nvbandwidth;
pub mod perftest;
pub mod thresholds;
mod tier;

use serde::Serialize;

pub use crate::config::GateName;
pub use judge::{GateResult, ToolRun, Verdict};
pub use tier::{
    hcas_of, run_tier, run_tier_within, wanted, Boot, Hca, TierInput, TierOutcome, Within,
};

/// Largest output kept from one tool (a table is a few KiB; a tool gone
/// mad must not fill memory).
pub const MAX_OUTPUT: usize = 1 << 20;

/// Lines a parser reads at most.
pub(crate) const MAX_LINES: usize = 100_000;

/// A tool's output that is not the table it should print.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl ParseError {
    pub(crate) fn new(why: &str) -> ParseError {
        ParseError(one_line(why))
    }
}

/// One line of at most 160 characters (for reasons and tables).
pub(crate) fn one_line(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= 160 {
        return joined;
    }
    let mut cut: String = joined.chars().take(157).collect();
    cut.push_str("...");
    cut
}
