//! The exported NVML functions. Every one runs its body through [`guard`]
//! so that no panic crosses the C boundary, checks its pointers, and
//! answers with nvml.h's return codes. Each one is also named in
//! [`crate::exports::EXPORTED_FUNCTIONS`]; a unit test there checks the
//! list against the `#[no_mangle]` functions.
//!
//! The functions are `unsafe extern "C"` with nvml.h's signatures; their
//! safety contract is nvml.h's (valid, writable out-pointers of the
//! documented types), so the per-function `# Safety` sections are omitted.
#![allow(clippy::missing_safety_doc)]

mod accounting;
mod activity;
mod device;
mod health;
mod links;
mod system;

use crate::abi::{
    NvmlDevice, NvmlReturn, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_UNKNOWN, NVML_SUCCESS,
};
use crate::runtime;
use crate::scenario::{Gpu, Scenario};
use std::os::raw::{c_char, c_uint};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type CallResult = Result<(), NvmlReturn>;

/// Runs an exported function's body; a panic becomes NVML_ERROR_UNKNOWN.
pub(crate) fn guard(body: impl FnOnce() -> CallResult) -> NvmlReturn {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

/// Runs a query on one device: resolves the handle, then applies the
/// scenario's faults (hang, lost GPU, unsupported call) before `body`.
pub(crate) fn on_device(
    call: &'static str,
    device: NvmlDevice,
    body: impl FnOnce(&Scenario, &Gpu) -> CallResult,
) -> NvmlReturn {
    guard(|| {
        let scenario = runtime::current()?;
        let gpu = gpu_of(&scenario, device)?;
        apply_faults(&scenario, call, gpu)?;
        body(&scenario, gpu)
    })
}

pub(crate) fn gpu_of(scenario: &Scenario, device: NvmlDevice) -> Result<&Gpu, NvmlReturn> {
    runtime::index_of(device)
        .and_then(|index| scenario.visible_gpu(index))
        .ok_or(NVML_ERROR_INVALID_ARGUMENT)
}

pub(crate) fn apply_faults(scenario: &Scenario, call: &str, gpu: &Gpu) -> CallResult {
    hang(scenario, call, Some(gpu.position));
    if gpu.is_lost() {
        return Err(NVML_ERROR_GPU_IS_LOST);
    }
    if gpu.spec.not_supported.iter().any(|c| c == call) {
        return Err(NVML_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

pub(crate) fn hang(scenario: &Scenario, call: &str, position: Option<u32>) {
    if let Some(ms) = scenario.hang_ms(call, position) {
        std::thread::sleep(Duration::from_millis(ms));
    }
}

/// Stores `value` through a caller's out-pointer.
pub(crate) fn put<T>(out: *mut T, value: T) -> CallResult {
    if out.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, and nvml.h requires out-pointers to point to
    // writable storage of the declared type.
    unsafe { out.write(value) };
    Ok(())
}

/// Copies `text` with its NUL into a caller's buffer of `length` bytes.
pub(crate) fn put_str(buffer: *mut c_char, length: c_uint, text: &str) -> CallResult {
    if buffer.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller gave `length` writable bytes and we write
    // bytes.len() + 1 <= length of them.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len());
        *buffer.add(bytes.len()) = 0;
    }
    Ok(())
}

/// Copies `text` into a fixed C char array, truncating, NUL-terminated.
pub(crate) fn fill_chars(target: &mut [c_char], text: &str) {
    let n = text.len().min(target.len().saturating_sub(1));
    for (dst, src) in target.iter_mut().zip(text.bytes().take(n)) {
        *dst = src as c_char;
    }
    if let Some(end) = target.get_mut(n) {
        *end = 0;
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub(crate) fn enable_state(on: bool) -> c_uint {
    if on {
        crate::abi::NVML_FEATURE_ENABLED
    } else {
        crate::abi::NVML_FEATURE_DISABLED
    }
}
