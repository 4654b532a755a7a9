//! perftest `ib_write_bw` / `ib_send_bw`: the client's result table.
//!
//! The format (perftest `src/perftest_parameters.h`, `RESULT_FMT*` and
//! `REPORT_FMT`): a dashed line, the header ` #bytes #iterations BW
//! peak[UNIT] BW average[UNIT] MsgRate[Mpps]` (UNIT `Gb/sec` with
//! `--report_gbits`, else `MiB/sec`; releases before 2021 wrote `MB/sec`
//! for the same 2^20-byte unit), one row per message size (all sizes with
//! `-a`), a dashed line. `--report-per-port` adds columns after MsgRate;
//! `#sl` (QoS) adds one after `#bytes`.

use super::ParseError;

/// One message size's figures, in Gb/s (10^9 bits).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub bytes: u64,
    pub peak_gbps: f64,
    pub average_gbps: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BwRun {
    pub rows: Vec<Row>,
}

impl BwRun {
    /// The figure judged: the best average bandwidth of any size (the
    /// largest sizes saturate the link).
    pub fn best_average_gbps(&self) -> Option<f64> {
        self.rows
            .iter()
            .map(|r| r.average_gbps)
            .max_by(f64::total_cmp)
    }
}

/// Gb/s per unit of the table.
fn unit_factor(header: &str) -> Option<f64> {
    if header.contains("[Gb/sec]") {
        Some(1.0)
    } else if header.contains("[MiB/sec]") || header.contains("[MB/sec]") {
        Some(1_048_576.0 * 8.0 / 1e9)
    } else {
        None
    }
}

pub fn parse(text: &str) -> Result<BwRun, ParseError> {
    let mut layout: Option<(f64, usize)> = None;
    let mut rows = Vec::new();
    for line in text.lines().take(super::MAX_LINES) {
        let t = line.trim();
        if t.starts_with("#bytes") {
            let Some(factor) = unit_factor(t) else {
                return Err(ParseError::new(&format!(
                    "perftest header with an unknown unit: {}",
                    super::one_line(t)
                )));
            };
            // Columns before the peak: #bytes, [#sl,] #iterations.
            let peak_at = if t.contains("#sl") { 3 } else { 2 };
            layout = Some((factor, peak_at));
            continue;
        }
        let Some((factor, peak_at)) = layout else {
            continue;
        };
        let words: Vec<&str> = t.split_whitespace().collect();
        let Some(bytes) = words.first().and_then(|w| w.parse::<u64>().ok()) else {
            continue;
        };
        let (Some(peak), Some(avg)) = (
            words.get(peak_at).and_then(|w| number(w)),
            words.get(peak_at + 1).and_then(|w| number(w)),
        ) else {
            return Err(ParseError::new(&format!(
                "perftest row without two figures: {}",
                super::one_line(t)
            )));
        };
        rows.push(Row {
            bytes,
            peak_gbps: peak * factor,
            average_gbps: avg * factor,
        });
    }
    if layout.is_none() {
        return Err(ParseError::new("no perftest result header (#bytes ...)"));
    }
    if rows.is_empty() {
        return Err(ParseError::new("no perftest result row"));
    }
    Ok(BwRun { rows })
}

fn number(w: &str) -> Option<f64> {
    w.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}
