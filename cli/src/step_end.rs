//! `gpu-health step-end --gpus LIST --since-ms MS [--job ID] [--step NAME]
//! [--config FILE]`: what the SPANK plugin runs when a step's last task on
//! a node has ended. Prints the notice for the job's user (the step's
//! GPUs that came near out of memory) on one line, or nothing; the plugin
//! passes it on to the step's output. Read only.
//!
//! `--gpus` is what the step claims (from the job's environment, which its
//! user controls): only the GPUs the job owns by the Prolog's record of
//! job ID are reported, and nothing without that record.

use gpu_health_core::ids::JobId;
use gpu_health_core::run::step_end::{self, EndedStep};
use gpu_health_core::run::RunContext;
use gpu_health_core::verdict::parse_gpu_list;

use crate::spec::Parsed;

pub fn run(p: &Parsed, start: impl FnOnce() -> RunContext) -> i32 {
    let step = match step_of(p) {
        Ok(s) => s,
        Err(e) => return crate::usage_error(&crate::commands::STEP_END, &e),
    };
    let ctx = start();
    if let Some(notice) = step_end::run(&ctx, &step) {
        println!("{notice}");
    }
    0
}

/// The ended step the options describe.
fn step_of(p: &Parsed) -> Result<EndedStep, String> {
    let gpus = parse_gpu_list(p.value("gpus").unwrap_or_default())
        .map_err(|e| format!("option '--gpus': {e}"))?;
    let since_ms = p.parsed::<u64>("since-ms")?.unwrap_or_default();
    let job_id = p
        .value("job")
        .map(JobId::parse)
        .transpose()
        .map_err(|e| format!("option '--job': {e}"))?;
    let step = p.value("step").map_or_else(
        || match job_id {
            Some(j) => format!("of job {j}"),
            None => "?".into(),
        },
        str::to_string,
    );
    Ok(EndedStep {
        job_id,
        step,
        gpus,
        since_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// The step and `--config` of a command line; `Ok(None)` for --help.
    fn parse(a: &[String]) -> Result<Option<(EndedStep, Option<String>)>, String> {
        match crate::spec::parse(&crate::commands::STEP_END, a)? {
            crate::spec::Outcome::Help => Ok(None),
            crate::spec::Outcome::Run(p) => {
                Ok(Some((step_of(&p)?, p.value("config").map(String::from))))
            }
        }
    }

    #[test]
    fn the_plugins_arguments_parse() {
        let (step, config) = parse(&args(&[
            "--gpus",
            "0,2-3",
            "--since-ms",
            "1700000000000",
            "--job",
            "42",
            "--step",
            "42.0",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(step.gpus, vec![0, 2, 3]);
        assert_eq!(step.since_ms, 1_700_000_000_000);
        assert_eq!(step.job_id.map(|j| j.get()), Some(42));
        assert_eq!(step.step, "42.0");
        assert_eq!(config, None);
    }

    #[test]
    fn missing_or_bad_values_are_usage_errors() {
        assert!(parse(&args(&["--since-ms", "1"])).is_err());
        assert!(parse(&args(&["--gpus", "0"])).is_err());
        assert!(parse(&args(&["--gpus", "x", "--since-ms", "1"])).is_err());
        assert!(parse(&args(&["--gpus", "0", "--since-ms", "-5"])).is_err());
        assert!(parse(&args(&["--help"])).unwrap().is_none());
    }
}
