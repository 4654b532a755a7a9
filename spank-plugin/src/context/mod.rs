//! The plugin's SPANK contexts, one file each owning that context's state
//! (as NVIDIA's pyxis does): [`local`] (srun, sbatch, salloc: validate and
//! refuse) and [`remote`] (slurmstepd: the job's environment and the step
//! checks). What every context shares lives here: the plugstack.conf
//! arguments, parsed once per process, the values Slurm gave the user's
//! options, and the registration of those options from the one table in
//! `gpu_health_core::plugstack::options`.
//!
//! Callbacks run one after another in one thread (a forked child for the
//! task callbacks), so no lock here is ever contended; the locks only make
//! the state safe statics. A poisoned lock is used as is.

pub mod local;
pub mod remote;

use std::ffi::CString;
use std::os::raw::{c_char, c_int};
use std::sync::{Mutex, OnceLock, PoisonError};

use gpu_health_core::plugstack::options::{user_options, Kind};
use gpu_health_core::plugstack::{parse_args, PluginArgs};
use slurm_spank::spank_sys as sys;

use crate::options::{user_option_name, OptionValues};
use crate::spank::{self, OptionSpec, Spank};

static ARGS: OnceLock<PluginArgs> = OnceLock::new();

static VALUES: Mutex<OptionValues> = Mutex::new(OptionValues {
    gpu_health: None,
    tp_size: None,
    nccl_debug: None,
});

/// The user options as Slurm takes them (NUL-terminated strings), built
/// once from the table; `val` is the option's place in the table's user
/// options, from 1.
static SPECS: OnceLock<Vec<OptionSpec>> = OnceLock::new();

/// The plugstack.conf arguments, parsed (and their problems reported)
/// once per process.
pub fn args(argc: c_int, argv: *mut *mut c_char) -> &'static PluginArgs {
    ARGS.get_or_init(|| {
        // SAFETY: Slurm passes argc valid strings.
        let words = unsafe { spank::plugin_argv(argc, argv) };
        let (parsed, problems) = parse_args(&words);
        for p in &problems {
            spank::error(&format!("gpu_health: {p}"));
        }
        parsed
    })
}

/// The option values Slurm has handed over so far.
pub fn option_values() -> OptionValues {
    VALUES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Register the user options with Slurm; a failure is logged, the others
/// are still registered.
pub fn register_options(spank: &Spank, cb: sys::spank_opt_cb_f) {
    for spec in SPECS.get_or_init(option_specs) {
        if let Err(e) = spank.register_option(spec, cb) {
            spank::error(&format!(
                "gpu_health: cannot register --{}: {e}",
                spec.name.to_string_lossy()
            ));
        }
    }
}

/// What Slurm's option callback gives: option `val` (as registered) with
/// its argument. Values are judged in init_post_opt, where an error
/// refuses the submission (and is ignored remotely) instead of failing
/// here.
pub fn take_option(val: c_int, value: Option<String>) {
    let Some(name) = user_option_name(val) else {
        return;
    };
    let mut values = VALUES.lock().unwrap_or_else(PoisonError::into_inner);
    if !values.set(name, value) {
        spank::verbose(&format!("gpu_health: option --{name} not handled"));
    }
}

fn option_specs() -> Vec<OptionSpec> {
    user_options()
        .zip(1..)
        .filter_map(|(o, val)| {
            let Kind::UserOption { value_optional } = o.kind else {
                return None;
            };
            let cstr = |s: &str| CString::new(s).ok();
            Some(OptionSpec {
                name: cstr(o.name)?,
                arginfo: cstr(o.arginfo),
                usage: cstr(o.help)?,
                has_arg: if value_optional { 2 } else { 1 },
                val,
            })
        })
        .collect()
}
