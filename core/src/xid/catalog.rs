//! What the common Xid codes mean, in short (source: NVIDIA's Xid catalog;
//! wording ours). Used in finding messages and `gpu-health xids`.

/// Short meaning of an Xid code, when it is one we know.
pub fn xid_meaning(code: u32) -> Option<&'static str> {
    Some(match code {
        8 => "GPU stopped processing (channel timeout)",
        13 => "graphics engine exception, usually an application fault",
        31 => "GPU memory page fault (illegal address), usually an application fault",
        32 => "corrupted push buffer stream",
        38 => "driver firmware error",
        43 => "GPU stopped processing a channel (reset), usually an application fault",
        44 => "graphics engine fault during a context switch",
        45 => "preemptive cleanup after an earlier error (follows another Xid)",
        48 => "double-bit (uncorrectable) ECC error",
        56 => "display engine error",
        57 => "error programming the video memory interface",
        58 => "unstable video memory interface",
        61 => "internal micro-controller breakpoint or warning",
        62 => "internal micro-controller halt",
        63 => "ECC page retirement or row remapping recorded; applied at the next GPU reset",
        64 => "ECC page retirement or row remapping failed",
        68 => "video decoder (NVDEC) exception",
        69 => "graphics engine class error",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus (stopped answering on PCIe)",
        92 => "high rate of corrected (single-bit) ECC errors",
        94 => "contained memory error: the affected application was stopped",
        95 => "uncontained memory error: the GPU must be reset",
        109 => "context switch timeout",
        119 => "GSP firmware RPC timeout",
        120 => "GSP firmware error",
        121 => "C2C link error",
        140 => "unrecovered ECC error",
        143 => "GPU initialisation failure",
        154 => "the driver changed the GPU's required recovery action",
        _ => return None,
    })
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

/// Whether an SXid message marks the error fatal (`Fatal, Link ...`), as
/// opposed to `Non-fatal, ...`.
pub fn sxid_is_fatal(message: &str) -> bool {
    message
        .split(',')
        .next()
        .is_some_and(|w| w.trim().eq_ignore_ascii_case("fatal"))
}
