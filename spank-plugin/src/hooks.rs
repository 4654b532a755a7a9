//! The callbacks Slurm calls, each handing over to the file of its SPANK
//! context ([`context::local`], [`context::remote`]), which owns that
//! context's state.
//!
//! Only the hooks the plugin needs are exported (no job_prolog/epilog:
//! slurmd then forks no `slurmstepd spank prolog` for this plugin). Every
//! hook catches panics and never returns an error from a callback whose
//! failure would drain a node (remote init, init_post_opt). The process
//! environment is read here and only here; what lies below gets it as a
//! lookup function.

use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};

use slurm_spank::spank_sys as sys;

use crate::context::{self, local, remote};
use crate::spank::{self, Context, Spank};

/// Run a hook body; a panic is logged and becomes `on_panic`.
fn guarded(name: &str, on_panic: c_int, body: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(rc) => rc,
        Err(_) => {
            spank::error(&format!("gpu_health: internal error in {name}; ignored"));
            on_panic
        }
    }
}

/// The process's own environment (slurmstepd's: root's, inherited from
/// slurmd; srun's: the user's).
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

extern "C" fn option_cb(val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    guarded("option", 0, || {
        let value = (!optarg.is_null()).then(|| {
            // SAFETY: Slurm passes a NUL-terminated argument or NULL.
            unsafe { std::ffi::CStr::from_ptr(optarg) }
                .to_string_lossy()
                .into_owned()
        });
        context::take_option(val, value);
        0
    })
}

/// Set in slurmd's environment (root's, inherited by slurmstepd; never
/// the job's), makes `slurm_spank_init` fail in slurmstepd: how the
/// harness shows what this Slurm does with a failing init (docs/spank.md).
/// Nothing else ever makes init fail.
const TEST_FAIL_INIT: &str = "GPU_HEALTH_SPANK_TEST_FAIL_INIT";

#[no_mangle]
pub extern "C" fn slurm_spank_init(sp: sys::spank_t, argc: c_int, argv: *mut *mut c_char) -> c_int {
    guarded("init", 0, || {
        let ctx = spank::context();
        let _ = context::args(argc, argv);
        if matches!(ctx, Context::Local | Context::Remote | Context::Allocator) {
            context::register_options(&Spank::new(sp), Some(option_cb));
        }
        if ctx == Context::Remote && process_env(TEST_FAIL_INIT).is_some_and(|v| v == "1") {
            spank::error(&format!(
                "gpu-health: slurm_spank_init fails on purpose ({TEST_FAIL_INIT}=1 in slurmd's environment); failure mode: {}",
                crate::init_failure_mode_text()
            ));
            return -1;
        }
        0
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_init_post_opt(
    sp: sys::spank_t,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    guarded("init_post_opt", 0, || {
        let args = context::args(argc, argv);
        match spank::context() {
            Context::Local | Context::Allocator => local::init_post_opt(args),
            Context::Remote => {
                remote::init_post_opt(&Spank::new(sp), args, process_env);
                0
            }
            _ => 0,
        }
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_local_user_init(
    sp: sys::spank_t,
    argc: c_int,
    argv: *mut *mut c_char,
) -> c_int {
    guarded("local_user_init", 0, || {
        let args = context::args(argc, argv);
        local::local_user_init(&Spank::new(sp), args, process_env)
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_task_init_privileged(
    sp: sys::spank_t,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded("task_init_privileged", 0, || match spank::context() {
        Context::Remote => remote::task_init_privileged(&Spank::new(sp)),
        _ => 0,
    })
}

/// Never fails the step: since 25.05 a non-zero return here is an error.
#[no_mangle]
pub extern "C" fn slurm_spank_task_exit(
    sp: sys::spank_t,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded("task_exit", 0, || {
        if spank::context() == Context::Remote {
            remote::task_exit(&Spank::new(sp));
        }
        0
    })
}
