//! Reading records back (`gpu-health report`).
//!
//! Only regular files are read, line by line with a bounded buffer, so a
//! FIFO, a device or one endless line in the records directory cannot hang
//! the report or make it allocate without bound. With a [`ReportFilter`],
//! lines that certainly belong to no selected job are skipped before they
//! are parsed (see [`LinePrecheck`]).

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};

use memchr::memmem;

use super::summary::{GpuSink, JobSummary, ReportFilter, Summarizer, SummaryGpu};
use crate::records::record::JobRecord;
use crate::state::RECORDS_FILE as JOBS_FILE;

/// Longest line taken as a record; longer ones count as malformed. An
/// 8-GPU record is a few KiB.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Read buffer size: many records per read() call.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Records found, and how many lines were not records.
#[derive(Debug, Default)]
pub struct ReadRecords {
    pub records: Vec<JobRecord>,
    /// Lines that were not records (or longer than [`MAX_LINE_BYTES`]).
    /// With a filter, only lines that passed the byte pre-check were
    /// parsed, so this counts only those.
    pub malformed: usize,
    /// Files that could not be read, with why.
    pub errors: Vec<String>,
}

/// Jobs summed from the records, and how many lines were not records.
#[derive(Debug)]
pub struct ReadJobs<G = Vec<SummaryGpu>> {
    /// Ordered by the jobs' last end, as [`crate::records::summarize`] orders them.
    pub jobs: Vec<JobSummary<G>>,
    /// As [`ReadRecords::malformed`].
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

/// Opens a record file; `Ok(None)` when it does not exist. O_NONBLOCK so
/// that opening a FIFO does not wait for a writer, O_NOFOLLOW so that a
/// link planted in the directory is not followed, then fstat on the open
/// descriptor (no race with a rename) to read regular files only.
fn open_record_file(path: &Path) -> Result<Option<File>, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(format!("{}: a symbolic link, not read", path.display()))
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let kind = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .file_type();
    if kind.is_file() {
        return Ok(Some(file));
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(format!("{}: {what}, not read", path.display()))
}

/// Calls `line` for each line of `reader` (without its newline) and
/// `overlong` for each line longer than [`MAX_LINE_BYTES`], which is
/// skipped up to its newline without being kept in memory.
fn for_each_line<R: std::io::Read>(
    reader: R,
    mut line: impl FnMut(&[u8]),
    mut overlong: impl FnMut(),
) -> std::io::Result<()> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    // A line that spans buffer refills; lines inside the buffer are
    // handed over without a copy.
    let mut pending: Vec<u8> = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            // A last line without its newline (torn write) still counts.
            if too_long {
                overlong();
            } else if !pending.is_empty() {
                line(&pending);
            }
            return Ok(());
        }
        let (chunk, ends_line) = match memchr::memchr(b'\n', buf) {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        if !too_long && pending.len() + chunk.len() > MAX_LINE_BYTES {
            too_long = true;
            pending = Vec::new();
        }
        if ends_line {
            if too_long {
                overlong();
            } else if pending.is_empty() {
                line(chunk);
            } else {
                pending.extend_from_slice(chunk);
                line(&pending);
                pending.clear();
            }
            too_long = false;
        } else if !too_long {
            pending.extend_from_slice(chunk);
        }
        let used = chunk.len() + usize::from(ends_line);
        reader.consume(used);
    }
}

/// Byte-level test of whether a line may hold a record that
/// [`ReportFilter::keeps_record`] keeps, so that the other lines need not
/// be parsed. It answers "no" only when that is certain: the line is a
/// JSON object without any backslash (so no escape can spell a key or
/// value in other bytes), and no `"job_id"` key in it is followed by the
/// wanted id as a string (likewise `"user"` by the wanted name or null).
/// Whatever it lets through is parsed and compared exactly.
pub(super) struct LinePrecheck<'f> {
    job: Option<&'f [u8]>,
    user: Option<&'f [u8]>,
    /// Only records with a GPU flagged `"near_oom": true` matter.
    near_oom_only: bool,
    job_key: memmem::Finder<'static>,
    user_key: memmem::Finder<'static>,
    near_oom_key: memmem::Finder<'static>,
}

impl<'f> LinePrecheck<'f> {
    pub(super) fn new(filter: &'f ReportFilter) -> Self {
        Self {
            job: filter.job.as_deref().map(str::as_bytes),
            user: filter.user.as_deref().map(str::as_bytes),
            near_oom_only: false,
            job_key: memmem::Finder::new(b"\"job_id\""),
            user_key: memmem::Finder::new(b"\"user\""),
            near_oom_key: memmem::Finder::new(b"\"near_oom\""),
        }
    }

    /// Also skip the lines in which no `"near_oom"` key is `true`.
    pub(super) fn near_oom_only(mut self, yes: bool) -> Self {
        self.near_oom_only = yes;
        self
    }

    pub(super) fn may_keep(&self, line: &[u8]) -> bool {
        if self.job.is_none() && self.user.is_none() && !self.near_oom_only {
            return true;
        }
        let start = line.iter().position(|b| !is_json_space(*b));
        if start.is_none_or(|i| line[i] != b'{') || memchr::memchr(b'\\', line).is_some() {
            // Not an object without escapes (serde also takes a record
            // as an array): leave it to the parser.
            return true;
        }
        let string = |value: &'f [u8]| {
            move |rest: &[u8]| {
                rest.strip_prefix(b"\"").is_some_and(|s| {
                    s.len() > value.len() && s.starts_with(value) && s[value.len()] == b'"'
                })
            }
        };
        let job_ok = self
            .job
            .is_none_or(|id| has_value(line, &self.job_key, string(id)));
        let user_ok = || {
            self.user.is_none_or(|u| {
                has_value(line, &self.user_key, |rest| {
                    rest.starts_with(b"null") || string(u)(rest)
                })
            })
        };
        let near_oom_ok = || {
            !self.near_oom_only
                || has_value(line, &self.near_oom_key, |rest| rest.starts_with(b"true"))
        };
        job_ok && user_ok() && near_oom_ok()
    }
}

fn is_json_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_json_space(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| is_json_space(**b)).count();
    &s[n..]
}

/// Whether some occurrence of `key` (quoted) in `line` is followed by
/// `:` and a value that `value` accepts (it sees the bytes from the
/// value on), JSON white space allowed around the colon.
fn has_value(line: &[u8], key: &memmem::Finder, value: impl Fn(&[u8]) -> bool) -> bool {
    let mut from = 0;
    while let Some(found) = key.find(&line[from..]) {
        let at = from + found;
        // Overlapping search: the next candidate may start one byte on.
        from = at + 1;
        let rest = skip_json_space(&line[at + key.needle().len()..]);
        let Some(rest) = rest.strip_prefix(b":") else {
            continue;
        };
        if value(skip_json_space(rest)) {
            return true;
        }
    }
    false
}

/// Bytes of candidate lines handed to a parse worker at a time: enough
/// that the hand-over costs nothing next to parsing, little enough that
/// the chunks in flight (two queued per worker, one being parsed) stay
/// at about 3 MiB per worker.
const CHUNK_BYTES: usize = 1 << 20;

/// Parse workers at most; beyond this the reader and the merge are the
/// bottleneck.
const MAX_WORKERS: usize = 8;

/// What one chunk of lines parsed to.
struct Parsed<T> {
    records: Vec<T>,
    malformed: usize,
}

/// Reads every record file, in order, and passes the lines that
/// `precheck` lets through to `chunk`, newline-terminated, about
/// [`CHUNK_BYTES`] at a time. Files that cannot be read go to `errors`;
/// returns how many lines were too long.
fn read_chunks(
    files: &[PathBuf],
    precheck: &LinePrecheck,
    errors: &mut Vec<String>,
    mut chunk: impl FnMut(Vec<u8>),
) -> usize {
    let mut overlong_total = 0;
    let mut lines: Vec<u8> = Vec::with_capacity(CHUNK_BYTES);
    for path in files {
        let file = match open_record_file(path) {
            Ok(Some(file)) => file,
            Ok(None) => continue,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        let mut overlong = 0;
        let result = for_each_line(
            file,
            |line| {
                if line.iter().all(u8::is_ascii_whitespace) || !precheck.may_keep(line) {
                    return;
                }
                // Hand over before the line would outgrow the buffer, so
                // that it is never reallocated (copied) while filling.
                if !lines.is_empty() && lines.len() + line.len() >= CHUNK_BYTES {
                    chunk(std::mem::replace(
                        &mut lines,
                        Vec::with_capacity(CHUNK_BYTES),
                    ));
                }
                lines.extend_from_slice(line);
                lines.push(b'\n');
            },
            || overlong += 1,
        );
        if overlong > 0 {
            log::debug!(
                "{}: {overlong} line(s) longer than {MAX_LINE_BYTES} bytes skipped",
                path.display()
            );
            overlong_total += overlong;
        }
        if let Err(e) = result {
            errors.push(format!("{}: {e}", path.display()));
        }
    }
    if !lines.is_empty() {
        chunk(lines);
    }
    overlong_total
}

/// What one line is to a reader.
pub(super) enum Line<T> {
    Keep(T),
    /// A record the filter does not keep.
    Skip,
    /// Not a record.
    Malformed,
}

/// Parses newline-terminated lines with `parse`.
fn parse_lines<T>(lines: &[u8], parse: &impl Fn(&str) -> Line<T>) -> Parsed<T> {
    let mut out = Parsed {
        records: Vec::new(),
        malformed: 0,
    };
    for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        // One UTF-8 check of the whole line is cheaper than serde_json's
        // check of every string, and rejects the same lines.
        match std::str::from_utf8(line).map_or(Line::Malformed, parse) {
            Line::Keep(r) => out.records.push(r),
            Line::Skip => {}
            Line::Malformed => out.malformed += 1,
        }
    }
    out
}

/// A whole [`JobRecord`] per line, kept when `filter` may keep it, as
/// `prepare` makes it.
fn job_records<'f, T>(
    filter: &'f ReportFilter,
    prepare: impl Fn(JobRecord) -> T + 'f,
) -> impl Fn(&str) -> Line<T> + 'f {
    move |text| match serde_json::from_str::<JobRecord>(text) {
        Ok(r) if filter.keeps_record(&r) => Line::Keep(prepare(r)),
        Ok(_) => Line::Skip,
        Err(_) => Line::Malformed,
    }
}

/// Calls `f` for each line of the directory's record files that
/// `precheck` lets through and `parse` keeps, in file order, duplicates
/// included. Lines are parsed on worker threads when there are cores for
/// them, and handed to `f` in order. Returns the malformed count.
pub(super) fn visit_records<T: Send>(
    records_dir: &Path,
    precheck: &LinePrecheck,
    workers: usize,
    errors: &mut Vec<String>,
    parse: impl Fn(&str) -> Line<T> + Sync,
    mut f: impl FnMut(T),
) -> usize {
    let files = record_files(records_dir);
    let mut malformed = 0;
    let mut take = |parsed: Parsed<T>| {
        malformed += parsed.malformed;
        parsed.records.into_iter().for_each(&mut f);
    };
    let overlong = if workers < 2 {
        read_chunks(&files, precheck, errors, |lines| {
            take(parse_lines(&lines, &parse))
        })
    } else {
        let parse = |lines: &[u8]| parse_lines(lines, &parse);
        in_parallel(workers, &files, precheck, errors, parse, take)
    };
    malformed + overlong
}

/// The pipeline of [`visit_records`]: a reader thread cuts chunks, the
/// workers parse them, this thread puts the results back in order.
/// Separate reader and merger threads cannot deadlock on the bounded
/// channels: the merger always receives.
fn in_parallel<T: Send>(
    workers: usize,
    files: &[PathBuf],
    precheck: &LinePrecheck,
    errors: &mut Vec<String>,
    parse: impl Fn(&[u8]) -> Parsed<T> + Sync,
    mut take: impl FnMut(Parsed<T>),
) -> usize {
    let (work_tx, work_rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(workers * 2);
    let (done_tx, done_rx) = mpsc::sync_channel::<(usize, Parsed<T>)>(workers * 2);
    let work_rx = Mutex::new(work_rx);
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            let mut errors = Vec::new();
            let mut seq = 0;
            let overlong = read_chunks(files, precheck, &mut errors, |lines| {
                // A send fails only when the workers are gone (a panic,
                // which the scope passes on).
                let _ = work_tx.send((seq, lines));
                seq += 1;
            });
            (errors, overlong)
        });
        for _ in 0..workers {
            let (work_rx, done_tx, parse) = (&work_rx, done_tx.clone(), &parse);
            s.spawn(move || loop {
                let next = match work_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok((seq, lines)) = next else { return };
                if done_tx.send((seq, parse(&lines))).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut waiting = BTreeMap::new();
        let mut next = 0;
        for (seq, parsed) in done_rx {
            waiting.insert(seq, parsed);
            while let Some(parsed) = waiting.remove(&next) {
                take(parsed);
                next += 1;
            }
        }
        let (reader_errors, overlong) = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        errors.extend(reader_errors);
        overlong
    })
}

/// Parse workers for this machine: its cores (or the CPU quota), up to
/// [`MAX_WORKERS`].
pub(super) fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_WORKERS)
}

/// Every record of the records directory, each once.
pub fn read_records(records_dir: &Path) -> ReadRecords {
    read_records_filtered(records_dir, &ReportFilter::default())
}

/// The records of the directory that may belong to a job `filter`
/// selects ([`ReportFilter::keeps_record`]), each once.
pub fn read_records_filtered(records_dir: &Path, filter: &ReportFilter) -> ReadRecords {
    read_records_with(records_dir, filter, workers())
}

/// [`read_records_filtered`] with this many parse workers (below 2: none,
/// everything on this thread).
pub(super) fn read_records_with(
    records_dir: &Path,
    filter: &ReportFilter,
    workers: usize,
) -> ReadRecords {
    let mut out = ReadRecords::default();
    // A record spooled and then written twice (crash between append and
    // spool removal) has the same job, node and end.
    let mut seen = HashSet::new();
    let keep = |r: JobRecord| {
        if seen.insert((r.job_id.clone(), r.node.clone(), r.end_ms)) {
            out.records.push(r);
        }
    };
    let precheck = LinePrecheck::new(filter);
    let parse = job_records(filter, |r| r);
    out.malformed = visit_records(
        records_dir,
        &precheck,
        workers,
        &mut out.errors,
        parse,
        keep,
    );
    out
}

/// The jobs `filter` selects, summed over their records as they are read
/// (the records themselves are not kept; duplicates count once, see
/// [`Summarizer::add`]).
pub fn read_jobs<G: GpuSink>(records_dir: &Path, filter: &ReportFilter) -> ReadJobs<G> {
    read_jobs_with(records_dir, filter, workers())
}

/// [`read_jobs`] with this many parse workers (below 2: none).
pub(super) fn read_jobs_with<G: GpuSink>(
    records_dir: &Path,
    filter: &ReportFilter,
    workers: usize,
) -> ReadJobs<G> {
    let mut errors = Vec::new();
    let mut summarizer = Summarizer::new();
    let precheck = LinePrecheck::new(filter).near_oom_only(G::ONLY_NEAR_OOM);
    let parse = job_records(filter, Summarizer::<G>::prepare);
    let malformed = visit_records(records_dir, &precheck, workers, &mut errors, parse, |r| {
        summarizer.add_prepared(r);
    });
    ReadJobs {
        jobs: summarizer.finish(filter),
        malformed,
        errors,
    }
}
