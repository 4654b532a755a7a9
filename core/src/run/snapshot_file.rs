//! The node snapshot kept for the SPANK plugin and admins: the topology
//! (`StateFile::NodeTopology`, which the plugin reads) and the full
//! snapshot beside it (`StateFile::NodeSnapshot`, for admins), rewritten
//! only when the topology changed or the full snapshot was cut.

use crate::snapshot::{NodeSnapshot, NodeTopology};
use crate::state::StateFile;

use super::RunContext;

/// Compares the topology as bytes with what is saved and rewrites both
/// files only when it changed or the full snapshot is no longer whole
/// (the healthy path parses and writes neither).
pub(super) fn save_when_changed(ctx: &RunContext, snapshot: &NodeSnapshot) {
    let topology = match serde_json::to_vec(&NodeTopology::of(snapshot)) {
        Ok(b) => b,
        Err(e) => {
            log::error!("cannot write the node topology: {e}");
            return;
        }
    };
    let saved = ctx.state.load_bytes(StateFile::NodeTopology).ok().flatten();
    let snapshot_whole = || {
        ctx.state
            .load_bytes(StateFile::NodeSnapshot)
            .ok()
            .flatten()
            .is_some_and(|b| written_whole(&b))
    };
    if saved.as_deref() == Some(topology.as_slice()) && snapshot_whole() {
        return;
    }
    match snapshot_bytes(snapshot) {
        Ok(bytes) => {
            if let Err(e) = ctx.state.save_bytes(StateFile::NodeSnapshot, &bytes) {
                log::error!("cannot save the node snapshot: {e}");
            }
        }
        Err(e) => log::error!("cannot write the node snapshot: {e}"),
    }
    if let Err(e) = ctx.state.save_bytes(StateFile::NodeTopology, &topology) {
        log::error!("cannot save the node topology: {e}");
    }
}

/// The full snapshot as it is written: compact JSON and one newline.
/// Compact JSON writes every control character inside a string as an
/// escape, so that newline is the file's only one.
fn snapshot_bytes(snapshot: &NodeSnapshot) -> serde_json::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(snapshot)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Whether a saved snapshot is whole. Every file is written whole by an
/// atomic rename, so what can go wrong is a cut (a full disk under an
/// editor, a copy that stopped), and a cut one lacks the final newline.
/// This replaced parsing the file: a fifth of the healthy Prolog's own
/// instructions for 15 KB. The values are not checked; nothing reads
/// them back. A snapshot from before the newline is rewritten once.
fn written_whole(bytes: &[u8]) -> bool {
    bytes.ends_with(b"}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::GpuSnapshot;

    #[test]
    fn only_the_whole_snapshot_passes() {
        let gpu = GpuSnapshot {
            uuid: Some("GPU-\n\"}\n".into()),
            ..Default::default()
        };
        let snapshot = NodeSnapshot {
            gpus: vec![gpu.clone(), gpu],
            ..Default::default()
        };
        let full = snapshot_bytes(&snapshot).unwrap();
        assert!(written_whole(&full));
        assert_eq!(full.iter().filter(|&&b| b == b'\n').count(), 1);
        for cut in 0..full.len() {
            assert!(!written_whole(&full[..cut]), "{cut}");
        }
        let back: NodeSnapshot = serde_json::from_slice(&full).unwrap();
        assert_eq!(back.gpus.len(), 2);
    }
}
