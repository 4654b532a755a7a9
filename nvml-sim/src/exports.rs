//! The names of the NVML functions this library exports. Kept apart from
//! `ffi`, which defines those functions, so that the scenario checks can
//! validate the call names of fault rules without depending on the FFI
//! layer.

/// Every NVML function this library exports (the names usable in a scenario's
/// `hangs` and `not_supported`).
pub const EXPORTED_FUNCTIONS: &[&str] = &[
    "nvmlInit",
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetNVMLVersion",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId",
    "nvmlDeviceGetHandleByPciBusId_v2",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit",
    "nvmlDeviceGetPowerManagementDefaultLimit",
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetViolationStatus",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetP2PStatus",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetDriverModel",
    "nvmlDeviceIsMigDeviceHandle",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetPcieThroughput",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetAccountingMode",
    "nvmlDeviceSetAccountingMode",
    "nvmlDeviceGetAccountingBufferSize",
    "nvmlDeviceGetAccountingPids",
    "nvmlDeviceGetAccountingStats",
];

#[cfg(test)]
mod tests {
    use super::EXPORTED_FUNCTIONS;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    const NO_MANGLE_MARKERS: [&str; 2] = ["#[no_mangle]", "#[unsafe(no_mangle)]"];

    fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }

    /// Names of the functions the crate's sources mark `#[no_mangle]`,
    /// i.e. the C symbols the cdylib exports.
    fn no_mangle_functions() -> Vec<String> {
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let mut names = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let mut lines = text.lines().map(str::trim);
            while let Some(line) = lines.next() {
                // An exported name this scan cannot see would escape the check.
                assert!(
                    !line.starts_with("#[export_name") && !line.starts_with("#[unsafe(export_name"),
                    "{}: export_name is not covered by this test: {line}",
                    file.display()
                );
                let Some(rest) = NO_MANGLE_MARKERS
                    .iter()
                    .find_map(|marker| line.strip_prefix(marker))
                else {
                    continue;
                };
                // The item follows on the same line or after further
                // attributes and comments.
                let rest = rest.trim();
                let item = if rest.is_empty() {
                    lines
                        .by_ref()
                        .find(|l| !l.starts_with("#[") && !l.starts_with("//"))
                        .unwrap_or_default()
                } else {
                    rest
                };
                let name = item
                    .split_once("fn ")
                    .and_then(|(_, after)| {
                        after
                            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                    })
                    .filter(|name| !name.is_empty())
                    .unwrap_or_else(|| {
                        panic!(
                            "{}: #[no_mangle] item is not a function this test can read: {item:?}",
                            file.display()
                        )
                    });
                names.push(name.to_string());
            }
        }
        names
    }

    #[test]
    fn list_matches_the_no_mangle_functions() {
        let exported = no_mangle_functions();
        let exported_set: BTreeSet<&str> = exported.iter().map(String::as_str).collect();
        let listed: BTreeSet<&str> = EXPORTED_FUNCTIONS.iter().copied().collect();
        assert_eq!(
            listed.len(),
            EXPORTED_FUNCTIONS.len(),
            "a name is listed twice"
        );
        assert_eq!(
            exported_set.len(),
            exported.len(),
            "a symbol is defined twice"
        );
        let unlisted: Vec<&&str> = exported_set.difference(&listed).collect();
        let missing: Vec<&&str> = listed.difference(&exported_set).collect();
        assert!(
            unlisted.is_empty() && missing.is_empty(),
            "exported but not in EXPORTED_FUNCTIONS: {unlisted:?}; \
             in EXPORTED_FUNCTIONS but not exported: {missing:?}"
        );
    }
}
