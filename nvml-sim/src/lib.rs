//! nvml-sim: a stand-in for `libnvidia-ml.so.1` driven by a JSON scenario.
//!
//! Built as a cdylib (`libnvml_sim.so`) that exports the NVML C functions
//! gpu-health calls, with nvml.h's names, signatures and return codes, so
//! that nvml-wrapper loads it exactly like the real library. The scenario
//! comes from `$NVML_SIM_SCENARIO`, else from `scenario.json` in the
//! directory of the loaded library file. Format: docs/nvml-sim.md.

pub mod abi;
pub mod exports;
pub mod ffi;
pub mod runtime;
pub mod scenario;

pub use exports::EXPORTED_FUNCTIONS;
pub use scenario::{Scenario, ScenarioError};
