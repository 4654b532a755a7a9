//! nccl-tests `all_reduce_perf`: its result table and summary lines.
//!
//! The format (nccl-tests `src/util.cu`, `writeResultHeader`,
//! `writeBenchmarkLineBody`, `writeResultFooter`): a header of `#` lines
//! naming the columns (`size count type redop root`, then `time algbw
//! busbw #wrong` for out-of-place and again for in-place; with per-
//! iteration timing four more columns each), one row per message size,
//! then `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth :
//! X`. `#wrong` is `N/A` when validation is off (`-c 0`).
//!
//! Per version (nccl-tests `src/common.cu`): up to 2.11 the column is
//! `error`, the largest difference seen (`%5.0le`, a float), and a check
//! fails only beyond `DeltaMaxValue(type) * (nranks - 1)`; from 2.13 it
//! is `#wrong`, a count of wrong elements. Both versions count the failed
//! checks in `# Out of bounds values : N OK|FAILED`. A run that stops on
//! an error prints `Test NCCL failure` or `Test CUDA failure`
//! (`src/common.h`). Under `mpirun --tag-output` every line starts with
//! `[job,rank]<stdout>:`.

use super::ParseError;

/// One message size's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub bytes: u64,
    /// Out-of-place and in-place bus bandwidth, GB/s.
    pub busbw_out: f64,
    pub busbw_in: f64,
    /// Wrong elements (out-of-place + in-place); `None` when not checked.
    pub wrong: Option<u64>,
}

/// What one run printed.
#[derive(Debug, Clone, PartialEq)]
pub struct AllReduceRun {
    pub rows: Vec<Row>,
    /// `# Avg bus bandwidth`, when printed (a cut output lacks it).
    pub avg_busbw: Option<f64>,
    /// `# Out of bounds values : N`.
    pub out_of_bounds: Option<u64>,
}

impl AllReduceRun {
    /// The figure judged: the best bus bandwidth (out-of-place or
    /// in-place) of the largest message size, where NVLink is saturated.
    pub fn peak_busbw(&self) -> Option<f64> {
        let last = self.rows.iter().max_by_key(|r| r.bytes)?;
        Some(last.busbw_out.max(last.busbw_in))
    }

    /// Wrong elements over every row and the summary.
    pub fn wrong(&self) -> u64 {
        let rows: u64 = self.rows.iter().filter_map(|r| r.wrong).sum();
        rows.max(self.out_of_bounds.unwrap_or(0))
    }
}

/// Column positions, from the header (or the current default layout).
struct Columns {
    busbw: [usize; 2],
    wrong: [usize; 2],
    /// The data type's column.
    ty: usize,
    /// The `error` column of releases up to 2.11: the largest difference.
    delta: bool,
    width: usize,
}

impl Columns {
    const DEFAULT: Columns = Columns {
        busbw: [7, 11],
        wrong: [8, 12],
        ty: 2,
        delta: false,
        width: 13,
    };

    fn from_header(line: &str) -> Option<Columns> {
        let words: Vec<&str> = line.trim_start_matches('#').split_whitespace().collect();
        if words.first() != Some(&"size") {
            return None;
        }
        let find = |name: &str| -> Vec<usize> {
            words
                .iter()
                .enumerate()
                .filter(|(_, w)| **w == name)
                .map(|(i, _)| i)
                .collect()
        };
        let busbw = find("busbw");
        let mut wrong = find("#wrong");
        let delta = wrong.is_empty();
        if delta {
            wrong = find("error");
        }
        let ty = find("type").first().copied().unwrap_or(2);
        match (busbw.as_slice(), wrong.as_slice()) {
            ([a, b], [c, d]) => Some(Columns {
                busbw: [*a, *b],
                wrong: [*c, *d],
                ty,
                delta,
                width: *d.max(b) + 1,
            }),
            _ => None,
        }
    }
}

/// Read `all_reduce_perf`'s stdout. Anything that is not its table (NCCL
/// INFO lines, warnings) is skipped; no result row at all is an error.
pub fn parse(text: &str) -> Result<AllReduceRun, ParseError> {
    let mut cols = None;
    let mut run = AllReduceRun {
        rows: Vec::new(),
        avg_busbw: None,
        out_of_bounds: None,
    };
    let mut ranks = Ranks::default();
    for line in text.lines().take(super::MAX_LINES) {
        let t = untagged(line.trim());
        if t.contains("Test NCCL failure") || t.contains("Test CUDA failure") {
            return Err(ParseError::new(&format!(
                "all_reduce_perf stopped: {}",
                t.chars().take(200).collect::<String>()
            )));
        }
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim();
            ranks.read(rest);
            if let Some(v) = summary_value(rest, "Avg bus bandwidth") {
                run.avg_busbw = v.split_whitespace().next().and_then(number);
            } else if let Some(v) = summary_value(rest, "Out of bounds values") {
                run.out_of_bounds = v.split_whitespace().next().and_then(|n| n.parse().ok());
            } else if let Some(c) = Columns::from_header(t) {
                cols = Some(c);
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        let Some(bytes) = words.first().and_then(|w| w.parse::<u64>().ok()) else {
            continue;
        };
        let c = cols.as_ref().unwrap_or(&Columns::DEFAULT);
        if words.len() < c.width {
            continue;
        }
        let (Some(out), Some(inp)) = (number(words[c.busbw[0]]), number(words[c.busbw[1]])) else {
            continue;
        };
        let tolerance = c
            .delta
            .then(|| {
                ranks
                    .count()
                    .map(|n| delta_max(words[c.ty]) * (n - 1) as f64)
            })
            .flatten();
        let count = |w: &str| {
            if c.delta {
                delta_wrong(w, tolerance)
            } else {
                wrong_count(w)
            }
        };
        let wrong = match (count(words[c.wrong[0]]), count(words[c.wrong[1]])) {
            (Some(Some(a)), Some(Some(b))) => Some(a + b),
            (Some(None), Some(None)) => None,
            (Some(a), Some(b)) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
            _ => continue,
        };
        run.rows.push(Row {
            bytes,
            busbw_out: out,
            busbw_in: inp,
            wrong,
        });
    }
    if run.rows.is_empty() {
        return Err(ParseError::new("no all_reduce_perf result row"));
    }
    if run.avg_busbw.is_none() {
        // The summary ends a complete table: without it the largest sizes
        // may be missing, and a small size's figure is no verdict.
        return Err(ParseError::new(
            "all_reduce_perf output ends before its summary (# Avg bus bandwidth)",
        ));
    }
    Ok(run)
}

/// `Avg bus bandwidth    : 120.4` -> `120.4`.
fn summary_value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(key)?;
    Some(rest.trim_start().strip_prefix(':')?.trim())
}

/// A finite, non-negative figure (`%g` and `%e` forms included).
fn number(w: &str) -> Option<f64> {
    w.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// `0` -> `Some(Some(0))`, `N/A` -> `Some(None)`, garbage -> `None`.
/// A float in a `#wrong` column (a table without header) is read as an
/// `error` column whose tolerance is unknown.
fn wrong_count(w: &str) -> Option<Option<u64>> {
    if w == "N/A" {
        return Some(None);
    }
    if let Ok(n) = w.parse::<u64>() {
        return Some(Some(n));
    }
    delta_wrong(w, None)
}

/// An `error` column (the largest difference): a failed check when over
/// the tolerance (any non-zero difference when it is not known).
fn delta_wrong(w: &str, tolerance: Option<f64>) -> Option<Option<u64>> {
    if w == "N/A" {
        return Some(None);
    }
    let v = w.parse::<f64>().ok().filter(|v| v.is_finite())?;
    Some(Some(u64::from(v > tolerance.unwrap_or(0.0))))
}

/// nccl-tests' `DeltaMaxValue` by the type name the row prints (ints and
/// names not known here: the strictest).
fn delta_max(ty: &str) -> f64 {
    match ty {
        "half" | "bfloat16" => 1e-2,
        "float" => 1e-5,
        "double" => 1e-12,
        _ => 1e-200,
    }
}

/// How many ranks ran: the `# Rank N ...` lines of `# Using devices`
/// (every process's, gathered by the first), else `nThread x nGpus` of
/// the first header line (one process).
#[derive(Default)]
struct Ranks {
    listed: usize,
    threads_gpus: Option<usize>,
}

impl Ranks {
    fn read(&mut self, rest: &str) {
        let words: Vec<&str> = rest.split_whitespace().collect();
        match words.as_slice() {
            ["Rank", n, ..] if n.parse::<u32>().is_ok() => self.listed += 1,
            ["nThread", t, "nGpus", g, ..] => {
                if let (Ok(t), Ok(g)) = (t.parse::<usize>(), g.parse::<usize>()) {
                    self.threads_gpus = Some(t * g);
                }
            }
            _ => {}
        }
    }

    fn count(&self) -> Option<usize> {
        match (self.listed, self.threads_gpus) {
            (0, n) => n.filter(|n| *n > 0),
            (n, _) => Some(n),
        }
    }
}

/// A line without `mpirun --tag-output`'s `[job,rank]<stdout>:`.
fn untagged(line: &str) -> &str {
    if !line.starts_with('[') {
        return line;
    }
    match line.find("]<stdout>:") {
        Some(i) if line[1..i].bytes().all(|b| b.is_ascii_digit() || b == b',') => {
            line[i + "]<stdout>:".len()..].trim()
        }
        _ => line,
    }
}
