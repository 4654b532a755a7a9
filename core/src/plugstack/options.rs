//! The one table of what the SPANK plugin takes: the admin's
//! plugstack.conf arguments (`key=value`) and the user's options
//! (`--gpu-health`, ...). The argument parser ([`super::parse_args`]),
//! the list of known keys in its messages, the options the plugin
//! registers with Slurm (name, argument, `srun --help` line) and the two
//! tables of docs/spank.md (checked by `core/tests/spank_docs.rs`) all
//! come from here, so that a key or option added, renamed or given a new
//! default is changed in one place.

use super::args::{self, PluginArgs};

/// What an entry is.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A `key=value` word of the plugin's plugstack.conf line.
    Argument {
        /// May be given more than once (each adds); otherwise a second
        /// one is reported and the last counts.
        repeatable: bool,
        /// Takes the value into the parsed arguments, or says why not.
        apply: fn(&mut PluginArgs, &str) -> Result<(), String>,
    },
    /// A `--name` option of srun, sbatch and salloc.
    UserOption {
        /// Whether `--name` alone (without `=VALUE`) is allowed.
        value_optional: bool,
    },
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Argument { repeatable, .. } => f
                .debug_struct("Argument")
                .field("repeatable", repeatable)
                .finish_non_exhaustive(),
            Kind::UserOption { value_optional } => f
                .debug_struct("UserOption")
                .field("value_optional", value_optional)
                .finish(),
        }
    }
}

/// One argument or option.
#[derive(Debug, Clone, Copy)]
pub struct PluginOption {
    /// The key (`default_mode`) or the option without its dashes
    /// (`gpu-health`).
    pub name: &'static str,
    pub kind: Kind,
    /// The value's placeholder, as `srun --help` shows it
    /// (`--gpu-health=off|warn|strict`); for an argument, only the docs'.
    pub arginfo: &'static str,
    /// The values allowed, in words (the docs' "values" column).
    pub values: &'static str,
    /// What is in force without it, in words (the docs' "default").
    pub default: &'static str,
    /// One line: `srun --help`'s for an option, the docs' "meaning".
    pub help: &'static str,
}

impl PluginOption {
    pub fn is_argument(&self) -> bool {
        matches!(self.kind, Kind::Argument { .. })
    }

    /// How a user writes the option: `--tp-size=N`, `--nccl-debug[=LEVEL]`;
    /// for an argument, `key=VALUE`.
    pub fn synopsis(&self) -> String {
        match self.kind {
            Kind::Argument { .. } => format!("{}={}", self.name, self.arginfo),
            Kind::UserOption {
                value_optional: false,
            } => format!("--{}={}", self.name, self.arginfo),
            Kind::UserOption {
                value_optional: true,
            } => format!("--{}[={}]", self.name, self.arginfo),
        }
    }

    /// Its row in docs/spank.md: `| name | values | default | meaning |`
    /// (a `|` inside a cell escaped, as Markdown tables need).
    pub fn docs_row(&self) -> String {
        let name = match self.kind {
            Kind::Argument { .. } => self.name.to_string(),
            Kind::UserOption { .. } => self.synopsis(),
        };
        let cells = [
            format!("`{name}`"),
            self.values.to_string(),
            self.default.to_string(),
            self.help.to_string(),
        ];
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        format!("| {} |", cells.join(" | "))
    }
}

/// Every argument and option, arguments in the order the messages list
/// them.
pub const PLUGIN_OPTIONS: &[PluginOption] = &[
    PluginOption {
        name: "default_mode",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_default_mode,
        },
        arginfo: "MODE",
        values: "`off`, `warn`, `strict`",
        default: "`warn`",
        help: "mode of jobs without `--gpu-health`",
    },
    PluginOption {
        name: "allow_off",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_allow_off,
        },
        arginfo: "yes|no",
        values: "`yes`, `no`",
        default: "`yes`",
        help: "may users choose `--gpu-health=off`?",
    },
    PluginOption {
        name: "sysfs_root",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_sysfs_root,
        },
        arginfo: "PATH",
        values: "absolute path",
        default: "config's `sysfs_root` (`/sys`)",
        help: "where the RDMA fabric is read (tests)",
    },
    PluginOption {
        name: "config",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_config,
        },
        arginfo: "PATH",
        values: "absolute path",
        default: "`$GPU_HEALTH_CONFIG`, else beside `$SLURM_CONF`, else `/etc/slurm/gpu-health.toml`",
        help: "gpu-health configuration (plus the node's `gpu-health.d/<node>.toml`)",
    },
    PluginOption {
        name: "nccl_ib_timeout",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_nccl_ib_timeout,
        },
        arginfo: "N",
        values: "1..31",
        default: "22",
        help: "`NCCL_IB_TIMEOUT` on IB and RoCE",
    },
    PluginOption {
        name: "nccl_ib_tc",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_nccl_ib_tc,
        },
        arginfo: "N",
        values: "0..255",
        default: "unset",
        help: "`NCCL_IB_TC` on IB and RoCE",
    },
    PluginOption {
        name: "nccl_ib_sl",
        kind: Kind::Argument {
            repeatable: false,
            apply: args::set_nccl_ib_sl,
        },
        arginfo: "N",
        values: "0..15",
        default: "unset",
        help: "`NCCL_IB_SL` on IB and RoCE",
    },
    PluginOption {
        name: "nccl_set",
        kind: Kind::Argument {
            repeatable: true,
            apply: args::add_nccl_set,
        },
        arginfo: "NAME=VALUE",
        values: "`NAME=VALUE`",
        default: "none",
        help: "set NAME on every fabric (repeatable; e.g. `nccl_set=NCCL_NET_GDR_LEVEL=PHB`, `nccl_set=FI_EFA_USE_DEVICE_RDMA=1`); wins over a derived value",
    },
    PluginOption {
        name: "nccl_force",
        kind: Kind::Argument {
            repeatable: true,
            apply: args::add_nccl_force,
        },
        arginfo: "NAME[,NAME...]",
        values: "`NAME[,NAME...]`",
        default: "none",
        help: "overwrite these even when the user set them (repeatable)",
    },
    PluginOption {
        name: "gpu-health",
        kind: Kind::UserOption {
            value_optional: false,
        },
        arginfo: "off|warn|strict",
        values: "`off`, `warn`, `strict`",
        default: "`default_mode`",
        help: "GPU health policy of the job: warn (default: print warnings), strict (refuse steps on GPUs with warnings), off",
    },
    PluginOption {
        name: "tp-size",
        kind: Kind::UserOption {
            value_optional: false,
        },
        arginfo: "N",
        values: "1..64",
        default: "unset (no check)",
        help: "tensor-parallel group size: check that each group of N consecutive ranks shares a node and NVLink",
    },
    PluginOption {
        name: "nccl-debug",
        kind: Kind::UserOption {
            value_optional: true,
        },
        arginfo: "LEVEL",
        values: "`VERSION`, `WARN`, `INFO`, `ABORT`, `TRACE` (any case)",
        default: "unset; `INFO` when given without a level",
        help: "set NCCL_DEBUG (default INFO) and a per-rank NCCL_DEBUG_FILE in the working directory",
    },
];

/// The plugstack.conf arguments, in table order.
pub fn arguments() -> impl Iterator<Item = &'static PluginOption> {
    PLUGIN_OPTIONS.iter().filter(|o| o.is_argument())
}

/// The user's options, in table order.
pub fn user_options() -> impl Iterator<Item = &'static PluginOption> {
    PLUGIN_OPTIONS.iter().filter(|o| !o.is_argument())
}

/// The argument named `key`.
pub fn argument(key: &str) -> Option<&'static PluginOption> {
    arguments().find(|o| o.name == key)
}

/// `default_mode, allow_off, ...`: the keys for a message.
pub fn known_keys() -> String {
    arguments().map(|o| o.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        for (i, a) in PLUGIN_OPTIONS.iter().enumerate() {
            assert!(
                PLUGIN_OPTIONS[i + 1..].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
            let allowed = |c: char| {
                c.is_ascii_lowercase() || if a.is_argument() { c == '_' } else { c == '-' }
            };
            assert!(a.name.chars().all(allowed), "{}", a.name);
            // They become C strings for Slurm.
            for text in [a.name, a.arginfo, a.help] {
                assert!(!text.is_empty() && !text.contains('\0'), "{}", a.name);
            }
        }
    }

    /// The keys the messages list, as before the table.
    #[test]
    fn known_keys_in_their_order() {
        assert_eq!(
            known_keys(),
            "default_mode, allow_off, sysfs_root, config, nccl_ib_timeout, nccl_ib_tc, nccl_ib_sl, nccl_set, nccl_force"
        );
        let options: Vec<String> = user_options().map(PluginOption::synopsis).collect();
        assert_eq!(
            options,
            [
                "--gpu-health=off|warn|strict",
                "--tp-size=N",
                "--nccl-debug[=LEVEL]"
            ]
        );
    }

    #[test]
    fn docs_rows_escape_pipes() {
        let row = user_options().next().map(PluginOption::docs_row);
        assert_eq!(
            row.as_deref(),
            Some(
                "| `--gpu-health=off\\|warn\\|strict` | `off`, `warn`, `strict` | `default_mode` | \
                 GPU health policy of the job: warn (default: print warnings), strict (refuse steps \
                 on GPUs with warnings), off |"
            )
        );
    }
}
