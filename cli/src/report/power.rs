//! `gpu-health report --power [--svg FILE]`: energy and power per node and
//! per rack (`[[power.racks]]`), the hours a rack passed its budget, and a
//! chart of each rack's power over time with its budget line.

use std::fmt::Write as _;
use std::io::{self, Write};

use gpu_health_core::config::Rack;
use gpu_health_core::records::power::{
    power_report, PowerReport, RackPower, MAX_NODE_W, MAX_REPORT_HOURS,
};
use gpu_health_core::records::ReadEnergies;
use gpu_health_core::time::format_utc_ms;

use super::Term;

/// Hourly figures above this (1 TW) are not drawn: no rack draws it, and
/// scaling the chart to such a value would leave nothing to see (or put
/// `inf` in the SVG).
const MAX_PLOT_W: f64 = 1e12;

/// The figures of what `--power` read, as of `now_ms`.
pub fn report(read: &ReadEnergies, racks: &[Rack], now_ms: u64) -> (PowerReport, usize) {
    (power_report(&read.energies, racks, now_ms), read.left_out)
}

fn hour(ms: u64) -> String {
    format_utc_ms(ms).chars().take(13).collect::<String>() + ":00Z"
}

pub fn write_table(out: &mut dyn Write, r: &PowerReport, left_out: usize) -> io::Result<()> {
    if r.nodes.is_empty() {
        out.write_all(b"no job records with energy figures\n")?;
        return write_notes(out, r, left_out);
    }
    writeln!(
        out,
        "{:<14} {:>5} {:>11} {:>9} {:>12}  {:<18} {:>10}",
        "NODE", "JOBS", "ENERGY_KWH", "MEAN_W", "PEAK_HOUR_W", "PEAK_HOUR", "PEAK_JOB_W"
    )?;
    for n in &r.nodes {
        let peak_job = n.peak_job_w.map_or("-".into(), |w| format!("{w:.1}"));
        writeln!(
            out,
            "{:<14} {:>5} {:>11.3} {:>9.1} {:>12.1}  {:<18} {:>10}",
            Term(&n.node),
            n.jobs,
            n.energy_kwh,
            n.mean_w,
            n.peak_hour_w,
            hour(n.peak_hour_ms),
            peak_job
        )?;
    }
    if !r.racks.is_empty() {
        writeln!(
            out,
            "\n{:<10} {:>5} {:>9} {:>9} {:>12}  {:<18} OVER_BUDGET_HOURS",
            "RACK", "NODES", "SUPPLY_W", "COOL_W", "PEAK_HOUR_W", "PEAK_HOUR"
        )?;
        for k in &r.racks {
            let (at, w) = k.peak().unwrap_or((0, 0.0));
            writeln!(
                out,
                "{:<10} {:>5} {:>9.0} {:>9.0} {:>12.1}  {:<18} {}",
                Term(&k.name),
                k.nodes,
                k.supply_w,
                k.cooling_w,
                w,
                if k.hours.is_empty() {
                    "-".into()
                } else {
                    hour(at)
                },
                k.over.len()
            )?;
        }
        for k in &r.racks {
            for (at, w) in &k.over {
                writeln!(
                    out,
                    "over budget: rack {} at {}: {:.1} kW, budget {:.1} kW",
                    Term(&k.name),
                    hour(*at),
                    w / 1000.0,
                    k.budget_w / 1000.0
                )?;
            }
        }
    }
    write_notes(out, r, left_out)?;
    writeln!(out, "(hourly figures are means over the hour: GPUs from their energy counters, plus each rack's node_overhead_w)")?;
    writeln!(out, "(PEAK_JOB_W: the highest power one job's GPUs on the node drew together at a sample: job start, each health check, job end)")
}

/// What the report left out, and why.
fn write_notes(out: &mut dyn Write, r: &PowerReport, left_out: usize) -> io::Result<()> {
    let s = &r.skipped;
    let years = MAX_REPORT_HOURS / (366 * 24);
    let notes = [
        (left_out, "node records without a start time or an energy figure left out".to_string()),
        (
            s.bad_time,
            "node records with an end before their start, or a time more than a day ahead of this machine's clock, left out".into(),
        ),
        (s.too_old, format!("node records that started more than {years} years ago left out")),
        (
            s.bad_energy,
            format!(
                "node records whose energy is no measurement (not finite, negative, or above {:.0} kW over the record's time) left out",
                MAX_NODE_W / 1000.0
            ),
        ),
        (s.bad_peak, "sampled peaks that are no measurement ignored (their records' energy counts)".into()),
    ];
    for (count, what) in notes {
        if count > 0 {
            writeln!(out, "({count} {what})")?;
        }
    }
    Ok(())
}

/// One panel per rack: its hourly power as a line, its budget dashed.
pub fn svg(r: &PowerReport) -> String {
    const W: f64 = 800.0;
    const PANEL: f64 = 220.0;
    const LEFT: f64 = 70.0;
    const PLOT_W: f64 = W - LEFT - 20.0;
    const PLOT_H: f64 = PANEL - 70.0;
    let height = PANEL * r.racks.len().max(1) as f64 + 10.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    if r.racks.is_empty() {
        s.push_str("<text x=\"20\" y=\"40\">no racks configured ([[power.racks]])</text>\n");
    }
    for (i, k) in r.racks.iter().enumerate() {
        panel(&mut s, k, PANEL * i as f64, LEFT, PLOT_W, PLOT_H);
    }
    s.push_str("</svg>\n");
    s
}

/// Whether an hourly figure can be drawn: finite, not negative, below
/// [`MAX_PLOT_W`].
fn drawable(w: f64) -> bool {
    w.is_finite() && (0.0..=MAX_PLOT_W).contains(&w)
}

fn panel(s: &mut String, k: &RackPower, top: f64, left: f64, pw: f64, ph: f64) {
    let y0 = top + 40.0 + ph;
    // Only figures that can be drawn reach the SVG's text; how many were
    // not is said under the chart.
    let hours: Vec<(u64, f64)> = k.hours.iter().copied().filter(|h| drawable(h.1)).collect();
    let not_drawn = k.hours.len() - hours.len();
    let budget_w = Some(k.budget_w).filter(|w| drawable(*w));
    let peak = hours.iter().map(|(_, w)| *w).fold(0.0, f64::max);
    // Finite: both figures are at most MAX_PLOT_W.
    let ymax = match peak.max(budget_w.unwrap_or(0.0)) * 1.15 {
        m if m > 0.0 => m,
        _ => 1000.0,
    };
    let y = |w: f64| y0 - w / ymax * ph;
    let first = hours.iter().map(|h| h.0).min().unwrap_or(0);
    let last = hours
        .iter()
        .map(|h| h.0)
        .max()
        .unwrap_or(0)
        .max(first.saturating_add(1));
    let x = |t: u64| left + t.saturating_sub(first) as f64 / (last - first) as f64 * pw;
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let budget_text = budget_w.map_or("-".to_string(), |w| format!("{:.1}", w / 1000.0));
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">rack {} ({} nodes): power per hour, budget {budget_text} kW</text>",
        top + 20.0,
        esc(&k.name),
        k.nodes,
    );
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{y0}\" x2=\"{}\" y2=\"{y0}\" stroke=\"black\"/><line x1=\"{left}\" y1=\"{}\" x2=\"{left}\" y2=\"{y0}\" stroke=\"black\"/>",
        left + pw,
        y0 - ph
    );
    for frac in [0.0, 0.5, 1.0] {
        let w = ymax * frac;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{:.1} kW</text>",
            left - 6.0,
            y(w) + 4.0,
            w / 1000.0
        );
    }
    if let Some(budget_w) = budget_w {
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{by:.1}\" x2=\"{}\" y2=\"{by:.1}\" stroke=\"#d62728\" stroke-width=\"2\" stroke-dasharray=\"8 4\"/>",
            left + pw,
            by = y(budget_w)
        );
    }
    if not_drawn > 0 {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{not_drawn} hourly figure(s) not drawn (not finite, negative or above 1 TW)</text>",
            left + pw,
            top + 34.0
        );
    }
    if !hours.is_empty() {
        let points: Vec<String> = hours
            .iter()
            .map(|(t, w)| format!("{:.1},{:.1}", x(*t), y(*w)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        for (t, w) in k.over.iter().filter(|h| drawable(h.1)) {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#d62728\"/>",
                x(*t),
                y(*w)
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{left}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            y0 + 16.0,
            hour(first),
            left + pw,
            y0 + 16.0,
            hour(last)
        );
    }
}
