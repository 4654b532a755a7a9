//! `gpu-health step-end --gpus LIST --since-ms MS [--job ID] [--step NAME]
//! [--config FILE]`: what the SPANK plugin runs when a step's last task on
//! a node has ended. Prints the notice for the job's user (the step's
//! GPUs that came near out of memory) on one line, or nothing; the plugin
//! passes it on to the step's output. Read only.
//!
//! `--gpus` is what the step claims (from the job's environment, which its
//! user controls): only the GPUs the job owns by the Prolog's record of
//! job ID are reported, and nothing without that record.

use std::path::PathBuf;

use gpu_health_core::ids::JobId;
use gpu_health_core::run::step_end::{self, EndedStep};
use gpu_health_core::run::{RunContext, StateAccess};
use gpu_health_core::verdict::parse_gpu_list;
use lexopt::ValueExt;

const USAGE: &str =
    "usage: gpu-health step-end --gpus LIST --since-ms MS [--job ID] [--step NAME] [--config FILE]";

pub fn run(args: &[String]) -> i32 {
    let (step, config) = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!(
                "{USAGE}\n\nRun by the SPANK plugin when a step's last task on this node has ended:\n\
                 prints one line for the job's user when one of the step's GPUs (node indices,\n\
                 e.g. 0,2-3) came near out of memory since MS (Unix ms), nothing otherwise.\n\
                 Only GPUs that job ID owns by the Prolog's record (its verdict in state_dir)\n\
                 are reported; without --job or that record, none. Drains nothing and stores\n\
                 nothing."
            );
            return 0;
        }
        Err(e) => return crate::usage_error("step-end", e, USAGE),
    };
    let ctx = RunContext::start(
        |k| std::env::var(k).ok(),
        config.as_deref(),
        StateAccess::Read,
    );
    if let Some(notice) = step_end::run(&ctx, &step) {
        println!("{notice}");
    }
    0
}

type Parsed = (EndedStep, Option<PathBuf>);

/// `Ok(None)` for --help.
fn parse(args: &[String]) -> Result<Option<Parsed>, lexopt::Error> {
    use lexopt::Arg::{Long, Short};
    let custom = |e: String| lexopt::Error::Custom(e.into());
    let mut parser = lexopt::Parser::from_args(args);
    let (mut gpus, mut since_ms, mut job_id, mut name, mut config) = (None, None, None, None, None);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("gpus") => {
                let v = parser.value()?.string()?;
                gpus = Some(parse_gpu_list(&v).map_err(custom)?);
            }
            Long("since-ms") => since_ms = Some(parser.value()?.parse::<u64>()?),
            Long("job") => {
                let v = parser.value()?.string()?;
                job_id = Some(JobId::parse(&v).map_err(|e| custom(e.to_string()))?);
            }
            Long("step") => name = Some(parser.value()?.string()?),
            Long("config") => config = Some(PathBuf::from(parser.value()?)),
            Long("help") | Short('h') => return Ok(None),
            other => return Err(other.unexpected()),
        }
    }
    let missing = |what: &str| lexopt::Error::MissingValue {
        option: Some(what.into()),
    };
    let gpus = gpus.ok_or_else(|| missing("--gpus"))?;
    let since_ms = since_ms.ok_or_else(|| missing("--since-ms"))?;
    let step = name.unwrap_or_else(|| match job_id {
        Some(j) => format!("of job {j}"),
        None => "?".into(),
    });
    Ok(Some((
        EndedStep {
            job_id,
            step,
            gpus,
            since_ms,
        },
        config,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
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
