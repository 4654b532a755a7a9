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
use gpu_health_core::time::{format_utc_ms, unix_ms};

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

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// Steps between time ticks, smallest first.
const TIME_STEPS: [u64; 11] = [
    HOUR_MS,
    2 * HOUR_MS,
    3 * HOUR_MS,
    6 * HOUR_MS,
    12 * HOUR_MS,
    DAY_MS,
    2 * DAY_MS,
    7 * DAY_MS,
    14 * DAY_MS,
    28 * DAY_MS,
    91 * DAY_MS,
];

/// The chart's layout, shared by every panel: one time axis and one kW
/// scale for all racks, so that panels compare at a glance.
struct Frame {
    left: f64,
    width: f64,
    /// First and last hour drawn (hour starts, Unix ms); the axis runs to
    /// the end of the last.
    t0: u64,
    t1: u64,
    /// Top of the kW scale and its tick step, in W.
    ymax: f64,
    ystep: f64,
    tstep: u64,
}

impl Frame {
    fn x(&self, t: u64) -> f64 {
        let span = (self.t1 + HOUR_MS - self.t0) as f64;
        self.left + t.saturating_sub(self.t0) as f64 / span * self.width
    }

    /// The middle of the hour starting at `t`.
    fn x_hour(&self, t: u64) -> f64 {
        self.x(t.saturating_add(HOUR_MS / 2))
    }
}

/// A round step (1, 2 or 5 times a power of ten) that cuts `max` into at
/// most 6 ticks.
fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

fn frame(r: &PowerReport, left: f64, width: f64) -> Frame {
    let hours = r
        .racks
        .iter()
        .flat_map(|k| k.hours.iter().filter(|h| drawable(h.1)));
    let (mut t0, mut t1, mut peak) = (u64::MAX, 0, 0f64);
    for (t, w) in hours {
        t0 = t0.min(*t);
        t1 = t1.max(*t);
        peak = peak.max(*w);
    }
    if t0 > t1 {
        let now = unix_ms() / HOUR_MS * HOUR_MS;
        (t0, t1) = (now, now);
    }
    for k in &r.racks {
        if drawable(k.budget_w) {
            peak = peak.max(k.budget_w);
        }
    }
    let peak = if peak > 0.0 { peak * 1.1 } else { 1000.0 };
    let ystep = nice_step(peak);
    let ymax = (peak / ystep).ceil() * ystep;
    let span = t1 + HOUR_MS - t0;
    let tstep = TIME_STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 8)
        .unwrap_or(span.div_ceil(8).max(HOUR_MS));
    Frame {
        left,
        width,
        t0,
        t1,
        ymax,
        ystep,
        tstep,
    }
}

/// A time tick's label: the hour within a few days, else the day.
fn tick_label(t: u64, step: u64) -> String {
    let full = format_utc_ms(t);
    if step < DAY_MS {
        format!("{} {}:00", &full[5..10], &full[11..13])
    } else {
        full[..10].to_string()
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// kW with the decimals the step needs.
fn kw(w: f64, step: f64) -> String {
    if step >= 1000.0 {
        format!("{:.0}", w / 1000.0)
    } else {
        format!("{:.1}", w / 1000.0)
    }
}

const BLUE: &str = "#1f77b4";
const RED: &str = "#d62728";

/// One panel per rack, on one time axis and one kW scale: its hourly
/// power as a line (each hour a dot when there are few), its budget
/// dashed, the hours over it in red; a legend at the top and the time
/// axis under the last panel.
pub fn svg(r: &PowerReport) -> String {
    const W: f64 = 800.0;
    const PANEL: f64 = 200.0;
    const LEFT: f64 = 70.0;
    const TOP: f64 = 50.0;
    const AXIS: f64 = 50.0;
    const PLOT_W: f64 = W - LEFT - 20.0;
    const PLOT_H: f64 = PANEL - 60.0;
    let f = frame(r, LEFT, PLOT_W);
    let height = TOP + PANEL * r.racks.len().max(1) as f64 + AXIS;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{height}\" viewBox=\"0 0 {W} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    legend(&mut s, LEFT);
    if r.racks.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"{LEFT}\" y=\"{}\">no racks configured ([[power.racks]])</text>",
            TOP + 40.0
        );
    }
    for (i, k) in r.racks.iter().enumerate() {
        panel(&mut s, k, &f, TOP + PANEL * i as f64, PLOT_H);
    }
    time_axis(&mut s, &f, TOP + PANEL * r.racks.len().max(1) as f64 - 20.0);
    s.push_str("</svg>\n");
    s
}

fn legend(s: &mut String, left: f64) {
    let y = 22.0;
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{BLUE}\" stroke-width=\"2\"/>\
         <circle cx=\"{}\" cy=\"{y}\" r=\"3\" fill=\"{BLUE}\"/>\
         <text x=\"{}\" y=\"{}\">mean power per hour, GPUs + overhead</text>",
        left + 24.0,
        left + 12.0,
        left + 30.0,
        y + 4.0
    );
    let x2 = left + 290.0;
    let _ = writeln!(
        s,
        "<line x1=\"{x2}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{RED}\" stroke-width=\"2\" stroke-dasharray=\"8 4\"/>\
         <text x=\"{}\" y=\"{}\">budget: the smaller of supply, cooling</text>",
        x2 + 24.0,
        x2 + 30.0,
        y + 4.0
    );
    let x3 = left + 570.0;
    let _ = writeln!(
        s,
        "<circle cx=\"{}\" cy=\"{y}\" r=\"4\" fill=\"{RED}\"/><text x=\"{}\" y=\"{}\">hour over budget</text>",
        x3 + 6.0,
        x3 + 14.0,
        y + 4.0
    );
}

/// The time ticks (UTC) under the last panel, with their labels.
fn time_axis(s: &mut String, f: &Frame, y: f64) {
    let mut t = f.t0.div_ceil(f.tstep) * f.tstep;
    while t <= f.t1 + HOUR_MS {
        let x = f.x(t);
        // A label at an edge stays inside the chart.
        let anchor = if x > f.left + f.width - 40.0 {
            "end"
        } else if x < f.left + 40.0 {
            "start"
        } else {
            "middle"
        };
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{y}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            y + 5.0,
            y + 18.0,
            tick_label(t, f.tstep)
        );
        t += f.tstep;
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">time (UTC)</text>",
        f.left + f.width,
        y + 34.0
    );
}

/// Whether an hourly figure can be drawn: finite, not negative, below
/// [`MAX_PLOT_W`].
fn drawable(w: f64) -> bool {
    w.is_finite() && (0.0..=MAX_PLOT_W).contains(&w)
}

/// The baseline of an empty panel's "no data" (12 px high text): the
/// middle of the panel, or clear of the budget line `budget_y` when that
/// runs through it (below it, or above when there is no room below).
fn no_data_y(y0: f64, ph: f64, budget_y: Option<f64>) -> f64 {
    let mid = y0 - ph / 2.0 + 4.0;
    match budget_y {
        Some(by) if by > mid - 16.0 && by < mid + 6.0 => {
            if by + 20.0 <= y0 - 4.0 {
                by + 20.0
            } else {
                by - 8.0
            }
        }
        _ => mid,
    }
}

fn panel(s: &mut String, k: &RackPower, f: &Frame, top: f64, ph: f64) {
    let left = f.left;
    let pw = f.width;
    let y0 = top + 30.0 + ph;
    let y = |w: f64| y0 - w / f.ymax * ph;
    // Only figures that can be drawn reach the SVG's text; how many were
    // not is said in the panel.
    let hours: Vec<(u64, f64)> = k.hours.iter().copied().filter(|h| drawable(h.1)).collect();
    let not_drawn = k.hours.len() - hours.len();
    let budget_w = Some(k.budget_w).filter(|w| drawable(*w));
    let budget_text = budget_w.map_or("-".to_string(), |w| format!("{:.1}", w / 1000.0));
    let source = if k.supply_w <= k.cooling_w {
        format!("its supply (cooling {:.1} kW)", k.cooling_w / 1000.0)
    } else {
        format!("its cooling (supply {:.1} kW)", k.supply_w / 1000.0)
    };
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">rack {} ({} node{}): budget {budget_text} kW, set by {source}</text>",
        top + 16.0,
        esc(&k.name),
        k.nodes,
        if k.nodes == 1 { "" } else { "s" },
    );
    // The kW scale (the same in every panel) and the time grid.
    let mut w = 0.0;
    while w <= f.ymax + f.ystep / 2.0 {
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{}\" y2=\"{yy:.1}\" stroke=\"#dddddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{} kW</text>",
            left + pw,
            left - 6.0,
            y(w) + 4.0,
            kw(w, f.ystep),
            yy = y(w)
        );
        w += f.ystep;
    }
    let mut t = f.t0.div_ceil(f.tstep) * f.tstep;
    while t <= f.t1 + HOUR_MS {
        let x = f.x(t);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{y0}\" stroke=\"#eeeeee\"/>",
            y0 - ph
        );
        t += f.tstep;
    }
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{y0}\" x2=\"{}\" y2=\"{y0}\" stroke=\"black\"/><line x1=\"{left}\" y1=\"{}\" x2=\"{left}\" y2=\"{y0}\" stroke=\"black\"/>",
        left + pw,
        y0 - ph
    );
    if let Some(budget_w) = budget_w {
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{by:.1}\" x2=\"{}\" y2=\"{by:.1}\" stroke=\"{RED}\" stroke-width=\"2\" stroke-dasharray=\"8 4\"/>",
            left + pw,
            by = y(budget_w)
        );
    }
    if not_drawn > 0 {
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{not_drawn} hourly figure(s) not drawn (not finite, negative or above 1 TW)</text>",
            left + pw,
            top + 30.0
        );
    }
    if hours.is_empty() {
        let cx = left + pw / 2.0;
        let _ = writeln!(
            s,
            "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#777777\">no data</text>",
            no_data_y(y0, ph, budget_w.map(y))
        );
        return;
    }
    let points: Vec<String> = hours
        .iter()
        .map(|(t, w)| format!("{:.1},{:.1}", f.x_hour(*t), y(*w)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline fill=\"none\" stroke=\"{BLUE}\" stroke-width=\"2\" points=\"{}\"/>",
        points.join(" ")
    );
    // Few hours: each one a dot, so that a single hour shows at all.
    if hours.len() <= 48 {
        for (t, w) in &hours {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{BLUE}\"/>",
                f.x_hour(*t),
                y(*w)
            );
        }
    }
    for (t, w) in k.over.iter().filter(|h| drawable(h.1)) {
        let _ = writeln!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{RED}\"/>",
            f.x_hour(*t),
            y(*w)
        );
    }
}
