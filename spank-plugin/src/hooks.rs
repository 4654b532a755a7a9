//! The callbacks Slurm calls, and the plugin's state between them.
//!
//! Only the hooks the plugin needs are exported (no job_prolog/epilog:
//! slurmd then forks no `slurmstepd spank prolog` for this plugin). Every
//! hook catches panics and never returns an error from a callback whose
//! failure would drain a node (remote init, init_post_opt).

use std::os::raw::{c_char, c_int};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, PoisonError};

use slurm_spank::spank_sys as sys;

use crate::options::OptionValues;
use crate::spank::{self, Context, OptionSpec, Spank};
use crate::{local, remote};
use gpu_health_core::plugstack::{parse_args, PluginArgs};

/// Callbacks run one after another in one thread (a forked child for the
/// task callbacks), so the lock is never contended; it only makes the
/// state a safe static. A poisoned lock is used as is.
pub(crate) struct State {
    pub args: Option<PluginArgs>,
    pub options: OptionValues,
    pub remote: Option<remote::StepSetup>,
    /// Tasks of this step on this node that have exited (task_exit runs
    /// in slurmstepd itself, once per task).
    pub tasks_exited: u32,
}

static STATE: Mutex<State> = Mutex::new(State {
    args: None,
    options: OptionValues {
        gpu_health: None,
        tp_size: None,
        nccl_debug: None,
    },
    remote: None,
    tasks_exited: 0,
});

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut guard = STATE.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut guard)
}

const VAL_GPU_HEALTH: c_int = 1;
const VAL_TP_SIZE: c_int = 2;
const VAL_NCCL_DEBUG: c_int = 3;

const OPTIONS: [OptionSpec; 3] = [
    OptionSpec {
        name: b"gpu-health\0",
        arginfo: Some(b"off|warn|strict\0"),
        usage: b"GPU health policy of the job: warn (default: print warnings), strict (refuse steps on GPUs with warnings), off\0",
        has_arg: 1,
        val: VAL_GPU_HEALTH,
    },
    OptionSpec {
        name: b"tp-size\0",
        arginfo: Some(b"N\0"),
        usage: b"tensor-parallel group size: check that each group of N consecutive ranks shares a node and NVLink\0",
        has_arg: 1,
        val: VAL_TP_SIZE,
    },
    OptionSpec {
        name: b"nccl-debug\0",
        arginfo: Some(b"LEVEL\0"),
        usage: b"set NCCL_DEBUG (default INFO) and a per-rank NCCL_DEBUG_FILE in the working directory\0",
        has_arg: 2,
        val: VAL_NCCL_DEBUG,
    },
];

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

/// The plugstack.conf arguments, parsed once per process.
pub(crate) fn args(argc: c_int, argv: *mut *mut c_char) -> PluginArgs {
    if let Some(a) = with_state(|s| s.args.clone()) {
        return a;
    }
    // SAFETY: Slurm passes argc valid strings.
    let words = unsafe { spank::plugin_argv(argc, argv) };
    let (parsed, problems) = parse_args(&words);
    for p in &problems {
        spank::error(&format!("gpu_health: {p}"));
    }
    with_state(|s| s.args = Some(parsed.clone()));
    parsed
}

extern "C" fn option_cb(val: c_int, optarg: *const c_char, _remote: c_int) -> c_int {
    guarded("option", 0, || {
        let value = (!optarg.is_null()).then(|| {
            // SAFETY: Slurm passes a NUL-terminated argument or NULL.
            unsafe { std::ffi::CStr::from_ptr(optarg) }
                .to_string_lossy()
                .into_owned()
        });
        with_state(|s| match val {
            VAL_GPU_HEALTH => s.options.gpu_health = value,
            VAL_TP_SIZE => s.options.tp_size = value,
            VAL_NCCL_DEBUG => s.options.nccl_debug = Some(value),
            _ => {}
        });
        // Values are judged in init_post_opt, where an error refuses the
        // submission (and is ignored remotely) instead of failing here.
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
        let _ = args(argc, argv);
        if matches!(ctx, Context::Local | Context::Remote | Context::Allocator) {
            let spank = Spank::new(sp);
            for spec in &OPTIONS {
                if let Err(e) = spank.register_option(spec, Some(option_cb)) {
                    spank::error(&format!(
                        "gpu_health: cannot register --{}: {e}",
                        String::from_utf8_lossy(spec.name.strip_suffix(b"\0").unwrap_or(spec.name))
                    ));
                }
            }
        }
        if ctx == Context::Remote && std::env::var_os(TEST_FAIL_INIT).is_some_and(|v| v == "1") {
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
    let ctx = spank::context();
    guarded("init_post_opt", 0, || {
        let args = args(argc, argv);
        let values = with_state(|s| s.options.clone());
        match ctx {
            Context::Local | Context::Allocator => local::check_submission(&values, &args),
            Context::Remote => {
                let setup = remote::setup_step(&Spank::new(sp), &values, &args);
                with_state(|s| s.remote = Some(setup));
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
        let args = args(argc, argv);
        let values = with_state(|s| s.options.clone());
        local::check_layout(&Spank::new(sp), &values, &args)
    })
}

#[no_mangle]
pub extern "C" fn slurm_spank_task_init_privileged(
    sp: sys::spank_t,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded("task_init_privileged", 0, || {
        match with_state(|s| s.remote.clone()) {
            Some(setup) => remote::check_task(&Spank::new(sp), &setup),
            None => 0,
        }
    })
}

/// Once per task, in slurmstepd after the task has exited. The node's last
/// task ends the step here: its messages still reach the step's output.
#[no_mangle]
pub extern "C" fn slurm_spank_task_exit(
    sp: sys::spank_t,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    guarded("task_exit", 0, || {
        let spank = Spank::new(sp);
        let exited = with_state(|s| {
            s.tasks_exited = s.tasks_exited.saturating_add(1);
            s.tasks_exited
        });
        if exited != spank.local_task_count().unwrap_or(1) {
            return 0;
        }
        if let Some(setup) = with_state(|s| s.remote.clone()) {
            remote::end_step(&spank, &setup);
        }
        0
    })
}
