//! NVLink state and counters, and GPU-to-GPU topology.

use super::{apply_faults, enable_state, gpu_of, guard, on_device, put};
use crate::abi::{
    NvmlDevice, NvmlReturn, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED, NVML_NVLINK_ERROR_DL_CRC_DATA, NVML_NVLINK_ERROR_DL_CRC_FLIT,
    NVML_NVLINK_ERROR_DL_ECC_DATA, NVML_NVLINK_ERROR_DL_RECOVERY, NVML_NVLINK_ERROR_DL_REPLAY,
    NVML_NVLINK_MAX_LINKS, NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_CAPS_INDEX_UNKNOWN,
    NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, NVML_P2P_STATUS_NOT_SUPPORTED, NVML_P2P_STATUS_OK,
};
use crate::runtime;
use crate::scenario::{Gpu, Scenario};
use std::os::raw::{c_uint, c_ulonglong};

/// A link the GPU lacks: NOT_SUPPORTED (none at all, or beyond its count),
/// INVALID_ARGUMENT beyond nvml.h's maximum.
fn check_link(gpu: &Gpu, link: c_uint) -> Result<(), NvmlReturn> {
    if link >= NVML_NVLINK_MAX_LINKS {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    } else if link >= gpu.spec.nvlink.count {
        Err(NVML_ERROR_NOT_SUPPORTED)
    } else {
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    device: NvmlDevice,
    link: c_uint,
    is_active: *mut c_uint,
) -> NvmlReturn {
    on_device("nvmlDeviceGetNvLinkState", device, |_, g| {
        check_link(g, link)?;
        put(is_active, enable_state(g.link_active(link)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkErrorCounter(
    device: NvmlDevice,
    link: c_uint,
    counter: c_uint,
    value: *mut c_ulonglong,
) -> NvmlReturn {
    on_device("nvmlDeviceGetNvLinkErrorCounter", device, |_, g| {
        check_link(g, link)?;
        let errors = g.link_errors(link);
        let count = match counter {
            NVML_NVLINK_ERROR_DL_REPLAY => errors.replay,
            NVML_NVLINK_ERROR_DL_RECOVERY => errors.recovery,
            NVML_NVLINK_ERROR_DL_CRC_FLIT => errors.crc_flit,
            NVML_NVLINK_ERROR_DL_CRC_DATA => errors.crc_data,
            NVML_NVLINK_ERROR_DL_ECC_DATA => errors.ecc_data,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        put(value, count)
    })
}

/// Runs a query about two devices; faults of the first apply fully, a
/// lost second device also fails the call.
fn on_pair(
    call: &'static str,
    first: NvmlDevice,
    second: NvmlDevice,
    body: impl FnOnce(&Scenario, &Gpu, &Gpu) -> Result<(), NvmlReturn>,
) -> NvmlReturn {
    guard(|| {
        let scenario = runtime::current()?;
        let a = gpu_of(&scenario, first)?;
        let b = gpu_of(&scenario, second)?;
        apply_faults(&scenario, call, a)?;
        if b.is_lost() {
            return Err(NVML_ERROR_GPU_IS_LOST);
        }
        body(&scenario, a, b)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    device1: NvmlDevice,
    device2: NvmlDevice,
    path_info: *mut c_uint,
) -> NvmlReturn {
    on_pair(
        "nvmlDeviceGetTopologyCommonAncestor",
        device1,
        device2,
        |s, a, b| put(path_info, s.common_ancestor(a, b)),
    )
}

/// NVLink index: OK when the pair is NVLink-connected and both GPUs have
/// an active link. Other indices: OK over NVLink or within a NUMA node.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    device1: NvmlDevice,
    device2: NvmlDevice,
    p2p_index: c_uint,
    status: *mut c_uint,
) -> NvmlReturn {
    on_pair("nvmlDeviceGetP2PStatus", device1, device2, |s, a, b| {
        if p2p_index >= NVML_P2P_CAPS_INDEX_UNKNOWN || a.position == b.position {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let nvlinked = s.nvlinked(a, b) && a.any_link_active() && b.any_link_active();
        let answer = if p2p_index == NVML_P2P_CAPS_INDEX_NVLINK {
            if nvlinked {
                NVML_P2P_STATUS_OK
            } else {
                NVML_P2P_STATUS_NOT_SUPPORTED
            }
        } else if nvlinked || a.numa_node == b.numa_node {
            NVML_P2P_STATUS_OK
        } else {
            NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
        };
        put(status, answer)
    })
}
