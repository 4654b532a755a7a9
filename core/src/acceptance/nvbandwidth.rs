//! NVIDIA `nvbandwidth`: one test's matrix and its `SUM` line.
//!
//! The format (nvbandwidth `testcase.cpp` / `inline_common.h`):
//! `Running host_to_device_memcpy_ce.`, a title such as `memcpy CE
//! CPU(row) -> GPU(column) bandwidth (GB/s)`, a line of column numbers
//! (the GPUs), one row per source (`0` for the CPU) with one figure per
//! column (`N/A` where a pair is not measured), a blank line and `SUM
//! <test> <total>`. A test the node cannot run prints `Waived` instead.

use super::ParseError;

/// One test's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// `host_to_device_memcpy_ce`, from `Running ...`.
    pub test: Option<String>,
    /// Column number (the GPU) and its figure, GB/s. A column with
    /// several rows keeps its smallest measured figure.
    pub per_gpu: Vec<(u32, f64)>,
    pub sum: Option<f64>,
}

impl Matrix {
    /// The slowest GPU.
    pub fn min(&self) -> Option<(u32, f64)> {
        self.per_gpu
            .iter()
            .copied()
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

/// Read nvbandwidth's stdout for one test (the first matrix when several
/// ran).
pub fn parse(text: &str) -> Result<Matrix, ParseError> {
    let mut test = None;
    let mut columns: Option<Vec<u32>> = None;
    let mut figures: Vec<(u32, f64)> = Vec::new();
    let mut sum = None;
    let mut in_matrix = false;
    for line in text.lines().take(super::MAX_LINES) {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("Running ") {
            if columns.is_some() {
                break;
            }
            test = Some(name.trim_end_matches('.').to_string());
            continue;
        }
        if t.eq_ignore_ascii_case("waived") || t.ends_with("Waived.") || t.ends_with("Waived") {
            return Err(ParseError::new(&format!(
                "nvbandwidth waived {}",
                test.as_deref().unwrap_or("the test")
            )));
        }
        if let Some(rest) = t.strip_prefix("SUM ") {
            sum = rest.split_whitespace().last().and_then(number);
            break;
        }
        if t.contains("bandwidth (GB/s)") {
            in_matrix = true;
            columns = None;
            figures.clear();
            continue;
        }
        if !in_matrix || t.is_empty() {
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        match &columns {
            None => {
                let cols: Option<Vec<u32>> = words.iter().map(|w| w.parse().ok()).collect();
                match cols {
                    Some(c) if !c.is_empty() => columns = Some(c),
                    _ => return Err(ParseError::new("nvbandwidth matrix without GPU columns")),
                }
            }
            Some(cols) => {
                if words.len() != cols.len() + 1 {
                    return Err(ParseError::new(&format!(
                        "nvbandwidth row {:?} has {} figures for {} GPUs",
                        words.first().unwrap_or(&""),
                        words.len().saturating_sub(1),
                        cols.len()
                    )));
                }
                for (gpu, w) in cols.iter().zip(&words[1..]) {
                    if *w == "N/A" {
                        continue;
                    }
                    let Some(v) = number(w) else {
                        return Err(ParseError::new(&format!(
                            "nvbandwidth figure {w:?} is not a number"
                        )));
                    };
                    match figures.iter_mut().find(|(g, _)| g == gpu) {
                        Some(f) => f.1 = f.1.min(v),
                        None => figures.push((*gpu, v)),
                    }
                }
            }
        }
    }
    if figures.is_empty() {
        return Err(ParseError::new("no nvbandwidth matrix"));
    }
    if sum.is_none() {
        // The SUM line ends a complete matrix: without it the output was cut.
        return Err(ParseError::new(
            "nvbandwidth output ends before its SUM line",
        ));
    }
    Ok(Matrix {
        test,
        per_gpu: figures,
        sum,
    })
}

fn number(w: &str) -> Option<f64> {
    w.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}
