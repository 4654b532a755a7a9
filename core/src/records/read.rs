//! Reading records back (`gpu-health report`).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::record::JobRecord;
use super::store::JOBS_FILE;

/// Records found, and how many lines were not records.
#[derive(Debug, Default)]
pub struct ReadRecords {
    pub records: Vec<JobRecord>,
    pub malformed: usize,
    /// Files that could not be read, with why.
    pub errors: Vec<String>,
}

/// `jobs.jsonl` and its rotated, uncompressed siblings (`jobs.jsonl.1`,
/// `jobs.jsonl-20250101`), oldest first.
fn record_files(records_dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(records_dir) else {
        return vec![records_dir.join(JOBS_FILE)];
    };
    let mut rotated: Vec<(std::time::SystemTime, PathBuf)> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rotated = name.len() > JOBS_FILE.len()
                && name.starts_with(JOBS_FILE)
                && !name.ends_with(".gz")
                && !name.ends_with(".xz")
                && !name.ends_with(".zst");
            if !rotated {
                return None;
            }
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((modified, e.path()))
        })
        .collect();
    rotated.sort();
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    files.push(records_dir.join(JOBS_FILE));
    files
}

/// Every record of the records directory. A record spooled and then
/// written twice (crash between append and spool removal) counts once.
pub fn read_records(records_dir: &Path) -> ReadRecords {
    let mut out = ReadRecords::default();
    let mut seen = HashSet::new();
    for path in record_files(records_dir) {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.errors.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        for line in BufReader::new(file).split(b'\n') {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    out.errors.push(format!("{}: {e}", path.display()));
                    break;
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<JobRecord>(&line) {
                Ok(r) => {
                    if seen.insert((r.job_id.clone(), r.node.clone(), r.end_ms)) {
                        out.records.push(r);
                    }
                }
                Err(_) => out.malformed += 1,
            }
        }
    }
    out
}
