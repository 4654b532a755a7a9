//! What a GPU is doing now (utilisation, running processes, clocks, modes),
//! through nvml-wrapper, and the two-call protocol of the process list
//! through the raw C symbols, as pynvml calls them.

mod common;

use std::os::raw::{c_uint, c_void};

use common::raw::RawLib;
use common::SimNode;
use nvml_wrapper::enum_wrappers::device::{Clock, PerformanceState};
use nvml_wrapper::error::NvmlError;
use serde_json::json;

const MIB: u64 = 1 << 20;

fn busy_node() -> SimNode {
    SimNode::with_json(&json!({
        "count": 2,
        "gpus": [{
            "utilization": { "gpu_pct": 97, "memory_pct": 41, "encoder_pct": 0, "decoder_pct": 3 },
            "running_processes": [
                { "pid": 4242, "used_memory_mib": 70000, "sm_pct": 90 },
                { "pid": 4243, "used_memory_mib": 512 }
            ],
            "performance_state": 2,
            "mig_mode": { "current": 1, "pending": 0 }
        }, {
            "mig_mode": null
        }]
    }))
}

#[test]
fn utilisation_processes_clocks_and_modes() {
    let node = busy_node();
    let nvml = node.nvml();
    let d0 = nvml.device_by_index(0).unwrap();
    let u = d0.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (97, 41));
    assert_eq!(d0.decoder_utilization().unwrap().utilization, 3);
    let procs = d0.running_compute_processes().unwrap();
    let got: Vec<(u32, String)> = procs
        .iter()
        .map(|p| (p.pid, format!("{:?}", p.used_gpu_memory)))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                4242,
                format!(
                    "{:?}",
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(70000 * MIB)
                )
            ),
            (
                4243,
                format!(
                    "{:?}",
                    nvml_wrapper::enums::device::UsedGpuMemory::Used(512 * MIB)
                )
            ),
        ]
    );
    assert!(d0.running_graphics_processes().unwrap().is_empty());
    assert_eq!(d0.clock_info(Clock::SM).unwrap(), 1980);
    assert_eq!(d0.max_clock_info(Clock::Memory).unwrap(), 2619);
    assert_eq!(d0.performance_state().unwrap(), PerformanceState::Two);
    let cc = d0.cuda_compute_capability().unwrap();
    assert_eq!((cc.major, cc.minor), (9, 0));
    let mig = d0.mig_mode().unwrap();
    assert_eq!((mig.current, mig.pending), (1, 0));
    let d1 = nvml.device_by_index(1).unwrap();
    assert!(d1.running_compute_processes().unwrap().is_empty());
    assert!(matches!(d1.mig_mode(), Err(NvmlError::NotSupported)));
}

type ListFn = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut u8) -> c_uint;

#[test]
fn process_list_two_call_protocol() {
    let node = busy_node();
    let raw = RawLib::open(&node.library());
    let init: unsafe extern "C" fn() -> c_uint = raw.function("nvmlInit_v2");
    let handle: unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_uint =
        raw.function("nvmlDeviceGetHandleByIndex_v2");
    let list: ListFn = raw.function("nvmlDeviceGetComputeRunningProcesses_v3");
    // SAFETY: nvml.h's signatures; every pointer is valid for the call.
    unsafe {
        assert_eq!(init(), 0);
        let mut dev = std::ptr::null_mut();
        assert_eq!(handle(0, &mut dev), 0);
        // Count query: INSUFFICIENT_SIZE (7) with the count needed.
        let mut count: c_uint = 0;
        assert_eq!(list(dev, &mut count, std::ptr::null_mut()), 7);
        assert_eq!(count, 2);
        // Room for 9 (pynvml oversizes): SUCCESS and the count written.
        let mut buf = vec![0u8; 24 * 9];
        count = 9;
        assert_eq!(list(dev, &mut count, buf.as_mut_ptr()), 0);
        assert_eq!(count, 2);
        let pid = u32::from_ne_bytes(buf[24..28].try_into().unwrap());
        let mem = u64::from_ne_bytes(buf[32..40].try_into().unwrap());
        let gi = u32::from_ne_bytes(buf[40..44].try_into().unwrap());
        assert_eq!((pid, mem, gi), (4243, 512 * MIB, u32::MAX));
        // Too little room: INSUFFICIENT_SIZE and the count needed.
        count = 1;
        assert_eq!(list(dev, &mut count, buf.as_mut_ptr()), 7);
        assert_eq!(count, 2);
        // No processes: SUCCESS with count 0.
        let mut other = std::ptr::null_mut();
        assert_eq!(handle(1, &mut other), 0);
        count = 0;
        assert_eq!(list(other, &mut count, std::ptr::null_mut()), 0);
        assert_eq!(count, 0);
    }
}
