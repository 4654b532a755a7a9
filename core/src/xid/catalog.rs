//! The one Xid table: per code, what it means, what gpu-health does by
//! default, what NVIDIA's Xid catalog says to do, and where the fault
//! usually comes from. It has a row for every code NVIDIA's catalog lists
//! in use ([`CATALOG_REFERENCE`]; core/tests/xid_catalog.rs holds the
//! table to a copy of that catalog's codes and buckets), each with
//! NVIDIA's immediate resolution bucket; meanings are summarised, the
//! wording is ours. The policy, `gpu-health xids --catalog` and the table
//! in docs/xid-policy.md all come from here (a test holds the doc to it).
//!
//! Codes NVIDIA lists as unused (1-7, 9, 10, 12, 14-24, 26-30, 33-36,
//! 42, 47, 49-53, 55-59, 61, 65, 73, 81, 87, 90, 91, 108, 111-118,
//! 122-125, 138) are left out: should one appear, the configured
//! `default_action` applies.

use crate::config::PolicyAction;

/// How the built-in table decides for one code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultAction {
    Fixed(PolicyAction),
    /// Xid 154: the action follows the recovery action the record names.
    FollowRecoveryAction,
    /// NVLink5 Xids 144-150 (and SXids): the record says `Fatal` or
    /// `Nonfatal`; fatal drains, anything else warns.
    BySeverityWord,
}

/// NVIDIA's immediate action for a code (the catalog's resolution
/// bucket), in the catalog's own terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// `IGNORE`: no action needed.
    Ignore,
    /// `RESTART_APP`: the application should be restarted.
    RestartApp,
    /// `RESET_GPU`.
    ResetGpu,
    /// `RESTART_BM`: restart the bare-metal node.
    RebootNode,
    /// `RESTART_VM`: restart the VM owning the GPU.
    RestartVm,
    /// `CHECK_MECHANICALS`: seating and connections.
    CheckMechanicals,
    /// `UPDATE_SWFW`: update driver and firmware.
    UpdateSoftware,
    /// `CHECK_UVM`: reset when UVM/vGPU is used, else ignore.
    CheckUvm,
    /// `CONTACT_SUPPORT`: open a case with NVIDIA.
    ContactSupport,
    /// `XID_154`: do what the record says.
    FollowRecoveryAction,
    /// `WORKFLOW_*`: a decision flow on the record's details (45, 48,
    /// NVLink 74 and 144-150).
    Workflow,
    /// The catalog names no bucket yet (the newest codes).
    NotGiven,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Ignore => "ignore",
            Resolution::RestartApp => "restart the application",
            Resolution::ResetGpu => "reset the GPU",
            Resolution::RebootNode => "reboot the node",
            Resolution::RestartVm => "restart the VM",
            Resolution::CheckMechanicals => "check mechanicals",
            Resolution::UpdateSoftware => "update driver and firmware",
            Resolution::CheckUvm => "reset if UVM/vGPU is used",
            Resolution::ContactSupport => "contact NVIDIA support",
            Resolution::FollowRecoveryAction => "follow the recovery action",
            Resolution::Workflow => "NVIDIA workflow",
            Resolution::NotGiven => "not given",
        }
    }
}

/// Where the fault usually comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The application's own code (bad address, bad data).
    Application,
    /// The GPU, its memory, its links.
    Hardware,
    /// Driver or GPU firmware.
    DriverFirmware,
    /// PCIe, power or cooling around the GPU.
    Platform,
    /// It follows or summarises another Xid.
    FollowUp,
    /// A mode or setting (confidential computing, vGPU, power smoothing).
    Configuration,
    /// The board's management controller (BMC) or its tools.
    Management,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Application => "application",
            Source::Hardware => "hardware",
            Source::DriverFirmware => "driver/firmware",
            Source::Platform => "PCIe/power/cooling",
            Source::FollowUp => "follow-up",
            Source::Configuration => "configuration",
            Source::Management => "BMC/management",
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidInfo {
    pub code: u32,
    pub meaning: &'static str,
    pub default: DefaultAction,
    pub resolution: Resolution,
    pub source: Source,
    /// Why the default is what it is, where it is not NVIDIA's bucket
    /// read plainly (empty when it is).
    pub why: &'static str,
}

const fn row(
    code: u32,
    meaning: &'static str,
    default: DefaultAction,
    resolution: Resolution,
    source: Source,
    why: &'static str,
) -> XidInfo {
    XidInfo {
        code,
        meaning,
        default,
        resolution,
        source,
        why,
    }
}

use DefaultAction::{BySeverityWord as BySeverity, Fixed, FollowRecoveryAction as Follow};
use PolicyAction::{Drain, DrainUntilClean, Info, Warn};
use Resolution as R;
use Source as S;

/// The catalog [`CATALOG`] follows: every code it lists in use has a row,
/// with the catalog's immediate resolution.
pub const CATALOG_REFERENCE: &str = "NVIDIA's Xid catalog (\"Analyzing Xid errors with the Xid catalog\", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, sheet \"Catalog\") as published on 2025-10-29: 109 codes in use";

/// NVIDIA's catalog, every code in use, in code order.
pub const CATALOG: &[XidInfo] = &[
    row(8, "GPU stopped processing (channel idle timeout)", Fixed(Warn), R::RestartApp, S::DriverFirmware, ""),
    row(11, "invalid or corrupted push buffer stream", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(13, "graphics engine exception (illegal instruction, address or trap in a kernel)", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(25, "invalid or illegal push buffer stream", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(31, "GPU memory page fault (MMU fault: illegal address)", Fixed(DrainUntilClean), R::RestartApp, S::Application, "mostly the application's fault, but a failing GPU shows it too: the node takes no job until a check finds it clean, then returns by itself"),
    row(32, "invalid or corrupted push buffer stream (PCIe quality)", Fixed(Warn), R::RestartApp, S::Platform, ""),
    row(37, "driver firmware error (unimplemented method)", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(38, "driver firmware error (watchdog timeout)", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(39, "copy engine (CE0) exception", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(40, "copy engine (CE1) exception", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(41, "copy engine (CE2) exception", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(43, "GPU stopped processing a channel (reset after a software fault); the GPU stays healthy", Fixed(DrainUntilClean), R::Ignore, S::Application, "the node takes no job until a check finds the GPU clean after the reset, then returns by itself"),
    row(44, "graphics engine fault during a context switch", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(45, "preemptive cleanup after an earlier error or a killed process", Fixed(Warn), R::Workflow, S::FollowUp, "a follow-up: the Xid it follows carries the cause and the action; alone it is shown, strict jobs wait"),
    row(46, "GPU stopped processing (GPU timeout)", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(48, "double-bit (uncorrectable) ECC error", Fixed(Drain), R::Workflow, S::Hardware, "results after it cannot be trusted; NVIDIA's flow starts with a GPU reset"),
    row(54, "auxiliary power is not connected to the GPU board (clocks reduced)", Fixed(Drain), R::CheckMechanicals, S::Platform, "someone has to reconnect the power cable"),
    row(60, "video processor exception", Fixed(Warn), R::RestartApp, S::DriverFirmware, ""),
    row(62, "internal micro-controller halt", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(63, "GPU memory row remapping recorded; applied at the next GPU reset", Fixed(Warn), R::Ignore, S::Hardware, "the remap waits for a reset; strict jobs are kept off until the node's check is clean"),
    row(64, "GPU memory row remapping failed", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(66, "illegal access by the driver (register access violation)", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(67, "illegal access by the driver (verification violation)", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(68, "video decoder (NVDEC0) exception", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(69, "graphics engine class error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(70, "copy engine (CE3) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(71, "copy engine (CE4) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(72, "copy engine (CE5) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(74, "NVLink error", Fixed(Drain), R::Workflow, S::Hardware, "a link fault, here or at the peer; cleared by a GPU reset or reboot"),
    row(75, "copy engine (CE6) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(76, "copy engine (CE7) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(77, "copy engine (CE8) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(78, "vGPU start error (guest and host drivers do not match)", Fixed(Warn), R::UpdateSoftware, S::Configuration, ""),
    row(79, "GPU has fallen off the bus (no longer answers on PCIe)", Fixed(Drain), R::RebootNode, S::Platform, ""),
    row(80, "corrupted data sent to the GPU", Fixed(Warn), R::RestartApp, S::Platform, ""),
    row(82, "JPEG decoder (NVJPG0) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(83, "video decoder (NVDEC1) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(84, "video decoder (NVDEC2) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(85, "copy engine (CE9) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(86, "optical flow accelerator (OFA0) exception", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(88, "video decoder (NVDEC3) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(89, "video decoder (NVDEC4) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(92, "high single-bit (corrected) ECC error rate", Fixed(Warn), R::Ignore, S::Hardware, "a trend to watch: the ECC rate thresholds decide on draining, strict jobs wait"),
    row(93, "InfoROM wear limit exceeded (non-fatal)", Fixed(Info), R::Ignore, S::Configuration, ""),
    row(94, "contained memory error: only the affected application was stopped", Fixed(Warn), R::RestartApp, S::Hardware, ""),
    row(95, "uncontained memory error: every process on the GPU may be affected", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(96, "video decoder (NVDEC5) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(97, "video decoder (NVDEC6) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(98, "video decoder (NVDEC7) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(99, "JPEG decoder (NVJPG1) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(100, "JPEG decoder (NVJPG2) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(101, "JPEG decoder (NVJPG3) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(102, "JPEG decoder (NVJPG4) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(103, "JPEG decoder (NVJPG5) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(104, "JPEG decoder (NVJPG6) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(105, "JPEG decoder (NVJPG7) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(106, "SMBPBI test message (a test of the out-of-band interface from the BMC)", Fixed(Info), R::Ignore, S::Management, ""),
    row(107, "SMBPBI test message, silent", Fixed(Info), R::Ignore, S::Management, ""),
    row(109, "context switch timeout", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(110, "security fault", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(119, "GSP firmware RPC timeout", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(120, "GSP firmware error", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(121, "corrected C2C link errors (Grace-Hopper/Blackwell)", Fixed(Info), R::Ignore, S::Hardware, ""),
    row(126, "copy engine (CE10) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(127, "copy engine (CE11) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(128, "copy engine (CE12) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(129, "copy engine (CE13) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(130, "copy engine (CE14) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(131, "copy engine (CE15) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(132, "copy engine (CE16) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(133, "copy engine (CE17) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(134, "copy engine (CE18) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(135, "copy engine (CE19) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(136, "NVLink link training failed", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(137, "NVLink privilege error (illegal peer-to-peer access)", Fixed(Info), R::Ignore, S::Application, ""),
    row(139, "optical flow accelerator (OFA1) error", Fixed(Warn), R::RestartApp, S::Application, ""),
    row(140, "unrecovered ECC error (pages could not be retired or remapped)", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(141, "CUDA fast path error", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(142, "video encoder (NVENC3) error", Fixed(Warn), R::ContactSupport, S::Hardware, "NVIDIA asks for a support case, not a reset: shown, strict jobs wait"),
    row(143, "GPU initialisation error", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(144, "NVLink5 SAW error", BySeverity, R::Workflow, S::Hardware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(145, "NVLink5 RLW error", BySeverity, R::Workflow, S::Hardware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(146, "NVLink5 TLW error", BySeverity, R::Workflow, S::Hardware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(147, "NVLink5 TREX error", BySeverity, R::Workflow, S::Hardware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(148, "NVLink5 NVLPW_CTRL error", BySeverity, R::Workflow, S::DriverFirmware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(149, "NVLink5 NETIR error (link down, bit errors)", BySeverity, R::Workflow, S::Hardware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(150, "NVLink5 MSE error (firmware watchdog)", BySeverity, R::Workflow, S::DriverFirmware, "the record says Fatal (drain) or Nonfatal (warn)"),
    row(151, "key rotation error (confidential computing)", Fixed(Warn), R::RestartVm, S::Configuration, "a VM restart is not the scheduler's to do; shown, strict jobs wait"),
    row(152, "deep learning accelerator (DLA) SMMU error", Fixed(Info), R::Ignore, S::Application, ""),
    row(153, "deep learning accelerator (DLA) timeout", Fixed(Info), R::Ignore, S::Application, ""),
    row(154, "the GPU's required recovery action changed", Follow, R::FollowRecoveryAction, S::FollowUp, "see Xid 154 below"),
    row(155, "NVLink link down on purpose (software defined)", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(156, "resource retirement event (applied at the next reset)", Fixed(Drain), R::ResetGpu, S::Hardware, ""),
    row(157, "resource retirement failed (no spare resources left)", Fixed(Warn), R::Ignore, S::Hardware, "the same fault can come back: shown, strict jobs wait"),
    row(158, "GPU fatal timeout", Fixed(Drain), R::ResetGpu, S::DriverFirmware, ""),
    row(159, "CHI non-data error on a C2C link", Fixed(Warn), R::CheckUvm, S::Hardware, "whether UVM is in use is the job's business: shown, strict jobs wait"),
    row(160, "channel retirement event", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(161, "channel retirement failure", Fixed(Info), R::Ignore, S::DriverFirmware, ""),
    row(162, "power smoothing circuitry re-engaged", Fixed(Info), R::NotGiven, S::Platform, "informational"),
    row(163, "power smoothing circuitry disengaged (thermal events or timeout)", Fixed(Info), R::NotGiven, S::Platform, "NVIDIA: no reset required"),
    row(164, "power smoothing circuitry: low lifetime left", Fixed(Warn), R::NotGiven, S::Platform, "plan to replace the GPU if power smoothing is needed"),
    row(165, "power smoothing circuitry: lifetime exhausted (disabled)", Fixed(Warn), R::NotGiven, S::Platform, "plan to replace the GPU if power swings matter"),
    row(166, "NVLink traffic before the link was set up for encryption (confidential computing)", Fixed(Warn), R::NotGiven, S::Configuration, "confidential computing mode only"),
    row(167, "PCIe fatal timeout", Fixed(Drain), R::NotGiven, S::Platform, "the GPU stopped answering on PCIe, as for 79"),
    row(168, "errors in the write-protected region: GPU memory capacity reduced", Fixed(Drain), R::NotGiven, S::Hardware, "needs an admin: enable ECC (row remapping) or reboot"),
    row(169, "internal micro-controller halt (SEC2)", Fixed(Drain), R::NotGiven, S::DriverFirmware, "as for 62"),
    row(170, "interrupt in confidential computing mode", Fixed(Warn), R::NotGiven, S::Configuration, "confidential computing mode only"),
    row(171, "uncorrectable DRAM error (details of an Xid 48)", Fixed(Drain), R::NotGiven, S::Hardware, "as for 48"),
    row(172, "uncorrectable SRAM error (details of an Xid 48)", Fixed(Drain), R::NotGiven, S::Hardware, "as for 48"),
];

/// The row of an Xid code, when the table has one.
pub fn entry(code: u32) -> Option<&'static XidInfo> {
    CATALOG
        .binary_search_by_key(&code, |e| e.code)
        .ok()
        .map(|i| &CATALOG[i])
}

/// Short meaning of an Xid code, when it is one we know.
pub fn xid_meaning(code: u32) -> Option<&'static str> {
    entry(code).map(|e| e.meaning)
}

/// Short meaning of an SXid: the catalog has too many to list; the
/// driver's text says what failed, the severity word how bad it is.
pub fn sxid_meaning(fatal: bool) -> &'static str {
    if fatal {
        "NVSwitch error the driver marks fatal"
    } else {
        "NVSwitch error the driver marks non-fatal"
    }
}

/// Whether an SXid or NVLink5 Xid record marks the error fatal: SXids
/// say `Fatal, Link ...` or `Non-fatal, ...` (an SXid read from its
/// detail line alone, `Severity 1 Engine instance ...`: the driver's
/// severity 1 is fatal, 0 non-fatal; from its `Data {...}` line alone:
/// not said); NVLink5 Xids 144-150 say `NETIR_LINK_EVT Fatal XC0 ...` or
/// `RLW_RXPIPE Nonfatal XC0 ...`.
pub fn sxid_is_fatal(message: &str) -> bool {
    if let Some(rest) = message.strip_prefix("Severity ") {
        return rest.starts_with("1 Engine instance ");
    }
    let first = message.split(',').next().unwrap_or("");
    first.trim().eq_ignore_ascii_case("fatal")
        || first
            .split_whitespace()
            .take(3)
            .any(|w| w.eq_ignore_ascii_case("fatal"))
}

/// The table as docs/xid-policy.md shows it (Markdown), after a line
/// naming the catalog it follows.
pub fn markdown_table() -> String {
    let mut out = format!(
        "{} codes, every one of {CATALOG_REFERENCE}.\n\n",
        CATALOG.len()
    );
    out.push_str(
        "| Xid | meaning | default | NVIDIA's action | usual source | why the default |\n\
         |---|---|---|---|---|---|\n",
    );
    for e in CATALOG {
        let default = match e.default {
            DefaultAction::Fixed(a) => a.as_str(),
            DefaultAction::FollowRecoveryAction => "by its recovery action",
            DefaultAction::BySeverityWord => "by its Fatal/Nonfatal word",
        };
        out.push_str(&format!(
            "| {} | {} | {default} | {} | {} | {} |\n",
            e.code,
            e.meaning,
            e.resolution.as_str(),
            e.source.as_str(),
            e.why
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_unique_and_reset_class_codes_drain() {
        assert!(CATALOG.windows(2).all(|w| w[0].code < w[1].code));
        for e in CATALOG {
            if matches!(e.resolution, Resolution::ResetGpu | Resolution::RebootNode) {
                assert_eq!(e.default, Fixed(Drain), "Xid {}", e.code);
            }
        }
        for unused in [1, 16, 56, 57, 58, 61, 65, 73, 81, 122, 138] {
            assert!(entry(unused).is_none(), "Xid {unused} is unused");
        }
    }

    #[test]
    fn severity_words() {
        assert!(sxid_is_fatal("Fatal, Link 48 LTSSM Fault Up"));
        assert!(!sxid_is_fatal("Non-fatal, Link 32 egress"));
        assert!(sxid_is_fatal(
            "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000)"
        ));
        assert!(!sxid_is_fatal(
            "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)"
        ));
        assert!(!sxid_is_fatal(
            "Graphics Exception: fatal-looking words later"
        ));
        assert!(sxid_is_fatal(
            "Severity 1 Engine instance 30 Sub-engine instance 00"
        ));
        assert!(!sxid_is_fatal(
            "Severity 0 Engine instance 30 Sub-engine instance 00"
        ));
        assert!(!sxid_is_fatal("Data {0x00000000, 0x00100000}"));
    }
}
