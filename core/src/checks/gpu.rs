//! Per-GPU checks. Summaries name the GPU as `GPU<i> <pci>` so that drain
//! reasons point at the board to pull.

use super::CheckInput;
use crate::config::Thresholds;
use crate::finding::{Action, Finding};
use crate::snapshot::{throttle, GpuSnapshot, NvLinkState};

use super::history::LinkHistory;

fn label(g: &GpuSnapshot) -> String {
    match &g.pci_bus_id {
        Some(p) => format!("GPU{} {p}", g.index),
        None => format!("GPU{}", g.index),
    }
}

fn push(
    out: &mut Vec<Finding>,
    g: &GpuSnapshot,
    check: &str,
    action: Action,
    summary: String,
    message: String,
) {
    out.push(Finding::gpu(
        check,
        action,
        g.index,
        g.pci_bus_id.as_deref(),
        summary,
        message,
    ));
}

pub(super) fn lost(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    if g.lost {
        let l = label(g);
        push(
            out,
            g,
            "gpu-lost",
            Action::Drain,
            format!("{l} lost (fallen off the bus)"),
            format!("{l} answers NVML_ERROR_GPU_IS_LOST: it fell off the bus; the node needs a reboot and a hardware check"),
        );
    }
}

pub(super) fn ecc_uncorrected(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(ecc) = g.ecc else { return };
    if ecc.volatile_uncorrected > 0 {
        let l = label(g);
        push(
            out,
            g,
            "ecc-uncorrected",
            Action::Drain,
            format!("ECC DBE {l} volatile uncorrected={}", ecc.volatile_uncorrected),
            format!(
                "{l} has {} uncorrectable (double-bit) ECC errors since the driver loaded: results computed on it \
                 are corrupt; reset the GPU and check row remapping",
                ecc.volatile_uncorrected
            ),
        );
    }
}

pub(super) fn ecc_corrected_rate(g: &GpuSnapshot, input: &CheckInput<'_>, out: &mut Vec<Finding>) {
    let (Some(ecc), Some(key)) = (g.ecc, g.uuid.as_deref()) else {
        return;
    };
    let Some(rate) = input
        .history
        .rate_per_hour(key, ecc.aggregate_corrected, input.now_ms)
    else {
        return;
    };
    let t = &input.config.thresholds;
    let action = if rate > t.sbe_fatal_per_hour {
        Action::Drain
    } else if rate > t.sbe_warn_per_hour {
        Action::Warn
    } else {
        return;
    };
    let l = label(g);
    let limit = if action == Action::Drain {
        t.sbe_fatal_per_hour
    } else {
        t.sbe_warn_per_hour
    };
    push(
        out,
        g,
        "ecc-corrected-rate",
        action,
        format!("ECC SBE rate {l} {rate:.0}/h"),
        format!("{l} corrected (single-bit) ECC errors grow at {rate:.1} per hour (limit {limit}); memory is degrading"),
    );
}

pub(super) fn remapped_rows(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(r) = g.remapped_rows else { return };
    let l = label(g);
    if r.failure {
        push(
            out,
            g,
            "row-remap-failure",
            Action::Drain,
            format!("row remap failure {l}"),
            format!("{l} could not remap a failing memory row (uncorrectable rows {}): the board needs RMA", r.uncorrectable),
        );
    } else if r.pending {
        push(
            out,
            g,
            "row-remap-pending",
            Action::Warn,
            format!("row remap pending {l}"),
            format!("{l} has a row remap pending: reset the GPU when idle to apply it"),
        );
    }
}

pub(super) fn retired_pages(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    if g.retired_pages_pending == Some(true) {
        let l = label(g);
        push(
            out,
            g,
            "retired-pages-pending",
            Action::Warn,
            format!("page retirement pending {l}"),
            format!("{l} has pages waiting to be retired: reset the GPU when idle"),
        );
    }
}

/// Link width is fixed at training; a narrower link is a seating or riser
/// fault. The generation drops at idle to save power on healthy boards, so
/// a lower generation alone is only information.
pub(super) fn pcie_link(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(p) = g.pcie else { return };
    if p.current_width >= p.max_width && p.current_gen >= p.max_gen {
        return;
    }
    let l = label(g);
    let action = if p.current_width < p.max_width {
        Action::Warn
    } else {
        Action::Info
    };
    push(
        out,
        g,
        "pcie-link",
        action,
        format!("PCIe Gen{} x{} of Gen{} x{} {l}", p.current_gen, p.current_width, p.max_gen, p.max_width),
        format!(
            "{l} PCIe link runs at Gen{} x{} of Gen{} x{}: host-device transfers are slower (reseat or check the riser)",
            p.current_gen, p.current_width, p.max_gen, p.max_width
        ),
    );
}

/// Inactive NVLinks. One seen active earlier in this boot went down:
/// warn (collective bandwidth drops). One never active since boot is a
/// link the board does not use (some SKUs expose untrained links), or one
/// that never came up: info, so that it is on record without warning
/// every job.
pub(super) fn nvlink(g: &GpuSnapshot, seen: &LinkHistory, out: &mut Vec<Finding>) {
    let uuid = g.uuid.as_deref().unwrap_or("");
    let (down, never): (Vec<&NvLinkState>, Vec<&NvLinkState>) = g
        .nvlinks
        .iter()
        .filter(|l| !l.active)
        .partition(|l| seen.was_active(uuid, l.link));
    let list = |v: &[&NvLinkState]| {
        v.iter()
            .map(|l| l.link.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let l = label(g);
    if !down.is_empty() {
        push(
            out,
            g,
            "nvlink",
            Action::Warn,
            format!("NVLink {} of {} inactive {l}", down.len(), g.nvlinks.len()),
            format!(
                "{l} NVLink links {} went down since boot: collective bandwidth on this GPU is reduced",
                list(&down)
            ),
        );
    }
    if !never.is_empty() {
        push(
            out,
            g,
            "nvlink-unused",
            Action::Info,
            format!("NVLink {} of {} never active {l}", never.len(), g.nvlinks.len()),
            format!(
                "{l} NVLink links {} have not been active since boot (unused on this board, or never trained)",
                list(&never)
            ),
        );
    }
}

pub(super) fn temperature(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    let Some(c) = g.temperature_c else { return };
    if c > t.max_temperature_c {
        let l = label(g);
        push(
            out,
            g,
            "temperature",
            Action::Warn,
            format!("temperature {c}C {l}"),
            format!(
                "{l} is at {c} C (limit {} C): check cooling",
                t.max_temperature_c
            ),
        );
    }
}

pub(super) fn power_limit(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    let (Some(limit), Some(default)) = (g.power_limit_mw, g.default_power_limit_mw) else {
        return;
    };
    if default == 0 || (limit as f64) >= (default as f64) * t.min_power_limit_ratio {
        return;
    }
    let l = label(g);
    push(
        out,
        g,
        "power-limit",
        Action::Warn,
        format!("power limit {} W of {} W {l}", limit / 1000, default / 1000),
        format!(
            "{l} enforced power limit is {} W, below its default {} W: it will run slower",
            limit / 1000,
            default / 1000
        ),
    );
}

pub(super) fn clock_events(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(bits) = g.throttle_reasons else {
        return;
    };
    let names: Vec<&str> = [
        (throttle::HW_SLOWDOWN, "hardware slowdown"),
        (throttle::HW_THERMAL_SLOWDOWN, "hardware thermal slowdown"),
        (throttle::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
        (throttle::SW_THERMAL_SLOWDOWN, "software thermal slowdown"),
    ]
    .iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| *name)
    .collect();
    if names.is_empty() {
        return;
    }
    let l = label(g);
    push(
        out,
        g,
        "clock-events",
        Action::Warn,
        format!("throttled ({}) {l}", names.join(", ")),
        format!("{l} clocks are held down by {}", names.join(", ")),
    );
}

pub(super) fn persistence(g: &GpuSnapshot, t: &Thresholds, out: &mut Vec<Finding>) {
    if t.require_persistence_mode && g.persistence_mode == Some(false) {
        let l = label(g);
        push(
            out,
            g,
            "persistence-mode",
            Action::Info,
            format!("persistence mode off {l}"),
            format!("{l} persistence mode is off: every job start pays the driver initialisation (run nvidia-persistenced)"),
        );
    }
}

/// An NVSwitch GPU whose fabric registration has not completed (fabric
/// manager not running, or it failed): every CUDA job fails ("system not
/// yet initialized") while all counters look healthy. It clears when the
/// fabric manager registers the GPU: drain-until-clean. A GPU without a
/// fabric (`None`) is not checked.
pub(super) fn fabric(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    use crate::snapshot::fabric_state::{COMPLETED, IN_PROGRESS, NOT_STARTED};
    let Some(f) = g.fabric else { return };
    let l = label(g);
    let (summary, message) = match (f.state, f.status) {
        (COMPLETED, 0) => return,
        (COMPLETED, status) => (
            format!("fabric registration failed {l} (status {status})"),
            format!("{l}: NVSwitch fabric registration ended with NVML error {status}; CUDA jobs fail on it until nvidia-fabricmanager registers it"),
        ),
        (state, _) => {
            let what = match state {
                NOT_STARTED => "not started",
                IN_PROGRESS => "in progress",
                _ => "in an unknown state",
            };
            (
                format!("fabric not ready {l} ({what})"),
                format!("{l}: NVSwitch fabric registration {what}: CUDA jobs fail on it; is nvidia-fabricmanager running?"),
            )
        }
    };
    push(out, g, "fabric", Action::DrainUntilClean, summary, message);
}

/// NVML's persistent recovery action: the same nvmlDeviceGpuRecoveryAction_t
/// an Xid 154 announces, read even when that record was missed. Every
/// action but none needs a reset or a reboot: drain.
pub(super) fn recovery_action(g: &GpuSnapshot, out: &mut Vec<Finding>) {
    let Some(a) = g.recovery_action.filter(|a| *a != 0) else {
        return;
    };
    let what = match a {
        1 => "GPU reset",
        2 => "node reboot",
        3 => "drain P2P",
        4 => "drain P2P and reset",
        5 => "recover the IMEX domain",
        6 => "bus reset",
        7 => "system reboot",
        _ => "an unknown action",
    };
    let l = label(g);
    push(
        out,
        g,
        "recovery-action",
        Action::Drain,
        format!("recovery action {l}: {what}"),
        format!("{l}: the driver requires a recovery action ({a}: {what}) before the GPU can be trusted again"),
    );
}
