//! The power report's reading (`gpu-health report --power`): of each
//! record only what the power figures need (job, node, user, times, the
//! GPUs' energy, the sampled peak), parsed without building the rest of the record, which
//! makes it about 1.5x faster than reading whole records.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;

use super::power::JobEnergy;
use super::read::{visit_records, workers, Line, LinePrecheck};
use super::summary::ReportFilter;

/// The fields of a record that the power report reads.
#[derive(Deserialize)]
struct EnergyLine<'a> {
    #[serde(borrow)]
    job_id: Cow<'a, str>,
    #[serde(borrow)]
    node: Cow<'a, str>,
    #[serde(borrow, default)]
    user: Option<Cow<'a, str>>,
    start_ms: Option<u64>,
    end_ms: u64,
    gpus: Vec<EnergyGpu>,
    #[serde(default)]
    peak_power_w: Option<f64>,
}

#[derive(Deserialize)]
struct EnergyGpu {
    energy_j: Option<f64>,
}

/// One record's energy on its node over its own time, or why it cannot be
/// placed: no start (no start snapshot) or no GPU with an energy figure.
type Placed = Result<JobEnergy, (String, String, u64)>;

/// What `--power` read.
#[derive(Debug, Default)]
pub struct ReadEnergies {
    pub energies: Vec<JobEnergy>,
    /// Records without a start or without any energy figure.
    pub left_out: usize,
    pub malformed: usize,
    pub errors: Vec<String>,
}

/// Pure: a record's energy (the sum of its GPUs' figures), when it has a
/// start and at least one figure.
fn place(r: EnergyLine<'_>) -> Placed {
    let figures: Vec<f64> = r.gpus.iter().filter_map(|g| g.energy_j).collect();
    match (r.start_ms, figures.is_empty()) {
        (Some(start_ms), false) => Ok(JobEnergy {
            job_id: r.job_id.into_owned(),
            node: r.node.into_owned(),
            start_ms,
            end_ms: r.end_ms,
            energy_j: figures.iter().sum(),
            peak_w: r.peak_power_w,
        }),
        _ => Err((r.job_id.into_owned(), r.node.into_owned(), r.end_ms)),
    }
}

/// Whether `filter` keeps the record: its job, its user (a record
/// without a user is kept, as for the other reports) and its end.
fn keeps(filter: &ReportFilter, r: &EnergyLine<'_>) -> bool {
    filter.job.as_deref().is_none_or(|j| j == r.job_id)
        && filter
            .user
            .as_deref()
            .is_none_or(|u| r.user.as_deref().is_none_or(|ru| ru == u))
        && filter.since_ms.is_none_or(|s| r.end_ms >= s)
        && filter.until_ms.is_none_or(|u| r.end_ms < u)
        && filter.node.as_deref().is_none_or(|n| n == r.node)
}

/// The records' energies per job and node, each record once (a record
/// written twice has the same job, node and end).
pub fn read_energies(records_dir: &Path, filter: &ReportFilter) -> ReadEnergies {
    let mut out = ReadEnergies::default();
    let precheck = LinePrecheck::new(filter);
    let parse = |text: &str| match serde_json::from_str::<EnergyLine>(text) {
        Ok(r) if keeps(filter, &r) => Line::Keep(place(r)),
        Ok(_) => Line::Skip,
        Err(_) => Line::Malformed,
    };
    let mut seen = HashSet::new();
    let take = |placed: Placed| {
        let key = match &placed {
            Ok(e) => (e.job_id.clone(), e.node.clone(), e.end_ms),
            Err(k) => k.clone(),
        };
        if !seen.insert(key) {
            return;
        }
        match placed {
            Ok(e) => out.energies.push(e),
            Err(_) => out.left_out += 1,
        }
    };
    out.malformed = visit_records(
        records_dir,
        &precheck,
        workers(),
        &mut out.errors,
        parse,
        take,
    );
    out
}
