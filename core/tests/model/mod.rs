//! The model of a node and its slurmctld for `ledger_model.rs`.

pub mod slurm;
pub mod world;

/// GPUs of the h100x8 scenarios, by NVML index.
pub const PCI: [&str; 8] = [
    "0000:18:00",
    "0000:2a:00",
    "0000:3a:00",
    "0000:5d:00",
    "0000:9a:00",
    "0000:ab:00",
    "0000:ba:00",
    "0000:db:00",
];
pub const NODES: usize = 10;
