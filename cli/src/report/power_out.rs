//! `report --power --json` and `--csv`: the figures per node and the
//! hourly series per rack for Grafana and scripts, rounded to what they
//! mean.

use std::io::{self, Write};

use gpu_health_core::records::power::{PowerReport, RackPower};
use gpu_health_core::time::format_utc_ms;
use serde_json::{json, Value};

use super::format::{csv_field, csv_figure, write_rounded_json};

/// Which of supply and cooling sets the rack's budget (the smaller).
pub fn budget_source(k: &RackPower) -> &'static str {
    if k.supply_w <= k.cooling_w {
        "supply"
    } else {
        "cooling"
    }
}

/// An hour as RFC 3339 (`2026-11-29T10:00:00Z`).
fn hour(ms: u64) -> String {
    let t = format_utc_ms(ms);
    format!("{}Z", &t[..19])
}

fn rack_json(k: &RackPower) -> Value {
    let over = |at: u64| k.over.iter().any(|(t, _)| *t == at);
    let peak = k.peak();
    json!({
        "name": k.name,
        "nodes": k.nodes,
        "supply_w": k.supply_w,
        "cooling_w": k.cooling_w,
        "budget_w": k.budget_w,
        "budget_source": budget_source(k),
        "peak_hour_w": peak.map(|p| p.1),
        "peak_hour": peak.map(|p| hour(p.0)),
        "over_budget_hours": k.over.len(),
        "hours": k.hours.iter().map(|(at, w)| json!({
            "hour": hour(*at),
            "power_w": w,
            "over_budget": over(*at),
        })).collect::<Vec<_>>(),
    })
}

pub fn write_json(out: &mut dyn Write, r: &PowerReport, left_out: usize) -> io::Result<()> {
    let nodes: Vec<Value> = r
        .nodes
        .iter()
        .map(|n| {
            json!({
                "node": n.node,
                "jobs": n.jobs,
                "energy_kwh": n.energy_kwh,
                "mean_w": n.mean_w,
                "peak_hour_w": n.peak_hour_w,
                "peak_hour": hour(n.peak_hour_ms),
                "peak_job_w": n.peak_job_w,
            })
        })
        .collect();
    let s = &r.skipped;
    let doc = json!({
        "nodes": nodes,
        "racks": r.racks.iter().map(rack_json).collect::<Vec<_>>(),
        "left_out": {
            "without_start_or_energy": left_out,
            "bad_time": s.bad_time,
            "too_old": s.too_old,
            "bad_energy": s.bad_energy,
            "bad_peak": s.bad_peak,
        },
    });
    write_rounded_json(out, &doc)
}

/// One line per rack and hour.
pub fn write_csv(out: &mut dyn Write, r: &PowerReport) -> io::Result<()> {
    writeln!(out, "rack,hour,power_w,budget_w,budget_source,over_budget")?;
    for k in &r.racks {
        for (at, w) in &k.hours {
            let over = k.over.iter().any(|(t, _)| t == at);
            writeln!(
                out,
                "{},{},{},{},{},{over}",
                csv_field(&k.name),
                hour(*at),
                csv_figure("power_w", Some(*w)),
                csv_figure("budget_w", Some(k.budget_w)),
                budget_source(k),
            )?;
        }
    }
    Ok(())
}
