//! NVLinks: one seen active earlier in this boot that is down now warns
//! (collective bandwidth drops); one never active since boot is a link the
//! board does not use, or one that never trained: info, on record without
//! warning every job. The links seen active are kept per boot
//! (`nvlink-history.json`).

mod history;

use super::label::{answering, label, on_gpu};
use super::{Check, CheckInput, Evidence, Io};
use crate::finding::{Action, Finding};
use crate::snapshot::{GpuSnapshot, NvLinkState};

pub use history::LinkHistory;

pub struct Nvlink;

/// The NVLinks seen active earlier in this boot.
pub struct Seen(pub LinkHistory);

impl Check for Nvlink {
    fn name(&self) -> &'static str {
        "nvlink"
    }
    fn gather(&self, io: &Io<'_>, evidence: &mut Evidence) {
        let links = match io.state.load::<LinkHistory>(()) {
            Ok(h) => h.unwrap_or_default(),
            Err(e) => {
                log::warn!("NVLink history unusable, starting a new one: {e}");
                LinkHistory::default()
            }
        };
        // The history holds for one boot (the run's configured boot id).
        evidence.insert(Seen(links.for_boot(io.boot_id)));
    }
    fn judge(&self, input: &CheckInput<'_>) -> Vec<Finding> {
        let empty = LinkHistory::default();
        let seen = input.evidence.get::<Seen>().map_or(&empty, |s| &s.0);
        let mut out = Vec::new();
        for g in answering(input.snapshot) {
            nvlink(g, seen, &mut out);
        }
        out
    }
    fn commit(&self, io: &Io<'_>, input: &CheckInput<'_>, _handled: bool) {
        let Some(Seen(seen)) = input.evidence.get::<Seen>() else {
            return;
        };
        let active = input.snapshot.gpus.iter().flat_map(|g| {
            let uuid = g.uuid.as_deref();
            g.nvlinks
                .iter()
                .filter(|l| l.active)
                .filter_map(move |l| Some((uuid?, l.link)))
        });
        let mut links = seen.clone();
        if links.record(active) {
            if let Err(e) = io.state.save((), &links) {
                log::error!("cannot save the NVLink history: {e}");
            }
        }
    }
    fn doc(&self) -> &'static str {
        "| `nvlink` | warn | an NVLink seen active earlier in this boot is down now |\n\
         | `nvlink-unused` | info | an NVLink never active since boot (unused on the board, or never trained) |"
    }
}

/// Inactive NVLinks. One seen active earlier in this boot went down:
/// warn (collective bandwidth drops). One never active since boot is a
/// link the board does not use (some SKUs expose untrained links), or one
/// that never came up: info, so that it is on record without warning
/// every job.
fn nvlink(g: &GpuSnapshot, seen: &LinkHistory, out: &mut Vec<Finding>) {
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
        out.push(on_gpu(
            g,
            "nvlink",
            Action::Warn,
            format!("NVLink {} of {} inactive {l}", down.len(), g.nvlinks.len()),
            format!(
                "{l} NVLink links {} went down since boot: collective bandwidth on this GPU is reduced",
                list(&down)
            ),
        ));
    }
    if !never.is_empty() {
        out.push(on_gpu(
            g,
            "nvlink-unused",
            Action::Info,
            format!("NVLink {} of {} never active {l}", never.len(), g.nvlinks.len()),
            format!(
                "{l} NVLink links {} have not been active since boot (unused on this board, or never trained)",
                list(&never)
            ),
        ));
    }
}

#[cfg(test)]
mod tests;
