//! Submission side: sbatch/salloc (allocator) and srun (local).
//!
//! Errors here refuse the submission before anything reaches slurmctld,
//! which is the point: a bad value or an impossible layout is the user's
//! to fix, with the message saying how. This context keeps no state of
//! its own: each callback judges the option values and arguments shared
//! by every context (`super`).

use std::os::raw::c_int;

use gpu_health_core::topology::check_step_layout;
use gpu_health_core::verdict::Mode;

use crate::options::{gpus_per_node, validate};
use crate::spank::{self, Spank};
use gpu_health_core::plugstack::PluginArgs;

/// init_post_opt in sbatch/salloc/srun: refuse bad option values.
pub fn init_post_opt(args: &PluginArgs) -> c_int {
    match validate(&super::option_values(), args) {
        Ok(_) => 0,
        Err(message) => {
            spank::error(&format!("gpu-health: {message}"));
            -1
        }
    }
}

/// local_user_init in srun: refuse (strict) or warn about a task layout
/// that splits tensor-parallel groups across nodes. `env` is srun's
/// environment.
pub fn local_user_init(
    spank: &Spank,
    args: &PluginArgs,
    env: impl Fn(&str) -> Option<String>,
) -> c_int {
    let Ok(opts) = validate(&super::option_values(), args) else {
        // Already refused in init_post_opt.
        return -1;
    };
    let Some(tp) = opts.tp_size else { return 0 };
    if opts.mode == Mode::Off {
        return 0;
    }
    let (Some(total), Some(nnodes)) = (spank.total_task_count(), spank.nnodes()) else {
        spank::verbose("gpu-health: task and node counts unknown; TP layout checked on the nodes");
        return 0;
    };
    let gpus = gpus_per_node(env);
    match check_step_layout(total, nnodes, tp, gpus) {
        Ok(()) => 0,
        Err(message) if opts.mode == Mode::Strict => {
            spank::error(&format!(
                "gpu-health: {message} (strict mode refuses this step; --gpu-health=warn runs it anyway)"
            ));
            -1
        }
        Err(message) => {
            spank::error(&format!("gpu-health: warning: {message}"));
            0
        }
    }
}
