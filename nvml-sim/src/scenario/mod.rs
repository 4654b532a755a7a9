//! Scenario files: format (`spec`), defaults and checks (`resolve`), and the
//! resolved device model (`model`). See docs/nvml-sim.md for the format.

mod model;
mod resolve;
pub mod spec;

pub use model::{Gpu, NvLinkTopology, PciAddress, Scenario, Topology, MAX_GPUS};
pub use spec::{LinkErrors, LostMode, ProcessSpec};

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
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
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Scenario::from_json(&text, path)
    }
}

#[cfg(test)]
mod tests;
