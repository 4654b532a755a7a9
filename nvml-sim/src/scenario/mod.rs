//! Scenario files: format (`spec`), defaults and checks (`resolve`), and the
//! resolved device model (`model`). See docs/nvml-sim.md for the format.

mod model;
mod resolve;
pub mod spec;

pub use model::{Gpu, NvLinkTopology, PciAddress, Scenario, Topology, MAX_GPUS};
pub use spec::{LinkErrors, LostMode, ProcessSpec};

use std::fs::{Metadata, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest scenario file read. Shipped scenarios are a few KiB; the cap
/// keeps a path to the wrong file from filling the memory of the process
/// that loaded the library.
pub const MAX_SCENARIO_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("scenario {path} is {kind}, not a regular file")]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error("scenario {path} is larger than the {limit}-byte cap on scenario files")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("scenario {path} is not valid: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Scenario {
    /// Parses and resolves scenario JSON (`origin` names it in errors).
    pub fn from_json(text: &str, origin: &Path) -> Result<Scenario, ScenarioError> {
        resolve::resolve(text).map_err(|message| ScenarioError::Invalid {
            path: origin.to_path_buf(),
            message,
        })
    }

    /// Reads and resolves a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = read_scenario_file(path)?;
        Scenario::from_json(&text, path)
    }
}

/// The text of a scenario file. The library runs inside other processes
/// (gpu-health's probe child, NVIDIA tools), so a path naming anything but
/// a regular file of bounded size must fail at once: a FIFO would block
/// the open forever, /dev/zero would never end.
fn read_scenario_file(path: &Path) -> Result<String, ScenarioError> {
    let read_error = |source| ScenarioError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Checked before opening as well, because opening a device can act on
    // it (a watchdog arms, a tape rewinds).
    let before_open = std::fs::metadata(path).map_err(read_error)?;
    require_regular_file(path, &before_open)?;
    // Should the path be replaced between the check and the open:
    // O_NONBLOCK makes opening a FIFO return at once, O_NOCTTY keeps a
    // terminal from becoming the caller's controlling terminal. O_CLOEXEC
    // (std sets it too): a fork in another thread of the caller must not
    // inherit the descriptor.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(read_error)?;
    let opened = file.metadata().map_err(read_error)?;
    require_regular_file(path, &opened)?;
    let too_large = || ScenarioError::TooLarge {
        path: path.to_path_buf(),
        limit: MAX_SCENARIO_BYTES,
    };
    if opened.len() > MAX_SCENARIO_BYTES {
        return Err(too_large());
    }
    // The file can grow after fstat, so the read stops one byte past the
    // cap whatever the size said.
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8: {e}"),
        ))
    })
}

fn require_regular_file(path: &Path, metadata: &Metadata) -> Result<(), ScenarioError> {
    let file_type = metadata.file_type();
    if file_type.is_file() {
        return Ok(());
    }
    let kind = if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "a special file"
    };
    Err(ScenarioError::NotRegularFile {
        path: path.to_path_buf(),
        kind,
    })
}

#[cfg(test)]
mod tests;
