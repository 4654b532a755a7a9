//! Thin, panic-free wrapper over Slurm's spank.h (bindings of the
//! slurm-spank crate).
//!
//! Why not the crate's `SPANK_PLUGIN!` macro: it exports every hook (so
//! slurmd forks `slurmstepd spank prolog/epilog` for every job even though
//! this plugin has nothing to do there), its option type cannot express an
//! optional argument (`--nccl-debug[=LEVEL]`), and a panic poisons its
//! global mutexes for the rest of the process. Only functions present in
//! Slurm 22.05 are referenced here (the cdylib binds every symbol at load).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

use slurm_spank::spank_sys as sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Local,
    Remote,
    Allocator,
    Slurmd,
    JobScript,
    Unknown,
}

pub fn context() -> Context {
    // SAFETY: spank_context takes no arguments and only reads Slurm state.
    match unsafe { sys::spank_context() } {
        sys::spank_context_S_CTX_LOCAL => Context::Local,
        sys::spank_context_S_CTX_REMOTE => Context::Remote,
        sys::spank_context_S_CTX_ALLOCATOR => Context::Allocator,
        sys::spank_context_S_CTX_SLURMD => Context::Slurmd,
        sys::spank_context_S_CTX_JOB_SCRIPT => Context::JobScript,
        _ => Context::Unknown,
    }
}

/// Outcome of setting a job environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetEnv {
    Set,
    /// The user already set it and overwrite was off: their value stays.
    KeptUsers,
    Failed(u32),
}

/// A user option of the plugin, as Slurm takes it.
pub struct OptionSpec {
    pub name: CString,
    pub arginfo: Option<CString>,
    pub usage: CString,
    /// 0 no argument, 1 required, 2 optional.
    pub has_arg: c_int,
    pub val: c_int,
}

/// The handle Slurm passes to one callback.
pub struct Spank(sys::spank_t);

impl Spank {
    pub fn new(handle: sys::spank_t) -> Self {
        Spank(handle)
    }

    pub fn register_option(
        &self,
        spec: &OptionSpec,
        cb: sys::spank_opt_cb_f,
    ) -> Result<(), String> {
        let mut opt = sys::spank_option {
            name: spec.name.as_ptr(),
            arginfo: spec
                .arginfo
                .as_ref()
                .map_or(std::ptr::null(), |a| a.as_ptr()),
            usage: spec.usage.as_ptr(),
            has_arg: spec.has_arg,
            val: spec.val,
            cb,
        };
        // SAFETY: every pointer is a NUL-terminated string that lives as
        // long as the process (the specs are built once, in a static);
        // Slurm copies the struct during the call.
        match unsafe { sys::spank_option_register(self.0, &mut opt) } {
            sys::ESPANK_SUCCESS => Ok(()),
            e => Err(strerror(e)),
        }
    }

    fn item_u32(&self, item: sys::spank_item_t) -> Option<u32> {
        let mut v: u32 = 0;
        // SAFETY: the items read here all take a `uint32_t *`.
        let rc = unsafe { sys::spank_get_item(self.0, item, &mut v as *mut u32) };
        (rc == sys::ESPANK_SUCCESS).then_some(v)
    }

    pub fn job_id(&self) -> Option<u32> {
        self.item_u32(sys::spank_item_S_JOB_ID)
    }

    pub fn step_id(&self) -> Option<u32> {
        self.item_u32(sys::spank_item_S_JOB_STEPID)
    }

    pub fn nnodes(&self) -> Option<u32> {
        self.item_u32(sys::spank_item_S_JOB_NNODES)
    }

    pub fn total_task_count(&self) -> Option<u32> {
        self.item_u32(sys::spank_item_S_JOB_TOTAL_TASK_COUNT)
    }

    pub fn local_task_count(&self) -> Option<u32> {
        self.item_u32(sys::spank_item_S_JOB_LOCAL_TASK_COUNT)
    }

    /// The local task id of the task being set up (task callbacks only).
    pub fn task_id(&self) -> Option<u32> {
        let mut v: c_int = -1;
        // SAFETY: S_TASK_ID takes an `int *`.
        let rc =
            unsafe { sys::spank_get_item(self.0, sys::spank_item_S_TASK_ID, &mut v as *mut c_int) };
        (rc == sys::ESPANK_SUCCESS)
            .then_some(v)
            .and_then(|v| u32::try_from(v).ok())
    }

    pub fn local_to_global(&self, local: u32) -> Option<u32> {
        let mut v: u32 = 0;
        // SAFETY: S_JOB_LOCAL_TO_GLOBAL_ID takes (uint32_t, uint32_t *).
        let rc = unsafe {
            sys::spank_get_item(
                self.0,
                sys::spank_item_S_JOB_LOCAL_TO_GLOBAL_ID,
                local,
                &mut v as *mut u32,
            )
        };
        (rc == sys::ESPANK_SUCCESS).then_some(v)
    }

    /// A variable of the job's environment (remote context).
    pub fn getenv(&self, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        let mut len = 1024usize;
        while len <= 1 << 20 {
            let mut buf = vec![0u8; len];
            let size = c_int::try_from(len).ok()?;
            // SAFETY: buf holds `len` bytes; Slurm NUL-terminates within it.
            let rc =
                unsafe { sys::spank_getenv(self.0, name.as_ptr(), buf.as_mut_ptr().cast(), size) };
            match rc {
                sys::ESPANK_SUCCESS => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    buf.truncate(end);
                    return String::from_utf8(buf).ok();
                }
                sys::slurm_err_t_ESPANK_NOSPACE => len *= 4,
                _ => return None,
            }
        }
        None
    }

    /// Set a variable in the job's environment (remote context).
    pub fn setenv(&self, name: &str, value: &str, overwrite: bool) -> SetEnv {
        let (Ok(n), Ok(v)) = (CString::new(name), CString::new(value)) else {
            return SetEnv::Failed(sys::slurm_err_t_ESPANK_BAD_ARG);
        };
        // SAFETY: both strings are NUL-terminated and outlive the call.
        match unsafe { sys::spank_setenv(self.0, n.as_ptr(), v.as_ptr(), c_int::from(overwrite)) } {
            sys::ESPANK_SUCCESS => SetEnv::Set,
            sys::slurm_err_t_ESPANK_ENV_EXISTS => SetEnv::KeptUsers,
            e => SetEnv::Failed(e),
        }
    }
}

impl Spank {
    /// Remove a variable from the job's environment (remote context).
    pub fn unsetenv(&self, name: &str) -> Result<(), u32> {
        let n = CString::new(name).map_err(|_| sys::slurm_err_t_ESPANK_BAD_ARG)?;
        // SAFETY: NUL-terminated, outlives the call.
        match unsafe { sys::spank_unsetenv(self.0, n.as_ptr()) } {
            sys::ESPANK_SUCCESS => Ok(()),
            e => Err(e),
        }
    }
}

/// Slurm's text for a SPANK error code.
pub fn strerror(code: u32) -> String {
    // SAFETY: spank_strerror returns a pointer to a static string.
    let p = unsafe { sys::spank_strerror(code) };
    if p.is_null() {
        return format!("SPANK error {code}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The plugstack.conf words Slurm passed to a callback.
///
/// # Safety
/// `argv` must hold `argc` valid NUL-terminated strings (or be null).
pub unsafe fn plugin_argv(argc: c_int, argv: *mut *mut c_char) -> Vec<String> {
    let Ok(n) = usize::try_from(argc) else {
        return Vec::new();
    };
    if argv.is_null() {
        return Vec::new();
    }
    (0..n)
        .filter_map(|i| {
            // SAFETY: i < argc, per the caller's contract.
            let p = unsafe { *argv.add(i) };
            // SAFETY: each non-null entry is a NUL-terminated string.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// An error: slurmd/slurmstepd log, and the terminal of srun/sbatch users.
pub fn error(msg: &str) {
    slurm_spank::spank_log(slurm_spank::LogLevel::Error, msg);
}

/// To slurmd's log only (not to the user's output).
pub fn info(msg: &str) {
    slurm_spank::spank_log(slurm_spank::LogLevel::Info, msg);
}

pub fn verbose(msg: &str) {
    slurm_spank::spank_log(slurm_spank::LogLevel::Verbose, msg);
}
