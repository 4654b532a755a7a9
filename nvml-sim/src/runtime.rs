//! Process-wide state of the stand-in: the loaded scenario (reference
//! counted like NVML's own init), device handles, accounting mode changes
//! and the text nvmlErrorString gives for a failed init.

use crate::abi::{
    error_text, NvmlDevice, NvmlReturn, NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_UNKNOWN, NVML_SUCCESS,
};
use crate::scenario::{Scenario, ScenarioError, MAX_GPUS};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_void, CStr, CString, OsStr};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Environment variable naming the scenario file.
pub const SCENARIO_ENV: &str = "NVML_SIM_SCENARIO";
/// File looked for next to the loaded library when the variable is unset.
pub const SCENARIO_FILE_NAME: &str = "scenario.json";

struct State {
    init_count: u32,
    scenario: Option<Arc<Scenario>>,
    /// Accounting mode set through nvmlDeviceSetAccountingMode, by position.
    accounting: BTreeMap<u32, bool>,
    /// Code and explanation of the last failed nvmlInit.
    init_failure: Option<(NvmlReturn, &'static CStr)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    init_count: 0,
    scenario: None,
    accounting: BTreeMap::new(),
    init_failure: None,
});

fn state() -> MutexGuard<'static, State> {
    // A panic elsewhere (caught at the FFI boundary) must not disable the
    // library: the state stays consistent between statements.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// nvmlInit: loads the scenario on the first call of the process (or after
/// the last shutdown), counts nested calls.
pub fn init(call: &str) -> NvmlReturn {
    let (code, scenario) = {
        let mut st = state();
        if let Some(scenario) = st.scenario.clone() {
            st.init_count += 1;
            (NVML_SUCCESS, Some(scenario))
        } else {
            match load_scenario() {
                Err((code, why)) => {
                    // A closed or broken stderr must not turn into a panic.
                    let _ = writeln!(std::io::stderr(), "nvml-sim: {why}");
                    st.init_failure = Some((code, leak_message(code, &why)));
                    (code, None)
                }
                Ok(scenario) => match scenario.init_error {
                    Some(code) if code != NVML_SUCCESS => {
                        let why = format!("scenario sets init_error {code}");
                        st.init_failure = Some((code, leak_message(code, &why)));
                        (code, Some(Arc::new(scenario)))
                    }
                    _ => {
                        let mut scenario = scenario;
                        scenario.hide_gpus(|g| device_node_denied(g.minor_number));
                        let scenario = Arc::new(scenario);
                        st.scenario = Some(scenario.clone());
                        st.init_count = 1;
                        st.accounting.clear();
                        (NVML_SUCCESS, Some(scenario))
                    }
                },
            }
        }
    };
    if let Some(ms) = scenario.and_then(|s| s.hang_ms(call, None)) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    code
}

/// Whether a device cgroup keeps this process from `/dev/nvidia<minor>`.
/// The driver leaves such GPUs out of NVML's enumeration, which is what a
/// Slurm job (or a Prolog with PrologFlags=RunInJob) under
/// ConstrainDevices=yes sees. access(2) asks the device cgroup the same
/// question open(2) would, without opening the device. A missing node
/// (no fake device nodes) or any other error hides nothing.
fn device_node_denied(minor: u32) -> bool {
    let Ok(path) = CString::new(format!("/dev/nvidia{minor}")) else {
        return false;
    };
    // SAFETY: path is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::access(path.as_ptr(), libc::R_OK | libc::W_OK) };
    rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// nvmlShutdown.
pub fn shutdown() -> NvmlReturn {
    let mut st = state();
    if st.init_count == 0 {
        return NVML_ERROR_UNINITIALIZED;
    }
    st.init_count -= 1;
    if st.init_count == 0 {
        st.scenario = None;
        st.accounting.clear();
    }
    NVML_SUCCESS
}

/// The scenario of the current init, or UNINITIALIZED.
pub fn current() -> Result<Arc<Scenario>, NvmlReturn> {
    state().scenario.clone().ok_or(NVML_ERROR_UNINITIALIZED)
}

pub fn accounting_override(position: u32) -> Option<bool> {
    state().accounting.get(&position).copied()
}

pub fn set_accounting(position: u32, enabled: bool) {
    state().accounting.insert(position, enabled);
}

/// nvmlErrorString: the fixed text, or the reason of the last failed init.
pub fn error_string(code: NvmlReturn) -> &'static CStr {
    if let Some((failed, text)) = state().init_failure {
        if failed == code {
            return text;
        }
    }
    static TEXTS: OnceLock<Mutex<HashMap<NvmlReturn, &'static CStr>>> = OnceLock::new();
    let mut texts = TEXTS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    texts.entry(code).or_insert_with(|| leak(error_text(code)))
}

fn leak_message(code: NvmlReturn, why: &str) -> &'static CStr {
    leak(&format!("{} (nvml-sim: {why})", error_text(code)))
}

/// Strings handed to C callers must outlive every call; failed inits are
/// rare, so leaking their few bytes is the simple, safe choice.
fn leak(text: &str) -> &'static CStr {
    let clean: Vec<u8> = text.bytes().filter(|&b| b != 0).collect();
    let owned = CString::new(clean).unwrap_or_default();
    Box::leak(owned.into_boxed_c_str())
}

fn load_scenario() -> Result<Scenario, (NvmlReturn, String)> {
    let path = scenario_path().map_err(|why| (NVML_ERROR_DRIVER_NOT_LOADED, why))?;
    Scenario::load(&path).map_err(|err| match err {
        // Nothing usable at the path: the same answer as for a missing file.
        ScenarioError::Read { .. } | ScenarioError::NotRegularFile { .. } => (
            NVML_ERROR_DRIVER_NOT_LOADED,
            format!("no scenario ({SCENARIO_ENV} unset or empty uses <library dir>/{SCENARIO_FILE_NAME}): {err}"),
        ),
        ScenarioError::TooLarge { .. } | ScenarioError::Invalid { .. } => {
            (NVML_ERROR_UNKNOWN, err.to_string())
        }
    })
}

/// `$NVML_SIM_SCENARIO`, else `scenario.json` beside this library file
/// (Slurm runs prologs with a clean environment, so the file's location
/// must be enough).
pub fn scenario_path() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(SCENARIO_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let library = own_file().ok_or_else(|| {
        format!("{SCENARIO_ENV} is unset and dladdr cannot tell where nvml-sim was loaded from")
    })?;
    let dir = library.parent().map(PathBuf::from).unwrap_or_default();
    Ok(dir.join(SCENARIO_FILE_NAME))
}

/// Path of the object file this code was loaded from.
fn own_file() -> Option<PathBuf> {
    let anchor = own_file as fn() -> Option<PathBuf>;
    // SAFETY: dladdr only reads the address; Dl_info is plain data that it
    // fills; dli_fname, when set, points to a NUL-terminated string owned by
    // the dynamic loader for as long as the object stays loaded.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(anchor as *const c_void, &mut info) == 0 || info.dli_fname.is_null() {
            return None;
        }
        let name = CStr::from_ptr(info.dli_fname);
        Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
    }
}

/// Device handles are addresses of slots in this table; slot i is NVML
/// index i. Callers never dereference them.
static HANDLE_SLOTS: [u64; MAX_GPUS] = [0; MAX_GPUS];

pub fn handle_for(index: u32) -> NvmlDevice {
    let slot = HANDLE_SLOTS
        .get(index as usize)
        .map_or(std::ptr::null(), |s| s as *const u64);
    slot as NvmlDevice
}

pub fn index_of(handle: NvmlDevice) -> Option<u32> {
    let base = HANDLE_SLOTS.as_ptr() as usize;
    let offset = (handle as usize).checked_sub(base)?;
    let size = std::mem::size_of::<u64>();
    (offset % size == 0 && offset / size < MAX_GPUS).then_some((offset / size) as u32)
}
