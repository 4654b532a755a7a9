//! The highest power each of a job's GPUs drew, sampled: at job start (the
//! prolog's probe), at every health check while the job runs, and at job
//! end (the epilog's probe). NVML keeps no peak of its own over a job, and
//! gpu-health runs no daemon, so the peak is that of these samples: with
//! `HealthCheckInterval=60` one sample a minute. The health check keeps
//! the running peaks in `StateFile::JobPowerPeaks`; the epilog folds them
//! into the record and removes the file.

use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::snapshot::NodeSnapshot;
use crate::state::{StateDir, StateFile};

use super::start::JobStart;

pub const PEAKS_VERSION: u32 = 1;

/// One job's sampled peaks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerPeaks {
    pub version: u32,
    pub gpus: Vec<GpuPeak>,
    /// The highest sum of the job's GPUs at one sample (the GPUs' own
    /// peaks may fall at different moments).
    #[serde(default)]
    pub total: Option<TotalPeak>,
}

/// The job's GPUs on this node together, at the sample that drew most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TotalPeak {
    pub max_mw: u64,
    pub at_ms: u64,
}

/// One GPU's highest sample so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuPeak {
    pub index: u32,
    pub max_mw: u32,
    /// Unix ms of the highest sample.
    pub at_ms: u64,
    /// Samples taken.
    pub samples: u32,
}

impl PowerPeaks {
    pub fn gpu(&self, index: u32) -> Option<&GpuPeak> {
        self.gpus.iter().find(|g| g.index == index)
    }

    /// Pure: add one sample of `mw` on GPU `index`.
    pub fn add(&mut self, index: u32, mw: u32, at_ms: u64) {
        match self.gpus.iter_mut().find(|g| g.index == index) {
            Some(g) => {
                g.samples = g.samples.saturating_add(1);
                if mw > g.max_mw {
                    (g.max_mw, g.at_ms) = (mw, at_ms);
                }
            }
            None => self.gpus.push(GpuPeak {
                index,
                max_mw: mw,
                at_ms,
                samples: 1,
            }),
        }
    }

    /// Pure: the samples of the job's GPUs in `snapshot` (a GPU whose UUID
    /// is not the one it had at job start is another GPU: not sampled).
    pub fn add_snapshot(&mut self, start: &JobStart, snapshot: &NodeSnapshot) {
        let mut sum: Option<u64> = None;
        for &index in &start.job_gpus {
            let Some(g) = snapshot.gpu_by_index(index) else {
                continue;
            };
            let was = start.gpu(index).and_then(|c| c.uuid.as_deref());
            if was.is_some() && g.uuid.is_some() && was != g.uuid.as_deref() {
                continue;
            }
            if let Some(mw) = g.power_usage_mw {
                self.add(index, mw, snapshot.taken_at_ms);
                sum = Some(sum.unwrap_or(0) + u64::from(mw));
            }
        }
        if let Some(mw) = sum {
            self.add_total(mw, snapshot.taken_at_ms);
        }
    }

    /// Pure: one sample of the job's GPUs together.
    pub fn add_total(&mut self, mw: u64, at_ms: u64) {
        if self.total.is_none_or(|t| mw > t.max_mw) {
            self.total = Some(TotalPeak { max_mw: mw, at_ms });
        }
    }
}

/// The health check's part: one sample of every running job's GPUs from
/// its probe, and the peaks of jobs that are over (no start snapshot:
/// their epilog has run) removed. Problems are logged, never fatal.
pub fn sample_running_jobs(state: &StateDir, snapshot: &NodeSnapshot) {
    if snapshot.nvml_error.is_some() {
        return;
    }
    let running = state.job_starts();
    for job in running.iter().copied() {
        if let Err(e) = sample_job(state, job, snapshot) {
            log::info!("job {job}: power not sampled: {e}");
        }
    }
    for job in state.job_power_peaks() {
        if !running.contains(&job) {
            let _ = state.remove(StateFile::JobPowerPeaks(job));
        }
    }
}

fn sample_job(state: &StateDir, job: JobId, snapshot: &NodeSnapshot) -> Result<(), String> {
    let Some(start) = state
        .load::<JobStart>(job)
        .map_err(|e| e.to_string())?
        .filter(|s| s.job_id == job)
    else {
        return Ok(());
    };
    let mut peaks = state
        .load::<PowerPeaks>(job)
        .unwrap_or_default()
        .unwrap_or_default();
    peaks.version = PEAKS_VERSION;
    peaks.add_snapshot(&start, snapshot);
    if peaks.gpus.is_empty() {
        return Ok(());
    }
    state.save(job, &peaks).map_err(|e| e.to_string())
}

impl crate::state::StateValue for PowerPeaks {
    type Key = JobId;
    fn file(job: JobId) -> crate::state::StateFile {
        crate::state::StateFile::JobPowerPeaks(job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::NodeName;
    use crate::snapshot::GpuSnapshot;

    fn snap(at_ms: u64, draws: &[(u32, u32, &str)]) -> NodeSnapshot {
        NodeSnapshot {
            taken_at_ms: at_ms,
            gpus: draws
                .iter()
                .map(|&(index, mw, uuid)| GpuSnapshot {
                    index,
                    uuid: Some(uuid.into()),
                    power_usage_mw: Some(mw),
                    ..GpuSnapshot::default()
                })
                .collect(),
            ..NodeSnapshot::default()
        }
    }

    #[test]
    fn the_highest_sample_of_the_jobs_gpus_is_kept() {
        let node = NodeName::parse("n1").unwrap();
        let at_start = snap(
            1_000,
            &[(0, 100_000, "A"), (1, 90_000, "B"), (2, 80_000, "C")],
        );
        let start = JobStart::from_snapshot(JobId::from(7), &node, &[0, 1], &at_start, None, 1_000);
        let mut peaks = PowerPeaks::default();
        peaks.add_snapshot(
            &start,
            &snap(
                2_000,
                &[(0, 650_000, "A"), (1, 95_000, "B"), (2, 700_000, "C")],
            ),
        );
        peaks.add_snapshot(&start, &snap(3_000, &[(0, 300_000, "A"), (1, 99_000, "B")]));
        // GPU1 is another board now (UUID changed): not sampled.
        peaks.add_snapshot(
            &start,
            &snap(4_000, &[(0, 310_000, "A"), (1, 999_000, "X")]),
        );
        assert_eq!(
            peaks.gpus,
            vec![
                GpuPeak {
                    index: 0,
                    max_mw: 650_000,
                    at_ms: 2_000,
                    samples: 3
                },
                GpuPeak {
                    index: 1,
                    max_mw: 99_000,
                    at_ms: 3_000,
                    samples: 2
                },
            ]
        );
        assert_eq!(peaks.gpu(2), None, "not a job GPU");
        assert_eq!(
            peaks.total,
            Some(TotalPeak {
                max_mw: 745_000,
                at_ms: 2_000
            }),
            "the two GPUs at the one moment that drew most"
        );
    }
}
